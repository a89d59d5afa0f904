//! The eviction list: every reachable registration the cache keeps idle once released,
//! in use or not, oldest first (intrusive `prev`/`next` indices in the slots), swept
//! second-chance style (CLOCK).
//!
//! A registration joins the list's tail when it is made and stays on it while in use,
//! so a hit and a release never touch the list: a hit only marks the entry
//! `referenced`. The sweep that looks for a registration to evict starts at the head:
//! one in use, or hit since the sweep last passed it, moves to the tail (its mark
//! cleared); the first idle one not hit since is the victim. So the victim is the
//! idle registration made or hit longest ago, as far as one sweep can tell, and one in
//! use is never evicted.

use std::sync::atomic::Ordering;

use crate::index::{State, NIL};

impl<H> State<H> {
    pub(crate) fn lru_push_back(&mut self, i: usize) {
        let tail = self.lru_tail;
        {
            let s = self.slot_mut(i);
            debug_assert!(!s.in_lru);
            s.in_lru = true;
            s.prev = tail;
            s.next = NIL;
        }
        self.lru_link_forward(tail, i);
        self.lru_link_back(NIL, i);
        self.lru_len += 1;
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
        self.lru_link_forward(prev, next);
        self.lru_link_back(next, prev);
        self.lru_len -= 1;
    }

    /// Points the forward link of `prev` (the list's head, when `prev` is NIL) at `i`.
    fn lru_link_forward(&mut self, prev: usize, i: usize) {
        if prev == NIL {
            self.lru_head = i;
        } else {
            self.slot_mut(prev).next = i;
        }
    }

    /// Points the backward link of `next` (the list's tail, when `next` is NIL) at `i`.
    fn lru_link_back(&mut self, next: usize, i: usize) {
        if next == NIL {
            self.lru_tail = i;
        } else {
            self.slot_mut(next).prev = i;
        }
    }

    /// The idle registration to evict, still on the list and indexed (see the module
    /// documentation); None when every one is in use. Visits each at most twice.
    pub(crate) fn lru_victim(&mut self) -> Option<usize> {
        for _ in 0..2 * self.lru_len {
            let i = self.lru_head;
            let en = self.entry(i);
            if !en.referenced.swap(false, Ordering::Relaxed) && en.users.is_idle() {
                return Some(i);
            }
            if self.lru_len > 1 {
                self.lru_remove(i);
                self.lru_push_back(i);
            }
        }
        None
    }

    /// The idle registrations on the list, oldest first.
    pub(crate) fn lru_idle(&self) -> Vec<usize> {
        let mut idle = Vec::new();
        let mut i = self.lru_head;
        while i != NIL {
            let s = self.slot(i);
            if self.entry(i).users.is_idle() {
                idle.push(i);
            }
            i = s.next;
        }
        idle
    }

    /// How many registrations are idle now (kept for reuse).
    pub(crate) fn idle_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|(_, s)| s.in_lru)
            .filter(|&(i, _)| self.entry(i).users.is_idle())
            .count()
    }
}
