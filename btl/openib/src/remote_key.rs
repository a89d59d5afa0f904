//! The remote handle of a registration: for each range, where it is, how long, and the
//! remote key (rkey) of its memory region, with the access granted and the
//! registration's key. The initiator checks an access against it, so refusals are
//! errors, not broken connections; the device checks the key and bounds again.
//! Little-endian:
//!
//! ```text
//!  0  range 0: base      u64
//!  8  range 0: length    u64
//! 16  range 0: rkey      u32
//! 20  access             u32
//! 24  range count n      u32   (1..=MAX_RANGES)
//! 28  reserved           u32   (0)
//! 32  registration key   u64   (the rkey of range 0: the device chooses keys)
//! 40  ranges 1..n: base u64, length u64, rkey u32, reserved u32
//! ```

use rbtl_btl::transport_kit::{u32_at, u64_at, InlineRanges, RangeLayout};
use rbtl_btl::{find_range, Access, Error, Result, MAX_RANGES};

/// Bytes of the handle of a one-range registration.
pub const REMOTE_KEY_LEN: usize = 40;
/// Where each range (start, length, remote key, and after range 0 a reserved `u32`)
/// stands.
const LAYOUT: RangeLayout = RangeLayout {
    head: REMOTE_KEY_LEN,
    first: 0,
    stride: 24,
};

/// Bytes of the handle of `ranges` ranges.
pub const fn remote_key_len(ranges: usize) -> usize {
    LAYOUT.handle_len(ranges)
}

/// One range of a registration, as peers see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyRange {
    /// Its start.
    pub base: u64,
    /// Its length.
    pub len: u64,
    /// The remote key of its memory region.
    pub rkey: u32,
}

/// What a peer needs to reach a registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteKey {
    /// Access granted.
    pub access: Access,
    /// The registration's key.
    pub key: u64,
    ranges: InlineRanges<KeyRange>,
}

impl RemoteKey {
    /// The key of `ranges` (1 to [`MAX_RANGES`]).
    pub fn new(access: Access, key: u64, ranges: &[KeyRange]) -> RemoteKey {
        RemoteKey {
            access,
            key,
            ranges: InlineRanges::new(ranges),
        }
    }

    /// The ranges.
    pub fn ranges(&self) -> &[KeyRange] {
        &self.ranges
    }

    /// Its bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; remote_key_len(self.ranges.len())];
        b[20..24].copy_from_slice(&self.access.bits().to_le_bytes());
        b[24..28].copy_from_slice(&(self.ranges.len() as u32).to_le_bytes());
        b[32..40].copy_from_slice(&self.key.to_le_bytes());
        for (i, r) in self.ranges().iter().enumerate() {
            let at = LAYOUT.range_at(i);
            b[at..at + 8].copy_from_slice(&r.base.to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&r.len.to_le_bytes());
            b[at + 16..at + 20].copy_from_slice(&r.rkey.to_le_bytes());
        }
        b
    }

    /// From a peer's handle bytes: [`Error::MalformedHandle`] (naming the length)
    /// unless they are exactly a key of 1 to [`MAX_RANGES`] ranges with known access
    /// bits and zero reserved fields.
    #[inline]
    pub fn from_bytes(b: &[u8]) -> Result<RemoteKey> {
        let malformed = Error::MalformedHandle(b.len());
        if b.len() < REMOTE_KEY_LEN {
            return Err(malformed);
        }
        let count = u32_at(b, 24) as usize;
        if !(1..=MAX_RANGES).contains(&count) || b.len() != remote_key_len(count) {
            return Err(malformed);
        }
        let Some(access) = Access::from_bits(u32_at(b, 20)) else {
            return Err(malformed);
        };
        if u32_at(b, 28) != 0 {
            return Err(malformed);
        }
        if (1..count).any(|i| u32_at(b, LAYOUT.range_at(i) + 20) != 0) {
            return Err(malformed);
        }
        let ranges = InlineRanges::from_fn(count, |i| {
            let at = LAYOUT.range_at(i);
            KeyRange {
                base: u64_at(b, at),
                len: u64_at(b, at + 8),
                rkey: u32_at(b, at + 16),
            }
        });
        Ok(RemoteKey {
            access,
            key: u64_at(b, 32),
            ranges,
        })
    }

    /// Check that `[addr, addr+len)` lies inside one range and that the access `needs`
    /// is granted; that range's remote key.
    #[inline]
    pub fn check(&self, addr: u64, len: usize, needs: Access) -> Result<u32> {
        // A length past usize (a peer's claim on a 32-bit host) covers all of it.
        let ranges = self
            .ranges()
            .iter()
            .map(|r| (r.base, usize::try_from(r.len).unwrap_or(usize::MAX)));
        let i = find_range("remote", ranges, addr, len)?;
        if !self.access.contains(needs) {
            return Err(Error::AccessDenied {
                side: "remote",
                has: self.access,
                needs,
            });
        }
        Ok(self.ranges[i].rkey)
    }
}

