//! A fixed-capacity table of live registrations laid out in plain memory, so that it can
//! live in a shared segment and be checked by peers before they touch the memory it
//! describes. Each range of a registration has an entry; remote handles
//! ([`keyed_handle`](crate::keyed_handle)) name a registration's entries by their slot
//! keys (slot index and generation) and carry the registration's key, which each entry
//! holds too.
//!
//! The owner inserts and removes, and keeps the registration keys in use unique
//! (a requested key, or one it chooses); anyone may check. A check reads the slot's
//! state, then its fields, then the state again (a sequence lock): a slot reused
//! meanwhile shows a different generation and the check fails.

use crate::keyed_handle::{HandleFields, RangeFields};
use crate::{check_range, Error, MemRange, ModuleId, RemoteHandle, Result, MAX_RANGES};
use rbtl_rcache::Access;
use rustc_hash::FxHashSet;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// One entry, 40 bytes.
#[repr(C)]
pub struct Slot {
    /// `generation << 1 | live`.
    state: AtomicU64,
    base: AtomicU64,
    len: AtomicU64,
    /// The registration's key.
    key: AtomicU64,
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

    /// Check that `handle` names a live registration made by `module` with a range
    /// that covers `[addr, addr+len)` and that grants `needs`.
    pub fn check(
        &self,
        module: ModuleId,
        handle: &RemoteHandle,
        addr: u64,
        len: usize,
        needs: Access,
    ) -> Result<()> {
        let fields = HandleFields::of(handle, module.0)?;
        // The range the handle says holds the access; its entry then says whether it
        // really does (a handle may claim anything).
        let range = fields.ranges()[fields.find(addr, len)?];
        let key = range.slot;
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
        let reg_key = slot.key.load(Ordering::Relaxed);
        let access = Access::from_bits_truncate(slot.access.load(Ordering::Relaxed));
        std::sync::atomic::fence(Ordering::Acquire);
        if slot.state.load(Ordering::Relaxed) != live {
            return Err(dead());
        }
        if reg_key != fields.key {
            return Err(Error::BadRemoteHandle(format!(
                "the handle names key {:#x}; its entry belongs to key {reg_key:#x}",
                fields.key
            )));
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

/// A registration in the table: its key, its entries, its remote handle.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// The registration's key.
    pub key: u64,
    slots: [u64; MAX_RANGES],
    count: usize,
    /// The handle peers use.
    pub remote: RemoteHandle,
}

impl Entry {
    /// The slot keys of its entries, one per range.
    pub fn slots(&self) -> &[u64] {
        &self.slots[..self.count]
    }
}

/// The owner's side: a view, the list of free slots and the keys in use.
pub struct KeyTable {
    view: KeyTableView,
    free: Vec<u32>,
    /// (Hashed by Fx, not SipHash: the keys come from this process, its own counter
    /// or a registrant's request, never from a peer; and a rendezvous registers.)
    keys: FxHashSet<u64>,
    next_key: u64,
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
            keys: FxHashSet::default(),
            next_key: 1,
        }
    }

    /// The read side.
    pub fn view(&self) -> KeyTableView {
        self.view
    }

