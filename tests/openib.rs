//! The openib transport on a real RDMA device (`rxe0` in the soft-RoCE guest, see
//! `rdma/guest.sh`): the contract suite across two processes with each connection
//! method (and with put and get limits set), a wrong remote key, the memlock diagnosis,
//! the message layer across 2 and 4 ranks, a flood that must not cause
//! receiver-not-ready retries, a shared receive queue, a job too large for the
//! completion queue, a killed peer, a peer stopped before its connection came up
//! (`common/stopped_connect.rs`), a stopped peer the message layer gives up on and a
//! peer removed with work posted to it, whose messages polled after its removal reach
//! no callback (`common/stopped_peer.rs`, `openib/removed_peer.rs`), a peer that
//! ends right after its last sends, all delivered before its failure
//! (`openib/ended_peer.rs`), ranks that share
//! no connection method, a short osu sweep, transfers into memory remapped under cached
//! registrations and after a fork (`node/stale.rs`), the registration stress of memory
//! that keeps coming and going (`node/stress.rs`), and, in a pair of guests
//! (`rdma/guest.sh pair`), the contract suite and osu between two nodes. Without a
//! device these tests say so and pass, unless `VERBS_REQUIRE_DEVICE` is set (as in the
//! guest), where a missing device fails them.
//!
//! As in `tests/node.rs`, this binary re-executes itself as the rank program under the
//! launcher; `OPENIB_TEST_ROLE` selects what a rank does and ranks leave `ok.<rank>`
//! files in `OPENIB_TEST_DIR`. (Over 600 lines: every test needs the guest, and one
//! binary keeps it to one build and one boot; each test's rank side sits beside it.)
#![cfg(feature = "openib")]

#[path = "node/churn.rs"]
mod churn;
mod common;
#[path = "openib/ended_peer.rs"]
mod ended_peer;
#[path = "openib/removed_peer.rs"]
mod removed_peer;
#[path = "node/stale.rs"]
mod stale;
#[path = "common/stopped_connect.rs"]
mod stopped_connect;
#[path = "common/stopped_peer.rs"]
mod stopped_peer;
#[path = "node/stress.rs"]
mod stress;

use rbtl::btl::{Access, Endpoint, Error, Local, Module, Remote, RemoteHandle, Transfer};
use rbtl::msg::{Comm, ANY_SOURCE};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Rank side.

#[test]
fn rank_role_entry() {
    let Ok(role) = std::env::var("OPENIB_TEST_ROLE") else {
        return;
    };
    let cpc = std::env::var("OPENIB_TEST_CPC").unwrap_or_default();
    match role.as_str() {
        "contract" => role_contract(&cpc),
        "msg" => role_msg(&cpc),
        "mismatch" => role_mismatch(),
        "srq_mismatch" => role_srq_mismatch(),
        "cq_too_small" => role_cq_too_small(),
        "killed_peer" => role_killed_peer(&cpc),
        "flood" => role_flood(&cpc),
        "remap" => role_remap(&cpc),
        "msg_remap" => stale::role_msg_remap(&settings(&cpc)),
        "stress" => role_stress(&cpc),
        "stopped_connect" => role_stopped_connect(&cpc),
        "stopped_peer" => role_stopped_peer(&cpc, stopped_peer::Stop::AtRandom),
        "stopped_peer_with_work" => role_stopped_peer(&cpc, stopped_peer::Stop::WithWorkPosted),
        "removed_peer" => {
            let depth = removed_peer::SRQ_DEPTH.to_string();
            let flush = removed_peer::FLUSH_TIMEOUT.as_millis().to_string();
            let (mut m, eps, mut job) = openib_module(
                &cpc,
                &[
                    ("btl_openib_srq_depth", depth.as_str()),
                    ("btl_openib_flush_timeout", flush.as_str()),
                ],
            );
            removed_peer::run(m.as_mut(), &eps, &mut job);
            report_ok(job.rank, "ok");
        }
        "ended_peer" => {
            let (mut m, eps, job) = openib_module(&cpc, &[]);
            ended_peer::run(m.as_mut(), &eps, job);
        }
        "removed_late" => {
            let (mut m, eps, mut job) = openib_module(&cpc, &[]);
            removed_peer::run_late(m.as_mut(), &eps, &mut job);
            report_ok(job.rank, "ok");
        }
        other => panic!("unknown OPENIB_TEST_ROLE {other:?}"),
    }
}

pub(crate) fn report_ok(rank: u32, what: &str) {
    let dir = PathBuf::from(std::env::var_os("OPENIB_TEST_DIR").expect("OPENIB_TEST_DIR"));
    std::fs::write(dir.join(format!("{what}.{rank}")), b"ok").unwrap();
}

