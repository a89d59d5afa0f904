//! Protection domains and memory regions.

use crate::device::{Context, ContextInner};
use crate::error::{call_error, memlock_limit, Error, Result};
use rdma_sys as sys;
use std::ptr::NonNull;
use std::sync::Arc;

/// Access rights of a memory region (`IBV_ACCESS_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrAccess(pub u32);

impl MrAccess {
    /// Local write (needed by receives and reads landing here).
    pub const LOCAL_WRITE: MrAccess = MrAccess(sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// Peers may write.
    pub const REMOTE_WRITE: MrAccess = MrAccess(sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
    /// Peers may read.
    pub const REMOTE_READ: MrAccess = MrAccess(sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
    /// Peers may apply atomics.
    pub const REMOTE_ATOMIC: MrAccess = MrAccess(sys::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0);
    /// Nothing beyond local read.
    pub const NONE: MrAccess = MrAccess(0);
}

impl std::ops::BitOr for MrAccess {
    type Output = MrAccess;
    fn bitor(self, rhs: MrAccess) -> MrAccess {
        MrAccess(self.0 | rhs.0)
    }
}

pub(crate) struct PdInner {
    pub(crate) ptr: NonNull<sys::ibv_pd>,
    _ctx: Arc<ContextInner>,
}

// Protection domains may be used from any thread; see ContextInner. Allocated by
// ibv_alloc_pd; every MR and QP of it holds an Arc to this.
object_owner!(PdInner: Send + Sync, sys::ibv_dealloc_pd);

/// A protection domain.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Context {
    /// A new protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        // SAFETY: a live context.
        let pd = unsafe { sys::ibv_alloc_pd(self.inner.ptr.as_ptr()) };
        let ptr = NonNull::new(pd).ok_or_else(|| call_error("ibv_alloc_pd", 0))?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ptr,
                _ctx: self.inner.clone(),
            }),
        })
    }
}

/// A registered memory region; deregistered when dropped.
pub struct Mr {
    ptr: NonNull<sys::ibv_mr>,
    _pd: Arc<PdInner>,
}

// An MR is immutable after registration and usable from any thread. Registered by
// ibv_reg_mr; nothing is made from it.
object_owner!(Mr: Send + Sync, sys::ibv_dereg_mr);

impl Pd {
    /// Register `[addr, addr+len)` with `access`.
    ///
    /// # Safety
    ///
    /// The memory must stay mapped until the region is dropped, and while registered
    /// with remote access peers may change it at any time.
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: MrAccess) -> Result<Mr> {
        // SAFETY: a live PD; the caller vouches for the memory.
        let mr =
            unsafe { sys::ibv_reg_mr(self.inner.ptr.as_ptr(), addr.cast(), len, access.0 as i32) };
        match NonNull::new(mr) {
            Some(ptr) => Ok(Mr {
                ptr,
                _pd: self.inner.clone(),
            }),
            None => {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ENOMEM) {
                    Err(Error::Memlock {
                        len,
                        limit: memlock_limit(),
                    })
                } else {
                    Err(Error::Call {
                        call: "ibv_reg_mr",
                        source: e,
                    })
                }
            }
        }
    }
}

impl Mr {
    fn raw(&self) -> &sys::ibv_mr {
        // SAFETY: registered and alive until drop; never written after registration.
        unsafe { self.ptr.as_ref() }
    }

    /// Local key, for work requests here.
    pub fn lkey(&self) -> u32 {
        self.raw().lkey
    }

    /// Remote key, for peers.
    pub fn rkey(&self) -> u32 {
        self.raw().rkey
    }

    /// Start of the region.
    pub fn addr(&self) -> u64 {
        self.raw().addr as u64
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.raw().length
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
