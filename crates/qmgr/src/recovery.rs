//! What qmgr says of the spool it recovered at start: torn journal tails,
//! files removed, adopted or missing, and one summary line, as log lines
//! for the shell (which does the recovery itself, before the queue
//! manager exists). Panics on nothing; logs nothing itself.

use std::time::Duration;

use queue::{RecoveryReport, Replay};

use crate::Level;

/// The log lines for a recovery that left `state` and `report` and took
/// `took`, warnings for what went wrong first, the summary last.
pub fn recovery_lines(
    state: &Replay,
    report: &RecoveryReport,
    took: Duration,
) -> Vec<(Level, String)> {
    let mut out = Vec::new();
    let mut warn = |l: String| out.push((Level::Warn, l));
    for t in &state.torn {
        warn(format!(
            "journal segment {}: {} {} bytes of torn or corrupt tail at offset {} ({:?})",
            t.segment,
            if t.cut { "cut" } else { "ignored" },
            t.dropped,
            t.offset,
            t.cause
        ));
    }
    for (p, why) in &report.left {
        warn(format!(
            "{}: left for the next recovery: {why}",
            p.display()
        ));
    }
    if let Some(e) = &report.commit_failed {
        warn(format!(
            "journal: adopted messages not yet durable: {e}; trying again"
        ));
    }
    for p in &report.partial {
        out.push((
            Level::Info,
            format!("removed partial message file {}", p.display()),
        ));
    }
    for (p, why) in &report.corrupt {
        out.push((
            Level::Warn,
            format!("removed corrupt message file {}: {why}", p.display()),
        ));
    }
    for id in &report.adopted {
        out.push((
            Level::Info,
            format!("{id}: adopted a committed message file that was never announced"),
        ));
    }
    for id in &report.missing {
        out.push((Level::Warn, format!("{id}: message file is missing")));
    }
    out.push((
        Level::Info,
        format!(
            "recovered {} messages ({} deferred) from {} journal records in {} ms",
            state.messages.len(),
            state.deferred.len(),
            state.records,
            took.as_millis()
        ),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mail::QueueId;
    use std::path::PathBuf;

    #[test]
    fn what_went_wrong_is_a_warning_and_the_summary_comes_last() {
        let id = QueueId::from_parts(1_700_000_000_000_000, 1, 1).unwrap();
        let mut state = Replay::default();
        state.records = 12;
        let report = RecoveryReport {
            partial: vec![PathBuf::from("incoming/x")],
            corrupt: vec![(PathBuf::from("active/y"), "bad header".into())],
            adopted: vec![id],
            missing: vec![id],
            ..RecoveryReport::default()
        };
        let lines = recovery_lines(&state, &report, Duration::from_millis(42));
        let want = [
            (
                Level::Info,
                "removed partial message file incoming/x".to_string(),
            ),
            (
                Level::Warn,
                "removed corrupt message file active/y: bad header".to_string(),
            ),
            (
                Level::Info,
                format!("{id}: adopted a committed message file that was never announced"),
            ),
            (Level::Warn, format!("{id}: message file is missing")),
            (
                Level::Info,
                "recovered 0 messages (0 deferred) from 12 journal records in 42 ms".to_string(),
            ),
        ];
        assert_eq!(lines, want);
    }
}
