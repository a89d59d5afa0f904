//! Up to which size naming a peer's memory by its address alone is worth it
//! (`btl_sm_by_address_below`, [`Attributes::unregistered_remote_below`]).
//!
//! Named by address, a transfer can only go by cross-memory attach: one copy, by the
//! kernel, a page at a time. Registered, it lets the module choose the rings instead
//! (`path.rs`): two copies, each by a process through caches. Which is faster depends
//! on the host. On the Intel hosts measured, cross-memory attach copies at more than
//! half the rate of `memcpy`, and a lone copy by it wins below about 1 MiB; on the AMD
//! hosts measured, at about a quarter of it, and the rings win a stream of messages at
//! every size (docs/performance.md). So under `auto` each process times both copies of
//! [`PROBE_BYTES`] within itself at start-up: where cross-memory attach reaches
//! [`MIN_RATIO`] of `memcpy`'s rate, transfers below [`path::BY_ADDRESS_BELOW`] may be
//! named by address; elsewhere none is worth it alone (0), and a layer above names
//! memory by address only where both processes copy a part of it at once.
//!
//! The rings win there only while they are fast: while the host places the two cores
//! far apart, copies into them run several times slower (`path.rs`), and two
//! processes copying a message by cross-memory attach beat them. So after the probe
//! said 0, a [`Watch`] follows this process's copies into the rings: while they run
//! slow, transfers below [`path::BY_ADDRESS_BELOW`] may be named by address again;
//! [`PROBE_EVERY`] after the last slow copy, 0 again, so that the rings are tried.
//!
//! The same probe sets from which size an accumulate is worth reading, combining and
//! writing back by cross-memory attach from its origin rather than shipping it to the
//! target's process ([`Attributes::unattended_from`]): [`UNATTENDED_FROM_FAST`] where
//! attach is fast, [`UNATTENDED_FROM_SLOW`] where it is slow, whose two system calls
//! cost more there than a small message's round trip through the rings.
//!
//! And the eager limit, unless given ([`Chosen::eager_limit`]): where attach is slow,
//! a rendezvous message, read by it or copied through the rings in chunks the
//! receiver asks for, takes several times an eager message's two copies up to
//! [`EAGER_LIMIT_SLOW`] (docs/performance.md); where it is fast, a rendezvous read by
//! it at 16 KiB measured faster than the eager message with the processors apart
//! (slower with them near), and the component's default stays. Each process times
//! its own copies, and one may time them otherwise than its neighbours (its
//! processor shared meanwhile): every rank of a node takes its first rank's eager
//! limit ([`node_eager_limit`]), so that the node's ranks send alike. With the
//! processors apart, though, copies through the rings run slow at every size, eager
//! messages' too (their copies into the rings are timed like the copy protocol's):
//! while the [`Watch`] sees them slow, the eager limit the probe chose falls back to
//! the component's default, so that larger messages go by rendezvous, read by
//! cross-memory attach (docs/performance.md, 2026-12-08). The message layer reads
//! the limit again for each message above that default; what it tells the layers
//! above (collectives choosing by it) stays the start-up limit.
//!
//! [`Attributes::unregistered_remote_below`]: rbtl_btl::Attributes::unregistered_remote_below
//! [`Attributes::unattended_from`]: rbtl_btl::Attributes::unattended_from
//! [`path::BY_ADDRESS_BELOW`]: crate::path::BY_ADDRESS_BELOW

use crate::cma::{self, Direction};
use crate::path::{BY_ADDRESS_BELOW, PROBE_EVERY};
use rbtl_btl::{Attributes, Error, Modex, Proc, Result};
use rbtl_config::{Kind, Value};
use std::time::{Duration, Instant};

/// The parameter.
pub const PARAM: &str = "btl_sm_by_address_below";

/// Bytes each probe copies: a size the rendezvous protocols move, larger than the
/// second-level caches of the hosts measured.
pub const PROBE_BYTES: usize = 1 << 20;

