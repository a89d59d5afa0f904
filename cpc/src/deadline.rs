//! By when a connection must be up: a connection is wanted when the transport first
//! needs the peer, and must be up within `btl_openib_connect_timeout` of that, or the
//! peer fails (as `tcp`'s `btl_tcp_connect_timeout` fails a link). Every connection
//! method's handshake waits for the peer's own progress (`oob` and `xrc` for its answer
//! on the out-of-band channel, `rdma_cm` for its accept), so a peer that is stopped,
//! hung, or never calls progress would otherwise keep whatever waits for it waiting
//! forever.
//!
//! [`Deadlines`] holds the deadlines, with no clock of its own (the caller says what
//! time it is); each handshake's `time_out` gives up on one peer, saying what it was
//! waiting for ([`timed_out`] words it alike for every method).

use crate::Failure;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

/// The parameter that sets the time a connection has to come up (milliseconds).
pub const CONNECT_TIMEOUT_PARAM: &str = "btl_openib_connect_timeout";

/// Why a connection given up on at its deadline failed: the method, how long it had,
/// and what it was `waiting_for`.
pub fn timed_out(cpc: &'static str, waited: Duration, waiting_for: &str) -> Failure {
    Failure::TimedOut {
        cpc,
        waited,
        waiting_for: waiting_for.to_string(),
    }
}

/// The deadlines of the connections being made, by peer.
#[derive(Debug)]
pub struct Deadlines {
    timeout: Duration,
    /// Each pending peer's deadline.
    pending: HashMap<u32, Instant>,
    /// The same, earliest first, with entries of peers settled since (skipped when
    /// they come out).
    queue: BinaryHeap<Reverse<(Instant, u32)>>,
}

impl Deadlines {
    /// Connections that must be up within `timeout` of being wanted.
    pub fn new(timeout: Duration) -> Deadlines {
        Deadlines {
            timeout,
            pending: HashMap::new(),
            queue: BinaryHeap::new(),
        }
    }

    /// The time a connection has.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `peer`'s connection is wanted at `now`: it must be up by `now` plus the timeout.
    /// A peer already waited for keeps its deadline.
    pub fn start(&mut self, peer: u32, now: Instant) {
        if self.pending.contains_key(&peer) {
            return;
        }
        let at = now.checked_add(self.timeout).unwrap_or(now);
        self.pending.insert(peer, at);
        self.queue.push(Reverse((at, peer)));
    }

    /// `peer`'s connection came up, failed, or was forgotten: it has no deadline.
    pub fn settle(&mut self, peer: u32) {
        self.pending.remove(&peer);
        if self.pending.is_empty() {
            self.queue.clear();
        }
    }

    /// Whether `peer` has a deadline.
    pub fn is_pending(&self, peer: u32) -> bool {
        self.pending.contains_key(&peer)
    }

    /// Whether a deadline may have passed at `now` (one comparison; [`expired`]
    /// says which).
    ///
    /// [`expired`]: Deadlines::expired
    #[inline]
    pub fn due(&self, now: Instant) -> bool {
        self.queue.peek().is_some_and(|Reverse((at, _))| *at <= now)
    }

    /// The peers whose deadline has passed at `now`, earliest first; they have none any
    /// more.
    pub fn expired(&mut self, now: Instant) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some(&Reverse((at, peer))) = self.queue.peek() {
            if at > now {
                break;
            }
            self.queue.pop();
            if self.pending.get(&peer) == Some(&at) {
                self.pending.remove(&peer);
                out.push(peer);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(2000);

    #[test]
    fn a_connection_not_up_by_its_deadline_expires_once() {
        let t0 = Instant::now();
        let mut d = Deadlines::new(T);
        d.start(4, t0);
        assert!(d.is_pending(4));
        assert!(!d.due(t0 + T / 2));
        assert!(d.expired(t0 + T - Duration::from_millis(1)).is_empty());
        assert!(d.due(t0 + T));
        assert_eq!(d.expired(t0 + T), vec![4]);
        assert!(!d.is_pending(4) && !d.due(t0 + 10 * T));
        assert!(d.expired(t0 + 10 * T).is_empty(), "named once");
    }

    #[test]
    fn settled_connections_never_expire_and_a_peer_keeps_its_first_deadline() {
        let t0 = Instant::now();
        let mut d = Deadlines::new(T);
        d.start(1, t0);
        d.start(2, t0 + T / 4);
        // Wanted again later (another send while it connects): the first deadline holds.
        d.start(1, t0 + T / 2);
        d.settle(2);
        assert_eq!(d.expired(t0 + T), vec![1]);
        assert!(d.expired(t0 + 3 * T).is_empty(), "2 came up");
        // Settled, then wanted anew: a new deadline from then.
        d.start(3, t0);
        d.settle(3);
        d.start(3, t0 + T);
        assert!(d.expired(t0 + T + T / 2).is_empty());
        assert_eq!(d.expired(t0 + 2 * T), vec![3]);
    }

    #[test]
    fn several_expire_earliest_first_whatever_the_order_they_were_wanted_in() {
        let t0 = Instant::now() + T;
        let mut d = Deadlines::new(T);
        d.start(9, t0);
        d.start(5, t0 - T / 2);
        d.start(7, t0 + T / 2);
        assert_eq!(d.expired(t0 + T), vec![5, 9]);
        assert_eq!(d.expired(t0 + 2 * T), vec![7]);
    }

    #[test]
    fn the_reason_names_the_method_the_time_what_was_awaited_and_the_parameter() {
        let why = timed_out("oob", T, "no Reply to our Request").to_string();
        assert!(why.starts_with("oob: the connection was not up within 2000 ms: no Reply"));
        assert!(why.contains(CONNECT_TIMEOUT_PARAM), "{why}");
    }
}
