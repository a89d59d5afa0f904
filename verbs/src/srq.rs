//! Shared receive queues: one pool of posted receives for many queue pairs.

use crate::error::{call_error, Result};
use crate::pd::{Mr, Pd, PdInner};
use rdma_sys as sys;
use std::ptr::NonNull;
use std::sync::Arc;

pub(crate) struct SrqInner {
    pub(crate) ptr: NonNull<sys::ibv_srq>,
    _pd: Arc<PdInner>,
}

// SAFETY: libibverbs allows posting from any thread; posting takes `&mut Srq`, and
// queue pairs only keep it alive.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

/// A shared receive queue.
pub struct Srq {
    pub(crate) inner: Arc<SrqInner>,
}

impl Srq {
    /// A shared receive queue of `max_wr` receives of one scatter entry each.
    pub fn create(pd: &Pd, max_wr: u32) -> Result<Srq> {
        let mut init = sys::ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD and a filled-in attr.
        let srq = unsafe { sys::ibv_create_srq(pd.inner.ptr.as_ptr(), &mut init) };
        let ptr = NonNull::new(srq).ok_or_else(|| call_error("ibv_create_srq", 0))?;
        Ok(Srq {
            inner: Arc::new(SrqInner {
                ptr,
                _pd: pd.inner.clone(),
            }),
        })
    }

    /// Post a receive into `[addr, addr+len)` of `mr`.
    ///
    /// # Safety
    ///
    /// The range must lie inside `mr` and stay untouched until the receive completes.
    pub unsafe fn post_recv(&mut self, wr_id: u64, mr: &Mr, addr: u64, len: u32) -> Result<()> {
        let srq = self.inner.ptr.as_ptr();
        // SAFETY: a live SRQ; the caller vouches for the memory.
        crate::qp::post_one_recv(
            "ibv_post_srq_recv",
            wr_id,
            mr,
            addr,
            len,
            |wr, bad| unsafe { sys::ibv_post_srq_recv(srq, wr, bad) },
        )
    }
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_srq, destroyed once, after every queue pair
        // using it (each holds an Arc to this).
        unsafe { sys::ibv_destroy_srq(self.ptr.as_ptr()) };
    }
}
