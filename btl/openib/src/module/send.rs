//! Sends: descriptors from the registered send fragments, posting them (now, or in
//! order once the connection, a credit and send-queue room are there), inline sends
//! from the caller's bytes, and credit-only messages that return credits when no send
//! carries them.

use super::OpenibModule;
use crate::core::{Posted, RECV_BIT};
use crate::peer::{Link, Waiting};
use crate::wire::{self, Trailer, CREDIT_ONLY, FRAG_EXTRA, TRAILER};
use rbtl_btl::transport_kit::admit_send;
use rbtl_btl::transport_kit::Done;
use rbtl_btl::{
    copy_bytes, ActiveMessage, Descriptor, DescriptorRequest, Endpoint, Error, PeerFailure, Result,
    SendError, SendOutcome, SendResult, SendiOutcome, Tag, MAX_SEGMENTS,
};
use rbtl_verbs::{Op, Sge};
use std::mem::MaybeUninit;

/// The work-request id of unsignalled sends (completed only if they fail; no tracked
/// work has it).
const UNSIGNALED_ID: u64 = RECV_BIT - 1;

/// One inline send in this many asks for a completion.
const SIGNAL_EVERY: u32 = 16;
/// Inline sends up to this size (with their trailer) go out as one gathered piece.
const GATHER_MAX: usize = 128;

impl OpenibModule {
    /// (`Module::alloc`) A descriptor of `request` from the send fragments.
    pub(super) fn alloc_descriptor(&mut self, request: &DescriptorRequest) -> Result<Descriptor> {
        let r = request;
        self.core.peer(r.endpoint)?;
        r.check(self.core.attrs.max_send_size)?;
        let frag = self.core.send_frags.get().map_err(|e| {
            if e.is_retryable() {
                Error::OutOfResource("openib: send fragments")
            } else {
                Error::Mpool(e)
            }
        })?;
        Descriptor::new(self.core.id, r.endpoint, frag, r.size, r.order, r.flags)
    }

    /// (`Module::send`) Post `descriptor` at once when the peer is connected, nothing
    /// waits before it and a credit and send-queue room are there; else it waits, in
    /// order.
    // The error carries the descriptor back by value, as `Module::send`'s does.
    #[allow(clippy::result_large_err)]
    pub(super) fn send_descriptor(
        &mut self,
        endpoint: Endpoint,
        descriptor: Descriptor,
        tag: Tag,
    ) -> SendResult {
        let max = self.core.attrs.max_send_size;
        let (descriptor, ()) = admit_send(descriptor, self.core.id, |descriptor| {
            rbtl_btl::transport_kit::check_not_reserved(tag)?;
            if descriptor.len() > max || descriptor.capacity() < descriptor.len() + FRAG_EXTRA {
                return Err(Error::TooLarge(format!(
                    "{} bytes exceed max_send_size {max}",
                    descriptor.len()
                )));
            }
            self.connect(endpoint)
        })?;
        let ep = endpoint.0 as usize;
        let peer = &mut self.core.peers[ep];
        let now = matches!(peer.link, Link::Up)
            && peer.waiting.is_empty()
            && peer.sq_free > 0
            && peer.credits.take();
        if !now {
            peer.waiting.push_back(Waiting::Send(descriptor, tag));
            return Ok(SendOutcome::Queued);
        }
        match self.post_descriptor(ep, descriptor, tag.0) {
            Ok(()) => Ok(SendOutcome::Queued),
            Err(e) => {
                self.core.peers[ep].credits.returned(1, 0);
                Err(e)
            }
        }
    }

