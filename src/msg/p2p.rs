// Over 600 lines on purpose: every way a message is sent, received and waited for,
// whose fast paths share the request table and the matching state in one place.
//! Point-to-point: tagged sends and receives, blocking and non-blocking, and waiting
//! for their requests.

use super::liveness::IdleWait;
use super::offload::Withdraw;
use super::state::{self, lock, Posted, Shared, State, Unexpected};
use super::{protocol, requests, Comm, Error, ReqId, Result};
use rbtl_btl::{Access, BtlFlags, Endpoint, Module};
use std::num::NonZeroU64;
use std::sync::atomic::Ordering;

/// What a completed receive (or send) reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// The sender's rank.
    pub source: u32,
    /// The message's tag.
    pub tag: i32,
    /// Its length in bytes.
    pub len: usize,
}

/// Which source a receive accepts.
pub const ANY_SOURCE: Option<u32> = None;
/// Which tag a receive accepts (any non-negative one).
pub const ANY_TAG: Option<i32> = None;

/// Idle progress rounds a wait spins before it starts yielding the processor.
pub const SPIN_BEFORE_YIELD: u32 = 1 << 14;

/// Eager payloads from this size that find no room in the transport wait in the
/// sender's buffer, their request under way until they leave; smaller ones are copied,
/// and their send completes at once, with no request entry.
const LEND_FROM: usize = 4096;

/// Payloads from this size ask their transport for its current eager limit, which
/// may have fallen since start-up; smaller ones go by the start-up limit, which no
/// transport lowers below this size.
const EAGER_RECHECKED_FROM: usize = 16 << 10;

/// The context of the calls that name none ([`Comm::send`], [`Comm::recv`], ...): the
/// communicator over every rank. A layer above that builds communicators of its own
/// gives each its own context (any other value), so that their messages never match
/// each other's receives.
pub const WORLD: u32 = 0;

/// When a send completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    /// Once its buffer may be reused (MPI's standard mode).
    Standard,
    /// Once a receive has matched it (MPI's synchronous mode, `MPI_Ssend`).
    Synchronous,
}

impl Comm {
    /// Send `buf` to `dst` with `tag`, returning when the buffer may be reused.
    #[inline(always)]
    pub fn send(&mut self, buf: &[u8], dst: u32, tag: i32) -> Result<()> {
        self.send_in(WORLD, buf, dst, tag)
    }

    /// [`Comm::send`] in context `ctx`. A message of at most
    /// [`Comm::eager_payload_to`] bytes goes eagerly: it may wait for room in the
    /// transport, never for its receiver.
    #[inline(always)]
    pub fn send_in(&mut self, ctx: u32, buf: &[u8], dst: u32, tag: i32) -> Result<()> {
        self.send_under(ctx, buf, (dst, tag), false)
    }

    /// [`Comm::send_in`] with the latitude of MPI's standard mode: under the transport's
    /// current eager limit, as [`Comm::isend_in`], so that a message of at most
    /// [`Comm::eager_payload_to`] bytes may go by rendezvous and wait for its receiver
    /// (where the transport lowered its limit since start-up).
    pub fn send_standard_in(&mut self, ctx: u32, buf: &[u8], dst: u32, tag: i32) -> Result<()> {
        self.send_under(ctx, buf, (dst, tag), true)
    }

    /// A blocking send under the start-up eager limit, or the `current` one.
    #[inline(always)]
    fn send_under(
        &mut self,
        ctx: u32,
        buf: &[u8],
        (dst, tag): (u32, i32),
        current: bool,
    ) -> Result<()> {
        // Fast path: an eager message the transport takes at once needs no request.
        if self.try_eager_in(ctx, buf, (dst, tag), current)? {
            return Ok(());
        }
        // SAFETY: `buf` is borrowed until wait returns, which is when the request has
        // completed.
        let req = unsafe {
            self.isend_tagged(buf.as_ptr(), buf.len(), (dst, tag, ctx), (true, current))
        }?;
        self.wait(req).map(|_| ())
    }