fn role_contract(cpc: &str) {
    let (mut m, eps, mut job) = openib_module(cpc, &[]);
    assert_eq!(m.name(), "openib");
    let (rank, peer) = (job.rank, job.rank ^ 1);
    assert!(
        eps[rank as usize].is_none(),
        "openib leaves the process itself to self"
    );
    let ep = eps[peer as usize].expect("openib reaches the peer");
    common::contract_suite(m.as_mut(), &eps, &mut job, &[peer]);
    wrong_key(m.as_mut(), ep, &mut job);
    memlock(m.as_mut());
    report_ok(rank, "ok");
}

/// Memory remapped under a cached device registration (leave_pinned on, as where the
/// memory monitor runs): RDMA writes land in the new memory, never in the old pages;
/// and a fork (the child exits at once) leaves the parent's transfers right.
fn role_remap(cpc: &str) {
    let (m, ep, job) = module_keeping_registrations(cpc);
    stale::remap_and_fork(m, ep, job, true);
}

/// Rounds of the registration stress through the device, as many as over `sm`
/// (`tests/node.rs`): in batches, two in flight, so that under emulation few messages
/// go between the ranks and both work at once (`docs/memory-monitor.md` has the time
/// it takes in the guest).
const STRESS_ROUNDS: u64 = 100_000;
/// The largest block a round of the stress takes over the device: 32 pages, so that
/// registrations are longer than the 16 pages the cache's page map indexes whole as
/// well as shorter, while the pages each round faults in, pins, moves through rxe and
/// gives back (the guest's cost) stay few.
const STRESS_MAX_LEN: usize = 128 << 10;

/// The registration stress through the device (`node/stress.rs`): a stale cached
/// registration would send a put to the old pinned pages.
fn role_stress(cpc: &str) {
    let (mut m, ep, mut job) = module_keeping_registrations(cpc);
    let plan = stress::Plan {
        monitored: true,
        ..stress::Plan::rounds(STRESS_ROUNDS, STRESS_MAX_LEN, Duration::from_secs(1800))
    };
    stress::run(m.as_mut(), ep, job.rank, &plan);
    job.modex.fence().unwrap();
    report_ok(job.rank, "ok");
}

/// The openib module over `cpc`, its cache keeping idle registrations
/// (`btl_openib_leave_pinned`, on where the memory monitor runs), and the peer's
/// endpoint.
fn module_keeping_registrations(cpc: &str) -> (Box<dyn Module>, Endpoint, rbtl::pmi::Job) {
    let config = rbtl::configure(&[("btl", "openib"), ("btl_openib_cpc_include", cpc)]).unwrap();
    assert!(
        config.bool("btl_openib_leave_pinned").unwrap(),
        "on where the monitor runs"
    );
    let (m, eps, job) = openib_module(cpc, &[]);
    let ep = eps[(job.rank ^ 1) as usize].expect("openib reaches the peer");
    eprintln!(
        "rank {}: memory monitor: {}",
        job.rank,
        rbtl_rcache::monitor::status()
    );
    (m, ep, job)
}

/// A put with a forged remote key: an error completion, and the target unchanged
/// (the connection ends, as RC connections do on a remote access error).
fn wrong_key(m: &mut dyn Module, ep: Endpoint, job: &mut rbtl::pmi::Job) {
    const LEN: usize = 4096;
    let mut buf = vec![0x5au8; LEN];
    let base = buf.as_mut_ptr() as usize;
    // SAFETY: `buf` outlives the handle, and is read only after the fence below.
    let h = unsafe { m.register_mem(Some(ep), base, LEN, Access::all()) }.unwrap();
    let mut ad = (base as u64).to_le_bytes().to_vec();
    ad.extend_from_slice(h.remote().as_bytes());
    job.modex.publish("wrong_key", &ad).unwrap();
    job.modex.fence().unwrap();
    if job.rank == 0 {
        let theirs = job.modex.lookup(1, "wrong_key").unwrap().unwrap();
        let raddr = u64::from_le_bytes(theirs[..8].try_into().unwrap());
        let mut forged = theirs[8..].to_vec();
        forged[16] ^= 0x5a; // the remote key's low byte
        let forged = RemoteHandle::from_bytes(&forged).unwrap();
        let status: Arc<Mutex<Option<String>>> = Arc::default();
        let s = status.clone();
        m.put(
            &Transfer::new(ep, Local::new(base, &h), Remote::new(raddr, &forged), 64)
                .ordered(rbtl::btl::Order::ANY),
            Box::new(move |_, c| {
                *s.lock().unwrap() = Some(format!("{:?}", c.status));
            }),
        )
        .expect("a put with a forged key is posted: only the device can refuse it");
        let start = std::time::Instant::now();
        while status.lock().unwrap().is_none() {
            m.progress();
            assert!(start.elapsed() < Duration::from_secs(60), "no completion");
        }
        let got = status.lock().unwrap().clone().unwrap();
        assert!(got.starts_with("Err("), "the forged key completed: {got}");
        // Later operations on the broken connection fail clearly.
        let again = m.put(
            &Transfer::new(ep, Local::new(base, &h), Remote::new(raddr, &forged), 8)
                .ordered(rbtl::btl::Order::ANY),
            Box::new(|_, _| {}),
        );
        assert!(matches!(again, Err(Error::PeerFailed { .. })), "{again:?}");
    }
    job.modex.fence().unwrap();
    assert!(
        buf.iter().all(|&b| b == 0x5a),
        "the refused put left the target unchanged"
    );
    drop(h);
}

