//! Which way a large put or get goes under `btl_sm_rdma = auto`: through the rings, or
//! by cross-memory attach where that is faster.
//!
//! Copies into a ring of 64 KiB and more run several times slower when the host places
//! the two cores far apart than while it keeps them near each other, and then slower
//! than cross-memory attach; the copy *out of* a ring hardly changes (measured: see
//! docs/performance.md). So the side that copies in measures, and the receiver of a get
//! hears the rate in the data's headers. While the rings are fast, which path wins
//! depends on the processor: on the AMD hosts measured, the rings at every size; on an
//! Intel one, cross-memory attach below about 1 MiB (one copy, by the kernel, against
//! two through caches the cores must hand over), and at every size while data flows
//! both ways (each direction then has a processor of its own, where through the rings
//! both processors copy both directions). So the side that starts transfers also times
//! its cross-memory attach copies, per size class, and takes the faster path for each
//! size and for the traffic.
//! Whichever path is chosen, the other is tried again every [`PROBE_EVERY`], so that the
//! choice follows the host's placement back.

use std::time::{Duration, Instant};

/// Transfers below this size always go through the rings (and are not measured).
pub const MEASURED_MIN: usize = 16 << 10;

/// Transfers from this size on, while data flows one way only, go through the rings
/// while they are fast: there their chunks overlap those of other transfers (served in
/// turns), which cross-memory attach copies cannot, and a copy of that size by
/// cross-memory attach measured alone overstates what it achieves beside others
/// (measured: see docs/performance.md).
pub const COMPARED_BELOW: usize = 2 << 20;

/// Gets below this size may name the peer's memory by address alone
/// ([`Attributes::unregistered_remote_below`](rbtl_btl::Attributes::unregistered_remote_below)),
/// which only cross-memory attach reaches: up to about this size it wins on the
/// Intel host measured (see above), and a rendezvous then needs no registration.
pub const BY_ADDRESS_BELOW: usize = 1 << 20;

/// Size classes for the rate of cross-memory attach: powers of two from
/// [`MEASURED_MIN`], the last one from 8 MiB on.
const CLASSES: usize = ((8 << 20) / MEASURED_MIN).ilog2() as usize + 1;

/// Cross-memory attach copies of a size class that are tried before its rate counts:
/// a first copy can be several times slower than the next (pages faulted in).
const FIRST_COPIES: u32 = 3;

/// What cross-memory attach copies of one size class achieved.
#[derive(Clone, Copy, Debug)]
struct CmaRate {
    /// GB/s: the fastest of the first [`FIRST_COPIES`], then smoothed.
    gbs: f64,
    /// When the last one ended.
    at: Instant,
    copies: u32,
}

/// The rate of a copy of `bytes` that took `took`, GB/s.
fn rate_of(bytes: usize, took: Duration) -> f64 {
    bytes as f64 / took.as_nanos().max(1) as f64
}

/// A smoothed rate `old` after a copy at `new` (each copy weighs a quarter).
fn smoothed(old: f64, new: f64) -> f64 {
    old + (new - old) / 4.0
}

fn class_of(size: usize) -> usize {
    ((size / MEASURED_MIN).max(1).ilog2() as usize).min(CLASSES - 1)
}

/// What the rings would do with a transfer.
#[derive(Clone, Copy, Debug)]
pub struct Rings {
    /// Chunks it would go in.
    pub chunks: usize,
    /// The rates of copies into the rings and out of them.
    pub speeds: (RingSpeed, RingSpeed),
    /// Data flows both ways (we served the peer's gets lately): then both processors
    /// copy both directions through the rings, while cross-memory attach gives each
    /// direction a processor of its own.
    pub both_ways: bool,
}

/// How often a path not chosen is tried again (a transfer that measures it).
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
        self.0 = smoothed(self.0, rate_of(bytes, took));
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
    /// Per size class: the rate of our cross-memory attach copies.
    cma: [Option<CmaRate>; CLASSES],
}

impl Choice {
    /// Whether a transfer of `size` bytes goes by cross-memory attach, given what the
    /// `rings` would do with it and the rate below which copies into them count as
    /// slow. Through the rings when they were not measured lately (a probe), by
    /// cross-memory attach while they are slow, else (below [`COMPARED_BELOW`], or at
    /// any size while data flows both ways) by the faster of the two for this size,
    /// cross-memory attach being tried when not measured lately at it.
    pub fn via_cma(&mut self, size: usize, rings: Rings, slow_below: f64, now: Instant) -> bool {
        if size < MEASURED_MIN {
            return false;
        }
        let lately = |t: Instant| now.duration_since(t) < PROBE_EVERY;
        let compared = rings.both_ways || size < COMPARED_BELOW;
        let cma = self.last_ring.is_some_and(lately)
            && (rings.speeds.0.gbs() < slow_below
                || compared
                    && match self.cma[class_of(size)] {
                        Some(c) if c.copies >= FIRST_COPIES && lately(c.at) => {
                            c.gbs > ring_rate(rings)
                        }
                        _ => true,
                    });
        if !cma {
            self.last_ring = Some(now);
        }
        cma
    }

    /// Count a cross-memory attach copy of `bytes` that took `took`, ending `now`.
    pub fn observe_cma(&mut self, bytes: usize, took: Duration, now: Instant) {
        if bytes < MEASURED_MIN {
            return;
        }
        let gbs = rate_of(bytes, took);
        let c = &mut self.cma[class_of(bytes)];
        *c = Some(match *c {
            None => CmaRate {
                gbs,
                at: now,
                copies: 1,
            },
            Some(old) => CmaRate {
                gbs: if old.copies < FIRST_COPIES {
                    old.gbs.max(gbs)
                } else {
                    smoothed(old.gbs, gbs)
                },
                at: now,
                copies: old.copies.saturating_add(1),
            },
        });
    }
}

