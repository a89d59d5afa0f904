//! Memory registration through the registration cache: the verbs registrar.

use std::sync::OnceLock;

use crate::error::Error;
use crate::pd::{Mr, MrAccess, Pd};
use rbtl_rcache::{Access, Registrar, RegistrarError};
use rdma_sys as sys;

/// Registers memory regions on a protection domain for `rbtl_rcache::Rcache`. A
/// registration refused for the locked-memory limit is `OutOfResources`, so the cache
/// evicts idle registrations and retries before giving up.
pub struct VerbsRegistrar {
    pd: Pd,
}

impl VerbsRegistrar {
    /// A registrar on `pd`.
    pub fn new(pd: Pd) -> VerbsRegistrar {
        VerbsRegistrar { pd }
    }
}

/// Whether the kernel copies pages pinned for a device into a fork child instead of
/// sharing them copy-on-write (Linux 5.13 and later say so through RDMA netlink, which
/// rdma-core's `ibv_is_fork_initialized` reads: `IBV_FORK_UNNEEDED`). Where it does, a
/// parent that writes to a registered buffer while a child lives keeps the pages the
/// device uses without `MADV_DONTFORK`, whose advice on a registration's pages would
/// split their mapping (and make an `mremap` over the parts fail).
pub fn fork_copies_pinned_pages() -> bool {
    static ANSWER: OnceLock<bool> = OnceLock::new();
    // SAFETY: a query without arguments; it reads the kernel's answer once and keeps it.
    *ANSWER.get_or_init(|| unsafe { sys::ibv_is_fork_initialized() } == sys::IBV_FORK_UNNEEDED)
}

/// The verbs access flags for cache access flags (verbs wants local write whenever a
/// peer may write or apply atomics).
pub fn mr_access(access: Access) -> MrAccess {
    let mut a = MrAccess::NONE;
    if access.intersects(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::ATOMIC) {
        a = a | MrAccess::LOCAL_WRITE;
    }
    if access.contains(Access::REMOTE_WRITE) {
        a = a | MrAccess::REMOTE_WRITE;
    }
    if access.contains(Access::REMOTE_READ) {
        a = a | MrAccess::REMOTE_READ;
    }
    if access.contains(Access::ATOMIC) {
        a = a | MrAccess::REMOTE_ATOMIC;
    }
    a
}

impl Registrar for VerbsRegistrar {
    type Handle = Mr;

    fn register(&self, base: usize, len: usize, access: Access) -> Result<Mr, RegistrarError> {
        // SAFETY: the cache registers only ranges its callers registered, under the
        // contract that the memory stays mapped until they release it (and invalidate
        // it when freed).
        match unsafe { self.pd.reg_mr(base as *mut u8, len, mr_access(access)) } {
            Ok(mr) => Ok(mr),
            Err(e @ Error::Memlock { .. }) => Err(RegistrarError::OutOfResources(e.to_string())),
            Err(e) => Err(RegistrarError::Failed(e.to_string())),
        }
    }

    fn deregister(&self, mr: Mr) {
        drop(mr);
    }

    fn pins_pages(&self) -> bool {
        true
    }

    /// `MADV_DONTFORK` (as rdma-core's `ibv_fork_init`) only where the kernel does not
    /// copy pinned pages into fork children itself.
    fn keep_from_children(&self) -> bool {
        !fork_copies_pinned_pages()
    }
}
