//! Memory a rank offers its peers in the stopped-peer scenarios
//! (`stopped_flush.rs`, `stopped_connect.rs`): a range for puts, the word after it
//! for atomics, and a word of its own to fetch into, registered and published.

use rbtl::btl::{
    Access, AtomicKind, AtomicOp, Endpoint, Local, MemHandle, Module, Order, RdmaCallback, Remote,
    RemoteAtomic, RemoteHandle, Transfer,
};

/// The first `len` bytes of `mem` take puts, the word after them atomics (41 at first);
/// `result` takes fetched values. The handles come first so that they are dropped
/// before the memory they cover.
pub struct Offered {
    pub handle: MemHandle,
    pub result_handle: MemHandle,
    pub mem: Vec<u8>,
    pub result: Vec<u8>,
}

impl Offered {
    /// Register `len + 8` bytes and a result word with `m`, and publish this process's
    /// id, the address and the handle under `key` (then fence: every rank's is there).
    pub fn publish(m: &mut dyn Module, job: &mut rbtl::pmi::Job, key: &str, len: usize) -> Offered {
        let mut mem = vec![0u8; len + 8];
        mem[len..].copy_from_slice(&41u64.to_le_bytes());
        let mut result = vec![0u8; 8];
        let all = Access::all();
        // SAFETY: the vectors are never resized, and the handles are declared before
        // them in `Offered`, so they are dropped first.
        let (handle, result_handle) = unsafe {
            (
                m.register_mem(None, mem.as_mut_ptr() as usize, mem.len(), all)
                    .unwrap(),
                m.register_mem(None, result.as_mut_ptr() as usize, 8, all)
                    .unwrap(),
            )
        };
        let mut blob = std::process::id().to_le_bytes().to_vec();
        blob.extend_from_slice(&(mem.as_ptr() as u64).to_le_bytes());
        blob.extend_from_slice(handle.remote().as_bytes());
        job.modex.publish(key, &blob).unwrap();
        job.modex.fence().unwrap();
        Offered {
            handle,
            result_handle,
            mem,
            result,
        }
    }

    /// What rank `rank` published under `key`: its process id, address and handle.
    pub fn of(job: &mut rbtl::pmi::Job, rank: u32, key: &str) -> (i32, u64, RemoteHandle) {
        let b = job.modex.lookup(rank, key).unwrap().unwrap();
        let pid = u32::from_le_bytes(b[..4].try_into().unwrap()) as i32;
        let (addr, rh) = rbtl_conformance::remote_of(&b[4..]);
        (pid, addr, rh)
    }

    /// Start a put of `mem[..len]` to `addr` (registered there as `rh`) at `ep`, then a
    /// fetch-add of 1 on the word after it there, fetched into `result`; `cb` makes each
    /// operation's callback.
    pub fn put_then_fetch_add(
        &mut self,
        m: &mut dyn Module,
        ep: Endpoint,
        (addr, rh): (u64, &RemoteHandle),
        len: usize,
        cb: impl Fn() -> RdmaCallback,
    ) {
        let (l, order) = (self.mem.as_ptr() as usize, Order::ANY);
        m.put(
            &Transfer::new(ep, Local::new(l, &self.handle), Remote::new(addr, rh), len)
                .ordered(order),
            cb(),
        )
        .unwrap();
        let (r, word) = (self.result.as_mut_ptr() as usize, addr + len as u64);
        m.atomic(
            &RemoteAtomic::new(ep, Remote::new(word, rh), AtomicKind::Op(AtomicOp::Add, 1))
                .fetching(Local::new(r, &self.result_handle))
                .ordered(order),
            cb(),
        )
        .unwrap();
    }
}
