//! A peer that never answers the connection handshake, as the ranks of a 3-rank job
//! over `openib` run it: rank 0 stops rank 1 (SIGSTOP) before they ever connected,
//! starts a put, a fetch-add and a send to it and a put to rank 2, and flushes.
//! Connections are made on first use by a handshake the peer answers in its own
//! progress, so without a deadline that flush would never return.

use crate::common::offered::Offered;
use crate::common::{assert_timed_out_on, errors_heard, progress_until, watchdog, Continue};
use rbtl::btl::{
    ActiveMessage, DesFlags, Endpoint, Error, Local, Module, Order, PeerFailure, RdmaCallback,
    RdmaCompletion, Remote, SendOutcome, SendiOutcome, Tag, Transfer,
};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `btl_openib_connect_timeout` of the job.
pub const CONNECT: Duration = Duration::from_millis(4000);
/// `btl_openib_flush_timeout` of the job.
pub const FLUSH: Duration = Duration::from_millis(1500);

/// What an operation's or a send's callback got, by the rank it went to.
type Outcomes = Arc<Mutex<Vec<(u32, rbtl::btl::Result<()>)>>>;

/// What the error callback heard: the rank and the error.
type Reports = Arc<Mutex<Vec<(Option<u32>, String)>>>;

/// Send one byte on `tag` to `ep`, inline or through the descriptor `sendi` hands back;
/// its outcome goes to `outcomes` under `to`.
fn send_byte(m: &mut dyn Module, ep: Endpoint, to: u32, tag: Tag, outcomes: &Outcomes) {
    let flags = DesFlags::OWNERSHIP | DesFlags::ALWAYS_CALLBACK;
    match m
        .sendi(&ActiveMessage::new(ep, tag, &[], &[1]).flagged(flags))
        .unwrap()
    {
        SendiOutcome::Sent => outcomes.lock().unwrap().push((to, Ok(()))),
        SendiOutcome::Descriptor(mut des) => {
            let o = outcomes.clone();
            des.set_callback(Box::new(move |_, done| {
                o.lock().unwrap().push((to, done.status));
            }));
            match m.send(ep, des, tag) {
                Ok(SendOutcome::Queued | SendOutcome::Done(_)) => {}
                Err(e) => outcomes.lock().unwrap().push((to, Err(e.error))),
            }
        }
    }
}

/// Whether `status` is rank `rank`'s failure because its connection was not up in time.
fn timed_out(status: &rbtl::btl::Result<()>, rank: u32) -> bool {
    let limit = format!("not up within {} ms", CONNECT.as_millis());
    matches!(status, Err(Error::PeerFailed { rank: r, why: PeerFailure::Connect(why) })
        if *r == rank && why.contains(&limit) && why.contains("btl_openib_connect_timeout"))
}

