//! Memory registration cache for the rbtl byte-transfer layer.
//!
//! Registering memory with a NIC (verbs `ibv_reg_mr`, libfabric `fi_mr_reg`)
//! pins pages and costs a system call plus page-table walks, so transports
//! keep registrations around and reuse them. This crate is that cache: the
//! counterpart of Open MPI's `opal/mca/rcache/grdma` and UCX's
//! `ucs/memory/rcache.c` (`ucs_rcache_t`).
//!
//! * [`Rcache::register`] looks the page-aligned range up; a valid cached
//!   registration that covers it with at least the requested [`Access`] is a
//!   hit and gains a reference. Otherwise the [`Registrar`] is asked for a new
//!   one (a miss).
//! * [`Registration`] is reference counted: [`Clone`] adds a reference and
//!   [`Drop`] releases one. When the last one goes the registration either
//!   waits on an LRU list (`leave_pinned`, Open MPI's `mpi_leave_pinned`) or
//!   is deregistered at once.
//! * [`Rcache::invalidate`] makes every registration overlapping a range
//!   unreachable at once (the memory was freed or remapped); idle ones are
//!   deregistered immediately, in-use ones when their last user lets go.
//!   The [`auto`] module can call it for you from a global allocator.
//! * Limits on pinned bytes and on the number of registrations are enforced
//!   by evicting idle registrations in LRU order, and a registrar's
//!   [`RegistrarError::OutOfResources`] triggers evict-one-and-retry
//!   (grdma's `mca_rcache_grdma_evict` loop).
//!
//! # Locking
//!
//! One [`Mutex`] guards the index, the LRU list and the counters. The
//! registrar's `register` and `deregister` are called **while that lock is
//! held**: concurrent misses on the same range therefore register once, not
//! twice, at the price of serialising registrar calls of one cache. A
//! registrar must not call back into the same cache (that would deadlock),
//! and memory it frees while called is not seen by [`auto`].
//!
//! # Index cost
//!
//! Valid registrations are kept in a `BTreeMap` keyed by `(base, id)`, plus a
//! multiset of their lengths. A lookup of `[b, e)` scans backwards from `b`
//! only over keys `>= e - max_len` (`max_len` being the longest valid
//! registration), so it costs `O(log n + k)` where `k` is the number of valid
//! registrations starting in `[e - max_len, b]`. For non-overlapping
//! registrations of similar sizes `k` is 1 or 2; one huge registration makes
//! `k` grow with the number of registrations that start inside it.
//! [`Rcache::invalidate`] costs `O(log n + k + m)` with `m` the number of
//! registrations invalidated. LRU operations are `O(1)` (a slab with
//! intrusive `prev`/`next` indices).
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub mod auto;

/// libfabric's `fi_mr_reg` access bits (`rdma/fabric.h`), for
/// [`Access::from_libfabric`] and [`Access::to_libfabric`].
pub mod libfabric {
    /// `FI_READ`: the local side may read the region (RMA read initiator / send source).
    pub const FI_READ: u64 = 1 << 8;
    /// `FI_WRITE`: the local side may write the region (RMA read target buffer / receive buffer).
    pub const FI_WRITE: u64 = 1 << 9;
    /// `FI_RECV` (not an access bit for registrations; listed for reference).
    pub const FI_RECV: u64 = 1 << 10;
    /// `FI_SEND` (not an access bit for registrations; listed for reference).
    pub const FI_SEND: u64 = 1 << 11;
    /// `FI_REMOTE_READ`: peers may RMA-read the region.
    pub const FI_REMOTE_READ: u64 = 1 << 12;
    /// `FI_REMOTE_WRITE`: peers may RMA-write the region.
    pub const FI_REMOTE_WRITE: u64 = 1 << 13;
}

bitflags::bitflags! {
    /// Access rights of a registration, after libfabric's `fi_mr_reg` names:
    /// `FI_READ`/`FI_WRITE` (local), `FI_REMOTE_READ`, `FI_REMOTE_WRITE`, and
    /// atomics (verbs `IBV_ACCESS_*`, Open MPI's `MCA_RCACHE_ACCESS_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// The local process reads the region (libfabric `FI_READ`).
        const LOCAL_READ = 1;
        /// The local process or NIC writes the region (libfabric `FI_WRITE`, verbs `IBV_ACCESS_LOCAL_WRITE`).
        const LOCAL_WRITE = 2;
        /// Peers may RMA-read the region (`FI_REMOTE_READ`, `IBV_ACCESS_REMOTE_READ`).
        const REMOTE_READ = 4;
        /// Peers may RMA-write the region (`FI_REMOTE_WRITE`, `IBV_ACCESS_REMOTE_WRITE`).
        const REMOTE_WRITE = 8;
        /// Peers may perform atomics on the region (`IBV_ACCESS_REMOTE_ATOMIC`).
        /// libfabric has no separate bit: there atomics need
        /// `FI_REMOTE_READ | FI_REMOTE_WRITE`.
        const ATOMIC = 16;
    }
}