#[cfg(test)]
mod tests {
    //! Remote keys as a peer may send them, fuzzed: nothing panics, a malformed key is
    //! `MalformedHandle`, valid ones round-trip, and checks agree with exact arithmetic.
    //! Longer runs: `PROPTEST_CASES=100000 cargo test -p rbtl-openib remote_key`.

    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Words where arithmetic goes wrong: small, near a power of two, near the top.
    fn word() -> impl Strategy<Value = u64> {
        prop_oneof![
            0..64u64,
            (4096 - 16)..(4096 + 16u64),
            (u64::from(u32::MAX) - 8)..(u64::from(u32::MAX) + 8),
            (u64::MAX / 2 - 8)..(u64::MAX / 2 + 8),
            (u64::MAX - 64)..=u64::MAX,
            any::<u64>(),
        ]
    }

    fn key_range() -> impl Strategy<Value = KeyRange> {
        (word(), word(), any::<u32>()).prop_map(|(base, len, rkey)| KeyRange { base, len, rkey })
    }

    fn one(base: u64, len: u64, rkey: u32, access: Access) -> RemoteKey {
        RemoteKey::new(access, u64::from(rkey), &[KeyRange { base, len, rkey }])
    }

    #[test]
    fn keys_check_bounds_and_access_and_name_the_range_s_rkey() {
        let k = one(4096, 100, 7, Access::REMOTE_READ);
        assert_eq!(RemoteKey::from_bytes(&k.to_bytes()).unwrap(), k);
        assert_eq!(k.check(4096, 100, Access::REMOTE_READ).unwrap(), 7);
        assert!(matches!(
            k.check(4100, 100, Access::REMOTE_READ),
            Err(Error::OutOfRange { side: "remote", .. })
        ));
        assert!(matches!(
            k.check(4096, 8, Access::REMOTE_WRITE),
            Err(Error::AccessDenied { side: "remote", .. })
        ));
        assert!(matches!(
            RemoteKey::from_bytes(&[0; 5]),
            Err(Error::MalformedHandle(5))
        ));
        let ranges = [
            KeyRange {
                base: 0x1000,
                len: 64,
                rkey: 1,
            },
            KeyRange {
                base: 0x1040,
                len: 64,
                rkey: 2,
            },
            KeyRange {
                base: 0x3000,
                len: 8,
                rkey: 3,
            },
        ];
        let v = RemoteKey::new(Access::REMOTE_WRITE, 1, &ranges);
        assert_eq!(v.to_bytes().len(), remote_key_len(3));
        assert_eq!(RemoteKey::from_bytes(&v.to_bytes()).unwrap(), v);
        assert_eq!(v.check(0x1040, 64, Access::REMOTE_WRITE).unwrap(), 2);
        assert_eq!(v.check(0x3000, 8, Access::REMOTE_WRITE).unwrap(), 3);
        for (addr, len) in [(0x1038, 16), (0x2000, 8), (0x3004, 8)] {
            assert!(
                matches!(
                    v.check(addr, len, Access::REMOTE_WRITE),
                    Err(Error::OutOfRange { .. })
                ),
                "{addr:#x}+{len}: across touching ranges, in a gap, past the last"
            );
        }
    }

