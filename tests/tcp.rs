// Long on purpose: one test binary, re-executed as the rank program of its own jobs,
// holds each test beside the rank role it runs (its parts that stand alone live in
// tcp/); more binaries would each link the whole crate and could run their jobs at once
// on two cores.
//! The `tcp` transport across real processes on loopback (`btl_tcp_if_include=lo`,
//! or `::1/128`: loopback only): the contract suite across 2 and 4 processes (one
//! link per peer, and three; over IPv6 only), strangers' connections to a rank's
//! listeners of both families, a crowd of them and members connecting to each other
//! at once (`tcp/accepting.rs`), a peer killed mid-job, a member breaking the protocol,
//! and the target refusing put, get and atomics that the origin let through; in this
//! process, a module against a peer the test plays on a raw listener (accepting and
//! never answering, declining and never connecting, closing a handshake unanswered;
//! over IPv6, of a family the module does not use, publishing an old format: see
//! `tcp/families.rs`; answering a flush slowly, not at all, or streaming a chunk
//! slowly; putting into, and getting from, memory whose registration ends midway;
//! malformed frames), and two or three interfaces per rank in a network namespace the
//! test makes (one link per pair, each carrying data, one of them slowed:
//! `tcp/interfaces.rs`), and a link broken from outside (`tcp/reset.rs`). This test
//! binary re-executes itself as the rank program
//! under the launcher; `TCP_TEST_ROLE` selects what a rank does, and ranks leave
//! `ok.<rank>` files in `TCP_TEST_DIR`. (Over 600 lines: each test's rank side
//! sits here beside its launcher side, in the one binary.)

#[path = "tcp/accepting.rs"]
mod accepting;
mod common;
#[path = "tcp/families.rs"]
mod families;
#[path = "tcp/interfaces.rs"]
mod interfaces;
#[path = "tcp/reset.rs"]
mod reset;
#[path = "common/stopped_flush.rs"]
mod stopped_flush;

use common::{procs, progress_until, senders};
use rbtl::btl::transport_kit::keytable::{HandleFields, RangeFields};
use rbtl::btl::{
    Access, ActiveMessage, AtomicKind, Endpoint, Error, Local, Modex, Module, Order,
    RdmaCompletion, Remote, RemoteAtomic, RemoteHandle, SendiOutcome, Tag, Transfer,
};
use rbtl::tcp::published::{Listener, Published};
use rbtl::tcp::{wire, TcpComponent, TcpModule};
use rbtl_conformance as contract;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Rank side.

#[test]
fn rank_role_entry() {
    let Ok(role) = std::env::var("TCP_TEST_ROLE") else {
        return;
    };
    match role.as_str() {
        "contract" => role_contract(),
        "strangers" => role_strangers(),
        "killed" => role_killed(),
        "refused" => role_refused(),
        "violation" => role_violation(),
        "stopped" => role_stopped(),
        "interfaces" => interfaces::role_interfaces(),
        "links" => interfaces::role_links(),
        "reset" => reset::role_reset(),
        "crowd" => accepting::role_crowd(),
        "crossing" => accepting::role_crossing(),
        other => panic!("unknown TCP_TEST_ROLE {other:?}"),
    }
}

fn report_ok(rank: u32, what: &str) {
    let dir = PathBuf::from(std::env::var_os("TCP_TEST_DIR").expect("TCP_TEST_DIR"));
    std::fs::write(dir.join(format!("{what}.{rank}")), b"ok").unwrap();
}

/// The tcp module alone, connected to every rank (the launcher's environment sets
/// `RBTL_BTL_TCP_IF_INCLUDE=lo`).
fn tcp_module() -> (TcpModule, Vec<Option<Endpoint>>, rbtl::pmi::Job) {
    let mut job = rbtl::pmi::job().unwrap();
    let config = rbtl::configure(&[]).unwrap();
    assert_eq!(config.list("btl_tcp_if_include").unwrap(), ["lo"]);
    let mut m = TcpComponent::open(&config, job.modex.as_mut())
        .unwrap()
        .expect("loopback is chosen");
    job.modex.fence().unwrap();
    let eps = m.add_procs(&procs(job.size), job.modex.as_mut()).unwrap();
    assert!(
        eps[job.rank as usize].is_none(),
        "tcp does not reach the process itself"
    );
    (m, eps, job)
}

fn send_byte(m: &mut dyn Module, ep: Endpoint, tag: Tag) {
    let r = m.sendi(&ActiveMessage::new(ep, tag, &[], &[1]));
    assert!(matches!(r, Ok(SendiOutcome::Sent)), "{r:?}");
}

/// Errors the module reported, for the test to read.
fn errors(m: &mut dyn Module) -> Arc<Mutex<Vec<String>>> {
    common::errors_heard(m, |e| format!("{:?}: {}", e.rank, e.error))
}

fn role_contract() {
    let mut job = rbtl::pmi::job().unwrap();
    let config = rbtl::configure(&[]).unwrap();
    let mut modules = rbtl::framework().open(&config, job.modex.as_mut()).unwrap();
    job.modex.fence().unwrap();
    let names: Vec<&str> = modules.iter().map(|m| m.name()).collect();
    assert_eq!(names, ["self", "tcp"], "btl=self,tcp, most exclusive first");
    let mut m = modules.pop().unwrap();
    let eps = m.add_procs(&procs(job.size), job.modex.as_mut()).unwrap();
    let partners = common::contract_partners(&job);
    if let Ok(want) = std::env::var("TCP_TEST_FAMILIES") {
        // Every partner listens on the families asked for, and on no other: the links
        // between them can be of no other family.
        for &partner in &partners {
            let blob = job.modex.lookup(partner, "btl.tcp").unwrap().unwrap();
            let mut got: Vec<&str> = Published::decode(&blob)
                .unwrap()
                .listeners
                .iter()
                .map(|l| if l.addr.is_ipv4() { "4" } else { "6" })
                .collect();
            got.dedup();
            assert_eq!(got.join(","), want, "rank {partner}'s listeners");
        }
    }
    common::contract_suite(m.as_mut(), &eps, &mut job, &partners);
    report_ok(job.rank, "ok");
}

