// Over 600 lines on purpose: one type, the state every receive callback and every call
// of the layer borrows, with the operations on it that run under that one borrow.
//! The message layer's shared state: posted receives, unexpected messages and requests.
//! Receive callbacks (running inside a transport's progress) and the user's calls both
//! reach it through one borrow (a `RefCell`, see [`Local`]), never held while a
//! transport progresses.

use super::protocol::{self, Rts};
use super::{Error, Status};
use rbtl_btl::{
    Access, ActiveMessage, DesFlags, Endpoint, MemHandle, Module, PeerFailure, RdmaCompletion,
    Remote, SendiOutcome, Transfer,
};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

pub use super::requests::ReqId;

/// The id of the blocking receive's request (table ids are never 0: their generation
/// starts at 1).
pub const BLOCKING: ReqId = 0;
use super::requests::Requests;

/// A receive waiting for its message.
#[derive(Clone)]
pub struct Posted {
    pub req: ReqId,
    pub src: Option<u32>,
    pub tag: Option<i32>,
    /// The context (communicator) whose messages it takes.
    pub ctx: u32,
    pub addr: usize,
    pub cap: usize,
}

impl Posted {
    #[inline(always)]
    fn matches(&self, src: u32, tag: i32, ctx: u32) -> bool {
        self.ctx == ctx
            && self.src.is_none_or(|s| s == src)
            && self.tag.map_or(tag >= 0, |t| t == tag)
    }
}

/// A message that arrived before its receive.
pub enum Unexpected {
    /// An eager message; `ack` is the sender's request of a synchronous one, which
    /// waits for a FIN once the message is matched.
    Eager {
        src: u32,
        tag: i32,
        ctx: u32,
        data: Vec<u8>,
        ack: Option<u64>,
    },
    Rts {
        src: u32,
        rts: Box<Rts>,
    },
}

impl Unexpected {
    pub fn key(&self) -> (u32, i32, u32) {
        match self {
            Unexpected::Eager { src, tag, ctx, .. } => (*src, *tag, *ctx),
            Unexpected::Rts { src, rts } => (*src, rts.tag, rts.ctx),
        }
    }

    /// What a probe of it reports.
    pub fn status(&self) -> Status {
        match self {
            Unexpected::Eager { src, tag, data, .. } => Status {
                source: *src,
                tag: *tag,
                len: data.len(),
            },
            Unexpected::Rts { src, rts } => Status {
                source: *src,
                tag: rts.tag,
                len: rts.len,
            },
        }
    }
}

/// What a request is waiting for, and what it keeps alive meanwhile.
pub struct Req {
    /// How it ended, once it has (the error boxed: a request moves on every completion,
    /// and errors are rare).
    pub outcome: Option<Result<Status, Box<Error>>>,
    /// The peer it involves (None: a receive from any source).
    pub peer: Option<u32>,
    /// A registration to release when it completes (rendezvous buffers).
    /// (Boxed: a handle is a few hundred bytes, and every request would carry them.)
    pub handle: Option<Box<MemHandle>>,
    /// What a send reports when its rendezvous finishes.
    pub status: Status,
    /// The address of a rendezvous send's buffer named by it alone, without a
    /// registration (see [`super::named`]).
    pub named: Option<NonZeroU64>,
    /// A rendezvous send counted in [`State::rendezvous_out`] until it completes.
    pub rendezvous: bool,
    /// A send whose receiver may still drop it, not asked to yet: a rendezvous or a
    /// synchronous eager send ([`super::cancel`]).
    pub cancellable: bool,
}

impl Req {
    /// A request involving `peer`, not completed.
    #[inline(always)]
    pub fn new(peer: Option<u32>) -> Req {
        Req {
            outcome: None,
            peer,
            handle: None,
            status: Status {
                source: 0,
                tag: 0,
                len: 0,
            },
            named: None,
            rendezvous: false,
            cancellable: false,
        }
    }

    /// Its outcome; the registration it kept (if any) is released. (Taken apart by
    /// hand: dropping the whole request runs the drop glue even for no registration.)
    #[inline]
    fn into_outcome(self) -> Option<Result<Status, Error>> {
        if let Some(handle) = self.handle {
            drop(handle);
        }
        self.outcome.map(|r| r.map_err(|e| *e))
    }
}

/// A message for the transports that found no room yet.
pub struct Deferred {
    pub module: usize,
    pub endpoint: Endpoint,
    pub tag: rbtl_btl::Tag,
    /// Its bytes: all of them, or the header alone where the payload is `lent`.
    pub bytes: Vec<u8>,
    pub lent: Option<Lent>,
}

