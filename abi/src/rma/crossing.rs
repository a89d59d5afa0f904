//! Which way an accumulate that no transport atomic performs goes, where its target's
//! transport offers both: shipped to the target's process, which combines and
//! answers ([`super::shipped`]), or read, combined and written back from here by the
//! transport without that process ([`rbtl::msg::Comm::unattended_from`]).
//!
//! The transport names the size from which the second is worth it, from what it
//! measured at start-up. Around that size the two are close, and which one wins moves
//! with what the start-up probe cannot see: on `sm`, a shipped accumulate's cost
//! grows with the lines its bytes take between the two cores (slower while the host
//! places them far apart), the other's is two system calls whatever the size; and a
//! target busy elsewhere answers late (docs/performance.md). So within a band around
//! that size ([`Crossing::way`]), accumulates are timed, and the way that was faster
//! lately for their size class is taken; the other is tried again every
//! [`RETRY_EVERY`] accumulates of the class, so that the choice follows the host.
//! Outside the band, and where the transport names no power of two, the size alone
//! chooses.

use std::time::{Duration, Instant};

/// The band's classes: powers of two from an eighth of the transport's size to twice
/// it (sizes from `from / 8` up to `4 * from`, exclusive).
const CLASSES: usize = 5;

/// The first class's size, as a shift down from the transport's.
const BELOW: u32 = 3;

/// Accumulates of a class between two tries of the way not taken.
pub const RETRY_EVERY: u32 = 64;

/// Of the accumulates that go the faster way, one in so many is timed (reading the
/// clock costs a noticeable part of a short one).
const TIMED_EVERY: u32 = 8;

/// A way an accumulate goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// To the target's process, which answers.
    Shipped,
    /// Read, combined and written back from here.
    Unattended,
}

impl Way {
    fn index(self) -> usize {
        self as usize
    }

    fn other(self) -> Way {
        match self {
            Way::Shipped => Way::Unattended,
            Way::Unattended => Way::Shipped,
        }
    }
}

/// What an accumulate chose: its way, and in the band, its class and when it started.
#[derive(Clone, Copy, Debug)]
pub struct Chosen {
    /// The way it goes.
    pub way: Way,
    /// Its class and start, when it is timed.
    timed: Option<(usize, Instant, bool)>,
}

/// The lately measured cost of each way, per class.
#[derive(Clone, Copy, Debug, Default)]
struct Class {
    /// Nanoseconds per way ([`Way::index`]), 0 until measured: each accumulate taken
    /// the faster way moves its figure an eighth of the way to what it took; a try of
    /// the other way replaces that way's figure.
    ns: [u64; 2],
    /// Accumulates since the last try of the way not taken.
    since_try: u32,
}

/// The choices of one process.
#[derive(Debug, Default)]
pub struct Crossing {
    classes: [Class; CLASSES],
}

impl Chosen {
    /// `way`, not timed.
    pub fn untimed(way: Way) -> Chosen {
        Chosen { way, timed: None }
    }
}

impl Crossing {
    /// The way an accumulate of `bytes` goes to a target whose transport names
    /// `from`: by size alone outside the band, else the faster of late, or the other
    /// one when its turn to be tried has come.
    pub fn way(&mut self, bytes: usize, from: usize) -> Chosen {
        let by_size = if bytes >= from {
            Way::Unattended
        } else {
            Way::Shipped
        };
        let Some(k) = class(bytes, from) else {
            return Chosen::untimed(by_size);
        };
        let c = &mut self.classes[k];
        let (way, tried) = match c.ns {
            // Neither measured yet: by size; one of them: the other.
            [0, 0] => (by_size, false),
            [0, _] => (Way::Shipped, true),
            [_, 0] => (Way::Unattended, true),
            [shipped, unattended] => {
                let faster = if unattended < shipped {
                    Way::Unattended
                } else {
                    Way::Shipped
                };
                c.since_try += 1;
                if c.since_try >= RETRY_EVERY {
                    c.since_try = 0;
                    (faster.other(), true)
                } else if c.since_try % TIMED_EVERY != 0 {
                    return Chosen::untimed(faster);
                } else {
                    (faster, false)
                }
            }
        };
        Chosen {
            way,
            timed: Some((k, Instant::now(), tried)),
        }
    }

