//! Postfix 2.5 per-destination concurrency feedback.
//!
//! A transcription of SCHED_README's pseudocode (qmgr_queue.c): positive
//! feedback g(N) per delivery without connection or handshake failure, with
//! hysteresis (the increment happens at the END of 1/g(N) successes);
//! negative feedback f(N) with reversed hysteresis (the decrement happens at
//! the START of a run of 1/f(N) failures); the safety rule that positive
//! feedback applies only while `concurrency < busy + initial`; and dead
//! detection by pseudo-cohort failure (`fail_cohorts` grows by 1/N per
//! failure and is reset by a success; above the limit the window drops to 0).
//! Panics: never. Limits: the window is a `u32`.

use crate::config::{FeedbackFn, TransportConfig};

/// Tolerance for floating-point rounding in the feedback sums.
const ROUNDING: f64 = 1e-9;

/// The feedback parameters of one transport.
#[derive(Clone, Copy, Debug)]
pub struct FeedbackParams {
    /// `initial_destination_concurrency`.
    pub initial: u32,
    /// `destination_concurrency_limit`.
    pub limit: u32,
    /// Positive feedback g(N).
    pub positive: FeedbackFn,
    /// Negative feedback f(N).
    pub negative: FeedbackFn,
    /// Hysteresis (1 in Postfix).
    pub hysteresis: u32,
    /// `destination_concurrency_failed_cohort_limit`.
    pub cohort_limit: f64,
}

impl FeedbackParams {
    /// Extracts the feedback parameters from a transport's configuration.
    pub fn from_transport(t: &TransportConfig) -> Self {
        FeedbackParams {
            initial: t.initial_destination_concurrency,
            limit: t.destination_concurrency_limit,
            positive: t.positive_feedback,
            negative: t.negative_feedback,
            hysteresis: t.feedback_hysteresis,
            cohort_limit: t.failed_cohort_limit,
        }
    }
}

/// What one feedback event did to the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// No change of concurrency.
    Same,
    /// Concurrency changed from `.0` to `.1`.
    Window(u32, u32),
    /// The failed pseudo-cohort limit was passed: the destination is dead.
    Dead,
}

/// One destination's concurrency state (`concurrency, success, failure, fail_cohorts`).
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// Current concurrency limit; 0 means dead.
    pub concurrency: u32,
    success: f64,
    failure: f64,
    fail_cohorts: f64,
}

impl Window {
    /// Initialization: `concurrency = initial_concurrency`, counters zero.
    pub fn new(initial: u32) -> Self {
        Window {
            concurrency: initial,
            success: 0.0,
            failure: 0.0,
            fail_cohorts: 0.0,
        }
    }

    /// Failed pseudo-cohorts so far (reset by a success).
    pub fn fail_cohorts(&self) -> f64 {
        self.fail_cohorts
    }

    /// Resets the window after a dead period ("back from the almost grave").
    pub fn revive(&mut self, concurrency: u32) {
        *self = Window::new(concurrency.max(1));
    }

    /// After success (a delivery without connection or handshake failure);
    /// `busy` is the number of deliveries in progress to the destination.
    pub fn success(&mut self, busy: u32, p: &FeedbackParams) -> Change {
        let before = self.concurrency;
        self.fail_cohorts = 0.0;
        // Safety: positive feedback only while concurrency < busy + initial,
        // otherwise negative feedback would take effect too late.
        if self.concurrency == 0 || self.concurrency >= busy.saturating_add(p.initial) {
            return Change::Same;
        }
        let h = f64::from(p.hysteresis);
        self.success += p.positive.value(self.concurrency);
        // "Be prepared for feedback > hysteresis, or rounding error": the
        // README's `while (success >= 1)` with a rounding tolerance so that N
        // times 1/N counts as 1. (qmgr_queue.c tolerates half a feedback step,
        // which makes f = 1 drop the window by 2; the README's tables match
        // the pseudocode, so Sluice follows the pseudocode.)
        while self.success >= h - ROUNDING {
            self.concurrency = self.concurrency.saturating_add(p.hysteresis);
            self.failure = 0.0;
            self.success -= h;
        }
        // "Be prepared for overshoot."
        if self.concurrency > p.limit {
            self.concurrency = p.limit;
        }
        if self.concurrency == before {
            Change::Same
        } else {
            Change::Window(before, self.concurrency)
        }
    }

