//! A registration as handed out: reference counted, released to the cache by its
//! last user.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::AtomicBool;

use crate::core::Core;
use crate::users::{Released, Users};
#[cfg(doc)]
use crate::{auto, Rcache};
use crate::{Access, Registrar};

/// Shared, immutable part of one registration (but for its users and its mark).
///
/// What a hit reads and writes comes first, in the one cache line the alignment gives
/// it: the page map leads a hit straight here, and a hit among many registrations
/// misses the processor's caches once, not once per structure.
#[repr(C, align(64))]
pub(crate) struct Entry<H> {
    pub(crate) base: usize,
    pub(crate) len: usize,
    /// Its users and whether it is unreachable (see `users.rs`).
    pub(crate) users: Users,
    /// Its slot in the cache's slab.
    pub(crate) slot: usize,
    pub(crate) access: Access,
    /// Hit since the eviction sweep last passed it: it gets a second chance (set under
    /// the cache lock; atomic only because registrations share the entry).
    pub(crate) referenced: AtomicBool,
    /// The cache keeps it idle when its last user lets go (and it is reachable).
    pub(crate) keep_idle: bool,
    pub(crate) id: u64,
    pub(crate) handle: H,
    /// The range the memory monitor watches on its account (the whole mappings
    /// holding its pages), if it does.
    pub(crate) watched: Option<(usize, usize)>,
    /// Its pages carry `MADV_DONTFORK` on its account.
    pub(crate) kept_from_children: bool,
}

/// A reference-counted registration (Open MPI `mca_rcache_base_registration_t`,
/// UCX `ucs_rcache_region_t`); [`Clone`] adds a reference, [`Drop`] releases one.
///
/// It does not keep its [`Rcache`] alive: once the last `Arc` of the cache is dropped
/// no lookup can be made, and a registration still in use stays registered, no longer
/// valid, until its last reference goes.
pub struct Registration<R: Registrar> {
    /// The cache's shared part, alive while any of its registrations is (see
    /// `Core::close`).
    pub(crate) core: NonNull<Core<R>>,
    /// The entry of one slot (in the cache's `Entries`), in place while this reference
    /// counts among its users (see `State`).
    pub(crate) entry: NonNull<Entry<R::Handle>>,
}

// SAFETY: the entry is shared immutable data (plus atomics) whose handle is
// `Send + Sync` by the `Registrar` bound; the core is `Send + Sync` (a registrar that
// is, behind the cache lock) and stays alive while this registration does.
unsafe impl<R: Registrar> Send for Registration<R> {}
// SAFETY: as above.
unsafe impl<R: Registrar> Sync for Registration<R> {}

impl<R: Registrar> Registration<R> {
    fn e(&self) -> &Entry<R::Handle> {
        // SAFETY: this registration counts among its entry's users, so the slot is not
        // retired and its entry neither moves nor is freed (see `users.rs`); the
        // fields read through it are never written after insertion, but for `users` and
        // `referenced`, which are atomic.
        unsafe { self.entry.as_ref() }
    }

    fn core(&self) -> &Core<R> {
        // SAFETY: the core is freed only once every registration of a dropped cache is
        // retired (`Core::close`), and this one is not.
        unsafe { self.core.as_ref() }
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
    /// such registrations are kept idle by a cache that follows the monitor
    /// ([`Rcache::is_monitored`]).
    pub fn is_watched(&self) -> bool {
        self.e().watched.is_some()
    }

    /// False once the registration was made unreachable: by the memory monitor,
    /// [`Rcache::invalidate`] (or [`auto`]), or by an access upgrade that
    /// replaced it. An invalid registration stays registered (its handle
    /// usable) until its last reference is dropped.
    pub fn is_valid(&self) -> bool {
        self.core().sync_monitor();
        !self.e().users.is_dead()
    }
}

impl<R: Registrar> Clone for Registration<R> {
    fn clone(&self) -> Self {
        self.e().users.add();
        Registration {
            core: self.core,
            entry: self.entry,
        }
    }
}

impl<R: Registrar> Drop for Registration<R> {
    /// Without the cache lock, unless this was the last user of an unreachable
    /// registration (which it then retires) or the cache keeps nothing idle.
    #[inline]
    fn drop(&mut self) {
        if !self.e().keep_idle {
            // SAFETY: this registration still counts among the entry's users.
            unsafe { Core::release_locked(self.core, self.e().slot) };
            return;
        }
        let slot = self.e().slot;
        if self.e().users.release() == Released::Retire {
            // SAFETY: the release made this thread the entry's retirer, and the core
            // outlives every registration not yet retired.
            unsafe { Core::retire_released(self.core, slot) };
        }
        // Otherwise the entry may be retired by another thread from here on: it is not
        // touched again.
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