/// A deferred message's payload left in the sender's buffer, which its send request
/// holds until a transport takes the message ([`State::send_or_lend`]).
pub struct Lent {
    pub addr: usize,
    pub len: usize,
    pub req: ReqId,
}

impl Deferred {
    /// The payload in the sender's buffer, if lent (else empty: `bytes` hold it all).
    ///
    /// # Safety
    ///
    /// A lent payload's buffer must still be valid: its request has not completed
    /// ([`State::send_or_lend`]'s contract).
    pub unsafe fn payload(&self) -> &[u8] {
        match &self.lent {
            // SAFETY: forwarded contract.
            Some(l) => unsafe { rbtl_btl::slice_at(l.addr as *const u8, l.len) },
            None => &[],
        }
    }
}

/// Counters the user's side reads without borrowing the state. Only the thread that
/// holds the `Comm` writes them (see [`Local`]), so they are bumped with a plain load
/// and store, not a locked read-modify-write.
#[derive(Debug, Default)]
pub struct Signals {
    /// Requests completed so far.
    pub completed: AtomicUsize,
    /// Messages waiting in `deferred`, and served requests in `later`.
    pub deferred: AtomicUsize,
    /// Peers known to have failed.
    pub failed: AtomicUsize,
    /// The blocking receive handed to its transport, as [`offload_key`] of its
    /// source and tag; 0 when there is none (or a callback withdrew it).
    pub offloaded: AtomicU64,
}

/// The value of [`Signals::offloaded`] for a receive from `src` with `tag` (a tag of
/// a receive is not negative: it fits 31 bits).
pub fn offload_key(src: u32, tag: i32) -> u64 {
    1 << 63 | u64::from(src) << 31 | u64::from(tag as u32 & 0x7fff_ffff)
}

/// The source in a non-zero [`offload_key`].
fn offload_source(key: u64) -> u32 {
    (key >> 31) as u32
}

/// Everything shared with the callbacks.
#[derive(Default)]
pub struct State {
    /// Lock-free hints for the fast paths.
    pub signals: Arc<Signals>,
    /// Per rank: (module, endpoint).
    pub route: Vec<Option<(usize, Endpoint)>>,
    pub posted: VecDeque<Posted>,
    pub unexpected: VecDeque<Unexpected>,
    pub reqs: Requests,
    /// Ranks known to have failed, and why.
    pub failed: HashMap<u32, PeerFailure>,
    /// Ranks of other jobs this process disconnected from: their end is no failure
    /// here ([`super::Comm::disconnect_from`]).
    pub departed: HashSet<u32>,
    /// The request of the blocking receive in progress, if any (id [`BLOCKING`]).
    pub blocking: Option<Req>,
    /// The context of the receive handed to a transport (see [`Signals::offloaded`]).
    pub offloaded_ctx: u32,
    /// Messages waiting for room, in order per destination.
    pub deferred: VecDeque<Deferred>,
    /// The handler of served contexts, and the reply it writes into.
    pub server: Option<super::served::Server>,
    pub reply: Vec<u8>,
    /// Served requests to offer again.
    pub later: VecDeque<super::served::Later>,
    /// Matched receives whose sender named its buffer by address alone, which the
    /// transport could not read: waiting for its registration, by (source, sender's
    /// request) ([`super::named`]).
    pub awaiting_handle: HashMap<(u32, u64), (Posted, Box<Rts>)>,
    /// Per rank: its transport refused to read this process's buffers by address,
    /// so rendezvous sends to it register them.
    pub named_refused: Vec<bool>,
    /// Receives whose message both processes copy, by request ([`super::split`]).
    pub splits: HashMap<ReqId, super::split::Split>,
    /// Messages of this many bytes and more are split (`msg_split_from`).
    pub split_from: usize,
    /// Per rank: rendezvous sends to it not yet complete (a receive from it is not
    /// split while this process has its own under way: the sender is busy with them).
    pub rendezvous_out: Vec<u32>,
    /// Rendezvous sends not yet complete, to every rank (the sum of `rendezvous_out`).
    pub rendezvous_out_all: u32,
    /// Per rank: reads of its rendezvous messages under way, not split (a message
    /// offered both ways is split only while none is: [`super::split`]).
    pub reads_from: Vec<u32>,
}