    /// (`Module::sendi`) Send inline from the caller's bytes when the message can go at
    /// once and fits the queue pair's inline limit; else hand back a descriptor
    /// holding it.
    pub(super) fn send_inline(&mut self, m: &ActiveMessage<'_>) -> Result<SendiOutcome> {
        m.check(self.core.attrs.max_send_size)?;
        let &ActiveMessage {
            endpoint,
            tag,
            header,
            payload,
            ..
        } = m;
        let size = m.len();
        let ep = endpoint.0 as usize;
        if !matches!(self.core.peers.get(ep).map(|p| &p.link), Some(Link::Up)) {
            self.connect(endpoint)?;
        }
        let inline_max = self.core.inline_max(ep) as usize;
        let peer = &mut self.core.peers[ep];
        let now = matches!(peer.link, Link::Up)
            && peer.waiting.is_empty()
            && peer.sq_free > 0
            && size + TRAILER <= inline_max
            && peer.credits.take();
        if !now {
            let des = m.prepare_descriptor(self)?;
            return Ok(SendiOutcome::Descriptor(des));
        }
        let (credits, rsv) = peer.credits.piggyback();
        let trailer = Trailer {
            tag: tag.0,
            flags: 0,
            nseg: 1,
            rsv,
            credits,
        }
        .to_bytes();
        // Small messages are gathered here first: the device then copies one piece.
        let mut gathered = [MaybeUninit::<u8>::uninit(); GATHER_MAX];
        let sge = |b: &[u8]| Sge {
            addr: b.as_ptr() as u64,
            len: b.len() as u32,
            lkey: 0,
        };
        let (one, three);
        let sges: &[Sge] = if size + TRAILER <= GATHER_MAX {
            let at = gathered.as_mut_ptr().cast::<u8>();
            // SAFETY: the three pieces add up to at most GATHER_MAX bytes, written in
            // turn from the start of `gathered`; only those bytes are read back.
            let filled = unsafe {
                m.gather_to(at);
                copy_bytes(trailer.as_ptr(), at.add(size), TRAILER);
                std::slice::from_raw_parts(at, size + TRAILER)
            };
            one = [sge(filled)];
            &one
        } else {
            three = [sge(header), sge(payload), sge(&trailer)];
            &three
        };
        // Most inline sends go unsignalled: no completion to poll, and their
        // send-queue entries come back with the next signalled request's.
        let peer = &mut self.core.peers[ep];
        let signaled = peer.unsignaled + 1 >= SIGNAL_EVERY || peer.sq_free <= SIGNAL_EVERY;
        let id = if signaled {
            self.core.track(Posted::Inline(ep))
        } else {
            UNSIGNALED_ID
        };
        // SAFETY: an inline send: the device copies the bytes while posting.
        let posted = unsafe { self.core.post_send(ep, id, Op::Send, sges, true, signaled) };
        let peer = &mut self.core.peers[ep];
        match posted {
            Ok(()) => {
                peer.sq_free -= 1;
                if !signaled {
                    peer.unsignaled += 1;
                }
                Ok(SendiOutcome::Sent)
            }
            Err(e) => {
                peer.credits.returned(credits + 1, rsv);
                if signaled {
                    self.core.unpost(id);
                }
                Err(Error::NotAvailable(format!("openib: {e}")))
            }
        }
    }

    /// Post what waits for `ep`, in order, as far as credits and queue room allow.
    pub(super) fn drain(&mut self, ep: usize) -> usize {
        let mut n = 0;
        loop {
            let peer = &mut self.core.peers[ep];
            if !matches!(peer.link, Link::Up) || peer.sq_free == 0 {
                break;
            }
            let Some(front) = peer.waiting.front() else {
                break;
            };
            match front {
                Waiting::Send(..) if !peer.credits.take() => break,
                Waiting::Rdma(_) if peer.rdma_in_flight >= self.core.settings.rdma_depth => break,
                _ => {}
            }
            match peer.waiting.pop_front() {
                Some(Waiting::Send(des, tag)) => {
                    if let Err(e) = self.post_descriptor(ep, des, tag.0) {
                        self.finish_send(e.descriptor, Err(e.error));
                    }
                }
                Some(Waiting::Rdma(r)) => self.post_rdma(ep, *r),
                None => break,
            }
            n += 1;
        }
        // Credits may be owed for receives reposted just now (a connection that came
        // up after the peer had sent) or left due earlier.
        let peer = &self.core.peers[ep];
        if peer.credit_due || peer.credits.wants_credit_message() {
            self.send_credits(ep);
        }
        n
    }