    /// Entries left.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Add a registration of `ranges` (1 to [`MAX_RANGES`]) under the `requested` key,
    /// or one the table chooses. [`Error::KeyInUse`] when a live registration holds
    /// the requested key, [`Error::NotAvailable`] when the table has too few free
    /// entries; either way nothing changes.
    pub fn insert(
        &mut self,
        module: ModuleId,
        ranges: &[MemRange],
        access: Access,
        requested: Option<u64>,
    ) -> Result<Entry> {
        assert!((1..=MAX_RANGES).contains(&ranges.len()));
        if self.free.len() < ranges.len() {
            return Err(Error::NotAvailable(format!(
                "all {} registration slots are in use: deregister handles or raise the \
                 transport's max_registrations parameter",
                self.view.capacity
            )));
        }
        let key = match requested {
            Some(k) if self.keys.contains(&k) => return Err(Error::KeyInUse(k)),
            Some(k) => k,
            None => {
                while self.keys.contains(&self.next_key) {
                    self.next_key = self.next_key.wrapping_add(1);
                }
                self.next_key
            }
        };
        self.keys.insert(key);
        self.next_key = self.next_key.wrapping_add(1);
        let mut slots = [0u64; MAX_RANGES];
        let mut fields = [RangeFields::default(); MAX_RANGES];
        for (i, r) in ranges.iter().enumerate() {
            let index = self.free.pop().expect("counted above");
            let slot = self.view.slot(index as usize);
            let generation = (slot.state.load(Ordering::Relaxed) >> 1) + 1;
            // The dead state (stored when the slot was removed) must be visible before
            // the new fields, or a checker could pair an old key with them.
            std::sync::atomic::fence(Ordering::Release);
            slot.base.store(r.base as u64, Ordering::Relaxed);
            slot.len.store(r.len as u64, Ordering::Relaxed);
            slot.key.store(key, Ordering::Relaxed);
            slot.access.store(access.bits(), Ordering::Relaxed);
            slot.state.store(generation << 1 | 1, Ordering::Release);
            slots[i] = (generation << 32) | u64::from(index);
            fields[i] = RangeFields {
                slot: slots[i],
                base: r.base as u64,
                len: r.len,
            };
        }
        let remote = HandleFields::new(module.0, key, access, &fields[..ranges.len()]).to_handle();
        Ok(Entry {
            key,
            slots,
            count: ranges.len(),
            remote,
        })
    }

