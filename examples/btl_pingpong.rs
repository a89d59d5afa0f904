//! The transport floor: a ping-pong straight on a BTL module (no message layer), to
//! compare with `osu latency`. Run under the launcher:
//! `cargo run --release --bin rbtlrun -- -n 2 --bind-to core target/release/examples/btl_pingpong [BTL]`.

use rbtl::btl::{DesFlags, Module, Order, Proc, Tag};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let btl = std::env::args().nth(1).unwrap_or_else(|| "sm".into());
    let mut job = rbtl::pmi::job().expect("run me under rbtlrun -n 2");
    let config = rbtl::configure(&[("btl", &btl)]).expect("configuration");
    let mut modules = rbtl::btl::framework()
        .open(&config, job.modex.as_mut())
        .expect("open");
    job.modex.fence().expect("fence");
    let m: &mut dyn Module = modules[0].as_mut();
    let procs: Vec<Proc> = (0..job.size)
        .map(|rank| Proc {
            rank,
            node: String::new(),
        })
        .collect();
    let eps = m.add_procs(&procs, job.modex.as_mut()).expect("add_procs");
    let (me, peer) = (job.rank, 1 - job.rank);
    let ep = eps[peer as usize].expect("the peer is reachable");
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    m.register_am(
        Tag::USR,
        Box::new(move |_, _| {
            g.fetch_add(1, Ordering::Relaxed);
        }),
    )
    .expect("register");
    job.modex.fence().expect("fence");
    let (iters, skip) = (200_000u64, 1_000u64);
    let payload = [0u8; 8];
    let mut start = Instant::now();
    for i in 0..iters + skip {
        if i == skip {
            start = Instant::now();
        }
        if me == 0 {
            while m
                .sendi(ep, &[], &payload, Order::ANY, DesFlags::empty(), Tag::USR)
                .is_err()
            {
                m.progress();
            }
        }
        while got.load(Ordering::Relaxed) <= i {
            m.progress();
        }
        if me == 1 {
            while m
                .sendi(ep, &[], &payload, Order::ANY, DesFlags::empty(), Tag::USR)
                .is_err()
            {
                m.progress();
            }
        }
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64;
    job.modex.fence().expect("fence");
    if me == 0 {
        println!("btl_pingpong_{btl}_8B_us {us:.3}");
    }
}
