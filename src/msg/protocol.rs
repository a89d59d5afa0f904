//! The message layer's wire format: three active-message tags in the BTL's PML range.
//!
//! | tag | message | body |
//! |---|---|---|
//! | `PML` | eager | header (kind-free: user tag, i32) then the payload |
//! | `PML+1` | rendezvous request (RTS) | user tag, length, sender's request, address, registration handle |
//! | `PML+2` | finish (FIN) | sender's request, status |

use rbtl_btl::{RemoteHandle, Tag};

/// Eager message: the user tag then the payload.
pub const EAGER: Tag = Tag(Tag::PML.0);
/// Rendezvous request.
pub const RTS: Tag = Tag(Tag::PML.0 + 1);
/// Rendezvous finish.
pub const FIN: Tag = Tag(Tag::PML.0 + 2);

/// Bytes of the eager header.
pub const EAGER_HEADER: usize = 4;

/// A rendezvous request as received.
#[derive(Clone, Debug)]
pub struct Rts {
    /// User tag.
    pub tag: i32,
    /// Message length.
    pub len: usize,
    /// The sender's request id, echoed in FIN.
    pub sreq: u64,
    /// Address of the sender's buffer.
    pub addr: u64,
    /// Registration of the sender's buffer.
    pub handle: RemoteHandle,
}

impl Rts {
    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(28 + self.handle.as_bytes().len());
        v.extend_from_slice(&self.tag.to_le_bytes());
        v.extend_from_slice(&(self.len as u64).to_le_bytes());
        v.extend_from_slice(&self.sreq.to_le_bytes());
        v.extend_from_slice(&self.addr.to_le_bytes());
        v.extend_from_slice(self.handle.as_bytes());
        v
    }

    /// Decode; `None` if malformed.
    pub fn decode(b: &[u8]) -> Option<Rts> {
        if b.len() < 28 {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(Rts {
            tag: i32::from_le_bytes(b[0..4].try_into().ok()?),
            len: usize::try_from(u64_at(4)).ok()?,
            sreq: u64_at(12),
            addr: u64_at(20),
            handle: RemoteHandle::from_bytes(&b[28..]).ok()?,
        })
    }
}

/// Encode a FIN.
pub fn fin(sreq: u64, ok: bool) -> [u8; 9] {
    let mut b = [0u8; 9];
    b[..8].copy_from_slice(&sreq.to_le_bytes());
    b[8] = u8::from(ok);
    b
}

/// Decode a FIN: the sender's request id and whether the receiver took the data.
pub fn decode_fin(b: &[u8]) -> Option<(u64, bool)> {
    Some((
        u64::from_le_bytes(b.get(..8)?.try_into().ok()?),
        *b.get(8)? != 0,
    ))
}
