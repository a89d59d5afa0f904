//! The `self` module: sends queued (a small one inside its event) and delivered to
//! the receive callbacks by `progress`; put, get and atomics checked against the
//! registrations and done at once with plain memory operations, their callbacks run
//! from `progress` (or `flush`).

use super::component::{Limits, NAME};
use rbtl_btl::transport_kit::keytable::KeyTableView;
use rbtl_btl::transport_kit::registrations::{NoPin, Reg, Registrations};
use rbtl_btl::transport_kit::send_frags::SendFrags;
use rbtl_btl::transport_kit::{admit_send, complete_send, AmTable};
use rbtl_btl::{
    ActiveMessage, AmCallback, Attributes, Descriptor, DescriptorRequest, Endpoint, Error,
    ErrorCallback, MemHandle, Modex, Module, ModuleId, Proc, RdmaCallback, RdmaCompletion,
    Received, RegRequest, RemoteAtomic, RemoteHandle, Result, SendOutcome, SendResult,
    SendiOutcome, Tag, Transfer, MAX_SEGMENTS,
};
use rbtl_rcache::Access;
use std::collections::VecDeque;
use std::sync::Arc;

/// Bytes a small message carries in its event instead of a fragment.
const INLINE_MAX: usize = 56;

enum Event {
    /// A small `sendi`: its bytes, in the event.
    Inline {
        tag: Tag,
        len: u8,
        bytes: [u8; INLINE_MAX],
    },
    /// The next descriptor of [`SelfModule::sent`] (kept apart: events move through
    /// the queue, and a descriptor is large).
    Deliver,
    Rdma(RdmaCallback, RdmaCompletion),
}

/// The `self` module.
pub struct SelfModule {
    id: ModuleId,
    rank: u32,
    attrs: Attributes,
    frags: SendFrags,
    regs: Arc<Registrations>,
    keys: KeyTableView,
    am: AmTable,
    endpoint: Option<Endpoint>,
    events: VecDeque<Event>,
    /// Descriptors sent, in order, with their tag and whether this module made them.
    sent: VecDeque<(Descriptor, Tag, bool)>,
}

impl SelfModule {
    /// A module with these attributes and limits, for the process of rank `rank`.
    pub fn new(attrs: Attributes, limits: Limits, rank: u32) -> Result<SelfModule> {
        let id = ModuleId::fresh();
        let regs = Registrations::anonymous(limits.max_registrations, limits.rcache)?;
        Ok(SelfModule {
            id,
            rank,
            frags: SendFrags::new(id, attrs.max_send_size, limits.max_frags)?,
            attrs,
            keys: regs.view(),
            regs,
            am: AmTable::default(),
            endpoint: None,
            events: VecDeque::new(),
            sent: VecDeque::new(),
        })
    }

    /// Statistics of the registration cache behind this module's handles.
    pub fn rcache_stats(&self) -> rbtl_rcache::Stats {
        self.regs.cache_stats()
    }

    fn check_endpoint(&self, ep: Endpoint) -> Result<()> {
        match self.endpoint {
            Some(e) if e == ep => Ok(()),
            _ => Err(Error::UnknownEndpoint(ep.0)),
        }
    }

    fn check_tag(&self, tag: Tag) -> Result<()> {
        rbtl_btl::transport_kit::check_not_reserved(tag)?;
        if self.am.is_registered(tag) {
            Ok(())
        } else {
            Err(Error::BadTag {
                tag,
                why: "no receive callback registered for it",
            })
        }
    }

    /// Check a remote handle and range for `needs`; the target address as a pointer.
    fn remote_target(
        &self,
        handle: &RemoteHandle,
        addr: u64,
        len: usize,
        needs: Access,
    ) -> Result<*mut u8> {
        self.keys.check(self.id, handle, addr, len, needs)?;
        Ok(addr as usize as *mut u8)
    }

    fn complete(&mut self, ep: Endpoint, local: usize, size: usize, callback: RdmaCallback) {
        let done = RdmaCompletion {
            endpoint: ep,
            local_address: local,
            size,
            status: Ok(()),
        };
        self.events.push_back(Event::Rdma(callback, done));
    }

