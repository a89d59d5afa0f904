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

/// What a remote handle made by [`KeyTable::insert`] says of itself. Only its owner's
/// table can tell whether it is still live; the range and access are as registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandleFields {
    /// The entry's key in its owner's table.
    pub key: u64,
    /// Start of the registered range.
    pub base: u64,
    /// Its length.
    pub len: usize,
    /// The access it grants.
    pub access: Access,
}

impl HandleFields {
    /// The fields of `handle`, which must be [`HANDLE_SIZE`] bytes made by the module
    /// `target`.
    pub fn of(handle: &RemoteHandle, target: u64) -> Result<HandleFields> {
        let b = handle.as_bytes();
        if b.len() != HANDLE_SIZE {
            return Err(Error::MalformedHandle(b.len()));
        }
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if word(0) != target {
            return Err(Error::BadRemoteHandle(format!(
                "made by module {:#x}, not by the target {target:#x}",
                word(0)
            )));
        }
        Ok(HandleFields {
            key: word(8),
            base: word(16),
            len: word(24) as usize,
            access: Access::from_bits_truncate(u32::from_le_bytes(
                b[32..36].try_into().expect("4 bytes"),
            )),
        })
    }
}

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
        let key = HandleFields::of(handle, module.0)?.key;
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

#[cfg(test)]
mod tests {
    //! Remote handles as a peer may send them, fuzzed: read from any bytes, then
    //! checked against a table with live and removed entries; a check passes only for
    //! a live entry's key, inside its range, with its access, and never panics.
    //! (Longer runs: `PROPTEST_CASES=100000 cargo test -p rbtl-btl keytable`.)

    use super::{KeyTable, HANDLE_SIZE};
    use crate::sm::fuzz_config;
    use crate::{Error, ModuleId, RemoteHandle, MAX_HANDLE_SIZE};
    use proptest::collection::vec;
    use proptest::prelude::*;
    use rbtl_rcache::Access;

    const MODULE: ModuleId = ModuleId(0x5eed);

    /// A table of 4 entries: three live (one of them in the slot of a removed one,
    /// whose key is dead), one never used; the live entries' (handle, base, len,
    /// access).
    fn table(mem: &mut [u64; 16]) -> (KeyTable, Vec<(RemoteHandle, u64, usize, Access)>) {
        // SAFETY: `mem` holds table_bytes(4) = 128 bytes, 8-byte aligned, used only as
        // this table, and outlives it in each test.
        let mut t = unsafe { KeyTable::new(mem.as_mut_ptr().cast(), 4) };
        let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
        let (k0, _) = t.insert(MODULE, 0x1000, 4096, rw).unwrap();
        t.remove(k0);
        let mut live = Vec::new();
        // The last as a broken peer's table may claim: running past the address space.
        let entries = [
            (0x1000u64, 4096usize, rw),
            (u64::MAX - 4095, 4095, Access::ATOMIC),
            (u64::MAX - 100, 4096, rw),
        ];
        for (base, len, access) in entries {
            let (_, h) = t.insert(MODULE, base as usize, len, access).unwrap();
            live.push((h, base, len, access));
        }
        (t, live)
    }

    fn word() -> impl Strategy<Value = u64> {
        prop_oneof![
            0..16u64,
            0x1000 - 8..0x2000 + 8u64,
            u64::MAX - 4104..=u64::MAX,
            any::<u64>()
        ]
    }

    fn needs() -> impl Strategy<Value = Access> {
        any::<u32>().prop_map(Access::from_bits_truncate)
    }

    proptest! {
        #![proptest_config(fuzz_config(2000))]

        #[test]
        fn any_bytes_are_a_handle_or_malformed(bytes in vec(any::<u8>(), 0..400)) {
            match RemoteHandle::from_bytes(&bytes) {
                Ok(h) => {
                    prop_assert!(bytes.len() <= MAX_HANDLE_SIZE);
                    prop_assert_eq!(h.as_bytes(), &bytes[..]);
                }
                Err(Error::MalformedHandle(n)) => {
                    prop_assert!(n == bytes.len() && n > MAX_HANDLE_SIZE)
                }
                Err(e) => prop_assert!(false, "unexpected error {:?}", e),
            }
        }

        #[test]
        fn checks_pass_only_inside_a_live_entry(
            bytes in prop_oneof![
                vec(any::<u8>(), 0..80),
                vec(any::<u8>(), HANDLE_SIZE..=HANDLE_SIZE),
            ],
            which in 0..3usize,
            flip in prop_oneof![Just(None), (0..HANDLE_SIZE, 1..=255u8).prop_map(Some)],
            use_valid in any::<bool>(),
            addr in word(),
            len in prop_oneof![0..64usize, 4090..4100usize, any::<usize>()],
            needs in needs(),
        ) {
            let mut mem = [0u64; 16];
            let (t, live) = table(&mut mem);
            let view = t.view();
            let bytes = if use_valid {
                let mut b = live[which].0.as_bytes().to_vec();
                if let Some((i, x)) = flip {
                    b[i] ^= x;
                }
                b
            } else {
                bytes
            };
            let Ok(handle) = RemoteHandle::from_bytes(&bytes) else {
                return Ok(());
            };
            let got = view.check(MODULE, &handle, addr, len, needs);
            // The model: the bytes name a live entry (module and key words equal), and
            // the access lies in its range with its rights.
            let expected = live.iter().find(|(h, ..)| {
                bytes.len() == HANDLE_SIZE && h.as_bytes()[..16] == bytes[..16]
            }).is_some_and(|&(_, base, reg_len, access)| {
                addr >= base
                    && addr.checked_add(len as u64).is_some_and(|end| {
                        base.checked_add(reg_len as u64).is_some_and(|limit| end <= limit)
                    })
                    && access.contains(needs)
            });
            prop_assert_eq!(got.is_ok(), expected, "{:?}", got);
            if let Err(e) = got {
                let typed = matches!(
                    e,
                    Error::MalformedHandle(_)
                        | Error::BadRemoteHandle(_)
                        | Error::OutOfRange { .. }
                        | Error::AccessDenied { .. }
                );
                prop_assert!(typed, "unexpected error {:?}", e);
            }
        }
    }
}