/// The state, shared between the [`Comm`](super::Comm) and the receive and
/// completion callbacks it installs in its modules.
///
/// A `RefCell`, not a mutex: the modules belong to the `Comm`, and their callbacks run
/// only inside module calls made through it (`progress`, `flush`), so every access
/// happens on the thread that holds `&mut Comm`, one at a time. An uncontended mutex
/// cost more than the rest of a small message's receive.
pub struct Local(RefCell<State>);

// SAFETY: see the type's documentation: the clones of the `Arc<Local>` live only in
// the `Comm` and in callbacks owned by its modules, and are reached only through
// `&mut Comm`, so never from two threads at once; moving the whole `Comm` to another
// thread moves every clone with it.
unsafe impl Send for Local {}
// SAFETY: as above.
unsafe impl Sync for Local {}

/// The state, shared.
pub type Shared = Arc<Local>;

/// Wrap the state for sharing.
pub fn shared(state: State) -> Shared {
    Arc::new(Local(RefCell::new(state)))
}

/// Borrow the state (callbacks never run while a borrow is held: no module call made
/// under it runs callbacks).
#[inline(always)]
pub fn lock(s: &Shared) -> std::cell::RefMut<'_, State> {
    s.0.borrow_mut()
}

/// Entry `i` of a table indexed by rank or endpoint, grown with default entries to
/// hold it.
pub fn slot<T: Clone + Default>(table: &mut Vec<T>, i: usize) -> &mut T {
    if table.len() <= i {
        table.resize(i + 1, T::default());
    }
    &mut table[i]
}

/// Take one from counter `i` of `table` (a count [`slot`] raised); false where it was
/// already 0 or never raised.
pub fn unslot(table: &mut [u32], i: usize) -> bool {
    match table.get_mut(i).filter(|n| **n > 0) {
        Some(n) => {
            *n -= 1;
            true
        }
        None => false,
    }
}

/// Set a signal only this thread writes.
pub fn set(signal: &AtomicU64, value: u64) {
    signal.store(value, Ordering::Release);
}

/// Add `by` to a counter only this thread writes.
pub fn bump(counter: &AtomicUsize, by: isize) {
    let v = counter.load(Ordering::Relaxed);
    counter.store(v.wrapping_add_signed(by), Ordering::Release);
}

/// A transport's error for a transfer to `(module, ep)`, in this layer's terms: a
/// failed peer is [`Error::PeerFailed`] under its rank here, which `routes` (per rank
/// here, its module and endpoint) tell (a bridge's module numbers its peers the
/// launcher's way).
#[cold]
#[inline(never)]
pub fn transport_error(
    routes: impl IntoIterator<Item = Option<(usize, Endpoint)>>,
    (module, ep): (usize, Endpoint),
    e: rbtl_btl::Error,
) -> Error {
    match e {
        rbtl_btl::Error::PeerFailed { rank, why } => {
            let here = routes
                .into_iter()
                .position(|r| r == Some((module, ep)))
                .map_or(rank, |r| r as u32);
            Error::PeerFailed { rank: here, why }
        }
        e => e.into(),
    }
}

/// Hand `header` and `payload` to the transport: inline, or through the descriptor it
/// gives back (which it then owns). `OutOfResource` means nothing went out.
#[inline(always)]
pub fn transmit(
    m: &mut dyn Module,
    ep: Endpoint,
    tag: rbtl_btl::Tag,
    header: &[u8],
    payload: &[u8],
) -> Result<(), rbtl_btl::Error> {
    match m.sendi(&ActiveMessage::new(ep, tag, header, payload))? {
        SendiOutcome::Sent => Ok(()),
        SendiOutcome::Descriptor(mut d) => {
            d.flags |= DesFlags::OWNERSHIP;
            match m.send(ep, d, tag) {
                Ok(_) => Ok(()),
                Err(e) => {
                    let _ = m.free(e.descriptor);
                    Err(e.error)
                }
            }
        }
    }
}

impl State {
    /// The request `id` (including the blocking one).
    #[inline(always)]
    pub fn req_mut(&mut self, id: ReqId) -> Option<&mut Req> {
        if id == BLOCKING {
            self.blocking.as_mut()
        } else {
            self.reqs.get_mut(id)
        }
    }