/// Copies of each kind timed; the fastest counts (the first faults pages in). Ten,
/// so that the ratio stays steady between runs where a few copies of each straddle
/// [`MIN_RATIO`] (docs/performance.md).
const PROBE_COPIES: usize = 10;

/// The rate of cross-memory attach, as a fraction of `memcpy`'s, from which naming
/// by address is worth it: between the Intel hosts measured and the AMD ones, well
/// away from both (docs/performance.md).
pub const MIN_RATIO: f64 = 0.4;

/// The size from which an unattended transfer is worth it against a message the
/// peer's process answers, where cross-memory attach is fast (the Intel hosts
/// measured).
pub const UNATTENDED_FROM_FAST: usize = 1 << 10;

/// The same where cross-memory attach is slow (the AMD hosts measured), or refused.
pub const UNATTENDED_FROM_SLOW: usize = 4 << 10;

/// The eager limit where cross-memory attach is slow, or refused: 64 KiB of payload
/// and room for an upper layer's match header (at most the component's
/// `max_send_size`).
pub const EAGER_LIMIT_SLOW: usize = (64 << 10) + 64;

/// The modex key of the eager limit the probe chose (8 bytes, little-endian),
/// published where it did ([`Settings::eager_by_probe`]).
///
/// [`Settings::eager_by_probe`]: crate::Settings::eager_by_probe
pub const EAGER_KEY: &str = "sm_eager_limit";

/// The eager limit of the first rank of this process's node among `procs` (the
/// lowest), as it published it ([`EAGER_KEY`]); `None` where that is this process
/// (`me`), or where it published none (it runs no `sm`, or its limit was given).
pub fn node_eager_limit(procs: &[Proc], me: u32, modex: &mut dyn Modex) -> Result<Option<usize>> {
    let Some(node) = procs.iter().find(|p| p.rank == me).map(|p| &p.node) else {
        return Ok(None);
    };
    let first = procs
        .iter()
        .filter(|p| p.node == *node)
        .map(|p| p.rank)
        .min();
    let Some(first) = first.filter(|&r| r != me) else {
        return Ok(None);
    };
    let Some(blob) = modex.lookup(first, EAGER_KEY)? else {
        return Ok(None);
    };
    let bytes: [u8; 8] = blob.as_slice().try_into().map_err(|_| {
        Error::Modex(format!(
            "{EAGER_KEY} of rank {first}: {} bytes, not 8",
            blob.len()
        ))
    })?;
    Ok(Some(
        u64::from_le_bytes(bytes).try_into().unwrap_or(usize::MAX),
    ))
}

/// What the parameter says: a size, or "auto" (`None`).
pub fn parse(text: &str) -> Result<Option<usize>> {
    if text.trim().eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    match Value::parse(Kind::Size, text) {
        Some(Value::Size(n)) => Ok(Some(n)),
        _ => Err(Error::NotAvailable(format!(
            "{PARAM} = `{text}`; valid values: auto, or a size (bytes, or with k, m, g)"
        ))),
    }
}

/// The rates this process measured: cross-memory attach and `memcpy`, GB/s.
#[derive(Clone, Copy, Debug)]
pub struct Rates {
    /// `process_vm_readv` of this process's own memory.
    pub cma: f64,
    /// `memcpy` of the same bytes.
    pub memcpy: f64,
}

impl Rates {
    /// Time both copies of [`PROBE_BYTES`] within this process; `None` where the
    /// kernel refuses cross-memory attach even to the process itself.
    pub fn measure() -> Option<Rates> {
        let from = vec![1u8; PROBE_BYTES];
        let mut to = vec![0u8; PROBE_BYTES];
        let pid = std::process::id() as i32;
        let (src, dst) = (from.as_ptr() as u64, to.as_mut_ptr() as usize);
        // SAFETY: `to` is writable for PROBE_BYTES and no reference to it is used
        // while the kernel writes; `from` is readable for as long.
        let cma =
            fastest(|| unsafe { cma::copy(pid, Direction::Read, dst, src, PROBE_BYTES) }.is_ok())?;
        let memcpy = fastest(|| {
            to.copy_from_slice(std::hint::black_box(&from));
            std::hint::black_box(&to);
            true
        })?;
        Some(Rates { cma, memcpy })
    }

