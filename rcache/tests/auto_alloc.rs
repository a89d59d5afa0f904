//! Automatic invalidation through `InvalidatingAllocator`, installed as this
//! test binary's global allocator (which is why these tests live alone here).
mod common;

use std::alloc::System;
use std::sync::Arc;

use common::{TestRegistrar, PS, UNMONITORED};
use rbtl_rcache::auto::{invalidate_everywhere, unwatch, watch, InvalidatingAllocator};
use rbtl_rcache::{Access, Rcache, Registration};

#[global_allocator]
static ALLOC: InvalidatingAllocator = InvalidatingAllocator::new(System, 4096);

const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_READ);
const SLOTS: usize = 6;
const CYCLES: usize = 4000;

use rbtl_testkit::rng::Xorshift as Rng;

/// 4 KiB .. 1 MiB, biased towards small sizes.
fn size(rng: &mut Rng) -> usize {
    let shift = 12 + rng.below(9); // 4 KiB .. 1 MiB
    let lo = 1usize << shift;
    (lo + rng.below(lo)).min(1 << 20)
}

struct Buf {
    v: Vec<u8>,
    /// Registrar sequence number when `v` was allocated.
    alloc_seq: u64,
    held: Option<Registration<TestRegistrar>>,
}

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

struct Outcome {
    registrations: usize,
    stale: usize,
    reused: usize,
    hits: u64,
}

/// Runs the allocate / register / free / reallocate / register cycle and
/// counts registrations that predate the allocation they were returned for.
fn churn(cache: &Arc<Rcache<TestRegistrar>>, seed: u64) -> Outcome {
    let mut rng = Rng(seed);
    let mut slots: Vec<Option<Buf>> = (0..SLOTS).map(|_| None).collect();
    let mut out = Outcome {
        registrations: 0,
        stale: 0,
        reused: 0,
        hits: 0,
    };
    let hits0 = cache.stats().hits;
    for _ in 0..CYCLES {
        let s = rng.below(SLOTS);
        let replace = slots[s].is_none() || rng.below(3) != 0;
        if replace {
            let mut freed = None;
            if let Some(old) = slots[s].take() {
                freed = Some((old.v.as_ptr() as usize, old.v.capacity()));
                let Buf { v, held, .. } = old;
                // Free the memory while (sometimes) a registration of it is still in use.
                drop(v);
                drop(held);
            }
            // Half the time the same size again, which allocators tend to
            // place at the address just freed.
            let size = match freed {
                Some((_, old_len)) if rng.below(2) == 0 => old_len,
                _ => size(&mut rng),
            };
            let v: Vec<u8> = Vec::with_capacity(size);
            let alloc_seq = cache.registrar().current_seq();
            if let Some(f) = freed {
                if overlaps(f, (v.as_ptr() as usize, v.capacity())) {
                    out.reused += 1;
                }
            }
            slots[s] = Some(Buf {
                v,
                alloc_seq,
                held: None,
            });
        }
        let buf = slots[s].as_mut().unwrap();
        let (base, len) = (buf.v.as_ptr() as usize, buf.v.capacity());
        let r = cache.register(base, len, RW).unwrap();
        out.registrations += 1;
        assert!(r.covers(base, len));
        assert!(cache.registrar().is_live(r.handle().seq));
        if r.handle().seq <= buf.alloc_seq {
            out.stale += 1;
        }
        // Keep it in use across the next free about half the time.
        if rng.below(2) == 0 {
            buf.held = Some(r);
        }
    }
    out.hits = cache.stats().hits - hits0;
    eprintln!(
        "churn: {} registrations, {} hits, {} address reuses, {} stale",
        out.registrations, out.hits, out.reused, out.stale
    );
    drop(slots);
    out
}

#[test]
fn watched_cache_never_returns_stale_registrations() {
    let cache = Rcache::new(TestRegistrar::new(), UNMONITORED);
    watch(&cache);
    let out = churn(&cache, 0xDEAD_BEEF_1234_5678);
    assert_eq!(
        out.stale, 0,
        "a registration made before its allocation was returned"
    );
    assert!(
        out.reused > CYCLES / 5,
        "addresses were reused only {} times: the test proves little",
        out.reused
    );
    assert!(
        out.hits > (CYCLES / 10) as u64,
        "only {} hits: live buffers should hit",
        out.hits
    );
    assert!(cache.stats().invalidations > 0);
    unwatch(&cache);
    cache.flush_idle();
    assert_eq!(cache.registrar().live_count(), 0);
    assert_eq!(
        cache.registrar().registers(),
        cache.registrar().deregisters()
    );
}

