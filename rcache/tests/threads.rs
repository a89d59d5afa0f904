//! Several threads registering, cloning, releasing and invalidating at once.
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{Shared, TestRegistrar, PS, UNMONITORED};
use rbtl_rcache::{Access, Error, Options, Rcache};

const B: usize = 0x7000_0000;
const THREADS: usize = 4;
const ITERS: usize = 3000;
/// How long the threads of a race go on past their rounds for the race to take place.
const RACE_LIMIT: Duration = Duration::from_secs(10);

use rbtl_testkit::rng::Xorshift as Rng;

fn stress(options: Options) {
    let c = Rcache::new(
        TestRegistrar::new(),
        Options {
            monitor: false,
            ..options
        },
    );
    let calls: u64 = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let c = Arc::clone(&c);
                s.spawn(move || {
                    let mut rng =
                        Rng(0x9E37_79B9_7F4A_7C15
                            ^ (t as u64 + 1).wrapping_mul(0x1234_5678_9ABC_DEF1));
                    let mut held = Vec::new();
                    let mut calls = 0u64;
                    for _ in 0..ITERS {
                        match rng.below(100) {
                            0..=49 => {
                                let base = B + rng.below(48) * PS + rng.below(PS);
                                let len = 1 + rng.below(4 * PS);
                                let access = Access::from_bits_truncate(1 + rng.below(7) as u32);
                                calls += 1;
                                match c.register(base, len, access) {
                                    Ok(r) => {
                                        assert!(
                                            r.covers(base, len),
                                            "{r:?} does not cover {base:#x}+{len}"
                                        );
                                        assert!(r.access().contains(access));
                                        assert!(
                                            c.registrar().is_live(r.handle().seq),
                                            "handed out a dead registration"
                                        );
                                        if held.len() < 8 {
                                            held.push(r);
                                        }
                                    }
                                    Err(Error::LimitExceeded { .. }) => {}
                                    Err(e) => panic!("unexpected error {e}"),
                                }
                            }
                            50..=64 => {
                                if !held.is_empty() {
                                    let r = held[rng.below(held.len())].clone();
                                    assert!(c.registrar().is_live(r.handle().seq));
                                    if held.len() < 8 {
                                        held.push(r);
                                    }
                                }
                            }
                            65..=89 => {
                                if !held.is_empty() {
                                    let i = rng.below(held.len());
                                    held.swap_remove(i);
                                }
                            }
                            _ => {
                                let base = B + rng.below(52 * PS);
                                c.invalidate(base, 1 + rng.below(3 * PS));
                            }
                        }
                        // Everything held stays registered, valid or not.
                        if let Some(r) = held.last() {
                            assert!(c.registrar().is_live(r.handle().seq));
                        }
                    }
                    calls
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let s = c.stats();
    assert_eq!(s.hits + s.misses, calls);
    assert!(s.hits > 0 && s.misses > 0 && s.invalidations > 0, "{s:?}");
    c.flush_idle();
    let s = c.stats();
    assert_eq!(
        (s.entries, s.idle_entries, s.bytes_pinned),
        (0, 0, 0),
        "{s:?}"
    );
    let r = c.registrar();
    assert_eq!(r.live_count(), 0);
    assert_eq!(r.pinned(), 0);
    assert_eq!(r.registers(), r.deregisters());
    assert!(r.registers() <= s.misses);
}

#[test]
fn concurrent_leave_pinned_with_entry_limit() {
    stress(Options {
        leave_pinned: true,
        max_entries: 16,
        max_pinned_bytes: 0,
        monitor: false,
    });
}

#[test]
fn concurrent_leave_pinned_with_byte_limit() {
    stress(Options {
        leave_pinned: true,
        max_entries: 0,
        max_pinned_bytes: 40 * PS,
        monitor: false,
    });
}

#[test]
fn concurrent_without_leave_pinned() {
    stress(Options {
        leave_pinned: false,
        ..Options::default()
    });
}

/// A few registrations, hit, cloned and released without the lock by several threads
/// while another invalidates them and misses evict them: each registration is
/// deregistered exactly once (the registrar panics on a second time), never while a
/// thread holds it, and the counters agree at the end. The invalidating thread goes on
/// until the others are done, and they go on past their rounds until an invalidation
/// has removed an entry (within [`RACE_LIMIT`]), so that the two overlap however the
/// threads are scheduled.
fn hits_race_invalidations(options: Options) {
    const PAGES: usize = 4;
    const ROUNDS: usize = 20_000;
    let c = Rcache::new(
        TestRegistrar::new(),
        Options {
            monitor: false,
            ..options
        },
    );
    let start = Barrier::new(THREADS);
    let workers_done = AtomicBool::new(false);
    let lookups: u64 = thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS - 1)
            .map(|t| {
                let (c, start) = (&c, &start);
                s.spawn(move || {
                    let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ (t as u64 + 1) << 7);
                    start.wait();
                    let began = Instant::now();
                    let mut rounds = 0;
                    loop {
                        // (The statistics take the cache's lock: asked only past the rounds.)
                        let raced = || c.stats().invalidations > 0;
                        if rounds >= ROUNDS && (raced() || began.elapsed() > RACE_LIMIT) {
                            break;
                        }
                        rounds += 1;
                        let page = rng.below(PAGES) * 2 * PS;
                        let r = match c.register(B + page + rng.below(PS), 1, Access::LOCAL_READ) {
                            Ok(r) => r,
                            // Every registration held by the others, at the entry limit.
                            Err(Error::LimitExceeded { .. }) => continue,
                            Err(e) => panic!("unexpected error {e}"),
                        };
                        let twin = r.clone();
                        assert!(
                            c.registrar().is_live(r.handle().seq),
                            "handed out a dead one"
                        );
                        drop(r);
                        assert!(
                            c.registrar().is_live(twin.handle().seq),
                            "deregistered while a clone was held"
                        );
                        drop(twin);
                    }
                    rounds as u64
                })
            })
            .collect();
        let (c, start, workers_done) = (&c, &start, &workers_done);
        s.spawn(move || {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
            start.wait();
            while !workers_done.load(Ordering::Acquire) {
                c.invalidate(B + rng.below(PAGES) * 2 * PS, 1);
                thread::yield_now();
            }
        });
        let lookups = workers.into_iter().map(|w| w.join().unwrap()).sum();
        workers_done.store(true, Ordering::Release);
        lookups
    });
    let s = c.stats();
    assert!(s.hits + s.misses <= lookups, "{s:?}");
    assert!(s.hits > 0 && s.invalidations > 0, "{s:?}");
    let r = c.registrar();
    assert_eq!(r.registers() - r.deregisters(), s.entries as u64, "{s:?}");
    assert_eq!(s.idle_entries, s.entries, "nothing is held any more: {s:?}");
    c.flush_idle();
    assert_eq!(r.live_count(), 0);
    assert_eq!(r.registers(), r.deregisters());
}

