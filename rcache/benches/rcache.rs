//! Criterion benchmarks of the registration cache with a trivial registrar.
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use rbtl_rcache::{page_size, Access, Options, Rcache, Registrar, RegistrarError};
use rbtl_testkit::mem::{map_anywhere, unmap};

/// Registers nothing: fake address ranges are fine. `pins` is what it says of its
/// registrations: false as the registrar of `sm`, `tcp` and `self` (its cache needs no
/// memory monitor), true as a device's (its cache follows the monitor).
struct Nop {
    pins: bool,
}

impl Registrar for Nop {
    type Handle = usize;
    fn register(&self, base: usize, _len: usize, _access: Access) -> Result<usize, RegistrarError> {
        Ok(base)
    }
    fn deregister(&self, _handle: usize) {}
    fn pins_pages(&self) -> bool {
        self.pins
    }
    /// No `MADV_DONTFORK` on a miss: the monitored benches time the monitor alone.
    fn keep_from_children(&self) -> bool {
        false
    }
}

/// The registrar of a cache without monitor.
const UNPINNED: Nop = Nop { pins: false };

const N: usize = 10_000;
const BASE: usize = 0x1000_0000;

/// Start of the i-th fake range: 1-page registrations with a 1-page gap.
fn range(i: usize) -> usize {
    BASE + i * 2 * page_size()
}

/// Made-up addresses under a registrar that pins nothing, so no monitor (the cache
/// structure alone is timed), as the caches of `sm`, `tcp` and `self` with the
/// default options.
fn unmonitored() -> Options {
    Options::default()
}

fn filled(options: Options) -> std::sync::Arc<Rcache<Nop>> {
    let cache = Rcache::new(UNPINNED, options);
    assert!(!cache.is_monitored());
    for i in 0..N {
        drop(
            cache
                .register(range(i), page_size(), Access::LOCAL_READ)
                .unwrap(),
        );
    }
    cache
}

fn benches(c: &mut Criterion) {
    let rw = Access::LOCAL_READ;

    let cache = filled(unmonitored());
    let mut i = 0;
    c.bench_function("lookup hit among 10k (register+release)", |b| {
        b.iter(|| {
            i = (i + 7919) % N;
            let r = cache.register(black_box(range(i) + 64), 256, rw).unwrap();
            black_box(r.handle());
        })
    });
    assert_eq!(cache.stats().misses, N as u64);

    // leave_pinned off: 10k registrations held in use, each fresh range is a
    // miss, registered, released and deregistered.
    let cache = Rcache::new(
        UNPINNED,
        Options {
            leave_pinned: false,
            ..unmonitored()
        },
    );
    let held: Vec<_> = (0..N)
        .map(|i| cache.register(range(i), page_size(), rw).unwrap())
        .collect();
    let mut j = 0;
    c.bench_function("miss + insert + release among 10k", |b| {
        b.iter(|| {
            j = (j + 1) % N;
            let r = cache
                .register(black_box(range(j) + page_size()), page_size(), rw)
                .unwrap();
            black_box(r.handle());
        })
    });
    drop(held);
    assert_eq!(cache.stats().entries, 0);

    let cache = filled(unmonitored());
    let mut k = 0;
    c.bench_function("invalidate one of 10k", |b| {
        b.iter_batched(
            || {
                k = (k + 7919) % N;
                drop(cache.register(range(k), page_size(), rw).unwrap());
                k
            },
            |k| assert_eq!(cache.invalidate(black_box(range(k)), 8), 1),
            BatchSize::NumIterations(1000),
        )
    });
}

/// The memory monitor on real memory: a hit among 10k watched registrations, a miss
/// (which registers the range with userfaultfd), and what an unmap costs when a cached
/// registration covers the pages and when none does.
///
/// `RCACHE_BENCH_MMAP_HOOKS=0` in the environment starts the monitor without its
/// mapping hooks (`rcache_monitor_mmap_hooks=false`): every lookup asks the kernel.
fn monitored(c: &mut Criterion) {
    if std::env::var("RCACHE_BENCH_MMAP_HOOKS").as_deref() == Ok("0") {
        rbtl_rcache::monitor::use_mapping_hooks(false);
    }
    let rw = Access::LOCAL_READ;
    let ps = page_size();
    let cache = Rcache::new(Nop { pins: true }, Options::default());
    if !cache.is_monitored() {
        eprintln!("no memory monitor: {}", rbtl_rcache::monitor::status());
        return;
    }
    eprintln!("memory monitor: {}", rbtl_rcache::monitor::status());
    let arena = map_anywhere(2 * N * ps);
    for i in 0..N {
        drop(cache.register(arena + 2 * i * ps, ps, rw).unwrap());
    }
    let mut i = 0;
    c.bench_function("monitored: lookup hit among 10k (register+release)", |b| {
        b.iter(|| {
            i = (i + 7919) % N;
            let r = cache
                .register(black_box(arena + 2 * i * ps + 64), 256, rw)
                .unwrap();
            black_box(r.handle());
        })
    });
    let mut j = 0;
    c.bench_function(
        "monitored: miss + insert + release (userfaultfd register)",
        |b| {
            b.iter(|| {
                j = (j + 1) % N;
                // The odd pages between the cached ones: each a miss, then invalidated so
                // that the next round misses again.
                let a = arena + (2 * j + 1) * ps;
                drop(cache.register(black_box(a), ps, rw).unwrap());
                cache.invalidate(a, ps);
            })
        },
    );
    let page = map_anywhere(ps);
    c.bench_function("munmap + mmap of a page no registration covers", |b| {
        b.iter(|| {
            // SAFETY: the bench's own page, mapped again at once.
            unsafe { unmap(page, ps) };
            black_box(map_anywhere(ps));
        })
    });
    c.bench_function(
        "munmap + mmap of a watched page (register, release, unmap, apply)",
        |b| {
            b.iter(|| {
                let p = map_anywhere(ps);
                drop(cache.register(p, ps, rw).unwrap());
                // SAFETY: the bench's own page; the cache learns of its unmap.
                unsafe { unmap(p, ps) };
                black_box(cache.stats());
            })
        },
    );
    c.bench_function(
        "mmap + register + release + munmap of an unwatched page (baseline)",
        |b| {
            let plain = Rcache::new(
                UNPINNED,
                Options {
                    leave_pinned: false,
                    ..Options::default()
                },
            );
            b.iter(|| {
                let p = map_anywhere(ps);
                drop(plain.register(p, ps, rw).unwrap());
                // SAFETY: the bench's own page.
                unsafe { unmap(p, ps) };
                black_box(plain.stats());
            })
        },
    );
}

criterion_group!(rcache, benches, monitored);
criterion_main!(rcache);
