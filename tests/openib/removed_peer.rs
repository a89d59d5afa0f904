//! A stopped peer with work posted to it on the device, as the two ranks of a job with a
//! shared receive queue of [`SRQ_DEPTH`] buffers run it: a flush gives up on it after
//! [`FLUSH_TIMEOUT`]; removed (`del_procs`), the work the device held ends at once,
//! each callback once, with the peer's failure. And messages that arrived from a peer
//! before its removal, polled after it: none reaches a callback, and the removed peer
//! is told ([`run_late`]).

use crate::common::offered::Offered;
use crate::common::{errors_heard, progress_until, send_noted, senders, watchdog, Continue};
use rbtl::btl::{
    ActiveMessage, DesFlags, Endpoint, Error, Local, Module, PeerFailure, RdmaCallback,
    RdmaCompletion, Remote, SendOutcome, SendiOutcome, Tag, Transfer,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Buffers of the shared receive queue (`btl_openib_srq_depth`) the job sets.
pub const SRQ_DEPTH: usize = 8;
/// The flush timeout (`btl_openib_flush_timeout`) the job sets.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);
/// Sends rank 0 posts to the stopped rank: more than its queue can take.
const SENDS: usize = 4 * SRQ_DEPTH;
/// Bytes of the put and the get.
const LEN: usize = 32 << 10;

/// What the error callback heard: the rank, and the error's text.
type Reported = Arc<Mutex<Vec<(Option<u32>, String)>>>;

/// How one operation ended: `Ok`, rank 1's failure with why, or another error.
#[derive(Debug, PartialEq)]
enum Ended {
    Ok,
    FailedPeer(u32, PeerFailure),
    Other(String),
}

fn ended(status: &Result<(), Error>) -> Ended {
    match status {
        Ok(()) => Ended::Ok,
        Err(Error::PeerFailed { rank, why }) => Ended::FailedPeer(*rank, why.clone()),
        Err(e) => Ended::Other(format!("{e:?}")),
    }
}

/// Rank 0 stops rank 1 (SIGSTOP) once they are connected, and posts [`SENDS`] sends to
/// it: its shared receive queue takes at most [`SRQ_DEPTH`], and its device answers the
/// next with receiver-not-ready, which rank 0's device retries without end
/// (`rnr_retry` 7). Rank 0 then posts a put, a fetch-add and a get, which wait behind
/// that send on the queue pair: after half a second of progress none has completed. A
/// flush returns `PeerTimeout` naming rank 1 once no completion has come for
/// [`FLUSH_TIMEOUT`], the three still pending and nothing reported as failed.
/// `del_procs` of rank 1 then ends them all: within a bounded wait (60 s, where they end
/// at once when the queue pair is flushed), every callback has come, once, the sends
/// that did not land and the three operations with `PeerFailed` naming rank 1 and the
/// removal, and the error callback has heard of it once; a flush returns at once. Rank
/// 1 runs again and both end through a PMI fence.
pub fn run(m: &mut dyn Module, eps: &[Option<Endpoint>], job: &mut rbtl::pmi::Job) {
    watchdog(Duration::from_secs(90));
    let rank = job.rank;
    let errors: Reported = errors_heard(m, |e| (e.rank, e.error.to_string()));
    let ping = senders(m, Tag::USR);
    let answer = senders(m, Tag(Tag::USR.0 + 1));
    let flood = Tag(Tag::USR.0 + 2);
    let _flooded = senders(m, flood);
    let mut offered = Offered::publish(m, job, "removed", LEN);
    // One byte, inline, or through the descriptor `sendi` hands back before the
    // connection is up.
    let byte = |m: &mut dyn Module, ep, tag| {
        let flags = DesFlags::OWNERSHIP;
        if let SendiOutcome::Descriptor(des) = m
            .sendi(&ActiveMessage::new(ep, tag, &[], &[1]).flagged(flags))
            .unwrap()
        {
            m.send(ep, des, tag).map_err(|e| e.error).unwrap();
        }
    };
    if rank == 1 {
        // (The connection is made now, on first use.)
        byte(m, eps[0].unwrap(), Tag::USR);
        progress_until(m, "rank 0's answer", || !answer.lock().unwrap().is_empty());
        // Rank 0 stops this process here or in the fence, where nothing progresses the
        // module: the shared receive queue is not refilled.
        job.modex.fence().unwrap();
        drop(offered);
        return;
    }
    let ep1 = eps[1].unwrap();
    progress_until(m, "rank 1's message", || !ping.lock().unwrap().is_empty());
    byte(m, ep1, Tag(Tag::USR.0 + 1));
    let (pid1, addr1, rh1) = Offered::of(job, 1, "removed");
    let resume = Continue::stop(pid1);

    let sends: Arc<Mutex<Vec<Ended>>> = Arc::default();
    for _ in 0..SENDS {
        match send_noted(m, ep1, flood, &sends, ended) {
            Ok(SendOutcome::Queued) => {}
            Ok(other) => panic!("a send to the stopped peer completed at once: {other:?}"),
            Err(e) => panic!("send: {e}"),
        }
    }
    let rdma: Arc<Mutex<Vec<Ended>>> = Arc::default();
    let cb = || -> RdmaCallback {
        let r = rdma.clone();
        Box::new(move |_, c: RdmaCompletion| r.lock().unwrap().push(ended(&c.status)))
    };
    offered.put_then_fetch_add(m, ep1, (addr1, &rh1), LEN, cb);
    let into = offered.result.as_mut_ptr() as usize;
    m.get(
        &Transfer::new(
            ep1,
            Local::new(into, &offered.result_handle),
            Remote::new(addr1, &rh1),
            8,
        ),
        cb(),
    )
    .unwrap();

    let looking = Instant::now();
    while looking.elapsed() < Duration::from_millis(500) {
        m.progress();
    }
    let landed = sends.lock().unwrap().len();
    assert!(
        landed <= SRQ_DEPTH && rdma.lock().unwrap().is_empty(),
        "the device holds the work behind a send the stopped peer's queue cannot take: \
         {landed} sends and {:?} completed",
        rdma.lock().unwrap()
    );

    let flushing = Instant::now();
    match m.flush(Some(ep1)) {
        Err(Error::PeerTimeout {
            peers, silent_for, ..
        }) => {
            assert_eq!(silent_for, FLUSH_TIMEOUT);
            assert_eq!(
                peers
                    .iter()
                    .map(|p| (p.endpoint, p.rank))
                    .collect::<Vec<_>>(),
                [(ep1, 1)]
            );
        }
        other => panic!("a flush of the stopped peer: expected PeerTimeout, got {other:?}"),
    }
    let took = flushing.elapsed();
    assert!(
        took >= FLUSH_TIMEOUT && took < 20 * FLUSH_TIMEOUT,
        "the flush gave up after {took:?}, for a timeout of {FLUSH_TIMEOUT:?}"
    );
    assert!(
        rdma.lock().unwrap().is_empty() && errors.lock().unwrap().is_empty(),
        "after the flush gave up, the operations are pending and nothing failed: {:?} {:?}",
        rdma.lock().unwrap(),
        errors.lock().unwrap()
    );

    m.del_procs(&[ep1]).unwrap();
    progress_until(m, "every callback after del_procs", || {
        sends.lock().unwrap().len() == SENDS && rdma.lock().unwrap().len() == 3
    });
    // Each once: nothing more comes.
    for _ in 0..10_000 {
        m.progress();
    }
    let removed = |e: &Ended| matches!(e, Ended::FailedPeer(1, PeerFailure::Removed));
    let sends = std::mem::take(&mut *sends.lock().unwrap());
    let failed = sends.iter().filter(|e| removed(e)).count();
    assert_eq!(sends.len(), SENDS, "each send's callback came once");
    assert!(
        failed >= SENDS - SRQ_DEPTH && sends.iter().all(|e| *e == Ended::Ok || removed(e)),
        "the sends the device held failed with the removal: {sends:?}"
    );
    let rdma = std::mem::take(&mut *rdma.lock().unwrap());
    assert!(
        rdma.len() == 3 && rdma.iter().all(removed),
        "the put, the fetch-add and the get failed with the removal: {rdma:?}"
    );
    let errors = errors.lock().unwrap();
    assert!(
        errors.len() == 1 && errors[0].0 == Some(1),
        "the error callback heard of rank 1 once: {errors:?}"
    );
    m.flush(Some(ep1))
        .expect("nothing is pending for the removed peer");
    drop(resume);
    job.modex.fence().unwrap();
    drop(offered);
}

/// Messages rank 1 sends before rank 0 removes it, which rank 0 has not polled yet.
const LATE: usize = 4;

/// Rank 1 sends [`LATE`] messages to rank 0 once they are connected (and rank 0 has
/// stopped progressing, in a PMI fence) and waits until its device has delivered each
/// (their completions); a second fence then lets rank 0 remove rank 1 (`del_procs`) and
/// progress: the messages sit in its completion queue, and none reaches its callback;
/// the error callback hears only of the removal. Rank 1 is told (over `oob` a word on
/// the out-of-band channel, over `rdma_cm` a disconnect) and fails rank 0, naming the
/// removal, while rank 0 still runs.
pub fn run_late(m: &mut dyn Module, eps: &[Option<Endpoint>], job: &mut rbtl::pmi::Job) {
    watchdog(Duration::from_secs(60));
    let errors: Reported = errors_heard(m, |e| (e.rank, e.error.to_string()));
    let ping = senders(m, Tag::USR);
    let late = Tag(Tag::USR.0 + 1);
    let arrived = senders(m, late);
    let send = |m: &mut dyn Module, ep, tag, done: &Arc<Mutex<Vec<Ended>>>| {
        send_noted(m, ep, tag, done, ended).unwrap();
    };
    let sent: Arc<Mutex<Vec<Ended>>> = Arc::default();
    if job.rank == 1 {
        let ep0 = eps[0].unwrap();
        // (The connection is made now, on first use.)
        send(m, ep0, Tag::USR, &sent);
        progress_until(m, "rank 0's answer", || !ping.lock().unwrap().is_empty());
        // Rank 0 stops progressing before these are sent.
        job.modex.fence().unwrap();
        for _ in 0..LATE {
            send(m, ep0, late, &sent);
        }
        progress_until(m, "the device's delivery of every message", || {
            sent.lock().unwrap().len() == 1 + LATE
        });
        assert!(
            sent.lock().unwrap().iter().all(|e| *e == Ended::Ok),
            "{:?}",
            sent.lock().unwrap()
        );
        job.modex.fence().unwrap();
        // Rank 0 has removed this process, and lives on until the last fence.
        progress_until(m, "word of rank 0's removal of this process", || {
            !errors.lock().unwrap().is_empty()
        });
        let heard = errors.lock().unwrap().clone();
        assert!(
            heard.len() == 1
                && heard[0].0 == Some(0)
                && heard[0].1.contains("removed this process"),
            "{heard:?}"
        );
        job.modex.fence().unwrap();
        return;
    }
    let ep1 = eps[1].unwrap();
    progress_until(m, "rank 1's message", || !ping.lock().unwrap().is_empty());
    send(m, ep1, Tag::USR, &sent);
    progress_until(m, "the answer's delivery", || {
        !sent.lock().unwrap().is_empty()
    });
    job.modex.fence().unwrap();
    // No progress here until rank 1's messages are in the completion queue.
    job.modex.fence().unwrap();
    m.del_procs(&[ep1]).unwrap();
    for _ in 0..10_000 {
        m.progress();
    }
    assert!(
        arrived.lock().unwrap().is_empty(),
        "messages polled after their sender's removal reached the callback: {:?}",
        arrived.lock().unwrap()
    );
    // The removal's own report (as in `run`), and nothing about the messages.
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors.len() == 1 && errors[0].0 == Some(1) && errors[0].1.contains("del_procs"),
        "{errors:?}"
    );
    job.modex.fence().unwrap();
}
