// Long on purpose: one test binary, re-executed as the rank program of its own jobs,
// holds each test beside the rank role it runs, and runs its jobs one at a time; more
// binaries would each link the whole crate and could run their jobs at once on two cores.
//! One node, real processes: the `sm` transport's contract suite across 2 and 4
//! processes (with cross-memory attach and with copies through the rings), its `auto`
//! path switching to cross-memory attach, the message layer (over sm, and over tcp on
//! loopback), and what happens when a rank fails, stops (a peer timeout; a flush of
//! operations through the rings), removes its peers or loses its launcher; and the
//! `osu` binary in those cases. This test binary re-executes itself as the rank
//! program under the launcher; `NODE_TEST_ROLE` selects what a rank does and
//! ranks leave `ok.<rank>` files in `NODE_TEST_DIR`. Each job gets its own
//! `RBTL_SHM_DIR`, checked empty afterwards. `node/stale.rs` holds the roles over
//! memory remapped under cached registrations and over fork, `node/stress.rs` (over
//! `node/churn.rs`) the registration stress of memory that keeps coming and going,
//! `node/served.rs` the message layer's served contexts, `node/served_gets.rs` the gets
//! `sm` serves through its rings, `node/refused_attach.rs` one-sided transfers and
//! rendezvous messages once the kernel refuses cross-memory attach, `node/read_alone.rs`
//! large messages their receivers read without the sender, `node/lent.rs` eager sends
//! that wait for room in the sender's buffer, `node/slow_rings.rs` the eager limit while
//! the rings run slow, `node/placement.rs` whether a node's ranks outnumber the
//! processors they may run on.

#[path = "node/churn.rs"]
mod churn;
mod common;
#[path = "node/lent.rs"]
mod lent;
#[path = "node/placement.rs"]
mod placement;
#[path = "node/read_alone.rs"]
mod read_alone;
#[path = "node/refused_attach.rs"]
mod refused_attach;
#[path = "node/removed.rs"]
mod removed;
#[path = "node/served.rs"]
mod served;
#[path = "node/served_gets.rs"]
mod served_gets;
#[path = "node/slow_rings.rs"]
mod slow_rings;
#[path = "node/stale.rs"]
mod stale;
#[path = "common/stopped_flush.rs"]
mod stopped_flush;
#[path = "common/stopped_peer.rs"]
mod stopped_peer;
#[path = "node/stress.rs"]
mod stress;

use common::watchdog;
use rbtl::btl::{ActiveMessage, Endpoint, Local, Module, Remote, Transfer};
use rbtl::msg::{Comm, Error, Window, ANY_SOURCE, ANY_TAG, WORLD};
use std::path::{Path, PathBuf};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Rank side.

#[test]
fn rank_role_entry() {
    let Ok(role) = std::env::var("NODE_TEST_ROLE") else {
        return;
    };
    match role.as_str() {
        "sm_contract" => role_sm_contract(),
        "sm_auto_path" => role_sm_auto_path(),
        "msg" => role_msg(&[]),
        "msg_mixed_rdma" => {
            // Rank 0 reads its peers' memory only through their own processes.
            let first = std::env::var("PMI_RANK").is_ok_and(|r| r == "0");
            role_msg(if first {
                &[("btl_sm_rdma", "copy")]
            } else {
                &[]
            })
        }
        "window" => role_window(),
        "exit_nonzero" => role_exit_nonzero(),
        "killed_peer" => role_killed_peer(),
        "sent_then_killed" => role_sent_then_killed(),
        "stopped_peer" => {
            let comm = Comm::init(&[]).unwrap();
            stopped_peer::run(comm, stopped_peer::Stop::AtRandom, &report_ok)
        }
        "stopped_peer_with_work" => {
            let comm = Comm::init(&[]).unwrap();
            stopped_peer::run(comm, stopped_peer::Stop::WithWorkPosted, &report_ok)
        }
        "wildcard_after_deaths" => role_wildcard_after_deaths(),
        "wildcard_waits" => role_wildcard_waits(),
        "deadlock" => role_deadlock(),
        "sm_remap" => {
            let (m, eps, job) = sm_module();
            let ep = eps[(job.rank ^ 1) as usize].expect("sm reaches the peer");
            stale::remap_and_fork(m, ep, job, false);
        }
        "msg_remap" => stale::role_msg_remap(&[]),
        "served" => served::run(&report_ok),
        "msg_refused_attach" => refused_attach::run(&report_ok),
        "msg_split_refused" => refused_attach::run_split(&report_ok),
        "msg_read_alone" => read_alone::run(&report_ok),
        "msg_lent" => lent::run(&report_ok, false),
        "msg_slow_rings" => slow_rings::run(&report_ok),
        "msg_lent_receiver_dies" => lent::run(&report_ok, true),
        "msg_placement" => placement::run(&report_ok),
        "msg_named_sender_dies" => {
            watchdog(Duration::from_secs(30));
            refused_attach::run_sender_dies(&report_ok, 256 << 10, true)
        }
        "msg_split_sender_dies" => {
            watchdog(Duration::from_secs(30));
            refused_attach::run_sender_dies(&report_ok, 4 << 20, false)
        }
        "sm_stopped_flush" => {
            let (mut m, eps, mut job) = sm_module();
            stopped_flush::run(m.as_mut(), &eps, &mut job, "btl_sm_flush_timeout");
            report_ok(job.rank, "ok");
        }
        "sm_served_gets" => {
            let (mut m, eps, mut job) = sm_module();
            served_gets::run(m.as_mut(), &eps, &mut job);
            report_ok(job.rank, "ok");
        }
        "sm_removed" => {
            let (mut m, eps, mut job) = sm_module();
            removed::run(m.as_mut(), &eps, &mut job);
            report_ok(job.rank, "ok");
        }
        "sm_stress" => {
            let (mut m, eps, mut job) = sm_module();
            let ep = eps[(job.rank ^ 1) as usize].expect("sm reaches the peer");
            let plan = stress::Plan::rounds(100_000, churn::MAX_LEN, Duration::from_secs(1800));
            stress::run(m.as_mut(), ep, job.rank, &plan);
            job.modex.fence().unwrap();
            report_ok(job.rank, "ok");
        }
        other => panic!("unknown NODE_TEST_ROLE {other:?}"),
    }
}

