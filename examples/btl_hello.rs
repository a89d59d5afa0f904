//! Embedding at the BTL level, complete: every rank writes its rank into its right
//! neighbour's memory with a put, then tells it so with an active message; each checks
//! what its left neighbour wrote. Alone it talks to itself through `self`; under
//! `rbtlrun -n N` (or `mpiexec.mpich -n N`) through `sm`. docs/embedding.md walks
//! through it.

use rbtl::btl::{
    Access, ActiveMessage, DesFlags, Endpoint, Local, Module, Proc, Remote, RemoteHandle,
    SendiOutcome, Tag, Transfer,
};
use std::error::Error;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn Error>> {
    // The job: rank, size and the modex (the job's key-value exchange), from the PMI
    // launcher when there is one, else a job of one process.
    let mut job = rbtl::pmi::job()?;
    let (me, size) = (job.rank, job.size);
    let config = rbtl::configure(&[("btl", "self,sm")])?;

    // Every configured transport publishes its address blob while it opens; the
    // fence makes every rank's blobs visible to every other.
    let mut modules = rbtl::framework().open(&config, job.modex.as_mut())?;
    job.modex.fence()?;

    // Endpoints: every module is asked about every rank, and a rank is reached
    // through the first module that reaches it (`open` orders them by exclusivity:
    // `self` for this process, `sm` within the node). `node` is informational: the
    // transports decide locality from their own blobs.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let procs: Vec<Proc> = (0..size)
        .map(|rank| Proc {
            rank,
            node: host.trim().to_string(),
        })
        .collect();
    let mut route: Vec<Option<(usize, Endpoint)>> = vec![None; size as usize];
    for (i, module) in modules.iter_mut().enumerate() {
        for (rank, ep) in module
            .add_procs(&procs, job.modex.as_mut())?
            .into_iter()
            .enumerate()
        {
            if let Some(ep) = ep {
                route[rank].get_or_insert((i, ep));
            }
        }
    }
    let right = (me + 1) % size;
    let left = (me + size - 1) % size;
    let (to_right, right_ep) = route[right as usize].ok_or("the right neighbour is unreachable")?;
    let (from_left, _) = route[left as usize].ok_or("the left neighbour is unreachable")?;

    // An active message on a user tag: the callback sees the payload only during the
    // call, and runs only inside `progress` or `flush`.
    let told_by = Arc::new(AtomicU32::new(u32::MAX));
    for module in modules.iter_mut() {
        let told_by = told_by.clone();
        module.register_am(
            Tag::USR,
            Box::new(move |_, msg| {
                let bytes = msg.segments.concat();
                if let Ok(rank) = bytes.as_slice().try_into() {
                    told_by.store(u32::from_le_bytes(rank), Ordering::Release);
                }
            }),
        )?;
    }

    // Memory the left neighbour writes: registered with the module it reaches us
    // through, with remote write access. A peer needs two things to address it: its
    // address here and the handle's bytes; both travel through the modex.
    let mut inbox = vec![0u8; 64];
    // SAFETY: `inbox` stays allocated and is not moved until `inbox_handle` is
    // deregistered below; it is read only after the put's writer said it is done.
    let mut inbox_handle = unsafe {
        modules[from_left].register_mem(
            None,
            inbox.as_mut_ptr() as usize,
            inbox.len(),
            Access::REMOTE_WRITE | Access::LOCAL_WRITE,
        )?
    };
    let mut ad = (inbox.as_ptr() as u64).to_le_bytes().to_vec();
    ad.extend_from_slice(inbox_handle.remote().as_bytes());
    job.modex.publish("hello.inbox", &ad)?;
    job.modex.fence()?;
    let theirs = job
        .modex
        .lookup(right, "hello.inbox")?
        .ok_or("the right neighbour published no inbox")?;
    let (addr, bytes) = theirs.split_at(8);
    let right_inbox = u64::from_le_bytes(addr.try_into()?);
    let right_handle = RemoteHandle::from_bytes(bytes)?;

    // The put: local memory must be registered too (with the module that puts).
    let mut outbox = me.to_le_bytes().to_vec();
    // SAFETY: `outbox` outlives `outbox_handle` and is not written while the put runs.
    let mut outbox_handle = unsafe {
        modules[to_right].register_mem(
            Some(right_ep),
            outbox.as_mut_ptr() as usize,
            outbox.len(),
            Access::LOCAL_READ,
        )?
    };
    let put_done = Arc::new(AtomicUsize::new(0));
    let done = put_done.clone();
    // One put, described whole: this process's bytes, the neighbour's, how many.
    let put = Transfer::new(
        right_ep,
        Local::new(outbox.as_ptr() as usize, &outbox_handle),
        Remote::new(right_inbox, &right_handle),
        outbox.len(),
    );
    modules[to_right].put(
        &put,
        // Runs once the data is visible at the target, with its status.
        Box::new(move |_, completion| {
            let code = if completion.status.is_ok() { 1 } else { 2 };
            done.store(code, Ordering::Release);
        }),
    )?;
    wait(&mut modules, "the put", || {
        put_done.load(Ordering::Acquire) != 0
    })?;
    if put_done.load(Ordering::Acquire) != 1 {
        return Err("the put failed".into());
    }

    // Tell the right neighbour. `sendi` sends inline when it can, else hands back a
    // descriptor to `send`; out of resources means "progress, then try again".
    let module = modules[to_right].as_mut();
    loop {
        match module.sendi(&ActiveMessage::new(
            right_ep,
            Tag::USR,
            &[],
            &me.to_le_bytes(),
        )) {
            Ok(SendiOutcome::Sent) => break,
            Ok(SendiOutcome::Descriptor(mut des)) => {
                des.flags |= DesFlags::OWNERSHIP; // the transport frees it once sent
                module.send(right_ep, des, Tag::USR).map_err(|e| e.error)?;
                break;
            }
            Err(rbtl::btl::Error::OutOfResource(_)) => {
                module.progress();
            }
            Err(e) => return Err(e.into()),
        }
    }
    wait(&mut modules, "the left neighbour's message", || {
        told_by.load(Ordering::Acquire) == left
    })?;
    let got = u32::from_le_bytes(inbox[..4].try_into()?);
    println!("rank {me}: rank {got} wrote into my memory");
    if got != left {
        return Err(format!("expected rank {left}'s write, found {got}").into());
    }

    // Nobody may still be writing here once every rank has passed this fence.
    for module in modules.iter_mut() {
        module.flush(None)?;
    }
    job.modex.fence()?;
    modules[to_right].deregister_mem(&mut outbox_handle)?;
    modules[from_left].deregister_mem(&mut inbox_handle)?;
    Ok(())
}

/// Progress every module until `done`, for at most ten seconds: a wait that depends on
/// another process needs a way out.
fn wait(
    modules: &mut [Box<dyn Module>],
    what: &str,
    done: impl Fn() -> bool,
) -> Result<(), Box<dyn Error>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        for module in modules.iter_mut() {
            module.progress();
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
    }
    Ok(())
}
