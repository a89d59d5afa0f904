//! Where shared memory for windows goes in an `sm` segment's heap: page-aligned
//! ranges, first fit, freed ranges merged with their neighbours and the top lowered
//! when the last range goes. Only the owning process allocates in its heap, so this
//! bookkeeping is private to it.

use std::collections::btree_map::{BTreeMap, Entry};

const PAGE: usize = 4096;

/// The allocations of one heap (offsets from its start).
#[derive(Debug)]
pub struct Heap {
    size: usize,
    /// Everything at or above `top` is free.
    top: usize,
    /// Free ranges below `top`, by start: their lengths (never adjacent).
    free: BTreeMap<usize, usize>,
    /// Live allocations, by start: their page-rounded lengths.
    live: BTreeMap<usize, usize>,
}

impl Heap {
    /// An empty heap of `size` bytes.
    pub fn new(size: usize) -> Heap {
        Heap {
            size,
            top: 0,
            free: BTreeMap::new(),
            live: BTreeMap::new(),
        }
    }

    /// The start of `len` bytes (rounded up to whole pages), or `None` when no free
    /// range holds them.
    pub fn alloc(&mut self, len: usize) -> Option<usize> {
        if len == 0 {
            return None;
        }
        let need = len.checked_next_multiple_of(PAGE)?;
        let fit = self
            .free
            .iter()
            .find(|(_, &l)| l >= need)
            .map(|(&s, &l)| (s, l));
        let start = match fit {
            Some((s, l)) => {
                self.free.remove(&s);
                if l > need {
                    self.free.insert(s + need, l - need);
                }
                s
            }
            None if need <= self.size - self.top => {
                self.top += need;
                self.top - need
            }
            None => return None,
        };
        self.live.insert(start, need);
        Some(start)
    }

    /// Give back the allocation of `len` bytes at `start`; false, changing nothing,
    /// when no allocation of that length starts there.
    pub fn free(&mut self, start: usize, len: usize) -> bool {
        let len = match self.live.entry(start) {
            Entry::Occupied(e) if Some(*e.get()) == len.checked_next_multiple_of(PAGE) => {
                e.remove()
            }
            _ => return false,
        };
        let (mut s, mut end) = (start, start + len);
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            if ps + pl == s {
                self.free.remove(&ps);
                s = ps;
            }
        }
        if let Some(&nl) = self.free.get(&end) {
            self.free.remove(&end);
            end += nl;
        }
        if end == self.top {
            self.top = s;
        } else {
            self.free.insert(s, end - s);
        }
        true
    }

    /// Bytes from the start up to the highest allocation.
    #[cfg(test)]
    fn top(&self) -> usize {
        self.top
    }

    /// Bytes that a new allocation could still get in one piece.
    pub fn largest_free(&self) -> usize {
        let below = self.free.values().copied().max().unwrap_or(0);
        below.max(self.size - self.top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_ranges_are_reused_merged_and_the_top_comes_down() {
        let mut h = Heap::new(16 * PAGE);
        let a = h.alloc(1).unwrap();
        let b = h.alloc(2 * PAGE).unwrap();
        let c = h.alloc(PAGE + 1).unwrap();
        assert_eq!((a, b, c, h.top()), (0, PAGE, 3 * PAGE, 5 * PAGE));
        assert!(h.free(b, 2 * PAGE));
        assert_eq!(h.alloc(PAGE), Some(PAGE), "first fit, in the hole");
        assert_eq!(h.alloc(PAGE), Some(2 * PAGE), "the rest of the hole");
        assert_eq!(h.alloc(PAGE), Some(5 * PAGE), "then from the top");
        for s in [PAGE, 2 * PAGE, 0] {
            assert!(h.free(s, PAGE));
        }
        assert_eq!(
            h.alloc(3 * PAGE),
            Some(0),
            "neighbours merged into one range"
        );
        assert!(h.free(0, 3 * PAGE));
        assert!(h.free(5 * PAGE, PAGE));
        assert!(h.free(c, PAGE + 1));
        assert_eq!(h.top(), 0, "everything freed: the top is back at the start");
        assert_eq!(h.alloc(16 * PAGE), Some(0), "the whole heap in one piece");
    }

    #[test]
    fn unknown_or_repeated_frees_change_nothing_and_a_full_heap_refuses() {
        let mut h = Heap::new(4 * PAGE);
        assert_eq!(h.alloc(0), None);
        assert_eq!(h.alloc(5 * PAGE), None, "larger than the heap");
        assert_eq!(h.alloc(usize::MAX), None, "no overflow");
        let a = h.alloc(3 * PAGE).unwrap();
        assert_eq!(h.alloc(2 * PAGE), None);
        assert_eq!(h.largest_free(), PAGE);
        assert!(!h.free(a + PAGE, PAGE), "not the start of an allocation");
        assert!(!h.free(a, PAGE), "not its length");
        assert_eq!(h.largest_free(), PAGE, "refusals change nothing");
        assert!(h.free(a, 3 * PAGE));
        assert!(!h.free(a, 3 * PAGE), "freed twice");
        assert_eq!(h.largest_free(), 4 * PAGE);
    }
}