pub(crate) fn report_ok(rank: u32, what: &str) {
    let dir = PathBuf::from(std::env::var_os("NODE_TEST_DIR").expect("NODE_TEST_DIR"));
    std::fs::write(dir.join(format!("{what}.{rank}")), b"ok").unwrap();
}

/// The sm module alone, connected to every rank, as a transport test sees it.
fn sm_module() -> (Box<dyn Module>, Vec<Option<Endpoint>>, rbtl::pmi::Job) {
    let mut job = rbtl::pmi::job().unwrap();
    let config = rbtl::configure(&[("btl", "sm")]).unwrap();
    let mut modules = rbtl::framework().open(&config, job.modex.as_mut()).unwrap();
    job.modex.fence().unwrap();
    let mut m = modules.pop().unwrap();
    assert_eq!(m.name(), "sm");
    let eps = m
        .add_procs(&common::procs(job.size), job.modex.as_mut())
        .unwrap();
    assert!(
        eps[job.rank as usize].is_none(),
        "sm does not reach the process itself"
    );
    (m, eps, job)
}

fn role_sm_contract() {
    let (mut m, eps, mut job) = sm_module();
    // With 4 ranks, several rings at once.
    let partners = common::contract_partners(&job);
    common::contract_suite(m.as_mut(), &eps, &mut job, &partners);
    report_ok(job.rank, "ok");
}

/// `btl_sm_rdma=auto` with a switch rate no ring reaches: rank 0's first put and get go
/// through the rings (while rank 1 progresses), the next ones by cross-memory attach,
/// which they can only be: rank 1 then sits in a PMI fence without progressing.
fn role_sm_auto_path() {
    use rbtl::btl::{Access, RdmaCompletion, Tag};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    const LEN: usize = 1 << 20;
    let (mut m, eps, mut job) = sm_module();
    let (rank, peer) = (job.rank, job.rank ^ 1);
    let ep = eps[peer as usize].expect("sm reaches the peer");
    let all = Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    // Rank 1's buffer: the first half for gets (a pattern), the second for puts.
    let mut mem: Vec<u8> = (0..2 * LEN).map(|i| (i % 251) as u8).collect();
    // SAFETY: `mem` outlives the handle (dropped at the end of this function, after it),
    // and it is not resized.
    let handle =
        unsafe { m.register_mem(Some(ep), mem.as_mut_ptr() as usize, 2 * LEN, all) }.unwrap();
    let (raddr, rh) =
        common::swap_regions(&mut job, "auto_path", mem.as_ptr() as u64, &handle, peer);
    let heard = common::arrivals(m.as_mut(), Tag::USR);
    if rank == 1 {
        // Progress until rank 0's ring transfers are done, then stop progressing.
        while heard.load(Ordering::Acquire) == 0 {
            m.progress();
        }
        job.modex.fence().unwrap();
        let put: Vec<u8> = (0..LEN).map(|i| (i % 13) as u8).collect();
        assert!(mem[LEN..] == put[..], "rank 0's puts landed");
        drop(handle);
        report_ok(rank, "ok");
        return;
    }
    let mut out = vec![0u8; LEN];
    let src: Vec<u8> = (0..LEN).map(|i| (i % 13) as u8).collect();
    // SAFETY: both buffers outlive their handles (dropped below) and are not resized.
    let (out_h, src_h) = unsafe {
        (
            m.register_mem(Some(ep), out.as_mut_ptr() as usize, LEN, all)
                .unwrap(),
            m.register_mem(Some(ep), src.as_ptr() as usize, LEN, all)
                .unwrap(),
        )
    };
    let done = Arc::new(AtomicUsize::new(0));
    let mut transfer = |m: &mut dyn Module, put: bool| {
        let before = done.load(Ordering::Acquire);
        let d = done.clone();
        let cb = Box::new(move |_: &mut dyn Module, c: RdmaCompletion| {
            c.status.expect("the transfer completes");
            d.fetch_add(1, Ordering::Release);
        });
        let order = rbtl::btl::Order::ANY;
        if put {
            m.put(
                &Transfer::new(
                    ep,
                    Local::new(src.as_ptr() as usize, &src_h),
                    Remote::new(raddr + LEN as u64, &rh),
                    LEN,
                )
                .ordered(order),
                cb,
            )
        } else {
            m.get(
                &Transfer::new(
                    ep,
                    Local::new(out.as_mut_ptr() as usize, &out_h),
                    Remote::new(raddr, &rh),
                    LEN,
                )
                .ordered(order),
                cb,
            )
        }
        .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while done.load(Ordering::Acquire) == before {
            m.progress();
            assert!(
                std::time::Instant::now() < deadline,
                "a transfer hung (put: {put})"
            );
        }
    };
    // Through the rings: never measured yet.
    transfer(m.as_mut(), false);
    transfer(m.as_mut(), true);
    let told = m.sendi(
        &ActiveMessage::new(ep, Tag::USR, &[], &[1])
            .ordered(rbtl::btl::Order::ANY)
            .flagged(rbtl::btl::DesFlags::empty()),
    );
    assert!(
        matches!(told, Ok(rbtl::btl::SendiOutcome::Sent)),
        "a one-byte message fits"
    );
    // Rank 1 no longer progresses: only cross-memory attach can complete these.
    for _ in 0..3 {
        transfer(m.as_mut(), false);
        transfer(m.as_mut(), true);
    }
    assert!(
        out.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
        "gets read rank 1's pattern"
    );
    drop((out_h, src_h));
    job.modex.fence().unwrap();
    report_ok(rank, "ok");
}