    /// Whether naming memory by address alone is worth it at these rates.
    pub fn by_address_worth_it(self) -> bool {
        self.cma >= MIN_RATIO * self.memcpy
    }

    /// What the module's hints are at these rates.
    pub fn chosen(self) -> Chosen {
        if self.by_address_worth_it() {
            Chosen {
                by_address_below: BY_ADDRESS_BELOW,
                unattended_from: UNATTENDED_FROM_FAST,
                eager_limit: None,
            }
        } else {
            Chosen::SLOW
        }
    }
}

/// The hints the probe sets under `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// [`Attributes::unregistered_remote_below`] (unless the parameter gives it).
    pub by_address_below: usize,
    /// [`Attributes::unattended_from`].
    pub unattended_from: usize,
    /// [`Attributes::eager_limit`] (unless the parameter gives it); `None` keeps the
    /// component's default.
    pub eager_limit: Option<usize>,
}

impl Chosen {
    /// Where cross-memory attach is slow, or refused even to the process itself.
    const SLOW: Chosen = Chosen {
        by_address_below: 0,
        unattended_from: UNATTENDED_FROM_SLOW,
        eager_limit: Some(EAGER_LIMIT_SLOW),
    };
}

/// The rate of the fastest of [`PROBE_COPIES`] runs of `copy` (a copy of
/// [`PROBE_BYTES`]), GB/s; `None` if one fails.
fn fastest(mut copy: impl FnMut() -> bool) -> Option<f64> {
    let mut best = Duration::MAX;
    for _ in 0..PROBE_COPIES {
        let start = Instant::now();
        if !copy() {
            return None;
        }
        best = best.min(start.elapsed());
    }
    Some(PROBE_BYTES as f64 / best.as_nanos().max(1) as f64)
}

/// The hints under `auto`: measured.
pub fn auto() -> Chosen {
    let Some(r) = Rates::measure() else {
        return Chosen::SLOW;
    };
    let chosen = r.chosen();
    tracing::debug!(
        cma_gbs = r.cma,
        memcpy_gbs = r.memcpy,
        ?chosen,
        "cross-memory attach against memcpy"
    );
    chosen
}

/// The hints while the probe said 0: `unregistered_remote_below`, and the eager limit
/// where the probe chose it, follow the speed of this process's copies into the rings.
#[derive(Debug)]
pub struct Watch {
    /// GB/s below which copies into a ring count as slow (`btl_sm_cma_below`).
    slow_below: f64,
    /// When a copy into a ring last ran slow, while that holds.
    slow_since: Option<Instant>,
    /// Per peer, the rate last seen: the same figure again is no new copy (while
    /// transfers avoid the rings, their smoothed rate stays as it was).
    last: Vec<Option<f64>>,
    /// The eager limit while the rings run slow (`None`: the limit was given): eager
    /// messages go through the rings, larger ones by cross-memory attach.
    slow_eager: Option<usize>,
    /// The eager limit that one replaced, while the rings run slow.
    fast_eager: Option<usize>,
}

impl Watch {
    /// A watch counting copies below `slow_below` GB/s as slow, lowering the eager
    /// limit to `slow_eager` meanwhile (where given).
    pub fn new(slow_below: f64, slow_eager: Option<usize>) -> Watch {
        Watch {
            slow_below,
            slow_since: None,
            last: Vec::new(),
            slow_eager,
            fast_eager: None,
        }
    }

    fn slow(&mut self, attrs: &mut Attributes) {
        self.slow_since = Some(Instant::now());
        attrs.unregistered_remote_below = BY_ADDRESS_BELOW;
        if let (Some(slow), None) = (self.slow_eager, self.fast_eager) {
            self.fast_eager = Some(attrs.eager_limit);
            attrs.eager_limit = attrs.eager_limit.min(slow);
        }
    }