    /// The outcome of request `id` if it has completed; the request is then gone.
    /// An id that is not live is an error outcome.
    #[inline]
    pub fn take_outcome(&mut self, id: ReqId) -> Option<Result<Status, Error>> {
        let unknown = || Some(Err(Error::UnknownRequest(id)));
        if id == BLOCKING {
            return match &self.blocking {
                None => unknown(),
                Some(r) if r.outcome.is_some() => self.blocking.take().and_then(Req::into_outcome),
                Some(_) => None,
            };
        }
        match self.reqs.take_completed(id) {
            Err(()) => unknown(),
            Ok(done) => done.and_then(Req::into_outcome),
        }
    }

    /// Forget a request that failed before it started.
    pub fn drop_req(&mut self, id: ReqId) {
        if id == BLOCKING {
            self.blocking = None;
        } else {
            self.reqs.remove(id);
        }
    }

    /// Take back request `id`, which nobody will wait for: a receive still posted
    /// leaves the queue, and it or a request that has ended is forgotten. False (the
    /// request kept) when it is under way: a transport may still read or write its
    /// buffer, so it must be waited for.
    pub fn withdraw(&mut self, id: ReqId) -> bool {
        if let Some(i) = self.posted.iter().position(|p| p.req == id) {
            self.posted.remove(i);
            self.drop_req(id);
            return true;
        }
        match self.req_mut(id) {
            Some(r) if r.outcome.is_none() => false,
            Some(_) => {
                self.drop_req(id);
                true
            }
            None => true,
        }
    }

    /// Cancel request `id` if it is a receive still waiting for its message: it
    /// completes as [`Error::Cancelled`]. Whether it was.
    pub fn cancel_posted(&mut self, id: ReqId) -> bool {
        let Some(i) = self.posted.iter().position(|p| p.req == id) else {
            return false;
        };
        self.posted.remove(i);
        self.complete(id, Err(Error::Cancelled));
        true
    }

    /// The request of a blocking receive: there is at most one (a blocking call holds
    /// the `Comm`), so it lives outside the table.
    #[inline(always)]
    pub fn new_blocking(&mut self, peer: Option<u32>) -> ReqId {
        self.blocking = Some(Req::new(peer));
        BLOCKING
    }

    /// A new request involving `peer`.
    pub fn new_req(&mut self, peer: Option<u32>) -> ReqId {
        self.reqs.insert(|| Req::new(peer))
    }

    /// Finish request `req` (releasing what it kept).
    pub fn complete(&mut self, req: ReqId, outcome: Result<Status, Error>) {
        self.finish(req, || outcome.map_err(Box::new));
    }

    /// [`State::complete`] with success (the common case, which moves no error).
    #[inline(always)]
    pub fn complete_ok(&mut self, req: ReqId, status: Status) {
        self.finish(req, || Ok(status));
    }

    /// Release what `req` kept and store its outcome (the first one wins).
    #[inline(always)]
    fn finish(&mut self, req: ReqId, outcome: impl FnOnce() -> Result<Status, Box<Error>>) {
        if let Some(r) = self.req_mut(req) {
            // (Tested first: storing None runs the drop glue even when there is
            // nothing to drop, on every message.)
            if r.handle.is_some() {
                r.handle = None;
            }
            r.outcome.get_or_insert_with(outcome);
            let counted = std::mem::take(&mut r.rendezvous)
                .then_some(r.peer)
                .flatten();
            bump(&self.signals.completed, 1);
            if let Some(peer) = counted {
                self.rendezvous_ended(peer);
            }
        }
    }

    /// A rendezvous send to `rank` started: counted until it completes.
    pub fn rendezvous_started(&mut self, req: ReqId, rank: u32) {
        if let Some(r) = self.req_mut(req) {
            r.rendezvous = true;
            *slot(&mut self.rendezvous_out, rank as usize) += 1;
            self.rendezvous_out_all += 1;
        }
    }

    fn rendezvous_ended(&mut self, rank: u32) {
        if unslot(&mut self.rendezvous_out, rank as usize) {
            self.rendezvous_out_all -= 1;
        }
    }

    /// Whether rendezvous sends to ranks other than `rank` are under way.
    pub fn rendezvous_to_others(&self, rank: u32) -> bool {
        let to_it = self.rendezvous_out.get(rank as usize).copied().unwrap_or(0);
        self.rendezvous_out_all > to_it
    }

    /// Whether anything waits to go to `rank`.
    pub fn has_deferred_to(&self, module: usize, ep: Endpoint) -> bool {
        self.deferred
            .iter()
            .any(|d| d.module == module && d.endpoint == ep)
    }

