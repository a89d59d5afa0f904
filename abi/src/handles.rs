//! Tables of the library's objects, reached through handles.
//!
//! Predefined handles are the standard's small constants (below 0x1000). A handle of
//! the library's own is `MARK | kind << 40 | generation << 24 | index`: its kind tells
//! a communicator from a datatype passed in its place, and its generation a freed
//! object from the one that later took its slot, so that a wrong, foreign or freed
//! handle is an error, never a look at the wrong object.

use crate::error::{Error, Result};
use crate::ffi::*;

/// The kinds of objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Kind {
    Comm = 1,
    Group = 2,
    Datatype = 3,
    Op = 4,
    Request = 5,
    Win = 6,
    Errhandler = 7,
    Info = 8,
    Message = 9,
    File = 10,
    Session = 11,
}

const MARK: usize = 1 << 44;
const INDEX_BITS: u32 = 24;
const KIND_SHIFT: u32 = 40;

/// The Fortran handle of a library object: its index above this bit.
const FORTRAN_MARK: c_int = 1 << 30;

/// The objects of one kind.
pub struct Table<T> {
    kind: Kind,
    slots: Vec<(u16, Option<T>)>,
    free: Vec<u32>,
}

impl<T> Table<T> {
    /// An empty table of `kind`.
    pub const fn new(kind: Kind) -> Table<T> {
        Table {
            kind,
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Whether `h` is a handle of this table's kind (live or not).
    #[inline(always)]
    pub fn owns(&self, h: Handle) -> bool {
        h & !((1 << KIND_SHIFT) - 1) == MARK | (self.kind as usize) << KIND_SHIFT
    }

    fn split(h: Handle) -> (usize, u16) {
        (h & ((1 << INDEX_BITS) - 1), (h >> INDEX_BITS) as u16)
    }

    /// Keep `value`; its handle.
    #[inline(always)]
    pub fn insert(&mut self, value: T) -> Result<Handle> {
        let index = match self.free.pop() {
            Some(i) => i as usize,
            None if self.slots.len() < 1 << INDEX_BITS => {
                self.slots.push((0, None));
                self.slots.len() - 1
            }
            None => {
                return Err(Error::new(
                    MPI_ERR_NO_MEM,
                    format!(
                        "{:?}: more than {} live objects",
                        self.kind,
                        1 << INDEX_BITS
                    ),
                ))
            }
        };
        let slot = &mut self.slots[index];
        slot.0 = slot.0.wrapping_add(1);
        slot.1 = Some(value);
        Ok(MARK | (self.kind as usize) << KIND_SHIFT | usize::from(slot.0) << INDEX_BITS | index)
    }

    /// The object of `h`, if live.
    #[inline(always)]
    pub fn get(&self, h: Handle) -> Option<&T> {
        if !self.owns(h) {
            return None;
        }
        let (i, g) = Self::split(h);
        match self.slots.get(i) {
            Some((gen, Some(v))) if *gen == g => Some(v),
            _ => None,
        }
    }

    /// The object of `h`, if live, writable.
    #[inline(always)]
    pub fn get_mut(&mut self, h: Handle) -> Option<&mut T> {
        if !self.owns(h) {
            return None;
        }
        let (i, g) = Self::split(h);
        match self.slots.get_mut(i) {
            Some((gen, Some(v))) if *gen == g => Some(v),
            _ => None,
        }
    }

    /// The place of `h`'s object, if live: to read, change or delete it with one
    /// look-up of the handle.
    #[inline(always)]
    pub fn entry(&mut self, h: Handle) -> Option<Entry<'_, T>> {
        if !self.owns(h) {
            return None;
        }
        let (i, g) = Self::split(h);
        let slot = self.slots.get_mut(i)?;
        if slot.0 != g || slot.1.is_none() {
            return None;
        }
        Some(Entry {
            slot,
            free: &mut self.free,
            index: i as u32,
        })
    }

    /// Take the object of `h` out; its handle is dead from now on.
    pub fn remove(&mut self, h: Handle) -> Option<T> {
        if !self.owns(h) {
            return None;
        }
        let (i, g) = Self::split(h);
        match self.slots.get_mut(i) {
            Some((gen, v @ Some(_))) if *gen == g => {
                self.free.push(i as u32);
                v.take()
            }
            _ => None,
        }
    }

    /// Live objects with their handles.
    pub fn iter(&self) -> impl Iterator<Item = (Handle, &T)> {
        let kind = self.kind as usize;
        self.slots
            .iter()
            .enumerate()
            .filter_map(move |(i, (g, v))| {
                v.as_ref().map(|v| {
                    (
                        MARK | kind << KIND_SHIFT | usize::from(*g) << INDEX_BITS | i,
                        v,
                    )
                })
            })
    }

    /// Live objects.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The Fortran integer of `h` (`MPI_*_c2f`): a predefined handle's value, or the
    /// index of a library object above `FORTRAN_MARK`.
    pub fn to_fortran(&self, h: Handle) -> c_int {
        if self.get(h).is_some() {
            FORTRAN_MARK | Self::split(h).0 as c_int
        } else {
            h as c_int
        }
    }

    /// The handle of a Fortran integer (`MPI_*_f2c`): the live object at its index, or
    /// the value itself (a predefined handle, or one that names nothing).
    pub fn from_fortran(&self, f: c_int) -> Handle {
        if f & FORTRAN_MARK != 0 {
            let i = (f & !FORTRAN_MARK) as usize;
            if let Some((g, Some(_))) = self.slots.get(i) {
                return MARK
                    | (self.kind as usize) << KIND_SHIFT
                    | usize::from(*g) << INDEX_BITS
                    | i;
            }
        }
        f as u32 as Handle
    }
}

/// A live object's place in its table ([`Table::entry`]).
pub struct Entry<'a, T> {
    slot: &'a mut (u16, Option<T>),
    free: &'a mut Vec<u32>,
    index: u32,
}