/// The job (`CONNECT` and `FLUSH` set): rank 0 stops rank 1 before any connection to it
/// and starts a put, a fetch-add and a send to it, and a put to rank 2. The first
/// `flush(None)` completes rank 2's put and, after `FLUSH`, returns `PeerTimeout`
/// naming rank 1 alone, whose operations stay queued. Flushing rank 1 again returns
/// `Ok` once its connection's deadline (`CONNECT` after the put) has passed: its
/// operations and the send fail with `PeerFailed` saying the connection was not up in
/// time, the error callback reports it once, and later operations to it fail at once.
/// Rank 2 goes on. Then rank 1 runs again: the handshake it answers late brings nothing
/// back on rank 0, and its own send to rank 0 fails (rank 0 has given it up) within
/// its own deadline. `dir` is where the ranks leave word for each other.
pub fn run(m: &mut dyn Module, eps: &[Option<Endpoint>], job: &mut rbtl::pmi::Job, dir: &Path) {
    const LEN: usize = 16 << 10;
    watchdog(Duration::from_secs(60));
    let rank = job.rank;
    let seen: Reports = errors_heard(m, |e| (e.rank, format!("{:?}", e.error)));
    let over = Tag::USR;
    let got: Arc<Mutex<u32>> = Arc::default();
    let g = got.clone();
    m.register_am(over, Box::new(move |_, _| *g.lock().unwrap() += 1))
        .unwrap();
    let pattern: Vec<u8> = (0..LEN).map(|i| (i % 249) as u8).collect();
    let mut offered = Offered::publish(m, job, "stopped_connect", LEN);
    let sends: Outcomes = Arc::default();
    match rank {
        0 => {
            let (ep1, ep2) = (eps[1].unwrap(), eps[2].unwrap());
            let (pid1, addr1, rh1) = Offered::of(job, 1, "stopped_connect");
            let (_, addr2, rh2) = Offered::of(job, 2, "stopped_connect");
            offered.mem[..LEN].copy_from_slice(&pattern);
            let resume = Continue::stop(pid1);
            let done: Outcomes = Arc::default();
            let cb = |to: u32| -> RdmaCallback {
                let d = done.clone();
                Box::new(move |_, r: RdmaCompletion| d.lock().unwrap().push((to, r.status)))
            };
            let started = Instant::now();
            offered.put_then_fetch_add(m, ep1, (addr1, &rh1), LEN, || cb(1));
            let (l, order) = (offered.mem.as_ptr() as usize, Order::ANY);
            // A put of `len` bytes from the start of `mem` to the start of what rank `to`
            // (1 or 2) offered.
            let put = |m: &mut dyn Module, to: u32, len: usize| {
                let (ep, addr, rh) = if to == 1 {
                    (ep1, addr1, &rh1)
                } else {
                    (ep2, addr2, &rh2)
                };
                let local = Local::new(l, &offered.handle);
                m.put(
                    &Transfer::new(ep, local, Remote::new(addr, rh), len).ordered(order),
                    cb(to),
                )
            };
            // Once rank 1 has failed, a put to it fails at once.
            let refused_at_once = |m: &mut dyn Module| {
                let again = put(m, 1, 8);
                assert!(
                    matches!(again, Err(Error::PeerFailed { rank: 1, .. })),
                    "{again:?}"
                );
            };
            send_byte(m, ep1, 1, over, &sends);
            put(m, 2, LEN).unwrap();

            // The first flush gives up on rank 1 alone, its operations still queued.
            let e = m.flush(None).expect_err("rank 1 never answers");
            let took = started.elapsed();
            eprintln!("rank 0: after {took:?}: {e}");
            assert!(
                took >= FLUSH && took < CONNECT,
                "flush gave up after {took:?}, for a flush timeout of {FLUSH:?}"
            );
            assert_timed_out_on(&e, (ep1, 1), FLUSH, "btl_openib_flush_timeout");
            {
                let d = done.lock().unwrap();
                assert!(
                    matches!(&d[..], [(2, Ok(()))]),
                    "rank 2's put completed, rank 1's operations wait: {d:?}"
                );
            }
            assert!(sends.lock().unwrap().is_empty(), "the send to rank 1 waits");
            assert!(
                seen.lock().unwrap().is_empty(),
                "{:?}",
                seen.lock().unwrap()
            );

            // Flushing again ends at the connection's deadline: everything for rank 1
            // fails, saying why.
            loop {
                match m.flush(Some(ep1)) {
                    Ok(()) => break,
                    Err(Error::PeerTimeout { peers, .. }) if peers[0].endpoint == ep1 => {}
                    Err(other) => panic!("flushing rank 1: {other:?}"),
                }
            }
            let took = started.elapsed();
            assert!(
                took >= CONNECT,
                "rank 1 failed after {took:?}, before its deadline"
            );
            eprintln!("rank 0: after {took:?}: {:?}", seen.lock().unwrap());
            {
                let d = done.lock().unwrap();
                let failed: Vec<_> = d.iter().filter(|(to, _)| *to == 1).collect();
                assert_eq!(failed.len(), 2, "{d:?}");
                assert!(failed.iter().all(|(_, s)| timed_out(s, 1)), "{d:?}");
            }
            progress_until(m, "the send's callback", || {
                !sends.lock().unwrap().is_empty()
            });
            {
                let s = sends.lock().unwrap();
                assert!(matches!(&s[..], [(1, st)] if timed_out(st, 1)), "{s:?}");
            }
            let reported = |seen: &[(Option<u32>, String)]| {
                matches!(seen, [(Some(1), e)]
                    if e.contains("PeerFailed") && e.contains("not up within"))
            };
            assert!(
                reported(&seen.lock().unwrap()),
                "{:?}",
                seen.lock().unwrap()
            );
            refused_at_once(m);

            // Rank 2 goes on.
            done.lock().unwrap().clear();
            put(m, 2, LEN).unwrap();
            m.flush(Some(ep2)).expect("rank 2 answers");
            assert!(matches!(&done.lock().unwrap()[..], [(2, Ok(()))]));
            send_byte(m, ep2, 2, over, &sends);

            // Rank 1 runs again and answers late, and tries to reach rank 0 itself:
            // nothing comes back to life here, and nothing more is reported.
            std::fs::write(dir.join("release"), b"").unwrap();
            drop(resume);
            progress_until(m, "rank 1's attempt", || dir.join("attempted.1").exists());
            for _ in 0..1 << 16 {
                m.progress();
            }
            refused_at_once(m);
            assert!(
                reported(&seen.lock().unwrap()),
                "{:?}",
                seen.lock().unwrap()
            );
            assert_eq!(offered.result, [0; 8], "no fetch-add ran");
        }
        1 => {
            // Stopped by rank 0 in here, until it lets this rank go.
            progress_until(m, "the release", || dir.join("release").exists());
            assert_eq!(offered.mem[..LEN], vec![0; LEN], "no put landed");
            assert_eq!(offered.mem[LEN..], 41u64.to_le_bytes(), "no fetch-add ran");
            assert_eq!(*got.lock().unwrap(), 0, "no message came");
            // Rank 0 has given this rank up: a send to it fails (refused, or at this
            // rank's own deadline; the hang guard bounds it), whatever its handshake
            // meets.
            send_byte(m, eps[0].unwrap(), 0, over, &sends);
            progress_until(m, "the send's callback", || {
                !sends.lock().unwrap().is_empty()
            });
            let s = sends.lock().unwrap();
            assert!(
                matches!(&s[..], [(0, Err(Error::PeerFailed { rank: 0, .. }))]),
                "{s:?}"
            );
            eprintln!("rank 1: {s:?}");
            drop(s);
            std::fs::write(dir.join("attempted.1"), b"").unwrap();
        }
        _ => {
            progress_until(m, "rank 0's message", || *got.lock().unwrap() > 0);
            assert_eq!(offered.mem[..LEN], pattern[..], "rank 0's puts landed");
        }
    }
    // Every rank is done with the module before any ends.
    job.modex.fence().unwrap();
    drop(offered);
}
