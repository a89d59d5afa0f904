//! What the cache registers through: the registrar trait and its failures.

use crate::Access;
#[cfg(doc)]
use crate::{monitor, Options, Rcache};

/// What a real registrar implements (verbs `ibv_reg_mr`/`ibv_dereg_mr`; the
/// `register_mem`/`deregister_mem` callbacks of Open MPI's grdma, UCX's
/// `ucs_rcache_ops_t::mem_reg`/`mem_dereg`).
///
/// Both `register` and `deregister` are called with the cache's lock held; they must
/// not call back into the same [`Rcache`].
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
    /// Whether a registration holds on to the pages that were under its range when it
    /// was made (a device's pin: verbs), rather than naming addresses that each
    /// transfer resolves anew (`process_vm_readv/writev`, a memcpy, a socket).
    ///
    /// A pinned registration of memory that left the address space still reaches the
    /// old pages, so the cache must never hand it out again: such a cache follows the
    /// memory [`monitor`] (when [`Options::monitor`] asks for it) and keeps idle only
    /// what the monitor watches. A registration that pins nothing cannot send data to
    /// old pages, so its cache needs no monitor: it watches nothing, asks the kernel
    /// nothing before a lookup, and keeps idle registrations as
    /// [`Options::leave_pinned`] alone says.
    ///
    /// There is no default: the answer decides whether an idle registration is safe to
    /// reuse, and no guess is safe for both kinds.
    fn pins_pages(&self) -> bool;
    /// Whether the cache keeps the pages of live registrations out of fork children
    /// (`MADV_DONTFORK`), so that a parent writing to them after `fork` keeps the pages
    /// the device uses. Defaults to [`Registrar::pins_pages`]; a registrar whose pin
    /// the kernel already copies for a fork child (Linux 5.13 and later copy pages
    /// pinned with `FOLL_LONGTERM`) may answer false.
    fn keep_from_children(&self) -> bool {
        self.pins_pages()
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