    /// Send `bytes` on `tag` now if the transport takes them, else after what waits.
    pub fn send_or_defer(
        &mut self,
        m: &mut dyn Module,
        module: usize,
        ep: Endpoint,
        tag: rbtl_btl::Tag,
        header: &[u8],
        payload: &[u8],
    ) -> Result<(), Error> {
        if self.sent_now(m, (module, ep), tag, header, payload)? {
            return Ok(());
        }
        let mut bytes = Vec::with_capacity(header.len() + payload.len());
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(payload);
        self.defer(Deferred {
            module,
            endpoint: ep,
            tag,
            bytes,
            lent: None,
        });
        Ok(())
    }

    /// Whether the transport took the message now; false where it found no room, or
    /// where something waits towards the same peer already (which the message must not
    /// overtake).
    fn sent_now(
        &mut self,
        m: &mut dyn Module,
        (module, ep): (usize, Endpoint),
        tag: rbtl_btl::Tag,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, Error> {
        if self.has_deferred_to(module, ep) {
            return Ok(false);
        }
        match transmit(m, ep, tag, header, payload) {
            Err(rbtl_btl::Error::OutOfResource(_)) => Ok(false),
            Err(e) => Err(transport_error(self.route.iter().copied(), (module, ep), e)),
            Ok(()) => Ok(true),
        }
    }

    /// Queue `d` behind what waits for room, counted in [`Signals::deferred`].
    fn defer(&mut self, d: Deferred) {
        bump(&self.signals.deferred, 1);
        self.deferred.push_back(d);
    }

    /// As [`State::send_or_defer`], but a message that must wait keeps its payload in
    /// the sender's buffer rather than a copy (as Open MPI's ob1 keeps a send that
    /// found no room pending): the request returned (`None`: sent now) holds the buffer
    /// and completes, with `status`, when a transport takes the message.
    ///
    /// # Safety
    ///
    /// `payload` must stay valid and unmodified until the returned request completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn send_or_lend(
        &mut self,
        m: &mut dyn Module,
        (module, ep): (usize, Endpoint),
        tag: rbtl_btl::Tag,
        header: &[u8],
        payload: &[u8],
        peer: u32,
        status: Status,
    ) -> Result<Option<ReqId>, Error> {
        if self.sent_now(m, (module, ep), tag, header, payload)? {
            return Ok(None);
        }
        let req = self.new_req(Some(peer));
        if let Some(r) = self.reqs.get_mut(req) {
            r.status = status;
        }
        self.defer(Deferred {
            module,
            endpoint: ep,
            tag,
            bytes: header.to_vec(),
            lent: Some(Lent {
                addr: payload.as_ptr() as usize,
                len: payload.len(),
                req,
            }),
        });
        Ok(Some(req))
    }

    /// A deferred message left: a transport took it (`Ok`) or refused it for good. Its
    /// lent buffer, if any, is free again: the request completes.
    pub fn deferred_left(&mut self, d: &Deferred, outcome: Result<(), rbtl_btl::Error>) {
        let Some(l) = &d.lent else {
            if let Err(e) = outcome {
                tracing::warn!(%e, "dropping a deferred message");
            }
            return;
        };
        match outcome {
            Ok(()) => {
                let status = self.req_mut(l.req).map(|r| r.status);
                if let Some(status) = status {
                    self.complete_ok(l.req, status);
                }
            }
            Err(e) => {
                let e = transport_error(self.route.iter().copied(), (d.module, d.endpoint), e);
                self.complete(l.req, Err(e));
            }
        }
    }

    /// The first posted receive matching a message from `src` with `tag` in `ctx`.
    #[inline(always)]
    pub fn take_posted(&mut self, src: u32, tag: i32, ctx: u32) -> Option<Posted> {
        // Usually the oldest receive matches: take it without the general removal.
        if self.posted.front()?.matches(src, tag, ctx) {
            return self.posted.pop_front();
        }
        let i = self.posted.iter().position(|p| p.matches(src, tag, ctx))?;
        self.posted.remove(i)
    }

    /// The posted receive a message from `src` with `tag` is for, if any. Without
    /// one, the message is for the blocking receive handed to transport `m` if it
    /// matches that: the receive is withdrawn from `m` (which did not take the
    /// message: one too long, or a rendezvous), to be posted after the message is
    /// kept as unexpected.
    #[inline(always)]
    pub fn take_match(
        &mut self,
        m: &mut dyn Module,
        src: u32,
        tag: i32,
        ctx: u32,
    ) -> Option<Posted> {
        let p = self.take_posted(src, tag, ctx);
        if p.is_none() {
            self.withdraw_offloaded(m, src, tag, ctx);
        }
        p
    }