/// Rank 1 opens connections to each of rank 0's listeners (127.0.0.1 and ::1) as a
/// stranger would: silent, with a wrong secret, with garbage, and a HELLO cut short
/// that stalls. Rank 0 closes and counts each, reports no failure, and the job's
/// traffic goes on.
fn role_strangers() {
    let (mut m, eps, mut job) = tcp_module();
    let rank = job.rank;
    let ep = eps[(rank ^ 1) as usize].unwrap();
    let seen = errors(&mut m);
    let ping = senders(&mut m, Tag::USR);
    job.modex.fence().unwrap();
    // The link is up before any stranger comes.
    if rank == 0 {
        send_byte(&mut m, ep, Tag::USR);
    }
    progress_until(&mut m, "the first message", || {
        !ping.lock().unwrap().is_empty()
    });
    if rank == 1 {
        send_byte(&mut m, ep, Tag::USR);
        let blob = job.modex.lookup(0, "btl.tcp").unwrap().unwrap();
        let listeners = Published::decode(&blob).unwrap().listeners;
        let guard = Some(Duration::from_secs(60));
        // Read until rank 0 closes the connection.
        let closed_by_rank_0 = |mut s: TcpStream| {
            s.set_read_timeout(guard).unwrap();
            let mut b = [0u8; 64];
            match s.read(&mut b) {
                Ok(0) => {}
                Ok(n) => panic!("a stranger was answered: {:?}", &b[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
                Err(e) => panic!("rank 0 did not close a stranger's connection: {e}"),
            }
        };
        let families: Vec<bool> = listeners.iter().map(|l| l.addr.is_ipv4()).collect();
        assert_eq!(
            families,
            [true, false],
            "lo: one listener per family, IPv4 first"
        );
        for addr in listeners.iter().map(|l| l.addr) {
            drop(TcpStream::connect(addr).unwrap());
            let mut wrong = TcpStream::connect(addr).unwrap();
            let hello = wire::Hello {
                secret: [0; wire::SECRET],
                rank: 1,
                link: 0,
                version: wire::VERSION,
            };
            wrong.write_all(wire::hello(&hello).as_bytes()).unwrap();
            closed_by_rank_0(wrong);
            let mut garbage = TcpStream::connect(addr).unwrap();
            garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
            closed_by_rank_0(garbage);
            let mut half = TcpStream::connect(addr).unwrap();
            half.write_all(&wire::hello(&hello).as_bytes()[..12])
                .unwrap();
            closed_by_rank_0(half);
        }
        send_byte(&mut m, ep, Tag::USR);
    } else {
        // Four strangers on each of the two listeners (IPv4 and IPv6).
        let start = Instant::now();
        while m.refused().total() < 8 {
            if m.progress() == 0 {
                std::thread::yield_now();
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "strangers not refused"
            );
        }
        let r = m.refused();
        assert_eq!(
            (
                r.closed,
                r.wrong_secret,
                r.garbage,
                r.stalled,
                r.bad_identity
            ),
            (2, 2, 2, 2, 0),
            "{r:?}"
        );
        progress_until(&mut m, "rank 1 done", || ping.lock().unwrap().len() >= 2);
        send_byte(&mut m, ep, Tag::USR);
    }
    progress_until(&mut m, "the last message", || {
        ping.lock().unwrap().len() >= 2
    });
    assert_eq!(
        *seen.lock().unwrap(),
        Vec::<String>::new(),
        "no failure reported"
    );
    job.modex.fence().unwrap();
    // The job's traffic still works: the whole suite.
    contract::run_all(&mut m, ep);
    report_ok(rank, "ok");
}

/// Rank 1 is killed while rank 0 has a get in flight to it and a put queued: rank 0
/// sees both fail and a PeerFailed through its error callback, and still talks to
/// rank 2.
fn role_killed() {
    let (mut m, eps, mut job) = tcp_module();
    let rank = job.rank;
    let seen = errors(&mut m);
    let die = Tag(Tag::USR.0 + 1);
    let ping = senders(&mut m, Tag::USR);
    m.register_am(
        die,
        Box::new(|_, _| {
            // SAFETY: raising a signal on ourselves.
            unsafe { libc::raise(libc::SIGKILL) };
        }),
    )
    .unwrap();
    let mut mem = vec![7u8; 1 << 20];
    let all = Access::all();
    // SAFETY: `mem` outlives the handle (dropped before it) and is not resized.
    let handle =
        unsafe { m.register_mem(None, mem.as_mut_ptr() as usize, mem.len(), all) }.unwrap();
    let mut blob = (mem.as_ptr() as u64).to_le_bytes().to_vec();
    blob.extend_from_slice(handle.remote().as_bytes());
    job.modex.publish("killed", &blob).unwrap();
    job.modex.fence().unwrap();
    match rank {
        1 => {
            let ep0 = eps[0].unwrap();
            send_byte(&mut m, ep0, Tag::USR);
            progress_until(&mut m, "death", || false);
        }
        2 => {
            progress_until(&mut m, "rank 0's ping", || !ping.lock().unwrap().is_empty());
            send_byte(&mut m, eps[0].unwrap(), Tag::USR);
            report_ok(rank, "ok");
        }
        _ => {
            let (ep1, ep2) = (eps[1].unwrap(), eps[2].unwrap());
            progress_until(&mut m, "rank 1 up", || !ping.lock().unwrap().is_empty());
            let theirs = job.modex.lookup(1, "killed").unwrap().unwrap();
            let (raddr, rh) = contract::remote_of(&theirs);
            let failed = Arc::new(AtomicUsize::new(0));
            let cb = || -> rbtl::btl::RdmaCallback {
                let f = failed.clone();
                Box::new(move |_, c: RdmaCompletion| {
                    assert!(
                        matches!(c.status, Err(Error::PeerFailed { rank: 1, .. })),
                        "{:?}",
                        c.status
                    );
                    f.fetch_add(1, Ordering::SeqCst);
                })
            };
            send_byte(&mut m, ep1, die);
            let l = mem.as_mut_ptr() as usize;
            let t = Transfer::new(
                ep1,
                Local::new(l, &handle),
                Remote::new(raddr, &rh),
                1 << 20,
            );
            m.get(&t, cb()).unwrap();
            m.put(&t, cb()).unwrap();
            progress_until(&mut m, "both operations failed", || {
                failed.load(Ordering::SeqCst) == 2
            });
            progress_until(&mut m, "the failure reported", || {
                !seen.lock().unwrap().is_empty()
            });
            let reports = seen.lock().unwrap().clone();
            assert_eq!(reports.len(), 1, "{reports:?}");
            assert!(
                reports[0].starts_with("Some(1): peer rank 1 is unreachable"),
                "{reports:?}"
            );
            let e = m.sendi(&ActiveMessage::new(ep1, Tag::USR, &[], &[1]));
            assert!(matches!(e, Err(Error::PeerFailed { rank: 1, .. })), "{e:?}");
            send_byte(&mut m, ep2, Tag::USR);
            progress_until(&mut m, "rank 2's answer", || {
                ping.lock().unwrap().contains(&ep2)
            });
            m.flush(None).unwrap();
            report_ok(rank, "ok");
        }
    }
    drop(handle);
    drop(mem);
}

/// Rank 0 forges rank 1's handles (a wider range, every access) so that its own
/// check lets put, get and atomics through; rank 1 refuses each against its own
/// registrations (a put, a fetching atomic and a swap on read-only memory, a get from
/// write-only memory; a put, a get and atomics past the end), the typed error reaches
/// rank 0's callbacks, and rank 1's memory is unchanged. A deregistered handle is
/// refused the same way, to put, get and every kind of atomic.
fn role_refused() {
    const LEN: usize = 4096;
    let (mut m, eps, mut job) = tcp_module();
    let rank = job.rank;
    let ep = eps[(rank ^ 1) as usize].unwrap();
    let done = senders(&mut m, Tag::USR);
    let mut read_only = vec![3u8; LEN];
    let mut dead = vec![4u8; LEN];
    let mut write_only = vec![5u8; LEN];
    let mut local = vec![0u8; LEN];
    // SAFETY: the buffers outlive their handles (dropped at the end) and are not resized.
    let (ro, mut dd, lh, wo) = unsafe {
        let mut register = |buf: &mut [u8], access: Access| {
            m.register_mem(None, buf.as_mut_ptr() as usize, LEN, access)
                .unwrap()
        };
        (
            register(&mut read_only, Access::REMOTE_READ | Access::LOCAL_READ),
            register(&mut dead, Access::all()),
            register(&mut local, Access::all()),
            register(&mut write_only, Access::REMOTE_WRITE | Access::LOCAL_READ),
        )
    };
    let mut blob = Vec::new();
    for (buf, h) in [(&read_only, &ro), (&dead, &dd), (&write_only, &wo)] {
        blob.extend_from_slice(&(buf.as_ptr() as u64).to_le_bytes());
        blob.extend_from_slice(h.remote().as_bytes());
    }
    m.deregister_mem(&mut dd).unwrap();
    job.modex.publish("refused", &blob).unwrap();
    job.modex.fence().unwrap();
    if rank == 1 {
        progress_until(&mut m, "rank 0's operations", || {
            !done.lock().unwrap().is_empty()
        });
        assert!(
            read_only.iter().all(|&b| b == 3),
            "refused operations left memory alone"
        );
        assert!(
            dead.iter().all(|&b| b == 4),
            "a dead registration was not written"
        );
        assert!(write_only.iter().all(|&b| b == 5));
        job.modex.fence().unwrap();
        drop((ro, lh, wo));
        report_ok(rank, "ok");
        return;
    }
    let theirs = job.modex.lookup(1, "refused").unwrap().unwrap();
    let hs = 8 + rbtl::btl::transport_kit::keytable::HANDLE_SIZE;
    let (ro_addr, ro_h) = contract::remote_of(&theirs[..hs]);
    let (dd_addr, dd_h) = contract::remote_of(&theirs[hs..2 * hs]);
    let (wo_addr, wo_h) = contract::remote_of(&theirs[2 * hs..]);
    // The handle's own description (keytable layout: module, key, base, len, access):
    // claim 1 MiB with every access.
    let forge = |h: &RemoteHandle| {
        let mut f = h.as_bytes().to_vec();
        f[24..32].copy_from_slice(&(1u64 << 20).to_le_bytes());
        f[32..36].copy_from_slice(&Access::all().bits().to_le_bytes());
        RemoteHandle::from_bytes(&f).unwrap()
    };
    let (forged, forged_wo) = (forge(&ro_h), forge(&wo_h));
    let outcomes: Arc<Mutex<Vec<String>>> = Arc::default();
    let cb = |what: &'static str| -> rbtl::btl::RdmaCallback {
        let o = outcomes.clone();
        Box::new(move |_, c: RdmaCompletion| {
            let e = c.status.expect_err(what);
            let kind = match e {
                Error::OutOfRange { side: "remote", .. } => "out of range",
                Error::AccessDenied { side: "remote", .. } => "access denied",
                Error::BadRemoteHandle(_) => "bad handle",
                other => panic!("{what}: {other}"),
            };
            o.lock().unwrap().push(format!("{what}: {kind}"));
        })
    };
    // Each in any order, its local side (if any) at the start of `local`.
    let here = Local::new(local.as_mut_ptr() as usize, &lh);
    let order = Order::ANY;
    let transfer = |remote, len| Transfer::new(ep, here, remote, len).ordered(order);
    let atomic = |remote, kind| RemoteAtomic::new(ep, remote, kind).ordered(order);
    let read_only = |addr| Remote::new(addr, &forged);
    let (end, dead) = (ro_addr + LEN as u64, Remote::new(dd_addr, &dd_h));
    for (what, remote, len) in [
        ("put into read-only", read_only(ro_addr), 8),
        ("put past the end", read_only(end), 16),
        ("put into a dead one", dead, 8),
    ] {
        m.put(&transfer(remote, len), cb(what)).unwrap();
    }
    for (what, remote, len) in [
        ("get past the end", read_only(end - 8), 16),
        ("get from a dead one", dead, 8),
        ("get from write-only", Remote::new(wo_addr, &forged_wo), 8),
    ] {
        m.get(&transfer(remote, len), cb(what)).unwrap();
    }
    let add = AtomicKind::Op(rbtl::btl::AtomicOp::Add, 1);
    let swap = |compare| AtomicKind::CompareSwap { compare, value: 9 };
    for (what, remote, kind) in [
        ("atomic on read-only", read_only(ro_addr), add),
        ("fetch-add past the end", read_only(end + 8), add),
        ("swap on read-only", read_only(ro_addr), swap(3)),
        ("swap on a dead one", dead, swap(4)),
    ] {
        m.atomic(&atomic(remote, kind).fetching(here), cb(what))
            .unwrap();
    }
    for (what, remote) in [
        ("atomic past the end", read_only(end)),
        ("atomic on a dead one", dead),
    ] {
        m.atomic(&atomic(remote, add), cb(what)).unwrap();
    }
    m.flush(Some(ep)).unwrap();
    let mut got = outcomes.lock().unwrap().clone();
    got.sort();
    assert_eq!(
        got,
        [
            "atomic on a dead one: bad handle",
            "atomic on read-only: access denied",
            "atomic past the end: out of range",
            "fetch-add past the end: out of range",
            "get from a dead one: bad handle",
            "get from write-only: access denied",
            "get past the end: out of range",
            "put into a dead one: bad handle",
            "put into read-only: access denied",
            "put past the end: out of range",
            "swap on a dead one: bad handle",
            "swap on read-only: access denied",
        ]
    );
    assert!(
        local.iter().all(|&b| b == 0),
        "refused gets and atomics wrote nothing here"
    );
    send_byte(&mut m, ep, Tag::USR);
    // Rank 1 has the message before this process ends.
    job.modex.fence().unwrap();
    drop((ro, lh));
    report_ok(rank, "ok");
}

/// Rank 2 speaks for itself on a raw socket: a proper handshake with rank 0, then a
/// frame of an unknown kind. Rank 0 ends rank 2 with a protocol error at once, and
/// goes on with rank 1.
fn role_violation() {
    let (mut m, eps, mut job) = tcp_module();
    let rank = job.rank;
    let seen = errors(&mut m);
    let ping = senders(&mut m, Tag::USR);
    job.modex.fence().unwrap();
    match rank {
        2 => {
            let blob = job.modex.lookup(0, "btl.tcp").unwrap().unwrap();
            let l = Published::decode(&blob).unwrap().listeners[0];
            let mut s = TcpStream::connect(l.addr).unwrap();
            let hello = wire::Hello {
                secret: l.secret,
                rank: 2,
                link: 0,
                version: wire::VERSION,
            };
            s.write_all(wire::hello(&hello).as_bytes()).unwrap();
            let mut ack = [0u8; wire::HEADER];
            s.read_exact(&mut ack).unwrap();
            assert_eq!(ack[0], 10, "HELLO_ACK");
            s.write_all(&[99, 0, 0, 0, 0, 0, 0, 0]).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut b = [0u8; 8];
            assert!(
                matches!(s.read(&mut b), Ok(0) | Err(_)),
                "rank 0 closed the link"
            );
        }
        1 => {
            progress_until(&mut m, "rank 0's ping", || !ping.lock().unwrap().is_empty());
            send_byte(&mut m, eps[0].unwrap(), Tag::USR);
        }
        _ => {
            progress_until(&mut m, "the report", || !seen.lock().unwrap().is_empty());
            let reports = seen.lock().unwrap().clone();
            assert_eq!(reports.len(), 1, "{reports:?}");
            assert!(
                reports[0].starts_with("Some(2): peer rank 2 is unreachable: protocol error"),
                "{reports:?}"
            );
            let e = m.sendi(&ActiveMessage::new(eps[2].unwrap(), Tag::USR, &[], &[1]));
            assert!(matches!(e, Err(Error::PeerFailed { rank: 2, .. })), "{e:?}");
            send_byte(&mut m, eps[1].unwrap(), Tag::USR);
            progress_until(&mut m, "rank 1's answer", || {
                !ping.lock().unwrap().is_empty()
            });
        }
    }
    job.modex.fence().unwrap();
    report_ok(rank, "ok");
}

/// Rank 0 stops rank 1 with operations pending: see [`stopped_flush::run`].
fn role_stopped() {
    let (mut m, eps, mut job) = tcp_module();
    stopped_flush::run(&mut m, &eps, &mut job, "btl_tcp_flush_timeout");
    report_ok(job.rank, "ok");
}

// ---------------------------------------------------------------------------
// In this process: a peer the test plays itself on a raw listener.

/// A job of two ranks in this process: rank 0 is the module under test; rank 1 is
/// whatever the test published for it.
struct TwoRanks {
    ours: Option<Vec<u8>>,
    theirs: Vec<u8>,
}

impl Modex for TwoRanks {
    fn rank(&self) -> u32 {
        0
    }

    fn size(&self) -> u32 {
        2
    }

    fn publish(&mut self, key: &str, value: &[u8]) -> rbtl::btl::Result<()> {
        assert_eq!(key, "btl.tcp");
        self.ours = Some(value.to_vec());
        Ok(())
    }

    fn fence(&mut self) -> rbtl::btl::Result<()> {
        Ok(())
    }

    fn lookup(&mut self, rank: u32, _key: &str) -> rbtl::btl::Result<Option<Vec<u8>>> {
        Ok(if rank == 0 {
            self.ours.clone()
        } else {
            Some(self.theirs.clone())
        })
    }
}

/// Rank 0's tcp module facing a raw peer: the module, the peer's endpoint, the peer's
/// listener, and the errors the module reported.
type FacingRawPeer = (
    TcpModule,
    Endpoint,
    std::net::TcpListener,
    Arc<Mutex<Vec<String>>>,
);

/// Rank 1 as a raw loopback listener (its secret is `[9; 16]`), and the tcp module of
/// rank 0 connected to it with `settings`, one message already sent its way (which
/// starts the connection).
fn module_facing_a_raw_peer(settings: &[(&str, &str)]) -> FacingRawPeer {
    module_facing_a_raw_peer_at("127.0.0.1:0", settings)
}

/// The raw peer's listener on `bind`, and what it publishes.
fn raw_peer(bind: &str) -> (std::net::TcpListener, Published) {
    let listener = std::net::TcpListener::bind(bind).unwrap();
    let addr = listener.local_addr().unwrap();
    let theirs = Published {
        module: 77,
        listeners: vec![Listener {
            addr,
            prefix: if addr.is_ipv4() { 8 } else { 128 },
            iface: 0,
            secret: [9; wire::SECRET],
        }],
    };
    (listener, theirs)
}

/// As [`module_facing_a_raw_peer`], the raw peer listening on `bind`.
fn module_facing_a_raw_peer_at(bind: &str, settings: &[(&str, &str)]) -> FacingRawPeer {
    let (listener, theirs) = raw_peer(bind);
    let mut modex = TwoRanks {
        ours: None,
        theirs: theirs.encode(),
    };
    let mut all = vec![("btl_tcp_if_include", "lo")];
    all.extend_from_slice(settings);
    let config = rbtl::configure(&all).unwrap();
    let mut m = TcpComponent::open(&config, &mut modex)
        .unwrap()
        .expect("loopback is chosen");
    let eps = m.add_procs(&procs(2), &mut modex).unwrap();
    let ep = eps[1].expect("loopback reaches the raw peer");
    let seen = errors(&mut m);
    send_byte(&mut m, ep, Tag::USR);
    (m, ep, listener, seen)
}

/// Fill `buf` from `s`, progressing rank 0's module `m` while nothing comes (a hang
/// guard fails after 30 s).
fn read_progressing(m: &mut TcpModule, s: &mut TcpStream, buf: &mut [u8]) {
    s.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => panic!("rank 0 closed the connection"),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                m.progress();
            }
            Err(e) => panic!("{e}"),
        }
        assert!(start.elapsed() < Duration::from_secs(30), "nothing came");
    }
}