impl Access {
    /// Converts libfabric `fi_mr_reg` access bits ([`libfabric`]) to [`Access`].
    ///
    /// `FI_READ`, `FI_WRITE`, `FI_REMOTE_READ` and `FI_REMOTE_WRITE` map to
    /// the flags of the same meaning; other bits are ignored. [`Access::ATOMIC`]
    /// is never produced because libfabric has no atomic access bit.
    pub fn from_libfabric(fi_bits: u64) -> Access {
        let mut a = Access::empty();
        if fi_bits & libfabric::FI_READ != 0 {
            a |= Access::LOCAL_READ;
        }
        if fi_bits & libfabric::FI_WRITE != 0 {
            a |= Access::LOCAL_WRITE;
        }
        if fi_bits & libfabric::FI_REMOTE_READ != 0 {
            a |= Access::REMOTE_READ;
        }
        if fi_bits & libfabric::FI_REMOTE_WRITE != 0 {
            a |= Access::REMOTE_WRITE;
        }
        a
    }

    /// Converts to libfabric `fi_mr_reg` access bits.
    ///
    /// [`Access::ATOMIC`] becomes `FI_REMOTE_READ | FI_REMOTE_WRITE`, which is
    /// what libfabric requires for atomic operations on a region.
    pub fn to_libfabric(self) -> u64 {
        let mut fi = 0;
        if self.contains(Access::LOCAL_READ) {
            fi |= libfabric::FI_READ;
        }
        if self.contains(Access::LOCAL_WRITE) {
            fi |= libfabric::FI_WRITE;
        }
        if self.intersects(Access::REMOTE_READ | Access::ATOMIC) {
            fi |= libfabric::FI_REMOTE_READ;
        }
        if self.intersects(Access::REMOTE_WRITE | Access::ATOMIC) {
            fi |= libfabric::FI_REMOTE_WRITE;
        }
        fi
    }
}

/// What a real registrar implements (verbs `ibv_reg_mr`/`ibv_dereg_mr`; the
/// `register_mem`/`deregister_mem` callbacks of Open MPI's grdma, UCX's
/// `ucs_rcache_ops_t::mem_reg`/`mem_dereg`).
///
/// Both methods are called with the cache's lock held; they must not call
/// back into the same [`Rcache`].
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

/// Cache configuration (Open MPI's `mpi_leave_pinned`, `rcache_grdma_*`;
/// UCX's `UCX_RCACHE_MAX_REGIONS`/`UCX_RCACHE_MAX_SIZE`).
#[derive(Clone, Debug)]
pub struct Options {
    /// `true`: idle registrations stay registered on an LRU list for reuse;
    /// `false`: a registration is deregistered when its last reference goes.
    pub leave_pinned: bool,
    /// Upper bound on the bytes of all live registrations (including
    /// invalidated ones still in use); 0 = unlimited.
    pub max_pinned_bytes: usize,
    /// Upper bound on the number of live registrations; 0 = unlimited.
    pub max_entries: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            leave_pinned: true,
            max_pinned_bytes: 0,
            max_entries: 0,
        }
    }
}

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
    /// Number of idle registrations waiting on the LRU list.
    pub idle_entries: usize,
}

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

/// System page size (from `sysconf(_SC_PAGESIZE)`, cached; 4096 if unavailable).
pub fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let p = PAGE.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions and only reads system configuration.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let p = if v > 0 && (v as usize).is_power_of_two() {
        v as usize
    } else {
        4096
    };
    PAGE.store(p, Ordering::Relaxed);
    p
}

/// Shared, immutable part of one registration.
struct Entry<H> {
    base: usize,
    len: usize,
    access: Access,
    id: u64,
    valid: AtomicBool,
    handle: H,
}

const NIL: usize = usize::MAX;

struct Slot<H> {
    entry: Arc<Entry<H>>,
    users: usize,
    indexed: bool,
    in_lru: bool,
    prev: usize,
    next: usize,
}

enum Lookup {
    Hit(usize),
    Upgrade(usize),
    Miss,
}

/// Everything behind the cache lock. Invariant: the strong count of every
/// slot's `Arc<Entry>` equals `users + 1`, and all clones and drops of those
/// `Arc`s happen under the lock, so once a slot is removed with `users == 0`
/// its `Arc` is unique and the handle can be moved out for deregistration.
struct State<H> {
    slots: Vec<Option<Slot<H>>>,
    free: Vec<usize>,
    index: BTreeMap<(usize, u64), usize>,
    lens: BTreeMap<usize, usize>,
    lru_head: usize,
    lru_tail: usize,
    next_id: u64,
    stats: Stats,
}

impl<H> State<H> {
    fn new() -> Self {
        State {
            slots: Vec::new(),
            free: Vec::new(),
            index: BTreeMap::new(),
            lens: BTreeMap::new(),
            lru_head: NIL,
            lru_tail: NIL,
            next_id: 1,
            stats: Stats::default(),
        }
    }

