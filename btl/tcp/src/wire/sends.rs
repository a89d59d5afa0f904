//! The send path of a `tcp` module: its pool of fragments (whose
//! [`finish`](rbtl_btl::transport_kit::send_frags::SendFrags::finish) completes a descriptor once it is
//! written whole), and active messages onto link 0 of their peer (so they keep their
//! order), written at once when the link is idle.

use crate::link::Head;
use crate::net::Net;
use crate::slot::Sent;
use crate::wire;
use rbtl_btl::transport_kit::send_frags::SendFrags;
use rbtl_btl::{ActiveMessage, Descriptor, ModuleId, Result, Tag, MAX_SEGMENTS};

/// The module's descriptors and what sends them.
pub struct Sends {
    /// The pool the module's descriptors come from and go back to.
    pub frags: SendFrags,
}

impl Sends {
    /// At most `max_frags` descriptors of `max_send_size` bytes, for module `id`.
    pub fn new(id: ModuleId, max_send_size: usize, max_frags: usize) -> Result<Sends> {
        Ok(Sends {
            frags: SendFrags::new(id, max_send_size, max_frags)?,
        })
    }

    /// Send `descriptor` on `tag` to peer `p` (checked live).
    pub fn send(
        &mut self,
        net: &mut Net,
        p: usize,
        descriptor: Descriptor,
        tag: Tag,
    ) -> Sent<Descriptor> {
        let mut lens = [0usize; MAX_SEGMENTS];
        for (l, s) in lens.iter_mut().zip(descriptor.segment_lens()) {
            *l = s;
        }
        let head = wire::am(tag, &lens[..descriptor.segment_count()]);
        net.send_desc(p, Head::new(head.as_bytes()), descriptor)
    }

    /// Send `m` (checked) to peer `p` (checked live), copied.
    #[inline]
    pub fn sendi(&mut self, net: &mut Net, p: usize, m: &ActiveMessage<'_>) -> Result<()> {
        let head = wire::am(m.tag, &[m.len()]);
        net.send_small(p, &[head.as_bytes(), m.header, m.payload])
    }
}
