//! Free-list get + put in steady state.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rbtl_mpool::{AnonymousSource, FreeList, FreeListConfig};

fn bench_free_list(c: &mut Criterion) {
    let config = FreeListConfig {
        frag_size: 8192,
        frag_align: 64,
        frags_per_chunk: 64,
        max_frags: 1024,
    };
    let mut list = FreeList::new(config, Box::new(AnonymousSource::new())).unwrap();
    list.reserve(256).unwrap();

    c.bench_function("free_list get+put", |b| {
        b.iter(|| {
            let frag = list.get().unwrap();
            black_box(frag.as_ptr());
            list.put(black_box(frag));
        })
    });

    c.bench_function("free_list 64 x get then 64 x put", |b| {
        let mut held = Vec::with_capacity(64);
        b.iter(|| {
            for _ in 0..64 {
                held.push(list.get().unwrap());
            }
            for frag in held.drain(..) {
                list.put(frag);
            }
        })
    });
}

criterion_group!(benches, bench_free_list);
criterion_main!(benches);