#[test]
fn hits_and_lock_free_releases_race_invalidations() {
    hits_race_invalidations(Options {
        leave_pinned: true,
        max_entries: 0,
        ..Options::default()
    });
}

#[test]
fn hits_race_invalidations_and_evictions() {
    hits_race_invalidations(Options {
        leave_pinned: true,
        max_entries: 2,
        ..Options::default()
    });
}

#[test]
fn hits_and_locked_releases_race_invalidations() {
    hits_race_invalidations(Options {
        leave_pinned: false,
        ..Options::default()
    });
}

/// The cache dropped while other threads still clone and release its registrations:
/// the idle one goes with the cache, each one in use when its last user lets go, once.
#[test]
fn the_cache_dropped_while_other_threads_use_its_registrations() {
    let registrar = Arc::new(TestRegistrar::new());
    for round in 0..200 {
        let c = Rcache::new(Shared(registrar.clone()), UNMONITORED);
        let held: Vec<_> = (0..4)
            .map(|i| c.register(B + 2 * i * PS, PS, Access::LOCAL_READ).unwrap())
            .collect();
        drop(c.register(B + 10 * PS, PS, Access::LOCAL_READ).unwrap());
        let start = Barrier::new(THREADS + 1);
        thread::scope(|s| {
            for t in 0..THREADS {
                let (mine, start, registrar) = (held[t % held.len()].clone(), &start, &registrar);
                s.spawn(move || {
                    start.wait();
                    for _ in 0..100 {
                        let twin = mine.clone();
                        assert!(registrar.is_live(twin.handle().seq), "round {round}");
                        drop(twin);
                    }
                    assert!(registrar.is_live(mine.handle().seq), "round {round}");
                });
            }
            start.wait();
            drop(c);
            drop(held);
        });
        assert_eq!(registrar.live_count(), 0, "round {round}");
    }
    assert_eq!(registrar.registers(), 200 * 5);
    assert_eq!(registrar.registers(), registrar.deregisters());
}
