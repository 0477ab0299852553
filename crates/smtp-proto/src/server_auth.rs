//! AUTH in the server session (RFC 4954): order, syntax and the relay of
//! the SASL exchange between the client and the shell.
//!
//! The session offers the mechanisms the shell set
//! ([`Session::set_auth_mechanisms`]) in EHLO when `sasl` is on and, with
//! `tls_auth_only`, only under TLS (before it AUTH gets 530 5.7.0, as the
//! other commands under `smtpd_tls_security_level = encrypt`). It refuses
//! AUTH before EHLO, twice in a session and inside a transaction (503
//! 5.5.1), an unknown mechanism (504 5.5.4) and a response that is not
//! base64 (501 5.5.2); `*` cancels (501 5.7.0), and a response line over
//! `max_command_line` is 500 5.5.6. A failure reply from the shell (535
//! 5.7.8) counts toward `hard_error_limit`, which ends password guessing on
//! one connection. The session never sees the password: what it relays is
//! base64 as the client wrote it.

use sasl::is_base64;

use crate::command::Verb;
use crate::reply::{Reply, StatusCode};

use super::{bad_sequence, r, Action, Pending, Session, State};

impl Session {
    /// Sets the mechanisms AUTH offers (upper case, as Dovecot names them);
    /// empty offers none.
    pub fn set_auth_mechanisms(&mut self, mechanisms: &[String]) {
        if self.auth_mechanisms != mechanisms {
            self.auth_mechanisms = mechanisms.to_vec();
        }
    }

    /// True once AUTH has succeeded in this session (since the last TLS start).
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// The mechanisms EHLO offers now, space-separated; `None` when AUTH is not offered.
    pub(super) fn auth_offer(&self) -> Option<String> {
        let c = &self.config;
        if !c.sasl || (c.tls_auth_only && !self.tls_active) || self.auth_mechanisms.is_empty() {
            return None;
        }
        Some(self.auth_mechanisms.join(" "))
    }

    /// `AUTH mechanism [initial-response]`.
    pub(super) fn auth_command(&mut self, arg: &str) {
        let verb = Some(Verb::Auth);
        if !self.config.sasl || self.auth_mechanisms.is_empty() {
            self.respond(bad_sequence("Error: authentication not enabled"), verb);
            return;
        }
        if self.config.tls_auth_only && !self.tls_active {
            let text = "Must issue a STARTTLS command first";
            self.respond(r(530, StatusCode::SECURITY, text), verb);
            return;
        }
        if self.helo.is_none() {
            self.respond(bad_sequence("Error: send HELO/EHLO first"), verb);
            return;
        }
        if self.authenticated {
            self.respond(bad_sequence("Error: already authenticated"), verb);
            return;
        }
        if self.tx.is_some() {
            self.respond(bad_sequence("Error: MAIL transaction in progress"), verb);
            return;
        }
        let mut words = arg.split(' ').filter(|w| !w.is_empty());
        let (Some(mechanism), initial, None) = (words.next(), words.next(), words.next()) else {
            let text = "Syntax: AUTH mechanism";
            self.respond(r(501, StatusCode::INVALID_ARGUMENTS, text), verb);
            return;
        };
        let known = self
            .auth_mechanisms
            .iter()
            .any(|m| m.eq_ignore_ascii_case(mechanism));
        if !known {
            let text = "Unsupported authentication mechanism";
            self.respond(r(504, StatusCode::INVALID_ARGUMENTS, text), verb);
            return;
        }
        // RFC 4954 §4: `=` is an empty initial response.
        let initial = initial.map(|i| if i == "=" { "" } else { i });
        if initial.is_some_and(|i| !is_base64(i)) {
            self.respond(cannot_decode(), verb);
            return;
        }
        let action = Action::Authenticate {
            mechanism: mechanism.to_ascii_uppercase(),
            initial: initial.map(str::to_string),
        };
        self.ask(action, Pending::Auth, Verb::Auth);
    }

    /// The shell's answer to the exchange's last step.
    pub(super) fn auth_decided(&mut self, reply: Reply, verb: Option<Verb>) {
        if reply.code == 334 {
            self.send(reply);
            self.flush = true;
            self.pending_verb = verb;
            self.state = State::ExpectAuthResponse;
            return;
        }
        if reply.is_positive() {
            self.authenticated = true;
        }
        self.respond(reply, verb);
    }

    /// A line of the client's during the exchange.
    pub(super) fn auth_line(&mut self, line: &[u8], overflow: bool) {
        let verb = self.pending_verb.take();
        self.state = State::ExpectCommand;
        let refusal = if overflow {
            Some(r(
                500,
                StatusCode::known(5, 5, 6),
                "Authentication Exchange line is too long",
            ))
        } else if line == b"*" {
            Some(r(501, StatusCode::SECURITY, "Authentication aborted"))
        } else if !std::str::from_utf8(line).is_ok_and(is_base64) {
            Some(cannot_decode())
        } else {
            None
        };
        match refusal {
            Some(reply) => {
                self.actions.push_back(Action::AuthCancelled);
                self.respond(reply, verb);
            }
            None => {
                let response = String::from_utf8_lossy(line).into_owned();
                self.ask(Action::AuthResponse(response), Pending::Auth, Verb::Auth);
            }
        }
    }
}

fn cannot_decode() -> Reply {
    r(501, StatusCode::SYNTAX_ERROR, "Cannot decode response")
}

#[cfg(test)]
#[path = "server_auth_tests.rs"]
mod tests;