#[test]
fn unwatched_cache_does_return_stale_registrations() {
    // The control: same churn, but nobody tells this cache about frees, so
    // reused addresses hit registrations of memory that was freed. This is
    // what the watched test guards against, and shows it can fail.
    let cache = Rcache::new(TestRegistrar::new(), UNMONITORED);
    let out = churn(&cache, 0xDEAD_BEEF_1234_5678);
    assert!(
        out.reused > CYCLES / 5,
        "addresses were reused only {} times",
        out.reused
    );
    assert!(out.stale > 0, "expected stale hits without invalidation");
    assert_eq!(cache.stats().invalidations, 0);
}

#[test]
fn realloc_of_a_large_block_invalidates_it() {
    let cache = Rcache::new(TestRegistrar::new(), UNMONITORED);
    watch(&cache);
    let mut v: Vec<u8> = Vec::with_capacity(64 * 1024);
    let r = cache
        .register(v.as_ptr() as usize, v.capacity(), RW)
        .unwrap();
    let seq = r.handle().seq;
    v.reserve(4 << 20); // realloc to a larger block
    assert!(!r.is_valid());
    drop(r);
    assert!(
        !cache.registrar().is_live(seq),
        "in-use registration deregistered on release"
    );
    let r = cache
        .register(v.as_ptr() as usize, v.capacity(), RW)
        .unwrap();
    v.shrink_to(8192); // shrinking realloc
    assert!(!r.is_valid());
    drop(r);
    // Small blocks are below the threshold: not invalidated.
    let small: Vec<u8> = Vec::with_capacity(1024);
    let r = cache
        .register(small.as_ptr() as usize, small.capacity(), RW)
        .unwrap();
    drop(small);
    assert!(r.is_valid());
}

#[test]
fn explicit_invalidate_everywhere_after_raw_munmap() {
    let cache = Rcache::new(TestRegistrar::new(), UNMONITORED);
    watch(&cache);
    let len = 16 * PS;
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: anonymous private mapping with no address hint; checked below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) };
    assert_ne!(p, libc::MAP_FAILED);
    let r = cache.register(p as usize, len, RW).unwrap();
    let old = r.handle().seq;
    drop(r);
    // SAFETY: `p` is the mapping made above, of `len` bytes, no longer used.
    assert_eq!(unsafe { libc::munmap(p, len) }, 0);
    // The allocator wrapper does not see munmap: the registration is still cached.
    assert!(cache.registrar().is_live(old));
    assert!(invalidate_everywhere(p as usize, len) >= 1);
    assert!(!cache.registrar().is_live(old));
    // Map again, at the same address if the kernel honours the hint.
    // SAFETY: anonymous mapping; the hint is only a hint (no MAP_FIXED).
    let q = unsafe { libc::mmap(p, len, prot, flags, -1, 0) };
    assert_ne!(q, libc::MAP_FAILED);
    let mapped_seq = cache.registrar().current_seq();
    let r = cache.register(q as usize, len, RW).unwrap();
    assert!(r.handle().seq > mapped_seq);
    drop(r);
    // SAFETY: `q` is the mapping made above.
    assert_eq!(unsafe { libc::munmap(q, len) }, 0);
    invalidate_everywhere(q as usize, len);
    assert_eq!(cache.registrar().live_count(), 0);
}

#[test]
fn dropped_caches_are_pruned() {
    let cache = Rcache::new(TestRegistrar::new(), UNMONITORED);
    watch(&cache);
    watch(&cache);
    drop(cache.register(0x10_0000, PS, RW).unwrap());
    assert_eq!(invalidate_everywhere(0x10_0000, 1), 1);
    drop(cache);
    // Nothing left to invalidate there, and no crash on the dead entry.
    let v: Vec<u8> = Vec::with_capacity(1 << 16);
    drop(v);
    assert_eq!(invalidate_everywhere(0x10_0000, 1), 0);
}