/// Accept rank 0's connection on the raw peer's listener (progressing rank 0
/// meanwhile) and read its HELLO, checked.
fn accept_hello(m: &mut TcpModule, listener: &std::net::TcpListener) -> TcpStream {
    listener.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => m.progress(),
            Err(e) => panic!("{e}"),
        };
        assert!(start.elapsed() < Duration::from_secs(30), "no connection");
    };
    let mut hello = vec![0u8; wire::HEADER + 24];
    read_progressing(m, &mut s, &mut hello);
    let expect = wire::hello(&wire::Hello {
        secret: [9; wire::SECRET],
        rank: 0,
        link: 0,
        version: wire::VERSION,
    });
    assert_eq!(hello, expect.as_bytes(), "rank 0's HELLO");
    s
}

/// Progress rank 0's module `m`, resting 1 ms whenever it has nothing to do, until it
/// has reported an error to `seen` (a hang guard fails 30 s after `start`, naming `what`
/// rank 0 still waits for): the one report there is.
fn the_one_report(
    m: &mut TcpModule,
    seen: &Mutex<Vec<String>>,
    start: Instant,
    what: &str,
) -> String {
    while seen.lock().unwrap().is_empty() {
        if m.progress() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "rank 0 still waits for {what}"
        );
    }
    let reports = seen.lock().unwrap().clone();
    assert_eq!(reports.len(), 1, "{reports:?}");
    reports[0].clone()
}

