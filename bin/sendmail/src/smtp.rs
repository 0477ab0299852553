//! `sendmail -bs`: an SMTP session on stdin/stdout for a local user.
//!
//! The same protocol engine as smtpd; every recipient is accepted (the user
//! is local, as with Postfix's `sendmail -bs`), and each message goes to
//! cleanup exactly as a `sendmail` submission does.

use std::io::{Read, Write};
use std::sync::Arc;

use config::Config;
use mail::{Envelope, Recipient};
use smtp_proto::server::{Action, ServerConfig, Session};
use smtp_proto::{Path, Reply, StatusCode};

use crate::submit::Submission;
use ipc::submission::SubmitError;

/// Runs the session until QUIT or end of input.
pub fn run(cfg: &Config) -> i32 {
    let proto = ServerConfig {
        hostname: cfg.str("myhostname"),
        banner: "ESMTP Sluice (sendmail -bs)".into(),
        max_message_size: cfg.size("message_size_limit"),
        ..ServerConfig::default()
    };
    let mut session = Session::new(Arc::new(proto), false);
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut input = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    // MAIL's sender and ESMTP parameters, as the envelope keeps them.
    let mut mail = Envelope::default();
    let mut rcpts: Vec<Recipient> = Vec::new();
    let mut sub: Option<Submission> = None;
    let mut eof = false;
    loop {
        let used = session.feed(&input);
        input.drain(..used);
        let mut acted = false;
        while let Some(a) = session.poll_action() {
            acted = true;
            match a {
                Action::CheckSender { from, params } => {
                    // smtp_proto::dsn: the one mapping, as smtpd's.
                    mail = Envelope {
                        sender: match from {
                            Path::Null => String::new(),
                            Path::Mailbox(m) => m.to_string(),
                        },
                        ret: params.mail_ret(),
                        envid: params.envid.clone(),
                        body_type: params.body_type(),
                        smtputf8: params.smtputf8,
                        ..Envelope::default()
                    };
                    rcpts.clear();
                    let _ = session.decide(Reply::enhanced(250, StatusCode::SENDER_OK, "Ok"));
                }
                Action::CheckRecipient { to, params } => {
                    rcpts.push(params.recipient(to.to_string()));
                    let _ = session.decide(Reply::enhanced(250, StatusCode::RECIPIENT_OK, "Ok"));
                }
                Action::CheckData { .. } => {
                    let env = Envelope {
                        recipients: rcpts.clone(),
                        ..mail.clone()
                    };
                    match Submission::begin(cfg, env, None) {
                        Ok(s) => {
                            sub = Some(s);
                            let _ = session.decide(Reply::new(
                                354,
                                None,
                                "End data with <CR><LF>.<CR><LF>",
                            ));
                        }
                        Err((_, msg)) => {
                            eprintln!("sendmail: {msg}");
                            let _ = session.decide(Reply::enhanced(
                                451,
                                StatusCode::SYSTEM_TEMP,
                                "Error: queue file write error",
                            ));
                        }
                    }
                }
                Action::Data(bytes) => {
                    if let Some(s) = sub.as_mut() {
                        if s.data(&bytes).is_err() {
                            sub = None;
                        }
                    }
                }
                Action::MessageEnd(_) => {
                    let reply = match sub.take().map(|s| s.end()) {
                        Some(Ok(id)) => {
                            Reply::enhanced(250, StatusCode::OK, format!("Ok: queued as {id}"))
                        }
                        Some(Err(SubmitError::Refused(r))) if r.is_permanent() => r.into(),
                        _ => Reply::enhanced(
                            451,
                            StatusCode::SYSTEM_TEMP,
                            "Error: queue file write error",
                        ),
                    };
                    let _ = session.decide(reply);
                }
                Action::TransactionAborted(_) => sub = None,
                // AUTH is off here (ServerConfig's default); were it asked,
                // the answer is the session's own for a server without it.
                Action::Authenticate { .. } | Action::AuthResponse(_) => {
                    let _ = session.decide(Reply::enhanced(
                        503,
                        StatusCode::INVALID_COMMAND,
                        "Error: authentication not enabled",
                    ));
                }
                // Not asked here (ask_unknown is off); were it asked, 502.
                Action::CheckUnknown { .. } => {
                    let _ = session.decide(smtp_proto::command::CommandError::Unrecognized.reply());
                }
                Action::StartTls | Action::Event(_) | Action::AuthCancelled => {}
                // Not asked here (ask_vrfy is off); were it asked, 252.
                Action::CheckVrfy { arg } => {
                    let _ = session.decide(Session::vrfy_ambiguous(&arg));
                }
                // One session per process: sleeping blocks no one else.
                Action::Sleep(d) => {
                    let _ = stdout.write_all(&session.take_output());
                    let _ = stdout.flush();
                    std::thread::sleep(d);
                    session.wake();
                }
                Action::Close => {
                    let _ = stdout.write_all(&session.take_output());
                    let _ = stdout.flush();
                    return 0;
                }
            }
        }
        if session.has_output() {
            let _ = stdout.write_all(&session.take_output());
            let _ = stdout.flush();
        }
        if session.is_closed() {
            return 0;
        }
        // Commands may all have arrived before the end of input: keep
        // going while they make progress.
        if used > 0 || acted {
            continue;
        }
        if eof {
            return 0;
        }
        match stdin.read(&mut buf) {
            Ok(0) | Err(_) => eof = true,
            Ok(n) => input.extend_from_slice(&buf[..n]),
        }
    }
}
