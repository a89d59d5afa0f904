//! How a transport whose one-sided operations need the target's progress (`sm`'s copy
//! protocol, `tcp`, `openib` while their connection is being made) gives its `flush` a
//! way out: [`Answers`] counts, per peer, the answers that came to our operations; a
//! [`FlushWatch`] lives for one flush and says when every peer the flush still waits
//! for has sent none for the timeout. A peer that answers, however slowly, restarts its
//! own count; one that answers nothing (stopped, hung, or never calling progress, while
//! its kernel still acknowledges what we send) is named in
//! [`Error::PeerTimeout`](crate::Error::PeerTimeout), and its operations stay pending.

use crate::{Endpoint, Error, SilentPeer};
use std::time::{Duration, Instant};

/// Rounds of a flush's loop between two looks at the clock, when rounds find work (a
/// round that finds none looks at once).
const LOOK_EVERY: u32 = 64;

/// Per peer (by endpoint index), how many answers to our operations have come.
#[derive(Default)]
pub struct Answers(Vec<u64>);

impl Answers {
    /// An answer came from peer `p`.
    #[inline]
    pub fn heard(&mut self, p: usize) {
        if p >= self.0.len() {
            self.0.resize(p + 1, 0);
        }
        self.0[p] = self.0[p].wrapping_add(1);
    }

    /// How many answers peer `p` has sent.
    #[inline]
    pub fn count(&self, p: usize) -> u64 {
        self.0.get(p).copied().unwrap_or(0)
    }
}

/// A peer a flush waits for: its answers when last looked at, and since when that
/// count has not changed.
struct Watched {
    peer: usize,
    answers: u64,
    since: Instant,
}

/// One flush's watch over the peers it waits for. A peer's silence counts from its
/// last answer seen by this watch, or from the first look that found the flush waiting
/// for it: no peer counts as silent for longer than the flush has waited for it.
pub struct FlushWatch {
    timeout: Duration,
    watched: Vec<Watched>,
    rounds: u32,
}

impl FlushWatch {
    /// A flush that gives up on peers silent for `timeout`.
    pub fn new(timeout: Duration) -> FlushWatch {
        FlushWatch {
            timeout,
            watched: Vec::new(),
            rounds: 0,
        }
    }

    /// After a round of the flush's loop that found work (`busy`) or none: whether to
    /// [`look`](FlushWatch::look) now (after the first round always, which starts the
    /// count of the peers waited for from the start).
    #[inline]
    pub fn due(&mut self, busy: bool) -> bool {
        self.rounds = self.rounds.wrapping_add(1);
        !busy || self.rounds % LOOK_EVERY == 1
    }

    /// At `now`, the peers the flush still waits for (`waiting`: endpoint indices, each
    /// once) and their answers so far: all of them, in the order given, once every one
    /// has sent nothing for the timeout; `None` while one has answered within it.
    pub fn look(
        &mut self,
        now: Instant,
        waiting: impl IntoIterator<Item = usize>,
        answers: &Answers,
    ) -> Option<Vec<usize>> {
        let mut silent = Vec::new();
        let mut all_silent = true;
        let mut seen = Vec::with_capacity(self.watched.len());
        for peer in waiting {
            let count = answers.count(peer);
            let since = match self.watched.iter().find(|w| w.peer == peer) {
                Some(w) if w.answers == count => w.since,
                _ => now,
            };
            seen.push(Watched {
                peer,
                answers: count,
                since,
            });
            if now.saturating_duration_since(since) >= self.timeout {
                silent.push(peer);
            } else {
                all_silent = false;
            }
        }
        self.watched = seen;
        (all_silent && !silent.is_empty()).then_some(silent)
    }

