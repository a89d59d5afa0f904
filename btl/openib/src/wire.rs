//! What travels: the trailer every send carries after its payload, and the remote
//! handle of a registration.
//!
//! A send fragment is `[payload][segment lengths][trailer]`: the lengths of all but the
//! last segment (u32 each, only when there are several), then 8 bytes: tag, flags,
//! segment count, returned reserved credits, returned credits (u16), padding. A trailer
//! rather than a header lets the payload start at the fragment's start, where the
//! descriptor put it.

use rbtl_btl::{check_range, Access, Error, Result, MAX_SEGMENTS};

/// Bytes of the trailer.
pub const TRAILER: usize = 8;
/// Room a fragment needs beyond its payload.
pub const FRAG_EXTRA: usize = TRAILER + 4 * (MAX_SEGMENTS - 1);

/// The message carries only returned credits (no payload, no tag).
pub const CREDIT_ONLY: u8 = 1;

/// The trailer of a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// Active-message tag.
    pub tag: u8,
    /// [`CREDIT_ONLY`] or 0.
    pub flags: u8,
    /// Segments of the payload (at least 1).
    pub nseg: u8,
    /// Reserved (credit-message) receive buffers returned to the sender.
    pub rsv: u8,
    /// Receive buffers returned to the sender.
    pub credits: u16,
}

impl Trailer {
    /// Its bytes.
    pub fn to_bytes(self) -> [u8; TRAILER] {
        let c = self.credits.to_le_bytes();
        [self.tag, self.flags, self.nseg, self.rsv, c[0], c[1], 0, 0]
    }

    /// From the last [`TRAILER`] bytes of a received fragment.
    pub fn from_bytes(b: &[u8; TRAILER]) -> Trailer {
        Trailer {
            tag: b[0],
            flags: b[1],
            nseg: b[2],
            rsv: b[3],
            credits: u16::from_le_bytes([b[4], b[5]]),
        }
    }
}

/// Write the segment table and trailer after `lens`' payload into `spare`; the bytes
/// written.
pub fn write_trailer(spare: &mut [u8], lens: &[usize], t: Trailer) -> usize {
    let table = &lens[..lens.len() - 1];
    let mut at = 0;
    for l in table {
        spare[at..at + 4].copy_from_slice(&(*l as u32).to_le_bytes());
        at += 4;
    }
    spare[at..at + TRAILER].copy_from_slice(&t.to_bytes());
    at + TRAILER
}

/// Split a received fragment of `len` bytes into its trailer and segment lengths
/// (into `lens`, returning how many), checking they fit: `None` for a fragment no
/// sender writes (too short, a segment count outside 1..=[`MAX_SEGMENTS`], lengths
/// past its payload).
pub fn parse(bytes: &[u8], lens: &mut [usize; MAX_SEGMENTS]) -> Option<(Trailer, usize)> {
    let tail: &[u8; TRAILER] = bytes
        .get(bytes.len().checked_sub(TRAILER)?..)?
        .try_into()
        .ok()?;
    let t = Trailer::from_bytes(tail);
    let nseg = usize::from(t.nseg);
    if !(1..=MAX_SEGMENTS).contains(&nseg) {
        return None;
    }
    let table = 4 * (nseg - 1);
    let payload = bytes.len().checked_sub(TRAILER + table)?;
    let mut sum = 0;
    for (i, l) in lens[..nseg - 1].iter_mut().enumerate() {
        let at = payload + 4 * i;
        *l = u32::from_le_bytes(bytes[at..at + 4].try_into().ok()?) as usize;
        sum += *l;
    }
    lens[nseg - 1] = payload.checked_sub(sum)?;
    Some((t, nseg))
}

/// The bytes of a registration a peer needs: where, how long, the remote key, and the
/// access granted (checked by the initiator, so refusals are errors, not broken
/// connections; the device checks the key and bounds again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteKey {
    /// Start of the registered range.
    pub base: u64,
    /// Its length.
    pub len: u64,
    /// The memory region's remote key.
    pub rkey: u32,
    /// Access granted.
    pub access: Access,
}

/// Bytes of an encoded [`RemoteKey`].
pub const REMOTE_KEY_LEN: usize = 24;

