//! XRC domains (for the `xrc` connection method): a domain shared by the processes of
//! a node, under which receive queues and queue pairs are shared. Only devices of the
//! mlx4/mlx5 class have XRC; soft devices (rxe, siw) refuse with EOPNOTSUPP, which is
//! how the `xrc` CPC learns it cannot run there. XRC SRQs and queue pairs are not
//! wrapped yet.

use crate::device::{Context, ContextInner};
use crate::error::{call_error, Result};
use rdma_sys as sys;
use std::ptr::NonNull;
use std::sync::Arc;

/// An XRC domain.
pub struct Xrcd {
    ptr: NonNull<sys::ibv_xrcd>,
    _ctx: Arc<ContextInner>,
}

// SAFETY: an XRC domain is a kernel object usable from any thread.
unsafe impl Send for Xrcd {}

impl Xrcd {
    /// A new XRC domain of this process (no shared file).
    pub fn open(ctx: &Context) -> Result<Xrcd> {
        let mut attr = sys::ibv_xrcd_init_attr {
            comp_mask: sys::ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_FD.0
                | sys::ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_OFLAGS.0,
            fd: -1,
            oflags: libc::O_CREAT,
        };
        // SAFETY: a live context and a filled-in attr; rdma-sys returns None (errno
        // EOPNOTSUPP) where the provider has no XRC.
        let xrcd = unsafe { sys::ibv_open_xrcd(ctx.inner.ptr.as_ptr(), &mut attr) }
            .unwrap_or(std::ptr::null_mut());
        let ptr = NonNull::new(xrcd).ok_or_else(|| call_error("ibv_open_xrcd", 0))?;
        Ok(Xrcd {
            ptr,
            _ctx: ctx.inner.clone(),
        })
    }
}

impl Drop for Xrcd {
    fn drop(&mut self) {
        // SAFETY: opened by ibv_open_xrcd, closed once.
        unsafe { sys::ibv_close_xrcd(self.ptr.as_ptr()) };
    }
}