    /// Run `tag`'s callback on the small message `bytes` (or queue it again, first,
    /// while that callback runs further up the stack).
    fn deliver_inline(&mut self, tag: Tag, len: u8, bytes: [u8; INLINE_MAX]) {
        let Some(mut cb) = self.am.take(tag) else {
            self.events.push_front(Event::Inline { tag, len, bytes });
            return;
        };
        let Some(endpoint) = self.endpoint else {
            return;
        };
        let received = Received {
            endpoint,
            tag,
            segments: &[&bytes[..usize::from(len)]],
        };
        cb(self, &received);
        self.am.restore(tag, cb);
    }

    /// Queue a descriptor for delivery.
    fn queue(&mut self, descriptor: Descriptor, tag: Tag, internal: bool) {
        self.sent.push_back((descriptor, tag, internal));
        self.events.push_back(Event::Deliver);
    }

    fn deliver(&mut self) {
        let Some((descriptor, tag, internal)) = self.sent.pop_front() else {
            return;
        };
        let Some(mut cb) = self.am.take(tag) else {
            // The callback is running further up the stack (it called progress):
            // deliver later, in order.
            self.sent.push_front((descriptor, tag, internal));
            self.events.push_front(Event::Deliver);
            return;
        };
        let mut segs: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
        let n = descriptor.segment_count();
        let mut start = 0;
        for (i, len) in descriptor.segment_lens().enumerate() {
            segs[i] = &descriptor.bytes()[start..start + len];
            start += len;
        }
        let received = Received {
            endpoint: descriptor.endpoint(),
            tag,
            segments: &segs[..n],
        };
        cb(self, &received);
        self.am.restore(tag, cb);
        if internal {
            self.frags.recycle(descriptor);
        } else {
            self.send_complete(descriptor);
        }
    }

    fn send_complete(&mut self, mut descriptor: Descriptor) {
        let ep = descriptor.endpoint();
        match descriptor.take_callback() {
            Some(cb) => complete_send(self, cb, ep, descriptor, Ok(()), |m, d| m.frags.recycle(d)),
            // Nobody will take it back: free it rather than leak the fragment.
            None => self.frags.recycle(descriptor),
        }
    }

    /// A put (`put`) or a get, checked, then copied at once; its completion queued.
    fn transfer(&mut self, op: &Transfer<'_>, put: bool, callback: RdmaCallback) -> Result<()> {
        op.check_limits(&self.attrs, put)?;
        self.check_endpoint(op.endpoint)?;
        let (local, size) = (op.local.addr, op.len);
        let (local_needs, remote_needs) = Transfer::needs(put);
        op.local.check::<Reg<NoPin>>(self.id, size, local_needs)?;
        let remote =
            self.remote_target(op.remote.registered()?, op.remote.addr, size, remote_needs)?;
        // SAFETY: the remote range was checked to lie inside a live registration, the
        // local one too unless it is unregistered; either contract (register_mem's,
        // `Local::unregistered`'s) keeps the memory mapped; `move_bytes` allows overlap.
        unsafe {
            if put {
                rbtl_btl::move_bytes(local as *const u8, remote, size);
            } else {
                rbtl_btl::move_bytes(remote, local as *mut u8, size);
            }
        }
        self.complete(op.endpoint, local, size, callback);
        Ok(())
    }
}

impl Module for SelfModule {
    fn name(&self) -> &str {
        NAME
    }

    fn id(&self) -> ModuleId {
        self.id
    }

    fn attributes(&self) -> &Attributes {
        &self.attrs
    }

    fn add_procs(
        &mut self,
        procs: &[Proc],
        _modex: &mut dyn Modex,
    ) -> Result<Vec<Option<Endpoint>>> {
        Ok(procs
            .iter()
            .map(|p| {
                (p.rank == self.rank).then(|| {
                    let ep = Endpoint(0);
                    self.endpoint = Some(ep);
                    ep
                })
            })
            .collect())
    }

    fn del_procs(&mut self, endpoints: &[Endpoint]) -> Result<()> {
        for &ep in endpoints {
            self.check_endpoint(ep)?;
            self.endpoint = None;
        }
        Ok(())
    }

    fn register_am(&mut self, tag: Tag, callback: AmCallback) -> Result<()> {
        self.am.register(tag, callback)
    }

    /// A process cannot lose itself: the callback is never needed and is dropped.
    fn register_error(&mut self, _callback: ErrorCallback) {}

    unsafe fn register(&mut self, request: &RegRequest) -> Result<MemHandle> {
        self.regs.register(self.id, &self.attrs, request)
    }

    fn registration_stats(&self) -> Option<rbtl_rcache::Stats> {
        Some(self.regs.cache_stats())
    }

