//! The message layer's wire format: nine active-message tags in the BTL's PML range.
//!
//! | tag | message | body |
//! |---|---|---|
//! | `PML` | eager | header (user tag, i32; context, u32) then the payload |
//! | `PML+1` | rendezvous request (RTS) | user tag, context, length, sender's request, address, whether a registration handle follows (u8), the handle |
//! | `PML+2` | finish (FIN) | sender's request, status ([`Fin`]) |
//! | `PML+3` | synchronous eager | header (user tag, context, sender's request) then the payload; answered by a FIN once matched |
//! | `PML+4` | registration (HANDLE), the answer to a FIN asking for one | sender's request, whether a handle follows (u8), the handle |
//! | `PML+5` | part asked of the sender (PART) | sender's request, receiver's request, receiver's buffer address, offset, length |
//! | `PML+6` | part written (PART_DONE) | receiver's request, whether it landed (u8) |
//! | `PML+7` | a send taken back (CANCEL) | sender's request |
//! | `PML+8` | the answer to a CANCEL (CANCELLED) | sender's request, whether the message was dropped (u8) |
//!
//! An RTS's presence byte is 0 (no handle), 1 (a handle follows), 2 (no handle, and
//! the sender writes a part of the message into the receiver's buffer when asked:
//! [`super::split`]) or 3 (a handle follows, and the sender writes a part when asked).

use rbtl_btl::{RemoteHandle, Tag};

/// Eager message: the user tag and context, then the payload.
pub const EAGER: Tag = Tag(Tag::PML.0);
/// Rendezvous request.
pub const RTS: Tag = Tag(Tag::PML.0 + 1);
/// Rendezvous finish (and the answer to a synchronous eager message).
pub const FIN: Tag = Tag(Tag::PML.0 + 2);
/// Synchronous eager message: its sender waits for the FIN that says it was matched.
pub const EAGER_SYNC: Tag = Tag(Tag::PML.0 + 3);
/// The registration of a rendezvous buffer first named by its address alone, which
/// the receiver's transport could not read ([`Fin::Register`]).
pub const HANDLE: Tag = Tag(Tag::PML.0 + 4);
/// A part of a rendezvous message the receiver asks its sender to write ([`Part`]).
pub const PART: Tag = Tag(Tag::PML.0 + 5);
/// The sender wrote the part asked of it (or could not).
pub const PART_DONE: Tag = Tag(Tag::PML.0 + 6);

/// The sender asks the receiver to drop a message no receive has matched yet
/// ([`super::cancel`]).
pub const CANCEL: Tag = Tag(Tag::PML.0 + 7);
/// The receiver's answer to a CANCEL.
pub const CANCELLED: Tag = Tag(Tag::PML.0 + 8);

/// Bytes of the eager header.
pub const EAGER_HEADER: usize = 8;
/// Bytes of the synchronous eager header.
pub const SYNC_HEADER: usize = 16;

/// The eager header of a message with `tag` in context `ctx`.
#[inline(always)]
pub fn eager_header(tag: i32, ctx: u32) -> [u8; EAGER_HEADER] {
    let mut h = [0u8; EAGER_HEADER];
    h[..4].copy_from_slice(&tag.to_le_bytes());
    h[4..].copy_from_slice(&ctx.to_le_bytes());
    h
}

/// Tag and context of an eager header.
#[inline(always)]
pub fn decode_eager_header(h: &[u8; EAGER_HEADER]) -> (i32, u32) {
    let tag = i32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let ctx = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    (tag, ctx)
}

/// The header of a synchronous eager message from request `sreq`.
pub fn sync_header(tag: i32, ctx: u32, sreq: u64) -> [u8; SYNC_HEADER] {
    let mut h = [0u8; SYNC_HEADER];
    h[..EAGER_HEADER].copy_from_slice(&eager_header(tag, ctx));
    h[EAGER_HEADER..].copy_from_slice(&sreq.to_le_bytes());
    h
}

/// Tag, context and sender's request of a synchronous eager header; `None` if short.
pub fn decode_sync_header(h: &[u8]) -> Option<(i32, u32, u64)> {
    let head: &[u8; EAGER_HEADER] = h.get(..EAGER_HEADER)?.try_into().ok()?;
    let (tag, ctx) = decode_eager_header(head);
    let sreq = u64::from_le_bytes(h.get(EAGER_HEADER..SYNC_HEADER)?.try_into().ok()?);
    Some((tag, ctx, sreq))
}

