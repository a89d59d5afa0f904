//! What travels: the trailer every send carries after its payload (the remote handle
//! of a registration is in `remote_key`).
//!
//! A send fragment is `[payload][segment lengths][trailer]`: the lengths of all but the
//! last segment (u32 each, only when there are several), then 8 bytes: tag, flags,
//! segment count, returned reserved credits, returned credits (u16), padding. A trailer
//! rather than a header lets the payload start at the fragment's start, where the
//! descriptor put it.

use rbtl_btl::MAX_SEGMENTS;

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
        #![proptest_config(rbtl_testkit::fuzz::config(2000))]

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
    }
}
