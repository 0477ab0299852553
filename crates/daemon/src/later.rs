//! What a handler keeps between callbacks: answers owed to clients, the
//! soonest of its deadlines, and this loop turn's time.
//!
//! A sans-IO core decides its answers whenever it runs, also where no
//! [`Replies`] is at hand (at start, in a reload): [`Owed`] keeps them
//! until the next callback that has one, and makes the next turn due at
//! once meanwhile. A handler with several timers ([`Soonest`]) tells the
//! skeleton the earliest. A core that keeps time on the wall clock (so
//! that retry times survive a restart) reads it once per loop turn
//! ([`Turn`]), and its deadlines are turned back into the loop's
//! monotonic instants from that one reading. Work a helper thread
//! finishes (a journal sync) wakes the loop through a [`Wake`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Token, Waker};

use crate::ipcserver::{ClientId, Replies, Service};
use crate::skeleton::Cx;

/// Answers decided but not yet handed to the client server.
#[derive(Debug)]
pub struct Owed<R> {
    answers: Vec<(ClientId, u64, R)>,
}

impl<R> Default for Owed<R> {
    fn default() -> Self {
        Owed {
            answers: Vec::new(),
        }
    }
}

impl<R> Owed<R> {
    /// Keeps the answer to request `id` of `to`.
    pub fn push(&mut self, to: ClientId, id: u64, answer: R) {
        self.answers.push((to, id, answer));
    }

    /// Whether nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// Everything owed, oldest first, owed no longer.
    pub fn take(&mut self) -> std::vec::Drain<'_, (ClientId, u64, R)> {
        self.answers.drain(..)
    }

    /// Hands everything owed to the client server (a client that left is
    /// owed nothing).
    pub fn pay<S: Service<Response = R>>(&mut self, out: &mut Replies<'_, S>) {
        for (to, id, answer) in self.take() {
            out.send(to, id, &answer);
        }
    }

    /// When the loop must run again to pay: at once (`now`) while
    /// anything is owed.
    pub fn deadline(&self, now: Instant) -> Option<Instant> {
        (!self.is_empty()).then_some(now)
    }
}

/// A waker registered in the loop under a token of its own, for helper
/// threads to say they have news.
#[derive(Debug, Clone)]
pub struct Wake {
    waker: Arc<Waker>,
    token: Token,
}

impl Wake {
    /// Registers a waker in `cx`'s loop.
    pub fn new(cx: &mut Cx<'_>) -> std::io::Result<Wake> {
        let token = cx.token();
        let waker = Arc::new(Waker::new(cx.registry, token)?);
        Ok(Wake { waker, token })
    }

    /// Whether `token` is this waker's.
    pub fn owns(&self, token: Token) -> bool {
        token == self.token
    }

    /// What a helper thread calls to wake the loop.
    pub fn notifier(&self) -> impl Fn() + Send + Sync + 'static {
        let w = self.waker.clone();
        move || {
            // A loop that is gone has nothing to be woken for.
            let _ = w.wake();
        }
    }
}

/// The soonest of several deadlines, any of which may be absent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Soonest(Option<Instant>);

impl Soonest {
    /// Takes `t` into account.
    pub fn at(mut self, t: Option<Instant>) -> Self {
        self.0 = match (self.0, t) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self
    }

    /// The soonest, if any was given.
    pub fn get(self) -> Option<Instant> {
        self.0
    }
}

/// A loop turn's time: the loop's monotonic instant and the wall clock,
/// in milliseconds, read once for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    at: Instant,
    wall_ms: u64,
}

impl Turn {
    /// The turn at `at`, whose wall clock reads `wall_ms`.
    pub fn new(at: Instant, wall_ms: u64) -> Self {
        Turn { at, wall_ms }
    }

    /// The wall clock of the turn at `at`: read (by `read`) only when
    /// `at` begins a new turn.
    pub fn now(&mut self, at: Instant, read: impl FnOnce() -> u64) -> u64 {
        if at != self.at {
            *self = Turn::new(at, read());
        }
        self.wall_ms
    }

    /// The wall clock of the last turn.
    pub fn wall_ms(&self) -> u64 {
        self.wall_ms
    }

    /// The loop's instant of the last turn.
    pub fn instant(&self) -> Instant {
        self.at
    }

    /// The loop's instant for wall-clock time `wall_ms` (the turn's own
    /// instant for a time already past).
    pub fn instant_of(&self, wall_ms: u64) -> Instant {
        self.at + Duration::from_millis(wall_ms.saturating_sub(self.wall_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(n: u64) -> ClientId {
        ClientId::from_number(n)
    }

    #[test]
    fn what_is_owed_makes_the_loop_due_at_once_and_is_taken_in_order_once() {
        let now = Instant::now();
        let mut owed = Owed::default();
        assert_eq!(owed.deadline(now), None);
        owed.push(client(7), 1, "first");
        owed.push(client(3), 2, "second");
        assert_eq!(owed.deadline(now), Some(now));
        let got: Vec<_> = owed.take().collect();
        assert_eq!(got, vec![(client(7), 1, "first"), (client(3), 2, "second")]);
        assert!(owed.is_empty());
        assert_eq!(owed.deadline(now), None);
    }

    #[test]
    fn a_helper_thread_wakes_the_loop_under_the_wakes_own_token() {
        let mut poll = mio::Poll::new().unwrap();
        let mut next = 40;
        let registry = std::rc::Rc::new(poll.registry().try_clone().unwrap());
        let mut cx = Cx::for_test(&registry, &mut next);
        let wake = Wake::new(&mut cx).unwrap();
        let mine = (0..100)
            .map(Token)
            .find(|t| wake.owns(*t))
            .expect("a token");
        let notify = wake.notifier();
        std::thread::spawn(notify).join().unwrap();
        let mut events = mio::Events::with_capacity(4);
        poll.poll(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        let woken: Vec<Token> = events.iter().map(|e| e.token()).collect();
        assert_eq!(woken, vec![mine]);
    }

    #[test]
    fn the_soonest_deadline_wins_and_absent_ones_are_ignored() {
        let t = Instant::now();
        let later = t + Duration::from_secs(60);
        assert_eq!(Soonest::default().at(None).get(), None);
        let s = Soonest::default()
            .at(None)
            .at(Some(later))
            .at(Some(t))
            .at(None);
        assert_eq!(s.get(), Some(t));
        assert_eq!(Soonest::default().at(Some(later)).get(), Some(later));
    }

    #[test]
    fn the_wall_clock_is_read_once_per_turn_and_maps_deadlines_back() {
        let t0 = Instant::now();
        let mut turn = Turn::new(t0, 1_000);
        let mut reads = 0;
        let mut read = |v: u64| {
            reads += 1;
            v
        };
        assert_eq!(turn.now(t0, || read(5_000)), 1_000, "same turn: not read");
        let t1 = t0 + Duration::from_millis(250);
        assert_eq!(turn.now(t1, || read(1_250)), 1_250);
        assert_eq!(turn.now(t1, || read(9_999)), 1_250);
        assert_eq!(reads, 1);
        assert_eq!((turn.instant(), turn.wall_ms()), (t1, 1_250));
        assert_eq!(turn.instant_of(3_250), t1 + Duration::from_secs(2));
        assert_eq!(turn.instant_of(10), t1, "a time past is due now");
    }
}