fn role_msg(settings: &[(&str, &str)]) {
    let mut comm = Comm::init(settings).unwrap();
    let (me, n) = (comm.rank(), comm.size());
    let eager = comm
        .modules()
        .map(|m| m.attributes().eager_limit)
        .min()
        .unwrap();
    let pattern = |src: u32, i: usize, len: usize| (src as usize * 131 + i * 7 + len) as u8;
    // Every rank sends a mix of sizes around the eager limit to every other, tags
    // counting up; half the receives are posted before the sends, half after.
    let sizes = message_sizes(me, eager);
    let bufs: Vec<Vec<u8>> = sizes
        .iter()
        .map(|&len| (0..len).map(|i| pattern(me, i, len)).collect())
        .collect();
    let peers: Vec<u32> = (0..n).filter(|&r| r != me).collect();
    let mut inbox: Vec<Vec<Vec<u8>>> = peers
        .iter()
        .map(|&p| {
            message_sizes(p, eager)
                .iter()
                .map(|&l| vec![0; l])
                .collect()
        })
        .collect();
    let (mut early, mut late) = (Vec::new(), Vec::new());
    for (row, &p) in inbox.iter_mut().zip(&peers) {
        for (k, buf) in row.iter_mut().enumerate() {
            if k % 2 == 0 {
                early.push((p, k, buf));
            } else {
                late.push((p, buf));
            }
        }
    }
    comm.scope(|s| {
        for (p, k, buf) in early {
            s.irecv(buf, Some(p), Some(k as i32)).unwrap();
        }
        for &p in &peers {
            for (k, b) in bufs.iter().enumerate() {
                s.isend(b, p, k as i32).unwrap();
            }
        }
        for (p, buf) in late {
            s.irecv(buf, Some(p), ANY_TAG).unwrap();
        }
    })
    .unwrap();
    for (pi, &p) in peers.iter().enumerate() {
        for (k, got) in inbox[pi].iter().enumerate() {
            let len = got.len();
            assert!(
                got.iter()
                    .enumerate()
                    .all(|(i, &b)| b == pattern(p, i, len)),
                "message {k} from {p} ({len} bytes)"
            );
        }
    }
    comm.barrier().unwrap();

    // Per-peer ordering with any-tag: same tag sequence arrives in send order.
    if me == 0 {
        for k in 0..100u32 {
            let mut b = [0u8; 4];
            let st = comm.recv(&mut b, Some(1), ANY_TAG).unwrap();
            assert_eq!(
                (u32::from_le_bytes(b), st.tag, st.source),
                (k, (k % 3) as i32, 1)
            );
        }
    } else if me == 1 {
        for k in 0..100u32 {
            comm.send(&k.to_le_bytes(), 0, (k % 3) as i32).unwrap();
        }
    }
    // Any-source: rank 0 collects one message from every other rank.
    if me == 0 {
        let mut seen = vec![false; n as usize];
        for _ in 1..n {
            let mut b = [0u8; 4];
            let st = comm.recv(&mut b, ANY_SOURCE, Some(7)).unwrap();
            assert_eq!(u32::from_le_bytes(b), st.source);
            assert!(!seen[st.source as usize], "one message per source");
            seen[st.source as usize] = true;
        }
    } else {
        comm.send(&me.to_le_bytes(), 0, 7).unwrap();
    }
    // Truncation, eager and rendezvous: a clear error, and the sender completes.
    if me == 0 {
        for len in [100usize, 300 << 10] {
            let mut small = vec![0u8; 10];
            match comm.recv(&mut small, Some(1), Some(9)) {
                Err(Error::Truncated {
                    len: l,
                    capacity: 10,
                    sender: 1,
                    tag: 9,
                }) => assert_eq!(l, len),
                other => panic!("expected truncation of {len} bytes, got {other:?}"),
            }
        }
    } else if me == 1 {
        for len in [100usize, 300 << 10] {
            // Sent once rank 0's receive is (almost surely) posted, so that over sm it
            // went to the transport, which must hand it back for these messages.
            std::thread::sleep(Duration::from_millis(20));
            comm.send(&vec![1u8; len], 0, 9).unwrap();
        }
    }
    // A blocking receive that went to the transport: a message with another tag that
    // arrives first waits as unexpected, the matching one lands, the first is then
    // received; two matching messages in a row arrive in order.
    if me == 0 {
        let mut b = [0u8; 8];
        let st = comm.recv(&mut b, Some(1), Some(5)).unwrap();
        assert_eq!((st.tag, st.len, &b[..3]), (5, 3, &b"tag"[..]));
        let st = comm.recv(&mut b, Some(1), Some(6)).unwrap();
        assert_eq!((st.tag, st.len, &b[..5]), (6, 5, &b"other"[..]));
        for k in 0..2u8 {
            let st = comm.recv(&mut b, Some(1), Some(5)).unwrap();
            assert_eq!((st.len, b[0]), (1, k), "in order");
        }
    } else if me == 1 {
        // (Once rank 0's receive is, almost surely, posted.)
        std::thread::sleep(Duration::from_millis(20));
        comm.send(b"other", 0, 6).unwrap();
        comm.send(b"tag", 0, 5).unwrap();
        comm.send(&[0], 0, 5).unwrap();
        comm.send(&[1], 0, 5).unwrap();
    }
    // A request is waited for once; a second wait is an error, not a hang.
    let mut inb = [0u8; 4];
    // SAFETY: `inb` outlives the request, which is waited for below.
    let req = unsafe { comm.irecv_raw(inb.as_mut_ptr(), inb.len(), Some(me), Some(3)) }.unwrap();
    comm.send(&[5u8; 4], me, 3).unwrap();
    comm.wait(req).unwrap();
    assert!(matches!(comm.wait(req), Err(Error::UnknownRequest(_))));
    // Messages to itself go through the self transport.
    assert_eq!(comm.transport_to(me), Some("self"));
    // Every rank here runs on this node; a rank beyond the job shares none.
    assert!((0..n).all(|r| comm.same_node(me, r)));
    assert!(!comm.same_node(me, n));
    let mut back = [0u8; 3];
    comm.scope(|s| {
        s.irecv(&mut back, Some(me), Some(1)).unwrap();
        s.isend(b"abc", me, 1).unwrap();
    })
    .unwrap();
    assert_eq!(&back, b"abc");
    comm.finalize().unwrap();
    report_ok(me, "ok");
}

/// The sizes rank `src` sends in the message test: small, around the eager limit,
/// medium and over a megabyte, from a generator seeded by the rank.
fn message_sizes(src: u32, eager: usize) -> Vec<usize> {
    let mut r = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(src);
    let mut next = || {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        r
    };
    (0..40)
        .map(|i| match i % 4 {
            0 => (next() % 64) as usize,
            1 => eager - 4 + (next() % 8) as usize,
            2 => (next() % (256 << 10)) as usize,
            _ => (1 << 20) + (next() % 4096) as usize,
        })
        .collect()
}

