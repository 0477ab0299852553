//! The envelope after canonical and virtual alias mapping.
//!
//! cleanup asks the router once per message (the sender and all recipients
//! in one request, sent at `Begin` so that the answer comes while the content
//! streams) and applies the answer here before the message is committed,
//! as Postfix's cleanup does: a one-to-one rewrite replaces the recipient,
//! a one-to-many expansion replaces it with the list; each new recipient
//! keeps the NOTIFY of the one it came from, and its ORCPT, or the address
//! it came from as ORCPT when it had none, for DSNs and `orig_to=`.
//! Duplicates are dropped with Postfix's key (address, ORCPT, NOTIFY), so
//! two original recipients that expand to one address still get their
//! own DSNs. The sender goes through sender_canonical_maps and
//! canonical_maps (envelope only: headers are not rewritten). A temporary
//! failure (loop, limit, broken table) refuses the whole message with a
//! 4xx: the table is wrong, not the mail. A malformed address is left as
//! it is, for qmgr to bounce (or, for a sender, to use) as before.

use std::collections::HashSet;

use ipc::router::Rewrite;
use mail::{Recipient, Refusal, StatusCode};

/// The recipients to queue, or why the message must be refused for now.
pub fn apply(rcpts: &[Recipient], answers: Vec<Rewrite>) -> Result<Vec<Recipient>, Refusal> {
    if answers.len() != rcpts.len() {
        return Err(unavailable());
    }
    let mut out = Vec::with_capacity(rcpts.len());
    let mut seen = HashSet::new();
    let mut keep = |r: Recipient, out: &mut Vec<Recipient>| {
        let key = (r.address.to_lowercase(), r.orcpt.clone(), r.notify);
        if seen.insert(key) {
            out.push(r);
        }
    };
    for (r, w) in rcpts.iter().zip(answers) {
        match w {
            Rewrite::Same => keep(r.clone(), &mut out),
            Rewrite::Failed { status } if !status.is_transient() => keep(r.clone(), &mut out),
            // An alias with an empty value: the table is wrong.
            Rewrite::Into(addresses) if addresses.is_empty() => {
                return Err(refusal(&r.address, "virtual alias expands to no address"))
            }
            Rewrite::Into(addresses) => {
                let orcpt = r
                    .orcpt
                    .clone()
                    .or_else(|| mail::Orcpt::of_address(&r.address).map(|o| o.to_string()));
                for address in addresses {
                    keep(
                        Recipient {
                            address,
                            notify: r.notify,
                            orcpt: orcpt.clone(),
                        },
                        &mut out,
                    );
                }
            }
            Rewrite::Failed { status } => return Err(refusal(&r.address, &status.text)),
        }
    }
    Ok(out)
}

/// The sender to queue: `Some` when canonical mapping rewrote it.
pub fn sender(given: &str, answer: Rewrite) -> Result<Option<String>, Refusal> {
    match answer {
        Rewrite::Into(mut v) if v.len() == 1 => Ok(v.pop()),
        Rewrite::Into(_) => Err(unavailable()),
        Rewrite::Same => Ok(None),
        Rewrite::Failed { status } if !status.is_transient() => Ok(None),
        Rewrite::Failed { status } => Err(refusal(given, &status.text)),
    }
}

/// A 451 naming the address whose mapping failed and why.
fn refusal(address: &str, why: &str) -> Refusal {
    Refusal::new(
        451,
        StatusCode::SYSTEM_TEMP,
        format!("Error: address mapping for <{address}>: {why}"),
    )
}

