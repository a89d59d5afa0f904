//! The cache's configuration.

/// Cache configuration (Open MPI's `mpi_leave_pinned`, `rcache_grdma_*`;
/// UCX's `UCX_RCACHE_MAX_REGIONS`/`UCX_RCACHE_MAX_SIZE`).
#[derive(Clone, Debug)]
pub struct Options {
    /// `true`: idle registrations stay registered for reuse (evicted oldest first);
    /// `false`: a registration is deregistered when its last reference goes.
    pub leave_pinned: bool,
    /// Upper bound on the bytes of all live registrations (including
    /// invalidated ones still in use); 0 = unlimited.
    pub max_pinned_bytes: usize,
    /// Upper bound on the number of live registrations; 0 = unlimited.
    pub max_entries: usize,
    /// `true`: when the registrar pins pages ([`crate::Registrar::pins_pages`]),
    /// follow the process's memory monitor ([`crate::monitor`]), which invalidates
    /// registrations of memory that leaves the address space whoever frees it; only
    /// registrations it watches are kept idle, so without a monitor nothing is.
    /// `false`: the caller reports freed memory itself ([`crate::Rcache::invalidate`],
    /// [`crate::auto`]) and `leave_pinned` alone decides. Without effect for a
    /// registrar that pins nothing: such a cache needs no monitor.
    pub monitor: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            leave_pinned: true,
            max_pinned_bytes: 0,
            max_entries: 0,
            monitor: true,
        }
    }
}
