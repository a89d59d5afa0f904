//! The send path of a `tcp` module: descriptors from its pool of fragments, active
//! messages onto link 0 of their peer (so they keep their order), written at once when
//! the link is idle, and each descriptor's completion once it is written whole.

use super::link::Head;
use super::net::Net;
use super::slot::Sent;
use super::wire;
use crate::done::Done;
use crate::send_frags::SendFrags;
use crate::{DesFlags, Descriptor, Error, ModuleId, Result, Tag, MAX_SEGMENTS};
use std::collections::VecDeque;

/// The module's descriptors and what sends them.
pub struct Sends {
    /// The pool the module's descriptors come from and go back to.
    pub frags: SendFrags,
    max_send_size: usize,
}

impl Sends {
    /// At most `max_frags` descriptors of `max_send_size` bytes, for module `id`.
    pub fn new(id: ModuleId, max_send_size: usize, max_frags: usize) -> Result<Sends> {
        Ok(Sends {
            frags: SendFrags::new(id, max_send_size, max_frags)?,
            max_send_size,
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

    /// Send `header` then `payload` on `tag` to peer `p` (checked live), copied.
    #[inline]
    pub fn sendi(
        &mut self,
        net: &mut Net,
        p: usize,
        header: &[u8],
        payload: &[u8],
        tag: Tag,
    ) -> Result<()> {
        let size = header.len() + payload.len();
        if size > self.max_send_size {
            return Err(Error::TooLarge(format!(
                "{size} bytes exceed max_send_size {}",
                self.max_send_size
            )));
        }
        let head = wire::am(tag, &[size]);
        net.send_small(p, &[head.as_bytes(), header, payload])
    }

    /// A descriptor is over (`immediate`: written within the call that sent it): its
    /// callback queued in `done`, or it returns to the pool, or to the caller who
    /// owns it (the result).
    pub fn finish(
        &mut self,
        mut des: Descriptor,
        immediate: bool,
        status: Result<()>,
        done: &mut VecDeque<Done>,
    ) -> Option<Descriptor> {
        let owned = des.flags.contains(DesFlags::OWNERSHIP);
        if immediate && !des.flags.contains(DesFlags::ALWAYS_CALLBACK) {
            if owned {
                self.frags.recycle(des);
                return None;
            }
            return Some(des);
        }
        match des.take_callback() {
            Some(callback) => done.push_back(Done::Send {
                callback,
                endpoint: des.endpoint(),
                descriptor: des,
                status,
            }),
            None => self.frags.recycle(des),
        }
        None
    }
}