fn role_window() {
    let mut comm = Comm::init(&[]).unwrap();
    let (me, n) = (comm.rank(), comm.size());
    let mut win = Window::allocate(&mut comm, 1 << 20).unwrap();
    let right = (me + 1) % n;
    // Each rank writes its pattern into its right neighbour's window, small and large.
    let small: Vec<u8> = (0..64).map(|i| (i as u32 + me) as u8).collect();
    let large: Vec<u8> = (0..(512 << 10))
        .map(|i| (i as u32 * 3 + me) as u8)
        .collect();
    win.put(&mut comm, right, 0, &small).unwrap();
    win.put(&mut comm, right, 4096, &large).unwrap();
    win.flush(&mut comm).unwrap();
    comm.barrier().unwrap();
    let left = (me + n - 1) % n;
    let mut got = vec![0u8; 64];
    win.read_local(0, &mut got).unwrap();
    assert_eq!(
        got,
        (0..64).map(|i| (i as u32 + left) as u8).collect::<Vec<_>>()
    );
    // Get it back from the neighbour and compare with what we put there.
    let mut back = vec![0u8; large.len()];
    win.get(&mut comm, right, 4096, &mut back).unwrap();
    assert_eq!(back, large);
    let e = win.put(&mut comm, right, (1 << 20) - 4, &small);
    assert!(
        matches!(e, Err(Error::OutOfWindow { rank, .. }) if rank == right),
        "{e:?}"
    );
    // Freed windows give their memory back to the sm heap (4 MiB here): windows of
    // 3 MiB, one after another, all live there.
    let first = rbtl::btl::SharedMem {
        ptr: win.as_ptr(),
        len: win.len(),
    };
    win.free(&mut comm).unwrap();
    for round in 0..6u8 {
        let mut win = Window::allocate(&mut comm, 3 << 20).unwrap();
        assert!(win.is_direct(right), "window {round} is in the sm heap");
        win.put(&mut comm, right, (3 << 20) - 1, &[round]).unwrap();
        comm.barrier().unwrap();
        let mut got = [0u8];
        win.read_local((3 << 20) - 1, &mut got).unwrap();
        assert_eq!(got, [round]);
        win.free(&mut comm).unwrap();
    }
    // The transport refuses memory it did not hand out, or took back already.
    let sm = comm.modules().find(|m| m.name() == "sm").unwrap();
    for bad in [
        first,
        rbtl::btl::SharedMem {
            ptr: 4096 as *mut u8,
            len: 4096,
        },
    ] {
        let e = sm.free_shared(bad);
        assert!(
            matches!(e, Err(rbtl::btl::Error::UnknownSharedMemory { .. })),
            "{e:?}"
        );
    }
    comm.finalize().unwrap();
    report_ok(me, "ok");
}

fn role_exit_nonzero() {
    let mut comm = Comm::init(&[]).unwrap();
    comm.barrier().unwrap();
    if comm.rank() == 1 {
        std::process::exit(3);
    }
    // The others wait for a message that never comes; the launcher ends them.
    let mut b = [0u8; 1];
    let _ = comm.recv(&mut b, Some(1), Some(0));
    std::thread::sleep(Duration::from_secs(600));
}

fn role_killed_peer() {
    let mut comm = Comm::init(&[]).unwrap();
    let me = comm.rank();
    let mut b = [0u8; 8];
    if me == 1 {
        for _ in 0..10 {
            comm.recv(&mut b, Some(0), Some(0)).unwrap();
            comm.send(&b, 0, 0).unwrap();
        }
        // SAFETY: raising a signal on ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    if me == 0 {
        for _ in 0..10 {
            comm.send(&b, 1, 0).unwrap();
            comm.recv(&mut b, Some(1), Some(0)).unwrap();
        }
        match comm.recv(&mut b, Some(1), Some(0)) {
            Err(Error::PeerFailed { rank: 1, .. }) => {
                report_ok(me, "peer_failed");
                std::process::exit(1);
            }
            other => panic!("expected a peer failure, got {other:?}"),
        }
    }
    std::thread::sleep(Duration::from_secs(600));
}

/// The eager limit and rings of `node/lent.rs`.
const LENT_ENV: [(&str, &str); 2] = [
    ("RBTL_BTL_SM_EAGER_LIMIT", "65600"),
    ("RBTL_BTL_SM_RING_BYTES", "128k"),
];

/// A lent eager send whose receiver is killed before receiving fails with the end
/// (`node/lent.rs`), rather than waiting for room.
#[test]
fn a_lent_eager_send_fails_when_its_receiver_dies() {
    let failed = ("lent_failed", "rank 0's lent send failed with rank 1's end");
    let code = expect_rank_0_reported("msg_lent_receiver_dies", 2, &LENT_ENV, failed);
    assert!([128 + libc::SIGKILL, 1].contains(&code), "job code {code}");
}