/// Without CAP_IPC_LOCK and under a 64 KiB locked-memory limit, registering 1 MiB
/// fails with the diagnosis naming the limit. The memory is a mapping of its own, so
/// no registration cached from earlier work (`leave_pinned`) can cover it.
fn memlock(m: &mut dyn Module) {
    rbtl_testkit::restrict_memlock(64 << 10);
    let len = 1 << 20;
    let mem = rbtl_testkit::mem::map_anywhere(len);
    // SAFETY: the mapping outlives the attempt; nothing is registered on failure.
    let r = unsafe { m.register_mem(None, mem, len, Access::all()) };
    let msg = r
        .expect_err("a registration over the memlock limit is refused")
        .to_string();
    assert!(msg.contains("ulimit -l") && msg.contains("64 KiB"), "{msg}");
    // SAFETY: the mapping made above, no longer used.
    unsafe { rbtl_testkit::mem::unmap(mem, len) };
}

fn settings(cpc: &str) -> Vec<(&str, &str)> {
    vec![("btl", "self,openib"), ("btl_openib_cpc_include", cpc)]
}

/// Every rank sends every other rank messages around the eager limit and well above
/// it (rendezvous by RDMA get), some to any-source receives; contents checked.
fn role_msg(cpc: &str) {
    let mut comm = Comm::init(&settings(cpc)).unwrap();
    let (me, n) = (comm.rank(), comm.size());
    let sizes = [0usize, 1, 100, 12 * 1024, 12 * 1024 + 1, 70_000, 300_000];
    let fill = |src: u32, len: usize| -> Vec<u8> {
        (0..len)
            .map(|i| (i * 7 + src as usize * 31 + len) as u8)
            .collect()
    };
    for round in 0..2 {
        for (k, &len) in sizes.iter().enumerate() {
            let msg = fill(me, len);
            let mut inbox: Vec<Vec<u8>> = (0..n - 1).map(|_| vec![0; len]).collect();
            let peers: Vec<u32> = (0..n).filter(|&r| r != me).collect();
            comm.scope(|s| {
                for (p, buf) in peers.iter().zip(inbox.iter_mut()) {
                    let src = if round == 0 { Some(*p) } else { ANY_SOURCE };
                    s.irecv(buf, src, Some(k as i32)).unwrap();
                }
                for &p in &peers {
                    s.isend(&msg, p, k as i32).unwrap();
                }
            })
            .unwrap();
            if round == 0 {
                for (p, buf) in peers.iter().zip(&inbox) {
                    assert!(*buf == fill(*p, len), "{len} bytes from rank {p}");
                }
            } else {
                let mut want: Vec<Vec<u8>> = peers.iter().map(|&p| fill(p, len)).collect();
                let mut got = inbox.clone();
                want.sort();
                got.sort();
                assert!(got == want, "{len} bytes from any source");
            }
        }
    }
    comm.barrier().unwrap();
    report_ok(me, "ok");
}

/// Start the message layer with each rank's settings and expect it to refuse, with an
/// error that contains every one of `words`.
fn expect_refused<'a>(settings_of: impl Fn(u32) -> Vec<(&'a str, &'a str)>, words: &[&str]) {
    let job = rbtl::pmi::job().unwrap();
    let rank = job.rank;
    let config = rbtl::configure(&settings_of(rank)).unwrap();
    let err = match Comm::with(job, &config) {
        Ok(_) => panic!("the job started; a refusal naming {words:?} was expected"),
        Err(e) => e.to_string(),
    };
    assert!(
        words.iter().all(|w| err.contains(w)),
        "the refusal names {words:?}: {err}"
    );
    report_ok(rank, "ok");
}

/// Rank 0 allows only oob, rank 1 only rdma_cm: both get an error naming both lists.
fn role_mismatch() {
    expect_refused(
        |rank| settings(if rank == 0 { "oob" } else { "rdma_cm" }),
        &["oob", "rdma_cm"],
    );
}

