//! The cache's shared part: its registrar, options and monitor, and the state behind
//! its lock; registering on a miss, evicting to meet the limits, invalidating, and
//! retiring registrations.
//!
//! The [`Rcache`] handle owns it while the cache lives. A [`Registration`] points to it
//! without counting (a hit and a release touch no count of the cache), so dropping the
//! cache closes it instead of freeing it outright: every registration becomes
//! unreachable, the idle ones are retired at once, and the last of those still in use
//! to be retired frees it.
//!
//! [`Rcache`]: crate::Rcache
//! [`Registration`]: crate::Registration

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::AtomicBool;

use crate::index::State;
use crate::lock::{CacheLock, Guard};
use crate::monitor::{self, Monitor};
use crate::registration::Entry;
use crate::users::{Released, Users};
use crate::{auto, fork, Access, Error, Options, Registrar, RegistrarError, Stats};

/// Lock guard that also marks the thread as inside a cache (see [`auto`]).
pub(crate) struct Locked<'a, H> {
    guard: Guard<'a, State<H>>,
    _busy: auto::BusyGuard,
}

impl<H> Deref for Locked<'_, H> {
    type Target = State<H>;
    fn deref(&self) -> &State<H> {
        &self.guard
    }
}

impl<H> DerefMut for Locked<'_, H> {
    fn deref_mut(&mut self) -> &mut State<H> {
        &mut self.guard
    }
}

pub(crate) struct Core<R: Registrar> {
    pub(crate) registrar: R,
    pub(crate) options: Options,
    /// Registrations are kept idle only where the monitor watches them: the registrar
    /// pins pages and `options.monitor` asks for the monitor.
    follows_monitor: bool,
    /// The memory monitor, when the cache follows it and it runs.
    monitor: Option<&'static Monitor>,
    state: CacheLock<State<R::Handle>>,
}

impl<R: Registrar> Core<R> {
    pub(crate) fn new(registrar: R, options: Options) -> Core<R> {
        let follows_monitor = options.monitor && registrar.pins_pages();
        let monitor = if follows_monitor {
            match monitor::get() {
                Ok(m) if m.usable() => Some(m),
                Ok(_) => None,
                Err(why) => {
                    tracing::debug!(%why, "rcache: no memory monitor; nothing is kept idle");
                    None
                }
            }
        } else {
            None
        };
        Core {
            registrar,
            options,
            follows_monitor,
            monitor,
            state: CacheLock::new(State::new()),
        }
    }