/// Rank 1 sends two messages, hears that both arrived and is killed; rank 0 learns of
/// its end (a receive of another tag fails), then still probes and receives both,
/// while a probe or a receive that nothing matches fails with the end.
fn role_sent_then_killed() {
    watchdog(Duration::from_secs(30));
    let mut comm = Comm::init(&[]).unwrap();
    let me = comm.rank();
    let mut b = [0u8; 8];
    if me == 1 {
        comm.send(&[1u8; 8], 0, 1).unwrap();
        comm.send(&[2u8; 8], 0, 2).unwrap();
        comm.recv(&mut b, Some(0), Some(9)).unwrap();
        // SAFETY: raising a signal on ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    // (Messages of a pair arrive in order: the second there, both are.)
    while comm.iprobe_in(WORLD, Some(1), Some(2)).unwrap().is_none() {}
    comm.send(&b, 1, 9).unwrap();
    let ended = |e: Option<&Error>| matches!(e, Some(Error::PeerFailed { rank: 1, .. }));
    let r = comm.recv(&mut b, Some(1), Some(3));
    assert!(ended(r.as_ref().err()), "a receive nothing matches: {r:?}");
    comm.recv(&mut b, Some(1), Some(1)).unwrap();
    assert_eq!(b, [1u8; 8]);
    assert!(comm.iprobe_in(WORLD, Some(1), Some(2)).unwrap().is_some());
    comm.recv(&mut b, Some(1), Some(2)).unwrap();
    assert_eq!(b, [2u8; 8]);
    let p = comm.iprobe_in(WORLD, Some(1), Some(2));
    assert!(ended(p.as_ref().err()), "a probe nothing matches: {p:?}");
    report_ok(me, "late_messages");
    std::process::exit(0);
}

/// The message layer of a rank of the wildcard tests, once every rank has it (a
/// barrier), and this rank; a hang guard ends the rank after 30 s.
fn wildcard_comm() -> (Comm, u32) {
    watchdog(Duration::from_secs(30));
    let mut comm = Comm::init(&[]).unwrap();
    let me = comm.rank();
    comm.barrier().unwrap();
    (comm, me)
}

/// Ranks 1 and 2 die one after the other; rank 0's receives from any source fail
/// only once no rank is left that could satisfy them.
fn role_wildcard_after_deaths() {
    let (mut comm, me) = wildcard_comm();
    let mut b = [0u8; 4];
    match me {
        1 => {
            // SAFETY: raising a signal on ourselves.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        2 => {
            // Once rank 0 has (almost surely) seen rank 1 die: its receive must wait
            // for this message, not fail.
            std::thread::sleep(Duration::from_millis(300));
            comm.send(&2u32.to_le_bytes(), 0, 5).unwrap();
            // Received (the launcher ends a job with a failed rank after 5 s).
            comm.recv(&mut b, Some(0), Some(6)).unwrap();
            // SAFETY: as above.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        _ => {}
    }
    let st = comm.recv(&mut b, ANY_SOURCE, Some(5)).unwrap();
    assert_eq!((st.source, u32::from_le_bytes(b)), (2, 2));
    comm.send(&[0; 4], 2, 6).unwrap();
    match comm.recv(&mut b, ANY_SOURCE, Some(5)) {
        Err(Error::AllFailed { failed }) => {
            let ranks: Vec<u32> = failed.iter().map(|f| f.0).collect();
            assert_eq!(ranks, [1, 2], "{failed:?}");
        }
        other => panic!("expected the wildcard receive to fail, got {other:?}"),
    }
    // A non-blocking one fails when waited for.
    // SAFETY: `b` outlives the request, waited for below.
    let req = unsafe { comm.irecv_raw(b.as_mut_ptr(), b.len(), ANY_SOURCE, ANY_TAG) }.unwrap();
    assert!(matches!(comm.wait(req), Err(Error::AllFailed { .. })));
    report_ok(me, "wildcard_failed");
    std::process::exit(1);
}

/// With `msg_peer_timeout` 1 s. Ranks that compute (stay out of the layer) for longer
/// than that are waited for: rank 0's receive from rank 1, then its receives from any
/// source (blocking and non-blocking), get their messages after 2.5 s. A receive from
/// any source that no rank will satisfy, while ranks 1 and 2 wait in a barrier for
/// rank 0, fails with the timeout (the job waits on itself); no rank is treated as
/// failed: the barriers after each phase pass.
fn role_wildcard_waits() {
    let (mut comm, me) = wildcard_comm();
    let mut b = [0u8; 4];
    let computing = Duration::from_millis(2500);
    // The ranks start their clocks apart by up to the skew of leaving a barrier (or
    // of starting): a wait is checked against the computing time less that, still
    // well past the timeout.
    let at_least = computing - Duration::from_millis(300);
    let start = std::time::Instant::now();
    match me {
        0 => {
            let st = comm.recv(&mut b, Some(1), Some(5)).unwrap();
            assert_eq!(st.source, 1);
            assert!(start.elapsed() >= at_least, "{:?}", start.elapsed());
        }
        1 => {
            std::thread::sleep(computing);
            comm.send(&[1; 4], 0, 5).unwrap();
        }
        _ => {}
    }
    comm.barrier().unwrap();
    let start = std::time::Instant::now();
    if me == 0 {
        let st = comm.recv(&mut b, ANY_SOURCE, Some(5)).unwrap();
        assert_eq!(st.source, 2);
        assert!(start.elapsed() >= at_least, "{:?}", start.elapsed());
        // SAFETY: `b` outlives the request, waited for here.
        let req = unsafe { comm.irecv_raw(b.as_mut_ptr(), b.len(), ANY_SOURCE, ANY_TAG) };
        assert_eq!(comm.wait(req.unwrap()).unwrap().source, 1);
        assert!(
            start.elapsed() >= computing + at_least,
            "{:?}",
            start.elapsed()
        );
    } else {
        std::thread::sleep(computing * (3 - me));
        comm.send(&[me as u8; 4], 0, 5).unwrap();
    }
    comm.barrier().unwrap();
    report_ok(me, "wildcard_waited");
    if me == 0 {
        let start = std::time::Instant::now();
        match comm.recv(&mut b, ANY_SOURCE, Some(5)) {
            Err(Error::AnySourceTimeout { live, waited }) => {
                assert_eq!(live, [1, 2]);
                assert!(waited >= Duration::from_secs(1), "reported {waited:?}");
                let took = start.elapsed();
                assert!(took >= Duration::from_secs(1), "gave up after {took:?}");
            }
            other => panic!("expected the wildcard receive to time out, got {other:?}"),
        }
    }
    // (Ranks 1 and 2 wait in it for rank 0: as long as rank 0 waits, from the last
    // message of the barrier before; the lowest rank decides for the job.)
    comm.barrier().unwrap();
    report_ok(me, "wildcard_timed_out");
    comm.finalize().unwrap();
}

/// With `msg_peer_timeout` 1 s, two ranks each receive from the other, which never
/// sends: they give up with `Stalled` once both have waited the timeout (one may
/// instead learn of the other's end first: it gave up, and exits).
fn role_deadlock() {
    let (mut comm, me) = wildcard_comm();
    let mut b = [0u8; 4];
    let start = std::time::Instant::now();
    match comm.recv(&mut b, Some(1 - me), Some(5)) {
        Err(Error::Stalled { rank, waited }) => {
            assert_eq!(rank, 1 - me);
            assert!(waited >= Duration::from_secs(1), "reported {waited:?}");
            assert!(start.elapsed() >= Duration::from_secs(1));
            report_ok(me, "stalled");
        }
        Err(Error::PeerFailed { rank, .. } | Error::PeerTimeout { rank, .. }) if rank == 1 - me => {
            report_ok(me, "failed")
        }
        other => panic!("expected the receive to stall, got {other:?}"),
    }
    std::process::exit(1);
}

// ---------------------------------------------------------------------------
// Launcher side.

struct Job {
    code: i32,
    dir: PathBuf,
}

/// One job at a time: ranks poll, and two cores are all there is.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(role: &str, ranks: u32, extra_env: &[(&str, &str)]) -> Job {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    // One directory per job, even for jobs of the same role and size.
    static JOBS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "rbtl-node-{}-{role}-{ranks}-{n}",
        std::process::id()
    ));
    let shm = dir.join("shm");
    std::fs::create_dir_all(&shm).unwrap();
    let mut env = vec![
        ("NODE_TEST_ROLE".to_string(), role.to_string()),
        ("NODE_TEST_DIR".to_string(), dir.display().to_string()),
        ("RBTL_SHM_DIR".to_string(), shm.display().to_string()),
    ];
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let code = common::launch_ranks(ranks, env);
    let left: Vec<_> = std::fs::read_dir(&shm).unwrap().collect();
    assert!(
        left.is_empty(),
        "{role}: shared-memory segments left behind: {left:?}"
    );
    Job { code, dir }
}