#[test]
fn a_peer_that_accepts_and_never_answers_fails_at_the_connect_timeout() {
    let (mut m, ep, listener, seen) =
        module_facing_a_raw_peer(&[("btl_tcp_connect_timeout", "300")]);
    let start = Instant::now();
    let held = accept_hello(&mut m, &listener);
    let report = the_one_report(&mut m, &seen, start, "an answer");
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "gave up after {took:?}, long past its 300 ms"
    );
    assert!(
        report.starts_with("Some(1): peer rank 1 is unreachable: link 0 to 127.0.0.1:")
            && report.ends_with(
                "was not up within 300 ms: the peer accepted the connection but did not answer its HELLO"
            ),
        "{report:?}"
    );
    let e = m.sendi(&ActiveMessage::new(ep, Tag::USR, &[], &[1]));
    assert!(matches!(e, Err(Error::PeerFailed { rank: 1, .. })), "{e:?}");
    drop(held);
}

#[test]
fn a_peer_that_declines_and_never_connects_fails_at_the_connect_timeout() {
    let (mut m, _ep, listener, seen) =
        module_facing_a_raw_peer(&[("btl_tcp_connect_timeout", "300")]);
    let start = Instant::now();
    let mut s = accept_hello(&mut m, &listener);
    // HELLO_NACK: "my own connection for this link wins", which never comes.
    s.write_all(&[11, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    let report = the_one_report(&mut m, &seen, start, "rank 1's connection");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(
        report.ends_with(
            "was not up within 300 ms: the peer declined our connection and did not connect itself"
        ),
        "{report:?}"
    );
}

#[test]
fn a_handshake_the_peer_closed_unanswered_is_made_again() {
    let (mut m, ep, listener, seen) = module_facing_a_raw_peer(&[]);
    // The first connection is closed after its HELLO, as a peer closes a handshake it
    // expired; the second is answered and carries the message.
    drop(accept_hello(&mut m, &listener));
    let mut s = accept_hello(&mut m, &listener);
    answer_and_take_the_message(&mut m, &mut s, ep, &seen);
}

/// The raw peer answers the HELLO on `s` with HELLO_ACK (the connection is the link)
/// and reads the one-byte message rank 0's module queued for it: the link is up and no
/// failure was reported.
fn answer_and_take_the_message(
    m: &mut TcpModule,
    s: &mut TcpStream,
    ep: Endpoint,
    seen: &Mutex<Vec<String>>,
) {
    s.write_all(&[10, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    let mut frame = [0u8; wire::HEADER + 1];
    read_progressing(m, s, &mut frame);
    assert_eq!(frame, FIRST_MESSAGE, "the message");
    assert_eq!(m.links(ep), Some((1, 1)), "the link is up");
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
}

/// A put frame the raw peer read: its request number.
fn read_put(m: &mut TcpModule, s: &mut TcpStream) -> u64 {
    put_request(&read_frame(m, s, wire::HEADER + wire::Kind::Put.ext() + 8))
}

/// The request number of the put `frame` (8 bytes of data).
fn put_request(frame: &[u8]) -> u64 {
    match wire::decode(frame, &limits(1 << 20)) {
        Ok(Some((wire::Frame::Put { req, data_len, .. }, used))) => {
            assert_eq!((data_len, used + 8), (8, frame.len()), "one 8-byte put");
            req
        }
        other => panic!("not a put: {other:?}"),
    }
}

/// The limits of a module whose messages carry up to 1 MiB, and its RDMA chunks up to
/// `rdma_data` bytes.
fn limits(rdma_data: usize) -> wire::Limits {
    wire::Limits {
        am_payload: 1 << 20,
        rdma_data,
    }
}

/// A `kind` frame as a raw peer writes it, naming memory by `handle` (its bytes): the
/// extension's `words`, the handle after them, and `data` bytes of payload to follow.
fn naming_memory(kind: wire::Kind, words: &[u64], handle: &[u8], data: usize) -> wire::Encoder {
    let size = rbtl::btl::transport_kit::keytable::HANDLE_SIZE;
    let head = wire::Encoder::new(kind, size as u8, 0, kind.ext() + data);
    words.iter().fold(head, |e, &w| e.u64(w)).handle(handle)
}

/// The acknowledgement of put `req`, applied.
fn put_ack(req: u64) -> Vec<u8> {
    wire::Encoder::new(wire::Kind::PutAck, 0, 0, wire::Kind::PutAck.ext())
        .u64(req)
        .status(&Ok(()))
        .as_bytes()
        .to_vec()
}

/// Ends this whole test process (code 99) unless dropped within `limit` (dropping it
/// disconnects the watching thread): a test whose subject could hang fails by itself,
/// in bounded time.
struct HangGuard {
    _watching: std::sync::mpsc::Sender<()>,
}

impl HangGuard {
    fn new(what: &'static str, limit: Duration) -> HangGuard {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(limit) {
                eprintln!("{what}: still running after {limit:?}");
                std::process::exit(99);
            }
        });
        HangGuard { _watching: stop }
    }
}

#[test]
fn flush_waits_for_a_slow_peer_and_names_a_silent_one_whose_put_then_completes() {
    const PUTS: usize = 5;
    let _guard = HangGuard::new("the flush test", Duration::from_secs(60));
    let (mut m, ep, mut s, seen) = link_to_a_raw_peer(&[("btl_tcp_flush_timeout", "2000")], None);
    let mut mem = vec![5u8; 64];
    // SAFETY: `mem` outlives the handle (dropped first) and is not resized.
    let lh = unsafe { m.register_mem(None, mem.as_mut_ptr() as usize, mem.len(), Access::all()) }
        .unwrap();
    // The raw peer's registration, as its handle would describe it (module 77).
    let range = RangeFields {
        slot: 1,
        base: 0x10_0000,
        len: 4096,
    };
    let rh = HandleFields::new(77, 1, Access::all(), &[range]).to_handle();
    let ok = Arc::new(AtomicUsize::new(0));
    let put = |m: &mut TcpModule, at: u64| {
        let o = ok.clone();
        let cb: rbtl::btl::RdmaCallback = Box::new(move |_, c: RdmaCompletion| {
            c.status.expect("the put was applied");
            o.fetch_add(1, Ordering::SeqCst);
        });
        let l = mem.as_ptr() as usize;
        m.put(
            &Transfer::new(ep, Local::new(l, &lh), Remote::new(at, &rh), 8),
            cb,
        )
        .unwrap();
    };
    for i in 0..PUTS {
        put(&mut m, range.base + 8 * i as u64);
    }
    let mut reqs: Vec<u64> = (0..PUTS).map(|_| read_put(&mut m, &mut s)).collect();
    // A slow peer: one answer every 700 ms, 3.5 s in all, each well within the 2 s
    // timeout of the one before.
    let mut answering = s.try_clone().unwrap();
    answering.set_nonblocking(false).unwrap();
    let slow = std::thread::spawn(move || {
        for req in reqs.drain(..) {
            std::thread::sleep(Duration::from_millis(700));
            answering.write_all(&put_ack(req)).unwrap();
        }
    });
    let start = Instant::now();
    m.flush(Some(ep))
        .expect("a peer that answers is waited for");
    let took = start.elapsed();
    slow.join().unwrap();
    assert_eq!(ok.load(Ordering::SeqCst), PUTS, "every callback ran");
    assert!(
        took > Duration::from_secs(2),
        "waited past one timeout: {took:?}"
    );

    // A silent peer: the put reached it, and nothing comes back.
    put(&mut m, range.base);
    let req = read_put(&mut m, &mut s);
    let e = common::flush_giving_up_on(
        &mut m,
        (ep, 1),
        Duration::from_secs(2),
        "btl_tcp_flush_timeout",
    );
    let text = e.to_string();
    assert!(
        text.contains(&format!("rank 1 (endpoint {})", ep.0))
            && text.contains("raise btl_tcp_flush_timeout"),
        "{text}"
    );
    assert_eq!(ok.load(Ordering::SeqCst), PUTS, "the put is still pending");
    assert!(seen.lock().unwrap().is_empty(), "the peer was not failed");
    // Nothing was lost: once the peer answers, the put completes.
    s.write_all(&put_ack(req)).unwrap();
    m.flush(Some(ep)).expect("answered now");
    assert_eq!(ok.load(Ordering::SeqCst), PUTS + 1);
    drop(lh);
    drop(mem);
}

/// Frames from a member that fail validation (length, tag, handle, segments, sizes, a
/// reply to nothing), each on its own link: the module ends that peer with a protocol
/// error naming what was wrong (reported once, the link closed), and panics on none.
#[test]
fn each_malformed_frame_is_a_protocol_error_of_its_peer() {
    let _guard = HangGuard::new("the malformed frames", Duration::from_secs(60));
    let handle = rbtl::btl::transport_kit::keytable::HANDLE_SIZE;
    let huge = 1 << 30;
    let cases: [(&str, Vec<u8>); 6] = [
        (
            "active message on a reserved tag",
            wire::Encoder::new(wire::Kind::Am, 0, 1, 1)
                .as_bytes()
                .to_vec(),
        ),
        (
            "frame length out of bounds for its kind",
            wire::Encoder::new(wire::Kind::Am, Tag::USR.0, 1, huge)
                .as_bytes()
                .to_vec(),
        ),
        (
            "malformed memory handle",
            wire::Encoder::new(wire::Kind::Put, 3, 0, wire::Kind::Put.ext() + 8)
                .as_bytes()
                .to_vec(),
        ),
        (
            "get chunk over the largest chunk",
            naming_memory(
                wire::Kind::GetReq,
                &[1, 0, 0x1000, huge as u64],
                &vec![0; handle],
                0,
            )
            .as_bytes()
            .to_vec(),
        ),
        (
            "segment count out of range",
            wire::Encoder::new(wire::Kind::Am, Tag::USR.0, 0, 1)
                .as_bytes()
                .to_vec(),
        ),
        ("an acknowledgement of no put", put_ack(77)),
    ];
    for (why, frame) in cases {
        let (mut m, _, mut s, seen) = link_to_a_raw_peer(&[], None);
        s.write_all(&frame).unwrap();
        // What the frame's header announces may never come: the check is on the header.
        let _ = s.write_all(&[0; 64]);
        let start = Instant::now();
        while seen.lock().unwrap().is_empty() {
            m.progress();
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{why}: no report"
            );
        }
        let reports = seen.lock().unwrap().clone();
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert!(
            reports[0].contains(&format!("protocol error: {why}")),
            "{why}: {reports:?}"
        );
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 8];
        assert!(
            matches!(s.read(&mut b), Ok(0) | Err(_)),
            "{why}: the link closed"
        );
    }
}

