//! The router protocol: where does a recipient go, which hosts serve it.
//!
//! qmgr asks [`Request::ResolveQueued`] for each recipient of a message
//! (cleanup has mapped them with [`Request::Rewrite`]) and
//! [`Request::Hosts`] when it needs the servers of a next hop; smtpd asks
//! `Resolve` for each RCPT TO (the `unknown` flag drives
//! `reject_unlisted_recipient`; the class of the address as given, in
//! [`Response::Resolved`], drives relay checks). Requests are pipelined:
//! a client may send many before reading, and answers come back in any
//! order, matched by the [`crate::Tagged`] id. Table answers come at once;
//! DNS answers when the name servers reply, never holding up others.
//! cleanup asks [`Request::Rewrite`] once per message, with the sender and
//! every envelope recipient, before the message is queued (Postfix's cleanup does
//! canonical and virtual alias mapping, not the queue manager).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Marker type for the router protocol.
#[derive(Debug)]
pub enum Router {}

impl crate::Protocol for Router {
    const NAME: &'static str = "sluice-router";
    const VERSION: u32 = 7;
    type Request = Request;
    type Response = Response;
}

/// What a client asks the router.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Resolve one recipient as it arrived (RCPT TO argument, or an
    /// envelope recipient), to the routes of the addresses it becomes.
    Resolve {
        /// The address, external form, with or without angle brackets.
        address: String,
        /// The client may use UTF-8 (SMTPUTF8); otherwise non-ASCII is an error.
        smtputf8: bool,
    },
    /// Resolve a queued envelope recipient, which cleanup has mapped
    /// already: no canonical or virtual alias mapping again, as Postfix's
    /// qmgr asks trivial-rewrite (a chain `a -> b`, `b -> c` in
    /// canonical_maps must not route `b` by `c`). One route.
    ResolveQueued {
        /// The address, external form.
        address: String,
        /// The message may use UTF-8 (SMTPUTF8).
        smtputf8: bool,
    },
    /// The ordered hosts and addresses of a next hop (`domain`,
    /// `domain:port`, `[host]`, `[host]:port`; brackets skip MX lookup).
    Hosts {
        /// The next hop as a [`Route`] gives it.
        nexthop: String,
    },
    /// Reload the tables now (as SIGHUP does), answered once done.
    Reload,
    /// The canonical and virtual alias mapping of a message's envelope
    /// sender and recipients, all in one request; answered with
    /// [`Response::Rewritten`].
    Rewrite {
        /// The sender as given ("" for the null sender).
        sender: String,
        /// The recipients as given, external form.
        addresses: Vec<String>,
        /// The message is SMTPUTF8.
        smtputf8: bool,
    },
}

/// The router's answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The routes of every address the recipient became, in order.
    Resolved {
        /// The class of the address as given, before canonical and virtual
        /// aliasing: what smtpd's relay check (reject_unauth_destination) uses.
        class: Class,
        /// At least one route.
        routes: Vec<Route>,
    },
    /// The hosts of the next hop, best first.
    Hosts(HostList),
    /// The request failed: the status's class says whether a retry later
    /// may succeed (4: DNS timeout, SERVFAIL, a broken table) or not (5:
    /// a malformed domain, NXDOMAIN).
    Failed {
        /// The enhanced status code and its text.
        status: mail::Status,
    },
    /// The reload is done.
    Reloaded,
    /// The answer to [`Request::Rewrite`].
    Rewritten {
        /// The sender (`Into` has exactly one address).
        sender: Rewrite,
        /// One entry per recipient, in order.
        recipients: Vec<Rewrite>,
    },
}

/// What canonical and virtual alias mapping made of one recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rewrite {
    /// No table matched: the recipient stays as given.
    Same,
    /// The addresses it becomes (one for a one-to-one rewrite), without
    /// duplicates, in table order.
    Into(Vec<String>),
    /// The mapping failed; class 4: a retry later may succeed (a loop, a
    /// limit, a broken table), class 5: the address is bad.
    Failed {
        /// The enhanced status code and its text.
        status: mail::Status,
    },
}

/// How an address was classed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Class {
    /// mydestination.
    Local,
    /// virtual_alias_domains.
    Virtual,
    /// relay_domains.
    Relay,
    /// Anything else.
    Default,
}

/// Where one address goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The rewritten address, external form.
    pub address: String,
    /// The master.cf transport; `error` means bounce with `nexthop` as text.
    pub transport: String,
    /// Next hop (domain, `[host]:port`), or the error text as written.
    pub nexthop: String,
    /// For the `error` transport: the status to bounce with, parsed once
    /// by the router (a bad one is refused when its table is read).
    pub error: Option<mail::Status>,
    /// The address class.
    pub class: Class,
    /// Not a known recipient (local_recipient_maps / virtual alias domain).
    pub unknown: bool,
    /// Set by transport_maps.
    pub by_table: bool,
}