    fn slot(&self, i: usize) -> &Slot<H> {
        self.slots[i]
            .as_ref()
            .expect("rcache: slot index refers to a free slot")
    }

    fn slot_mut(&mut self, i: usize) -> &mut Slot<H> {
        self.slots[i]
            .as_mut()
            .expect("rcache: slot index refers to a free slot")
    }

    fn insert_slot(&mut self, entry: Arc<Entry<H>>) -> usize {
        let (base, len, id) = (entry.base, entry.len, entry.id);
        let slot = Slot {
            entry,
            users: 1,
            indexed: true,
            in_lru: false,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.index.insert((base, id), i);
        *self.lens.entry(len).or_insert(0) += 1;
        self.stats.bytes_pinned += len;
        self.stats.entries += 1;
        i
    }

    /// Removes slot `i` from the index and marks it invalid (idempotent).
    fn unindex(&mut self, i: usize) {
        let s = self.slot_mut(i);
        if !s.indexed {
            return;
        }
        s.indexed = false;
        s.entry.valid.store(false, Ordering::Release);
        let (base, len, id) = (s.entry.base, s.entry.len, s.entry.id);
        self.index.remove(&(base, id));
        match self.lens.get_mut(&len) {
            Some(c) if *c > 1 => *c -= 1,
            _ => {
                self.lens.remove(&len);
            }
        }
    }

    /// Frees slot `i` (unused, unindexed, off the LRU) and returns its handle.
    fn retire(&mut self, i: usize) -> Option<H> {
        let s = self.slots[i].take().expect("rcache: retiring a free slot");
        debug_assert!(s.users == 0 && !s.in_lru && !s.indexed);
        self.free.push(i);
        self.stats.bytes_pinned -= s.entry.len;
        self.stats.entries -= 1;
        let id = s.entry.id;
        let h = Arc::into_inner(s.entry).map(|e| e.handle);
        if h.is_none() {
            // Cannot happen while the invariant on `State` holds; leaking is
            // the only safe option if it ever does.
            tracing::error!(
                id,
                "rcache: registration still referenced at deregistration; leaking it"
            );
        }
        h
    }

    fn lru_push_back(&mut self, i: usize) {
        let tail = self.lru_tail;
        {
            let s = self.slot_mut(i);
            debug_assert!(!s.in_lru);
            s.in_lru = true;
            s.prev = tail;
            s.next = NIL;
        }
        if tail == NIL {
            self.lru_head = i;
        } else {
            self.slot_mut(tail).next = i;
        }
        self.lru_tail = i;
        self.stats.idle_entries += 1;
    }

    fn lru_remove(&mut self, i: usize) {
        let (prev, next) = {
            let s = self.slot_mut(i);
            debug_assert!(s.in_lru);
            s.in_lru = false;
            let pn = (s.prev, s.next);
            s.prev = NIL;
            s.next = NIL;
            pn
        };
        if prev == NIL {
            self.lru_head = next;
        } else {
            self.slot_mut(prev).next = next;
        }
        if next == NIL {
            self.lru_tail = prev;
        } else {
            self.slot_mut(next).prev = prev;
        }
        self.stats.idle_entries -= 1;
    }

    fn max_len(&self) -> usize {
        self.lens.last_key_value().map_or(0, |(&l, _)| l)
    }

    /// Finds a valid registration covering `[b, e)`: one with `access` (hit),
    /// else one lacking it (upgrade), else a miss.
    fn find(&self, b: usize, e: usize, access: Access) -> Lookup {
        let max = self.max_len();
        if max == 0 {
            return Lookup::Miss;
        }
        let lo = e.saturating_sub(max);
        if lo > b {
            // Longer than every registration: nothing can cover it.
            return Lookup::Miss;
        }
        let mut upgrade = None;
        for (_, &i) in self.index.range((lo, 0)..=(b, u64::MAX)).rev() {
            let en = &self.slot(i).entry;
            if en.base + en.len >= e {
                if en.access.contains(access) {
                    return Lookup::Hit(i);
                }
                if upgrade.is_none() {
                    upgrade = Some(i);
                }
            }
        }
        upgrade.map_or(Lookup::Miss, Lookup::Upgrade)
    }
}

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

    fn release(&self, slot: usize, entry: Arc<Entry<R::Handle>>) {
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

    fn add_ref(&self, slot: usize, entry: &Arc<Entry<R::Handle>>) -> Arc<Entry<R::Handle>> {
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

/// A reference-counted registration (Open MPI `mca_rcache_base_registration_t`,
/// UCX `ucs_rcache_region_t`); [`Clone`] adds a reference, [`Drop`] releases one.
pub struct Registration<R: Registrar> {
    cache: Arc<Rcache<R>>,
    slot: usize,
    /// Always `Some` until `drop`.
    entry: Option<Arc<Entry<R::Handle>>>,
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
