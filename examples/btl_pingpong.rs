//! The transport floor: a ping-pong straight on a BTL module (no message layer), to
//! compare with `osu latency`. Run under the launcher:
//! `cargo run --release --bin rbtlrun -- -n 2 --bind-to core target/release/examples/btl_pingpong [BTL [ITERATIONS [get|expect]]]`
//! (`openib` needs `--features openib`). With `get`, rank 0 times 8-byte gets from
//! rank 1 instead (the floor under `osu get-latency`); with `expect`, messages land
//! through expected receives instead of the receive callback, and the wait for them
//! fences its idle polls as the message layer's does.

use rbtl::btl::{
    Access, ActiveMessage, DesFlags, Endpoint, Expected, Local, Module, Proc, Remote, RemoteHandle,
    SendiOutcome, Tag, Transfer, EXPECTED_KEY,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let btl = std::env::args().nth(1).unwrap_or_else(|| "sm".into());
    let iters: u64 = std::env::args()
        .nth(2)
        .map(|n| n.parse().expect("ITERATIONS is a number"))
        .unwrap_or(200_000);
    let mut job = rbtl::pmi::job().expect("run me under rbtlrun -n 2");
    let config = rbtl::configure(&[("btl", &btl)]).expect("configuration");
    let mut modules = rbtl::framework()
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
    let skip = (iters / 100).max(10);
    if std::env::args().nth(3).as_deref() == Some("get") {
        return get_latency(m, ep, &mut job, &btl, iters, skip, &got);
    }
    let payload = [0u8; 8];
    // With `expect`, each message lands in `inbox` through an expected receive, posted
    // before this side sends (so before the peer's next message can arrive).
    let expected = std::env::args().nth(3).as_deref() == Some("expect");
    let mut inbox = [0u8; 8];
    let mut post = |m: &mut dyn Module| {
        let e = Expected {
            endpoint: ep,
            tag: Tag::USR,
            key: [0; EXPECTED_KEY],
            buf: inbox.as_mut_ptr(),
            cap: inbox.len(),
        };
        // SAFETY: `inbox` outlives the loop, and the last receive is withdrawn after it.
        assert!(unsafe { m.expect(e) }, "{btl} takes expected receives");
    };
    let mut start = Instant::now();
    for i in 0..iters + skip {
        if i == skip {
            start = Instant::now();
        }
        if expected && (me == 0 || i == 0) {
            post(m);
        }
        if me == 0 {
            send(m, ep, &payload);
        }
        if expected {
            while m.progress() == 0 || m.take_expected().is_none() {
                rbtl::btl::idle::between_idle_polls();
            }
            if me == 1 {
                post(m);
            }
        } else {
            while got.load(Ordering::Relaxed) <= i {
                m.progress();
            }
        }
        if me == 1 {
            send(m, ep, &payload);
        }
    }
    m.cancel_expected();
    let us = start.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64;
    job.modex.fence().expect("fence");
    if me == 0 {
        let how = if expected { "_expected" } else { "" };
        println!("btl_pingpong_{btl}{how}_8B_us {us:.3}");
    }
}

/// Rank 0 reads 8 bytes of rank 1's memory `iters` times, one at a time.
fn get_latency(
    m: &mut dyn Module,
    ep: Endpoint,
    job: &mut rbtl::pmi::Job,
    btl: &str,
    iters: u64,
    skip: u64,
    got: &AtomicU64,
) {
    let mut mem = vec![7u8; 4096];
    // SAFETY: `mem` outlives the handle, dropped at the end of this function.
    let h = unsafe {
        m.register_mem(
            Some(ep),
            mem.as_mut_ptr() as usize,
            mem.len(),
            Access::all(),
        )
    }
    .expect("register");
    let mut ad = (mem.as_ptr() as u64).to_le_bytes().to_vec();
    ad.extend_from_slice(h.remote().as_bytes());
    job.modex.publish("pingpong_get", &ad).expect("publish");
    job.modex.fence().expect("fence");
    if job.rank == 0 {
        let theirs = job
            .modex
            .lookup(1, "pingpong_get")
            .expect("lookup")
            .expect("rank 1's buffer");
        let raddr = u64::from_le_bytes(theirs[..8].try_into().unwrap());
        let rh = RemoteHandle::from_bytes(&theirs[8..]).expect("handle");
        let done = Arc::new(AtomicU64::new(0));
        let mut start = Instant::now();
        for i in 0..iters + skip {
            if i == skip {
                start = Instant::now();
            }
            let d = done.clone();
            let local = mem.as_mut_ptr() as usize;
            m.get(
                &Transfer::new(ep, Local::new(local, &h), Remote::new(raddr, &rh), 8),
                Box::new(move |_, c| {
                    c.status.expect("get");
                    d.fetch_add(1, Ordering::Relaxed);
                }),
            )
            .expect("get");
            while done.load(Ordering::Relaxed) <= i {
                m.progress();
            }
        }
        let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
        println!("btl_get_{btl}_8B_us {us:.3}");
        send(m, ep, &[]);
        m.flush(None).expect("flush");
    } else {
        // Progress (the connection is made on first use) until rank 0 is done.
        while got.load(Ordering::Relaxed) == 0 {
            m.progress();
        }
    }
    drop(h);
}

/// Send inline, or through the descriptor the transport hands back.
fn send(m: &mut dyn Module, ep: Endpoint, payload: &[u8]) {
    loop {
        match m.sendi(&ActiveMessage::new(ep, Tag::USR, &[], payload)) {
            Ok(SendiOutcome::Sent) => return,
            Ok(SendiOutcome::Descriptor(mut d)) => {
                d.flags |= DesFlags::OWNERSHIP;
                m.send(ep, d, Tag::USR).expect("send");
                return;
            }
            Err(_) => {
                m.progress();
            }
        }
    }
}
