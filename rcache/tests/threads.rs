//! Several threads registering, cloning, releasing and invalidating at once.
mod common;

use std::sync::Arc;
use std::thread;

use common::{TestRegistrar, PS};
use rbtl_rcache::{Access, Error, Options, Rcache};

const B: usize = 0x7000_0000;
const THREADS: usize = 4;
const ITERS: usize = 3000;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }
}

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
                                let base = B + rng.below(48) * PS + rng.below(PS as u64);
                                let len = 1 + rng.below(4 * PS as u64);
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
                                    let r = held[rng.below(held.len() as u64)].clone();
                                    assert!(c.registrar().is_live(r.handle().seq));
                                    if held.len() < 8 {
                                        held.push(r);
                                    }
                                }
                            }
                            65..=89 => {
                                if !held.is_empty() {
                                    let i = rng.below(held.len() as u64);
                                    held.swap_remove(i);
                                }
                            }
                            _ => {
                                let base = B + rng.below(52 * PS as u64);
                                c.invalidate(base, 1 + rng.below(3 * PS as u64));
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
