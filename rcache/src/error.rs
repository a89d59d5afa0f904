//! Errors of the cache.

use crate::RegistrarError;
#[cfg(doc)]
use crate::{Options, Rcache};

/// Errors of [`Rcache::register`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A zero-length registration was requested.
    #[error("cannot register a zero-length range: pass len >= 1")]
    ZeroLength,
    /// `base + len` (or its rounding up to a page) overflows `usize`.
    #[error("range base {base:#x} len {len} overflows the address space: pass a range that lies inside it")]
    Overflow {
        /// Requested base.
        base: usize,
        /// Requested length.
        len: usize,
    },
    /// The configured limits were reached and no idle registration was left to evict.
    #[error(
        "registration limit reached: {requested} more bytes with {bytes_pinned} of max {max_pinned_bytes} bytes pinned \
         and {entries} of max {max_entries} entries, all in use (0 = unlimited): release registrations or raise \
         Options::max_pinned_bytes / Options::max_entries"
    )]
    LimitExceeded {
        /// Page-aligned length that was to be registered.
        requested: usize,
        /// Bytes pinned at the time.
        bytes_pinned: usize,
        /// [`Options::max_pinned_bytes`].
        max_pinned_bytes: usize,
        /// Live registrations at the time.
        entries: usize,
        /// [`Options::max_entries`].
        max_entries: usize,
    },
    /// The registrar failed (for `OutOfResources`: after evicting every idle
    /// registration and retrying).
    #[error(
        "registrar failed: {0}; nothing idle was left to evict: release registrations, raise the memlock limit \
         (ulimit -l) or check the device"
    )]
    Registrar(#[source] RegistrarError),
}