/// A put streaming into this process's memory when that memory's registration ends:
/// what came before stays in place, the rest is read and dropped, the origin hears a
/// refusal, and the peer is not failed.
#[test]
fn a_put_streaming_in_when_its_registration_ends_writes_no_more_and_is_refused() {
    const LEN: usize = 512 << 10;
    let _guard = HangGuard::new("the put whose registration ends", Duration::from_secs(60));
    let (mut m, ep, mut s, seen) = link_to_a_raw_peer(&[], None);
    let mut mem = vec![0u8; LEN];
    // SAFETY: `mem` outlives the handle (deregistered below) and is not resized.
    let mut lh =
        unsafe { m.register_mem(None, mem.as_mut_ptr() as usize, LEN, Access::all()) }.unwrap();
    let words = [5, mem.as_ptr() as u64];
    let head = naming_memory(wire::Kind::Put, &words, lh.remote().as_bytes(), LEN);
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&vec![7u8; LEN / 2]).unwrap();
    let placed = mem.as_ptr() as usize + LEN / 2 - 1;
    let start = Instant::now();
    // SAFETY: a byte of `mem`, which the module writes only from `progress` (this thread).
    while unsafe { std::ptr::read_volatile(placed as *const u8) } != 7 {
        m.progress();
        assert!(start.elapsed() < Duration::from_secs(30), "the first half");
    }
    m.deregister_mem(&mut lh).unwrap();
    s.write_all(&vec![8u8; LEN / 2]).unwrap();
    let ack = read_frame(&mut m, &mut s, wire::HEADER + wire::Kind::PutAck.ext());
    let status = match wire::decode(&ack, &limits(1 << 20)) {
        Ok(Some((wire::Frame::PutAck { req: 5, status }, _))) => status,
        other => panic!("not the put's acknowledgement: {other:?}"),
    };
    assert!(
        matches!(status, Err(Error::BadRemoteHandle(_))),
        "{status:?}"
    );
    assert!(
        mem[..LEN / 2].iter().all(|&b| b == 7),
        "the first half in place"
    );
    assert!(
        mem[LEN / 2..].iter().all(|&b| b == 0),
        "nothing after the end"
    );
    // The link goes on.
    send_byte(&mut m, ep, Tag::USR);
    assert_eq!(read_frame(&mut m, &mut s, wire::HEADER + 1), FIRST_MESSAGE);
    assert!(seen.lock().unwrap().is_empty(), "the peer was not failed");
}

