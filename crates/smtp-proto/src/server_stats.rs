//! Per-verb command counts of a session, for smtpd's `disconnect from`
//! log line (Postfix's `ehlo=1 mail=1 rcpt=0/1 ... commands=4/5`).

use crate::command::COMMANDS;

/// Per-verb counts for the `disconnect from ...` log line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandStats {
    /// (accepted, total) per row of [`COMMANDS`].
    pub per_verb: [(u32, u32); 14],
    /// Unrecognized or unparsable command lines.
    pub unknown: u32,
}

impl CommandStats {
    /// Postfix's form: `ehlo=1 mail=1 rcpt=0/1 data=1 quit=1 commands=4/5`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        let (mut ok, mut all) = (0, self.unknown);
        for (info, &(good, total)) in COMMANDS.iter().zip(self.per_verb.iter()) {
            if total == 0 {
                continue;
            }
            ok += good;
            all += total;
            let name = info.name.to_ascii_lowercase();
            if good == total {
                parts.push(format!("{name}={total}"));
            } else {
                parts.push(format!("{name}={good}/{total}"));
            }
        }
        if self.unknown > 0 {
            parts.push(format!("unknown=0/{}", self.unknown));
        }
        if ok == all {
            parts.push(format!("commands={all}"));
        } else {
            parts.push(format!("commands={ok}/{all}"));
        }
        parts.join(" ")
    }
}