    /// After failure (a delivery that failed with connection or handshake failure).
    pub fn failure(&mut self, p: &FeedbackParams) -> Change {
        let before = self.concurrency;
        if self.concurrency > 0 {
            self.fail_cohorts += 1.0 / f64::from(self.concurrency);
            if self.fail_cohorts > p.cohort_limit {
                self.concurrency = 0;
                return Change::Dead;
            }
        }
        if self.concurrency > 0 {
            let h = f64::from(p.hysteresis);
            self.failure -= p.negative.value(self.concurrency);
            // Reverse hysteresis: the first failure of a run already lowers
            // the window, so overload is corrected at once.
            let mut c = i64::from(self.concurrency);
            while self.failure < -ROUNDING {
                c -= i64::from(p.hysteresis);
                self.failure += h;
                self.success = 0.0;
            }
            self.concurrency = c.max(1) as u32;
        }
        if self.concurrency == before {
            Change::Same
        } else {
            Change::Window(before, self.concurrency)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pos: FeedbackFn, neg: FeedbackFn) -> FeedbackParams {
        FeedbackParams {
            initial: 5,
            limit: 20,
            positive: pos,
            negative: neg,
            hysteresis: 1,
            cohort_limit: 1.0,
        }
    }

    #[test]
    fn one_over_n_grows_linearly_per_cohort() {
        let p = params(
            FeedbackFn::PerConcurrency(1.0),
            FeedbackFn::PerConcurrency(1.0),
        );
        let mut w = Window::new(5);
        // Positive hysteresis: the increment comes at the END of 5 successes.
        for i in 0..4 {
            assert_eq!(w.success(5, &p), Change::Same, "success {i}");
        }
        assert_eq!(w.success(5, &p), Change::Window(5, 6));
        for _ in 0..5 {
            w.success(6, &p);
        }
        assert_eq!(w.concurrency, 6, "6 successes needed at N=6");
        w.success(6, &p);
        assert_eq!(w.concurrency, 7);
    }

    #[test]
    fn negative_feedback_is_reverse_hysteresis() {
        let p = params(
            FeedbackFn::PerConcurrency(1.0),
            FeedbackFn::PerConcurrency(1.0),
        );
        let mut w = Window::new(10);
        // The FIRST failure lowers the window (start of the cycle) ...
        assert_eq!(w.failure(&p), Change::Window(10, 9));
        // ... and the following ones of the same cycle do not.
        let mut drops = 1;
        for _ in 0..8 {
            if let Change::Window(..) = w.success(9, &p) {}
            let c = w.concurrency;
            w.failure(&p);
            if w.concurrency < c {
                drops += 1;
            }
            // Successes reset fail_cohorts, so this never dies.
            assert!(w.concurrency > 0);
        }
        assert!(
            drops < 9,
            "hysteresis suppresses some decrements, got {drops}"
        );
    }

    #[test]
    fn safety_rule_blocks_growth_when_not_busy() {
        let p = params(FeedbackFn::Constant(1.0), FeedbackFn::Constant(1.0));
        let mut w = Window::new(5);
        // busy 0: window 5 is not < 0 + 5, so no positive feedback.
        assert_eq!(w.success(0, &p), Change::Same);
        assert_eq!(w.success(1, &p), Change::Window(5, 6));
    }

    #[test]
    fn overshoot_is_clamped_to_limit() {
        let p = params(FeedbackFn::Constant(1.0), FeedbackFn::Constant(1.0));
        let mut w = Window::new(19);
        w.success(19, &p);
        w.success(20, &p);
        assert_eq!(w.concurrency, 20);
        let mut w = Window::new(1);
        w.failure(&p);
        assert_eq!(w.concurrency, 1, "never below 1 by feedback");
    }

    #[test]
    fn failed_cohorts_declare_dead() {
        let p = params(
            FeedbackFn::PerConcurrency(1.0),
            FeedbackFn::PerConcurrency(1.0),
        );
        let mut w = Window::new(5);
        let mut n = 0;
        loop {
            n += 1;
            if w.failure(&p) == Change::Dead {
                break;
            }
            assert!(n < 100);
        }
        assert_eq!(w.concurrency, 0);
        // The first failure drops the window to 4 (reverse hysteresis) and the
        // next three stay in that cycle: 1/5 + 1/4 + 1/4 + 1/4 = 0.95, so the
        // fifth failure (1.2) passes the limit of 1.
        assert_eq!(n, 5);
        // A dead window takes no positive feedback until revived.
        assert_eq!(w.success(3, &p), Change::Same);
        w.revive(5);
        assert_eq!(w.concurrency, 5);
    }

    #[test]
    fn success_resets_fail_cohorts() {
        let p = params(
            FeedbackFn::PerConcurrency(1.0),
            FeedbackFn::PerConcurrency(1.0),
        );
        let mut w = Window::new(2);
        w.failure(&p);
        assert!(w.fail_cohorts() > 0.0);
        w.success(0, &p);
        assert_eq!(w.fail_cohorts(), 0.0);
    }
}