/// A get's reply still going out when the registration it reads ends: the bytes
/// already on their way are the memory's, the rest zeros (the memory is not read once
/// it may be gone), and the chunk's end carries the refusal.
#[test]
fn a_get_reply_going_out_when_its_registration_ends_sends_no_more_of_it() {
    const LEN: usize = 4 << 20;
    let _guard = HangGuard::new("the get whose registration ends", Duration::from_secs(60));
    let (mut m, _, mut s, seen) =
        link_to_a_raw_peer(&[("btl_tcp_sndbuf", "65536")], Some(16 << 10));
    let mut mem = vec![9u8; LEN];
    // SAFETY: `mem` outlives the handle (deregistered below) and is not resized.
    let mut lh =
        unsafe { m.register_mem(None, mem.as_mut_ptr() as usize, LEN, Access::all()) }.unwrap();
    let words = [3, 0, mem.as_ptr() as u64, LEN as u64];
    let request = naming_memory(wire::Kind::GetReq, &words, lh.remote().as_bytes(), 0);
    s.write_all(request.as_bytes()).unwrap();
    // The reply's header and what the two sockets' buffers take go out; the rest waits.
    let head_len = wire::HEADER + wire::Kind::GetData.ext();
    let head = read_frame(&mut m, &mut s, head_len);
    assert_eq!(head[0], 5, "the reply's data");
    for _ in 0..1000 {
        m.progress();
    }
    m.deregister_mem(&mut lh).unwrap();
    let data = read_frame(&mut m, &mut s, LEN);
    let kept = data
        .iter()
        .position(|&b| b != 9)
        .expect("some bytes after the end");
    assert!(
        kept > 0,
        "what was on its way before the end is the memory's"
    );
    assert!(data[kept..].iter().all(|&b| b == 0), "zeros after the end");
    let done = read_frame(&mut m, &mut s, wire::HEADER + wire::Kind::GetDone.ext());
    let status = match wire::decode(&done, &limits(LEN)) {
        Ok(Some((wire::Frame::GetDone { req: 3, status, .. }, _))) => status,
        other => panic!("not the get's end: {other:?}"),
    };
    assert!(
        matches!(status, Err(Error::BadRemoteHandle(_))),
        "{status:?}"
    );
    assert!(seen.lock().unwrap().is_empty(), "the peer was not failed");
}

/// The one-byte message rank 0's module queues for the raw peer, as it arrives.
const FIRST_MESSAGE: [u8; wire::HEADER + 1] = [1, Tag::USR.0, 1, 0, 1, 0, 0, 0, 1];

