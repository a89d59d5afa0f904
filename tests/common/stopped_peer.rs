//! The message layer giving up on a rank that stopped (SIGSTOP) while rank 0 needs it,
//! as the two ranks of a job with `msg_peer_timeout` 1 s run it over any transport:
//! shared by the test binaries of those transports.

use crate::common::{wait_until_stopped, watchdog};
use rbtl::msg::{Comm, Error, ReqId, Window};
use std::time::{Duration, Instant};

/// Where rank 1 stops.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// Anywhere in a ping-pong: it stops itself from another thread a few milliseconds
    /// in, at a moment chosen by chance.
    AtRandom,
    /// Where rank 0 knows it: rank 1 says so, then stops itself. Rank 0 then starts
    /// work towards it before it waits for it: [`FLOOD`] eager sends, a rendezvous send
    /// ([`RENDEZVOUS`] bytes), and a window put, whose call waits for the transport to
    /// complete it. A transport that posts that work to a device may keep it there: a
    /// shared receive queue the stopped rank no longer refills makes the device retry
    /// the sends it cannot take without end (receiver not ready), and keeps everything
    /// posted after them waiting behind them.
    WithWorkPosted,
}

/// Eager sends rank 0 starts towards the stopped rank.
pub const FLOOD: usize = 32;
/// Bytes of its rendezvous send.
pub const RENDEZVOUS: usize = 1 << 20;
/// Bytes of its window put (through the transport's staging buffer).
const PUT: usize = 4096;

/// Run the scenario as this rank of two. Rank 0's first blocking call that needs rank 1
/// returns `PeerTimeout` after about `msg_peer_timeout` (which the job sets to 1 s);
/// rank 1 then counts as failed: calls naming it fail at once with `PeerFailed`, as
/// does the wait of the rendezvous send, and a barrier fails. Rank 0 reports
/// `timed_out` through `report` (and `put_timed_out` when the window put was the call
/// that timed out), then exits with 1, which ends the job. Rank 1 never returns.
pub fn run(mut comm: Comm, stop: Stop, report: &dyn Fn(u32, &str)) -> ! {
    watchdog(Duration::from_secs(30));
    let me = comm.rank();
    let mut window = match stop {
        Stop::AtRandom => None,
        Stop::WithWorkPosted => Some(Window::allocate(&mut comm, PUT).unwrap()),
    };
    comm.barrier().unwrap();
    let mut b = [0u8; 8];
    if me == 1 {
        stop_rank_1(&mut comm, stop, &mut b);
    }
    let started = Instant::now();
    let (e, rendezvous) = match (stop, window.as_mut()) {
        (Stop::WithWorkPosted, Some(window)) => {
            let (e, req) = give_up_with_work_posted(&mut comm, window, report);
            (e, Some(req))
        }
        _ => (ping_pong_until_error(&mut comm, &mut b), None),
    };
    match e {
        Error::PeerTimeout { rank: 1, waited } => {
            assert!(waited >= Duration::from_secs(1), "{waited:?}");
            // The wait happened: not only reported.
            assert!(
                started.elapsed() >= Duration::from_secs(1),
                "gave up after {:?}, for a timeout of 1 s",
                started.elapsed()
            );
            assert!(
                e.to_string().contains("msg_peer_timeout"),
                "the error says what to raise: {e}"
            );
        }
        other => panic!("expected a timeout of rank 1, got {other:?}"),
    }
    // Rank 1 counts as failed now: calls naming it fail at once.
    let at_once = Instant::now();
    assert!(matches!(
        comm.send(&b, 1, 0),
        Err(Error::PeerFailed { rank: 1, .. })
    ));
    assert!(matches!(
        comm.recv(&mut b, Some(1), Some(0)),
        Err(Error::PeerFailed { rank: 1, .. })
    ));
    if let Some((req, _buffer)) = rendezvous {
        let got = comm.wait(req);
        assert!(
            matches!(got, Err(Error::PeerFailed { rank: 1, .. })),
            "the rendezvous send to rank 1 failed with it: {got:?}"
        );
    }
    assert!(comm.barrier().is_err());
    assert!(at_once.elapsed() < Duration::from_secs(1));
    eprintln!("rank 1 given up after {:?}", started.elapsed());
    report(me, "timed_out");
    std::process::exit(1);
}

/// Rank 1's part: stop where `stop` says, and never return.
fn stop_rank_1(comm: &mut Comm, stop: Stop, b: &mut [u8; 8]) -> ! {
    match stop {
        Stop::AtRandom => {
            // Some milliseconds into the ping-pong, from another thread: anywhere in it.
            let delay = 20 + u64::from(std::process::id() % 80);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(delay));
                // SAFETY: a signal to ourselves.
                unsafe { libc::kill(libc::getpid(), libc::SIGSTOP) };
            });
            loop {
                comm.recv(b, Some(0), Some(0)).unwrap();
                comm.send(b, 0, 0).unwrap();
            }
        }
        Stop::WithWorkPosted => {
            comm.send(&std::process::id().to_le_bytes(), 0, 1).unwrap();
            // SAFETY: a signal to ourselves.
            unsafe { libc::raise(libc::SIGSTOP) };
            // (Never continued: the job ends with rank 0.)
            loop {
                std::thread::sleep(Duration::from_secs(600));
            }
        }
    }
}

/// Rank 0 of [`Stop::AtRandom`]: ping-pong until a call fails; its error.
fn ping_pong_until_error(comm: &mut Comm, b: &mut [u8; 8]) -> Error {
    loop {
        if let Err(e) = comm.send(b, 1, 0) {
            return e;
        }
        if let Err(e) = comm.recv(b, Some(1), Some(0)) {
            return e;
        }
    }
}

/// Rank 0 of [`Stop::WithWorkPosted`]: once rank 1 has stopped, start the work towards
/// it, then put into its window, and if that completes, receive from it. The error of
/// the call that failed, and the rendezvous send's request with its buffer (which
/// must live until the request completes).
fn give_up_with_work_posted(
    comm: &mut Comm,
    window: &mut Window,
    report: &dyn Fn(u32, &str),
) -> (Error, (ReqId, Vec<u8>)) {
    let mut pid = [0u8; 4];
    comm.recv(&mut pid, Some(1), Some(1)).unwrap();
    wait_until_stopped(u32::from_le_bytes(pid) as i32);
    for i in 0..FLOOD {
        comm.send(&[i as u8; 64], 1, 2)
            .expect("an eager send is taken without the receiver");
    }
    let big = vec![7u8; RENDEZVOUS];
    // SAFETY: `big` is returned with the request and lives until it completes.
    let req = unsafe { comm.isend_raw(big.as_ptr(), big.len(), 1, 3) }.unwrap();
    let e = match window.put(comm, 1, 0, &[1u8; PUT]) {
        Err(e) => {
            report(0, "put_timed_out");
            e
        }
        Ok(()) => {
            let mut b = [0u8; 8];
            comm.recv(&mut b, Some(1), Some(0))
                .expect_err("rank 1 is stopped")
        }
    };
    (e, (req, big))
}
