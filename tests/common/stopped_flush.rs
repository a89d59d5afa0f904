//! A flush that waits on a stopped peer, as a rank of a 3-rank job runs it over a
//! transport whose put, get and atomics need the target's progress (`tcp`, and `sm`
//! copying through its rings): shared by the test binaries of those transports.

use crate::common::offered::Offered;
use crate::common::{
    errors_heard, flush_giving_up_on, progress_until, senders, watchdog, Continue,
};
use rbtl::btl::{
    ActiveMessage, Endpoint, Local, Module, Order, RdmaCallback, RdmaCompletion, Remote, Tag,
    Transfer,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn send_byte(m: &mut dyn Module, ep: Endpoint, tag: Tag) {
    let flags = rbtl::btl::DesFlags::empty();
    m.sendi(&ActiveMessage::new(ep, tag, &[], &[1]).flagged(flags))
        .unwrap();
}

/// Rank 0 stops rank 1 (SIGSTOP: a process that answers nothing, while its kernel may
/// still take what comes) with a put and a fetch-add pending there and a put pending
/// to rank 2. `flush(None)` completes rank 2's, then, after the transport's flush
/// timeout (`param`, which the job sets to 1 s), returns `PeerTimeout` naming rank 1
/// alone, whose operations stay pending. Once rank 1 runs again (SIGCONT) they
/// complete, the data and the fetched value in place, and a second flush returns `Ok`;
/// no failure is reported. `m` reaches every rank of the job through `eps`.
pub fn run(m: &mut dyn Module, eps: &[Option<Endpoint>], job: &mut rbtl::pmi::Job, param: &str) {
    const HALF: usize = 32 << 10;
    watchdog(Duration::from_secs(60));
    let rank = job.rank;
    let seen = errors_heard(m, |e| format!("{:?}: {}", e.rank, e.error));
    let ping = senders(m, Tag::USR);
    let over = Tag(Tag::USR.0 + 1);
    let done = senders(m, over);
    let pattern: Vec<u8> = (0..HALF).map(|i| (i % 251) as u8).collect();
    let mut offered = Offered::publish(m, job, "stopped", HALF);
    if rank != 0 {
        // (A transport that connects on first use connects now.)
        send_byte(m, eps[0].unwrap(), Tag::USR);
        progress_until(m, "rank 0's end", || !done.lock().unwrap().is_empty());
        if rank == 1 {
            assert_eq!(&offered.mem[..HALF], &pattern[..], "the put landed");
            assert_eq!(
                offered.mem[HALF..HALF + 8],
                42u64.to_le_bytes(),
                "the fetch-add too"
            );
        }
    } else {
        let (ep1, ep2) = (eps[1].unwrap(), eps[2].unwrap());
        progress_until(m, "both peers", || ping.lock().unwrap().len() == 2);
        let (pid1, addr1, rh1) = Offered::of(job, 1, "stopped");
        let (_, addr2, rh2) = Offered::of(job, 2, "stopped");
        offered.mem[..HALF].copy_from_slice(&pattern);
        let resume = Continue::stop(pid1);
        let completed: Arc<Mutex<Vec<(u32, String)>>> = Arc::default();
        let cb = |to: u32| -> RdmaCallback {
            let c = completed.clone();
            Box::new(move |_, r: RdmaCompletion| {
                c.lock().unwrap().push((to, format!("{:?}", r.status)));
            })
        };
        let (l, order) = (offered.mem.as_ptr() as usize, Order::ANY);
        offered.put_then_fetch_add(m, ep1, (addr1, &rh1), HALF, || cb(1));
        m.put(
            &Transfer::new(
                ep2,
                Local::new(l, &offered.handle),
                Remote::new(addr2, &rh2),
                HALF,
            )
            .ordered(order),
            cb(2),
        )
        .unwrap();
        flush_giving_up_on(m, (ep1, 1), Duration::from_secs(1), param);
        assert_eq!(
            *completed.lock().unwrap(),
            [(2, "Ok(())".to_string())],
            "rank 2's put completed, rank 1's operations are pending"
        );
        m.flush(Some(ep2)).expect("nothing waits on rank 2");
        drop(resume);
        m.flush(Some(ep1)).expect("rank 1 answers again");
        let mut got = completed.lock().unwrap().clone();
        got.sort();
        let ok = |to: u32| (to, "Ok(())".to_string());
        assert_eq!(got, [ok(1), ok(1), ok(2)]);
        assert_eq!(offered.result, 41u64.to_le_bytes(), "the fetch-add fetched");
        assert!(
            seen.lock().unwrap().is_empty(),
            "{:?}",
            seen.lock().unwrap()
        );
        send_byte(m, ep1, over);
        send_byte(m, ep2, over);
    }
    // Every rank has its message before any ends.
    job.modex.fence().unwrap();
    drop(offered);
}
