//! Which way a large put or get goes under `btl_sm_rdma = auto`: through the rings
//! while copying into them runs at full speed, by cross-memory attach once it does not.
//!
//! Copies into a ring of 64 KiB and more run several times slower when the host places
//! the two cores far apart than while it keeps them near each other, and then slower
//! than cross-memory attach; the copy *out of* a ring hardly changes (measured: see
//! docs/performance.md). So the side that copies in measures, and the receiver of a get
//! hears the rate in the data's headers.
//! While cross-memory attach is chosen, a transfer goes through the rings again every
//! [`PROBE_EVERY`], so the choice follows the host's placement back.

use std::time::{Duration, Instant};

/// Transfers below this size always go through the rings (and are not measured).
pub const MEASURED_MIN: usize = 64 << 10;

/// While cross-memory attach is chosen, how often a transfer measures the rings again.
pub const PROBE_EVERY: Duration = Duration::from_millis(100);

/// The smoothed rate of copies into one ring, in GB/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RingSpeed(f64);

impl Default for RingSpeed {
    /// Assumed fast before any measurement: one slow first copy (a buffer's first
    /// touch) must not switch paths, three or four slow ones in a row do.
    fn default() -> Self {
        RingSpeed(32.0)
    }
}

impl RingSpeed {
    /// Count a copy of `bytes` into the ring that took `took`.
    pub fn observe(&mut self, bytes: usize, took: Duration) {
        if bytes < MEASURED_MIN {
            return;
        }
        let gbs = bytes as f64 / took.as_nanos().max(1) as f64;
        self.0 += (gbs - self.0) / 4.0;
    }

    /// Run `copy`, a copy of `bytes` into the ring that may find no room (false), and
    /// count it if it happened and is large enough to measure (smaller copies are not
    /// timed at all: they are the common case).
    #[inline]
    pub fn timed(&mut self, bytes: usize, copy: impl FnOnce() -> bool) -> bool {
        if bytes < MEASURED_MIN {
            return copy();
        }
        let start = Instant::now();
        let done = copy();
        if done {
            self.observe(bytes, start.elapsed());
        }
        done
    }

    /// The rate, GB/s.
    pub fn gbs(self) -> f64 {
        self.0
    }

    /// As carried in a header: MB/s, never 0 (0 is "no figure").
    pub fn to_wire(self) -> u64 {
        ((self.0 * 1000.0) as u64).max(1)
    }

    /// From a header; `None` for "no figure".
    pub fn from_wire(v: u64) -> Option<RingSpeed> {
        (v > 0).then(|| RingSpeed(v as f64 / 1000.0))
    }
}

/// One direction's choice towards one peer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Choice {
    /// When a transfer last went through the rings (None: never).
    last_ring: Option<Instant>,
}

impl Choice {
    /// Whether a transfer of `size` bytes goes by cross-memory attach, given the ring's
    /// `speed` and the rate below which it counts as slow; when it goes through the
    /// rings, that is remembered (it measures them).
    pub fn via_cma(
        &mut self,
        size: usize,
        speed: RingSpeed,
        slow_below: f64,
        now: Instant,
    ) -> bool {
        let measured_lately = self
            .last_ring
            .is_some_and(|t| now.duration_since(t) < PROBE_EVERY);
        let cma = size >= MEASURED_MIN && speed.gbs() < slow_below && measured_lately;
        if !cma && size >= MEASURED_MIN {
            self.last_ring = Some(now);
        }
        cma
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn copies(speed: &mut RingSpeed, gbs: f64, n: usize) {
        for _ in 0..n {
            let took = Duration::from_nanos((256.0 * 1024.0 / gbs) as u64);
            speed.observe(256 << 10, took);
        }
    }

    #[test]
    fn slow_copies_switch_after_a_few_and_one_outlier_does_not() {
        let mut s = RingSpeed::default();
        copies(&mut s, 0.3, 1);
        assert!(s.gbs() > 8.0, "one slow first copy: {}", s.gbs());
        copies(&mut s, 30.0, 4);
        copies(&mut s, 3.0, 8);
        assert!(s.gbs() < 8.0, "far copies: {}", s.gbs());
        // One 1 MiB transfer back at full speed (four chunks) is enough to return.
        copies(&mut s, 30.0, 4);
        assert!(s.gbs() > 8.0, "near again: {}", s.gbs());
        // Small copies are not measured.
        let before = s;
        s.observe(4096, Duration::from_secs(1));
        assert_eq!(s, before);
        // Timed copies: counted only when large and done.
        let slow = |ok| {
            move || {
                std::thread::sleep(Duration::from_millis(1));
                ok
            }
        };
        assert!(s.timed(4096, slow(true)));
        assert!(!s.timed(MIB, slow(false)));
        assert_eq!(s, before, "small or refused copies leave the rate alone");
        assert!(s.timed(MIB, slow(true)));
        assert!(s.gbs() < before.gbs(), "a slow copy lowers it");
    }

    #[test]
    fn cma_while_slow_with_a_ring_transfer_every_probe_period() {
        let (mut c, t0) = (Choice::default(), Instant::now());
        let slow = RingSpeed::from_wire(3_000).expect("a figure");
        // Never measured: through the rings first, even if the figure says slow.
        assert!(!c.via_cma(MIB, slow, 8.0, t0));
        assert!(c.via_cma(MIB, slow, 8.0, t0 + Duration::from_millis(10)));
        assert!(c.via_cma(MIB, slow, 8.0, t0 + Duration::from_millis(99)));
        // The probe: once the period has passed, through the rings again.
        assert!(!c.via_cma(MIB, slow, 8.0, t0 + Duration::from_millis(101)));
        assert!(c.via_cma(MIB, slow, 8.0, t0 + Duration::from_millis(102)));
        // Fast rings, or a small transfer: the rings.
        assert!(!c.via_cma(
            MIB,
            RingSpeed::default(),
            8.0,
            t0 + Duration::from_millis(103)
        ));
        assert!(!c.via_cma(4096, slow, 8.0, t0 + Duration::from_millis(104)));
        assert_eq!(RingSpeed::from_wire(0), None);
        assert_eq!(RingSpeed::from_wire(slow.to_wire()), Some(slow));
    }
}