/// Rank 0's module under `settings` and the raw peer's end of their link, up: the peer
/// answered rank 0's HELLO and read its first message. `peer_rcvbuf`: the peer's
/// receive buffer, where the test needs it small.
fn link_to_a_raw_peer(
    settings: &[(&str, &str)],
    peer_rcvbuf: Option<usize>,
) -> (TcpModule, Endpoint, TcpStream, Arc<Mutex<Vec<String>>>) {
    let (mut m, ep, listener, seen) = module_facing_a_raw_peer(settings);
    let mut s = accept_hello(&mut m, &listener);
    if let Some(n) = peer_rcvbuf {
        socket2::SockRef::from(&s).set_recv_buffer_size(n).unwrap();
    }
    s.write_all(&[10, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    let mut first = [0u8; wire::HEADER + 1];
    read_progressing(&mut m, &mut s, &mut first);
    assert_eq!(first, FIRST_MESSAGE);
    (m, ep, s, seen)
}

/// One frame of `len` bytes read from `s`, progressing `m` meanwhile.
fn read_frame(m: &mut TcpModule, s: &mut TcpStream, len: usize) -> Vec<u8> {
    let mut frame = vec![0u8; len];
    read_progressing(m, s, &mut frame);
    frame
}

/// Flush `ep` while the raw peer streams `what` (in `peer`), which the flush waits for
/// although it takes longer than the 2 s timeout: the bytes `peer` gives back.
fn flush_while_streaming(
    m: &mut TcpModule,
    ep: Endpoint,
    peer: std::thread::JoinHandle<Vec<u8>>,
    what: &str,
) -> Vec<u8> {
    let start = Instant::now();
    m.flush(Some(ep))
        .unwrap_or_else(|e| panic!("{what} is waited for: {e}"));
    let took = start.elapsed();
    let data = peer.join().unwrap();
    assert!(took > Duration::from_secs(2), "streamed for {took:?}");
    data
}

#[test]
fn flush_waits_for_a_chunk_that_streams_for_longer_than_its_timeout() {
    // One chunk each way, put and get, each streaming for about 1.6 timeouts (3.2 s):
    // the peer reads the put's data, and writes the get's, a slice every 100 ms. Small
    // socket buffers (ours 64 KiB, the peer's 16 KiB: the kernel doubles both) keep
    // what the kernels hold of the put, which goes out unseen, well under a timeout.
    const LEN: usize = 1 << 20;
    const SLICE: usize = 32 << 10;
    const EVERY: Duration = Duration::from_millis(100);
    let _guard = HangGuard::new("the streaming flush test", Duration::from_secs(90));
    let (mut m, ep, mut s, seen) = link_to_a_raw_peer(
        &[
            ("btl_tcp_flush_timeout", "2000"),
            ("btl_tcp_sndbuf", "65536"),
            // One chunk of the whole megabyte.
            ("btl_tcp_rdma_chunk", "1048576"),
        ],
        Some(16 << 10),
    );
    let mut mem: Vec<u8> = (0..2 * LEN).map(|i| (i % 253) as u8).collect();
    // SAFETY: `mem` outlives the handle (dropped first) and is not resized.
    let lh = unsafe { m.register_mem(None, mem.as_mut_ptr() as usize, mem.len(), Access::all()) }
        .unwrap();
    let range = RangeFields {
        slot: 1,
        base: 0x100_0000,
        len: 2 * LEN,
    };
    let rh = HandleFields::new(77, 1, Access::all(), &[range]).to_handle();
    let limits = limits(4 << 20);
    let statuses: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = || -> rbtl::btl::RdmaCallback {
        let st = statuses.clone();
        Box::new(move |_, c: RdmaCompletion| st.lock().unwrap().push(format!("{:?}", c.status)))
    };
    let l = mem.as_ptr() as usize;

    // The put: its header, then the peer reads its data slowly, then acknowledges it.
    m.put(
        &Transfer::new(ep, Local::new(l, &lh), Remote::new(range.base, &rh), LEN),
        record(),
    )
    .unwrap();
    let head_len = wire::HEADER + wire::Kind::Put.ext();
    let head = read_frame(&mut m, &mut s, head_len);
    let req = match wire::decode(&head, &limits) {
        Ok(Some((wire::Frame::Put { req, data_len, .. }, used))) => {
            assert_eq!((data_len, used), (LEN, head_len), "one chunk");
            req
        }
        other => panic!("not a put: {other:?}"),
    };
    let mut peer = s.try_clone().unwrap();
    peer.set_nonblocking(false).unwrap();
    let reading = std::thread::spawn(move || {
        let mut data = vec![0u8; LEN];
        for part in data.chunks_mut(SLICE) {
            std::thread::sleep(EVERY);
            peer.read_exact(part).unwrap();
        }
        peer.write_all(&put_ack(req)).unwrap();
        data
    });
    // (Until its data is all written, the reading thread waits for this thread's
    // progress: a failed flush fails the test before the join.)
    let data = flush_while_streaming(
        &mut m,
        ep,
        reading,
        "a put whose data the peer keeps reading",
    );
    assert!(data == mem[..LEN], "the put's data as sent");

    // The get: the peer answers its request with the data, a slice at a time.
    m.get(
        &Transfer::new(
            ep,
            Local::new(l + LEN, &lh),
            Remote::new(range.base, &rh),
            LEN,
        ),
        record(),
    )
    .unwrap();
    let req_len = wire::HEADER + wire::Kind::GetReq.ext();
    let request = read_frame(&mut m, &mut s, req_len);
    let (req, offset) = match wire::decode(&request, &limits) {
        Ok(Some((
            wire::Frame::GetReq {
                req, offset, len, ..
            },
            _,
        ))) => {
            assert_eq!(len, LEN as u64, "one chunk");
            (req, offset)
        }
        other => panic!("not a get request: {other:?}"),
    };
    let mut peer = s.try_clone().unwrap();
    peer.set_nonblocking(false).unwrap();
    let writing = std::thread::spawn(move || {
        let ext = wire::Kind::GetData.ext();
        let head = wire::Encoder::new(wire::Kind::GetData, 0, 0, ext + LEN)
            .u64(req)
            .u64(offset);
        peer.write_all(head.as_bytes()).unwrap();
        let data: Vec<u8> = (0..LEN).map(|i| (i % 7) as u8).collect();
        for part in data.chunks(SLICE) {
            std::thread::sleep(EVERY);
            peer.write_all(part).unwrap();
        }
        let done = wire::Encoder::new(wire::Kind::GetDone, 0, 0, wire::Kind::GetDone.ext())
            .u64(req)
            .u64(offset)
            .u64(LEN as u64)
            .status(&Ok(()));
        peer.write_all(done.as_bytes()).unwrap();
        data
    });
    let data = flush_while_streaming(&mut m, ep, writing, "a get whose data keeps coming");
    assert!(mem[LEN..] == data[..], "the get's data in place");
    assert_eq!(*statuses.lock().unwrap(), ["Ok(())", "Ok(())"]);
    assert!(seen.lock().unwrap().is_empty(), "the peer was not failed");
    drop(lh);
    drop(mem);
}

#[test]
fn add_procs_hands_back_known_peers_whatever_the_modex() {
    let (mut m, ep, _listener, _seen) = module_facing_a_raw_peer(&[]);
    // A modex of a job of one, which knows nothing of rank 1.
    let again = m
        .add_procs(&procs(2), &mut rbtl::btl::SingletonModex::new())
        .unwrap();
    assert_eq!(again, [None, Some(ep)]);
}

/// Every timeout and limit of 0 is refused by name, as none can mean "never" or
/// "none" (flush and connections always have a way out, the pools are never empty);
/// so are values past the range.
#[test]
fn zero_timeouts_and_limits_are_refused_by_name() {
    for (name, value) in [
        ("btl_tcp_flush_timeout", "0"),
        ("btl_tcp_connect_timeout", "0"),
        ("btl_tcp_handshake_timeout", "0"),
        ("btl_tcp_free_list_max", "0"),
        ("btl_tcp_max_registrations", "0"),
        ("btl_tcp_links", "0"),
        ("btl_tcp_links", "65"),
        ("btl_tcp_max_registrations", "-1"),
    ] {
        let config = rbtl::configure(&[("btl_tcp_if_include", "lo"), (name, value)]).unwrap();
        let mut modex = TwoRanks {
            ours: None,
            theirs: Vec::new(),
        };
        match TcpComponent::open(&config, &mut modex) {
            Err(Error::ParamOutOfRange {
                name: refused,
                value: v,
                allowed,
            }) => {
                assert_eq!((refused.as_str(), v.to_string()), (name, value.to_string()));
                assert!(allowed.starts_with("give "), "{allowed}");
            }
            other => panic!("{name} = {value}: {:?}", other.map(|m| m.is_some())),
        }
    }
}

#[test]
fn a_congestion_control_the_kernel_lacks_is_refused_with_what_it_has() {
    let config = rbtl::configure(&[
        ("btl_tcp_if_include", "lo"),
        ("btl_tcp_congestion_control", "no-such-algo"),
    ])
    .unwrap();
    let mut modex = TwoRanks {
        ours: None,
        theirs: Vec::new(),
    };
    match TcpComponent::open(&config, &mut modex) {
        Err(Error::NotAvailable(why)) => assert!(
            why.starts_with("btl_tcp_congestion_control = no-such-algo: the kernel has no such")
                && why.contains("reno"),
            "{why}"
        ),
        other => panic!("{:?}", other.map(|m| m.is_some())),
    }
}

/// An algorithm the kernel has but keeps from unprivileged processes is refused to
/// them, with the list they may use. Needs such an algorithm: where every available
/// one is allowed, there is nothing to refuse and the test says SKIP (fails under
/// `NODES_REQUIRED=1`).
#[test]
fn a_congestion_control_kept_from_unprivileged_processes_is_refused_with_what_is_allowed() {
    let sysctl = |f: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{f}"))
            .unwrap()
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let allowed = sysctl("tcp_allowed_congestion_control");
    let Some(kept) = sysctl("tcp_available_congestion_control")
        .into_iter()
        .find(|a| !allowed.contains(a))
    else {
        return rbtl_testkit::cannot_run(
            "the refusal of a congestion control kept from unprivileged processes",
            "every congestion control the kernel has is allowed to them: nothing to refuse",
        );
    };
    // Run `osu` as nobody (without CAP_NET_ADMIN), bounded by `timeout`.
    let mut cmd = std::process::Command::new("timeout");
    cmd.arg("60");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ]);
    }
    let out = cmd
        .arg(env!("CARGO_BIN_EXE_osu"))
        .args(["latency", "--btl", "tcp,self", "--max-size", "8", "--param"])
        .arg(format!("btl_tcp_congestion_control={kept}"))
        .env("RBTL_BTL_TCP_IF_INCLUDE", "lo")
        .env_remove("RBTL_BTL")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert_ne!(out.status.code(), Some(124), "timed out: {text}");
    assert!(
        text.contains(&format!(
            "btl_tcp_congestion_control = {kept}: not allowed to unprivileged processes; allowed: {}",
            allowed.join(" ")
        )),
        "{text}"
    );
}