    /// As [`look`](FlushWatch::look), the error that ends the flush: `PeerTimeout`
    /// naming each silent peer (endpoint index `i` is `Endpoint(i)`, its rank
    /// `rank_of(i)`) and `param`, the parameter that sets the timeout.
    pub fn timed_out(
        &mut self,
        now: Instant,
        waiting: impl IntoIterator<Item = usize>,
        answers: &Answers,
        rank_of: impl Fn(usize) -> u32,
        param: &'static str,
    ) -> Option<Error> {
        let silent = self.look(now, waiting, answers)?;
        Some(Error::PeerTimeout {
            peers: silent
                .into_iter()
                .map(|i| SilentPeer {
                    endpoint: Endpoint(i as u32),
                    rank: rank_of(i),
                })
                .collect(),
            silent_for: self.timeout,
            param,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(1000);

    #[test]
    fn a_silent_peer_is_named_once_the_timeout_has_passed_since_it_was_first_waited_for() {
        let t0 = Instant::now();
        let answers = Answers::default();
        let mut w = FlushWatch::new(T);
        assert_eq!(w.look(t0, [2], &answers), None);
        assert_eq!(w.look(t0 + T / 2, [2], &answers), None);
        assert_eq!(w.look(t0 + T, [2], &answers), Some(vec![2]));
        // Another flush waits a whole timeout again, whatever came before.
        let mut again = FlushWatch::new(T);
        assert_eq!(again.look(t0 + 5 * T, [2], &answers), None);
        assert_eq!(again.look(t0 + 5 * T + T / 2, [2], &answers), None);
        assert_eq!(again.look(t0 + 6 * T, [2], &answers), Some(vec![2]));
    }

    #[test]
    fn a_slow_but_answering_peer_never_times_out() {
        let t0 = Instant::now();
        let mut answers = Answers::default();
        let mut w = FlushWatch::new(T);
        assert_eq!(w.look(t0, [1], &answers), None);
        // An answer every 0.9 timeouts, for ten timeouts.
        for i in 1..=11u32 {
            let now = t0 + T * 9 * i / 10;
            answers.heard(1);
            assert_eq!(w.look(now, [1], &answers), None, "answer {i}");
        }
        // Then nothing: one whole timeout after the last answer, it is named.
        let last = t0 + T * 99 / 10;
        assert_eq!(w.look(last + T / 2, [1], &answers), None);
        assert_eq!(w.look(last + T, [1], &answers), Some(vec![1]));
    }

    #[test]
    fn the_flush_gives_up_only_when_every_peer_it_waits_for_is_silent() {
        let t0 = Instant::now();
        let mut answers = Answers::default();
        let mut w = FlushWatch::new(T);
        assert_eq!(w.look(t0, [0, 3], &answers), None);
        answers.heard(0);
        assert_eq!(w.look(t0 + T / 2, [0, 3], &answers), None);
        // Peer 3 is silent, peer 0 answered half a timeout ago: keep waiting.
        assert_eq!(w.look(t0 + T, [0, 3], &answers), None);
        // Peer 0's operations are done: only 3 is waited for, and it is silent.
        assert_eq!(w.look(t0 + T + T / 10, [3], &answers), Some(vec![3]));
        // A peer first waited for later (an operation a callback started) counts from
        // then.
        let mut w = FlushWatch::new(T);
        assert_eq!(w.look(t0, [3], &answers), None);
        assert_eq!(w.look(t0 + T / 2, [3, 0], &answers), None);
        assert_eq!(w.look(t0 + T, [3, 0], &answers), None);
        // Both silent: both named, in the order given.
        assert_eq!(w.look(t0 + 2 * T, [3, 0], &answers), Some(vec![3, 0]));
        // Nothing waited for: nothing to give up on.
        assert_eq!(w.look(t0 + 3 * T, [], &answers), None);
    }

    #[test]
    fn a_round_with_work_looks_first_and_then_only_now_and_then() {
        let mut w = FlushWatch::new(T);
        assert!(w.due(true), "the first round looks");
        let looks = (1..LOOK_EVERY * 4).filter(|_| w.due(true)).count();
        assert_eq!(looks, 3);
        assert!(w.due(false), "an idle round looks at once");
    }

    #[test]
    fn answers_are_counted_per_peer() {
        let mut a = Answers::default();
        assert_eq!(a.count(5), 0);
        a.heard(5);
        a.heard(5);
        a.heard(1);
        assert_eq!((a.count(5), a.count(1), a.count(0)), (2, 1, 0));
    }
}
