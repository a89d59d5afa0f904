//! `sm`'s eager limit while its rings run slow: where the start-up probe chose the
//! limit (64 KiB + 64, where cross-memory attach is slow), slow copies into the rings
//! lower it to the component's default, and a nonblocking send above that then goes
//! by rendezvous, as does a blocking one with MPI's standard-mode latitude
//! (`send_standard_in`); a plain blocking send keeps the start-up limit (what the
//! message layer tells layers above that rely on it). Run with a switch rate no ring reaches, so
//! that every timed copy counts as slow. Where the probe found attach fast (the
//! limit is the default from the start), there is nothing to lower: the rank says
//! so and checks only that the messages arrive.

use rbtl::msg::{Comm, ReqId, WORLD};
use std::path::PathBuf;
use std::time::Duration;

/// Bytes of each message: eager at the probe's limit, above the default.
const LEN: usize = 32 << 10;
/// Messages sent before the checks: their copies into the ring are timed.
const FIRST: u8 = 4;
/// How long rank 1 stays out of the library before receiving the checked ones.
const AWAY: Duration = Duration::from_millis(300);

/// The file rank 1 writes when it is back in the library.
fn back() -> PathBuf {
    PathBuf::from(std::env::var_os("NODE_TEST_DIR").expect("NODE_TEST_DIR")).join("back")
}

fn message(tag: u8) -> Vec<u8> {
    (0..LEN).map(|i| (i * 11) as u8 ^ tag).collect()
}

/// Rank 0 sends `FIRST` messages (tags 0..), then, while rank 1 is away (until it
/// writes [`back`]), one by a blocking send (tag `FIRST`), one by a nonblocking send
/// (tag `FIRST + 1`) and one by `send_standard_in` (tag `FIRST + 2`).
pub fn run(report: &dyn Fn(u32, &str)) {
    super::common::watchdog(Duration::from_secs(30));
    let mut comm = Comm::init(&[]).unwrap();
    let me = comm.rank();
    let start_up = comm.eager_payload_to(me ^ 1).unwrap();
    let lowers = start_up >= LEN;
    if !lowers {
        eprintln!("slow_rings: the eager limit is {start_up} B from the start: nothing to lower");
    }
    let mut got = vec![0u8; LEN];
    if me == 1 {
        for tag in 0..FIRST {
            comm.recv(&mut got, Some(0), Some(i32::from(tag))).unwrap();
            assert!(got == message(tag), "message {tag} arrived whole");
        }
        comm.barrier().unwrap();
        std::thread::sleep(AWAY);
        std::fs::write(back(), b"back").unwrap();
        for tag in FIRST..FIRST + 3 {
            comm.recv(&mut got, Some(0), Some(i32::from(tag))).unwrap();
            assert!(got == message(tag), "message {tag} arrived whole");
        }
        comm.finalize().unwrap();
        report(me, "ok");
        return;
    }
    for tag in 0..FIRST {
        comm.send(&message(tag), 1, i32::from(tag)).unwrap();
    }
    comm.barrier().unwrap();
    let limit = comm
        .modules()
        .find(|m| m.name() == "sm")
        .unwrap()
        .attributes()
        .eager_limit;
    if lowers {
        assert!(
            limit < LEN,
            "after slow copies into the ring the probe's eager limit falls (now {limit} B)"
        );
        assert_eq!(
            comm.eager_payload_to(1),
            Some(start_up),
            "what the layer tells layers above stays the start-up limit"
        );
    }
    // Rank 1 is away: an eager message completes at once, a rendezvous waits for it.
    comm.send(&message(FIRST), 1, i32::from(FIRST)).unwrap();
    assert!(
        !back().exists(),
        "a blocking send at the start-up eager limit ended without its receiver"
    );
    let nonblocking = message(FIRST + 1);
    // SAFETY: the buffer outlives the request, waited for below.
    let req: ReqId = unsafe {
        comm.isend_raw(nonblocking.as_ptr(), LEN, 1, i32::from(FIRST + 1))
            .unwrap()
    };
    let done_at_once = comm.test(req).is_some();
    if lowers {
        assert!(
            !done_at_once,
            "a nonblocking send above the lowered limit goes by rendezvous"
        );
    }
    // A blocking send with MPI's standard-mode latitude takes the lowered limit too:
    // it returns once rank 1, back, has matched it.
    comm.send_standard_in(WORLD, &message(FIRST + 2), 1, i32::from(FIRST + 2))
        .unwrap();
    if lowers {
        assert!(
            back().exists(),
            "a standard-mode send above the lowered limit waited for its receiver"
        );
    }
    comm.wait(req).unwrap();
    comm.finalize().unwrap();
    report(me, "ok");
}