/// Rank 0 receives through a shared receive queue, rank 1 per peer: their credits
/// could never agree, so both refuse with an error that names the parameter.
fn role_srq_mismatch() {
    expect_refused(
        |rank| {
            let mut s = settings("oob");
            if rank == 0 {
                s.push(("btl_openib_srq_depth", "16"));
            }
            s
        },
        &["btl_openib_srq_depth", "shared receive queue"],
    );
}

/// Each peer would need more completion-queue entries than the device has (the job
/// runs with a huge `btl_openib_rdma_depth`): refused at start, naming what to lower.
fn role_cq_too_small() {
    expect_refused(
        |_| settings("oob"),
        &["completion queue", "btl_openib_rdma_depth"],
    );
}

/// Each rank in turn floods the other with small messages while the other is not
/// progressing yet: all arrive, in order (the launcher side checks that the device
/// saw no receiver-not-ready retries). Then rank 1's last message, sent just before
/// it exits, arrives too.
fn role_flood(cpc: &str) {
    const N: u32 = 20_000;
    let mut comm = Comm::init(&settings(cpc)).unwrap();
    let me = comm.rank();
    let peer = 1 - me;
    for sender in [0, 1] {
        if me == sender {
            let mut msg = [0u8; 64];
            for seq in 0..N {
                msg[..4].copy_from_slice(&seq.to_le_bytes());
                comm.send(&msg, peer, 3).unwrap();
            }
        } else {
            std::thread::sleep(Duration::from_millis(500));
            let mut msg = [0u8; 64];
            for seq in 0..N {
                comm.recv(&mut msg, Some(peer), Some(3)).unwrap();
                let got = u32::from_le_bytes(msg[..4].try_into().unwrap());
                assert_eq!(got, seq, "message {seq} from rank {peer} arrived as {got}");
            }
        }
        comm.barrier().unwrap();
    }
    // The last word: rank 1 sends and leaves at once, while rank 0 waits for it. Its
    // leaving waits until the message has arrived: else rank 0 could see the
    // out-of-band connection close first and fail the peer, its queue pair then
    // taking nothing more.
    if me == 1 {
        comm.send(b"last", 0, 4).unwrap();
        report_ok(me, "ok");
        return;
    }
    let mut last = [0u8; 4];
    comm.recv(&mut last, Some(1), Some(4)).unwrap();
    assert_eq!(&last, b"last");
    report_ok(me, "ok");
}

/// Rank 1 kills itself after a few round trips; rank 0, waiting for it, reports the
/// peer failure instead of hanging.
fn role_killed_peer(cpc: &str) {
    let mut comm = Comm::init(&settings(cpc)).unwrap();
    let me = comm.rank();
    let mut b = [0u8; 8];
    for _ in 0..10 {
        if me == 0 {
            comm.send(&b, 1, 0).unwrap();
            comm.recv(&mut b, Some(1), Some(0)).unwrap();
        } else {
            comm.recv(&mut b, Some(0), Some(0)).unwrap();
            comm.send(&b, 0, 0).unwrap();
        }
    }
    if me == 1 {
        // SAFETY: raising a signal on ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    match comm.recv(&mut b, Some(1), Some(0)) {
        Err(rbtl::msg::Error::PeerFailed { rank: 1, .. }) => {
            report_ok(me, "peer_failed");
            std::process::exit(1);
        }
        other => panic!("expected a peer failure, got {other:?}"),
    }
}

/// Rank 0 stops rank 1 before their connection is made, with operations for it:
/// see [`stopped_connect::run`].
fn role_stopped_connect(cpc: &str) {
    let (connect, flush) = (
        stopped_connect::CONNECT.as_millis().to_string(),
        stopped_connect::FLUSH.as_millis().to_string(),
    );
    let (mut m, eps, mut job) = openib_module(
        cpc,
        &[
            ("btl_openib_connect_timeout", &connect),
            ("btl_openib_flush_timeout", &flush),
        ],
    );
    let dir = PathBuf::from(std::env::var_os("OPENIB_TEST_DIR").expect("OPENIB_TEST_DIR"));
    stopped_connect::run(m.as_mut(), &eps, &mut job, &dir);
    report_ok(job.rank, "ok");
}

/// The message layer gives up on rank 1, stopped (`msg_peer_timeout` 1 s): see
/// [`stopped_peer::run`]. Where it stops with work posted to it, the job receives
/// through a shared receive queue of 8 buffers, which the stopped rank does not refill:
/// the device then keeps the sends it cannot take, and the window put behind them, in
/// receiver-not-ready retries until the give-up removes the rank from the transport.
fn role_stopped_peer(cpc: &str, stop: stopped_peer::Stop) {
    let mut s = settings(cpc);
    s.push(("msg_peer_timeout", "1"));
    if let stopped_peer::Stop::WithWorkPosted = stop {
        s.push(("btl_openib_srq_depth", "8"));
    }
    let comm = Comm::init(&s).unwrap();
    stopped_peer::run(comm, stop, &report_ok)
}

