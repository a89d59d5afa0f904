//! What the cache registers through: the registrar trait and its failures.

use crate::Access;
#[cfg(doc)]
use crate::Rcache;

/// What a real registrar implements (verbs `ibv_reg_mr`/`ibv_dereg_mr`; the
/// `register_mem`/`deregister_mem` callbacks of Open MPI's grdma, UCX's
/// `ucs_rcache_ops_t::mem_reg`/`mem_dereg`).
///
/// Both methods are called with the cache's lock held; they must not call
/// back into the same [`Rcache`].
pub trait Registrar: Send + Sync + 'static {
    /// What a successful registration yields (e.g. an `ibv_mr` pointer and keys).
    type Handle: Send + Sync + 'static;
    /// Registers `[base, base+len)` (already page-aligned by the cache) with `access`.
    fn register(
        &self,
        base: usize,
        len: usize,
        access: Access,
    ) -> Result<Self::Handle, RegistrarError>;
    /// Deregisters a handle returned by [`Registrar::register`]. Called exactly
    /// once per handle.
    fn deregister(&self, handle: Self::Handle);
    /// Whether registering pins the pages for a device (verbs): the cache then keeps
    /// them out of fork children (`MADV_DONTFORK`) while registered, so that a parent
    /// writing to them after `fork` keeps the pages the device uses.
    fn pins_pages(&self) -> bool {
        false
    }
}

/// Failure reported by a [`Registrar`].
#[derive(Debug, thiserror::Error)]
pub enum RegistrarError {
    /// Out of resources (e.g. memlock/pinned limit, ENOMEM): the cache evicts
    /// idle registrations and retries.
    #[error("out of resources: {0}")]
    OutOfResources(String),
    /// Any other failure; returned to the caller without retrying.
    #[error("{0}")]
    Failed(String),
}
