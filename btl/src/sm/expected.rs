//! The receive a caller hands to the transport ([`crate::Module::expect`]): the poll
//! loop copies a matching message straight into it, without a callback.

use super::ring::Record;
use crate::{copy_bytes, Expected, Tag, EXPECTED_KEY, MAX_SEGMENTS};

/// A posted expected receive, for one peer's ring.
pub struct Posted {
    /// The peer (index into the module's peers).
    pub peer: usize,
    tag: Tag,
    key: [u8; EXPECTED_KEY],
    /// Address of the buffer (an address, not a pointer, so that the module stays
    /// `Send`; `Module::expect`'s contract keeps it valid).
    buf: usize,
    cap: usize,
}

impl Posted {
    /// The receive `e`, from peer index `peer`.
    pub fn new(peer: usize, e: &Expected) -> Posted {
        Posted {
            peer,
            tag: e.tag,
            key: e.key,
            buf: e.buf as usize,
            cap: e.cap,
        }
    }

    /// Copy `rec` into the buffer if it is this receive's message: on its tag, its
    /// key, then at most `cap` bytes, in one segment or in two of which the first is
    /// the key. The length copied; `None` (nothing written) for any other message.
    ///
    /// # Safety
    ///
    /// `rec` is not released yet; the buffer is valid as `Module::expect` requires.
    #[inline]
    pub unsafe fn fill(&self, rec: &Record) -> Option<usize> {
        if rec.tag != self.tag.0 {
            return None;
        }
        let body = if rec.segment_count() == 1 {
            // SAFETY: the record is not released (the caller's contract).
            let whole = unsafe { rec.payload() };
            let (key, body) = whole.split_at_checked(EXPECTED_KEY)?;
            (*key == self.key).then_some(body)?
        } else {
            let mut segs: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
            // SAFETY: as above.
            let n = unsafe { rec.segments(&mut segs) };
            (n == 2 && *segs[0] == self.key).then_some(segs[1])?
        };
        if body.len() > self.cap {
            return None;
        }
        // SAFETY: the buffer holds `cap` bytes (the caller's contract), the body is
        // inside the unreleased record, and the two do not overlap (the buffer belongs
        // to the caller, the record to the ring).
        unsafe { copy_bytes(body.as_ptr(), self.buf as *mut u8, body.len()) };
        Some(body.len())
    }
}