/// The openib module over `cpc` with `more` parameters, connected to every rank of the
/// job (on first use), with the job.
fn openib_module(
    cpc: &str,
    more: &[(&str, &str)],
) -> (Box<dyn Module>, Vec<Option<Endpoint>>, rbtl::pmi::Job) {
    let mut job = rbtl::pmi::job().unwrap();
    let mut params = vec![("btl", "openib"), ("btl_openib_cpc_include", cpc)];
    params.extend_from_slice(more);
    let config = rbtl::configure(&params).unwrap();
    let mut modules = rbtl::framework().open(&config, job.modex.as_mut()).unwrap();
    job.modex.fence().unwrap();
    let mut m = modules
        .pop()
        .expect("an openib module on the device's port");
    let eps = m
        .add_procs(&common::procs(job.size), job.modex.as_mut())
        .unwrap();
    (m, eps, job)
}

// ---------------------------------------------------------------------------
// Launcher side.

/// Whether a device is here; without one the tests pass with a note, unless the
/// environment requires one.
fn device() -> bool {
    let found = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    rbtl_testkit::found_or_skip(
        found.then_some(()),
        "VERBS_REQUIRE_DEVICE",
        "no RDMA device here (run it in rdma/guest.sh)",
    )
    .is_some()
}

static ONE_JOB: Mutex<()> = Mutex::new(());

/// Run `role` on `ranks` ranks; the job's exit code and its directory of reports.
fn run(role: &str, ranks: u32, cpc: &str) -> (i32, PathBuf) {
    run_with(role, ranks, cpc, &[])
}

