//! The bytes of a remote handle made by a [`KeyTable`](crate::keytable::KeyTable):
//! which module made it, the registration's key and access, and for each range its
//! table entry (slot key), start and length. Little-endian:
//!
//! ```text
//!  0  module id          u64
//!  8  range 0: slot key  u64
//! 16  range 0: base      u64
//! 24  range 0: length    u64
//! 32  access             u32
//! 36  range count n      u32   (1..=MAX_RANGES)
//! 40  registration key   u64
//! 48  ranges 1..n: slot key, base, length (u64 each)
//! ```
//!
//! A one-range handle is [`HANDLE_SIZE`] bytes. Transports that send a handle with
//! each request (`sm`'s copy protocol, `tcp`) send the one-range handle of the range
//! the access lies in ([`HandleFields::narrow`]), so their frames keep a fixed size.

use crate::inline_ranges::{InlineRanges, RangeLayout};
use crate::le::{u32_at, u64_at};
use crate::{find_range, Error, RemoteHandle, Result, MAX_RANGES};
use rbtl_rcache::Access;

/// Bytes of a one-range handle.
pub const HANDLE_SIZE: usize = 48;
/// Where each range (slot key, start, length) stands.
const LAYOUT: RangeLayout = RangeLayout {
    head: HANDLE_SIZE,
    first: 8,
    stride: 24,
};

/// Bytes of a handle of `ranges` ranges.
pub const fn handle_size(ranges: usize) -> usize {
    LAYOUT.handle_len(ranges)
}

/// One range as a handle describes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RangeFields {
    /// Its entry's key in the owner's table (slot index and generation).
    pub slot: u64,
    /// Its start.
    pub base: u64,
    /// Its length.
    pub len: usize,
}

/// What a remote handle made by a key table says of itself. Only its owner's table can
/// tell whether it is still live; ranges and access are as registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandleFields {
    /// The module that made it.
    pub module: u64,
    /// The registration's key.
    pub key: u64,
    /// The access it grants.
    pub access: Access,
    ranges: InlineRanges<RangeFields>,
}

impl HandleFields {
    /// The fields of a registration.
    pub fn new(module: u64, key: u64, access: Access, ranges: &[RangeFields]) -> HandleFields {
        HandleFields {
            module,
            key,
            access,
            ranges: InlineRanges::new(ranges),
        }
    }

    /// The fields of `handle`, which must be a handle made by the module `target`.
    pub fn of(handle: &RemoteHandle, target: u64) -> Result<HandleFields> {
        let b = handle.as_bytes();
        if b.len() < HANDLE_SIZE {
            return Err(Error::MalformedHandle(b.len()));
        }
        let count = u32_at(b, 36) as usize;
        if !(1..=MAX_RANGES).contains(&count) || b.len() != handle_size(count) {
            return Err(Error::MalformedHandle(b.len()));
        }
        if u64_at(b, 0) != target {
            return Err(Error::BadRemoteHandle(format!(
                "made by module {:#x}, not by the target {target:#x}",
                u64_at(b, 0)
            )));
        }
        let ranges = InlineRanges::from_fn(count, |i| {
            let at = LAYOUT.range_at(i);
            RangeFields {
                slot: u64_at(b, at),
                base: u64_at(b, at + 8),
                len: u64_at(b, at + 16) as usize,
            }
        });
        Ok(HandleFields {
            module: target,
            key: u64_at(b, 40),
            access: Access::from_bits_truncate(u32_at(b, 32)),
            ranges,
        })
    }

    /// The ranges.
    pub fn ranges(&self) -> &[RangeFields] {
        &self.ranges
    }

    /// The index of the range that holds `[addr, addr+len)`, else
    /// [`Error::OutOfRange`].
    #[inline]
    pub fn find(&self, addr: u64, len: usize) -> Result<usize> {
        let ranges = self.ranges().iter().map(|r| (r.base, r.len));
        find_range("remote", ranges, addr, len)
    }

    /// The one-range handle of range `index`, with the same module, key and access.
    pub fn narrow(&self, index: usize) -> HandleFields {
        HandleFields::new(self.module, self.key, self.access, &[self.ranges[index]])
    }

    /// The bytes.
    pub fn to_handle(&self) -> RemoteHandle {
        let mut b = [0u8; handle_size(MAX_RANGES)];
        b[0..8].copy_from_slice(&self.module.to_le_bytes());
        b[32..36].copy_from_slice(&self.access.bits().to_le_bytes());
        b[36..40].copy_from_slice(&(self.ranges.len() as u32).to_le_bytes());
        b[40..48].copy_from_slice(&self.key.to_le_bytes());
        for (i, r) in self.ranges().iter().enumerate() {
            let at = LAYOUT.range_at(i);
            b[at..at + 8].copy_from_slice(&r.slot.to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&r.base.to_le_bytes());
            b[at + 16..at + 24].copy_from_slice(&(r.len as u64).to_le_bytes());
        }
        RemoteHandle::from_bytes(&b[..handle_size(self.ranges.len())]).expect("a handle fits")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_narrow_and_refuse_wrong_lengths() {
        let ranges: Vec<RangeFields> = (0..MAX_RANGES as u64)
            .map(|i| RangeFields {
                slot: i << 32 | (i + 1),
                base: 0x1000 * (i + 1),
                len: 100 + i as usize,
            })
            .collect();
        for n in 1..=MAX_RANGES {
            let f = HandleFields::new(7, 42, Access::REMOTE_READ, &ranges[..n]);
            let h = f.to_handle();
            assert_eq!(h.as_bytes().len(), handle_size(n));
            assert_eq!(HandleFields::of(&h, 7).unwrap(), f);
            assert!(matches!(
                HandleFields::of(&h, 8),
                Err(Error::BadRemoteHandle(_))
            ));
            let last = f.narrow(n - 1);
            assert_eq!(last.ranges(), &ranges[n - 1..n]);
            assert_eq!((last.key, last.access), (42, Access::REMOTE_READ));
            // One byte more or less, or a count that disagrees with the length.
            let b = h.as_bytes();
            for bad in [&b[..b.len() - 1], &[b, &[0]].concat()[..]] {
                let bad = RemoteHandle::from_bytes(bad).unwrap();
                assert!(matches!(
                    HandleFields::of(&bad, 7),
                    Err(Error::MalformedHandle(_))
                ));
            }
        }
    }
}