    /// The monitor the cache follows, if any (to list the cache with it).
    pub(crate) fn monitor(&self) -> Option<&'static Monitor> {
        self.monitor
    }

    /// Applies the memory monitor's pending events to every monitored cache (done
    /// before each lookup of a monitored cache; one `ioctl` and two atomic loads when
    /// nothing happened). Not from inside a registrar, which may be called with a
    /// cache's lock held.
    #[inline]
    pub(crate) fn sync_monitor(&self) {
        if let Some(m) = self.monitor {
            if !auto::busy() {
                m.sync();
            }
        }
    }

    pub(crate) fn is_monitored(&self) -> bool {
        self.monitor.is_some_and(|m| m.usable())
    }

    pub(crate) fn lock(&self) -> Locked<'_, R::Handle> {
        let busy = auto::BusyGuard::enter();
        let guard = self.state.lock();
        Locked { guard, _busy: busy }
    }

    /// Retires slot `i` (its retirer calls this, see `users.rs`): frees it and
    /// deregisters its registration.
    pub(crate) fn retire(&self, st: &mut State<R::Handle>, i: usize) {
        let entry = st.retire(i);
        self.deregister_entry(entry);
    }

    fn deregister_entry(&self, entry: Entry<R::Handle>) {
        let Entry {
            base,
            len,
            handle,
            watched,
            kept_from_children,
            ..
        } = entry;
        self.registrar.deregister(handle);
        if let (Some((start, len)), Some(m)) = (watched, self.monitor) {
            m.unwatch(start, len);
        }
        if kept_from_children {
            fork::release(base, len);
        }
    }

    /// Evicts an idle registration (see `lru.rs` for which); false if none is idle.
    pub(crate) fn evict_one(&self, st: &mut State<R::Handle>) -> bool {
        let Some(i) = st.lru_victim() else {
            return false;
        };
        // Idle under the lock: no one else can retire it.
        let idle = st.unindex(i);
        debug_assert!(idle);
        st.stats.evictions += 1;
        self.retire(st, i);
        true
    }

    fn over_limit(&self, st: &State<R::Handle>, len: usize) -> bool {
        let o = &self.options;
        (o.max_pinned_bytes > 0 && st.stats.bytes_pinned.saturating_add(len) > o.max_pinned_bytes)
            || (o.max_entries > 0 && st.stats.entries >= o.max_entries)
    }

    fn limit_error(&self, st: &State<R::Handle>, len: usize) -> Error {
        Error::LimitExceeded {
            requested: len,
            bytes_pinned: st.stats.bytes_pinned,
            max_pinned_bytes: self.options.max_pinned_bytes,
            entries: st.stats.entries,
            max_entries: self.options.max_entries,
        }
    }

    /// Registers `[base, base+len)` anew, evicting as the limits and the registrar
    /// require; returns its slot, with one user.
    pub(crate) fn register_new(
        &self,
        st: &mut State<R::Handle>,
        base: usize,
        len: usize,
        access: Access,
    ) -> Result<usize, Error> {
        if self.options.max_pinned_bytes > 0 && len > self.options.max_pinned_bytes {
            return Err(self.limit_error(st, len));
        }
        while self.over_limit(st, len) {
            if !self.evict_one(st) {
                return Err(self.limit_error(st, len));
            }
        }
        // Watch before registering: an unmap from now on reaches the cache after the
        // entry is in (applying it needs this cache's lock).
        let watched = self.monitor.and_then(|m| m.watch(base, len));
        let kept_from_children =
            self.registrar.keep_from_children() && fork::keep_from_children(base, len);
        let undo = || {
            if let (Some((start, len)), Some(m)) = (watched, self.monitor) {
                m.unwatch(start, len);
            }
            if kept_from_children {
                fork::release(base, len);
            }
        };
        let handle = loop {
            match self.registrar.register(base, len, access) {
                Ok(h) => break h,
                Err(RegistrarError::OutOfResources(msg)) => {
                    tracing::debug!(base, len, %msg, "rcache: registrar out of resources; evicting");
                    if !self.evict_one(st) {
                        undo();
                        return Err(Error::Registrar(RegistrarError::OutOfResources(msg)));
                    }
                }
                Err(e) => {
                    undo();
                    return Err(Error::Registrar(e));
                }
            }
        };
        let id = st.next_id;
        st.next_id += 1;
        let entry = Entry {
            base,
            len,
            access,
            id,
            users: Users::one(),
            // Set when the slot is taken.
            slot: 0,
            referenced: AtomicBool::new(false),
            handle,
            watched,
            kept_from_children,
            // A cache that follows the monitor keeps only what it watches: the monitor
            // invalidates it when its memory leaves (and every registration of the
            // cache when the monitor stops).
            keep_idle: self.options.leave_pinned && (!self.follows_monitor || watched.is_some()),
        };
        Ok(st.insert_slot(entry))
    }

    pub(crate) fn invalidate(&self, base: usize, len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let end = base.saturating_add(len);
        let mut st = self.lock();
        let max = st.max_len();
        if max == 0 {
            return 0;
        }
        let lo = base.saturating_sub(max);
        let hits: Vec<usize> = st
            .index
            .range((lo, 0)..(end, 0))
            .filter(|(_, &i)| {
                let e = st.entry(i);
                e.base + e.len > base
            })
            .map(|(_, &i)| i)
            .collect();
        for &i in &hits {
            st.stats.invalidations += 1;
            if st.unindex(i) {
                self.retire(&mut st, i);
            }
        }
        if !hits.is_empty() {
            tracing::trace!(base, len, n = hits.len(), "rcache: invalidated");
        }
        hits.len()
    }

    pub(crate) fn flush_idle(&self) {
        let mut st = self.lock();
        for i in st.lru_idle() {
            let idle = st.unindex(i);
            debug_assert!(idle);
            self.retire(&mut st, i);
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        self.sync_monitor();
        let st = self.lock();
        Stats {
            idle_entries: st.idle_count(),
            ..st.stats
        }
    }

    /// Lets one user of slot `slot` go under the lock (its registration is not kept
    /// idle): the last user retires it.
    ///
    /// # Safety
    ///
    /// `this` is the core of the caller's registration of `slot`, which counts among
    /// that slot's users until this call (keeping the core alive, see `close`).
    pub(crate) unsafe fn release_locked(this: NonNull<Self>, slot: usize) {
        // SAFETY: alive while the caller's registration is (see above).
        let core = unsafe { this.as_ref() };
        let mut st = core.lock();
        let retire = match st.entry(slot).users.release() {
            Released::Others => false,
            // Reachable and not to be kept idle: make it unreachable (no one else can
            // retire it while the lock is held and it has no users).
            Released::Idle => st.unindex(slot),
            Released::Retire => true,
        };
        if retire {
            core.retire(&mut st, slot);
        }
        let last = st.closed && st.slots.is_empty();
        drop(st);
        if last {
            // SAFETY: the cache was dropped and this was its last registration; the
            // lock is released and `core` not used again.
            unsafe { Self::free(this) };
        }
    }

    /// Retires slot `slot`, whose last user just let go of it while it was
    /// unreachable ([`Released::Retire`]).
    ///
    /// # Safety
    ///
    /// `this` is the core of that registration, and the caller is its retirer (so the
    /// slot, hence the core, is still there).
    pub(crate) unsafe fn retire_released(this: NonNull<Self>, slot: usize) {
        // SAFETY: alive until its last registration is retired, which this is about to
        // do.
        let core = unsafe { this.as_ref() };
        let mut st = core.lock();
        core.retire(&mut st, slot);
        let last = st.closed && st.slots.is_empty();
        drop(st);
        if last {
            // SAFETY: as in `release_locked`.
            unsafe { Self::free(this) };
        }
    }

    /// The cache was dropped: every registration becomes unreachable, the idle ones are
    /// retired now, and the core is freed now if none is in use, else by whoever
    /// retires the last one.
    ///
    /// # Safety
    ///
    /// `this` came from `Box::leak` and is closed once, by the cache's owner; no
    /// lookup can follow (the owner is gone).
    pub(crate) unsafe fn close(this: NonNull<Self>) {
        // SAFETY: the core is freed below at the earliest, or by the retirer of its last
        // registration, which cannot come before the lock is released here.
        let core = unsafe { this.as_ref() };
        let mut st = core.lock();
        st.closed = true;
        let live: Vec<usize> = st.slots.iter().map(|(i, _)| i).collect();
        for i in live {
            if st.unindex(i) {
                core.retire(&mut st, i);
            }
        }
        let last = st.slots.is_empty();
        drop(st);
        if last {
            // SAFETY: no registration is left and the owner is gone.
            unsafe { Self::free(this) };
        }
    }

    /// # Safety
    ///
    /// `this` came from `Box::leak`, and nothing refers to the core any more.
    unsafe fn free(this: NonNull<Self>) {
        // SAFETY: forwarded contract.
        drop(unsafe { Box::from_raw(this.as_ptr()) });
    }
}