/// [`run`], with more environment (configuration parameters) for the ranks.
fn run_with(role: &str, ranks: u32, cpc: &str, more: &[(&str, &str)]) -> (i32, PathBuf) {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!(
        "rbtl-openib-{}-{role}-{ranks}-{cpc}{}",
        std::process::id(),
        more.iter()
            .map(|(k, v)| format!("-{k}={v}"))
            .collect::<String>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut env = vec![
        ("OPENIB_TEST_ROLE".to_string(), role.to_string()),
        ("OPENIB_TEST_DIR".to_string(), dir.display().to_string()),
        ("OPENIB_TEST_CPC".to_string(), cpc.to_string()),
    ];
    env.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    (common::launch_ranks(ranks, env), dir)
}

fn expect_all_ok(role: &str, ranks: u32, cpc: &str) {
    expect_all_ok_with(role, ranks, cpc, &[]);
}

fn expect_all_ok_with(role: &str, ranks: u32, cpc: &str, more: &[(&str, &str)]) {
    let (code, dir) = run_with(role, ranks, cpc, more);
    assert_eq!(code, 0, "{role} with {ranks} ranks over {cpc}");
    let oks = (0..ranks)
        .filter(|r| dir.join(format!("ok.{r}")).exists())
        .count();
    assert_eq!(oks, ranks as usize, "{role}: every rank reported success");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The device's count of receiver-not-ready retries (`None` where it has no counter).
fn rnr_retries() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/class/infiniband")
        .ok()?
        .next()?
        .ok()?
        .path();
    let counters = dir.join("ports/1/hw_counters");
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(counters.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some(read("rcvd_rnr_err")? + read("send_rnr_err")?)
}

#[test]
fn a_flood_of_small_messages_arrives_in_order_without_rnr_retries() {
    if !device() {
        return;
    }
    for cpc in ["oob", "rdma_cm"] {
        let before = rnr_retries();
        expect_all_ok("flood", 2, cpc);
        assert_eq!(
            rnr_retries(),
            before,
            "{cpc}: credits kept every send within the posted receives"
        );
    }
}

/// With a shared receive queue (`btl_openib_srq_depth`): ranks set differently refuse
/// each other clearly; the contract suite and the message layer; and a flood into a queue of 8 buffers, which the device holds back
/// with receiver-not-ready retries (so the queue really is what receives), with every
/// message arriving, in order.
#[test]
fn a_shared_receive_queue_serves_every_peer_and_loses_nothing_when_it_runs_dry() {
    if !device() {
        return;
    }
    let srq = [("RBTL_BTL_OPENIB_SRQ_DEPTH", "64")];
    expect_all_ok("srq_mismatch", 2, "oob");
    expect_all_ok_with("contract", 2, "oob", &srq);
    expect_all_ok_with("msg", 4, "rdma_cm", &srq);
    expect_all_ok_with("msg", 2, "oob", &srq);
    let before = rnr_retries();
    expect_all_ok_with("flood", 2, "oob", &[("RBTL_BTL_OPENIB_SRQ_DEPTH", "8")]);
    if let (Some(before), Some(after)) = (before, rnr_retries()) {
        assert!(
            after > before,
            "a flood into 8 shared buffers made the device retry ({before} -> {after})"
        );
    }
}

#[test]
fn a_job_too_large_for_the_completion_queue_is_refused_clearly() {
    if device() {
        let huge = [("RBTL_BTL_OPENIB_RDMA_DEPTH", "100000")];
        expect_all_ok_with("cq_too_small", 2, "oob", &huge);
    }
}

#[test]
fn a_killed_peer_is_reported_over_each_cpc() {
    if !device() {
        return;
    }
    for cpc in ["oob", "rdma_cm"] {
        let (code, dir) = run("killed_peer", 2, cpc);
        assert!(
            [128 + libc::SIGKILL, 1].contains(&code),
            "{cpc}: job code {code}"
        );
        assert!(
            dir.join("peer_failed.0").exists(),
            "{cpc}: rank 0 saw rank 1 fail and reported it"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// A peer stopped before its connection came up (see `common/stopped_connect.rs`),
/// over each connection method: flush gives up on it after `btl_openib_flush_timeout`,
/// its operations and sends fail with `PeerFailed` once `btl_openib_connect_timeout`
/// has passed, another peer goes on, and the job ends once it runs again.
#[test]
fn a_peer_that_never_answers_the_connection_fails_at_its_deadline_over_each_cpc() {
    if device() {
        for cpc in ["oob", "rdma_cm"] {
            expect_all_ok("stopped_connect", 3, cpc);
        }
    }
}

/// A peer that ends right after its last sends landed, seen gone by its connection
/// method (`oob`: its out-of-band connection closes with it; `rdma_cm`: its
/// disconnection) in the progress call that first polls them: every message is
/// delivered before the peer is reported failed (see `openib/ended_peer.rs`).
#[test]
fn an_ended_peers_messages_are_delivered_before_its_failure_over_each_cpc() {
    if device() {
        for cpc in ["oob", "rdma_cm"] {
            expect_all_ok("ended_peer", 3, cpc);
        }
    }
}

/// The message layer gives up on a stopped rank (see `common/stopped_peer.rs`), over
/// each connection method: stopped anywhere in a ping-pong; and stopped with sends, a
/// rendezvous send and a window put posted to it and held by its device (a shared
/// receive queue it no longer refills), where the put is the call that times out and
/// returns once the give-up has removed the rank. Then a peer with sends, a put, a
/// fetch-add and a get held by the device (`openib/removed_peer.rs`): a flush gives up
/// on it after `btl_openib_flush_timeout`, and once it is removed by `del_procs` every
/// callback comes once, with the peer's failure. Last, messages that arrived from a
/// peer before its removal and are polled after it reach no callback.
#[test]
fn a_stopped_peer_given_up_or_removed_ends_the_work_posted_to_it_over_each_cpc() {
    if !device() {
        return;
    }
    for cpc in ["oob", "rdma_cm"] {
        for (role, put_waits) in [("stopped_peer", false), ("stopped_peer_with_work", true)] {
            let (code, dir) = run(role, 2, cpc);
            assert_eq!(
                code, 1,
                "{role} over {cpc}: rank 0 reported the timeout, exited 1"
            );
            assert!(
                dir.join("timed_out.0").exists(),
                "{role} over {cpc}: rank 0 saw rank 1 time out"
            );
            assert_eq!(
                dir.join("put_timed_out.0").exists(),
                put_waits,
                "{role} over {cpc}: whether the window put was the call that timed out"
            );
            std::fs::remove_dir_all(dir).unwrap();
        }
        expect_all_ok("removed_peer", 2, cpc);
        expect_all_ok("removed_late", 2, cpc);
    }
}

/// Registrations of remapped memory and fork, through the device (see `node/stale.rs`).
#[test]
fn transfers_into_remapped_memory_and_after_fork_over_each_cpc() {
    if device() {
        for cpc in ["oob", "rdma_cm"] {
            expect_all_ok("remap", 2, cpc);
            expect_all_ok("msg_remap", 2, cpc);
        }
    }
}

/// Memory taken and given back in random ways, registered through the device by one
/// rank and put into (and read back) by the other: not one wrong result, so not one
/// stale hit of the cache (`node/stress.rs`), in [`STRESS_ROUNDS`] rounds
/// (`REGISTRATION_STRESS_ROUNDS` in the environment overrides it).
#[test]
fn registration_stress_of_memory_that_comes_and_goes() {
    if device() {
        expect_all_ok("stress", 2, "oob");
    }
}

/// The stress's judge on the device: with the memory monitor off and idle
/// registrations kept all the same (`rcache_monitor=none` with
/// `btl_openib_leave_pinned` forced on, the setting the monitor exists to make safe),
/// the cache hits registrations of memory that left, the device writes the puts into
/// the old pinned pages, and the target reports wrong results.
#[test]
fn without_the_monitor_the_stress_sees_puts_land_in_old_pages() {
    if !device() {
        return;
    }
    let unsafe_cache = [
        ("RBTL_RCACHE_MONITOR", "none"),
        ("RBTL_BTL_OPENIB_LEAVE_PINNED", "true"),
        ("REGISTRATION_STRESS_ROUNDS", "300"),
    ];
    let (code, dir) = run_with("stress", 2, "oob", &unsafe_cache);
    assert_ne!(
        code, 0,
        "the stress passed over a cache that keeps stale registrations"
    );
    assert!(
        dir.join("wrong_results.0").exists(),
        "the target counted wrong results (job code {code})"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn contract_suite_over_oob() {
    if device() {
        expect_all_ok("contract", 2, "oob");
    }
}

#[test]
fn contract_suite_over_rdma_cm() {
    if device() {
        expect_all_ok("contract", 2, "rdma_cm");
    }
}

/// Put and get limits and alignments set below the port's: the suite's refusals of
/// transfers over them run on the device too.
#[test]
fn contract_suite_with_put_and_get_limits() {
    if device() {
        let limits = [
            ("RBTL_BTL_OPENIB_PUT_LIMIT", "4096"),
            ("RBTL_BTL_OPENIB_PUT_ALIGNMENT", "8"),
            ("RBTL_BTL_OPENIB_GET_LIMIT", "3000"),
            ("RBTL_BTL_OPENIB_GET_ALIGNMENT", "4"),
        ];
        expect_all_ok_with("contract", 2, "oob", &limits);
    }
}

#[test]
fn message_layer_two_and_four_ranks_over_each_cpc() {
    if device() {
        expect_all_ok("msg", 2, "oob");
        expect_all_ok("msg", 4, "rdma_cm");
        expect_all_ok("msg", 4, "oob");
        expect_all_ok("msg", 2, "rdma_cm");
    }
}

#[test]
fn ranks_sharing_no_connection_method_get_a_clear_error() {
    if device() {
        expect_all_ok("mismatch", 2, "");
    }
}

/// Configuration mistakes are refused before any device is touched, with the valid
/// names.
#[test]
fn unknown_or_conflicting_cpc_lists_are_refused() {
    let open = |settings: &[(&str, &str)]| -> String {
        let config = rbtl::configure(settings).unwrap();
        match rbtl::framework().open(&config, &mut rbtl::btl::SingletonModex::new()) {
            Ok(_) => panic!("{settings:?} was accepted"),
            Err(e) => e.to_string(),
        }
    };
    let text = open(&[
        ("btl", "openib"),
        ("btl_openib_cpc_include", "oob,carrier_pigeon"),
    ]);
    assert!(
        text.contains("carrier_pigeon") && text.contains("oob, rdma_cm, xrc"),
        "{text}"
    );
    let text = open(&[
        ("btl", "openib"),
        ("btl_openib_cpc_include", "oob"),
        ("btl_openib_cpc_exclude", "rdma_cm"),
    ]);
    assert!(text.contains("cannot both be set"), "{text}");
}

/// `xrc` alone on soft devices (rxe, siw), which have no XRC: the transport refuses to
/// start, naming the method, the device, and the domain the device refused.
#[test]
fn xrc_is_refused_with_the_reason_where_the_device_has_no_xrc() {
    if !device() {
        return;
    }
    let names: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    if !names
        .iter()
        .all(|n| n.starts_with("rxe") || n.starts_with("siw"))
    {
        eprintln!("devices {names:?} may have XRC: skipped");
        return;
    }
    let config = rbtl::configure(&[("btl", "openib"), ("btl_openib_cpc_include", "xrc")]).unwrap();
    let text = match rbtl::framework().open(&config, &mut rbtl::btl::SingletonModex::new()) {
        Ok(_) => panic!("xrc was accepted on {names:?}"),
        Err(e) => e.to_string(),
    };
    assert!(
        names
            .iter()
            .any(|n| text.contains(&format!("xrc cannot run on {n}:")))
            && text.contains("the device has no XRC domains")
            && text.contains("ibv_open_xrcd failed"),
        "{text}"
    );
}

/// `osu` over openib with each connection method, as a user runs it.
#[test]
fn osu_sweep_over_openib() {
    if !device() {
        return;
    }
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    // Each connection method chosen by inclusion (`--cpc`) or by excluding the other.
    for (bench, choice) in [
        ("latency", ["--cpc", "oob"]),
        ("bw", ["--cpc", "rdma_cm"]),
        ("put-latency", ["--param", "btl_openib_cpc_exclude=oob"]),
        ("get-latency", ["--param", "btl_openib_cpc_exclude=rdma_cm"]),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_osu"))
            .args([bench, "--btl", "self,openib", "--max-size", "65536"])
            .args(choice)
            .args(["--iterations", "20", "--skip", "2"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "osu {bench} {choice:?}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let rows = stdout.lines().filter(|l| !l.starts_with('#')).count();
        assert!(rows >= 17, "osu {bench} printed every size:\n{stdout}");
    }
}

// ---------------------------------------------------------------------------
// Two nodes: the guests of `rdma/guest.sh pair`, each with its own kernel and rxe,
// their NICs joined by a qemu socket network; hydra starts one rank on each,
// reaching the other guest through `rdma/pair-exec.sh`.

/// What `rdma/guest.sh pair` tells its command: the two hosts, the interface
/// between them and the launcher's way into the other guest.
struct Pair {
    hosts: String,
    iface: String,
    exec: String,
}

/// The pair this test runs in; `None` elsewhere (the test then says so and passes,
/// unless `GUEST_PAIR_REQUIRED` is set).
fn pair() -> Option<Pair> {
    let var = |name| std::env::var(name).ok();
    let pair = match (
        var("GUEST_PAIR_HOSTS"),
        var("GUEST_PAIR_IFACE"),
        var("GUEST_PAIR_EXEC"),
    ) {
        (Some(hosts), Some(iface), Some(exec)) => Some(Pair { hosts, iface, exec }),
        _ => None,
    };
    rbtl_testkit::found_or_skip(
        pair,
        "GUEST_PAIR_REQUIRED",
        "not in a guest pair (run it in rdma/guest.sh pair)",
    )
}

/// `mpiexec.mpich` across the pair, one rank per guest, `env` given to both ranks,
/// killed after `limit`; whether it succeeded, and its output.
fn across_pair(
    pair: &Pair,
    env: &[(&str, &str)],
    program: &std::path::Path,
    args: &[&str],
    limit: Duration,
) -> (bool, String) {
    let mut cmd = std::process::Command::new("timeout");
    cmd.args([
        "--kill-after=10",
        &limit.as_secs().to_string(),
        "mpiexec.mpich",
    ]);
    cmd.args(["-hosts", &pair.hosts, "-n", "2", "-ppn", "1"]);
    cmd.args(["-iface", &pair.iface, "-launcher", "ssh"]);
    cmd.args(["-launcher-exec", &pair.exec]);
    for (k, v) in env {
        cmd.args(["-genv", k, v]);
    }
    let out = cmd.arg(program).args(args).output().unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The contract suite between two nodes over each connection method, then `osu`'s
/// latency and bandwidth as a user runs them under hydra.
#[test]
fn two_nodes_run_the_contract_suite_and_osu() {
    let Some(pair) = pair() else {
        return;
    };
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let exe = std::env::current_exe().unwrap();
    let limit = Duration::from_secs(900);
    for cpc in ["oob", "rdma_cm"] {
        // Beside the binary: a folder both guests see.
        let dir = exe
            .parent()
            .unwrap()
            .join(format!("pair-{}-{cpc}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dir_text = dir.display().to_string();
        let env = [
            ("OPENIB_TEST_ROLE", "contract"),
            ("OPENIB_TEST_DIR", dir_text.as_str()),
            ("OPENIB_TEST_CPC", cpc),
        ];
        let args = [
            "rank_role_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ];
        let (ok, text) = across_pair(&pair, &env, &exe, &args, limit);
        assert!(ok, "contract suite across the pair over {cpc}:\n{text}");
        for rank in 0..2 {
            assert!(
                dir.join(format!("ok.{rank}")).exists(),
                "{cpc}: rank {rank} reported success\n{text}"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
    let osu = std::path::Path::new(env!("CARGO_BIN_EXE_osu"));
    for (bench, cpc, more) in [
        ("latency", "oob", ["--iterations", "20", "--skip", "2"]),
        ("bw", "rdma_cm", ["--iterations", "4", "--skip", "1"]),
    ] {
        let args = [
            bench,
            "--btl",
            "self,openib",
            "--cpc",
            cpc,
            "--max-size",
            "65536",
            more[0],
            more[1],
            more[2],
            more[3],
        ];
        let (ok, text) = across_pair(&pair, &[], osu, &args, limit);
        assert!(ok, "osu {bench} across the pair over {cpc}:\n{text}");
        let rows = text
            .lines()
            .filter(|l| {
                l.split_whitespace().count() == 2 && l.starts_with(|c: char| c.is_ascii_digit())
            })
            .count();
        assert!(rows >= 17, "osu {bench} printed every size:\n{text}");
        eprintln!("osu {bench} across the pair over {cpc}:\n{text}");
    }
}
