//! Send descriptors (Open MPI: `mca_btl_base_descriptor_t`): a fragment of the
//! transport's memory cut into up to [`MAX_SEGMENTS`] consecutive segments, with flags
//! and a completion callback.

use crate::{Endpoint, Error, Module, ModuleId, Result};
use rbtl_mpool::Frag;
use std::fmt;

/// Most segments one descriptor carries.
pub const MAX_SEGMENTS: usize = 16;

bitflags::bitflags! {
    /// Descriptor flags (Open MPI: `MCA_BTL_DES_FLAGS_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct DesFlags: u32 {
        /// The transport frees the descriptor after completion; the completion callback
        /// (if any) gets no descriptor back (`MCA_BTL_DES_FLAGS_BTL_OWNERSHIP`).
        const OWNERSHIP = 1 << 0;
        /// Run the completion callback even when `send` completes at once
        /// (`MCA_BTL_DES_SEND_ALWAYS_CALLBACK`).
        const ALWAYS_CALLBACK = 1 << 1;
        /// Send ahead of queued fragments where the transport can
        /// (`MCA_BTL_DES_FLAGS_PRIORITY`).
        const PRIORITY = 1 << 2;
    }
}

/// Ordering channel of an operation (Open MPI: `order`, with `MCA_BTL_NO_ORDER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Order(pub u8);

impl Order {
    /// Any channel.
    pub const ANY: Order = Order(0xff);
}

/// What a send completion callback receives.
pub struct SendCompletion {
    /// The endpoint the descriptor was sent on.
    pub endpoint: Endpoint,
    /// The descriptor, when the caller kept ownership; `None` under
    /// [`DesFlags::OWNERSHIP`] (the transport frees it after the callback).
    pub descriptor: Option<Descriptor>,
    /// Whether the send succeeded.
    pub status: Result<()>,
}

/// Runs once when a send completes: from `progress()` or `flush()`, never from inside
/// `send`.
pub type SendCallback = Box<dyn FnOnce(&mut dyn Module, SendCompletion) + Send>;

/// A send descriptor. Its bytes are the transport's (shared memory, registered
/// memory); fill them through [`Descriptor::segment_mut`] and pass it to `send`.
pub struct Descriptor {
    frag: Frag,
    seg_lens: [u32; MAX_SEGMENTS],
    nseg: usize,
    /// Flags; see [`DesFlags`].
    pub flags: DesFlags,
    /// Ordering channel.
    pub order: Order,
    callback: Option<SendCallback>,
    owner: ModuleId,
    endpoint: Endpoint,
}

impl Descriptor {
    /// Made by transports: a descriptor over `frag` holding one segment of `size` bytes.
    pub fn new(
        owner: ModuleId,
        endpoint: Endpoint,
        frag: Frag,
        size: usize,
        order: Order,
        flags: DesFlags,
    ) -> Result<Descriptor> {
        if size > frag.len() {
            return Err(Error::TooLarge(format!(
                "{size} bytes do not fit a {}-byte fragment",
                frag.len()
            )));
        }
        let mut seg_lens = [0; MAX_SEGMENTS];
        seg_lens[0] = size as u32;
        Ok(Descriptor {
            frag,
            seg_lens,
            nseg: 1,
            flags,
            order,
            callback: None,
            owner,
            endpoint,
        })
    }

    /// Re-cut the used bytes into up to [`MAX_SEGMENTS`] consecutive segments of these
    /// lengths (their sum may differ from the current length, up to the capacity).
    pub fn set_segments(&mut self, lens: &[usize]) -> Result<()> {
        let total: usize = lens.iter().sum();
        if lens.is_empty() || lens.len() > MAX_SEGMENTS || total > self.capacity() {
            return Err(Error::TooLarge(format!(
                "{} segments of {total} bytes (at most {MAX_SEGMENTS} segments, {} bytes)",
                lens.len(),
                self.capacity()
            )));
        }
        for (slot, &len) in self.seg_lens.iter_mut().zip(lens) {
            *slot = len as u32;
        }
        self.nseg = lens.len();
        Ok(())
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.nseg
    }