/// The rate of a transfer through the rings: each chunk is copied in, then out, the
/// copy out of one overlapping the copy into the next; half that while data flows both
/// ways, the processors sharing both directions.
fn ring_rate(rings: Rings) -> f64 {
    let (into, out_of) = rings.speeds;
    let (t_in, t_out) = (1.0 / into.gbs(), 1.0 / out_of.gbs());
    let n = rings.chunks.max(1) as f64;
    let rate = n / (t_in + t_out + (n - 1.0) * t_in.max(t_out));
    if rings.both_ways {
        rate / 2.0
    } else {
        rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn one_way(chunks: usize, into: RingSpeed, out_of: RingSpeed) -> Rings {
        Rings {
            chunks,
            speeds: (into, out_of),
            both_ways: false,
        }
    }

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
        let at = |ms| t0 + Duration::from_millis(ms);
        // Never measured: through the rings first, even if the figure says slow.
        assert!(!c.via_cma(MIB, one_way(4, slow, slow), 8.0, t0));
        assert!(c.via_cma(MIB, one_way(4, slow, slow), 8.0, at(10)));
        assert!(c.via_cma(MIB, one_way(4, slow, slow), 8.0, at(99)));
        // The probe: once the period has passed, through the rings again.
        assert!(!c.via_cma(MIB, one_way(4, slow, slow), 8.0, at(101)));
        assert!(c.via_cma(MIB, one_way(4, slow, slow), 8.0, at(102)));
        // A small transfer: the rings.
        assert!(!c.via_cma(4096, one_way(1, slow, slow), 8.0, at(104)));
        assert_eq!(RingSpeed::from_wire(0), None);
        assert_eq!(RingSpeed::from_wire(slow.to_wire()), Some(slow));
    }

    #[test]
    fn fast_rings_against_cross_memory_attach_size_by_size() {
        let (mut c, t0) = (Choice::default(), Instant::now());
        let fast = RingSpeed::from_wire(20_000).expect("a figure");
        let at = |ms| t0 + Duration::from_millis(ms);
        let took = |bytes: usize, gbs: f64| Duration::from_nanos((bytes as f64 / gbs) as u64);
        const HALF: usize = MIB / 2;
        // Rings first; then, at a size never tried, cross-memory attach.
        assert!(!c.via_cma(HALF, one_way(4, fast, fast), 8.0, t0));
        assert!(c.via_cma(HALF, one_way(4, fast, fast), 8.0, at(1)));
        // The first copy at 2 GB/s (tried again), the next ones at 12 GB/s: slower
        // than four chunks through rings copied into at 20 (16 GB/s), so the rings.
        c.observe_cma(HALF, took(HALF, 2.0), at(1));
        assert!(c.via_cma(HALF, one_way(4, fast, fast), 8.0, at(1)));
        for _ in 1..FIRST_COPIES {
            c.observe_cma(HALF, took(HALF, 12.0), at(1));
        }
        assert!(!c.via_cma(HALF, one_way(4, fast, fast), 8.0, at(2)));
        // 64 KiB at 18 GB/s: faster than one chunk copied in, then out (10 GB/s).
        for _ in 0..FIRST_COPIES {
            assert!(c.via_cma(64 << 10, one_way(1, fast, fast), 8.0, at(3)));
            c.observe_cma(64 << 10, took(64 << 10, 18.0), at(3));
        }
        assert!(c.via_cma(64 << 10, one_way(1, fast, fast), 8.0, at(4)));
        // 128 KiB (two chunks) at 12 GB/s: slower than the rings at 20 in and out (13.3),
        // faster when copies out of them run at 6 (5.2).
        let slow_out = RingSpeed::from_wire(6_000).expect("a figure");
        for _ in 0..FIRST_COPIES {
            c.observe_cma(128 << 10, took(128 << 10, 12.0), at(4));
        }
        assert!(!c.via_cma(128 << 10, one_way(2, fast, fast), 8.0, at(4)));
        assert!(c.via_cma(128 << 10, one_way(2, fast, slow_out), 8.0, at(4)));
        // Each size class on its own: 512 KiB still goes through the rings ...
        assert!(!c.via_cma(HALF, one_way(4, fast, fast), 8.0, at(5)));
        // ... until its figure is old: then cross-memory attach is tried again.
        assert!(c.via_cma(HALF, one_way(4, fast, fast), 8.0, at(102)));
        // Cross-memory attach chosen: the rings are still probed every period.
        assert!(!c.via_cma(64 << 10, one_way(1, fast, fast), 8.0, at(150)));
        // From 2 MiB on, fast rings always while data flows one way ...
        for _ in 0..FIRST_COPIES {
            c.observe_cma(2 * MIB, took(2 * MIB, 10.0), at(151));
            assert!(!c.via_cma(2 * MIB, one_way(4, fast, fast), 8.0, at(151)));
        }
        // ... but while it flows both ways, cross-memory attach at 10 GB/s beats the rings' 16
        // halved (both directions share them); at 7 it does not.
        let both = Rings {
            both_ways: true,
            ..one_way(4, fast, fast)
        };
        assert!(c.via_cma(2 * MIB, both, 8.0, at(152)));
        for _ in 0..8 {
            c.observe_cma(2 * MIB, took(2 * MIB, 7.0), at(152));
        }
        assert!(!c.via_cma(2 * MIB, both, 8.0, at(152)));
        // Copies below the measured size are not counted.
        let before = format!("{:?}", c.cma);
        c.observe_cma(4096, Duration::from_secs(1), at(153));
        assert_eq!(format!("{:?}", c.cma), before);
    }
}
