//! The registrations behind the cache lock: a slab of slots, the interval index over
//! the valid ones (by base address, with a multiset of their lengths) and the LRU list
//! of idle ones (intrusive `prev`/`next` indices in the slots).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::registration::Entry;
use crate::{Access, Stats};

pub(crate) const NIL: usize = usize::MAX;

pub(crate) struct Slot<H> {
    pub(crate) entry: Arc<Entry<H>>,
    pub(crate) users: usize,
    pub(crate) indexed: bool,
    pub(crate) in_lru: bool,
    pub(crate) prev: usize,
    pub(crate) next: usize,
}

pub(crate) enum Lookup {
    Hit(usize),
    Upgrade(usize),
    Miss,
}

/// Everything behind the cache lock. Invariant: the strong count of every
/// slot's `Arc<Entry>` equals `users + 1`, and all clones and drops of those
/// `Arc`s happen under the lock, so once a slot is removed with `users == 0`
/// its `Arc` is unique and the handle can be moved out for deregistration.
pub(crate) struct State<H> {
    pub(crate) slots: Vec<Option<Slot<H>>>,
    pub(crate) free: Vec<usize>,
    pub(crate) index: BTreeMap<(usize, u64), usize>,
    pub(crate) lens: BTreeMap<usize, usize>,
    pub(crate) lru_head: usize,
    pub(crate) lru_tail: usize,
    pub(crate) next_id: u64,
    pub(crate) stats: Stats,
}

impl<H> State<H> {
    pub(crate) fn new() -> Self {
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

    pub(crate) fn slot(&self, i: usize) -> &Slot<H> {
        self.slots[i]
            .as_ref()
            .expect("rcache: slot index refers to a free slot")
    }

    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut Slot<H> {
        self.slots[i]
            .as_mut()
            .expect("rcache: slot index refers to a free slot")
    }

    pub(crate) fn insert_slot(&mut self, entry: Arc<Entry<H>>) -> usize {
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
    pub(crate) fn unindex(&mut self, i: usize) {
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
    pub(crate) fn retire(&mut self, i: usize) -> Option<H> {
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

    pub(crate) fn lru_push_back(&mut self, i: usize) {
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

    pub(crate) fn lru_remove(&mut self, i: usize) {
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

    pub(crate) fn max_len(&self) -> usize {
        self.lens.last_key_value().map_or(0, |(&l, _)| l)
    }

    /// Finds a valid registration covering `[b, e)`: one with `access` (hit),
    /// else one lacking it (upgrade), else a miss.
    pub(crate) fn find(&self, b: usize, e: usize, access: Access) -> Lookup {
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
