//! A receive queue shared by every peer of a module (Open MPI openib's `S` receive
//! queues, `btl_openib_srq_depth`): a fixed pool of receive buffers whatever the job's
//! size, where per-peer buffers grow with every peer. A message names its sender by
//! the queue pair it came in on. There are no per-peer buffers to count credits for: a
//! burst that finds the queue empty is held back by the device's receiver-not-ready
//! retries (unlimited on our queue pairs), never dropped.
//!
//! The `xrc` connection method receives the same way, through this process's XRC
//! shared receive queue: there the queue pair a message names is the node's target it
//! came through, which serves one sender.

use crate::core::RECV_BIT;
use rbtl_btl::{Error, Result};
use rbtl_mpool::{Frag, FreeList};
use rbtl_verbs::{Mr, Pd, Srq, XrcSrq};
use std::collections::HashMap;

/// Marks the work-request id of a receive posted on a shared queue (with
/// [`RECV_BIT`], which marks every receive).
pub const SRQ_BIT: u64 = 1 << 62;

/// Marks, with [`SRQ_BIT`], a receive posted on the XRC shared receive queue.
pub const XRC_BIT: u64 = 1 << 61;

/// The device queue.
enum Queue {
    Basic(Srq),
    Xrc(XrcSrq),
}

/// The shared queue, its buffers by slot, and which peer each queue pair serves.
pub struct SharedReceives {
    queue: Queue,
    /// The bits that mark its receives' work-request ids.
    marker: u64,
    slots: Vec<Option<Frag>>,
    by_qpn: HashMap<u32, usize>,
}

impl SharedReceives {
    /// A queue of `depth` buffers from `list`, all posted.
    pub fn new(pd: &Pd, list: &mut FreeList<Mr>, depth: u32) -> Result<SharedReceives> {
        let srq = Srq::create(pd, depth)
            .map_err(|e| Error::NotAvailable(format!("openib: shared receive queue: {e}")))?;
        SharedReceives::fill(Queue::Basic(srq), RECV_BIT | SRQ_BIT, list, depth)
    }

    /// The XRC shared receive queue `srq` (of `depth` receives) with a buffer from
    /// `list` posted in each.
    pub fn new_xrc(srq: XrcSrq, list: &mut FreeList<Mr>, depth: u32) -> Result<SharedReceives> {
        SharedReceives::fill(Queue::Xrc(srq), RECV_BIT | SRQ_BIT | XRC_BIT, list, depth)
    }

    fn fill(
        queue: Queue,
        marker: u64,
        list: &mut FreeList<Mr>,
        depth: u32,
    ) -> Result<SharedReceives> {
        let mut shared = SharedReceives {
            queue,
            marker,
            slots: Vec::with_capacity(depth as usize),
            by_qpn: HashMap::new(),
        };
        for slot in 0..depth as usize {
            shared.slots.push(Some(list.get()?));
            shared.post(list, slot)?;
        }
        Ok(shared)
    }

    /// The (basic) queue, for the queue pairs that receive through it.
    pub fn srq(&self) -> Option<&Srq> {
        match &self.queue {
            Queue::Basic(srq) => Some(srq),
            Queue::Xrc(_) => None,
        }
    }

    /// Messages arriving on queue pair `qpn` come from endpoint `ep`.
    pub fn serve(&mut self, qpn: u32, ep: usize) {
        self.by_qpn.insert(qpn, ep);
    }

    /// Nothing arrives on queue pair `qpn` any more.
    pub fn unserve(&mut self, qpn: u32) {
        self.by_qpn.remove(&qpn);
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
        let id = self.marker | slot as u64;
        let (addr, len) = (frag.as_ptr() as u64, frag.len() as u32);
        // SAFETY: the fragment lies in the registered chunk `mr` and stays in its slot,
        // untouched, until its completion is polled (or the queue is destroyed).
        unsafe {
            match &mut self.queue {
                Queue::Basic(srq) => srq.post_recv(id, mr, addr, len),
                Queue::Xrc(srq) => srq.post_recv(id, mr, addr, len),
            }
        }
        .map_err(|e| Error::NotAvailable(format!("openib: posting a shared receive: {e}")))
    }

    /// Destroy the queue (once no queue pair uses it), then hand the buffers back.
    pub fn release(self, list: &mut FreeList<Mr>) {
        let SharedReceives { queue, slots, .. } = self;
        drop(queue);
        for frag in slots.into_iter().flatten() {
            list.put(frag);
        }
    }
}