fn oks(dir: &Path, what: &str, ranks: u32) -> usize {
    (0..ranks)
        .filter(|r| dir.join(format!("{what}.{r}")).exists())
        .count()
}

/// Run `role` on `ranks` ranks with `env`, which must leave rank 0's report `what`
/// (`says` what it means); the job's exit code.
fn expect_rank_0_reported(
    role: &str,
    ranks: u32,
    env: &[(&str, &str)],
    (what, says): (&str, &str),
) -> i32 {
    let job = run(role, ranks, env);
    assert_eq!(
        oks(&job.dir, what, 1),
        1,
        "{role}: {says} (job code {})",
        job.code
    );
    std::fs::remove_dir_all(job.dir).unwrap();
    job.code
}

fn expect_all_ok(role: &str, ranks: u32, env: &[(&str, &str)]) {
    let job = run(role, ranks, env);
    assert_eq!(job.code, 0, "{role} with {ranks} ranks {env:?}");
    assert_eq!(
        oks(&job.dir, "ok", ranks),
        ranks as usize,
        "{role}: every rank reported success"
    );
    std::fs::remove_dir_all(job.dir).unwrap();
}

common::all_ok_tests! {
    sm_contract_two_ranks_cross_memory_attach: "sm_contract", 2, &[("RBTL_BTL_SM_RDMA", "cma")];

    // The default path choice: small transfers through the rings, unless asked to
    // need nothing of the target (`unattended_get`).
    sm_contract_two_ranks_auto: "sm_contract", 2, &[("RBTL_BTL_SM_RDMA", "auto")];

    sm_contract_four_ranks_copy_through_rings_small_rings_and_limits: "sm_contract", 4, &[
        ("RBTL_BTL_SM_RDMA", "copy"),
        ("RBTL_BTL_SM_RING_SLOTS", "16"),
        ("RBTL_BTL_SM_RING_BYTES", "128k"),
        ("RBTL_BTL_SM_FREE_LIST_MAX", "4"),
        ("RBTL_BTL_SM_PUT_LIMIT", "4096"),
        ("RBTL_BTL_SM_PUT_ALIGNMENT", "8"),
        ("RBTL_BTL_SM_GET_LIMIT", "3000"),
        ("RBTL_BTL_SM_GET_ALIGNMENT", "4"),
    ];

    sm_flush_names_a_stopped_peer_after_its_timeout_and_its_operations_complete_once_it_runs:
        "sm_stopped_flush", 3, &[
            ("RBTL_BTL_SM_RDMA", "copy"),
            ("RBTL_BTL_SM_FLUSH_TIMEOUT", "1000"),
        ];

    sm_peers_a_rank_removed_fail_it_at_once: "sm_removed", 5, &[
        ("RBTL_BTL_SM_RDMA", "copy"),
        ("RBTL_BTL_SM_FLUSH_TIMEOUT", "60000"),
    ];

    // No ring copies at 1 TB/s: every measured ring counts as slow.
    sm_auto_switches_large_transfers_to_cross_memory_attach_when_rings_are_slow:
        "sm_auto_path", 2, &[
            ("RBTL_BTL_SM_RDMA", "auto"),
            ("RBTL_BTL_SM_CMA_BELOW", "1000000000"),
        ];

    /// Gets served through the rings hold back no send of the serving rank
    /// (`node/served_gets.rs`).
    sm_sends_overtake_the_data_of_gets_being_served:
        "sm_served_gets", 2, &[("RBTL_BTL_SM_RDMA", "copy")];

    /// One rank under `btl_sm_rdma = copy`, the others reading memory by cross-memory
    /// attach: the others' rendezvous sends to it name their buffers with a registration
    /// (it cannot read them by address), and every message arrives.
    message_layer_with_one_rank_copying: "msg_mixed_rdma", 3, &[];

    /// The message layer's cached registrations of a send buffer that is remapped between
    /// sends: each receive gets the buffer's contents at the time of its send.
    message_layer_sends_from_a_remapped_buffer: "msg_remap", 2, &[];

    /// Memory remapped under a cached `sm` registration: the cache drops it, puts land in
    /// the new memory and never in the old pages, and a fork changes nothing for the parent.
    sm_transfers_into_remapped_memory_and_after_fork: "sm_remap", 2, &[];

    /// 100,000 rounds of memory taken and given back in random ways, registered through
    /// sm's cache by one rank and put into (and read back) by the other, without one wrong
    /// result (`node/stress.rs`; over sm this proves the path end to end: a put names the
    /// memory by address, so no cached registration could send it to old pages).
    sm_registration_stress_of_memory_that_comes_and_goes: "sm_stress", 2, &[];

    /// One-sided transfers and rendezvous with rank 0's cross-memory attach refused after
    /// wire-up (`node/refused_attach.rs`), memory named by address below 1 MiB whatever
    /// the host's start-up probe finds.
    transfers_and_rendezvous_go_with_a_registration_once_attach_is_refused:
        "msg_refused_attach", 2, &[("RBTL_BTL_SM_BY_ADDRESS_BELOW", "1m")];

    /// Large messages read by their receivers while the sender stays out of the library
    /// (`node/read_alone.rs`), named by address below 1 MiB as above.
    unsplit_messages_and_those_of_a_sender_busy_with_others_need_no_sender:
        "msg_read_alone", 3, &[("RBTL_BTL_SM_BY_ADDRESS_BELOW", "1m")];

    /// Eager sends that find the ring full while its receiver stays away
    /// (`node/lent.rs`): large ones wait in their buffers, small ones are copied, and all
    /// arrive in order.
    eager_sends_waiting_for_room_keep_large_payloads_in_their_buffers:
        "msg_lent", 2, &LENT_ENV;

    /// Where the probe chose the eager limit, slow rings lower it for nonblocking sends
    /// and `send_standard_in`, not for `send` (`node/slow_rings.rs`); no ring reaches
    /// the switch rate.
    eager_limit_falls_for_nonblocking_sends_while_the_rings_run_slow:
        "msg_slow_rings", 2, &[("RBTL_BTL_SM_CMA_BELOW", "1000000000")];

    large_messages_copied_by_both_ranks_arrive_when_either_copy_is_refused:
        "msg_split_refused", 3, &[];

    windows_put_get_across_ranks: "window", 3, &[("RBTL_BTL_SM_HEAP_SIZE", "4M")];
}