    /// Post a descriptor (a credit has been taken for it).
    // The error carries the descriptor back by value, as `send`'s does.
    #[allow(clippy::result_large_err)]
    fn post_descriptor(
        &mut self,
        ep: usize,
        mut des: Descriptor,
        tag: u8,
    ) -> std::result::Result<(), SendError> {
        let peer = &mut self.core.peers[ep];
        let (credits, rsv) = peer.credits.piggyback();
        let mut lens = [0usize; MAX_SEGMENTS];
        let nseg = des.segment_count();
        for (l, s) in lens.iter_mut().zip(des.segment_lens()) {
            *l = s;
        }
        let t = Trailer {
            tag,
            flags: 0,
            nseg: nseg as u8,
            rsv,
            credits,
        };
        let len = des.len() + wire::write_trailer(des.spare_mut(), &lens[..nseg], t);
        let lkey = self.core.send_frags.registration(des.frag()).lkey();
        let sge = Sge {
            addr: des.frag().as_ptr() as u64,
            len: len as u32,
            lkey,
        };
        let id = self.core.track_send(ep, des);
        // SAFETY: the fragment is in a registered chunk and stays, untouched, in the
        // posted table until its completion.
        let posted = unsafe { self.core.post_send(ep, id, Op::Send, &[sge], true, true) };
        let peer = &mut self.core.peers[ep];
        match posted {
            Ok(()) => {
                peer.sq_free -= 1;
                Ok(())
            }
            Err(e) => {
                peer.credits.returned(credits, rsv);
                let (Some(Posted::Send(_)), Some(des)) =
                    (self.core.unpost(id), self.core.take_sent(id))
                else {
                    unreachable!("just tracked");
                };
                Err(SendError {
                    error: Error::NotAvailable(format!("openib: {e}")),
                    descriptor: des,
                })
            }
        }
    }

    /// Return credits to `ep` with a credit-only message if one is due and possible:
    /// its trailer alone, from the peer's slot of the control area.
    pub(super) fn send_credits(&mut self, ep: usize) {
        let peer = &mut self.core.peers[ep];
        peer.credit_due = false;
        if !matches!(peer.link, Link::Up) || !peer.credits.wants_credit_message() {
            return;
        }
        let Some((slot, lkey)) = self.core.control.credit_slot(ep) else {
            return;
        };
        if peer.sq_free == 0 || peer.credit_in_flight {
            peer.credit_due = true;
            return;
        }
        peer.credits.take_rsv();
        let (credits, rsv) = peer.credits.piggyback();
        let t = Trailer {
            tag: 0,
            flags: CREDIT_ONLY,
            nseg: 1,
            rsv,
            credits,
        };
        // SAFETY: the peer's 8-byte slot of the control area, not in use (no credit
        // message of this peer is in flight).
        unsafe { std::ptr::copy_nonoverlapping(t.to_bytes().as_ptr(), slot, TRAILER) };
        let sge = Sge {
            addr: slot as u64,
            len: TRAILER as u32,
            lkey,
        };
        let id = self.core.track(Posted::Credit(ep));
        // SAFETY: the slot lies in the control area's registration and stays untouched
        // until the completion clears `credit_in_flight`.
        let posted = unsafe { self.core.post_send(ep, id, Op::Send, &[sge], true, true) };
        let peer = &mut self.core.peers[ep];
        match posted {
            Ok(()) => {
                peer.sq_free -= 1;
                peer.credit_in_flight = true;
            }
            Err(e) => {
                self.core.unpost(id);
                self.core
                    .fail(ep, PeerFailure::Broken(format!("openib: {e}")));
            }
        }
    }

    /// Queue a send completion (or recycle the descriptor when nobody waits for it).
    pub(super) fn finish_send(&mut self, mut des: Descriptor, status: Result<()>) {
        let ep = des.endpoint();
        match des.take_callback() {
            Some(cb) => self.core.done.push_back(Done::Send {
                callback: cb,
                endpoint: ep,
                descriptor: des,
                status,
            }),
            None => self.core.send_frags.put(des.into_frag()),
        }
    }
}