    fn alloc(&mut self, request: &DescriptorRequest) -> Result<Descriptor> {
        self.check_endpoint(request.endpoint)?;
        self.frags.alloc(request)
    }

    fn free(&mut self, descriptor: Descriptor) -> Result<()> {
        self.frags.free(descriptor)
    }

    fn send(&mut self, endpoint: Endpoint, descriptor: Descriptor, tag: Tag) -> SendResult {
        let (descriptor, ()) = admit_send(descriptor, self.id, |_| {
            self.check_endpoint(endpoint)?;
            self.check_tag(tag)
        })?;
        self.queue(descriptor, tag, false);
        Ok(SendOutcome::Queued)
    }

    fn sendi(&mut self, m: &ActiveMessage<'_>) -> Result<SendiOutcome> {
        let &ActiveMessage { endpoint, tag, .. } = m;
        self.check_endpoint(endpoint)?;
        self.check_tag(tag)?;
        let size = m.len();
        if size <= INLINE_MAX && size <= self.attrs.eager_limit {
            let mut bytes = [0u8; INLINE_MAX];
            // SAFETY: `bytes` has room for the message's `size` <= INLINE_MAX bytes; its
            // pieces are live slices outside it.
            unsafe { m.gather_to(bytes.as_mut_ptr()) };
            self.events.push_back(Event::Inline {
                tag,
                len: size as u8,
                bytes,
            });
            return Ok(SendiOutcome::Sent);
        }
        let des = m.prepare_descriptor(self)?;
        if size > self.attrs.eager_limit || des.len() < size {
            if des.len() < size {
                self.frags.recycle(des);
                return Err(Error::TooLarge(format!(
                    "{size} bytes exceed max_send_size {}",
                    self.attrs.max_send_size
                )));
            }
            return Ok(SendiOutcome::Descriptor(des));
        }
        self.queue(des, tag, true);
        Ok(SendiOutcome::Sent)
    }

    fn put(&mut self, op: &Transfer<'_>, callback: RdmaCallback) -> Result<()> {
        self.transfer(op, true, callback)
    }

    fn get(&mut self, op: &Transfer<'_>, callback: RdmaCallback) -> Result<()> {
        self.transfer(op, false, callback)
    }

    /// Applied at once to the peer's (our own) word, its completion queued.
    fn atomic(&mut self, op: &RemoteAtomic<'_>, callback: RdmaCallback) -> Result<()> {
        self.check_endpoint(op.endpoint)?;
        op.check_word()?;
        let width = op.width;
        let target = self.remote_target(
            op.remote.registered()?,
            op.remote.addr,
            width.bytes(),
            Access::ATOMIC,
        )?;
        if let Some(r) = op.result {
            r.check::<Reg<NoPin>>(self.id, width.bytes(), Access::LOCAL_WRITE)?;
        }
        let (operand, compare) = op.operands();
        // SAFETY: `target` was checked to be aligned to the width and inside a live
        // registration with atomic access.
        let old = unsafe { op.request().apply(target, operand, compare) };
        if let Some(r) = op.result {
            // SAFETY: `width` writable bytes: checked against a live registration, or
            // unregistered with its creator's promise (`Local::unregistered`).
            unsafe { width.store(r.addr, old) };
        }
        self.complete(op.endpoint, op.result_addr(), width.bytes(), callback);
        Ok(())
    }

    fn flush(&mut self, endpoint: Option<Endpoint>) -> Result<()> {
        if let Some(ep) = endpoint {
            self.check_endpoint(ep)?;
        }
        // Every put/get/atomic is already done; run their callbacks, and only theirs
        // (a flush from inside a receive callback must not deliver into it).
        while let Some(i) = self
            .events
            .iter()
            .position(|e| matches!(e, Event::Rdma(..)))
        {
            if let Some(Event::Rdma(cb, done)) = self.events.remove(i) {
                cb(self, done);
            }
        }
        Ok(())
    }

    fn progress(&mut self) -> usize {
        // Only what is queued now: callbacks that start more work do not extend this
        // call without bound.
        let n = self.events.len();
        for _ in 0..n {
            match self.events.pop_front() {
                Some(Event::Inline { tag, len, bytes }) => self.deliver_inline(tag, len, bytes),
                Some(Event::Deliver) => self.deliver(),
                Some(Event::Rdma(cb, done)) => cb(self, done),
                None => break,
            }
        }
        n
    }
}
