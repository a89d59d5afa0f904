//! A registration as handed out: reference counted, released to the cache by its
//! last user.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[cfg(doc)]
use crate::auto;
use crate::{Access, Rcache, Registrar};

/// Shared, immutable part of one registration.
pub(crate) struct Entry<H> {
    pub(crate) base: usize,
    pub(crate) len: usize,
    pub(crate) access: Access,
    pub(crate) id: u64,
    pub(crate) valid: AtomicBool,
    pub(crate) handle: H,
    /// The memory monitor watches its pages.
    pub(crate) watched: bool,
    /// Its pages carry `MADV_DONTFORK` on its account.
    pub(crate) kept_from_children: bool,
}

/// A reference-counted registration (Open MPI `mca_rcache_base_registration_t`,
/// UCX `ucs_rcache_region_t`); [`Clone`] adds a reference, [`Drop`] releases one.
pub struct Registration<R: Registrar> {
    pub(crate) cache: Arc<Rcache<R>>,
    pub(crate) slot: usize,
    /// The boxed entry of `slot`, which stays in place while this reference counts
    /// among the slot's users (see `State`).
    pub(crate) entry: NonNull<Entry<R::Handle>>,
}

// SAFETY: the entry is shared immutable data (plus an atomic) whose handle is
// `Send + Sync` by the `Registrar` bound; the cache behind the `Arc` is `Sync`.
unsafe impl<R: Registrar> Send for Registration<R> {}
// SAFETY: as above.
unsafe impl<R: Registrar> Sync for Registration<R> {}

impl<R: Registrar> Registration<R> {
    fn e(&self) -> &Entry<R::Handle> {
        // SAFETY: this registration counts among its slot's users, so the slot is not
        // retired and its boxed entry neither moves nor is freed (see `State`); the
        // fields read through it are never written after insertion, but for `valid`,
        // which is atomic.
        unsafe { self.entry.as_ref() }
    }

    /// Page-aligned base of the registered region.
    pub fn base(&self) -> usize {
        self.e().base
    }

    /// Length of the registered region (a page multiple).
    pub fn len(&self) -> usize {
        self.e().len
    }

    /// Always false: registrations are never empty.
    pub fn is_empty(&self) -> bool {
        self.e().len == 0
    }

    /// Access rights the region was registered with.
    pub fn access(&self) -> Access {
        self.e().access
    }

    /// The registrar's handle (e.g. memory keys).
    pub fn handle(&self) -> &R::Handle {
        &self.e().handle
    }

    /// Unique per registration made by this cache (starts at 1).
    pub fn id(&self) -> u64 {
        self.e().id
    }

    /// Whether `[base, base+len)` lies inside the registered region.
    pub fn covers(&self, base: usize, len: usize) -> bool {
        let e = self.e();
        match base.checked_add(len) {
            Some(end) => base >= e.base && end <= e.base + e.len,
            None => false,
        }
    }

    /// Whether the memory monitor watches its pages (see [`crate::monitor`]): only
    /// such registrations are kept idle when the cache asks for the monitor.
    pub fn is_watched(&self) -> bool {
        self.e().watched
    }

    /// False once the registration was made unreachable: by the memory monitor,
    /// [`Rcache::invalidate`] (or [`auto`]), or by an access upgrade that
    /// replaced it. An invalid registration stays registered (its handle
    /// usable) until its last reference is dropped.
    pub fn is_valid(&self) -> bool {
        self.cache.sync_monitor();
        self.e().valid.load(Ordering::Acquire)
    }

    /// The cache this registration belongs to.
    pub fn cache(&self) -> &Arc<Rcache<R>> {
        &self.cache
    }
}

impl<R: Registrar> Clone for Registration<R> {
    fn clone(&self) -> Self {
        self.cache.add_ref(self.slot);
        Registration {
            cache: Arc::clone(&self.cache),
            slot: self.slot,
            entry: self.entry,
        }
    }
}

impl<R: Registrar> Drop for Registration<R> {
    fn drop(&mut self) {
        self.cache.release(self.slot);
    }
}

impl<R: Registrar> fmt::Debug for Registration<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("id", &self.id())
            .field("base", &format_args!("{:#x}", self.base()))
            .field("len", &self.len())
            .field("access", &self.access())
            .field("valid", &self.is_valid())
            .finish()
    }
}