    fn fast(&mut self, attrs: &mut Attributes) {
        attrs.unregistered_remote_below = 0;
        if let Some(limit) = self.fast_eager.take() {
            attrs.eager_limit = limit;
        }
    }

    /// Copies into the rings with peer `peer` run at `gbs` (GB/s, smoothed): set the
    /// hint where that is a new figure.
    pub fn copied(&mut self, peer: usize, gbs: f64, attrs: &mut Attributes) {
        if self.last.len() <= peer {
            self.last.resize(peer + 1, None);
        }
        if self.last[peer] == Some(gbs) {
            return;
        }
        self.last[peer] = Some(gbs);
        if gbs < self.slow_below {
            self.slow(attrs);
        } else if self.slow_since.take().is_some() {
            self.fast(attrs);
        }
    }

    /// While idle: [`PROBE_EVERY`] after the last slow copy, the rings are tried again.
    pub fn idle(&mut self, attrs: &mut Attributes) {
        if self.slow_since.is_some_and(|t| t.elapsed() >= PROBE_EVERY) {
            self.slow_since = None;
            self.fast(attrs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{node_eager_limit, parse, Rates};
    use rbtl_btl::{Attributes, Error, Modex, Module, Proc};

    #[test]
    fn the_parameter_is_auto_or_a_size() {
        assert_eq!(parse("auto").unwrap(), None);
        assert_eq!(parse(" AUTO ").unwrap(), None);
        assert_eq!(parse("1m").unwrap(), Some(1 << 20));
        assert_eq!(parse("0").unwrap(), Some(0));
        let e = parse("fast").unwrap_err().to_string();
        assert!(
            e.contains("btl_sm_by_address_below") && e.contains("auto"),
            "{e}"
        );
    }

    /// Slow copies into the rings name by address again, fast ones or a probe after
    /// [`super::PROBE_EVERY`] stop it.
    #[test]
    fn the_watch_follows_the_rings() {
        let mut attrs = crate::default_attributes();
        let mut w = super::Watch::new(8.0, None);
        w.copied(0, 20.0, &mut attrs);
        assert_eq!(attrs.unregistered_remote_below, 0);
        w.copied(0, 3.0, &mut attrs);
        assert_eq!(attrs.unregistered_remote_below, super::BY_ADDRESS_BELOW);
        w.idle(&mut attrs);
        assert_eq!(attrs.unregistered_remote_below, super::BY_ADDRESS_BELOW);
        w.copied(0, 20.0, &mut attrs);
        assert_eq!(attrs.unregistered_remote_below, 0);
        w.copied(0, 3.0, &mut attrs);
        w.copied(1, 2.0, &mut attrs);
        std::thread::sleep(super::PROBE_EVERY);
        // The same slow figures again are no new copies: the rings are tried.
        w.copied(0, 3.0, &mut attrs);
        w.copied(1, 2.0, &mut attrs);
        w.copied(0, 3.0, &mut attrs);
        assert_eq!(attrs.unregistered_remote_below, super::BY_ADDRESS_BELOW);
        w.idle(&mut attrs);
        assert_eq!(attrs.unregistered_remote_below, 0);
    }

    /// Where the probe chose the eager limit, slow copies into the rings lower it and
    /// fast ones, or a probe after [`super::PROBE_EVERY`], give it back; where it was
    /// given, it stays.
    #[test]
    fn the_watch_lowers_the_probes_eager_limit_while_the_rings_run_slow() {
        let (fast, slow) = (
            super::EAGER_LIMIT_SLOW,
            crate::default_attributes().eager_limit,
        );
        let mut attrs = crate::default_attributes();
        attrs.eager_limit = fast;
        let mut w = super::Watch::new(8.0, Some(slow));
        w.copied(0, 20.0, &mut attrs);
        assert_eq!(attrs.eager_limit, fast);
        w.copied(0, 3.0, &mut attrs);
        assert_eq!(attrs.eager_limit, slow);
        w.copied(1, 2.0, &mut attrs);
        assert_eq!(
            attrs.eager_limit, slow,
            "still slow: nothing to give back twice"
        );
        w.copied(0, 20.0, &mut attrs);
        assert_eq!(attrs.eager_limit, fast);
        w.copied(0, 3.0, &mut attrs);
        w.idle(&mut attrs);
        assert_eq!(attrs.eager_limit, slow);
        std::thread::sleep(super::PROBE_EVERY);
        w.idle(&mut attrs);
        assert_eq!(attrs.eager_limit, fast);
        // A limit that was given.
        let mut w = super::Watch::new(8.0, None);
        w.copied(0, 3.0, &mut attrs);
        assert_eq!(attrs.eager_limit, fast);
        assert_eq!(attrs.unregistered_remote_below, super::BY_ADDRESS_BELOW);
    }

    /// Both copies move bytes at a rate; the decision follows the ratio.
    #[test]
    fn the_probe_measures_both_copies() {
        let r = Rates::measure().expect("a process may attach to itself");
        assert!(r.cma > 0.0 && r.memcpy > 0.0, "{r:?}");
        let slow = Rates {
            cma: 1.0,
            memcpy: 4.0,
        };
        let fast = Rates {
            cma: 3.0,
            memcpy: 5.0,
        };
        assert!(!slow.by_address_worth_it() && fast.by_address_worth_it());
        let chosen = |by_address_below, unattended_from, eager_limit| super::Chosen {
            by_address_below,
            unattended_from,
            eager_limit,
        };
        assert_eq!(
            slow.chosen(),
            chosen(
                0,
                super::UNATTENDED_FROM_SLOW,
                Some(super::EAGER_LIMIT_SLOW)
            )
        );
        assert_eq!(
            fast.chosen(),
            chosen(super::BY_ADDRESS_BELOW, super::UNATTENDED_FROM_FAST, None)
        );
    }

    /// The ranks of a node whose probes chose otherwise send alike: each takes the
    /// eager limit its node's first rank published; one whose limit was given keeps
    /// it; a published limit that is not one is an error, and a rank of another
    /// node is not the first of this one.
    #[test]
    fn a_nodes_ranks_take_its_first_ranks_eager_limit() {
        let modex = crate::test_modex::Shared::job(3);
        let at = |rank| modex.at(rank);
        let procs = modex.procs();
        let module = |rank, eager_limit, eager_by_probe| {
            let attrs = Attributes {
                eager_limit,
                ..crate::default_attributes()
            };
            let settings = crate::Settings {
                eager_by_probe,
                heap_bytes: 1 << 20,
                ..crate::Settings::default()
            };
            crate::SmModule::new(attrs, settings, &mut at(rank)).unwrap()
        };
        let mut ranks = [
            module(0, super::EAGER_LIMIT_SLOW, true),
            module(1, 16 << 10, true),
            module(2, 1000, false),
        ];
        for (rank, m) in (0..).zip(ranks.iter_mut()) {
            m.add_procs(&procs, &mut at(rank)).unwrap();
        }
        let limits = ranks.map(|m| m.attributes().eager_limit);
        let slow = super::EAGER_LIMIT_SLOW;
        assert_eq!(limits, [slow, slow, 1000]);

        assert_eq!(node_eager_limit(&procs, 0, &mut at(0)).unwrap(), None);
        assert_eq!(node_eager_limit(&procs, 2, &mut at(2)).unwrap(), Some(slow));
        let elsewhere = [
            Proc {
                rank: 0,
                node: "another".into(),
            },
            procs[1].clone(),
            procs[2].clone(),
        ];
        let own_node_first = node_eager_limit(&elsewhere, 2, &mut at(2)).unwrap();
        assert_eq!(own_node_first, Some(16 << 10));
        at(0).publish(super::EAGER_KEY, &[1, 2, 3]).unwrap();
        let bad = node_eager_limit(&procs, 1, &mut at(1));
        assert!(matches!(bad, Err(Error::Modex(_))), "{bad:?}");
    }
}
