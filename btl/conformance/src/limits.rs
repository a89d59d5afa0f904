//! The check of the put and get limits and alignments a module states in its
//! attributes.

use crate::buffer::{snapshot, Buffer};
use crate::pattern::{fill, matches_pattern};
use crate::rdma::{counting, ALL};
use crate::{remote_of, Peer};
use rbtl_btl::{BtlFlags, Error, Local, Module, RdmaCallback, Remote, Transfer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Largest limit the check moves a whole transfer of; above it (and without a limit),
/// it moves [`SOME`] bytes and checks only the refusal of one byte over the limit.
const MOST: usize = 8 << 20;
/// What the check moves when the limit is above [`MOST`].
const SOME: usize = 64 << 10;

/// A put or get over its limit, or with a local address, remote address or size that
/// is not a multiple of its alignment, is refused with `NotAvailable` (before the
/// handles are looked at, so with any buffers) and changes nothing; one of exactly the
/// limit, aligned, lands whole. Modules without a limit (`usize::MAX`) or an alignment
/// (1) have nothing of it to check.
pub fn limits_are_enforced(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    let ep = p.endpoint;
    for put in [true, false] {
        let (flag, limit, align) = if put {
            (BtlFlags::PUT, attrs.put_limit, attrs.put_alignment)
        } else {
            (BtlFlags::GET, attrs.get_limit, attrs.get_alignment)
        };
        if !attrs.flags.contains(flag) {
            continue;
        }
        // The largest aligned transfer the check moves whole, and some room around it.
        let whole = (if limit <= MOST { limit } else { SOME } / align) * align;
        let len = whole + 2 * align.max(8);
        let mut local = Buffer::new(p.module, ep, len, ALL);
        let mut target = Buffer::new(p.module, ep, len, ALL);
        fill(&mut target.mem, 5);
        fill(&mut local.mem, 6);
        let (raddr, rh) = remote_of(&p.swap(&target.advertise()));
        let (l, lh) = (local.addr(0), &local.handle);
        let refused =
            || -> RdmaCallback { Box::new(|_, _| panic!("a refused transfer completed")) };
        let op = |m: &mut dyn Module, l: usize, r: u64, size: usize, cb: RdmaCallback| {
            if put {
                m.put(
                    &Transfer::new(ep, Local::new(l, lh), Remote::new(r, &rh), size),
                    cb,
                )
            } else {
                m.get(
                    &Transfer::new(ep, Local::new(l, lh), Remote::new(r, &rh), size),
                    cb,
                )
            }
        };
        let what = if put { "put" } else { "get" };
        if limit < usize::MAX {
            let e = op(p.module, l, raddr, limit + 1, refused());
            assert!(
                matches!(e, Err(Error::NotAvailable(_))),
                "a {what} of its limit ({limit}) + 1: {e:?}"
            );
        }
        if align > 1 {
            for (dl, dr, size) in [(1, 0, align), (0, 1, align), (0, 0, align + 1)] {
                let e = op(p.module, l + dl, raddr + dr, size.min(limit), refused());
                assert!(
                    matches!(e, Err(Error::NotAvailable(_))),
                    "a {what} at +{dl}/+{dr} of {size} bytes, alignment {align}: {e:?}"
                );
            }
        }
        // Exactly the limit (or as much as the check moves), aligned: it lands whole.
        let done = Arc::new(AtomicUsize::new(0));
        op(p.module, l, raddr, whole, counting(&done))
            .expect("an aligned transfer within the limit");
        p.module.flush(Some(ep)).expect("flush");
        assert_eq!(done.load(Ordering::SeqCst), 1);
        p.barrier();
        // What moved: a put's bytes into the peer's target, a get's into our local buffer.
        let (moved, seed, rest) = if put {
            (target.snapshot(), 6, 5)
        } else {
            (local.snapshot(), 5, 6)
        };
        assert!(
            matches_pattern(&moved[..whole], seed),
            "the {what} of {whole} bytes landed"
        );
        // SAFETY: our own live buffer, after the barrier.
        let after = unsafe {
            snapshot(
                if put {
                    target.addr(whole)
                } else {
                    local.addr(whole)
                },
                len - whole,
            )
        };
        let untouched = after
            .iter()
            .enumerate()
            .all(|(i, &b)| b == crate::pattern::pattern(rest, whole + i));
        assert!(untouched, "nothing past the {what}'s {whole} bytes changed");
        p.barrier();
    }
}
