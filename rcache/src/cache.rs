//! The registration cache: lookups, registrations on a miss, eviction to meet the
//! limits, invalidation, and the release of idle registrations.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::index::{Lookup, State, NIL};
use crate::registration::{Entry, Registration};
use crate::{auto, page_size, Access, Error, Options, Registrar, RegistrarError, Stats};

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
    pub fn new(registrar: R, options: Options) -> Arc<Self> {
        Arc::new(Rcache {
            registrar,
            options,
            state: Mutex::new(State::new()),
        })
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

        let mut st = self.lock();
        let (rb, rl, racc) = match st.find(pb, pe, access) {
            Lookup::Hit(i) => {
                st.stats.hits += 1;
                if st.slot(i).in_lru {
                    st.lru_remove(i);
                }
                let s = st.slot_mut(i);
                s.users += 1;
                let entry = Arc::clone(&s.entry);
                return Ok(Registration {
                    cache: Arc::clone(self),
                    slot: i,
                    entry: Some(entry),
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
        let entry = Arc::clone(&st.slot(i).entry);
        Ok(Registration {
            cache: Arc::clone(self),
            slot: i,
            entry: Some(entry),
        })
    }

    fn deregister_slot(&self, st: &mut State<R::Handle>, i: usize) {
        if let Some(h) = st.retire(i) {
            self.registrar.deregister(h);
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
        let handle = loop {
            match self.registrar.register(base, len, access) {
                Ok(h) => break h,
                Err(RegistrarError::OutOfResources(msg)) => {
                    tracing::debug!(base, len, %msg, "rcache: registrar out of resources; evicting");
                    if !self.evict_one(st) {
                        return Err(Error::Registrar(RegistrarError::OutOfResources(msg)));
                    }
                }
                Err(e) => return Err(Error::Registrar(e)),
            }
        };
        let id = st.next_id;
        st.next_id += 1;
        let entry = Arc::new(Entry {
            base,
            len,
            access,
            id,
            valid: AtomicBool::new(true),
            handle,
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

    /// Snapshot of the counters.
    pub fn stats(&self) -> Stats {
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

    pub(crate) fn release(&self, slot: usize, entry: Arc<Entry<R::Handle>>) {
        let mut st = self.lock();
        let s = st.slot_mut(slot);
        debug_assert!(s.users > 0);
        s.users -= 1;
        // Drop our reference under the lock (see the invariant on `State`).
        drop(entry);
        if s.users > 0 {
            return;
        }
        if s.indexed && self.options.leave_pinned {
            st.lru_push_back(slot);
        } else {
            st.unindex(slot);
            self.deregister_slot(&mut st, slot);
        }
    }

    pub(crate) fn add_ref(
        &self,
        slot: usize,
        entry: &Arc<Entry<R::Handle>>,
    ) -> Arc<Entry<R::Handle>> {
        let mut st = self.lock();
        st.slot_mut(slot).users += 1;
        Arc::clone(entry)
    }
}

impl<R: Registrar> Drop for Rcache<R> {
    fn drop(&mut self) {
        // No `Registration` can be alive (each holds an `Arc<Rcache>`), so
        // every slot is idle: deregister them all.
        let _busy = auto::BusyGuard::enter();
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let mut handles = Vec::new();
        for i in 0..st.slots.len() {
            if st.slots[i].is_none() {
                continue;
            }
            if st.slot(i).in_lru {
                st.lru_remove(i);
            }
            st.unindex(i);
            st.slot_mut(i).users = 0;
            if let Some(h) = st.retire(i) {
                handles.push(h);
            }
        }
        for h in handles {
            self.registrar.deregister(h);
        }
    }
}

impl<R: Registrar> auto::Watched for Rcache<R> {
    fn invalidate_range(&self, base: usize, len: usize) -> usize {
        self.invalidate(base, len)
    }
}
