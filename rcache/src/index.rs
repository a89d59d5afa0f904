//! The registrations behind the cache lock: a slab of slots (their entries in
//! `entries.rs`), the interval index over
//! the valid ones (by base address, with a multiset of their lengths), a page map for
//! constant-time hits, and the list the eviction sweeps (`lru.rs`).

use std::collections::BTreeMap;
use std::ptr::NonNull;

use rustc_hash::FxHashMap;
use slab::Slab;

use crate::entries::Entries;
use crate::registration::Entry;
use crate::{page_size, Access, Stats};

pub(crate) const NIL: usize = usize::MAX;

/// Registrations of at most this many pages have every page in the page map; longer
/// ones only their first page (a lookup elsewhere in them goes to the interval index).
const MAPPED_PAGES: usize = 16;

pub(crate) struct Slot<H> {
    /// In the state's [`Entries`], where it stays put while the slab grows: a
    /// [`Registration`] points to it for as long as it counts among its users.
    ///
    /// [`Registration`]: crate::Registration
    entry: NonNull<Entry<H>>,
    pub(crate) indexed: bool,
    /// On the eviction list (registrations the cache keeps idle, while reachable).
    pub(crate) in_lru: bool,
    pub(crate) prev: usize,
    pub(crate) next: usize,
}

pub(crate) enum Lookup<H> {
    /// The entry of an indexed slot: in place while the cache lock is held.
    Hit(NonNull<Entry<H>>),
    Upgrade(usize),
    Miss,
}

/// Everything behind the cache lock. Invariant: a slot is removed from the slab only
/// by whoever retires it (see `users.rs`): never while a `Registration` counts among
/// its users, so the entry a live one points to stays in place.
pub(crate) struct State<H> {
    pub(crate) slots: Slab<Slot<H>>,
    entries: Entries<H>,
    pub(crate) index: BTreeMap<(usize, u64), usize>,
    pub(crate) lens: BTreeMap<usize, usize>,
    /// Page number -> the entry of an indexed slot whose registration contains that
    /// page (the latest inserted wins; the interval index stays the authority). The
    /// entry itself, not its slot, so that a hit reads one line past the map.
    pub(crate) pages: FxHashMap<usize, NonNull<Entry<H>>>,
    page_shift: u32,
    pub(crate) lru_head: usize,
    pub(crate) lru_tail: usize,
    pub(crate) lru_len: usize,
    pub(crate) next_id: u64,
    /// The counters; `idle_entries` is counted when the stats are taken.
    pub(crate) stats: Stats,
    /// The cache was dropped while registrations were in use: the last one retired
    /// frees it (see `Core::close`).
    pub(crate) closed: bool,
}

impl<H> State<H> {
    pub(crate) fn new() -> Self {
        State {
            slots: Slab::new(),
            entries: Entries::new(),
            index: BTreeMap::new(),
            lens: BTreeMap::new(),
            pages: FxHashMap::default(),
            page_shift: page_size().trailing_zeros(),
            lru_head: NIL,
            lru_tail: NIL,
            lru_len: 0,
            next_id: 1,
            stats: Stats::default(),
            closed: false,
        }
    }

    pub(crate) fn slot(&self, i: usize) -> &Slot<H> {
        &self.slots[i]
    }

    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut Slot<H> {
        &mut self.slots[i]
    }

    /// The entry of slot `i`.
    pub(crate) fn entry(&self, i: usize) -> &Entry<H> {
        // SAFETY: an occupied slot's entry is in place until `retire` takes it, which
        // needs `&mut self`.
        unsafe { self.slots[i].entry.as_ref() }
    }

    /// The page numbers of `[base, base+len)` that go into the page map.
    fn mapped_pages(&self, base: usize, len: usize) -> std::ops::Range<usize> {
        let first = base >> self.page_shift;
        let n = (len >> self.page_shift).max(1);
        first..first + if n <= MAPPED_PAGES { n } else { 1 }
    }

