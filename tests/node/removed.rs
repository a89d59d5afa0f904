//! A rank that removes its peers (`del_procs`) tells them, over `sm`: rank 0 removes
//! ranks 1 to 4 and releases the memory it offered them, and each then fails rank 0
//! (`PeerFailed`, naming the removal) instead of waiting for answers that never come,
//! meeting a handle that went away, or filling a ring nobody reads.

use crate::common::offered::Offered;
use crate::common::{errors_heard, send_noted, watchdog};
use rbtl::btl::{
    ActiveMessage, Endpoint, Error, Local, Module, PeerFailure, RdmaCallback, RdmaCompletion,
    Remote, RemoteHandle, SendOutcome, SendiOutcome, Tag, Transfer,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a rank that was removed sees of rank 0: every status is `PeerFailed` naming
/// rank 0 and its removal of this process.
fn removed_by_rank_0(status: &str) -> bool {
    status == "Err(PeerFailed { rank: 0, why: RemovedUs })"
}

/// The same of an error: rank 0's removal of this process.
fn is_removal_by_rank_0(e: &Error) -> bool {
    matches!(
        e,
        Error::PeerFailed {
            rank: 0,
            why: PeerFailure::RemovedUs
        }
    )
}

/// Most sends a full ring is looked for with (it has 64 slots by default).
const SENDS: usize = 4096;

/// The role of the five ranks (`btl_sm_rdma=copy`, so that rank 1's put and fetch-add
/// travel through the rings and wait for rank 0's answers).
///
/// - Rank 1 starts a put and a fetch-add to rank 0 while rank 0 does not progress.
/// - Rank 0 removes ranks 1 to 4, then releases the memory it offered.
/// - Rank 1 flushes: both operations fail with `PeerFailed` naming rank 0's removal,
///   well before the flush timeout (which the job sets to 60 s).
/// - Rank 2 gets from rank 0's released memory: `PeerFailed`, not a bad handle.
/// - Rank 3 only sends descriptors to rank 0, until its ring is full and a send waits:
///   the next progress fails rank 0 and that send with it (not a liveness look tens of
///   thousands of idle calls later).
/// - Rank 4 only sends with `sendi`, without progress: once the ring is full, `sendi`
///   fails rank 0 instead of answering that the ring is full.
/// - Each reports rank 0's failure once through the error callback.
pub fn run(m: &mut dyn Module, eps: &[Option<Endpoint>], job: &mut rbtl::pmi::Job) {
    const HALF: usize = 16 << 10;
    watchdog(Duration::from_secs(50));
    let rank = job.rank;
    let seen = errors_heard(m, |e| format!("{:?}: {:?}", e.rank, e.error));
    let mut offered = Offered::publish(m, job, "removed", HALF);
    let statuses: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = || -> RdmaCallback {
        let st = statuses.clone();
        Box::new(move |_, c: RdmaCompletion| st.lock().unwrap().push(format!("{:?}", c.status)))
    };
    let to_0 = |job: &mut rbtl::pmi::Job| -> (Endpoint, u64, RemoteHandle) {
        let (_, addr, rh) = Offered::of(job, 0, "removed");
        (eps[0].expect("sm reaches rank 0"), addr, rh)
    };
    if rank == 1 {
        let (ep0, addr0, rh0) = to_0(job);
        offered.put_then_fetch_add(m, ep0, (addr0, &rh0), HALF, record);
    }
    job.modex.fence().unwrap();
    if rank == 0 {
        let others: Vec<Endpoint> = eps.iter().flatten().copied().collect();
        m.del_procs(&others).unwrap();
        drop(offered.handle);
        job.modex.fence().unwrap();
        // Removing is no failure to report.
        for _ in 0..1000 {
            m.progress();
        }
        let reports = seen.lock().unwrap().clone();
        assert!(reports.is_empty(), "{reports:?}");
        // Alive until both have looked: a rank that ended would fail for that reason.
        job.modex.fence().unwrap();
    } else {
        job.modex.fence().unwrap();
        let (ep0, addr0, rh0) = to_0(job);
        if rank == 1 {
            m.flush(Some(ep0)).expect("nothing is left to wait for");
            let got = statuses.lock().unwrap().clone();
            assert_eq!(got.len(), 2, "the put's and the fetch-add's: {got:?}");
            assert!(got.iter().all(|s| removed_by_rank_0(s)), "{got:?}");
        } else if rank == 3 {
            send_until_the_ring_is_full(m, ep0);
        } else if rank == 4 {
            sendi_until_refused(m, ep0);
        } else {
            let l = offered.mem.as_ptr() as usize;
            let e = m
                .get(
                    &Transfer::new(
                        ep0,
                        Local::new(l, &offered.handle),
                        Remote::new(addr0, &rh0),
                        HALF,
                    ),
                    record(),
                )
                .expect_err("rank 0 removed this process and released its memory");
            assert!(is_removal_by_rank_0(&e), "{e:?}");
        }
        // The report comes with the next progress.
        m.progress();
        let reports = seen.lock().unwrap().clone();
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert!(
            reports[0] == "Some(0): PeerFailed { rank: 0, why: RemovedUs }",
            "{reports:?}"
        );
        job.modex.fence().unwrap();
        drop(offered.handle);
    }
    drop((offered.result_handle, offered.mem, offered.result));
}

/// Rank 3's part: descriptor sends to rank 0 until one waits for room in its ring; the
/// next progress calls end that send with rank 0's removal.
fn send_until_the_ring_is_full(m: &mut dyn Module, ep0: Endpoint) {
    let statuses: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut waiting = false;
    for _ in 0..SENDS {
        match send_noted(m, ep0, Tag::USR, &statuses, |s| format!("{s:?}")) {
            Ok(SendOutcome::Queued) => {
                waiting = true;
                break;
            }
            Ok(_) => {}
            Err(e) => panic!("send before the ring was full: {e}"),
        }
    }
    assert!(
        waiting,
        "{SENDS} sends all went into a ring that nobody reads"
    );
    // A handful of calls, far fewer than the idle calls between two liveness looks.
    for _ in 0..100 {
        m.progress();
    }
    let got = statuses.lock().unwrap().clone();
    let failed: Vec<&String> = got.iter().filter(|s| *s != "Ok(())").collect();
    assert_eq!(failed.len(), 1, "only the send that waited fails: {got:?}");
    assert!(removed_by_rank_0(failed[0]), "{got:?}");
}

/// Rank 4's part: `sendi` to rank 0, never progressing, until it refuses: with rank 0's
/// removal, once the ring is full.
fn sendi_until_refused(m: &mut dyn Module, ep0: Endpoint) {
    for _ in 0..SENDS {
        match m.sendi(&ActiveMessage::new(ep0, Tag::USR, &[], &[4])) {
            Ok(SendiOutcome::Sent) => {}
            Ok(SendiOutcome::Descriptor(_)) => panic!("sendi of one byte handed a descriptor"),
            Err(e) => {
                assert!(is_removal_by_rank_0(&e), "{e:?}");
                return;
            }
        }
    }
    panic!("{SENDS} sends all went into a ring that nobody reads");
}