    /// [`Comm::send_in`] only where it ends at once, without waiting: an eager
    /// message that the transport takes now. Whether it went (false: nothing went
    /// out; the message is for a request then). For a caller that may not wait
    /// inside the layer (an MPI library whose other threads must get in meanwhile).
    #[inline(always)]
    pub fn try_send_in(&mut self, ctx: u32, buf: &[u8], dst: u32, tag: i32) -> Result<bool> {
        self.try_eager_in(ctx, buf, (dst, tag), false)
    }

    /// [`Comm::try_send_in`] for a nonblocking send, which may go by rendezvous: under
    /// the transport's current eager limit, which may have fallen below the one
    /// [`Comm::eager_payload_to`] tells (see [`Comm::isend_in`]).
    #[inline(always)]
    pub fn try_isend_in(&mut self, ctx: u32, buf: &[u8], dst: u32, tag: i32) -> Result<bool> {
        self.try_eager_in(ctx, buf, (dst, tag), true)
    }

    #[inline(always)]
    fn try_eager_in(
        &mut self,
        ctx: u32,
        buf: &[u8],
        (dst, tag): (u32, i32),
        current: bool,
    ) -> Result<bool> {
        if tag < 0 {
            return Err(Error::BadTag(tag));
        }
        let (mi, ep) = self.route(dst)?;
        Ok(
            buf.len() + protocol::EAGER_HEADER <= self.eager_for(mi, buf.len(), current)
                && self.try_eager(mi, ep, buf, tag, ctx)?,
        )
    }

    /// The eager limit of module `mi` for a payload of `len` bytes: the one it had at
    /// start-up (which [`Comm::eager_payload_to`] tells), or where `current` and for
    /// payloads of [`EAGER_RECHECKED_FROM`] bytes and more, the module's current one
    /// where lower (`sm` lowers its limit while copies through its rings run slow).
    #[inline(always)]
    fn eager_for(&self, mi: usize, len: usize, current: bool) -> usize {
        let eager = self.eager[mi];
        if !current || len < EAGER_RECHECKED_FROM {
            return eager;
        }
        eager.min(self.modules[mi].attributes().eager_limit)
    }

    /// Receive into `buf` from `src` with `tag`.
    ///
    /// From one source with one tag, and with no other receive posted and no message
    /// waiting, the receive goes to the transport that reaches `src` when it matches
    /// receives itself ([`Module::expect`]): the message then lands in `buf` from the
    /// transport's poll loop. Whatever else matches it first (a message too long for
    /// `buf`, a rendezvous, the source's failure) ends it the usual way.
    #[inline(always)]
    pub fn recv(&mut self, buf: &mut [u8], src: Option<u32>, tag: Option<i32>) -> Result<Status> {
        self.recv_in(WORLD, buf, src, tag)
    }