#[test]
fn message_layer_two_and_four_ranks() {
    expect_all_ok("msg", 2, &[]);
    expect_all_ok("msg", 4, &[("RBTL_BTL_SM_RDMA", "cma")]);
    // Large messages read by the receiver alone, not split between the two.
    expect_all_ok("msg", 2, &[("RBTL_MSG_SPLIT_FROM", "0")]);
    // No size worth naming by address alone: split offers carry a registration, lone
    // messages are split and those of a stream read whole through the rings; and the
    // other way, named by address below 1 MiB.
    expect_all_ok("msg", 2, &[("RBTL_BTL_SM_BY_ADDRESS_BELOW", "0")]);
    expect_all_ok("msg", 3, &[("RBTL_BTL_SM_BY_ADDRESS_BELOW", "1m")]);
}

#[test]
fn a_receive_waiting_for_its_sender_fails_when_the_sender_dies() {
    // Waiting for a registration (rank 0's attach refused), then for the half of a
    // large message the sender was to write.
    let failed = (
        "peer_failed",
        "rank 0's receive failed with rank 1's failure",
    );
    for role in ["msg_named_sender_dies", "msg_split_sender_dies"] {
        expect_rank_0_reported(role, 2, &[], failed);
    }
}

#[test]
fn message_layer_over_tcp() {
    // (The launcher's environment keeps tcp on loopback.)
    expect_all_ok("msg", 2, &[("RBTL_BTL", "self,tcp")]);
    // A get limit: rendezvous gets go in pieces within it.
    expect_all_ok(
        "msg",
        3,
        &[
            ("RBTL_BTL", "self,tcp"),
            ("RBTL_BTL_TCP_LINKS", "2"),
            ("RBTL_BTL_TCP_GET_LIMIT", "100000"),
        ],
    );
}

/// Served contexts (how the MPI library ships accumulates to their target), over
/// sm and over tcp.
#[test]
fn message_layer_serves_requests() {
    expect_all_ok("served", 3, &[]);
    expect_all_ok("served", 2, &[("RBTL_BTL", "self,tcp")]);
}

#[test]
fn a_rank_exiting_non_zero_ends_the_job_with_its_code() {
    let job = run("exit_nonzero", 3, &[]);
    assert_eq!(job.code, 3);
    std::fs::remove_dir_all(job.dir).unwrap();
}

#[test]
fn messages_that_arrived_before_a_senders_end_are_still_received() {
    let late = (
        "late_messages",
        "rank 0 received what rank 1 sent before it was killed",
    );
    for env in [vec![], vec![("RBTL_BTL", "self,tcp")]] {
        expect_rank_0_reported("sent_then_killed", 2, &env, late);
    }
}

#[test]
fn survivors_of_a_killed_rank_report_the_failure_and_exit() {
    survivors_report_a_killed_rank(&[]);
}

/// Three ranks, rank 1 killed (`env` chooses the transports): the survivors report it.
fn survivors_report_a_killed_rank(env: &[(&str, &str)]) {
    let failed = ("peer_failed", "rank 0 saw rank 1 fail and reported it");
    let code = expect_rank_0_reported("killed_peer", 3, env, failed);
    // The killed rank (137) or the survivor that reported it (1) ends the job first.
    assert!([128 + libc::SIGKILL, 1].contains(&code), "job code {code}");
}

/// See `common/stopped_peer.rs`: rank 1 stopped anywhere in a ping-pong; and stopped
/// with sends, a rendezvous send and a window put started towards it, over `sm` (the
/// put is a store into the mapped window) and over `tcp` (the put waits for the
/// target's answer until the give-up removes it from the transport).
#[test]
fn a_stopped_peer_times_out_and_is_given_up() {
    let timeout = ("RBTL_MSG_PEER_TIMEOUT", "1");
    // (Role, environment, whether the window put is the call that times out.)
    for (role, env, put_waits) in [
        ("stopped_peer", vec![timeout], 0),
        ("stopped_peer_with_work", vec![timeout], 0),
        (
            "stopped_peer_with_work",
            vec![timeout, ("RBTL_BTL", "self,tcp")],
            1,
        ),
    ] {
        let job = run(role, 2, &env);
        assert_eq!(
            job.code, 1,
            "{role} {env:?}: rank 0 reported the timeout and exited 1"
        );
        assert_eq!(
            oks(&job.dir, "timed_out", 1),
            1,
            "{role} {env:?}: rank 0 saw rank 1 time out"
        );
        assert_eq!(
            oks(&job.dir, "put_timed_out", 1),
            put_waits,
            "{role} {env:?}: whether the window put was the call that timed out"
        );
        std::fs::remove_dir_all(job.dir).unwrap();
    }
}

