//! An expected receive as a transport holds it ([`crate::Module::expect`]), and the
//! test of a message against it.

use crate::{copy_bytes, Endpoint, Expected, Tag, EXPECTED_KEY};

/// A posted expected receive.
pub struct ExpectedRecv {
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
    pub fn new(e: &Expected) -> ExpectedRecv {
        ExpectedRecv {
            endpoint: e.endpoint,
            tag: e.tag,
            key: e.key,
            buf: e.buf as usize,
            cap: e.cap,
        }
    }

    /// The peer whose message it takes.
    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
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
    #[inline]
    pub unsafe fn fill(&self, tag: Tag, segs: &[&[u8]]) -> Option<usize> {
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
    use super::ExpectedRecv;
    use crate::{Endpoint, Expected, Tag};

    #[test]
    fn takes_only_its_tag_key_and_room() {
        let mut buf = [0u8; 4];
        let e = ExpectedRecv::new(&Expected {
            endpoint: Endpoint(1),
            tag: Tag(9),
            key: [1, 2, 3, 4],
            buf: buf.as_mut_ptr(),
            cap: buf.len(),
        });
        let fill = |tag: u8, segs: &[&[u8]]| {
            // SAFETY: `buf` outlives `e` and is not otherwise used meanwhile.
            unsafe { e.fill(Tag(tag), segs) }
        };
        assert_eq!(fill(8, &[&[1, 2, 3, 4, 5]]), None, "another tag");
        assert_eq!(fill(9, &[&[1, 2, 3, 5, 5]]), None, "another key");
        assert_eq!(fill(9, &[&[1, 2, 3]]), None, "shorter than a key");
        assert_eq!(fill(9, &[&[1, 2, 3, 4, 0, 0, 0, 0, 0]]), None, "too long");
        assert_eq!(fill(9, &[&[1, 2], &[3, 4, 5]]), None, "a key split");
        assert_eq!(
            fill(9, &[&[1, 2, 3, 4], &[5], &[6]]),
            None,
            "three segments"
        );
        assert_eq!(buf, [0; 4], "nothing written so far");
        assert_eq!(fill(9, &[&[1, 2, 3, 4, 7, 8]]), Some(2), "one segment");
        assert_eq!(buf[..2], [7, 8]);
        assert_eq!(
            fill(9, &[&[1, 2, 3, 4], &[5, 6, 7, 8]]),
            Some(4),
            "key, body"
        );
        assert_eq!(buf, [5, 6, 7, 8]);
        assert_eq!(fill(9, &[&[1, 2, 3, 4]]), Some(0), "empty");
    }
}
