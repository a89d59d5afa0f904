//! The buffers a module registers for its own use: the fragment free lists sends and
//! receives go through, and the control area that returns credits and takes the
//! previous value of non-fetching atomics.

use crate::wire::FRAG_EXTRA;
use rbtl_btl::{Error, Result};
use rbtl_mpool::{AnonymousSource, FreeList, FreeListConfig};
use rbtl_verbs::{Mr, MrAccess, Pd};

/// A registered area of the module's own: word 0 takes the previous value of
/// non-fetching atomics (any number may share it), and each peer has an 8-byte slot
/// for the trailer of its credit-only message (one in flight per peer), so returning
/// credits never waits for a send fragment.
pub struct Control {
    mr: Mr,
    _region: rbtl_mpool::Region,
    peers: usize,
}

impl Control {
    /// An area for `peers` peers on `pd`.
    pub fn new(pd: &Pd, peers: usize) -> Result<Control> {
        let mut region = rbtl_mpool::Region::anonymous(8 * (peers + 1))?;
        // SAFETY: the region lives as long as the registration (both in this value,
        // the registration dropped first).
        let mr = unsafe {
            pd.reg_mr(
                region.as_mut_slice().as_mut_ptr(),
                region.len(),
                MrAccess::LOCAL_WRITE,
            )
        }
        .map_err(|e| Error::NotAvailable(format!("openib: registering the control area: {e}")))?;
        Ok(Control {
            mr,
            _region: region,
            peers,
        })
    }

    /// Address and key of the atomics' scratch word.
    pub fn scratch(&self) -> (usize, u32) {
        (self.mr.addr() as usize, self.mr.lkey())
    }

    /// Address and key of peer `ep`'s trailer slot, if it has one.
    pub fn credit_slot(&self, ep: usize) -> Option<(*mut u8, u32)> {
        (ep < self.peers).then(|| {
            (
                (self.mr.addr() as usize + 8 * (ep + 1)) as *mut u8,
                self.mr.lkey(),
            )
        })
    }
}

/// A free list of at most `max` (0: no limit) fragments of `size` bytes, each chunk
/// registered on `pd`.
pub fn registered_frags(pd: &Pd, size: usize, max: usize) -> Result<FreeList<Mr>> {
    let pd = pd.clone();
    let mut cfg = FreeListConfig::new(size + FRAG_EXTRA);
    cfg.frags_per_chunk = 32;
    cfg.max_frags = max;
    let register = move |ptr: *mut u8, len: usize| {
        // SAFETY: the chunk is mapped for as long as the list lives, which drops its
        // registrations before its chunks.
        unsafe { pd.reg_mr(ptr, len, MrAccess::LOCAL_WRITE) }.map_err(|e| {
            rbtl_mpool::Error::Registration {
                reason: e.to_string(),
            }
        })
    };
    Ok(FreeList::with_registration(
        cfg,
        Box::new(AnonymousSource::new()),
        Box::new(register),
    )?)
}