impl RemoteKey {
    /// Its bytes.
    pub fn to_bytes(self) -> [u8; REMOTE_KEY_LEN] {
        let mut b = [0; REMOTE_KEY_LEN];
        b[0..8].copy_from_slice(&self.base.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b[20..24].copy_from_slice(&self.access.bits().to_le_bytes());
        b
    }

    /// From a peer's handle bytes.
    #[inline]
    pub fn from_bytes(b: &[u8]) -> Result<RemoteKey> {
        let b: &[u8; REMOTE_KEY_LEN] = b.try_into().map_err(|_| Error::MalformedHandle(b.len()))?;
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Ok(RemoteKey {
            base: u64_at(0),
            len: u64_at(8),
            rkey: u32_at(16),
            access: match Access::from_bits(u32_at(20)) {
                Some(access) => access,
                None => return Err(Error::MalformedHandle(REMOTE_KEY_LEN)),
            },
        })
    }

    /// Check that `[addr, addr+len)` lies inside and that the access `needs` is granted.
    pub fn check(&self, addr: u64, len: usize, needs: Access) -> Result<()> {
        check_range("remote", addr, len, self.base, self.len as usize)?;
        if !self.access.contains(needs) {
            return Err(Error::AccessDenied {
                side: "remote",
                has: self.access,
                needs,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_and_segments_round_trip() {
        let lens = [3usize, 0, 5];
        let mut frag = [0u8; 8 + FRAG_EXTRA];
        let t = Trailer {
            tag: 0x41,
            flags: 0,
            nseg: 3,
            rsv: 1,
            credits: 300,
        };
        let n = write_trailer(&mut frag[8..], &lens, t);
        let mut out = [0; MAX_SEGMENTS];
        let (back, nseg) = parse(&frag[..8 + n], &mut out).unwrap();
        assert_eq!((back, nseg), (t, 3));
        assert_eq!(&out[..3], &lens);
        assert!(parse(&[1, 2, 3], &mut out).is_none());
    }

    #[test]
    fn remote_keys_check_bounds_and_access() {
        let k = RemoteKey {
            base: 4096,
            len: 100,
            rkey: 7,
            access: Access::REMOTE_READ,
        };
        assert_eq!(RemoteKey::from_bytes(&k.to_bytes()).unwrap(), k);
        assert!(k.check(4096, 100, Access::REMOTE_READ).is_ok());
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
    }

    #[test]
    fn fragments_with_a_segment_count_no_sender_writes_are_refused() {
        let mut out = [0; MAX_SEGMENTS];
        for nseg in [0u8, MAX_SEGMENTS as u8 + 1, u8::MAX] {
            let t = Trailer {
                tag: 0x41,
                flags: 0,
                nseg,
                rsv: 0,
                credits: 0,
            };
            // Room for the largest table, so only the count is wrong.
            let mut frag = vec![0u8; 64 + 4 * (MAX_SEGMENTS - 1)];
            frag.extend_from_slice(&t.to_bytes());
            assert_eq!(parse(&frag, &mut out), None, "segment count {nseg}");
        }
    }

    // ---------------------------------------------------------------------------
    // Fuzzing what a peer sends (`proptest`, random and structured-but-wrong inputs):
    // nothing panics, nothing is read outside the fragment, a malformed input gets
    // `None` or a typed error, and valid values round-trip. Longer runs:
    // `PROPTEST_CASES=100000 cargo test -p rbtl-openib wire`.

    use proptest::collection::vec;
    use proptest::prelude::*;

    /// `cases` cases, unless `PROPTEST_CASES` says otherwise.
    fn config(cases: u32) -> ProptestConfig {
        let default = ProptestConfig::default();
        match std::env::var_os("PROPTEST_CASES") {
            Some(_) => default,
            None => ProptestConfig { cases, ..default },
        }
    }

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

    /// Segment lengths as a table entry may hold them: small, or huge.
    fn seg_len() -> impl Strategy<Value = u32> {
        prop_oneof![0..64u32, (u32::MAX - 8)..=u32::MAX, any::<u32>()]
    }

    fn trailer() -> impl Strategy<Value = Trailer> {
        (
            any::<u8>(),
            any::<u8>(),
            any::<u8>(),
            any::<u8>(),
            any::<u16>(),
        )
            .prop_map(|(tag, flags, nseg, rsv, credits)| Trailer {
                tag,
                flags,
                nseg,
                rsv,
                credits,
            })
    }

    /// A fragment as a sender builds it: payload of segments `lens` (filled with a
    /// pattern), their table and the trailer `t` (whose `nseg` is set to match).
    fn fragment(lens: &[usize], t: Trailer) -> (Vec<u8>, Trailer) {
        let t = Trailer {
            nseg: lens.len() as u8,
            ..t
        };
        let payload: usize = lens.iter().sum();
        let mut frag: Vec<u8> = (0..payload).map(|i| (i * 7 + 1) as u8).collect();
        frag.resize(payload + FRAG_EXTRA, 0);
        let n = write_trailer(&mut frag[payload..], lens, t);
        frag.truncate(payload + n);
        (frag, t)
    }

    /// What the receive path relies on from a parse of `bytes`: the trailer is its last
    /// bytes, the count is one a sender can write, and payload, table and trailer add
    /// up to the fragment exactly (so every segment lies inside it).
    fn assert_consistent(
        bytes: &[u8],
        parsed: Option<(Trailer, usize)>,
        lens: &[usize; MAX_SEGMENTS],
    ) -> std::result::Result<(), TestCaseError> {
        let Some((t, nseg)) = parsed else {
            return Ok(());
        };
        prop_assert!((1..=MAX_SEGMENTS).contains(&nseg), "nseg {}", nseg);
        prop_assert_eq!(usize::from(t.nseg), nseg);
        let tail: &[u8; TRAILER] = bytes[bytes.len() - TRAILER..].try_into().unwrap();
        prop_assert_eq!(t, Trailer::from_bytes(tail));
        let payload: u128 = lens[..nseg].iter().map(|&l| l as u128).sum();
        prop_assert_eq!(
            payload + (4 * (nseg - 1) + TRAILER) as u128,
            bytes.len() as u128
        );
        // Cut as the receive path cuts it: in bounds by the equality above.
        let mut at = 0;
        for &l in &lens[..nseg] {
            prop_assert!(bytes.get(at..at + l).is_some());
            at += l;
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config(2000))]

        #[test]
        fn trailers_round_trip(t in trailer()) {
            prop_assert_eq!(Trailer::from_bytes(&t.to_bytes()), t);
        }

        #[test]
        fn any_eight_bytes_are_a_trailer_whose_padding_is_ignored(b in any::<[u8; TRAILER]>()) {
            let mut zeroed = b;
            zeroed[6..].fill(0);
            prop_assert_eq!(Trailer::from_bytes(&b).to_bytes(), zeroed);
        }

        #[test]
        fn random_bytes_never_panic_and_parse_only_within_the_fragment(
            bytes in vec(any::<u8>(), 0..200),
        ) {
            let mut lens = [usize::MAX; MAX_SEGMENTS];
            let parsed = parse(&bytes, &mut lens);
            if bytes.len() < TRAILER {
                prop_assert!(parsed.is_none());
            }
            assert_consistent(&bytes, parsed, &lens)?;
        }

        #[test]
        fn valid_fragments_round_trip(
            lens in vec(0..200usize, 1..=MAX_SEGMENTS),
            t in trailer(),
        ) {
            let (frag, t) = fragment(&lens, t);
            let mut out = [usize::MAX; MAX_SEGMENTS];
            prop_assert_eq!(parse(&frag, &mut out), Some((t, lens.len())));
            prop_assert_eq!(&out[..lens.len()], &lens[..]);
        }

        /// A valid fragment whose trailer states another segment count: one no sender
        /// writes (0, above MAX_SEGMENTS) is refused; another one reads the bytes
        /// before the trailer as a table, which then must fit the fragment.
        #[test]
        fn a_wrong_segment_count_is_refused_or_stays_inside(
            lens in vec(0..64usize, 1..=MAX_SEGMENTS),
            t in trailer(),
            nseg in prop_oneof![Just(0u8), (MAX_SEGMENTS as u8 + 1)..=u8::MAX, 1..=MAX_SEGMENTS as u8],
        ) {
            let (mut frag, _) = fragment(&lens, t);
            let at = frag.len() - TRAILER + 2;
            frag[at] = nseg;
            let mut out = [usize::MAX; MAX_SEGMENTS];
            let parsed = parse(&frag, &mut out);
            if nseg == 0 || usize::from(nseg) > MAX_SEGMENTS {
                prop_assert!(parsed.is_none(), "segment count {} taken: {:?}", nseg, parsed);
            }
            assert_consistent(&frag, parsed, &out)?;
        }

        /// A valid trailer over a table of arbitrary lengths (huge ones, ones summing
        /// past the payload): taken exactly when the stated lengths fit the payload.
        #[test]
        fn segment_lengths_past_the_payload_are_refused(
            table in vec(seg_len(), 1..MAX_SEGMENTS),
            payload in 0..300usize,
            t in trailer(),
        ) {
            let nseg = table.len() + 1;
            let mut frag = vec![0xA5u8; payload];
            for l in &table {
                frag.extend_from_slice(&l.to_le_bytes());
            }
            frag.extend_from_slice(&Trailer { nseg: nseg as u8, ..t }.to_bytes());
            let mut out = [usize::MAX; MAX_SEGMENTS];
            let parsed = parse(&frag, &mut out);
            let stated: u128 = table.iter().map(|&l| u128::from(l)).sum();
            if stated > payload as u128 {
                prop_assert!(parsed.is_none(), "{:?} over {} bytes taken", table, payload);
            } else {
                prop_assert!(parsed.is_some());
                let want: Vec<usize> = table.iter().map(|&l| l as usize).collect();
                prop_assert_eq!(&out[..nseg - 1], &want[..]);
                prop_assert_eq!(out[nseg - 1] as u128, payload as u128 - stated);
            }
            assert_consistent(&frag, parsed, &out)?;
        }

        /// Cut short or with bytes appended, a valid fragment parses only as something
        /// inside what was received.
        #[test]
        fn truncated_or_extended_fragments_stay_inside(
            lens in vec(0..64usize, 1..=MAX_SEGMENTS),
            t in trailer(),
            cut in any::<prop::sample::Index>(),
            extra in vec(any::<u8>(), 0..24),
        ) {
            let (frag, _) = fragment(&lens, t);
            let mut out = [usize::MAX; MAX_SEGMENTS];
            let short = &frag[..cut.index(frag.len() + 1)];
            assert_consistent(short, parse(short, &mut out), &out)?;
            let mut long = frag.clone();
            long.extend_from_slice(&extra);
            assert_consistent(&long, parse(&long, &mut out), &out)?;
        }

        #[test]
        fn remote_keys_round_trip(
            base in word(),
            len in word(),
            rkey in any::<u32>(),
            bits in 0..32u32,
        ) {
            let k = RemoteKey { base, len, rkey, access: Access::from_bits_truncate(bits) };
            prop_assert_eq!(RemoteKey::from_bytes(&k.to_bytes()).unwrap(), k);
        }

        /// Handle bytes of any length: a key only from exactly its length with known
        /// access bits, else `MalformedHandle` naming the length.
        #[test]
        fn random_handle_bytes_are_a_key_or_malformed(bytes in vec(any::<u8>(), 0..64)) {
            match RemoteKey::from_bytes(&bytes) {
                Ok(k) => {
                    prop_assert_eq!(bytes.len(), REMOTE_KEY_LEN);
                    prop_assert_eq!(&k.to_bytes()[..], &bytes[..]);
                }
                Err(Error::MalformedHandle(n)) => prop_assert_eq!(n, bytes.len()),
                Err(e) => prop_assert!(false, "unexpected error {}", e),
            }
        }

        /// A valid key cut short or extended, or with access bits no registration has.
        #[test]
        fn truncated_extended_or_unknown_access_keys_are_malformed(
            base in word(),
            len in word(),
            rkey in any::<u32>(),
            cut in 0..REMOTE_KEY_LEN,
            extra in vec(any::<u8>(), 1..16),
            unknown in 5..32u32,
        ) {
            let k = RemoteKey { base, len, rkey, access: Access::all() }.to_bytes();
            let short = RemoteKey::from_bytes(&k[..cut]);
            prop_assert!(
                matches!(short, Err(Error::MalformedHandle(n)) if n == cut),
                "{:?}",
                short
            );
            let mut long = k.to_vec();
            long.extend_from_slice(&extra);
            let long_key = RemoteKey::from_bytes(&long);
            prop_assert!(
                matches!(long_key, Err(Error::MalformedHandle(n)) if n == long.len()),
                "{:?}",
                long_key
            );
            let mut odd = k;
            odd[20..24].copy_from_slice(&(Access::all().bits() | 1 << unknown).to_le_bytes());
            let odd_key = RemoteKey::from_bytes(&odd);
            prop_assert!(
                matches!(odd_key, Err(Error::MalformedHandle(REMOTE_KEY_LEN))),
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
            let k = RemoteKey {
                base,
                len,
                rkey: 1,
                access: Access::from_bits_truncate(granted),
            };
            let size = size as usize;
            let needs = Access::from_bits_truncate(needs);
            let (end, limit) = (u128::from(addr) + size as u128, u128::from(base) + u128::from(len));
            let fits_u64 = |x: u128| x <= u128::from(u64::MAX);
            let inside = addr >= base && end <= limit && fits_u64(end) && fits_u64(limit);
            match k.check(addr, size, needs) {
                Ok(()) => prop_assert!(inside && k.access.contains(needs)),
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
            let k = RemoteKey { base, len, rkey: 1, access: Access::all() };
            let addr = base.saturating_add(offset);
            let checked = k.check(addr, size, Access::REMOTE_READ);
            prop_assert!(matches!(checked, Err(Error::OutOfRange { .. })), "{:?}", checked);
        }
    }
}
