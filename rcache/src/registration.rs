//! A registration as handed out: reference counted, released to the cache by its
//! last user.

use std::fmt;
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
}

/// A reference-counted registration (Open MPI `mca_rcache_base_registration_t`,
/// UCX `ucs_rcache_region_t`); [`Clone`] adds a reference, [`Drop`] releases one.
pub struct Registration<R: Registrar> {
    pub(crate) cache: Arc<Rcache<R>>,
    pub(crate) slot: usize,
    /// Always `Some` until `drop`.
    pub(crate) entry: Option<Arc<Entry<R::Handle>>>,
}

impl<R: Registrar> Registration<R> {
    fn e(&self) -> &Entry<R::Handle> {
        self.entry
            .as_deref()
            .expect("rcache: registration used after drop")
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

    /// False once the registration was made unreachable: by
    /// [`Rcache::invalidate`] (or [`auto`]), or by an access upgrade that
    /// replaced it. An invalid registration stays registered (its handle
    /// usable) until its last reference is dropped.
    pub fn is_valid(&self) -> bool {
        self.e().valid.load(Ordering::Acquire)
    }

    /// The cache this registration belongs to.
    pub fn cache(&self) -> &Arc<Rcache<R>> {
        &self.cache
    }
}

impl<R: Registrar> Clone for Registration<R> {
    fn clone(&self) -> Self {
        let entry = self.cache.add_ref(
            self.slot,
            self.entry.as_ref().expect("rcache: clone after drop"),
        );
        Registration {
            cache: Arc::clone(&self.cache),
            slot: self.slot,
            entry: Some(entry),
        }
    }
}

impl<R: Registrar> Drop for Registration<R> {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            self.cache.release(self.slot, entry);
        }
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
