//! The registration cache: lookups, registrations on a miss, eviction to meet the
//! limits, invalidation, and the release of idle registrations.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::index::{Lookup, State, NIL};
use crate::monitor::Monitor;
use crate::registration::{Entry, Registration};
use crate::{
    auto, fork, monitor, page_size, Access, Error, Options, Registrar, RegistrarError, Stats,
};

/// Lock guard that also marks the thread as inside a cache (see [`auto`]).
struct Locked<'a, H> {
    guard: MutexGuard<'a, State<H>>,
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

/// The registration cache (Open MPI `mca_rcache_grdma_module_t`, UCX `ucs_rcache_t`).
pub struct Rcache<R: Registrar> {
    registrar: R,
    options: Options,
    /// Registrations are kept idle only where the monitor watches them: the registrar
    /// pins pages and `options.monitor` asks for the monitor.
    follows_monitor: bool,
    /// The memory monitor, when the cache follows it and it runs.
    monitor: Option<&'static Monitor>,
    state: Mutex<State<R::Handle>>,
}

impl<R: Registrar> fmt::Debug for Rcache<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rcache")
            .field("options", &self.options)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<R: Registrar> Rcache<R> {
    /// Creates a cache that registers through `registrar`.
    ///
    /// When the registrar pins pages ([`Registrar::pins_pages`]) and
    /// [`Options::monitor`] asks for it, the cache follows the process's memory
    /// monitor (started on first use, see [`monitor`]) and keeps idle only the
    /// registrations it watches: none when no monitor runs. A registrar that pins
    /// nothing gets no monitor whatever `options.monitor` says: its registrations
    /// cannot reach pages that left, so its cache watches nothing, asks the kernel
    /// nothing before a lookup, and keeps idle registrations as
    /// [`Options::leave_pinned`] alone says.
    pub fn new(registrar: R, options: Options) -> Arc<Self> {
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
        let cache = Arc::new(Rcache {
            registrar,
            options,
            follows_monitor,
            monitor,
            state: Mutex::new(State::new()),
        });
        if let Some(m) = monitor {
            let weak: Weak<dyn auto::Watched> = Arc::downgrade(&cache) as Weak<dyn auto::Watched>;
            m.add_cache(weak);
        }
        cache
    }

    /// Applies the memory monitor's pending events to every monitored cache (done
    /// before each lookup; one `ioctl` and two atomic loads when nothing happened).
    /// Not from inside a registrar, which may be called with a cache's lock held.
    #[inline]
    pub(crate) fn sync_monitor(&self) {
        if let Some(m) = self.monitor {
            if !auto::busy() {
                m.sync();
            }
        }
    }

    /// Whether the memory monitor keeps this cache's idle registrations safe to reuse:
    /// false when the registrar pins no pages (no monitor is needed), when the cache
    /// did not ask for the monitor, or when none runs.
    pub fn is_monitored(&self) -> bool {
        self.monitor.is_some_and(|m| m.usable())
    }

    fn lock(&self) -> Locked<'_, R::Handle> {
        let busy = auto::BusyGuard::enter();
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Locked { guard, _busy: busy }
    }

    /// Returns a registration covering `[base, base+len)` with at least
    /// `access` (Open MPI `mca_rcache_base_module_register`, UCX
    /// `ucs_rcache_get`).
    ///
    /// The range is widened to whole pages. A valid cached registration that
    /// covers it with sufficient access is reused (a hit). If one covers it
    /// but lacks access, a replacement over that registration's range is made
    /// with the union of both accesses and the old one becomes unreachable
    /// (deregistered once its users let go). Otherwise a new registration is
    /// made, first evicting idle registrations in LRU order as the limits
    /// require, and evicting one more and retrying whenever the registrar
    /// reports [`RegistrarError::OutOfResources`]. If the replacement in an
    /// access upgrade cannot be registered, the old registration stays
    /// unreachable all the same.
    pub fn register(
        self: &Arc<Self>,
        base: usize,
        len: usize,
        access: Access,
    ) -> Result<Registration<R>, Error> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        let ps = page_size();
        let overflow = || Error::Overflow { base, len };
        let end = base.checked_add(len).ok_or_else(overflow)?;
        let pb = base & !(ps - 1);
        let pe = end.checked_add(ps - 1).ok_or_else(overflow)? & !(ps - 1);

        self.sync_monitor();
        let mut st = self.lock();
        let (rb, rl, racc) = match st.find(pb, pe, access) {
            Lookup::Hit(i) => {
                st.stats.hits += 1;
                if st.slot(i).in_lru {
                    st.lru_remove(i);
                }
                let s = st.slot_mut(i);
                s.users += 1;
                let entry = NonNull::from(&*s.entry);
                drop(st);
                return Ok(Registration {
                    cache: Arc::clone(self),
                    slot: i,
                    entry,
                });
            }
            Lookup::Upgrade(i) => {
                st.stats.misses += 1;
                let (ob, ol, oa) = {
                    let e = &st.slot(i).entry;
                    (e.base, e.len, e.access)
                };
                tracing::debug!(base = ob, len = ol, old = ?oa, add = ?access, "rcache: access upgrade");
                st.unindex(i);
                if st.slot(i).users == 0 {
                    if st.slot(i).in_lru {
                        st.lru_remove(i);
                    }
                    self.deregister_slot(&mut st, i);
                }
                (ob, ol, oa | access)
            }
            Lookup::Miss => {
                st.stats.misses += 1;
                (pb, pe - pb, access)
            }
        };
        let i = self.register_new(&mut st, rb, rl, racc)?;
        let entry = NonNull::from(&*st.slot(i).entry);
        Ok(Registration {
            cache: Arc::clone(self),
            slot: i,
            entry,
        })
    }

    fn deregister_slot(&self, st: &mut State<R::Handle>, i: usize) {
        let entry = st.retire(i);
        self.deregister_entry(*entry);
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
        if watched {
            if let Some(m) = self.monitor {
                m.unwatch(base, len);
            }
        }
        if kept_from_children {
            fork::release(base, len);
        }
    }

    /// Evicts the least recently used idle registration; false if none is idle.
    fn evict_one(&self, st: &mut State<R::Handle>) -> bool {
        let i = st.lru_head;
        if i == NIL {
            return false;
        }
        st.lru_remove(i);
        st.unindex(i);
        st.stats.evictions += 1;
        self.deregister_slot(st, i);
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

    fn register_new(
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
        let watched = self.monitor.is_some_and(|m| m.watch(base, len));
        let kept_from_children =
            self.registrar.keep_from_children() && fork::keep_from_children(base, len);
        let undo = || {
            if watched {
                if let Some(m) = self.monitor {
                    m.unwatch(base, len);
                }
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
        let entry = Box::new(Entry {
            base,
            len,
            access,
            id,
            valid: AtomicBool::new(true),
            handle,
            watched,
            kept_from_children,
        });
        Ok(st.insert_slot(entry))
    }

    /// Makes every valid registration overlapping `[base, base+len)` (by at
    /// least one byte) unreachable at once; idle ones are deregistered now,
    /// in-use ones when their last user releases them. Returns how many were
    /// invalidated (Open MPI `mca_rcache_base_module_invalidate_range`, UCX
    /// `ucs_rcache_invalidate_range`/unmapped-region handling).
    pub fn invalidate(&self, base: usize, len: usize) -> usize {
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
                let e = &st.slot(i).entry;
                e.base + e.len > base
            })
            .map(|(_, &i)| i)
            .collect();
        for &i in &hits {
            st.unindex(i);
            st.stats.invalidations += 1;
            if st.slot(i).users == 0 {
                if st.slot(i).in_lru {
                    st.lru_remove(i);
                }
                self.deregister_slot(&mut st, i);
            }
        }
        if !hits.is_empty() {
            tracing::trace!(base, len, n = hits.len(), "rcache: invalidated");
        }
        hits.len()
    }

    /// Deregisters every idle (cached, unused) registration
    /// (Open MPI `mca_rcache_grdma_flush`-like, UCX `ucs_rcache_purge` for idle regions).
    pub fn flush_idle(&self) {
        let mut st = self.lock();
        while st.lru_head != NIL {
            let i = st.lru_head;
            st.lru_remove(i);
            st.unindex(i);
            self.deregister_slot(&mut st, i);
        }
    }

    /// Snapshot of the counters (after applying the memory monitor's pending events).
    pub fn stats(&self) -> Stats {
        self.sync_monitor();
        self.lock().stats
    }

    /// The options the cache was created with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The registrar the cache registers through.
    pub fn registrar(&self) -> &R {
        &self.registrar
    }

    /// Whether an idle registration may wait on the LRU list: `leave_pinned`, and
    /// (when the cache follows the monitor) the monitor watches it.
    fn keeps_idle(&self, entry: &Entry<R::Handle>) -> bool {
        self.options.leave_pinned
            && (!self.follows_monitor
                || (entry.watched && self.monitor.is_some_and(|m| m.usable())))
    }

    pub(crate) fn release(&self, slot: usize) {
        let mut st = self.lock();
        let s = st.slot_mut(slot);
        debug_assert!(s.users > 0);
        s.users -= 1;
        if s.users > 0 {
            return;
        }
        if s.indexed && self.keeps_idle(&s.entry) {
            st.lru_push_back(slot);
        } else {
            st.unindex(slot);
            self.deregister_slot(&mut st, slot);
        }
    }

    pub(crate) fn add_ref(&self, slot: usize) {
        let mut st = self.lock();
        st.slot_mut(slot).users += 1;
    }
}

impl<R: Registrar> Drop for Rcache<R> {
    fn drop(&mut self) {
        // No `Registration` can be alive (each holds an `Arc<Rcache>`), so
        // every slot is idle: deregister them all.
        let _busy = auto::BusyGuard::enter();
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let live: Vec<usize> = st.slots.iter().map(|(i, _)| i).collect();
        let mut entries = Vec::with_capacity(live.len());
        for i in live {
            if st.slot(i).in_lru {
                st.lru_remove(i);
            }
            st.unindex(i);
            st.slot_mut(i).users = 0;
            entries.push(st.retire(i));
        }
        for e in entries {
            self.deregister_entry(*e);
        }
    }
}

impl<R: Registrar> auto::Watched for Rcache<R> {
    fn invalidate_range(&self, base: usize, len: usize) -> usize {
        self.invalidate(base, len)
    }
}
