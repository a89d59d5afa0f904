//! `sm`'s gets through the rings, from the side that serves them: their data never
//! holds back a send of the serving rank, and gets asked for together all complete
//! with the right bytes.

use rbtl::btl::{
    Access, ActiveMessage, DesFlags, Endpoint, Local, Module, Order, RdmaCompletion, Remote,
    SendiOutcome, Tag, Transfer,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of each get: more than the ring towards the getting rank holds (2 MiB by
/// default), so that data stays queued at the serving rank.
const LEN: usize = 3 << 20;
/// Gets asked for at once.
const GETS: usize = 3;

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// Rank 1 asks rank 0 for `GETS` gets of `LEN` bytes (through the rings:
/// `btl_sm_rdma=copy`), then stops progressing while rank 0 serves them until the
/// ring towards rank 1 is full; rank 0's one-byte message must then go at once, ahead
/// of the data still queued, and reach rank 1 before its last get completes.
pub fn run(m: &mut dyn Module, eps: &[Option<Endpoint>], job: &mut rbtl::pmi::Job) {
    let (rank, peer) = (job.rank, job.rank ^ 1);
    let ep = eps[peer as usize].expect("sm reaches the peer");
    let all = Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    // Rank 0's source, or rank 1's destinations.
    let mut mem: Vec<u8> = if rank == 0 {
        (0..LEN).map(pattern).collect()
    } else {
        vec![0; GETS * LEN]
    };
    // SAFETY: `mem` outlives the handle (dropped before it below) and is not resized.
    let handle =
        unsafe { m.register_mem(Some(ep), mem.as_mut_ptr() as usize, mem.len(), all) }.unwrap();
    let (raddr, rh) =
        crate::common::swap_regions(job, "served_gets", mem.as_ptr() as u64, &handle, peer);
    // The messages each rank hears from the other.
    let heard = crate::common::senders(m, Tag::USR);
    let tell = |m: &mut dyn Module| {
        m.sendi(
            &ActiveMessage::new(ep, Tag::USR, &[], &[1])
                .ordered(Order::ANY)
                .flagged(DesFlags::empty()),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    if rank == 0 {
        job.modex.fence().unwrap();
        // Rank 1's requests wait in our ring: serve until its ring is full.
        for _ in 0..10_000 {
            m.progress();
        }
        let told = tell(m);
        assert!(
            matches!(told, Ok(SendiOutcome::Sent)),
            "a send waited behind the data of the gets served: {told:?}"
        );
        job.modex.fence().unwrap();
        // Serve the rest until rank 1 says all arrived.
        while heard.lock().unwrap().is_empty() {
            m.progress();
            assert!(Instant::now() < deadline, "rank 1's gets hung");
        }
    } else {
        // Rank 1's per-get completion order: how many messages it had heard by then.
        let heard_at_completion = Arc::new(std::sync::Mutex::new(Vec::new()));
        for g in 0..GETS {
            let (seen, heard) = (heard_at_completion.clone(), heard.clone());
            let cb = Box::new(move |_: &mut dyn Module, c: RdmaCompletion| {
                c.status.expect("the get completes");
                seen.lock().unwrap().push(heard.lock().unwrap().len());
            });
            let local = mem.as_mut_ptr() as usize + g * LEN;
            m.get(
                &Transfer::new(ep, Local::new(local, &handle), Remote::new(raddr, &rh), LEN),
                cb,
            )
            .unwrap();
        }
        // Rank 0 serves while we sit in the fences.
        job.modex.fence().unwrap();
        job.modex.fence().unwrap();
        while heard_at_completion.lock().unwrap().len() < GETS {
            m.progress();
            assert!(Instant::now() < deadline, "the gets hung");
        }
        let seen = heard_at_completion.lock().unwrap().clone();
        assert_eq!(
            seen.last(),
            Some(&1),
            "rank 0's message arrived before the last get completed ({seen:?})"
        );
        for (i, &b) in mem.iter().enumerate() {
            assert_eq!(b, pattern(i % LEN), "byte {i} of the gets");
        }
        let told = tell(m);
        assert!(matches!(told, Ok(SendiOutcome::Sent)), "{told:?}");
    }
    drop(handle);
}
