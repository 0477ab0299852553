//! qmgr's figures in the Prometheus text exposition format: a rendering
//! of the queue manager's summary (the counters are `figures`'), made
//! when someone scrapes `metrics_listen` or asks `sluice status`.

use ipc::queuectl::{Summary, CLASSES};

/// Escapes a Prometheus label value.
fn label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The summary in the Prometheus text exposition format, version 0.0.4.
pub fn prometheus(s: &Summary) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, u64)>| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, v) in samples {
            if labels.is_empty() {
                out.push_str(&format!("{name} {v}\n"));
            } else {
                out.push_str(&format!("{name}{{{labels}}} {v}\n"));
            }
        }
    };
    family(
        "sluice_queue_messages",
        "gauge",
        "Messages in the queue by state.",
        [
            ("incoming", s.incoming),
            ("active", s.active),
            ("deferred", s.deferred),
            ("hold", s.hold),
        ]
        .iter()
        .map(|(st, n)| (format!("state=\"{st}\""), *n))
        .collect(),
    );
    family(
        "sluice_active_recipients",
        "gauge",
        "Recipients of active messages in the scheduler's memory.",
        vec![(String::new(), s.active_recipients)],
    );
    family(
        "sluice_deliveries_total",
        "counter",
        "Recipient delivery results since qmgr started.",
        [
            ("sent", s.sent.total),
            ("deferred", s.deferrals.total),
            ("bounced", s.bounced.total),
        ]
        .iter()
        .map(|(st, n)| (format!("status=\"{st}\""), *n))
        .collect(),
    );
    let per_class = |f: fn(&ipc::queuectl::TransportSummary) -> [u64; 3]| {
        s.transports
            .iter()
            .flat_map(|t| {
                CLASSES.iter().enumerate().map(move |(i, c)| {
                    (
                        format!("transport=\"{}\",class=\"{c}\"", label(&t.name)),
                        f(t)[i],
                    )
                })
            })
            .collect::<Vec<_>>()
    };
    family(
        "sluice_class_queued",
        "gauge",
        "Entries waiting in the active queue by transport and scheduling class.",
        per_class(|t| t.queued),
    );
    family(
        "sluice_class_inflight",
        "gauge",
        "Entries on connections by transport and scheduling class.",
        per_class(|t| t.inflight),
    );
    family(
        "sluice_transport_connections",
        "gauge",
        "Connections open or opening by transport.",
        s.transports
            .iter()
            .map(|t| {
                (
                    format!("transport=\"{}\"", label(&t.name)),
                    u64::from(t.connections),
                )
            })
            .collect(),
    );
    let dest = |f: fn(&ipc::queuectl::DestSummary) -> u64| {
        s.destinations
            .iter()
            .map(|d| {
                (
                    format!(
                        "transport=\"{}\",destination=\"{}\"",
                        label(&d.transport),
                        label(&d.destination)
                    ),
                    f(d),
                )
            })
            .collect::<Vec<_>>()
    };
    family(
        "sluice_destination_queued",
        "gauge",
        "Entries in the active queue for the busiest destinations.",
        dest(|d| d.queued),
    );
    family(
        "sluice_destination_deferred",
        "gauge",
        "Messages deferred for the busiest destinations, waiting for their retry.",
        dest(|d| d.deferred),
    );
    family(
        "sluice_destination_concurrency_window",
        "gauge",
        "Concurrency window of the busiest destinations.",
        dest(|d| u64::from(d.window)),
    );
    family(
        "sluice_destination_inflight",
        "gauge",
        "Entries on connections to the busiest destinations.",
        dest(|d| d.inflight),
    );
    family(
        "sluice_destination_busy",
        "gauge",
        "Connections open or opening to the busiest destinations.",
        dest(|d| u64::from(d.busy)),
    );
    family(
        "sluice_destination_dead",
        "gauge",
        "1 when a busiest destination is dead (not tried until its retry time).",
        dest(|d| u64::from(d.dead)),
    );
    family(
        "sluice_destination_sent_total",
        "counter",
        "Recipients delivered to the busiest destinations since qmgr started.",
        dest(|d| d.sent.total),
    );
    let key = |f: fn(&ipc::queuectl::KeyView) -> Option<u64>| {
        s.policy_keys
            .iter()
            .filter_map(|k| Some((format!("key=\"{}\"", label(&k.key)), f(k)?)))
            .collect::<Vec<_>>()
    };
    family(
        "sluice_policy_connections",
        "gauge",
        "Connections open per shaping policy key (the busiest keys).",
        key(|k| Some(u64::from(k.connections))),
    );
    family(
        "sluice_policy_concurrency_limit",
        "gauge",
        "Concurrency a policy key is allowed now (0 while suspended).",
        key(|k| k.concurrency_now.map(u64::from)),
    );
    family(
        "sluice_policy_messages_total",
        "counter",
        "Messages started per shaping policy key since it was first seen.",
        key(|k| Some(k.transactions)),
    );
    family(
        "sluice_policy_held",
        "gauge",
        "1 for each suspension or back-off in force, by its key and action.",
        s.holds
            .iter()
            .map(|h| {
                (
                    format!(
                        "key=\"{}\",action=\"{}\",origin=\"{}\"",
                        label(&h.when),
                        label(&h.action),
                        label(&h.origin)
                    ),
                    1,
                )
            })
            .collect(),
    );
    family(
        "sluice_proxy_failures_total",
        "counter",
        "Connections an egress proxy (smtp_proxy) refused or let time out, by transport and proxy.",
        s.proxies
            .iter()
            .map(|p| {
                (
                    format!(
                        "transport=\"{}\",proxy=\"{}\"",
                        label(&p.transport),
                        label(&p.proxy)
                    ),
                    p.failures,
                )
            })
            .collect(),
    );
    if let Some(c) = &s.cluster {
        let who = format!("coordinator=\"{}\"", label(&c.coordinator));
        family(
            "sluice_cluster_degraded",
            "gauge",
            "1 while clusterd is out of reach and limits are divided by the last known count.",
            vec![(who.clone(), u64::from(c.state != "linked"))],
        );
        family(
            "sluice_cluster_instances",
            "gauge",
            "Instances connected to clusterd, as last announced.",
            vec![(who.clone(), u64::from(c.instances))],
        );
        family(
            "sluice_cluster_link_losses_total",
            "counter",
            "Times the link to clusterd was lost.",
            vec![(who, c.losses)],
        );
    }
    family(
        "sluice_policy_local_concurrency",
        "gauge",
        "This instance's share of a concurrency granted cluster-wide by clusterd.",
        key(|k| k.local_concurrency.map(u64::from)),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::queuectl::Counter;

    #[test]
    fn prometheus_text_escapes_and_types() {
        let s = Summary {
            now: 0,
            messages: 3,
            incoming: 0,
            active: 1,
            deferred: 2,
            hold: 0,
            active_recipients: 1,
            sent: Counter {
                total: 7,
                ..Counter::default()
            },
            deferrals: Counter::default(),
            bounced: Counter::default(),
            transports: vec![ipc::queuectl::TransportSummary {
                name: "smtp".into(),
                queued: [1, 0, 0],
                inflight: [0, 0, 0],
                connections: 0,
                destinations: 1,
                dead: 1,
            }],
            destinations: vec![ipc::queuectl::DestSummary {
                transport: "smtp".into(),
                destination: "[a\"b]:25".into(),
                queued: 1,
                inflight: 0,
                deferred: 2,
                window: 0,
                busy: 0,
                dead: true,
                retry_at: Some(10),
                sent: Counter::default(),
            }],
            policy_keys: vec![ipc::queuectl::KeyView {
                key: "localip=127.0.0.2,grouping=orange".into(),
                concurrency: Some(2),
                concurrency_now: Some(2),
                rate: Some("10/1s".into()),
                rate_now: Some("10/1s".into()),
                other: String::new(),
                local: String::new(),
                local_concurrency: Some(1),
                local_rate: None,
                connections: 2,
                opened: 3,
                transactions: 40,
            }],
            holds: vec![ipc::queuectl::HoldView {
                id: 1,
                origin: "operator".into(),
                when: "grouping=yahoo".into(),
                remaining: Some(30),
                action: "suspend".into(),
                ramping: false,
                tag: String::new(),
            }],
            proxies: vec![ipc::queuectl::ProxySummary {
                transport: "smtp".into(),
                proxy: "[2001:db8::1]:3025".into(),
                failures: 4,
            }],
            cluster: Some(ipc::queuectl::ClusterLink {
                coordinator: "192.0.2.9:4650".into(),
                state: "degraded".into(),
                instances: 5,
                losses: 1,
            }),
        };
        let text = prometheus(&s);
        assert!(
            text.contains("sluice_cluster_degraded{coordinator=\"192.0.2.9:4650\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("sluice_cluster_instances{coordinator=\"192.0.2.9:4650\"} 5\n"));
        assert!(
            text.contains("# TYPE sluice_deliveries_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("sluice_deliveries_total{status=\"sent\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("sluice_queue_messages{state=\"deferred\"} 2\n"),
            "{text}"
        );
        assert!(text.contains(
            "sluice_destination_dead{transport=\"smtp\",destination=\"[a\\\"b]:25\"} 1\n"
        ));
        assert!(text.contains("sluice_class_queued{transport=\"smtp\",class=\"small\"} 1\n"));
        assert!(text.contains(
            "sluice_proxy_failures_total{transport=\"smtp\",proxy=\"[2001:db8::1]:3025\"} 4\n"
        ));
        assert!(text
            .contains("sluice_policy_connections{key=\"localip=127.0.0.2,grouping=orange\"} 2\n"));
        assert!(text.contains(
            "sluice_policy_held{key=\"grouping=yahoo\",action=\"suspend\",origin=\"operator\"} 1\n"
        ));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let v = line.rsplit(' ').next().unwrap();
            assert!(v.parse::<u64>().is_ok(), "{line}");
        }
    }
}