    /// Remove a registration made by [`KeyTable::insert`]; its key is free again.
    pub fn remove(&mut self, entry: &Entry) {
        let mut removed = false;
        for &key in &entry.slots[..entry.count] {
            let index = (key & 0xffff_ffff) as u32;
            let slot = self.view.slot(index as usize);
            let live = (key >> 32) << 1 | 1;
            if slot.state.load(Ordering::Relaxed) == live {
                slot.state.store(live & !1, Ordering::Release);
                self.free.push(index);
                removed = true;
            }
        }
        if removed {
            self.keys.remove(&entry.key);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Remote handles as a peer may send them, fuzzed: read from any bytes, then
    //! checked against a table with live and removed registrations (one of them
    //! vectored); a check passes only inside a live entry's true range, with its
    //! access and its registration's key, and never panics. Keys: requested ones are
    //! honoured, one in use is refused and changes nothing, a removed one is free again.
    //! (Longer runs: `PROPTEST_CASES=100000 cargo test -p rbtl-btl keytable`.)

    use super::KeyTable;
    use crate::keyed_handle::{handle_size, HandleFields};
    use crate::{Error, MemRange, ModuleId, RemoteHandle, MAX_HANDLE_SIZE};
    use proptest::collection::vec;
    use proptest::prelude::*;
    use rbtl_rcache::Access;
    use std::collections::HashMap;

    const MODULE: ModuleId = ModuleId(0x5eed);

    /// What the model knows of a live entry: (base, len, access, registration key).
    type Live = HashMap<u64, (u64, usize, Access, u64)>;

    /// A table of 8 entries: a removed registration, then three live ones of one range
    /// (the last two as a broken peer's table may claim: running past the address
    /// space) and one of three ranges (two touching, one apart); their handles, and the
    /// live entries by slot key.
    fn table(mem: &mut [u64; 40]) -> (KeyTable, Vec<RemoteHandle>, Live) {
        // SAFETY: `mem` holds table_bytes(8) = 320 bytes, 8-byte aligned, used only as
        // this table, and outlives it in each test.
        let mut t = unsafe { KeyTable::new(mem.as_mut_ptr().cast(), 8) };
        let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
        let gone = t
            .insert(MODULE, &[MemRange::new(0x1000, 4096)], rw, None)
            .unwrap();
        t.remove(&gone);
        let regs: [(&[MemRange], Access); 4] = [
            (&[MemRange::new(0x1000, 4096)], rw),
            (&[MemRange::new(usize::MAX - 4095, 4095)], Access::ATOMIC),
            (&[MemRange::new(usize::MAX - 100, 4096)], rw),
            (
                &[
                    MemRange::new(0x1800, 64),
                    MemRange::new(0x1840, 64),
                    MemRange::new(0x1a00, 32),
                ],
                Access::REMOTE_WRITE,
            ),
        ];
        let (mut handles, mut live) = (Vec::new(), Live::new());
        for (ranges, access) in regs {
            let e = t.insert(MODULE, ranges, access, None).unwrap();
            for (slot, r) in e.slots().iter().zip(ranges) {
                live.insert(*slot, (r.base as u64, r.len, access, e.key));
            }
            handles.push(e.remote);
        }
        (t, handles, live)
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

    fn inside(addr: u64, len: usize, base: u64, reg_len: usize) -> bool {
        addr >= base
            && addr.checked_add(len as u64).is_some_and(|end| {
                base.checked_add(reg_len as u64)
                    .is_some_and(|limit| end <= limit)
            })
    }

    #[test]
    fn requested_keys_are_honoured_once_and_free_again_after_removal() {
        let mut mem = [0u64; 40];
        // SAFETY: as in `table`.
        let mut t = unsafe { KeyTable::new(mem.as_mut_ptr().cast(), 8) };
        let r = [MemRange::new(0x1000, 64)];
        let a = t.insert(MODULE, &r, Access::REMOTE_READ, Some(7)).unwrap();
        assert_eq!(a.key, 7);
        let free = t.free_slots();
        assert!(matches!(
            t.insert(MODULE, &r, Access::REMOTE_READ, Some(7)),
            Err(Error::KeyInUse(7))
        ));
        assert_eq!(t.free_slots(), free, "a refused key takes no entry");
        // Chosen keys avoid the requested ones, whatever their order.
        let chosen: Vec<u64> = (0..7)
            .map(|_| t.insert(MODULE, &r, Access::REMOTE_READ, None).unwrap().key)
            .collect();
        assert!(!chosen.contains(&7), "{chosen:?}");
        assert!(matches!(
            t.insert(MODULE, &r, Access::REMOTE_READ, Some(99)),
            Err(Error::NotAvailable(_))
        ));
        t.remove(&a);
        let again = t.insert(MODULE, &r, Access::REMOTE_READ, Some(7)).unwrap();
        assert_eq!(again.key, 7);
        assert!(
            matches!(
                t.view()
                    .check(MODULE, &a.remote, 0x1000, 8, Access::REMOTE_READ),
                Err(Error::BadRemoteHandle(_))
            ),
            "the old handle of the key names a dead entry"
        );
        assert!(t
            .view()
            .check(MODULE, &again.remote, 0x1000, 8, Access::REMOTE_READ)
            .is_ok());
    }

    proptest! {
        #![proptest_config(rbtl_testkit::fuzz::config(2000))]

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
                vec(any::<u8>(), 0..120),
                vec(any::<u8>(), handle_size(1)..=handle_size(1)),
                vec(any::<u8>(), handle_size(3)..=handle_size(3)),
            ],
            which in 0..4usize,
            flip in prop_oneof![
                Just(None),
                (0..handle_size(3), 1..=255u8).prop_map(Some),
            ],
            use_valid in any::<bool>(),
            addr in word(),
            len in prop_oneof![0..80usize, 4090..4100usize, any::<usize>()],
            needs in needs(),
        ) {
            let mut mem = [0u64; 40];
            let (t, handles, live) = table(&mut mem);
            let view = t.view();
            let bytes = if use_valid {
                let mut b = handles[which].as_bytes().to_vec();
                if let Some((i, x)) = flip {
                    if let Some(byte) = b.get_mut(i) {
                        *byte ^= x;
                    }
                }
                b
            } else {
                bytes
            };
            let Ok(handle) = RemoteHandle::from_bytes(&bytes) else {
                return Ok(());
            };
            let got = view.check(MODULE, &handle, addr, len, needs);
            // Safety, whatever the bytes: a pass lies inside a live entry, with its
            // rights.
            if got.is_ok() {
                let covered = live.values().any(|&(base, reg_len, access, _)| {
                    inside(addr, len, base, reg_len) && access.contains(needs)
                });
                prop_assert!(covered, "passed outside every live entry");
            }
            // The model: the range the handle claims for the access names a live entry
            // of the handle's key, and the access lies in that entry with its rights.
            let expected = HandleFields::of(&handle, MODULE.0).ok().and_then(|f| {
                let range = f.ranges()[f.find(addr, len).ok()?];
                let &(base, reg_len, access, key) = live.get(&range.slot)?;
                (key == f.key && inside(addr, len, base, reg_len) && access.contains(needs))
                    .then_some(())
            });
            prop_assert_eq!(got.is_ok(), expected.is_some(), "{:?}", got);
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
