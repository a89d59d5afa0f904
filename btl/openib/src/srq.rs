//! A receive queue shared by every peer of a module (Open MPI openib's `S` receive
//! queues, `btl_openib_srq_depth`): a fixed pool of receive buffers whatever the job's
//! size, where per-peer buffers grow with every peer. A message names its sender by
//! the queue pair it came in on. There are no per-peer buffers to count credits for: a
//! burst that finds the queue empty is held back by the device's receiver-not-ready
//! retries (unlimited on our queue pairs), never dropped.

use crate::core::RECV_BIT;
use rbtl_btl::{Error, Result};
use rbtl_mpool::{Frag, FreeList};
use rbtl_verbs::{Mr, Pd, Srq};
use std::collections::HashMap;

/// Marks the work-request id of a receive posted on the shared queue (with
/// [`RECV_BIT`], which marks every receive).
pub const SRQ_BIT: u64 = 1 << 62;

/// The shared queue, its buffers by slot, and which peer each queue pair serves.
pub struct SharedReceives {
    srq: Srq,
    slots: Vec<Option<Frag>>,
    by_qpn: HashMap<u32, usize>,
}

impl SharedReceives {
    /// A queue of `depth` buffers from `list`, all posted.
    pub fn new(pd: &Pd, list: &mut FreeList<Mr>, depth: u32) -> Result<SharedReceives> {
        let srq = Srq::create(pd, depth)
            .map_err(|e| Error::NotAvailable(format!("openib: shared receive queue: {e}")))?;
        let mut shared = SharedReceives {
            srq,
            slots: Vec::with_capacity(depth as usize),
            by_qpn: HashMap::new(),
        };
        for slot in 0..depth as usize {
            shared.slots.push(Some(list.get()?));
            shared.post(list, slot)?;
        }
        Ok(shared)
    }

    /// The queue, for the queue pairs that receive through it.
    pub fn srq(&self) -> &Srq {
        &self.srq
    }

    /// Messages arriving on queue pair `qpn` come from endpoint `ep`.
    pub fn serve(&mut self, qpn: u32, ep: usize) {
        self.by_qpn.insert(qpn, ep);
    }

    /// The endpoint whose messages arrive on queue pair `qpn`.
    pub fn endpoint(&self, qpn: u32) -> Option<usize> {
        self.by_qpn.get(&qpn).copied()
    }

    /// The buffer of `slot`, whose receive completed.
    pub fn take(&mut self, slot: usize) -> Option<Frag> {
        self.slots.get_mut(slot)?.take()
    }

    /// Put `frag`, taken from `slot`, back (to be posted again).
    pub fn keep(&mut self, slot: usize, frag: Frag) {
        self.slots[slot] = Some(frag);
    }

    /// Post the buffer of `slot`.
    pub fn post(&mut self, list: &FreeList<Mr>, slot: usize) -> Result<()> {
        let Some(frag) = self.slots.get(slot).and_then(Option::as_ref) else {
            return Ok(());
        };
        let mr = list.registration(frag);
        let id = RECV_BIT | SRQ_BIT | slot as u64;
        // SAFETY: the fragment lies in the registered chunk `mr` and stays in its slot,
        // untouched, until its completion is polled (or the queue is destroyed).
        unsafe {
            self.srq
                .post_recv(id, mr, frag.as_ptr() as u64, frag.len() as u32)
        }
        .map_err(|e| Error::NotAvailable(format!("openib: posting a shared receive: {e}")))
    }

    /// Destroy the queue (once no queue pair uses it), then hand the buffers back.
    pub fn release(self, list: &mut FreeList<Mr>) {
        let SharedReceives { srq, slots, .. } = self;
        drop(srq);
        for frag in slots.into_iter().flatten() {
            list.put(frag);
        }
    }
}