    #[cold]
    #[inline(never)]
    fn withdraw_offloaded(&mut self, m: &mut dyn Module, src: u32, tag: i32, ctx: u32) {
        if tag >= 0
            && self.signals.offloaded.load(Ordering::Relaxed) == offload_key(src, tag)
            && self.offloaded_ctx == ctx
        {
            m.cancel_expected();
            set(&self.signals.offloaded, 0);
        }
    }

    /// Where the first unexpected message matching a receive from `src` with `tag` in
    /// `ctx` waits.
    fn find_unexpected(&self, src: Option<u32>, tag: Option<i32>, ctx: u32) -> Option<usize> {
        let probe = Posted {
            req: 0,
            src,
            tag,
            ctx,
            addr: 0,
            cap: 0,
        };
        self.unexpected.iter().position(|u| {
            let (s, t, c) = u.key();
            probe.matches(s, t, c)
        })
    }

    /// The first unexpected message matching a receive.
    pub fn take_unexpected(
        &mut self,
        src: Option<u32>,
        tag: Option<i32>,
        ctx: u32,
    ) -> Option<Unexpected> {
        let i = self.find_unexpected(src, tag, ctx)?;
        self.unexpected.remove(i)
    }

    /// What the first unexpected message matching a receive would report.
    pub fn peek_unexpected(&self, src: Option<u32>, tag: Option<i32>, ctx: u32) -> Option<Status> {
        let i = self.find_unexpected(src, tag, ctx)?;
        Some(self.unexpected[i].status())
    }

    /// Keep an eager message that no posted receive matches (a copy of its bytes).
    #[cold]
    #[inline(never)]
    pub fn keep_unexpected(&mut self, src: u32, tag: i32, ctx: u32, data: &[u8], ack: Option<u64>) {
        self.unexpected.push_back(Unexpected::Eager {
            src,
            tag,
            ctx,
            data: data.to_vec(),
            ack,
        });
    }

    /// Tell the sender of a synchronous eager message from `src` (its request
    /// `sreq`) that it was matched.
    pub fn ack_sync(&mut self, m: &mut dyn Module, module: usize, ep: Endpoint, sreq: u64) {
        self.send_fin(m, (module, ep), sreq, protocol::Fin::Taken);
    }

    /// Send `fin` for the sender's request `sreq` through `route` (module index,
    /// endpoint). A FIN that cannot go is logged: the peer is gone or unreachable, and
    /// its failure ends its request.
    pub fn send_fin(
        &mut self,
        m: &mut dyn Module,
        (module, ep): (usize, Endpoint),
        sreq: u64,
        fin: protocol::Fin,
    ) {
        let body = protocol::fin(sreq, fin);
        if let Err(e) = self.send_or_defer(m, module, ep, protocol::FIN, &body, &[]) {
            tracing::warn!(%e, ?fin, "could not send a FIN");
        }
    }

    /// Deliver eager data into a matched receive.
    #[inline(always)]
    pub fn deliver_eager(&mut self, p: &Posted, src: u32, tag: i32, data: &[u8]) {
        let n = data.len().min(p.cap);
        // SAFETY: `p.addr` and `p.cap` come from a receive whose caller promised the
        // buffer stays valid and unaliased until the request completes (now).
        unsafe { rbtl_btl::copy_bytes(data.as_ptr(), p.addr as *mut u8, n) };
        if data.len() > p.cap {
            let e = Error::Truncated {
                sender: src,
                tag,
                len: data.len(),
                capacity: p.cap,
            };
            return self.complete(p.req, Err(e));
        }
        let status = Status {
            source: src,
            tag,
            len: data.len(),
        };
        self.complete_ok(p.req, status);
    }