/// The refusal when the router cannot be asked or answers nonsense: mail is
/// never queued without its address mapping.
pub fn unavailable() -> Refusal {
    Refusal::new(
        451,
        StatusCode::SYSTEM_TEMP,
        "Error: address rewriting service unavailable",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use mail::Notify;

    fn into(v: &[&str]) -> Rewrite {
        Rewrite::Into(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn expansions_replace_recipients_and_keep_dsn_options() {
        let never = Notify::Never;
        let rcpts = vec![
            Recipient {
                notify: never,
                ..Recipient::new("team@virt.test")
            },
            Recipient::new("plain@example.test"),
            Recipient {
                orcpt: Some("rfc822;given@client.test".into()),
                ..Recipient::new("old@example.test")
            },
            Recipient::new("bad address"),
        ];
        let got = apply(
            &rcpts,
            vec![
                into(&["a@r.test", "b@r.test"]),
                Rewrite::Same,
                into(&["new@example.test"]),
                Rewrite::Failed {
                    status: mail::Status::new(
                        mail::StatusCode::BAD_ADDRESS,
                        "Bad recipient address syntax",
                    ),
                },
            ],
        )
        .unwrap();
        let want = vec![
            Recipient {
                address: "a@r.test".into(),
                notify: never,
                orcpt: Some("rfc822;team@virt.test".into()),
            },
            Recipient {
                address: "b@r.test".into(),
                notify: never,
                orcpt: Some("rfc822;team@virt.test".into()),
            },
            Recipient::new("plain@example.test"),
            Recipient {
                address: "new@example.test".into(),
                notify: Notify::Default,
                orcpt: Some("rfc822;given@client.test".into()),
            },
            Recipient::new("bad address"),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn duplicates_go_by_address_orcpt_and_notify() {
        let rcpts = vec![
            Recipient::new("l1@v.test"),
            Recipient::new("l2@v.test"),
            Recipient::new("x@r.test"),
            Recipient::new("X@R.test"),
        ];
        let got = apply(
            &rcpts,
            vec![
                into(&["x@r.test", "y@r.test"]),
                into(&["x@r.test"]),
                Rewrite::Same,
                Rewrite::Same,
            ],
        )
        .unwrap();
        let addrs: Vec<_> = got
            .iter()
            .map(|r| (r.address.as_str(), r.original()))
            .collect();
        assert_eq!(
            addrs,
            [
                ("x@r.test", Some("l1@v.test")),
                ("y@r.test", Some("l1@v.test")),
                ("x@r.test", Some("l2@v.test")),
                ("x@r.test", None),
            ]
        );
    }

    #[test]
    fn temporary_failures_and_bad_answers_refuse_the_message() {
        let rcpts = vec![Recipient::new("a@v.test"), Recipient::new("loop@v.test")];
        let e = apply(
            &rcpts,
            vec![
                Rewrite::Same,
                Rewrite::Failed {
                    status: mail::Status::new(
                        mail::StatusCode::SYSTEM_TEMP,
                        "virtual alias loop: loop@v.test -> b@v.test -> loop@v.test",
                    ),
                },
            ],
        )
        .unwrap_err();
        assert_eq!(
            e,
            Refusal::new(451, StatusCode::SYSTEM_TEMP, "Error: address mapping for <loop@v.test>: virtual alias loop: loop@v.test -> b@v.test -> loop@v.test")
        );
        assert_eq!(
            apply(&rcpts, vec![Rewrite::Same]).unwrap_err(),
            unavailable()
        );
        let e = apply(&rcpts, vec![Rewrite::Same, into(&[])]).unwrap_err();
        assert_eq!((e.code, e.status), (451, StatusCode::SYSTEM_TEMP), "{e}");
    }

    #[test]
    fn the_sender_is_replaced_only_by_one_address() {
        assert_eq!(sender("joe@x.test", Rewrite::Same), Ok(None));
        assert_eq!(
            sender("joe@x.test", into(&["joseph@x.test"])),
            Ok(Some("joseph@x.test".into()))
        );
        assert_eq!(
            sender("joe@x.test", into(&["a@x.test", "b@x.test"])),
            Err(unavailable())
        );
        let bad = Rewrite::Failed {
            status: mail::Status::new(
                mail::StatusCode::SYSTEM_TEMP,
                "table result for joe@x.test is not an address",
            ),
        };
        assert_eq!(sender("joe@x.test", bad).unwrap_err().code, 451);
    }
}
