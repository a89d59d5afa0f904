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
/// (into `lens`, returning how many), checking they fit.
pub fn parse(bytes: &[u8], lens: &mut [usize; MAX_SEGMENTS]) -> Option<(Trailer, usize)> {
    let tail: &[u8; TRAILER] = bytes
        .get(bytes.len().checked_sub(TRAILER)?..)?
        .try_into()
        .ok()?;
    let t = Trailer::from_bytes(tail);
    let nseg = usize::from(t.nseg).clamp(1, MAX_SEGMENTS);
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
}