    /// Lengths of the segments.
    pub fn segment_lens(&self) -> impl Iterator<Item = usize> + '_ {
        self.seg_lens[..self.nseg].iter().map(|&l| l as usize)
    }

    fn seg_start(&self, i: usize) -> usize {
        self.seg_lens[..i].iter().map(|&l| l as usize).sum()
    }

    /// Segment `i`.
    pub fn segment(&self, i: usize) -> &[u8] {
        assert!(i < self.nseg, "segment {i} of {}", self.nseg);
        let start = self.seg_start(i);
        &self.frag.as_slice()[start..start + self.seg_lens[i] as usize]
    }

    /// Segment `i`, writable.
    pub fn segment_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.nseg, "segment {i} of {}", self.nseg);
        let start = self.seg_start(i);
        let len = self.seg_lens[i] as usize;
        &mut self.frag.as_mut_slice()[start..start + len]
    }

    /// All used bytes, every segment in order.
    pub fn bytes(&self) -> &[u8] {
        &self.frag.as_slice()[..self.len()]
    }

    /// Total bytes in the segments.
    pub fn len(&self) -> usize {
        self.segment_lens().sum()
    }

    /// Whether the segments hold no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the fragment can hold.
    pub fn capacity(&self) -> usize {
        self.frag.len()
    }

    /// Set the completion callback (Open MPI: `des_cbfunc`/`des_cbdata`).
    pub fn set_callback(&mut self, cb: SendCallback) {
        self.callback = Some(cb);
    }

    /// For transports: take the completion callback.
    pub fn take_callback(&mut self) -> Option<SendCallback> {
        self.callback.take()
    }

    /// The endpoint it was made for.
    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    /// The module that made it.
    pub fn owner(&self) -> ModuleId {
        self.owner
    }

    /// For transports: check it is theirs.
    pub fn check_owner(&self, module: ModuleId) -> Result<()> {
        if self.owner == module {
            Ok(())
        } else {
            Err(Error::ForeignHandle {
                what: "descriptor",
                owner: self.owner.0,
                this: module.0,
            })
        }
    }

    /// For transports: the fragment (to find its registration).
    pub fn frag(&self) -> &Frag {
        &self.frag
    }

    /// For transports: the fragment's bytes after the used ones (room for a trailer).
    pub fn spare_mut(&mut self) -> &mut [u8] {
        let used = self.len();
        &mut self.frag.as_mut_slice()[used..]
    }

    /// For transports: give the fragment back (to return it to its free list).
    pub fn into_frag(self) -> Frag {
        self.frag
    }
}

impl fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Descriptor")
            .field("segments", &self.segment_lens().collect::<Vec<_>>())
            .field("flags", &self.flags)
            .field("order", &self.order)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// What a receive callback sees: valid only during the call.
pub struct Received<'a> {
    /// The sender's endpoint on this module.
    pub endpoint: Endpoint,
    /// The tag the message was sent with.
    pub tag: crate::Tag,
    /// The segments as the sender cut them.
    pub segments: &'a [&'a [u8]],
}

impl Received<'_> {
    /// Total bytes received.
    pub fn len(&self) -> usize {
        self.segments.iter().map(|s| s.len()).sum()
    }

    /// Whether nothing but the tag arrived.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The segments joined into one vector (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        self.segments.concat()
    }

    /// The bytes in one slice: the one segment itself, or the segments joined (a
    /// copy) when the sender cut several.
    pub fn joined(&self) -> std::borrow::Cow<'_, [u8]> {
        match self.segments {
            [] => std::borrow::Cow::Borrowed(&[]),
            [one] => std::borrow::Cow::Borrowed(one),
            _ => std::borrow::Cow::Owned(self.to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Received;
    use crate::Endpoint;
    use std::borrow::Cow;

    #[test]
    fn joined_borrows_one_segment_and_copies_several() {
        let received = |segments| Received {
            endpoint: Endpoint(0),
            tag: crate::Tag(0),
            segments,
        };
        let one: &[&[u8]] = &[b"abc"];
        let r = received(one);
        assert!(matches!(r.joined(), Cow::Borrowed(b"abc")));
        let two: &[&[u8]] = &[b"ab", b"cd"];
        let r = received(two);
        let joined = r.joined();
        assert!(matches!(joined, Cow::Owned(_)));
        assert_eq!(&*joined, b"abcd");
        assert!(received(&[]).joined().is_empty());
    }
}
