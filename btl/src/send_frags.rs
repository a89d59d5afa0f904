//! Send descriptors over a free list of fragments, for transports that copy what they
//! send (`self`, `sm`, `tcp`): `alloc` and `free` of the contract (`prepare_src` is
//! the contract's own, over `alloc`; [`pack`] and [`packed_len`] are its parts), and
//! the end of a descriptor that went out (its callback queued, or back to the pool or
//! its owner).

use crate::done::Done;
use crate::{DesFlags, Descriptor, DescriptorRequest, Error, ModuleId, Result};
use rbtl_mpool::{AnonymousSource, FreeList, FreeListConfig};
use std::collections::VecDeque;

/// A module's pool of send fragments of `max_send_size` bytes.
pub struct SendFrags {
    list: FreeList,
    owner: ModuleId,
    max_send_size: usize,
}

impl SendFrags {
    /// At most `max_frags` fragments (0: no limit) of `max_send_size` bytes, for the
    /// module `owner`.
    pub fn new(owner: ModuleId, max_send_size: usize, max_frags: usize) -> Result<SendFrags> {
        let mut cfg = FreeListConfig::new(max_send_size.max(1));
        cfg.frags_per_chunk = 8;
        cfg.max_frags = max_frags;
        Ok(SendFrags {
            list: FreeList::new(cfg, Box::new(AnonymousSource::new()))?,
            owner,
            max_send_size,
        })
    }

    /// A descriptor of `request` (Open MPI: `btl_alloc`).
    pub fn alloc(&mut self, request: &DescriptorRequest) -> Result<Descriptor> {
        request.check(self.max_send_size)?;
        let frag = self.list.get().map_err(|e| match e {
            rbtl_mpool::Error::Exhausted { .. } => Error::OutOfResource("send descriptors"),
            other => Error::Mpool(other),
        })?;
        let r = request;
        Descriptor::new(self.owner, r.endpoint, frag, r.size, r.order, r.flags)
    }

    /// Take back a descriptor the user frees (Open MPI: `btl_free`); one of another
    /// module is refused.
    pub fn free(&mut self, des: Descriptor) -> Result<()> {
        des.check_owner(self.owner)?;
        self.recycle(des);
        Ok(())
    }

    /// Take back a descriptor of this pool (the transport's own completions).
    pub fn recycle(&mut self, des: Descriptor) {
        self.list.put(des.into_frag());
    }

    /// A descriptor that went out (or failed) is over (`immediate`: within the call
    /// that sent it): its callback queued in `done`, or it returns to the pool, or to
    /// the caller who owns it (the result); an `immediate` send without
    /// ALWAYS_CALLBACK queues nothing.
    #[inline]
    pub fn finish(
        &mut self,
        mut des: Descriptor,
        immediate: bool,
        status: Result<()>,
        done: &mut VecDeque<Done>,
    ) -> Option<Descriptor> {
        let owned = des.flags.contains(DesFlags::OWNERSHIP);
        if immediate && !des.flags.contains(DesFlags::ALWAYS_CALLBACK) {
            if owned {
                self.recycle(des);
                return None;
            }
            return Some(des);
        }
        match des.take_callback() {
            Some(callback) => done.push_back(Done::Send {
                callback,
                endpoint: des.endpoint(),
                descriptor: des,
                status,
            }),
            None => self.recycle(des),
        }
        None
    }
}

/// The length of a `prepare_src` descriptor: `reserve` bytes, then as much of `data` as
/// fits in `max_send_size`.
pub fn packed_len(max_send_size: usize, reserve: usize, data: &[&[u8]]) -> Result<usize> {
    let room = max_send_size.checked_sub(reserve).ok_or_else(|| {
        Error::TooLarge(format!(
            "reserve {reserve} exceeds max_send_size {max_send_size}"
        ))
    })?;
    let total: usize = data.iter().map(|d| d.len()).sum();
    Ok(reserve + total.min(room))
}

/// Copy `data`, gathered in order, into segment 0 after `reserve` bytes, as much as
/// fits.
pub fn pack(des: &mut Descriptor, reserve: usize, data: &[&[u8]]) {
    let mut out = &mut des.segment_mut(0)[reserve..];
    for piece in data {
        let n = piece.len().min(out.len());
        out[..n].copy_from_slice(&piece[..n]);
        out = &mut out[n..];
    }
}