    /// Inserts a new registration (with its first user) into the index, and onto the
    /// eviction list when the cache keeps it idle once released.
    pub(crate) fn insert_slot(&mut self, mut entry: Entry<H>) -> usize {
        entry.slot = self.slots.vacant_key();
        let (base, len, id, keep_idle) = (entry.base, entry.len, entry.id, entry.keep_idle);
        let at = self.entries.put(entry);
        let slot = Slot {
            entry: at,
            indexed: true,
            in_lru: false,
            prev: NIL,
            next: NIL,
        };
        let i = self.slots.insert(slot);
        debug_assert_eq!(i, self.entry(i).slot);
        if keep_idle {
            self.lru_push_back(i);
        }
        self.index.insert((base, id), i);
        for p in self.mapped_pages(base, len) {
            self.pages.insert(p, at);
        }
        *self.lens.entry(len).or_insert(0) += 1;
        self.stats.bytes_pinned += len;
        self.stats.entries += 1;
        i
    }

    /// Makes slot `i` unreachable: out of the index and off the eviction list, its
    /// entry `DEAD`. True when it has no users, so that the caller retires it now
    /// ([`State::retire`]); false when a user will (or when it was unreachable already).
    pub(crate) fn unindex(&mut self, i: usize) -> bool {
        if !self.slot(i).indexed {
            return false;
        }
        if self.slot(i).in_lru {
            self.lru_remove(i);
        }
        self.slot_mut(i).indexed = false;
        let at = self.slot(i).entry;
        let en = self.entry(i);
        let retire = en.users.kill();
        let (base, len, id) = (en.base, en.len, en.id);
        self.index.remove(&(base, id));
        for p in self.mapped_pages(base, len) {
            if self.pages.get(&p) == Some(&at) {
                self.pages.remove(&p);
            }
        }
        match self.lens.get_mut(&len) {
            Some(c) if *c > 1 => *c -= 1,
            _ => {
                self.lens.remove(&len);
            }
        }
        retire
    }

    /// Frees slot `i` (unreachable, no users: its retirer calls this) and returns its
    /// entry.
    pub(crate) fn retire(&mut self, i: usize) -> Entry<H> {
        let s = self.slots.remove(i);
        debug_assert!(!s.in_lru && !s.indexed);
        // SAFETY: the slot's entry, put when the slot was taken; with no users and out
        // of the page map (unreachable), nothing reads it again.
        let entry = unsafe { self.entries.take(s.entry) };
        debug_assert!(entry.users.is_dead());
        self.stats.bytes_pinned -= entry.len;
        self.stats.entries -= 1;
        entry
    }

    pub(crate) fn max_len(&self) -> usize {
        self.lens.last_key_value().map_or(0, |(&l, _)| l)
    }

    /// Finds a valid registration covering `[b, e)`: one with `access` (hit),
    /// else one lacking it (upgrade), else a miss.
    #[inline]
    pub(crate) fn find(&self, b: usize, e: usize, access: Access) -> Lookup<H> {
        if let Some(&at) = self.pages.get(&(b >> self.page_shift)) {
            // SAFETY: the page map holds the entries of indexed slots only (`unindex`
            // takes them out), which stay in place until retired (under `&mut self`).
            let en = unsafe { at.as_ref() };
            if en.base <= b && en.base + en.len >= e && en.access.contains(access) {
                return Lookup::Hit(at);
            }
        }
        self.find_in_index(b, e, access)
    }

    fn find_in_index(&self, b: usize, e: usize, access: Access) -> Lookup<H> {
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
            let en = self.entry(i);
            if en.base + en.len >= e {
                if en.access.contains(access) {
                    return Lookup::Hit(self.slot(i).entry);
                }
                if upgrade.is_none() {
                    upgrade = Some(i);
                }
            }
        }
        upgrade.map_or(Lookup::Miss, Lookup::Upgrade)
    }
}
