//! Where a cache's entries live: chunks of places that never move or shrink while the
//! cache lives, reused through a free list.
//!
//! A hit reads and writes one line of its entry (see [`Entry`]); among many
//! registrations that line is rarely in the processor's caches, and where each entry
//! had its own allocation, a heap that had served other memory before scattered them
//! over many more pages than they fill (each hit a likely TLB miss as well, dearer
//! under virtualisation). Here they stay as dense as the most the cache ever held.
//! Written by hand because the slab crates that keep places in place are concurrent
//! ones (`sharded-slab`), whose guards and generations a lookup under one lock does not
//! need.

use std::mem::MaybeUninit;
use std::ptr::NonNull;

use crate::registration::Entry;

/// Places per chunk: a chunk of 64-byte-aligned entries fills a few pages.
const CHUNK: usize = 64;

pub(crate) struct Entries<H> {
    /// Each from `Box::<[MaybeUninit<Entry<H>>]>::into_raw`, `CHUNK` places long.
    chunks: Vec<NonNull<MaybeUninit<Entry<H>>>>,
    /// Places of the last chunk from this one on were never used.
    fresh: usize,
    /// Places given back, taken again first (the latest first).
    free: Vec<NonNull<Entry<H>>>,
}

impl<H> Entries<H> {
    pub(crate) fn new() -> Self {
        Entries {
            chunks: Vec::new(),
            fresh: CHUNK,
            free: Vec::new(),
        }
    }

    /// Moves `entry` into a vacant place and returns it; the place stays put until
    /// [`Entries::take`] gives it back.
    pub(crate) fn put(&mut self, entry: Entry<H>) -> NonNull<Entry<H>> {
        let at = match self.free.pop() {
            Some(at) => at,
            None => self.fresh_place(),
        };
        // SAFETY: a vacant place of a live chunk: aligned and sized for an entry, and
        // no reference to it exists.
        unsafe { at.as_ptr().write(entry) };
        at
    }

    fn fresh_place(&mut self) -> NonNull<Entry<H>> {
        if self.fresh == CHUNK {
            let chunk: Box<[MaybeUninit<Entry<H>>]> = Box::new_uninit_slice(CHUNK);
            // Given back by `Drop`, rebuilt as the box it was.
            self.chunks.push(NonNull::from(Box::leak(chunk)).cast());
            self.fresh = 0;
        }
        let last = *self.chunks.last().expect("a chunk was just made");
        // SAFETY: `fresh < CHUNK`: a place within the last chunk.
        let at = unsafe { last.add(self.fresh) };
        self.fresh += 1;
        at.cast()
    }

    /// Moves the entry out of `at` and makes the place vacant.
    ///
    /// # Safety
    ///
    /// `at` came from [`Entries::put`] on this store and was not taken since, and no
    /// reference to the entry is used after this call.
    pub(crate) unsafe fn take(&mut self, at: NonNull<Entry<H>>) -> Entry<H> {
        // SAFETY: by the caller's promise the place holds an entry no one reads again.
        let entry = unsafe { at.as_ptr().read() };
        self.free.push(at);
        entry
    }
}

impl<H> Drop for Entries<H> {
    /// Frees the chunks. An entry still in place (none is, once every slot of the
    /// cache was retired) is leaked, not dropped.
    fn drop(&mut self) {
        for &first in &self.chunks {
            let chunk = std::ptr::slice_from_raw_parts_mut(first.as_ptr(), CHUNK);
            // SAFETY: made by `Box::leak` of a `CHUNK`-long boxed slice in
            // `fresh_place`, and freed once, here; `MaybeUninit` drops nothing.
            drop(unsafe { Box::from_raw(chunk) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::users::Users;
    use crate::Access;
    use std::sync::atomic::AtomicBool;

    fn entry(id: u64) -> Entry<u64> {
        Entry {
            base: 0,
            len: 0,
            users: Users::one(),
            slot: 0,
            access: Access::LOCAL_READ,
            referenced: AtomicBool::new(false),
            keep_idle: true,
            id,
            handle: id,
            watched: None,
            kept_from_children: false,
        }
    }

    #[test]
    fn places_stay_put_and_are_reused() {
        let mut store = Entries::new();
        let first: Vec<_> = (0..3 * CHUNK as u64).map(|i| store.put(entry(i))).collect();
        for (i, at) in first.iter().enumerate() {
            // SAFETY: put above and not taken.
            let held = unsafe { at.as_ref() };
            assert_eq!(held.handle, i as u64, "moved by later puts");
            assert_eq!(at.as_ptr() as usize % 64, 0);
        }
        // SAFETY: put above, taken once.
        let taken = unsafe { store.take(first[5]) };
        assert_eq!(taken.handle, 5);
        let again = store.put(entry(1000));
        assert_eq!(
            again, first[5],
            "a vacant place is taken before a fresh one"
        );
        for &at in first.iter().filter(|&&at| at != first[5]).chain([&again]) {
            // SAFETY: each put above and taken once.
            let _ = unsafe { store.take(at) };
        }
    }
}