/// The servers of a next hop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostList {
    /// The next hop asked about.
    pub nexthop: String,
    /// The hosts came from MX records (false: implicit MX or a literal host).
    pub from_mx: bool,
    /// Hosts, best preference first; random order among equals.
    pub hosts: Vec<Host>,
    /// Seconds the answer may be kept.
    pub ttl: u32,
    /// Every address and MX answer had the AD bit.
    pub authentic: bool,
}

/// One server of a next hop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// Its name (the MX exchange), or the literal as given.
    pub name: String,
    /// MX preference (0 for implicit MX and literals).
    pub preference: u16,
    /// TCP port; 0 means the transport's default.
    pub port: u16,
    /// Its addresses, in the order to try.
    pub addrs: Vec<IpAddr>,
    /// Why it has no addresses, when it has none; its class as in [`Response::Failed`].
    pub error: Option<mail::Status>,
    /// Its DANE standing (`smtp_dns_support_level = dnssec`).
    pub dane: crate::delivery::Dane,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode, Hello, HelloReply, Protocol, Tagged};

    #[test]
    fn every_message_round_trips() {
        let reqs = [
            Request::Resolve {
                address: "\"a b\"@example.test".into(),
                smtputf8: true,
            },
            Request::Hosts {
                nexthop: "[192.0.2.1]:2525".into(),
            },
            Request::Reload,
            Request::Rewrite {
                sender: "joe@example.test".into(),
                addresses: vec!["team@virt.test".into(), "b@example.test".into()],
                smtputf8: false,
            },
        ];
        for (i, r) in reqs.into_iter().enumerate() {
            let f = encode(&Tagged {
                id: i as u64,
                body: r.clone(),
            });
            assert_eq!(
                decode::<Tagged<Request>>(&f[4..]).unwrap(),
                Tagged {
                    id: i as u64,
                    body: r
                }
            );
        }
        let host = Host {
            name: "mx.example.test".into(),
            preference: 10,
            port: 0,
            addrs: vec!["192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap()],
            error: None,
            dane: crate::delivery::Dane::Records(vec![crate::delivery::Tlsa {
                usage: 3,
                selector: 1,
                matching: 1,
                data: vec![0xab; 32],
            }]),
        };
        let resps = [
            Response::Resolved {
                class: Class::Virtual,
                routes: vec![Route {
                    address: "a@example.test".into(),
                    transport: "smtp".into(),
                    nexthop: "example.test".into(),
                    error: None,
                    class: Class::Default,
                    unknown: false,
                    by_table: true,
                }],
            },
            Response::Resolved {
                class: Class::Default,
                routes: vec![Route {
                    address: "gone@example.test".into(),
                    transport: "error".into(),
                    nexthop: "5.1.1 moved away".into(),
                    error: Some(mail::Status::new(
                        mail::StatusCode::USER_UNKNOWN,
                        "moved away",
                    )),
                    class: Class::Default,
                    unknown: false,
                    by_table: true,
                }],
            },
            Response::Hosts(HostList {
                nexthop: "example.test".into(),
                from_mx: true,
                hosts: vec![host],
                ttl: 300,
                authentic: false,
            }),
            Response::Failed {
                status: mail::Status::new(mail::StatusCode::known(4, 4, 3), "DNS lookup timed out"),
            },
            Response::Reloaded,
            Response::Rewritten {
                sender: Rewrite::Into(vec!["joseph@example.test".into()]),
                recipients: vec![
                    Rewrite::Same,
                    Rewrite::Into(vec!["a@x.test".into(), "b@y.test".into()]),
                    Rewrite::Failed {
                        status: mail::Status::new(
                            mail::StatusCode::SYSTEM_TEMP,
                            "virtual alias loop: a -> b -> a",
                        ),
                    },
                ],
            },
        ];
        for r in resps {
            let f = encode(&Tagged {
                id: 9,
                body: r.clone(),
            });
            assert_eq!(decode::<Tagged<Response>>(&f[4..]).unwrap().body, r);
        }
        assert_eq!(
            Hello::of::<Router>().answer::<Router>(),
            HelloReply::Accepted
        );
        // A peer of version 4 sent reasons as text, one of version 5 the
        // error transport's status, one of version 6 a failed DANE lookup's
        // status: all are refused.
        for version in [4, 5, 6] {
            let old = Hello {
                protocol: Router::NAME.into(),
                version,
            };
            assert_eq!(
                old.answer::<Router>(),
                HelloReply::Refused {
                    protocol: "sluice-router".into(),
                    version: 7
                }
            );
        }
    }
}