/// A rendezvous request as received.
#[derive(Clone, Debug)]
pub struct Rts {
    /// User tag.
    pub tag: i32,
    /// Context (the communicator it belongs to).
    pub ctx: u32,
    /// Message length.
    pub len: usize,
    /// The sender's request id, echoed in FIN.
    pub sreq: u64,
    /// Address of the sender's buffer.
    pub addr: u64,
    /// Registration of the sender's buffer; none where the receiver's transport reads
    /// it by address alone ([`BtlFlags::UNREGISTERED_REMOTE`](rbtl_btl::BtlFlags::UNREGISTERED_REMOTE)).
    pub handle: Option<RemoteHandle>,
    /// The sender writes a part into the receiver's buffer when asked
    /// ([`super::split`]); with a handle too, the receiver may read the whole instead.
    pub split: bool,
}

/// Bytes of an RTS before its handle.
const RTS_FIXED: usize = 33;

impl Rts {
    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let handle = self.handle.as_ref().map_or(&[][..], RemoteHandle::as_bytes);
        let mut v = Vec::with_capacity(RTS_FIXED + handle.len());
        v.extend_from_slice(&self.tag.to_le_bytes());
        v.extend_from_slice(&self.ctx.to_le_bytes());
        v.extend_from_slice(&(self.len as u64).to_le_bytes());
        v.extend_from_slice(&self.sreq.to_le_bytes());
        v.extend_from_slice(&self.addr.to_le_bytes());
        v.push(match (&self.handle, self.split) {
            (None, false) => 0,
            (Some(_), false) => 1,
            (None, true) => 2,
            (Some(_), true) => 3,
        });
        v.extend_from_slice(handle);
        v
    }

    /// Decode; `None` if malformed.
    pub fn decode(b: &[u8]) -> Option<Rts> {
        if b.len() < RTS_FIXED {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(Rts {
            tag: i32::from_le_bytes(b[0..4].try_into().ok()?),
            ctx: u32::from_le_bytes(b[4..8].try_into().ok()?),
            len: usize::try_from(u64_at(8)).ok()?,
            sreq: u64_at(16),
            addr: u64_at(24),
            handle: match b[32] {
                0 | 2 if b.len() == RTS_FIXED => None,
                1 | 3 => Some(RemoteHandle::from_bytes(&b[RTS_FIXED..]).ok()?),
                _ => return None,
            },
            split: b[32] >= 2,
        })
    }
}

/// What a FIN tells the sender of a rendezvous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fin {
    /// The receive failed: the sender's request ends (successfully: its data was
    /// offered; the receiver's request carries the error).
    Failed = 0,
    /// The receiver took the data.
    Taken = 1,
    /// The receiver's transport could not read the buffer by its address alone:
    /// the sender answers with its registration (a [`HANDLE`] message).
    Register = 2,
}

impl From<bool> for Fin {
    fn from(taken: bool) -> Fin {
        if taken {
            Fin::Taken
        } else {
            Fin::Failed
        }
    }
}

/// Encode a FIN.
pub fn fin(sreq: u64, status: Fin) -> [u8; 9] {
    request_and_byte(sreq, status as u8)
}

/// A request id then one byte: the body of a FIN, a PART_DONE and a CANCELLED.
fn request_and_byte(req: u64, byte: u8) -> [u8; 9] {
    let mut b = [0u8; 9];
    b[..8].copy_from_slice(&req.to_le_bytes());
    b[8] = byte;
    b
}

/// Decode a FIN: the sender's request id and its status; `None` if malformed.
pub fn decode_fin(b: &[u8]) -> Option<(u64, Fin)> {
    let status = match *b.get(8)? {
        0 => Fin::Failed,
        1 => Fin::Taken,
        2 => Fin::Register,
        _ => return None,
    };
    Some((u64::from_le_bytes(b.get(..8)?.try_into().ok()?), status))
}

/// Encode a HANDLE: the registration of request `sreq`'s buffer, or none when the
/// sender could not register it.
pub fn handle_message(sreq: u64, handle: Option<&RemoteHandle>) -> Vec<u8> {
    let bytes = handle.map_or(&[][..], RemoteHandle::as_bytes);
    let mut b = Vec::with_capacity(9 + bytes.len());
    b.extend_from_slice(&sreq.to_le_bytes());
    b.push(u8::from(handle.is_some()));
    b.extend_from_slice(bytes);
    b
}

/// Decode a HANDLE; `None` if malformed.
pub fn decode_handle_message(b: &[u8]) -> Option<(u64, Option<RemoteHandle>)> {
    let sreq = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let handle = match *b.get(8)? {
        0 if b.len() == 9 => None,
        1 => Some(RemoteHandle::from_bytes(&b[9..]).ok()?),
        _ => return None,
    };
    Some((sreq, handle))
}

/// A part of a rendezvous message asked of its sender: write bytes `[offset, offset +
/// len)` of request `sreq`'s buffer at `addr + offset` (the receiver's buffer, named by
/// address alone), then answer with a PART_DONE naming `rreq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub sreq: u64,
    pub rreq: u64,
    pub addr: u64,
    pub offset: usize,
    pub len: usize,
}

