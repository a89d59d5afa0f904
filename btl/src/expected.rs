//! The expected receive a transport holds ([`crate::Module::expect`]), and the test of
//! a message against it.

use crate::{copy_bytes, Endpoint, Expected, Tag, EXPECTED_KEY};

/// A module's expected receive: the one posted, and the length of its message once
/// that has arrived.
#[derive(Default)]
pub struct ExpectedSlot {
    posted: Option<ExpectedRecv>,
    arrived: Option<usize>,
}

impl ExpectedSlot {
    /// Post `e`, replacing any earlier receive.
    pub fn post(&mut self, e: &Expected) {
        self.posted = Some(ExpectedRecv::new(e));
        self.arrived = None;
    }

    /// Whether a receive is posted.
    #[inline(always)]
    pub fn is_posted(&self) -> bool {
        self.posted.is_some()
    }

    /// Fill the receive with a message from `endpoint` on `tag`, which arrived as
    /// `segs`, if it is the one; whether it was (the receive is then over, its length
    /// kept for [`ExpectedSlot::take`]).
    ///
    /// # Safety
    ///
    /// The posted buffer is valid as `Module::expect` requires.
    #[inline(always)]
    pub unsafe fn fill(&mut self, endpoint: Endpoint, tag: Tag, segs: &[&[u8]]) -> bool {
        let Some(e) = self.posted.as_ref() else {
            return false;
        };
        if e.endpoint != endpoint {
            return false;
        }
        // SAFETY: forwarded contract.
        let Some(len) = (unsafe { e.fill(tag, segs) }) else {
            return false;
        };
        self.posted = None;
        self.arrived = Some(len);
        true
    }

    /// The length of the message that filled the receive, once.
    pub fn take(&mut self) -> Option<usize> {
        self.arrived.take()
    }

    /// Forget the receive, whatever its state.
    pub fn cancel(&mut self) {
        *self = ExpectedSlot::default();
    }
}

/// A posted expected receive.
struct ExpectedRecv {
    endpoint: Endpoint,
    tag: Tag,
    key: [u8; EXPECTED_KEY],
    /// Address of the buffer (an address, not a pointer, so that a module holding it
    /// stays `Send`; `Module::expect`'s contract keeps it valid).
    buf: usize,
    cap: usize,
}

impl ExpectedRecv {
    /// The receive `e` describes.
    fn new(e: &Expected) -> ExpectedRecv {
        ExpectedRecv {
            endpoint: e.endpoint,
            tag: e.tag,
            key: e.key,
            buf: e.buf as usize,
            cap: e.cap,
        }
    }

    /// Copy a message on `tag` that arrived as `segs` into the buffer if it is this
    /// receive's: the key, then at most `cap` bytes, in one segment or in two of which
    /// the first is the key. The length copied; `None` (nothing written) for any other
    /// message.
    ///
    /// # Safety
    ///
    /// The buffer is valid as `Module::expect` requires (it was posted, and neither
    /// taken nor withdrawn since).
    #[inline(always)]
    unsafe fn fill(&self, tag: Tag, segs: &[&[u8]]) -> Option<usize> {
        if tag != self.tag {
            return None;
        }
        let body = match segs {
            [whole] => {
                let (key, body) = whole.split_at_checked(EXPECTED_KEY)?;
                (*key == self.key).then_some(body)?
            }
            [key, body] => (**key == self.key).then_some(*body)?,
            _ => return None,
        };
        if body.len() > self.cap {
            return None;
        }
        // SAFETY: the buffer holds `cap` bytes (the caller's contract) and belongs to
        // the caller, the segments to the transport: they do not overlap.
        unsafe { copy_bytes(body.as_ptr(), self.buf as *mut u8, body.len()) };
        Some(body.len())
    }
}

#[cfg(test)]
mod tests {
    use super::ExpectedSlot;
    use crate::{Endpoint, Expected, Tag};

    #[test]
    fn takes_only_its_peer_tag_key_and_room() {
        let mut buf = [0u8; 4];
        const K: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
        let mut slot = ExpectedSlot::default();
        let e = Expected {
            endpoint: Endpoint(1),
            tag: Tag(9),
            key: K,
            buf: buf.as_mut_ptr(),
            cap: 4,
        };
        let mut fill = |ep: u32, tag: u8, segs: &[&[u8]]| {
            slot.post(&e);
            // SAFETY: `buf` outlives the slot's use here and is not otherwise
            // accessed until the last fill.
            unsafe { slot.fill(Endpoint(ep), Tag(tag), segs) }.then(|| slot.take())
        };
        assert_eq!(
            fill(2, 9, &[&[&K[..], &[5]].concat()]),
            None,
            "another peer"
        );
        assert_eq!(fill(1, 8, &[&[&K[..], &[5]].concat()]), None, "another tag");
        assert_eq!(
            fill(1, 9, &[&[1, 2, 3, 4, 5, 6, 7, 9, 5]]),
            None,
            "another key"
        );
        assert_eq!(fill(1, 9, &[&K[..7]]), None, "shorter than a key");
        assert_eq!(fill(1, 9, &[&[&K[..], &[0; 5]].concat()]), None, "too long");
        assert_eq!(
            fill(1, 9, &[&K[..2], &[&K[2..], &[5]].concat()]),
            None,
            "a key split"
        );
        assert_eq!(fill(1, 9, &[&K, &[5], &[6]]), None, "three parts");
        assert_eq!(
            fill(1, 9, &[&[&K[..], &[7, 8]].concat()]),
            Some(Some(2)),
            "one part"
        );
        assert_eq!(fill(1, 9, &[&K, &[5, 6, 7, 8]]), Some(Some(4)), "key, body");
        assert_eq!(fill(1, 9, &[&K]), Some(Some(0)), "empty");
        assert_eq!(buf, [5, 6, 7, 8], "the last body that was longer");
        slot.post(&e);
        slot.cancel();
        // SAFETY: as above.
        assert!(!unsafe { slot.fill(Endpoint(1), Tag(9), &[&[&K[..], &[0]].concat()]) });
        assert_eq!(slot.take(), None, "a withdrawn receive takes nothing");
        assert_eq!(buf, [5, 6, 7, 8], "nor writes");
    }
}