    /// An accumulate that chose `chosen` completed.
    pub fn done(&mut self, chosen: Chosen) {
        if let Some((k, start, tried)) = chosen.timed {
            self.took(k, chosen.way, start.elapsed(), tried);
        }
    }

    /// Class `k`'s accumulate went `way` and took `spent`; `tried` when it was a try
    /// (or the way's first), whose figure replaces the way's.
    fn took(&mut self, k: usize, way: Way, spent: Duration, tried: bool) {
        let ns = (spent.as_nanos() as u64).max(1);
        let figure = &mut self.classes[k].ns[way.index()];
        *figure = if tried || *figure == 0 {
            ns
        } else {
            // A late call (the process descheduled) moves the figure at most an
            // eighth of itself: a change of the host's takes a few calls.
            (7 * *figure + ns.min(2 * *figure)) / 8
        };
    }
}

/// The class in the band around `from` of an accumulate of `bytes`, if any.
fn class(bytes: usize, from: usize) -> Option<usize> {
    if !from.is_power_of_two() || bytes == 0 {
        return None;
    }
    let first = from.trailing_zeros().checked_sub(BELOW)?;
    let k = (bytes.ilog2()).checked_sub(first)? as usize;
    (k < CLASSES).then_some(k)
}

#[cfg(test)]
mod tests {
    use super::{class, Crossing, Way, RETRY_EVERY};
    use std::time::Duration;

    #[test]
    fn the_band_spans_an_eighth_to_four_times_the_size() {
        assert_eq!(class(127, 1024), None);
        assert_eq!(class(128, 1024), Some(0));
        assert_eq!(class(1023, 1024), Some(2));
        assert_eq!(class(1024, 1024), Some(3));
        assert_eq!(class(4095, 1024), Some(4));
        assert_eq!(class(4096, 1024), None);
        // No band where the transport names no power of two, or one too small.
        assert_eq!(class(1 << 20, usize::MAX), None);
        assert_eq!(class(4, 4), None);
    }

    /// Take class `bytes`'s accumulates: `ns` per way, as `n` calls would.
    fn run(c: &mut Crossing, bytes: usize, ns: [u64; 2], n: usize) -> [usize; 2] {
        let mut taken = [0; 2];
        for _ in 0..n {
            let chosen = c.way(bytes, 1024);
            let k = class(bytes, 1024).unwrap();
            taken[chosen.way.index()] += 1;
            if let Some((_, _, tried)) = chosen.timed {
                let spent = Duration::from_nanos(ns[chosen.way.index()]);
                c.took(k, chosen.way, spent, tried);
            }
        }
        taken
    }

    #[test]
    fn the_faster_way_is_taken_and_the_other_tried_now_and_then() {
        let mut c = Crossing::default();
        // By size first: 512 B below the transport's 1 KiB, shipped; then the other.
        assert_eq!(c.way(512, 1024).way, Way::Shipped);
        let n = 10 * RETRY_EVERY as usize;
        let taken = run(&mut c, 512, [1600, 1400], n);
        // Shipped: its first call, then a try every RETRY_EVERY calls from the third.
        assert_eq!(taken[Way::Shipped.index()], n / RETRY_EVERY as usize);
        // The host changes: shipping grows faster; within a try, it is taken.
        let taken = run(&mut c, 512, [1200, 1400], RETRY_EVERY as usize + 8);
        assert!(taken[Way::Shipped.index()] >= 8, "{taken:?}");
    }

    #[test]
    fn one_late_call_does_not_turn_the_choice() {
        let mut c = Crossing::default();
        run(&mut c, 2048, [1500, 1000], 4);
        let k = class(2048, 1024).unwrap();
        c.took(k, Way::Unattended, Duration::from_micros(500), false);
        assert_eq!(c.way(2048, 1024).way, Way::Unattended);
    }

    #[test]
    fn outside_the_band_the_size_chooses_and_nothing_is_timed() {
        let mut c = Crossing::default();
        let small = c.way(64, 1024);
        let large = c.way(8192, 1024);
        assert_eq!((small.way, large.way), (Way::Shipped, Way::Unattended));
        assert!(small.timed.is_none() && large.timed.is_none());
        assert_eq!(c.way(1 << 30, usize::MAX).way, Way::Shipped);
    }
}