// ---------------------------------------------------------------------------
// Launcher side.

/// One job at a time: ranks poll, and two cores are all there is.
static ONE_JOB: Mutex<()> = Mutex::new(());

/// Jobs run so far, to give each its own directory.
static JOBS: AtomicUsize = AtomicUsize::new(0);

fn run(role: &str, ranks: u32, extra_env: &[(&str, &str)]) -> (i32, PathBuf) {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!(
        "rbtl-tcp-{}-{role}-{ranks}-{}",
        std::process::id(),
        JOBS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(dir.join("shm")).unwrap();
    let mut env = vec![
        ("TCP_TEST_ROLE".to_string(), role.to_string()),
        ("TCP_TEST_DIR".to_string(), dir.display().to_string()),
        (
            "RBTL_SHM_DIR".to_string(),
            dir.join("shm").display().to_string(),
        ),
        // (`launch_ranks` adds RBTL_BTL_TCP_IF_INCLUDE=lo, loopback only, unless
        // `extra_env` names other loopback addresses.)
        ("RBTL_BTL".to_string(), "self,tcp".to_string()),
    ];
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    (common::launch_ranks(ranks, env), dir)
}

fn oks(dir: &Path, ranks: &[u32]) -> usize {
    ranks
        .iter()
        .filter(|r| dir.join(format!("ok.{r}")).exists())
        .count()
}

fn expect_all_ok(role: &str, ranks: u32, env: &[(&str, &str)]) {
    let (code, dir) = run(role, ranks, env);
    assert_eq!(code, 0, "{role} with {ranks} ranks {env:?}");
    let all: Vec<u32> = (0..ranks).collect();
    assert_eq!(
        oks(&dir, &all),
        ranks as usize,
        "{role}: every rank reported success"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn contract_two_and_four_ranks() {
    expect_all_ok("contract", 2, &[]);
    expect_all_ok("contract", 4, &[]);
}

#[test]
fn contract_three_links_per_peer_small_chunks_and_limits() {
    expect_all_ok(
        "contract",
        2,
        &[
            ("RBTL_BTL_TCP_LINKS", "3"),
            ("RBTL_BTL_TCP_RDMA_CHUNK", "1000"),
            ("RBTL_BTL_TCP_PUT_LIMIT", "4096"),
            ("RBTL_BTL_TCP_PUT_ALIGNMENT", "8"),
            ("RBTL_BTL_TCP_GET_LIMIT", "3000"),
            ("RBTL_BTL_TCP_GET_ALIGNMENT", "4"),
            // Reno is in every kernel and allowed to unprivileged processes.
            ("RBTL_BTL_TCP_CONGESTION_CONTROL", "reno"),
        ],
    );
    expect_all_ok("contract", 4, &[("RBTL_BTL_TCP_LINKS", "3")]);
}

#[test]
fn contract_over_ipv6_only_two_and_four_ranks() {
    let v6 = ("TCP_TEST_FAMILIES", "6");
    expect_all_ok("contract", 2, &[("RBTL_BTL_TCP_DISABLE_FAMILY", "4"), v6]);
    expect_all_ok("contract", 4, &[("RBTL_BTL_TCP_IF_INCLUDE", "::1/128"), v6]);
}

common::all_ok_tests! {
    strangers_are_closed_and_counted_and_change_nothing:
        "strangers", 2, &[("RBTL_BTL_TCP_HANDSHAKE_TIMEOUT", "300")];

    a_crowd_of_silent_connections_never_keeps_members_out:
        "crowd", 5, &[("RBTL_BTL_TCP_HANDSHAKE_TIMEOUT", "60000")];

    members_connecting_to_each_other_at_once_keep_one_connection: "crossing", 2, &[];

    a_member_that_breaks_the_protocol_is_ended_with_the_reason: "violation", 3, &[];

    the_target_refuses_what_its_registrations_do_not_allow: "refused", 2, &[];

    flush_names_a_stopped_peer_after_its_timeout_and_its_operations_complete_once_it_runs:
        "stopped", 3, &[("RBTL_BTL_TCP_FLUSH_TIMEOUT", "1000")];
}

#[test]
fn a_killed_peer_fails_its_operations_and_only_it() {
    let (code, dir) = run("killed", 3, &[]);
    assert_ne!(code, 0, "a rank was killed");
    assert_eq!(
        oks(&dir, &[0, 2]),
        2,
        "ranks 0 and 2 went on (job code {code})"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
