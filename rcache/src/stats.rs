//! The cache's counters.

#[cfg(doc)]
use crate::{auto, Rcache};

/// Counters and gauges of a cache, as returned by [`Rcache::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Lookups answered by an existing registration.
    pub hits: u64,
    /// Lookups that had to register (including access upgrades).
    pub misses: u64,
    /// Idle registrations deregistered to meet a limit or after
    /// `OutOfResources` (not counting [`Rcache::flush_idle`]).
    pub evictions: u64,
    /// Registrations made unreachable by [`Rcache::invalidate`] (also via [`auto`]).
    pub invalidations: u64,
    /// Bytes of all live registrations, including invalidated ones still in use.
    pub bytes_pinned: usize,
    /// Number of live registrations, including invalidated ones still in use.
    pub entries: usize,
    /// Number of idle registrations kept for reuse (valid, no users), counted when
    /// the stats are taken.
    pub idle_entries: usize,
}
