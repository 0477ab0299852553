//! Which macros a milter hears at each stage (`milter_*_macros`).
//!
//! Postfix sends, with each event, the macros its `milter_connect_macros`,
//! `milter_helo_macros`, … list name, evaluated when the event is sent;
//! a macro with no value at that moment is left out. A milter may replace
//! a stage's list at negotiation (SMFIF_SETSYMLIST: Sendmail's
//! `smfi_setsymlist`); its list then applies to it alone. [`MacroLists`]
//! holds the eight lists; the caller gives every value it knows for the
//! stage and [`MacroLists::select`] keeps the listed ones, in list order.

use crate::stage::Stage;

/// Postfix's defaults (`postconf -d milter_connect_macros` and so on).
pub mod defaults {
    /// `milter_connect_macros`.
    pub const CONNECT: &str = "j {daemon_name} {daemon_addr} v _";
    /// `milter_helo_macros`.
    pub const HELO: &str = "{tls_version} {cipher} {cipher_bits} {cert_subject} {cert_issuer}";
    /// `milter_mail_macros`.
    pub const MAIL: &str =
        "i {auth_type} {auth_authen} {auth_author} {mail_addr} {mail_host} {mail_mailer}";
    /// `milter_rcpt_macros`.
    pub const RCPT: &str = "i {rcpt_addr} {rcpt_host} {rcpt_mailer}";
    /// `milter_data_macros`.
    pub const DATA: &str = "i";
    /// `milter_end_of_header_macros`.
    pub const EOH: &str = "i";
    /// `milter_end_of_data_macros`.
    pub const EOD: &str = "i";
    /// `milter_unknown_command_macros`.
    pub const UNKNOWN: &str = "";
}

/// The macro names sent at each stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MacroLists {
    /// At connect.
    pub connect: Vec<String>,
    /// At HELO/EHLO.
    pub helo: Vec<String>,
    /// At MAIL FROM.
    pub mail: Vec<String>,
    /// At RCPT TO.
    pub rcpt: Vec<String>,
    /// At DATA.
    pub data: Vec<String>,
    /// At the end of the headers.
    pub eoh: Vec<String>,
    /// At the end of the message.
    pub eod: Vec<String>,
    /// With an unknown SMTP command.
    pub unknown: Vec<String>,
}

impl Default for MacroLists {
    fn default() -> Self {
        MacroLists {
            connect: split(defaults::CONNECT),
            helo: split(defaults::HELO),
            mail: split(defaults::MAIL),
            rcpt: split(defaults::RCPT),
            data: split(defaults::DATA),
            eoh: split(defaults::EOH),
            eod: split(defaults::EOD),
            unknown: split(defaults::UNKNOWN),
        }
    }
}

/// A list as main.cf and milters write it: names separated by spaces or commas.
pub fn split(text: &str) -> Vec<String> {
    text.split([' ', '\t', ',', '\n'])
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

impl MacroLists {
    /// The list for a stage (none for the stages that carry no macros).
    pub fn of(&self, stage: Stage) -> &[String] {
        match stage {
            Stage::Connect => &self.connect,
            Stage::Helo => &self.helo,
            Stage::Mail => &self.mail,
            Stage::Rcpt => &self.rcpt,
            Stage::Data => &self.data,
            Stage::Eoh => &self.eoh,
            Stage::Eom => &self.eod,
            Stage::Unknown => &self.unknown,
            _ => &[],
        }
    }

    /// Replaces a stage's list as a milter asks at negotiation, by its
    /// SMFIM_* number; false for a number that names no stage.
    pub fn set_requested(&mut self, smfim: u32, list: &str) -> bool {
        let slot = match smfim {
            0 => &mut self.connect,
            1 => &mut self.helo,
            2 => &mut self.mail,
            3 => &mut self.rcpt,
            4 => &mut self.data,
            5 => &mut self.eod,
            6 => &mut self.eoh,
            _ => return false,
        };
        *slot = split(list);
        true
    }

    /// The values to send at `stage`: those of `known` the stage's list
    /// names, in the list's order; names without a value are left out.
    pub fn select<'a>(
        &self,
        stage: Stage,
        known: &'a [(&'a str, String)],
    ) -> Vec<(&'a str, &'a str)> {
        self.of(stage)
            .iter()
            .filter_map(|name| {
                known
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(k, v)| (*k, v.as_str()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postfix_defaults_and_selection_in_list_order() {
        let m = MacroLists::default();
        assert_eq!(m.connect, ["j", "{daemon_name}", "{daemon_addr}", "v", "_"]);
        assert!(m.unknown.is_empty());
        let known = [
            ("{client_addr}", "192.0.2.1".to_string()),
            ("v", "Sluice".to_string()),
            ("j", "mx.example".to_string()),
        ];
        // Listed order, unlisted {client_addr} left out, {daemon_name} unknown.
        assert_eq!(
            m.select(Stage::Connect, &known),
            [("j", "mx.example"), ("v", "Sluice")]
        );
        assert!(m.select(Stage::Header, &known).is_empty());
    }

    #[test]
    fn a_milter_replaces_a_list() {
        let mut m = MacroLists::default();
        assert!(m.set_requested(2, "{client_addr}, i"));
        assert_eq!(m.mail, ["{client_addr}", "i"]);
        assert!(m.set_requested(5, ""));
        assert!(m.eod.is_empty());
        assert!(!m.set_requested(7, "x"));
    }
}
