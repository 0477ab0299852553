//! What a session offers: the EHLO keyword list and the HELP text, both
//! from the configuration and the session's state (TLS active, AUTH
//! mechanisms), so HELP never names what EHLO would not offer.

use super::{r, Session, TlsPolicy, VrfyMode};
use crate::reply::{Reply, StatusCode};

impl Session {
    /// HELP's reply.
    pub(super) fn help_reply(&self) -> Reply {
        // Only what EHLO would offer now: a client must not learn
        // of STARTTLS or AUTH from HELP and then be refused them.
        let mut text = String::from("Commands: EHLO HELO MAIL RCPT DATA");
        if self.config.chunking {
            text.push_str(" BDAT");
        }
        text.push_str(" RSET NOOP");
        if self.config.vrfy == VrfyMode::Ambiguous252 {
            text.push_str(" VRFY");
        }
        text.push_str(" QUIT");
        if self.config.tls != TlsPolicy::None && !self.tls_active {
            text.push_str(" STARTTLS");
        }
        if self.auth_offer().is_some() {
            text.push_str(" AUTH");
        }
        r(214, StatusCode::OK, &text)
    }

    /// The EHLO reply: the extensions offered now.
    pub(super) fn ehlo_reply(&self) -> Reply {
        let c = &self.config;
        let mut lines = vec![c.hostname.clone()];
        if c.pipelining {
            lines.push("PIPELINING".into());
        }
        lines.push(if c.max_message_size > 0 {
            format!("SIZE {}", c.max_message_size)
        } else {
            "SIZE".into()
        });
        if c.vrfy == VrfyMode::Ambiguous252 {
            lines.push("VRFY".into());
        }
        if c.tls != TlsPolicy::None && !self.tls_active {
            lines.push("STARTTLS".into());
        }
        if let Some(mechs) = self.auth_offer() {
            lines.push(format!("AUTH {mechs}"));
        }
        if c.enhanced_status_codes {
            lines.push("ENHANCEDSTATUSCODES".into());
        }
        if c.eight_bit_mime {
            lines.push("8BITMIME".into());
        }
        if c.dsn {
            lines.push("DSN".into());
        }
        if c.smtputf8 {
            lines.push("SMTPUTF8".into());
        }
        if c.chunking {
            lines.push("CHUNKING".into());
            if c.binarymime {
                lines.push("BINARYMIME".into());
            }
        }
        Reply::multiline(250, None, lines)
    }
}
