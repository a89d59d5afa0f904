//! Criterion benchmarks of the registration cache with a trivial registrar.
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use rbtl_rcache::{page_size, Access, Options, Rcache, Registrar, RegistrarError};

/// Registers nothing: fake address ranges are fine.
struct Nop;

impl Registrar for Nop {
    type Handle = usize;
    fn register(&self, base: usize, _len: usize, _access: Access) -> Result<usize, RegistrarError> {
        Ok(base)
    }
    fn deregister(&self, _handle: usize) {}
}

const N: usize = 10_000;
const BASE: usize = 0x1000_0000;

/// Start of the i-th fake range: 1-page registrations with a 1-page gap.
fn range(i: usize) -> usize {
    BASE + i * 2 * page_size()
}

fn filled(options: Options) -> std::sync::Arc<Rcache<Nop>> {
    let cache = Rcache::new(Nop, options);
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

    let cache = filled(Options::default());
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
        Nop,
        Options {
            leave_pinned: false,
            ..Options::default()
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

    let cache = filled(Options::default());
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

criterion_group!(rcache, benches);
criterion_main!(rcache);