#[test]
fn a_receive_from_any_source_fails_once_every_other_rank_has_died() {
    let failed = (
        "wildcard_failed",
        "rank 0's receives from any source failed",
    );
    expect_rank_0_reported("wildcard_after_deaths", 3, &[], failed);
}

#[test]
fn ranks_computing_past_the_timeout_are_waited_for_and_a_job_waiting_on_itself_ends() {
    let job = run("wildcard_waits", 3, &[("RBTL_MSG_PEER_TIMEOUT", "1")]);
    assert_eq!(
        (
            job.code,
            oks(&job.dir, "wildcard_waited", 3),
            oks(&job.dir, "wildcard_timed_out", 3)
        ),
        (0, 3, 3),
        "rank 0's receives got the messages of ranks that computed for longer than the timeout, then its receive from any source timed out, and every rank went on"
    );
    std::fs::remove_dir_all(job.dir).unwrap();
    let job = run("deadlock", 2, &[("RBTL_MSG_PEER_TIMEOUT", "1")]);
    assert!(
        oks(&job.dir, "stalled", 2) >= 1,
        "two ranks receiving from each other: neither saw the job stalled"
    );
    std::fs::remove_dir_all(job.dir).unwrap();
}

// ---------------------------------------------------------------------------
// The `osu` binary, as a user runs it.

const OSU: &str = env!("CARGO_BIN_EXE_osu");

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // The parent is the second field after the command name, which ends at the
        // last ')'.
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out.sort();
    out
}

/// `kill -STOP` one rank of `osu latency` in mid-run: the other reports the timeout
/// and exits non-zero, the job ends, and nothing is left in the segment directory.
#[test]
fn osu_latency_with_a_stopped_rank_ends_with_a_timeout() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let shm = std::env::temp_dir().join(format!("rbtl-node-{}-osu-stop", std::process::id()));
    std::fs::create_dir_all(&shm).unwrap();
    let mut osu = std::process::Command::new(OSU)
        .args(["latency", "--min-size", "8", "--max-size", "8"])
        .args(["--iterations", "100000000", "--param", "msg_peer_timeout=2"])
        .env("RBTL_SHM_DIR", &shm)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let deadline = start + Duration::from_secs(60);
    let mut ranks = children_of(osu.id());
    while ranks.len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        ranks = children_of(osu.id());
    }
    assert_eq!(ranks.len(), 2, "osu started its two ranks");
    // Well into the ping-pong (the ranks have started, connected, and run a while).
    std::thread::sleep(Duration::from_millis(700));
    // SAFETY: signals to the ranks, children of our child, which are not reaped before
    // osu waits for them.
    unsafe { libc::kill(ranks[1], libc::SIGSTOP) };
    let stopped = std::time::Instant::now();
    let status = loop {
        if let Some(status) = osu.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            for r in &ranks {
                // SAFETY: as above (osu, still running, has not reaped them).
                unsafe { libc::kill(*r, libc::SIGKILL) };
            }
            let _ = osu.kill();
            panic!(
                "osu still runs {:?} after a rank was stopped",
                stopped.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut osu.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{status:?}: {err}");
    assert!(
        err.contains("did not respond") && err.contains("msg_peer_timeout"),
        "the surviving rank says why: {err}"
    );
    assert!(
        stopped.elapsed() >= Duration::from_secs(2) && stopped.elapsed() < Duration::from_secs(30),
        "ended {:?} after the stop, for a timeout of 2 s",
        stopped.elapsed()
    );
    let left: Vec<_> = std::fs::read_dir(&shm).unwrap().collect();
    assert!(left.is_empty(), "segments left behind: {left:?}");
    std::fs::remove_dir_all(shm).unwrap();
}

/// `--btl sm` without `self`: the error names what is missing.
#[test]
fn osu_without_self_is_told_to_add_it() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::process::Command::new(OSU)
        .args(["latency", "--btl", "sm", "--max-size", "8"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach itself") && err.contains("add `self`"),
        "{err}"
    );
}

/// The launcher killed (SIGKILL) in the middle of start-up, at moments from early to
/// late: its ranks die with it, and nothing is left in the segment directory.
#[test]
fn a_launcher_killed_during_start_up_leaves_no_segments() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let shm = std::env::temp_dir().join(format!("rbtl-node-{}-killed", std::process::id()));
    std::fs::create_dir_all(&shm).unwrap();
    for delay_ms in [20u64, 40, 60, 90, 130, 200] {
        let mut osu = std::process::Command::new(OSU)
            .args(["mbw-mr", "-n", "2", "--max-size", "8", "--iterations", "10"])
            .env("RBTL_SHM_DIR", &shm)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Note the ranks as they start, until the moment of the kill.
        let kill_at = std::time::Instant::now() + Duration::from_millis(delay_ms);
        let mut ranks = Vec::new();
        while std::time::Instant::now() < kill_at {
            for r in children_of(osu.id()) {
                if !ranks.contains(&r) {
                    ranks.push(r);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        osu.kill().unwrap();
        osu.wait().unwrap();
        // The ranks die with their parent (PR_SET_PDEATHSIG); wait until they are gone.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while ranks.iter().any(|&pid| !common::process_ended(pid)) {
            assert!(
                std::time::Instant::now() < deadline,
                "ranks {ranks:?} outlived their launcher by 10 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let left: Vec<_> = std::fs::read_dir(&shm).unwrap().flatten().collect();
        assert!(
            left.is_empty(),
            "killed after {delay_ms} ms ({} ranks started): left behind {:?}",
            ranks.len(),
            left.iter().map(|e| e.file_name()).collect::<Vec<_>>()
        );
    }
    std::fs::remove_dir_all(shm).unwrap();
}

#[test]
fn survivors_of_a_killed_rank_report_the_failure_over_tcp() {
    survivors_report_a_killed_rank(&[("RBTL_BTL", "self,tcp")]);
}