    /// [`Comm::recv`] in context `ctx`.
    #[inline(always)]
    pub fn recv_in(
        &mut self,
        ctx: u32,
        buf: &mut [u8],
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Result<Status> {
        if let Some(t) = tag.filter(|t| *t < 0) {
            return Err(Error::BadTag(t));
        }
        if let (Some(s), Some(t)) = (src, tag) {
            if let Some(o) = self.offload(buf, s, t, ctx)? {
                return Withdraw(self).0.wait_offloaded(o, buf);
            }
        }
        self.recv_posted(buf, src, tag, ctx)
    }

    /// [`Comm::recv`] through a posted receive. (Its request lives outside the table:
    /// a blocking receive is the common case of latency-bound codes.)
    pub(super) fn recv_posted(
        &mut self,
        buf: &mut [u8],
        src: Option<u32>,
        tag: Option<i32>,
        ctx: u32,
    ) -> Result<Status> {
        let seen = self.signals.completed.load(Ordering::Acquire);
        // SAFETY: `buf` is borrowed mutably until wait returns.
        let req = unsafe { self.post_recv(buf.as_mut_ptr(), buf.len(), src, tag, ctx, true) }?;
        self.wait_since(req, seen)
    }

    /// Start sending `buf` to `dst` with `tag`.
    ///
    /// # Safety
    ///
    /// `buf` must stay valid and unmodified until the request completes.
    pub unsafe fn isend_raw(
        &mut self,
        buf: *const u8,
        len: usize,
        dst: u32,
        tag: i32,
    ) -> Result<ReqId> {
        // SAFETY: forwarded contract.
        unsafe { self.isend_in(WORLD, buf, len, dst, tag, SendMode::Standard) }
    }

    /// Start sending `len` bytes at `buf` to `dst` with `tag` in context `ctx`,
    /// completing as `mode` says. A standard send of at most
    /// [`Comm::eager_payload_to`] bytes goes eagerly unless the transport lowered its
    /// eager limit since start-up (`sm` while copies through its rings run slow): then
    /// it goes by rendezvous, and completes once its receiver matches it, as a larger
    /// one does. [`Comm::send_in`] keeps the start-up limit ([`Comm::send_standard_in`]
    /// does not).
    ///
    /// # Safety
    ///
    /// As [`Comm::isend_raw`].
    #[inline]
    pub unsafe fn isend_in(
        &mut self,
        ctx: u32,
        buf: *const u8,
        len: usize,
        dst: u32,
        tag: i32,
        mode: SendMode,
    ) -> Result<ReqId> {
        if tag < 0 {
            return Err(Error::BadTag(tag));
        }
        match mode {
            // SAFETY: forwarded contract.
            SendMode::Standard => unsafe {
                self.isend_tagged(buf, len, (dst, tag, ctx), (true, true))
            },
            // SAFETY: forwarded contract.
            SendMode::Synchronous => unsafe { self.isend_sync(buf, len, dst, tag, ctx) },
        }
    }

    /// [`Comm::isend_in`] in standard mode, for one of several sends this process starts
    /// at once to different ranks (as a broadcast's root does): a rendezvous message is
    /// not offered to be copied by both processes (see `msg_split_from`), so that each
    /// receiver reads its message alone, all at the same time.
    ///
    /// # Safety
    ///
    /// As [`Comm::isend_raw`].
    pub unsafe fn isend_unsplit_in(
        &mut self,
        ctx: u32,
        buf: *const u8,
        len: usize,
        dst: u32,
        tag: i32,
    ) -> Result<ReqId> {
        if tag < 0 {
            return Err(Error::BadTag(tag));
        }
        // SAFETY: forwarded contract.
        unsafe { self.isend_tagged(buf, len, (dst, tag, ctx), (false, true)) }
    }

    /// A synchronous send: an eager message the receiver answers once it is
    /// matched, or a rendezvous (which completes only once the receiver has read it).
    ///
    /// # Safety
    ///
    /// As [`Comm::isend_raw`].
    unsafe fn isend_sync(
        &mut self,
        buf: *const u8,
        len: usize,
        dst: u32,
        tag: i32,
        ctx: u32,
    ) -> Result<ReqId> {
        let (mi, ep) = self.route(dst)?;
        if len + protocol::SYNC_HEADER > self.eager[mi] {
            // SAFETY: forwarded contract.
            return unsafe { self.isend_tagged(buf, len, (dst, tag, ctx), (true, false)) };
        }
        // SAFETY: the caller promised `buf` is valid for `len` bytes.
        let data = unsafe { rbtl_btl::slice_at(buf, len) };
        let m = self.modules[mi].as_mut();
        let mut s = lock(&self.state);
        let req = s.new_req(Some(dst));
        if let Some(r) = s.reqs.get_mut(req) {
            r.status = Status {
                source: self.rank,
                tag,
                len,
            };
            r.cancellable = true;
        }
        let head = protocol::sync_header(tag, ctx, req);
        match s.send_or_defer(m, mi, ep, protocol::EAGER_SYNC, &head, data) {
            Ok(()) => Ok(req),
            Err(e) => {
                s.drop_req(req);
                Err(e)
            }
        }
    }

    /// Hand an eager message straight to the transport if nothing waits for room:
    /// whether it took it (false: nothing went out, the general path queues it).
    #[inline(always)]
    fn try_eager(
        &mut self,
        mi: usize,
        ep: Endpoint,
        buf: &[u8],
        tag: i32,
        ctx: u32,
    ) -> Result<bool> {
        if self.signals.deferred.load(Ordering::Acquire) != 0 {
            return Ok(false);
        }
        let m = self.modules[mi].as_mut();
        let head = protocol::eager_header(tag, ctx);
        match state::transmit(m, ep, protocol::EAGER, &head, buf) {
            Ok(()) => Ok(true),
            Err(rbtl_btl::Error::OutOfResource(_)) => Ok(false),
            Err(e) => {
                let routes = self.routes.iter().map(|&r| Some(r));
                Err(state::transport_error(routes, (mi, ep), e))
            }
        }
    }

    /// Start sending `len` bytes at `buf` to `dst` with `tag`, which may be one of the
    /// layer's own (negative) tags; a rendezvous is offered to be split
    /// ([`super::split`]) only where `may_split`. Eager under the transport's current
    /// limit where `current_eager` (a nonblocking send's, see [`Comm::isend_in`], or
    /// [`Comm::send_standard_in`]'s), else under the start-up one: then a message of
    /// at most [`Comm::eager_payload_to`] bytes never waits for its receiver to match it.
    ///
    /// # Safety
    ///
    /// As [`Comm::isend_raw`]: `buf` must be valid for reads of `len` bytes, and stay
    /// valid and unmodified until the request completes.
    pub(super) unsafe fn isend_tagged(
        &mut self,
        buf: *const u8,
        len: usize,
        (dst, tag, ctx): (u32, i32, u32),
        (may_split, current_eager): (bool, bool),
    ) -> Result<ReqId> {
        let (mi, ep) = self.route(dst)?;
        let eager = self.eager_for(mi, len, current_eager);
        if len + protocol::EAGER_HEADER <= eager {
            // SAFETY: the caller promised `buf` is valid for `len` bytes.
            let data = unsafe { rbtl_btl::slice_at(buf, len) };
            if self.try_eager(mi, ep, data, tag, ctx)? {
                // The bytes were copied: the request needs no entry (its id carries
                // its status).
                return Ok(requests::completed_send(len, tag));
            }
        }
        let m = self.modules[mi].as_mut();
        let mut s = lock(&self.state);
        if len + protocol::EAGER_HEADER <= eager {
            // SAFETY: the caller promised `buf` is valid for `len` bytes.
            let data = unsafe { rbtl_btl::slice_at(buf, len) };
            let head = protocol::eager_header(tag, ctx);
            if len < LEND_FROM {
                // Sent or deferred, the bytes were copied: the buffer is free again,
                // and the request needs no entry (its id carries its status).
                s.send_or_defer(m, mi, ep, protocol::EAGER, &head, data)?;
                return Ok(requests::completed_send(len, tag));
            }
            let status = Status {
                source: self.rank,
                tag,
                len,
            };
            // SAFETY: the caller keeps `buf` valid and unmodified until the request
            // completes.
            let lent =
                unsafe { s.send_or_lend(m, (mi, ep), protocol::EAGER, &head, data, dst, status) }?;
            return Ok(lent.unwrap_or_else(|| requests::completed_send(len, tag)));
        }
        let req = s.new_req(Some(dst));
        let status = Status {
            source: self.rank,
            tag,
            len,
        };
        // Where the receiver's transport reads this process's memory by its address
        // (and that is worth it for the size), the buffer needs no registration: the
        // caller keeps it valid until the request completes, at the FIN. A large one is
        // offered to be copied by both processes (`super::split`), which also needs it
        // named by address, whatever its size; not while rendezvous sends to other ranks
        // are under way (each of their receivers reads alone, all at once, where this
        // process's copies would follow one another).
        let attrs = m.attributes();
        let may = attrs.flags.contains(BtlFlags::UNREGISTERED_REMOTE) && s.names_by_address_to(dst);
        let split = may && may_split && len >= s.split_from && !s.rendezvous_to_others(dst);
        let by_address = may && (len < attrs.unregistered_remote_below || split);
        // Where the transport finds no size worth naming by address alone, a split
        // offer carries a registration too: the receiver splits a lone message and
        // reads one of a stream with the registration, which lets the transport choose
        // its faster way (`super::split`).
        let registered = !by_address || attrs.unregistered_remote_below == 0;
        let handle = if !registered {
            Ok(None)
        } else {
            // SAFETY: the caller promised `buf` stays valid until the request
            // completes, which drops the handle.
            unsafe {
                m.register_mem(
                    Some(ep),
                    buf as usize,
                    len,
                    Access::LOCAL_READ | Access::REMOTE_READ,
                )
            }
            .map(Some)
            .map_err(Error::from)
        };
        let started = handle.and_then(|handle| {
            let rts = protocol::Rts {
                tag,
                ctx,
                len,
                sreq: req,
                addr: buf as u64,
                handle: handle.as_ref().map(|h| *h.remote()),
                split,
            };
            if let Some(r) = s.reqs.get_mut(req) {
                r.named = if handle.is_none() || split {
                    NonZeroU64::new(buf as u64)
                } else {
                    None
                };
                r.handle = handle.map(Box::new);
                r.status = status;
                r.cancellable = true;
            }
            s.send_or_defer(m, mi, ep, protocol::RTS, &rts.encode(), &[])
        });
        match started {
            Ok(()) => {
                s.rendezvous_started(req, dst);
                Ok(req)
            }
            Err(e) => {
                s.drop_req(req);
                Err(e)
            }
        }
    }

    /// Start receiving into `buf` from `src` (or [`ANY_SOURCE`]) with `tag` (or
    /// [`ANY_TAG`]).
    ///
    /// # Safety
    ///
    /// `buf` must stay valid, and not be read or written by anyone else, until the
    /// request completes.
    pub unsafe fn irecv_raw(
        &mut self,
        buf: *mut u8,
        cap: usize,
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Result<ReqId> {
        // SAFETY: forwarded contract.
        unsafe { self.irecv_in(WORLD, buf, cap, src, tag) }
    }

    /// [`Comm::irecv_raw`] in context `ctx`.
    ///
    /// # Safety
    ///
    /// As [`Comm::irecv_raw`].
    pub unsafe fn irecv_in(
        &mut self,
        ctx: u32,
        buf: *mut u8,
        cap: usize,
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Result<ReqId> {
        if let Some(t) = tag.filter(|t| *t < 0) {
            return Err(Error::BadTag(t));
        }
        // SAFETY: forwarded contract.
        unsafe { self.post_recv(buf, cap, src, tag, ctx, false) }
    }

    /// What the first message waiting for a receive from `src` with `tag` in `ctx`
    /// would report (after one round of progress), without receiving it
    /// (`MPI_Iprobe`).
    pub fn iprobe_in(
        &mut self,
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Result<Option<Status>> {
        if let Some(t) = tag.filter(|t| *t < 0) {
            return Err(Error::BadTag(t));
        }
        let failed = self.failed_sender(src)?;
        self.progress();
        match (lock(&self.state).peek_unexpected(src, tag, ctx), failed) {
            (None, Some(e)) => Err(e),
            (found, _) => Ok(found),
        }
    }

    /// Take the first message waiting for a receive from `src` with `tag` in `ctx`
    /// out of the queue, for [`Comm::imrecv`] (`MPI_Improbe`): no other receive can
    /// match it any more.
    pub fn improbe_in(
        &mut self,
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Result<Option<(Matched, Status)>> {
        if let Some(t) = tag.filter(|t| *t < 0) {
            return Err(Error::BadTag(t));
        }
        let failed = self.failed_sender(src)?;
        self.progress();
        let u = lock(&self.state).take_unexpected(src, tag, ctx);
        if let (None, Some(e)) = (&u, failed) {
            return Err(e);
        }
        Ok(u.map(|u| {
            let status = u.status();
            (Matched(u), status)
        }))
    }

    /// Receive the message `m` (from [`Comm::improbe_in`]) into `cap` bytes at `buf`
    /// (`MPI_Imrecv`).
    ///
    /// # Safety
    ///
    /// As [`Comm::irecv_raw`].
    pub unsafe fn imrecv(&mut self, m: Matched, buf: *mut u8, cap: usize) -> ReqId {
        let (src, tag, ctx) = m.0.key();
        // The answer to a synchronous sender, or the rendezvous's get, goes out
        // through its route's module, which must be driven until it is done (a
        // module with no peer elsewhere, as `self`, is driven only when marked).
        if let Some(&(mi, _)) = self.routes.get(src as usize) {
            self.dirty[mi] = true;
        }
        let mut s = lock(&self.state);
        let posted = Posted {
            req: s.new_req(Some(src)),
            src: Some(src),
            tag: Some(tag),
            ctx,
            addr: buf as usize,
            cap,
        };
        let req = posted.req;
        deliver_unexpected(&self.state, &mut self.modules, &mut s, &posted, m.0);
        req
    }

    /// Cancel request `req` if it is a receive that no message has matched yet: it
    /// then completes with [`Error::Cancelled`]. Whether it was cancelled (a send, or
    /// a receive already matched, is not: see [`Comm::cancel_send`]).
    pub fn cancel(&mut self, req: ReqId) -> bool {
        lock(&self.state).cancel_posted(req)
    }

    /// Start receiving into `cap` bytes at `buf` from `src` with `tag`, which may be
    /// one of the layer's own (negative) tags.
    ///
    /// # Safety
    ///
    /// As [`Comm::irecv_raw`]: `buf` must be valid for writes of `cap` bytes, and not
    /// be read or written by anyone else, until the request completes.
    pub(super) unsafe fn irecv_tagged(
        &mut self,
        buf: *mut u8,
        cap: usize,
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Result<ReqId> {
        // SAFETY: forwarded contract.
        unsafe { self.post_recv(buf, cap, src, tag, WORLD, false) }
    }

    /// End request `req`, which its caller will not wait for: a receive still posted
    /// leaves the queue; one whose transfer is under way (a rendezvous) is waited for,
    /// since the transport may still write its buffer. Afterwards no transfer touches
    /// the request's buffer.
    pub(super) fn withdraw_request(&mut self, req: ReqId) {
        if requests::as_completed_send(req).is_some() {
            return;
        }
        if !lock(&self.state).withdraw(req) {
            // Ends with the transfer, or with its peer's failure or timeout.
            let _ = self.wait(req);
        }
    }

    /// Post a receive (the blocking one outside the request table).
    ///
    /// # Safety
    ///
    /// As [`Comm::irecv_raw`].
    #[inline]
    unsafe fn post_recv(
        &mut self,
        buf: *mut u8,
        cap: usize,
        src: Option<u32>,
        tag: Option<i32>,
        ctx: u32,
        blocking: bool,
    ) -> Result<ReqId> {
        let failed = self.failed_sender(src)?;
        let mut s = lock(&self.state);
        if let Some(e) = failed.filter(|_| s.peek_unexpected(src, tag, ctx).is_none()) {
            return Err(e);
        }
        let req = if blocking {
            s.new_blocking(src)
        } else {
            s.new_req(src)
        };
        // (The common case writes the literal straight into the queue. Built on the
        // stack first, it was copied out by wide loads that cannot take their bytes
        // from the narrower stores still pending, so they waited for every older
        // store to land, a send's into a ring among them.)
        let addr = buf as usize;
        if s.unexpected.is_empty() {
            s.posted.push_back(Posted {
                req,
                src,
                tag,
                ctx,
                addr,
                cap,
            });
        } else {
            let posted = Posted {
                req,
                src,
                tag,
                ctx,
                addr,
                cap,
            };
            match_early(&self.state, &mut self.modules, &mut s, posted);
        }
        Ok(req)
    }

    /// Whether request `req` has completed; its outcome stays for [`Comm::test`] or
    /// [`Comm::wait`]. (False for an id that is not live.)
    pub fn is_complete(&self, req: ReqId) -> bool {
        if requests::as_completed_send(req).is_some() {
            return true;
        }
        let mut s = lock(&self.state);
        s.req_mut(req).is_some_and(|r| r.outcome.is_some())
    }

    /// How many requests have completed so far: while it stays the same, no request
    /// started before it was read has completed, but those that completed at once
    /// (a test right after the start tells).
    #[inline]
    pub fn completions(&self) -> usize {
        self.signals.completed.load(Ordering::Acquire)
    }

    /// Receives posted that no message has matched yet, and messages arrived that no
    /// receive has matched yet (for tools: the lengths of the two queues).
    pub fn queue_lengths(&self) -> (usize, usize) {
        let s = lock(&self.state);
        (s.posted.len(), s.unexpected.len())
    }

    /// The outcome of `req` if it has completed (then the request is gone).
    #[inline]
    pub fn test(&mut self, req: ReqId) -> Option<Result<Status>> {
        if let Some((len, tag)) = requests::as_completed_send(req) {
            return Some(Ok(Status {
                source: self.rank,
                tag,
                len,
            }));
        }
        lock(&self.state).take_outcome(req)
    }

    /// Progress until `req` completes. After [`SPIN_BEFORE_YIELD`] idle rounds it
    /// yields the processor between rounds, so that ranks sharing a core still advance.
    /// A wait for a peer that is gone or silent ends with an error (see "Failed and
    /// silent peers" in the [module documentation](super)).
    pub fn wait(&mut self, req: ReqId) -> Result<Status> {
        self.wait_since(req, usize::MAX)
    }

    /// [`Comm::wait`], where `seen` is the count of completed requests read before
    /// `req` was started (`usize::MAX`: unknown): the request is first looked at when
    /// that count has moved.
    #[inline]
    fn wait_since(&mut self, req: ReqId, mut seen: usize) -> Result<Status> {
        let mut idle = IdleWait::new();
        loop {
            let completed = self.signals.completed.load(Ordering::Acquire);
            if completed != seen {
                seen = completed;
                if let Some(outcome) = self.test(req) {
                    return outcome;
                }
            }
            if self.progress() == 0 {
                if idle.idle() {
                    self.look_at(req, &mut idle);
                }
            } else {
                idle.busy();
            }
        }
    }

    /// For a receive or probe from `src`: the error of a sender that failed (its
    /// messages that arrived before its end still match, and nothing else will),
    /// or the error of a rank that is not one.
    #[inline(always)]
    fn failed_sender(&mut self, src: Option<u32>) -> Result<Option<Error>> {
        match src.map(|s| self.route(s)) {
            Some(Err(e @ Error::PeerFailed { .. })) => Ok(Some(e)),
            Some(Err(e)) => Err(e),
            _ => Ok(None),
        }
    }
}

/// Deliver the earliest unexpected message matching `posted` (`s` is the borrowed
/// `state`), or post it.
#[cold]
#[inline(never)]
fn match_early(state: &Shared, modules: &mut [Box<dyn Module>], s: &mut State, posted: Posted) {
    match s.take_unexpected(posted.src, posted.tag, posted.ctx) {
        Some(u) => deliver_unexpected(state, modules, s, &posted, u),
        None => s.posted.push_back(posted),
    }
}

/// Deliver the unexpected message `u` into the receive `posted`.
fn deliver_unexpected(
    state: &Shared,
    modules: &mut [Box<dyn Module>],
    s: &mut State,
    posted: &Posted,
    u: Unexpected,
) {
    match u {
        Unexpected::Eager {
            src,
            tag,
            data,
            ack,
            ..
        } => {
            s.deliver_eager(posted, src, tag, &data);
            if let Some(sreq) = ack {
                let (mi, ep) = s.route[src as usize].expect("routed");
                s.ack_sync(modules[mi].as_mut(), mi, ep, sreq);
            }
        }
        Unexpected::Rts { src, rts } => {
            let (mi, ep) = s.route[src as usize].expect("routed");
            s.start_get(state, modules[mi].as_mut(), (mi, ep), posted, src, *rts);
        }
    }
}

/// A message taken out of the queue by a matched probe ([`Comm::improbe_in`]), to be
/// received by [`Comm::imrecv`].
pub struct Matched(Unexpected);