    /// Start the get of a matched rendezvous from `src` (reached by `route`: module
    /// index and endpoint): register the receive buffer, read the sender's buffer into
    /// it, then tell the sender (FIN).
    pub fn start_get(
        &mut self,
        shared: &Shared,
        m: &mut dyn Module,
        route: (usize, Endpoint),
        p: &Posted,
        src: u32,
        rts: Rts,
    ) {
        let ep = route.1;
        let fin = |s: &mut State, m: &mut dyn Module, ok: bool| {
            s.send_fin(m, route, rts.sreq, ok.into());
        };
        if rts.len > p.cap {
            self.complete(
                p.req,
                Err(Error::Truncated {
                    sender: src,
                    tag: rts.tag,
                    len: rts.len,
                    capacity: p.cap,
                }),
            );
            fin(self, m, false);
            return;
        }
        let status = Status {
            source: src,
            tag: rts.tag,
            len: rts.len,
        };
        if rts.len == 0 {
            self.complete(p.req, Ok(status));
            fin(self, m, true);
            return;
        }
        if rts.split && self.start_split(shared, m, route, p, src, &rts) {
            return;
        }
        // SAFETY: the receive's caller promised the buffer stays valid until the request
        // completes; the handle (if any) is dropped when it does (State::complete).
        let handle = match unsafe {
            super::pieces::register_local(m, ep, (p.addr, rts.len), Access::LOCAL_WRITE)
        } {
            Ok(h) => h,
            Err(e) => {
                self.complete(p.req, Err(e.into()));
                fin(self, m, false);
                return;
            }
        };
        let (state, req, sreq) = (shared.clone(), p.req, rts.sreq);
        let done = Box::new(move |m: &mut dyn Module, c: RdmaCompletion| {
            let mut s = lock(&state);
            unslot(&mut s.reads_from, src as usize);
            let ok = c.status.is_ok();
            let read = c.status.map_err(|e| Error::reading_from_sender(src, e));
            s.complete(req, read.map(|_| status));
            s.send_fin(m, route, sreq, ok.into());
        });
        let rh = rts.handle;
        // SAFETY: as above: the buffer stays valid until the request completes, which
        // is after the get's callback.
        let local = unsafe { super::pieces::local_side(p.addr, handle.as_ref()) };
        let remote = match &rh {
            Some(rh) => Remote::new(rts.addr, rh),
            // SAFETY: the sender vouched for its buffer by naming it without a
            // registration: it keeps it until our FIN (a transport that cannot reach
            // it so refuses the get, and the receive fails).
            None => unsafe { Remote::unregistered(rts.addr) },
        };
        let whole = Transfer::new(ep, local, remote, rts.len);
        // In pieces within the transport's get limit, completing as one.
        *slot(&mut self.reads_from, src as usize) += 1;
        let started = super::pieces::transfer_in_pieces(m, &whole, false, done);
        if started.is_err() {
            unslot(&mut self.reads_from, src as usize);
        }
        match started {
            Ok(()) => {
                if let (Some(r), Some(h)) = (self.req_mut(p.req), handle) {
                    r.handle = Some(Box::new(h));
                }
            }
            // Named by address, which this transport turned out not to reach: the
            // sender registers it (`super::named`).
            Err(rbtl_btl::Error::UnregisteredRemote) if rh.is_none() => {
                self.ask_for_handle(m, route, p, src, rts)
            }
            Err(e) => {
                self.complete(p.req, Err(e.into()));
                fin(self, m, false);
            }
        }
    }

    /// Whether operations under way involve `rank`: a request with it as its peer,
    /// or a message waiting for room towards it.
    pub fn involves(&self, rank: u32) -> bool {
        let pending = |r: &Req| r.outcome.is_none() && r.peer == Some(rank);
        self.reqs.iter().any(|(_, r)| pending(r))
            || self.blocking.as_ref().is_some_and(pending)
            || self
                .route
                .get(rank as usize)
                .copied()
                .flatten()
                .is_some_and(|(m, ep)| self.has_deferred_to(m, ep))
    }

    /// Keep [`Signals::failed`] the number of ranks known to have failed.
    pub fn count_failed(&self) {
        self.signals
            .failed
            .store(self.failed.len(), Ordering::Release);
    }

