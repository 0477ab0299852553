//! The delivery log line, with the delays every agent measures alike.
//!
//! `delay=` is the message's age when the recipient was done (from its
//! arrival time in the request to the wall clock now); the agent measures
//! the last three parts of `delays=`: b, from qmgr's request to the start
//! of the transaction (waiting for the connection); c, the connection's
//! setup, counted for its first transaction only; d, the transaction. a is
//! what is left. Times are formatted by `mail::logline` with
//! `delay_logging_resolution_limit`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use daemon::msg_info;
use ipc::delivery::Transaction;
use mail::logline::{Delays, DeliveryLine, Disposition};
use mail::Status;

/// When the agent got a transaction and started on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// qmgr's request arrived.
    pub queued: Instant,
    /// The agent started on it.
    pub started: Instant,
    /// The connection's setup, for its first transaction; zero after.
    pub conn_setup: Duration,
}

impl Timing {
    /// A transaction started as soon as it arrived, with no setup.
    pub fn at(now: Instant) -> Timing {
        Timing {
            queued: now,
            started: now,
            conn_setup: Duration::ZERO,
        }
    }

    /// The delays of `txn` done at `now`.
    pub fn delays(&self, txn: &Transaction, now: Instant) -> Delays {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let age = Duration::from_micros(wall.saturating_sub(txn.arrival_us));
        Delays::of_age(
            age,
            self.started.saturating_duration_since(self.queued),
            self.conn_setup,
            now.saturating_duration_since(self.started),
        )
    }
}

/// Writes delivery log lines with the configured resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logger {
    resolution: u32,
    /// `soft_bounce`: a permanent failure is logged as qmgr will treat it,
    /// kept with 4.x.x, and `status=SOFTBOUNCE` as Postfix's bounce(3).
    soft_bounce: bool,
}

impl Default for Logger {
    fn default() -> Self {
        Logger {
            resolution: mail::logline::DEFAULT_RESOLUTION,
            soft_bounce: false,
        }
    }
}

impl Logger {
    /// `delay_logging_resolution_limit` from main.cf (0 to 6, as Postfix;
    /// a value outside is taken as the nearest end).
    pub fn from_config(cfg: &config::Config) -> Logger {
        Logger {
            resolution: cfg.int("delay_logging_resolution_limit").clamp(0, 6) as u32,
            soft_bounce: cfg.bool("soft_bounce"),
        }
    }

    /// Logs recipient `index` of `txn` (its `orig_to=` from its ORCPT).
    pub fn recipient(
        &self,
        txn: &Transaction,
        index: u32,
        relay: &str,
        conn_use: u32,
        delays: Delays,
        status: &Status,
    ) {
        let rcpt = txn.recipients.iter().find(|r| r.index == index);
        let to = rcpt.map_or("", |r| r.address.as_str());
        let orig_to = mail::orig_to(to, rcpt.and_then(|r| r.orcpt.as_deref()));
        let (status, soft) = self.as_logged(status);
        let mut line = self.line(txn, to, orig_to, relay, conn_use, delays, &status);
        line.disposition = soft.unwrap_or(line.disposition);
        msg_info!("{line}");
    }

    /// Logs a delivery to `to` made for one of `txn`'s recipients (an
    /// alias's or a `.forward`'s target), with `orig_to=` as given.
    pub fn target(
        &self,
        txn: &Transaction,
        to: &str,
        orig_to: Option<&str>,
        relay: &str,
        delays: Delays,
        status: &Status,
    ) {
        let (status, soft) = self.as_logged(status);
        let mut line = self.line(txn, to, orig_to, relay, 0, delays, &status);
        line.disposition = soft.unwrap_or(line.disposition);
        msg_info!("{line}");
    }

    /// `status` as qmgr will act on it, and the word that says a
    /// permanent failure was kept by `soft_bounce`.
    fn as_logged(&self, status: &Status) -> (Status, Option<Disposition>) {
        if self.soft_bounce && status.is_permanent() {
            (status.softened(), Some(Disposition::SoftBounce))
        } else {
            (status.clone(), None)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn line<'a>(
        &self,
        txn: &'a Transaction,
        to: &'a str,
        orig_to: Option<&'a str>,
        relay: &'a str,
        conn_use: u32,
        delays: Delays,
        status: &'a Status,
    ) -> DeliveryLine<'a> {
        DeliveryLine {
            queue_id: &txn.queue_id,
            to,
            orig_to,
            relay,
            conn_use,
            delays,
            resolution: self.resolution,
            status,
            disposition: if txn.data == ipc::delivery::Data::Probe {
                Disposition::of_probe(status)
            } else {
                Disposition::of(status)
            },
        }
    }
}
