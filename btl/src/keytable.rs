//! A fixed-capacity table of live registrations laid out in plain memory, so that it can
//! live in a shared segment and be checked by peers before they touch the memory it
//! describes. Remote handles name an entry by key (slot index and generation).
//!
//! The owner inserts and removes; anyone may check. A check reads the slot's state,
//! then its fields, then the state again (a sequence lock): a slot reused meanwhile
//! shows a different generation and the check fails.

use crate::{check_range, Error, ModuleId, RemoteHandle, Result};
use rbtl_rcache::Access;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes of a remote handle made from a key: module id, key, base, length (u64 each)
/// and access (u32).
pub const HANDLE_SIZE: usize = 36;

/// One entry, 32 bytes.
#[repr(C)]
pub struct Slot {
    /// `generation << 1 | live`.
    state: AtomicU64,
    base: AtomicU64,
    len: AtomicU64,
    access: AtomicU32,
    _pad: u32,
}

/// Bytes a table of `capacity` entries occupies.
pub const fn table_bytes(capacity: usize) -> usize {
    capacity * std::mem::size_of::<Slot>()
}

/// [`table_bytes`], or `None` when it overflows.
pub const fn table_bytes_checked(capacity: usize) -> Option<usize> {
    capacity.checked_mul(std::mem::size_of::<Slot>())
}

/// Read access to a table, possibly another process's.
#[derive(Clone, Copy)]
pub struct KeyTableView {
    slots: *const Slot,
    capacity: usize,
}

// SAFETY: the view only reads atomics in memory that outlives it (the creator's
// contract in `KeyTableView::new`).
unsafe impl Send for KeyTableView {}

impl KeyTableView {
    /// A view of the table at `mem`.
    ///
    /// # Safety
    ///
    /// `mem` must be 8-byte aligned, hold [`table_bytes`]`(capacity)` bytes used only as
    /// such a table, and stay mapped for as long as the view is used.
    pub unsafe fn new(mem: *mut u8, capacity: usize) -> KeyTableView {
        KeyTableView {
            slots: mem.cast::<Slot>(),
            capacity,
        }
    }

    fn slot(&self, index: usize) -> &Slot {
        debug_assert!(index < self.capacity);
        // SAFETY: index < capacity, and `new`'s contract keeps the memory mapped.
        unsafe { &*self.slots.add(index) }
    }

    /// Check that `handle` names a live entry made by `module` that covers
    /// `[addr, addr+len)` and grants `needs`.
    pub fn check(
        &self,
        module: ModuleId,
        handle: &RemoteHandle,
        addr: u64,
        len: usize,
        needs: Access,
    ) -> Result<()> {
        let b = handle.as_bytes();
        if b.len() != HANDLE_SIZE {
            return Err(Error::MalformedHandle(b.len()));
        }
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if word(0) != module.0 {
            return Err(Error::BadRemoteHandle(format!(
                "made by module {:#x}, not by the target {:#x}",
                word(0),
                module.0
            )));
        }
        let key = word(8);
        let index = (key & 0xffff_ffff) as usize;
        let live = (key >> 32) << 1 | 1;
        if index >= self.capacity {
            return Err(Error::BadRemoteHandle(format!(
                "key {key:#x} out of the table"
            )));
        }
        let slot = self.slot(index);
        let dead = || Error::BadRemoteHandle("deregistered".into());
        if slot.state.load(Ordering::Acquire) != live {
            return Err(dead());
        }
        let base = slot.base.load(Ordering::Relaxed);
        let reg_len = slot.len.load(Ordering::Relaxed) as usize;
        let access = Access::from_bits_truncate(slot.access.load(Ordering::Relaxed));
        std::sync::atomic::fence(Ordering::Acquire);
        if slot.state.load(Ordering::Relaxed) != live {
            return Err(dead());
        }
        check_range("remote", addr, len, base, reg_len)?;
        if !access.contains(needs) {
            return Err(Error::AccessDenied {
                side: "remote",
                has: access,
                needs,
            });
        }
        Ok(())
    }
}

/// The owner's side: a view plus the list of free slots.
pub struct KeyTable {
    view: KeyTableView,
    free: Vec<u32>,
}

impl KeyTable {
    /// Take ownership of the (zeroed) table memory at `mem`.
    ///
    /// # Safety
    ///
    /// As [`KeyTableView::new`], and no other `KeyTable` may own the same memory.
    pub unsafe fn new(mem: *mut u8, capacity: usize) -> KeyTable {
        KeyTable {
            // SAFETY: forwarded contract.
            view: unsafe { KeyTableView::new(mem, capacity) },
            free: (0..capacity as u32).rev().collect(),
        }
    }

    /// The read side.
    pub fn view(&self) -> KeyTableView {
        self.view
    }

    /// Add an entry; its remote handle. `None` when the table is full.
    pub fn insert(
        &mut self,
        module: ModuleId,
        base: usize,
        len: usize,
        access: Access,
    ) -> Option<(u64, RemoteHandle)> {
        let index = self.free.pop()?;
        let slot = self.view.slot(index as usize);
        let generation = (slot.state.load(Ordering::Relaxed) >> 1) + 1;
        // The dead state (stored when the slot was removed) must be visible before the
        // new fields, or a checker could pair an old key with them.
        std::sync::atomic::fence(Ordering::Release);
        slot.base.store(base as u64, Ordering::Relaxed);
        slot.len.store(len as u64, Ordering::Relaxed);
        slot.access.store(access.bits(), Ordering::Relaxed);
        slot.state.store(generation << 1 | 1, Ordering::Release);
        let key = (generation << 32) | u64::from(index);
        let mut bytes = [0u8; HANDLE_SIZE];
        bytes[0..8].copy_from_slice(&module.0.to_le_bytes());
        bytes[8..16].copy_from_slice(&key.to_le_bytes());
        bytes[16..24].copy_from_slice(&(base as u64).to_le_bytes());
        bytes[24..32].copy_from_slice(&(len as u64).to_le_bytes());
        bytes[32..36].copy_from_slice(&access.bits().to_le_bytes());
        let remote = RemoteHandle::from_bytes(&bytes).expect("36 bytes fit a handle");
        Some((key, remote))
    }

    /// Remove the entry of `key` (made by [`KeyTable::insert`]).
    pub fn remove(&mut self, key: u64) {
        let index = (key & 0xffff_ffff) as u32;
        let slot = self.view.slot(index as usize);
        let live = (key >> 32) << 1 | 1;
        if slot.state.load(Ordering::Relaxed) == live {
            slot.state.store(live & !1, Ordering::Release);
            self.free.push(index);
        }
    }
}