    proptest! {
        #![proptest_config(rbtl_testkit::fuzz::config(2000))]

        #[test]
        fn remote_keys_round_trip(
            ranges in vec(key_range(), 1..=MAX_RANGES),
            key in any::<u64>(),
            bits in 0..32u32,
        ) {
            let k = RemoteKey::new(Access::from_bits_truncate(bits), key, &ranges);
            prop_assert_eq!(RemoteKey::from_bytes(&k.to_bytes()).unwrap(), k);
        }

        /// Handle bytes of any length: a key only from exactly a key's length with known
        /// access bits, else `MalformedHandle` naming the length.
        #[test]
        fn random_handle_bytes_are_a_key_or_malformed(bytes in vec(any::<u8>(), 0..240)) {
            match RemoteKey::from_bytes(&bytes) {
                Ok(k) => {
                    prop_assert_eq!(bytes.len(), remote_key_len(k.ranges().len()));
                    prop_assert_eq!(&k.to_bytes()[..], &bytes[..]);
                }
                Err(Error::MalformedHandle(n)) => prop_assert_eq!(n, bytes.len()),
                Err(e) => prop_assert!(false, "unexpected error {}", e),
            }
        }

        /// A valid key cut short or extended, or with access bits no registration has.
        #[test]
        fn truncated_extended_or_unknown_access_keys_are_malformed(
            ranges in vec(key_range(), 1..=3),
            cut in any::<prop::sample::Index>(),
            extra in vec(any::<u8>(), 1..16),
            unknown in 5..32u32,
        ) {
            let k = RemoteKey::new(Access::all(), 9, &ranges).to_bytes();
            let cut = cut.index(k.len());
            let short = RemoteKey::from_bytes(&k[..cut]);
            prop_assert!(
                matches!(short, Err(Error::MalformedHandle(n)) if n == cut),
                "{:?}",
                short
            );
            let mut long = k.clone();
            long.extend_from_slice(&extra);
            let long_key = RemoteKey::from_bytes(&long);
            prop_assert!(
                matches!(long_key, Err(Error::MalformedHandle(n)) if n == long.len()),
                "{:?}",
                long_key
            );
            let mut odd = k.clone();
            odd[20..24].copy_from_slice(&(Access::all().bits() | 1 << unknown).to_le_bytes());
            let odd_key = RemoteKey::from_bytes(&odd);
            prop_assert!(
                matches!(odd_key, Err(Error::MalformedHandle(n)) if n == k.len()),
                "{:?}",
                odd_key
            );
        }

        /// `check` against exact arithmetic: in range (without wrapping, the key's own
        /// range included) and granted, or a typed refusal saying which.
        #[test]
        fn key_checks_match_exact_arithmetic(
            base in word(),
            len in word(),
            granted in 0..32u32,
            addr in word(),
            near in prop::option::of(0..8192u64),
            size in word(),
            needs in 0..32u32,
        ) {
            // Half the time an address at or just past the key's base.
            let addr = near.map_or(addr, |off| base.wrapping_add(off));
            let k = one(base, len, 1, Access::from_bits_truncate(granted));
            let size = size as usize;
            let needs = Access::from_bits_truncate(needs);
            let (end, limit) = (u128::from(addr) + size as u128, u128::from(base) + u128::from(len));
            let fits_u64 = |x: u128| x <= u128::from(u64::MAX);
            let inside = addr >= base && end <= limit && fits_u64(end) && fits_u64(limit);
            match k.check(addr, size, needs) {
                Ok(rkey) => prop_assert!(inside && k.access.contains(needs) && rkey == 1),
                Err(Error::OutOfRange { side: "remote", .. }) => prop_assert!(!inside),
                Err(Error::AccessDenied { side: "remote", .. }) => {
                    prop_assert!(inside && !k.access.contains(needs))
                }
                Err(e) => prop_assert!(false, "unexpected error {}", e),
            }
        }

        /// A key whose range wraps around the top of the address space grants nothing.
        #[test]
        fn keys_whose_range_wraps_grant_nothing(
            base in (u64::MAX - 4096)..=u64::MAX,
            len in 4097u64..=u64::MAX,
            offset in 0..4096u64,
            size in 0..64usize,
        ) {
            let k = one(base, len, 1, Access::all());
            let addr = base.saturating_add(offset);
            let checked = k.check(addr, size, Access::REMOTE_READ);
            prop_assert!(matches!(checked, Err(Error::OutOfRange { .. })), "{:?}", checked);
        }
    }
}