impl<T> Entry<'_, T> {
    /// The object.
    #[inline(always)]
    pub fn get(&self) -> &T {
        self.slot.1.as_ref().expect("a live entry")
    }

    /// The object, writable.
    #[inline(always)]
    pub fn get_mut(&mut self) -> &mut T {
        self.slot.1.as_mut().expect("a live entry")
    }

    /// Drop the object where it lies; its handle is dead from now on.
    #[inline(always)]
    pub fn delete(self) {
        self.free.push(self.index);
        self.slot.1 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_changes_and_deletes_its_object_only() {
        let mut reqs: Table<u32> = Table::new(Kind::Request);
        let (a, b) = (reqs.insert(1).unwrap(), reqs.insert(2).unwrap());
        *reqs.entry(a).unwrap().get_mut() = 10;
        assert_eq!(reqs.get(a), Some(&10));
        reqs.entry(a).unwrap().delete();
        assert!(reqs.entry(a).is_none(), "deleted");
        assert!(reqs.get(a).is_none());
        assert_eq!(reqs.entry(b).map(|e| *e.get()), Some(2), "the other stays");
        let c = reqs.insert(3).unwrap();
        assert!(
            reqs.entry(a).is_none(),
            "the slot's new object is not the old handle's"
        );
        assert_eq!(reqs.entry(c).map(|e| *e.get()), Some(3));
        let mut comms: Table<u32> = Table::new(Kind::Comm);
        assert!(comms.entry(c).is_none(), "a request is not a communicator");
        assert_eq!(reqs.len(), 2);
    }

    #[test]
    fn stale_and_foreign_handles_find_nothing() {
        let mut comms: Table<u32> = Table::new(Kind::Comm);
        let mut types: Table<u32> = Table::new(Kind::Datatype);
        let c = comms.insert(1).unwrap();
        let t = types.insert(2).unwrap();
        assert_eq!(comms.get(c), Some(&1));
        assert_eq!(comms.get(t), None, "a datatype is not a communicator");
        assert_eq!(types.get(c), None);
        assert!(c > 0x1000, "never a predefined value");
        assert_eq!(comms.remove(c), Some(1));
        assert_eq!(comms.get(c), None, "freed");
        let c2 = comms.insert(3).unwrap();
        assert_ne!(c, c2, "the slot's new object has another handle");
        assert_eq!(comms.get(c), None);
        assert_eq!(comms.get(MPI_COMM_WORLD), None);
        assert_eq!(comms.iter().map(|(h, _)| h).collect::<Vec<_>>(), vec![c2]);
        let f = comms.to_fortran(c2);
        assert_eq!(comms.from_fortran(f), c2);
        assert_eq!(comms.to_fortran(MPI_COMM_WORLD), 0x101);
        assert_eq!(comms.from_fortran(0x101), MPI_COMM_WORLD);
    }
}