    /// A peer failed: fail what involves it (unless this process disconnected from
    /// it: then its end is no failure).
    pub fn peer_failed(&mut self, rank: u32, why: PeerFailure) {
        if self.departed.contains(&rank) {
            tracing::debug!(rank, %why, "a process disconnected from ended");
            return;
        }
        self.failed.insert(rank, why.clone());
        self.fail_awaiting_handles(rank, &why);
        self.fail_splits(rank, &why);
        self.count_failed();
        // What waits for room towards it never leaves (nor holds up what waits
        // behind it for others).
        if let Some(Some(to)) = self.route.get(rank as usize).copied() {
            let before = self.deferred.len();
            self.deferred.retain(|d| (d.module, d.endpoint) != to);
            bump(
                &self.signals.deferred,
                -((before - self.deferred.len()) as isize),
            );
        }
        let mut ids: Vec<ReqId> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.outcome.is_none() && r.peer == Some(rank))
            .map(|(id, _)| id)
            .collect();
        if self
            .blocking
            .as_ref()
            .is_some_and(|r| r.outcome.is_none() && r.peer == Some(rank))
        {
            ids.push(BLOCKING);
        }
        for id in ids {
            self.complete(
                id,
                Err(Error::PeerFailed {
                    rank,
                    why: why.clone(),
                }),
            );
        }
        self.posted.retain(|p| p.src != Some(rank));
        // An offloaded receive from it is posted again, and fails there.
        let offloaded = self.signals.offloaded.load(Ordering::Relaxed);
        if offloaded != 0 && offload_source(offloaded) == rank {
            set(&self.signals.offloaded, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{bump, offload_key, offload_source, transport_error, Deferred, Error, State};
    use rbtl_btl::{Endpoint, PeerFailure};
    use std::sync::atomic::Ordering;

    #[test]
    fn a_departed_rank_is_one_with_nothing_under_way_and_its_end_no_failure() {
        let mut s = State {
            route: vec![Some((0, Endpoint(0))), Some((1, Endpoint(0)))],
            ..State::default()
        };
        let req = s.new_req(Some(1));
        assert!(s.involves(1) && !s.involves(0));
        s.drop_req(req);
        assert!(!s.involves(1));
        // A message waiting for room towards `to`, as `send_or_defer` keeps it.
        let defer = |s: &mut State, to: usize| {
            let (module, endpoint) = s.route[to].unwrap();
            s.deferred.push_back(Deferred {
                module,
                endpoint,
                tag: rbtl_btl::Tag(0),
                bytes: Vec::new(),
                lent: None,
            });
            bump(&s.signals.deferred, 1);
        };
        defer(&mut s, 1);
        assert!(s.involves(1) && !s.involves(0));
        // A departed rank's end is not recorded; another's is, and counted, and
        // what waited for room towards it is dropped.
        s.departed.insert(1);
        s.peer_failed(1, PeerFailure::Ended("exited".into()));
        assert!(s.failed.is_empty());
        assert_eq!(s.signals.failed.load(Ordering::Acquire), 0);
        defer(&mut s, 0);
        s.peer_failed(0, PeerFailure::Ended("exited".into()));
        assert_eq!(s.signals.failed.load(Ordering::Acquire), 1);
        assert!(!s.involves(0) && s.involves(1));
        assert_eq!(s.signals.deferred.load(Ordering::Acquire), 1);
    }

    #[test]
    fn a_transports_failed_peer_is_named_by_its_rank_here() {
        // Ranks 0-1 on module 0; rank 2, a bridge's peer the launcher numbers 65537,
        // on module 1 at endpoint 0.
        let routes = [
            Some((0, Endpoint(0))),
            Some((0, Endpoint(1))),
            Some((1, Endpoint(0))),
        ];
        let failed = |rank| rbtl_btl::Error::PeerFailed {
            rank,
            why: PeerFailure::Broken("reset".into()),
        };
        let named = |route, e| transport_error(routes, route, e);
        assert!(matches!(
            named((1, Endpoint(0)), failed(65537)),
            Error::PeerFailed { rank: 2, .. }
        ));
        assert!(matches!(
            named((0, Endpoint(1)), failed(1)),
            Error::PeerFailed { rank: 1, .. }
        ));
        // An endpoint of no rank keeps the transport's number; other errors stay.
        assert!(matches!(
            named((1, Endpoint(5)), failed(9)),
            Error::PeerFailed { rank: 9, .. }
        ));
        assert!(matches!(
            named((0, Endpoint(0)), rbtl_btl::Error::OutOfResource("full")),
            Error::Btl(rbtl_btl::Error::OutOfResource(_))
        ));
    }

    #[test]
    fn offload_keys_name_one_source_and_tag() {
        let cases = [(0, 0), (1, 0), (0, 1), (u32::MAX, i32::MAX), (7, 1 << 30)];
        for (i, &(src, tag)) in cases.iter().enumerate() {
            let key = offload_key(src, tag);
            assert_ne!(key, 0, "0 means no receive");
            assert_eq!(offload_source(key), src);
            for &(s2, t2) in &cases[i + 1..] {
                assert_ne!(key, offload_key(s2, t2), "({src}, {tag}) vs ({s2}, {t2})");
            }
        }
    }
}
