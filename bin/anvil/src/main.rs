//! anvil(8): connection count and rate limiting server.
//!
//! Answers the anvil protocol (`ipc::anvil`) for smtpd: each connection and
//! disconnection of a client, failed AUTH commands, MAIL and RCPT commands,
//! and lookups. Logs the peaks every
//! `anvil_status_update_time`, in Postfix's words, and when it exits.
#![forbid(unsafe_code)]

mod table;

use std::time::Instant;

use daemon::ipcserver::{ClientId, Handler, IpcServer, Replies};
use daemon::{msg_info, Cx};
use ipc::anvil::{Anvil, Request, Response};
use sys::creds::PeerCred;

struct AnvilHandler {
    table: table::Table,
    report_every: std::time::Duration,
    next_report: Instant,
    next_expire: Instant,
}

impl AnvilHandler {
    fn report(&mut self, now: Instant) {
        let unit = self.table.unit().as_secs();
        if self.table.max_count.value > 0 {
            msg_info!(
                "statistics: max connection count {} for ({}) at {}",
                self.table.max_count.value,
                self.table.max_count.who,
                stamp()
            );
        }
        if self.table.max_rate.value > 0 {
            msg_info!(
                "statistics: max connection rate {}/{unit}s for ({}) at {}",
                self.table.max_rate.value,
                self.table.max_rate.who,
                stamp()
            );
        }
        for (name, peak) in [
            ("message", &self.table.max_mail),
            ("recipient", &self.table.max_rcpt),
        ] {
            if peak.value > 0 {
                msg_info!(
                    "statistics: max {name} rate {}/{unit}s for ({}) at {}",
                    peak.value,
                    peak.who,
                    stamp()
                );
            }
        }
        if self.table.max_cache > 0 {
            msg_info!(
                "statistics: max cache size {} at {}",
                self.table.max_cache,
                stamp()
            );
        }
        self.table.reset_peaks();
        self.next_report = now + self.report_every;
    }
}

fn stamp() -> String {
    sys::time::syslog_stamp(std::time::SystemTime::now())
}

impl Handler<Anvil> for AnvilHandler {
    fn request(
        &mut self,
        cx: &mut Cx<'_>,
        out: &mut Replies<'_, Anvil>,
        from: ClientId,
        id: u64,
        req: Request,
    ) {
        let now = cx.now;
        let (count, rate) = match req {
            Request::Connect { service, client } => self.table.connect(&service, &client, now),
            Request::Disconnect { service, client } => {
                self.table.disconnect(&service, &client, now)
            }
            Request::Lookup { service, client } => self.table.lookup(&service, &client, now),
            Request::AuthFailed { service, client } => {
                let rate = self.table.auth_failed(&service, &client, now);
                out.send(from, id, &Response::AuthFailures { rate });
                return;
            }
            Request::Mail { service, client } => {
                let rate = self.table.mail(&service, &client, now);
                out.send(from, id, &Response::Rate { rate });
                return;
            }
            Request::Rcpt { service, client } => {
                let rate = self.table.rcpt(&service, &client, now);
                out.send(from, id, &Response::Rate { rate });
                return;
            }
            Request::AuthLookup { service, client } => {
                let rate = self.table.auth_failures(&service, &client, now);
                out.send(from, id, &Response::AuthFailures { rate });
                return;
            }
        };
        out.send(from, id, &Response::Counts { count, rate });
    }

    fn allow(&self, peer: &PeerCred) -> bool {
        // Only the mail system's own processes: root, or our own uid
        // (mail_owner, or the invoking user when unprivileged).
        peer.uid == 0 || peer.uid == sys::current_ids().0
    }

    fn timeout(&mut self, cx: &mut Cx<'_>, _out: &mut Replies<'_, Anvil>) {
        let now = cx.now;
        self.table.expire(now);
        self.next_expire = now + self.table.unit();
        if now >= self.next_report {
            self.report(now);
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        Some(self.next_report.min(self.next_expire))
    }

    fn reload(&mut self, _cx: &mut Cx<'_>, config: &config::Config) -> bool {
        self.report_every = config.time("anvil_status_update_time");
        true
    }

    fn shutdown(&mut self) {
        self.report(Instant::now());
    }
}

fn main() {
    // anvil holds state that smtpd relies on: it must not exit when idle.
    let opts = daemon::Options {
        honour_max_idle: false,
        honour_max_use: false,
        max_clients: usize::MAX,
        ..daemon::Options::default()
    };
    daemon::run(
        opts,
        |_ctx| Ok(()),
        |ctx, ()| {
            let report_every = ctx.config.time("anvil_status_update_time");
            Ok(IpcServer::new(AnvilHandler {
                table: table::Table::new(ctx.config.time("anvil_rate_time_unit")),
                report_every,
                next_report: Instant::now() + report_every,
                next_expire: Instant::now() + ctx.config.time("anvil_rate_time_unit"),
            }))
        },
    )
}