/// Bytes of a PART.
const PART_BYTES: usize = 40;

impl Part {
    /// Encode.
    pub fn encode(&self) -> [u8; PART_BYTES] {
        let mut b = [0u8; PART_BYTES];
        let words = [
            self.sreq,
            self.rreq,
            self.addr,
            self.offset as u64,
            self.len as u64,
        ];
        for (chunk, w) in b.chunks_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Decode; `None` if malformed (a length other than its own, or a range past the
    /// end of the address space).
    pub fn decode(b: &[u8]) -> Option<Part> {
        if b.len() != PART_BYTES {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let part = Part {
            sreq: w(0),
            rreq: w(1),
            addr: w(2),
            offset: usize::try_from(w(3)).ok()?,
            len: usize::try_from(w(4)).ok()?,
        };
        let end = part.offset.checked_add(part.len)? as u64;
        part.addr.checked_add(end)?;
        Some(part)
    }
}

/// Encode a PART_DONE.
pub fn part_done(rreq: u64, landed: bool) -> [u8; 9] {
    request_and_byte(rreq, u8::from(landed))
}

/// Decode a PART_DONE: the receiver's request and whether the part landed; `None` if
/// malformed.
pub fn decode_part_done(b: &[u8]) -> Option<(u64, bool)> {
    decode_request_and_flag(b)
}

/// A request id then a byte 0 or 1; `None` if malformed.
fn decode_request_and_flag(b: &[u8]) -> Option<(u64, bool)> {
    let flag = match (b.len(), b.get(8)?) {
        (9, 0) => false,
        (9, 1) => true,
        _ => return None,
    };
    Some((u64::from_le_bytes(b[..8].try_into().ok()?), flag))
}

/// Encode a CANCEL of the sender's request `sreq`.
pub fn cancel(sreq: u64) -> [u8; 8] {
    sreq.to_le_bytes()
}

/// Decode a CANCEL: the sender's request; `None` if malformed.
pub fn decode_cancel(b: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// Encode a CANCELLED: the sender's request `sreq`, and whether its message was
/// dropped (false: a receive had matched it, and it completes as it would have).
pub fn cancelled(sreq: u64, dropped: bool) -> [u8; 9] {
    request_and_byte(sreq, u8::from(dropped))
}

/// Decode a CANCELLED; `None` if malformed.
pub fn decode_cancelled(b: &[u8]) -> Option<(u64, bool)> {
    decode_request_and_flag(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        for (tag, ctx, sreq) in [(0, 0, 0), (i32::MAX, u32::MAX, u64::MAX), (-5, 7, 1 << 40)] {
            assert_eq!(decode_eager_header(&eager_header(tag, ctx)), (tag, ctx));
            assert_eq!(
                decode_sync_header(&sync_header(tag, ctx, sreq)),
                Some((tag, ctx, sreq))
            );
        }
        assert_eq!(decode_sync_header(&[0; SYNC_HEADER - 1]), None);
    }

    #[test]
    fn rendezvous_requests_round_trip_with_and_without_a_handle() {
        let handle = RemoteHandle::from_bytes(&[9; 40]).expect("a handle");
        for (handle, split) in [(Some(handle), false), (None, false), (Some(handle), true)] {
            let rts = Rts {
                tag: -3,
                ctx: 7,
                len: 1 << 20,
                sreq: 1 << 40,
                addr: 0x7f00_1234_5000,
                handle,
                split,
            };
            let back = Rts::decode(&rts.encode()).expect("decodes");
            assert_eq!(back.split, split);
            assert_eq!((back.tag, back.ctx, back.len), (rts.tag, rts.ctx, rts.len));
            assert_eq!(
                (back.sreq, back.addr, back.handle),
                (rts.sreq, rts.addr, rts.handle)
            );
        }
        let mut without = Rts::decode(&[0; RTS_FIXED]).expect("no handle");
        assert_eq!((without.handle, without.split), (None, false));
        let mut split = [0; RTS_FIXED];
        split[32] = 2;
        let offered = Rts::decode(&split).expect("no handle, split offered");
        assert_eq!((offered.handle, offered.split), (None, true));
        assert_eq!(offered.encode(), split);
        assert!(Rts::decode(&[&split[..], &[0]].concat()).is_none());
        // Bytes after "no handle", or a presence byte other than 0 to 3: malformed.
        assert!(Rts::decode(&[0; RTS_FIXED + 1]).is_none());
        let mut bad = [0; RTS_FIXED];
        bad[32] = 4;
        assert!(Rts::decode(&bad).is_none());
        without.handle = Some(handle_of_nothing());
        assert!(Rts::decode(&without.encode())
            .expect("empty handle")
            .handle
            .is_some());
    }

    #[test]
    fn finishes_and_handles_round_trip_and_refuse_what_is_malformed() {
        for status in [Fin::Failed, Fin::Taken, Fin::Register] {
            assert_eq!(decode_fin(&fin(1 << 40, status)), Some((1 << 40, status)));
        }
        assert_eq!(decode_fin(&[0; 8]), None);
        let mut bad = fin(5, Fin::Taken);
        bad[8] = 3;
        assert_eq!(decode_fin(&bad), None);
        let handle = RemoteHandle::from_bytes(&[9; 40]).expect("a handle");
        for h in [Some(handle), None] {
            let b = handle_message(u64::MAX, h.as_ref());
            assert_eq!(decode_handle_message(&b), Some((u64::MAX, h)));
        }
        // Short, bytes after "no handle", or a presence byte other than 0 and 1:
        // malformed.
        assert_eq!(decode_handle_message(&[0; 8]), None);
        assert_eq!(decode_handle_message(&[0; 10]), None);
        let empty = handle_of_nothing();
        let b = handle_message(1, Some(&empty));
        assert_eq!(decode_handle_message(&b), Some((1, Some(empty))));
        let mut bad = handle_message(1, Some(&handle));
        bad[8] = 2;
        assert_eq!(decode_handle_message(&bad), None);
    }

    #[test]
    fn parts_round_trip_and_refuse_what_is_malformed() {
        let part = Part {
            sreq: 1 << 40,
            rreq: 7,
            addr: 0x7f00_0000_0000,
            offset: 1 << 19,
            len: (1 << 19) + 3,
        };
        assert_eq!(Part::decode(&part.encode()), Some(part));
        assert_eq!(Part::decode(&part.encode()[..PART_BYTES - 1]), None);
        let past_the_end = Part {
            addr: u64::MAX - 8,
            ..part
        };
        assert_eq!(Part::decode(&past_the_end.encode()), None);
        for landed in [true, false] {
            assert_eq!(decode_part_done(&part_done(9, landed)), Some((9, landed)));
        }
        let mut bad = part_done(9, true);
        bad[8] = 2;
        assert_eq!(decode_part_done(&bad), None);
        assert_eq!(decode_part_done(&[0; 10]), None);
    }

    #[test]
    fn cancels_and_their_answers_round_trip_and_refuse_what_is_malformed() {
        for sreq in [0, 7, u64::MAX] {
            assert_eq!(decode_cancel(&cancel(sreq)), Some(sreq));
            for dropped in [true, false] {
                assert_eq!(
                    decode_cancelled(&cancelled(sreq, dropped)),
                    Some((sreq, dropped))
                );
            }
        }
        assert_eq!(decode_cancel(&[0; 7]), None);
        assert_eq!(decode_cancel(&[0; 9]), None);
        let mut bad = cancelled(9, true);
        bad[8] = 2;
        assert_eq!(decode_cancelled(&bad), None);
        assert_eq!(decode_cancelled(&[0; 8]), None);
    }

    proptest::proptest! {
        #![proptest_config(crate::pmi::fuzz::config())]

        /// Any bytes on any of the layer's control tags: a message or `None`, never a
        /// panic; what decodes encodes back to the same bytes.
        #[test]
        fn control_messages_decode_any_bytes(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120)) {
            if let Some(rts) = Rts::decode(&b) {
                proptest::prop_assert_eq!(rts.encode(), b.clone());
            }
            if let Some((sreq, status)) = decode_fin(&b) {
                proptest::prop_assert_eq!(&fin(sreq, status)[..], &b[..9]);
            }
            if let Some((sreq, handle)) = decode_handle_message(&b) {
                proptest::prop_assert_eq!(handle_message(sreq, handle.as_ref()), b.clone());
            }
            if let Some(part) = Part::decode(&b) {
                proptest::prop_assert_eq!(&part.encode()[..], &b[..]);
            }
            if let Some((rreq, landed)) = decode_part_done(&b) {
                proptest::prop_assert_eq!(&part_done(rreq, landed)[..], &b[..]);
            }
            if let Some(sreq) = decode_cancel(&b) {
                proptest::prop_assert_eq!(&cancel(sreq)[..], &b[..]);
            }
            if let Some((sreq, dropped)) = decode_cancelled(&b) {
                proptest::prop_assert_eq!(&cancelled(sreq, dropped)[..], &b[..]);
            }
            let _ = decode_sync_header(&b);
        }
    }

    fn handle_of_nothing() -> RemoteHandle {
        RemoteHandle::from_bytes(&[]).expect("an empty handle")
    }
}
