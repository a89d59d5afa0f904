//! When the error callback hears that a peer's links closed.
//!
//! A peer that closed its links (it ended, or was killed) has its operations failed at
//! once, but it is reported only once the module has had nothing to do for
//! [`QUIET_BEFORE_REPORT`], as `sm` reports a peer's end only while idle: a peer that
//! ends right after its last messages is not reported while the upper layer still
//! matches them; and at the latest [`REPORT_WITHIN`] after its links closed, however
//! busy the module stays with other peers. (A peer that breaks the protocol is reported
//! at once, by the module.)

use rbtl_btl::PeerFailure;
use std::time::{Duration, Instant};

/// How long the module must have had nothing to do before a peer whose links closed
/// is reported.
pub const QUIET_BEFORE_REPORT: Duration = Duration::from_millis(10);

/// The longest a peer whose links closed waits to be reported while the module stays
/// busy.
pub const REPORT_WITHIN: Duration = Duration::from_secs(1);

/// Peers whose links closed, not reported yet.
#[derive(Default)]
pub struct Failures {
    unreported: Vec<(usize, PeerFailure)>,
    /// When the first of them was seen (read at the first progress call after).
    first_seen: Option<Instant>,
    /// Since when progress has found nothing to do, while some are unreported.
    quiet_since: Option<Instant>,
}

impl Failures {
    /// Peer `p`'s links closed, for this reason.
    pub fn closed(&mut self, p: usize, why: PeerFailure) {
        self.unreported.push((p, why));
    }

    /// After a progress call that found work (`busy`) or none, at `now` (read only
    /// when some wait): the peers to report now.
    #[inline]
    pub fn due(&mut self, busy: bool, now: impl FnOnce() -> Instant) -> Vec<(usize, PeerFailure)> {
        if self.unreported.is_empty() {
            self.quiet_since = None;
            return Vec::new();
        }
        let now = now();
        let first = *self.first_seen.get_or_insert(now);
        let overdue = now.duration_since(first) >= REPORT_WITHIN;
        if busy {
            self.quiet_since = None;
        }
        let quiet = !busy
            && now.duration_since(*self.quiet_since.get_or_insert(now)) >= QUIET_BEFORE_REPORT;
        if !(quiet || overdue) {
            return Vec::new();
        }
        self.quiet_since = None;
        self.first_seen = None;
        std::mem::take(&mut self.unreported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_peer_is_reported_once_the_module_is_quiet() {
        let t0 = Instant::now();
        let mut f = Failures::default();
        assert!(f.due(false, || t0).is_empty(), "nothing to report");
        f.closed(3, PeerFailure::Ended("the connection closed".into()));
        assert!(f.due(false, || t0).is_empty(), "quiet from now on");
        assert!(f.due(false, || t0 + QUIET_BEFORE_REPORT / 2).is_empty());
        assert!(
            f.due(true, || t0 + QUIET_BEFORE_REPORT).is_empty(),
            "work came"
        );
        let later = t0 + 2 * QUIET_BEFORE_REPORT;
        assert!(f.due(false, || later).is_empty(), "quiet again from here");
        let due = f.due(false, || later + QUIET_BEFORE_REPORT);
        assert_eq!(
            due,
            vec![(3, PeerFailure::Ended("the connection closed".into()))]
        );
        assert!(f.due(false, || later + 4 * QUIET_BEFORE_REPORT).is_empty());
    }

    #[test]
    fn a_closed_peer_is_reported_within_a_bound_however_busy_the_module() {
        let t0 = Instant::now();
        let mut f = Failures::default();
        f.closed(5, PeerFailure::Broken("reset".into()));
        assert!(f.due(true, || t0).is_empty());
        assert!(f.due(true, || t0 + REPORT_WITHIN / 2).is_empty());
        let due = f.due(true, || t0 + REPORT_WITHIN);
        assert_eq!(due, vec![(5, PeerFailure::Broken("reset".into()))]);
        // The next one counts from its own closing.
        let t1 = t0 + 3 * REPORT_WITHIN;
        f.closed(6, PeerFailure::Ended("closed".into()));
        assert!(f.due(true, || t1).is_empty());
        assert_eq!(f.due(true, || t1 + REPORT_WITHIN).len(), 1);
    }
}
