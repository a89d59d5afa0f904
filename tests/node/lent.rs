//! Eager sends that find no room in the rings: a large one waits in the sender's buffer,
//! its request under way until the transport takes it (no copy), a small one is copied
//! and complete at once; either way they arrive in the order they were sent, and a lent
//! send whose receiver dies fails instead of waiting for room that never comes.
//!
//! Run with an eager limit of 64 KiB + 64 and rings of 128 KiB: four of the messages
//! below fill a ring while its receiver stays out of the library.

use rbtl::msg::{Comm, Error, ReqId};
use std::time::Duration;

/// Bytes of each large message: eager, above the size from which a waiting payload is
/// lent rather than copied.
const LEN: usize = 32 << 10;
/// Large messages sent: twice what a ring holds.
const LARGE: u8 = 8;
/// How long the receiver stays out of the library before it receives.
const AWAY: Duration = Duration::from_millis(300);

fn message(tag: u8) -> Vec<u8> {
    (0..LEN).map(|i| (i * 7) as u8 ^ tag).collect()
}

/// Rank 0 sends `LARGE` large messages (tags 0..) and a small one (tag `LARGE`) to rank
/// 1, which stays away meanwhile (`dies`: is killed instead of receiving).
pub fn run(report: &dyn Fn(u32, &str), dies: bool) {
    super::common::watchdog(Duration::from_secs(30));
    let mut comm = Comm::init(&[]).unwrap();
    let me = comm.rank();
    comm.barrier().unwrap();
    if me == 1 {
        std::thread::sleep(AWAY);
        if dies {
            // SAFETY: raising a signal on ourselves.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        let mut got = vec![0u8; LEN];
        for tag in 0..LARGE {
            let st = comm.recv(&mut got, Some(0), None).unwrap();
            assert_eq!(st.tag, i32::from(tag), "messages arrive in the order sent");
            assert!(got == message(tag), "large message {tag} arrived whole");
        }
        let mut small = [0u8; 8];
        let st = comm.recv(&mut small, Some(0), None).unwrap();
        assert_eq!((st.tag, small), (i32::from(LARGE), [LARGE; 8]));
        comm.finalize().unwrap();
        report(me, "ok");
        return;
    }
    let bufs: Vec<Vec<u8>> = (0..LARGE).map(message).collect();
    let small = [LARGE; 8];
    // SAFETY: the buffers outlive the requests, waited for below.
    let reqs: Vec<ReqId> = unsafe {
        let mut r: Vec<ReqId> = (0..LARGE)
            .map(|t| comm.isend_raw(bufs[t as usize].as_ptr(), LEN, 1, i32::from(t)))
            .collect::<Result<_, _>>()
            .unwrap();
        r.push(
            comm.isend_raw(small.as_ptr(), small.len(), 1, i32::from(LARGE))
                .unwrap(),
        );
        r
    };
    // The receiver is away: the last large send still holds its buffer, while the small
    // one behind it was copied.
    let last = reqs[LARGE as usize - 1];
    assert!(
        comm.test(last).is_none(),
        "a large eager send that found no room is under way until it leaves"
    );
    assert!(
        comm.test(reqs[LARGE as usize]).is_some(),
        "a small eager send that found no room was copied: complete at once"
    );
    if dies {
        for r in &reqs[..LARGE as usize] {
            match comm.wait(*r) {
                Ok(_) => {}
                Err(Error::PeerFailed { rank: 1, .. }) => {
                    report(me, "lent_failed");
                    std::process::exit(1);
                }
                Err(e) => panic!("a lent send to a dead rank: {e}"),
            }
        }
        panic!("every send to a rank killed before receiving completed");
    }
    for r in &reqs[..LARGE as usize] {
        let st = comm.wait(*r).unwrap();
        assert_eq!(st.len, LEN);
    }
    comm.finalize().unwrap();
    report(me, "ok");
}
