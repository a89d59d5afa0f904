//! A small message layer on the BTL: the worked example of embedding it, the way an
//! MPI library's point-to-point layer (Open MPI's `pml/ob1`) does.
//!
//! * [`Comm::init`] takes the job from the PMI environment (or runs alone), opens the
//!   transports chosen by configuration, exchanges their addresses through the modex
//!   and routes each peer through the most exclusive transport that reaches it.
//! * Tagged send/receive, blocking and non-blocking, with any-source and any-tag and
//!   per-peer ordering (the transports deliver in order per endpoint). Messages up to
//!   the transport's eager limit go in one send; larger ones use rendezvous: a request
//!   carrying the sender's registration handle, an RDMA get by the receiver straight
//!   from the sender's buffer (registrations come from the registration cache), and a
//!   finish message. A receive buffer too small gives [`Error::Truncated`].
//! * One-sided windows: [`Window`] registers memory, exchanges handles, and offers put,
//!   get and flush.
//!
//! Non-blocking operations borrow their buffers for a [`Comm::scope`]: the scope waits
//! for everything started in it, so a buffer can never be freed under a transfer.

mod protocol;
mod requests;
mod state;
mod window;

pub use state::ReqId;
pub use window::Window;

use crate::pmi::Job;
use rbtl_btl::{Access, Endpoint, Expected, Module, Proc, Received};
use rbtl_config::Config;
use state::{lock, Posted, Shared, State, Unexpected};
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

/// Errors of the message layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// From a transport.
    #[error(transparent)]
    Btl(#[from] rbtl_btl::Error),
    /// From the configuration.
    #[error(transparent)]
    Config(#[from] rbtl_config::Error),
    /// From the process manager.
    #[error(transparent)]
    Pmi(#[from] crate::pmi::Error),
    /// The message does not fit the receive buffer: an eager message's first bytes
    /// were written, a rendezvous message was not transferred at all.
    #[error("message of {len} bytes from rank {sender} (tag {tag}) does not fit the {capacity}-byte receive buffer")]
    Truncated {
        /// Sender.
        sender: u32,
        /// Tag.
        tag: i32,
        /// Message length.
        len: usize,
        /// Receive buffer length.
        capacity: usize,
    },
    /// No selected transport reaches a rank.
    #[error(
        "rank {rank} is unreachable by the selected transports ({tried}): check the btl parameter"
    )]
    Unreachable {
        /// The rank.
        rank: u32,
        /// The transports tried.
        tried: String,
    },
    /// A peer died.
    #[error("rank {rank} failed: {why}")]
    PeerFailed {
        /// The rank.
        rank: u32,
        /// What was seen.
        why: String,
    },
    /// A rank outside the job.
    #[error("rank {0} is outside the job of {1} processes")]
    BadRank(u32, u32),
    /// User tags are non-negative.
    #[error("tag {0} is negative: user tags are >= 0")]
    BadTag(i32),
    /// A request id that is not (or no longer) live: each request is waited for once.
    #[error("request {0:#x} is unknown or was already waited for")]
    UnknownRequest(u64),
    /// A window used with a communicator other than the one that made it.
    #[error("this window belongs to another communicator")]
    WrongComm,
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which source a receive accepts.
pub const ANY_SOURCE: Option<u32> = None;
/// Which tag a receive accepts (any non-negative one).
pub const ANY_TAG: Option<i32> = None;

/// Idle progress rounds a wait spins before it starts yielding the processor.
pub const SPIN_BEFORE_YIELD: u32 = 1 << 14;

/// Internal tags (negative, so that [`ANY_TAG`] never matches them).
const BARRIER_TAG: i32 = i32::MIN;
const ALLTOALL_TAG: i32 = i32::MIN + 64;
/// Largest blob [`Comm::alltoall`] carries.
const ALLTOALL_MAX: usize = 1024;

/// A communicator over every rank of the job.
pub struct Comm {
    rank: u32,
    size: u32,
    id: u64,
    modules: Vec<Box<dyn Module>>,
    state: Shared,
    signals: Arc<state::Signals>,
    /// Per rank: the module and endpoint that reach it (fixed after init).
    routes: Vec<(usize, Endpoint)>,
    /// Per module: whether it reaches another rank (then it is always progressed),
    /// and whether work was started on it lately (a module that reaches only this
    /// process, `self`, is progressed only then: the poll loop is the latency).
    remote: Vec<bool>,
    dirty: Vec<bool>,
    /// Per module: its eager limit (read on every send).
    eager: Vec<usize>,
    /// The blocking receive in progress, when its transport matches it itself.
    offload: Option<Offload>,
    job: Job,
}

/// A blocking receive handed to its transport ([`Module::expect`]).
#[derive(Clone, Copy)]
struct Offload {
    module: usize,
    source: u32,
    tag: i32,
}

/// Withdraws the blocking receive from its transport, if it is still there, however
/// the receive ends (a callback may panic): the transport must never write a buffer
/// that `recv` has given back.
struct Withdraw<'a>(&'a mut Comm);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.0.withdraw();
    }
}

impl Comm {
    /// The job from the environment (PMI under a launcher, else alone) with the
    /// configuration from `RBTL_*` variables, `RBTL_CONFIG_FILE` and `settings`.
    pub fn init(settings: &[(&str, &str)]) -> Result<Comm> {
        let job = crate::pmi::job()?;
        let config = crate::configure(settings)?;
        Comm::with(job, &config)
    }

    /// Open the configured transports for `job` and connect every rank.
    pub fn with(mut job: Job, config: &Config) -> Result<Comm> {
        let modex = job.modex.as_mut();
        let node = node_name();
        modex.publish("node", node.as_bytes())?;
        let mut modules = crate::framework().open(config, modex)?;
        modex.fence()?;
        let procs: Vec<Proc> = (0..job.size)
            .map(|rank| {
                let node = modex.lookup(rank, "node")?.unwrap_or_default();
                Ok(Proc {
                    rank,
                    node: String::from_utf8_lossy(&node).into_owned(),
                })
            })
            .collect::<Result<_, rbtl_btl::Error>>()?;
        let mut state = State {
            route: vec![None; job.size as usize],
            ..State::default()
        };
        // Per module: endpoint -> rank (for its receive callbacks).
        let mut rank_of = Vec::new();
        for (mi, m) in modules.iter_mut().enumerate() {
            let eps = m.add_procs(&procs, modex)?;
            let mut map = Vec::new();
            for (rank, ep) in eps.into_iter().enumerate() {
                if let Some(ep) = ep {
                    let i = ep.0 as usize;
                    if map.len() <= i {
                        map.resize(i + 1, None);
                    }
                    map[i] = Some(rank as u32);
                    state.route[rank].get_or_insert((mi, ep));
                }
            }
            rank_of.push(Arc::<[Option<u32>]>::from(map));
        }
        if let Some(rank) = state.route.iter().position(Option::is_none) {
            let tried = modules
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(",");
            return Err(Error::Unreachable {
                rank: rank as u32,
                tried,
            });
        }
        let mut remote = vec![false; modules.len()];
        for (rank, r) in state.route.iter().enumerate() {
            if let Some((mi, _)) = r {
                remote[*mi] |= rank as u32 != job.rank;
            }
        }
        let dirty = vec![true; modules.len()];
        let eager = modules.iter().map(|m| m.attributes().eager_limit).collect();
        let routes: Vec<(usize, Endpoint)> = state
            .route
            .iter()
            .map(|r| r.expect("checked above"))
            .collect();
        let signals = state.signals.clone();
        let state: Shared = state::shared(state);
        for ((mi, m), ranks) in modules.iter_mut().enumerate().zip(rank_of) {
            register_callbacks(m.as_mut(), mi, &ranks, &state)?;
        }
        // Everyone has its callbacks in place before anyone sends.
        job.modex.fence()?;
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Ok(Comm {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            rank: job.rank,
            size: job.size,
            modules,
            state,
            signals,
            routes,
            remote,
            dirty,
            eager,
            offload: None,
            job,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The transport that carries traffic to `rank`.
    pub fn transport_to(&self, rank: u32) -> Option<&str> {
        let (m, _) = self.routes.get(rank as usize)?;
        Some(self.modules[*m].name())
    }

    /// The modules in use, most exclusive first.
    ///
    /// Borrowed, never handed out by value: the message layer's callbacks live in
    /// them, and they must stay with this `Comm` (see `state::Local`).
    pub fn modules(&mut self) -> impl Iterator<Item = &mut dyn Module> + '_ {
        self.modules
            .iter_mut()
            .map(|m| m.as_mut() as &mut dyn Module)
    }

    /// The identity of this communicator (windows check they are used with theirs).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The module and endpoint for `rank`; marks the module as having work.
    #[inline(always)]
    fn route(&mut self, rank: u32) -> Result<(usize, Endpoint)> {
        let Some(&route) = self.routes.get(rank as usize) else {
            return Err(Error::BadRank(rank, self.size));
        };
        if self.signals.failed.load(Ordering::Acquire) > 0 {
            self.check_alive(rank)?;
        }
        self.dirty[route.0] = true;
        Ok(route)
    }

    /// `PeerFailed` if `rank` is known to have failed.
    #[cold]
    #[inline(never)]
    fn check_alive(&self, rank: u32) -> Result<()> {
        match lock(&self.state).failed.get(&rank) {
            Some(why) => Err(Error::PeerFailed {
                rank,
                why: why.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Drive every transport once, then retry what waited for room.
    #[inline(always)]
    pub fn progress(&mut self) -> usize {
        let mut n = 0;
        for (i, m) in self.modules.iter_mut().enumerate() {
            if self.remote[i] || self.dirty[i] {
                let k = m.progress();
                self.dirty[i] = k > 0;
                n += k;
            }
        }
        if self.signals.deferred.load(Ordering::Acquire) == 0 {
            return n;
        }
        n + self.retry_deferred()
    }

    /// Send what waited for room, in order (kept out of `progress`, whose loop is the
    /// latency of every receive).
    #[cold]
    #[inline(never)]
    fn retry_deferred(&mut self) -> usize {
        let mut n = 0;
        let mut s = lock(&self.state);
        let waiting = s.deferred.len();
        for _ in 0..waiting {
            let Some(d) = s.deferred.pop_front() else {
                break;
            };
            state::bump(&self.signals.deferred, -1);
            self.dirty[d.module] = true;
            let m = self.modules[d.module].as_mut();
            match state::transmit(m, d.endpoint, d.tag, &d.bytes, &[]) {
                Ok(()) => n += 1,
                Err(rbtl_btl::Error::OutOfResource(_)) => {
                    // Keep the order: this one and everything behind it wait.
                    s.deferred.push_front(d);
                    state::bump(&self.signals.deferred, 1);
                    break;
                }
                Err(e) => tracing::warn!(%e, "dropping a deferred message"),
            }
        }
        n
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
        if tag < 0 {
            return Err(Error::BadTag(tag));
        }
        self.isend_tagged(buf, len, dst, tag)
    }

    /// Hand an eager message straight to the transport if nothing waits for room:
    /// whether it took it (false: nothing went out, the general path queues it).
    #[inline(always)]
    fn try_eager(&mut self, mi: usize, ep: Endpoint, buf: &[u8], tag: i32) -> Result<bool> {
        if self.signals.deferred.load(Ordering::Acquire) != 0 {
            return Ok(false);
        }
        let m = self.modules[mi].as_mut();
        match state::transmit(m, ep, protocol::EAGER, &tag.to_le_bytes(), buf) {
            Ok(()) => Ok(true),
            Err(rbtl_btl::Error::OutOfResource(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn isend_tagged(&mut self, buf: *const u8, len: usize, dst: u32, tag: i32) -> Result<ReqId> {
        let (mi, ep) = self.route(dst)?;
        let eager = self.eager[mi];
        if len + protocol::EAGER_HEADER <= eager {
            // SAFETY: the caller promised `buf` is valid for `len` bytes.
            let data = unsafe { std::slice::from_raw_parts(buf, len) };
            if self.try_eager(mi, ep, data, tag)? {
                // The bytes were copied: the request needs no entry (its id carries
                // its status).
                return Ok(requests::completed_send(len, tag));
            }
        }
        let m = self.modules[mi].as_mut();
        let mut s = lock(&self.state);
        if len + protocol::EAGER_HEADER <= eager {
            // SAFETY: the caller promised `buf` is valid for `len` bytes.
            let data = unsafe { std::slice::from_raw_parts(buf, len) };
            // Sent or deferred, the bytes were copied: the buffer is free again, and
            // the request needs no entry (its id carries its status).
            s.send_or_defer(m, mi, ep, protocol::EAGER, &tag.to_le_bytes(), data)?;
            return Ok(requests::completed_send(len, tag));
        }
        let req = s.new_req(Some(dst));
        let status = Status {
            source: self.rank,
            tag,
            len,
        };
        let started = {
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
            .map_err(Error::from)
            .and_then(|handle| {
                let rts = protocol::Rts {
                    tag,
                    len,
                    sreq: req,
                    addr: buf as u64,
                    handle: *handle.remote(),
                };
                if let Some(r) = s.reqs.get_mut(req) {
                    r.handle = Some(Box::new(handle));
                    r.status = status;
                }
                s.send_or_defer(m, mi, ep, protocol::RTS, &rts.encode(), &[])
            })
        };
        match started {
            Ok(()) => Ok(req),
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
        if let Some(t) = tag.filter(|t| *t < 0) {
            return Err(Error::BadTag(t));
        }
        self.irecv_tagged(buf, cap, src, tag)
    }

    fn irecv_tagged(
        &mut self,
        buf: *mut u8,
        cap: usize,
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Result<ReqId> {
        // SAFETY: forwarded from the callers' contracts.
        unsafe { self.post_recv(buf, cap, src, tag, false) }
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
        blocking: bool,
    ) -> Result<ReqId> {
        if let Some(s) = src {
            self.route(s)?;
        }
        let mut s = lock(&self.state);
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
                addr,
                cap,
            });
        } else {
            let posted = Posted {
                req,
                src,
                tag,
                addr,
                cap,
            };
            match_early(&self.state, &mut self.modules, &mut s, posted);
        }
        Ok(req)
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
    pub fn wait(&mut self, req: ReqId) -> Result<Status> {
        self.wait_since(req, usize::MAX)
    }

    /// [`Comm::wait`], where `seen` is the count of completed requests read before
    /// `req` was started (`usize::MAX`: unknown): the request is first looked at when
    /// that count has moved.
    #[inline]
    fn wait_since(&mut self, req: ReqId, mut seen: usize) -> Result<Status> {
        let mut idle = 0u32;
        loop {
            let completed = self.signals.completed.load(Ordering::Acquire);
            if completed != seen {
                seen = completed;
                if let Some(outcome) = self.test(req) {
                    return outcome;
                }
            }
            if self.progress() == 0 {
                idle += 1;
                if idle >= SPIN_BEFORE_YIELD {
                    std::thread::yield_now();
                }
            } else {
                idle = 0;
            }
        }
    }

    /// Hand the blocking receive into `buf` from `src` with `tag` to the transport
    /// that reaches `src`, if that transport matches receives itself and nothing
    /// comes first (no receive posted before it, no message waiting): the message
    /// then lands without a callback, a request or a look at the matching state.
    fn offload(&mut self, buf: &mut [u8], src: u32, tag: i32) -> Result<Option<Offload>> {
        let (mi, ep) = self.route(src)?;
        {
            let s = lock(&self.state);
            if !s.posted.is_empty() || !s.unexpected.is_empty() {
                return Ok(None);
            }
        }
        let e = Expected {
            endpoint: ep,
            tag: protocol::EAGER,
            key: tag.to_le_bytes(),
            buf: buf.as_mut_ptr(),
            cap: buf.len(),
        };
        // SAFETY: `buf` is borrowed mutably by `recv`, which withdraws the receive
        // (`Withdraw`) before it returns.
        if !unsafe { self.modules[mi].expect(e) } {
            return Ok(None);
        }
        state::set(&self.signals.offloaded, state::offload_key(src, tag));
        let o = Offload {
            module: mi,
            source: src,
            tag,
        };
        self.offload = Some(o);
        Ok(Some(o))
    }

    /// Take the offloaded receive back from its transport, if it is there.
    fn withdraw(&mut self) {
        if let Some(o) = self.offload.take() {
            self.modules[o.module].cancel_expected();
            state::set(&self.signals.offloaded, 0);
        }
    }

    /// Progress until the transport fills the offloaded receive `o` (into `buf`), or
    /// a callback withdraws it (a message from its source with its tag that the
    /// transport did not take, or the source's failure): then it is posted as usual,
    /// behind that message.
    fn wait_offloaded(&mut self, o: Offload, buf: &mut [u8]) -> Result<Status> {
        let mut idle = 0u32;
        loop {
            if self.progress() == 0 {
                idle += 1;
                if idle >= SPIN_BEFORE_YIELD {
                    std::thread::yield_now();
                }
                rbtl_btl::idle::between_idle_polls();
                continue;
            }
            idle = 0;
            if let Some(len) = self.modules[o.module].take_expected() {
                self.offload = None;
                state::set(&self.signals.offloaded, 0);
                return Ok(Status {
                    source: o.source,
                    tag: o.tag,
                    len,
                });
            }
            if self.signals.offloaded.load(Ordering::Relaxed) == 0 {
                self.withdraw();
                return self.recv_posted(buf, Some(o.source), Some(o.tag));
            }
        }
    }

    /// Send `buf` to `dst` with `tag`, returning when the buffer may be reused.
    #[inline(always)]
    pub fn send(&mut self, buf: &[u8], dst: u32, tag: i32) -> Result<()> {
        if tag < 0 {
            return Err(Error::BadTag(tag));
        }
        // Fast path: an eager message the transport takes at once needs no request.
        let (mi, ep) = self.route(dst)?;
        if buf.len() + protocol::EAGER_HEADER <= self.eager[mi]
            && self.try_eager(mi, ep, buf, tag)?
        {
            return Ok(());
        }
        // SAFETY: `buf` is borrowed until wait returns, which is when the request has
        // completed.
        let req = unsafe { self.isend_raw(buf.as_ptr(), buf.len(), dst, tag) }?;
        self.wait(req).map(|_| ())
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
        if let Some(t) = tag.filter(|t| *t < 0) {
            return Err(Error::BadTag(t));
        }
        if let (Some(s), Some(t)) = (src, tag) {
            if let Some(o) = self.offload(buf, s, t)? {
                return Withdraw(self).0.wait_offloaded(o, buf);
            }
        }
        self.recv_posted(buf, src, tag)
    }

    /// [`Comm::recv`] through a posted receive. (Its request lives outside the table:
    /// a blocking receive is the common case of latency-bound codes.)
    fn recv_posted(
        &mut self,
        buf: &mut [u8],
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Result<Status> {
        let seen = self.signals.completed.load(Ordering::Acquire);
        // SAFETY: `buf` is borrowed mutably until wait returns.
        let req = unsafe { self.post_recv(buf.as_mut_ptr(), buf.len(), src, tag, true) }?;
        self.wait_since(req, seen)
    }

    /// Run `f` with a scope in which non-blocking operations may borrow buffers that
    /// outlive the call; returns once every operation started in it has completed.
    pub fn scope<'env, T>(&mut self, f: impl FnOnce(&mut Scope<'_, 'env>) -> T) -> Result<T> {
        let mut scope = Scope {
            comm: self,
            reqs: Vec::new(),
            _env: PhantomData,
        };
        let out = f(&mut scope);
        let mut first_err = None;
        for req in std::mem::take(&mut scope.reqs) {
            if let Err(e) = scope.comm.wait(req) {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Wait until every rank has called `barrier`.
    pub fn barrier(&mut self) -> Result<()> {
        let (n, me) = (self.size, self.rank);
        let mut step = 1;
        let mut round = 0;
        while step < n {
            let to = (me + step) % n;
            let from = (me + n - step) % n;
            let tag = BARRIER_TAG + round;
            let mut byte = [0u8; 1];
            let r = self.irecv_tagged(byte.as_mut_ptr(), 1, Some(from), Some(tag))?;
            let zero = [0u8];
            let s = self.isend_tagged(zero.as_ptr(), 1, to, tag)?;
            self.wait(s)?;
            self.wait(r)?;
            step *= 2;
            round += 1;
        }
        Ok(())
    }

    /// Send `blobs[r]` to every rank `r` (itself included) and return what each sent
    /// here (blobs of at most 1 KiB; for handles and addresses).
    pub(crate) fn alltoall(&mut self, blobs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        let n = self.size as usize;
        let mut bufs = vec![vec![0u8; ALLTOALL_MAX]; n];
        let mut recvs = Vec::with_capacity(n);
        for (r, b) in bufs.iter_mut().enumerate() {
            recvs.push(self.irecv_tagged(
                b.as_mut_ptr(),
                ALLTOALL_MAX,
                Some(r as u32),
                Some(ALLTOALL_TAG),
            )?);
        }
        let mut sends = Vec::with_capacity(n);
        for (r, b) in blobs.iter().enumerate() {
            sends.push(self.isend_tagged(b.as_ptr(), b.len(), r as u32, ALLTOALL_TAG)?);
        }
        for s in sends {
            self.wait(s)?;
        }
        for (b, r) in bufs.iter_mut().zip(recvs) {
            let st = self.wait(r)?;
            b.truncate(st.len);
        }
        Ok(bufs)
    }

    /// Leave the job: a barrier (so no peer still reads our memory), then tell the
    /// process manager.
    pub fn finalize(mut self) -> Result<()> {
        self.drain()?;
        self.barrier()?;
        self.drain()
    }

    /// Progress until nothing waits for room in a transport.
    fn drain(&mut self) -> Result<()> {
        while self.signals.deferred.load(Ordering::Acquire) > 0 {
            if self.signals.failed.load(Ordering::Acquire) > 0 {
                // Messages to a dead peer never leave; nothing to wait for.
                break;
            }
            if self.progress() == 0 {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// The job's modex (for layers above that exchange their own data).
    pub fn job(&mut self) -> &mut Job {
        &mut self.job
    }
}

/// Non-blocking operations whose buffers live at least as long as `'env`.
pub struct Scope<'c, 'env> {
    comm: &'c mut Comm,
    reqs: Vec<ReqId>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl<'env> Scope<'_, 'env> {
    /// Start sending `buf`.
    pub fn isend(&mut self, buf: &'env [u8], dst: u32, tag: i32) -> Result<ReqId> {
        // SAFETY: `buf` outlives the scope, which waits for the request.
        let req = unsafe { self.comm.isend_raw(buf.as_ptr(), buf.len(), dst, tag) }?;
        self.reqs.push(req);
        Ok(req)
    }

    /// Start receiving into `buf`.
    pub fn irecv(
        &mut self,
        buf: &'env mut [u8],
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Result<ReqId> {
        // SAFETY: `buf` is borrowed mutably beyond the scope, which waits for the request.
        let req = unsafe { self.comm.irecv_raw(buf.as_mut_ptr(), buf.len(), src, tag) }?;
        self.reqs.push(req);
        Ok(req)
    }

    /// Wait for one request of this scope.
    pub fn wait(&mut self, req: ReqId) -> Result<Status> {
        self.reqs.retain(|r| *r != req);
        self.comm.wait(req)
    }

    /// The communicator (for progress, rank, size).
    pub fn comm(&mut self) -> &mut Comm {
        self.comm
    }
}

/// Deliver the earliest unexpected message matching `posted` (`s` is the borrowed
/// `state`), or post it.
#[cold]
#[inline(never)]
fn match_early(state: &Shared, modules: &mut [Box<dyn Module>], s: &mut State, posted: Posted) {
    match s.take_unexpected(posted.src, posted.tag) {
        Some(Unexpected::Eager { src, tag, data }) => s.deliver_eager(&posted, src, tag, &data),
        Some(Unexpected::Rts { src, rts }) => {
            let (mi, ep) = s.route[src as usize].expect("routed");
            s.start_get(state, modules[mi].as_mut(), mi, ep, &posted, src, *rts);
        }
        None => s.posted.push_back(posted),
    }
}

/// Install the message layer's receive callbacks on module `mi`, whose endpoints
/// belong to `ranks`.
fn register_callbacks(
    m: &mut dyn Module,
    mi: usize,
    ranks: &Arc<[Option<u32>]>,
    state: &Shared,
) -> Result<()> {
    let (st, senders) = (state.clone(), ranks.clone());
    m.register_am(
        protocol::EAGER,
        Box::new(move |m, r: &Received<'_>| {
            let Some(src) = senders.get(r.endpoint.0 as usize).copied().flatten() else {
                return;
            };
            // The header and the payload: one segment, or two when the transport kept
            // the header apart (sm does, to align large payloads).
            let (head, data) = match r.segments {
                [one] => one.split_at(protocol::EAGER_HEADER.min(one.len())),
                [head, data] if head.len() == protocol::EAGER_HEADER => (*head, *data),
                _ => return receive_gathered(&st, m, src, r),
            };
            receive_eager(&st, m, src, head, data);
        }),
    )?;
    let (st, senders) = (state.clone(), ranks.clone());
    m.register_am(
        protocol::RTS,
        Box::new(move |m, r: &Received<'_>| {
            let Some(src) = senders.get(r.endpoint.0 as usize).copied().flatten() else {
                return;
            };
            let mut s = lock(&st);
            let Some(rts) = protocol::Rts::decode(&r.to_vec()) else {
                return;
            };
            match s.take_match(m, src, rts.tag) {
                Some(p) => s.start_get(&st, m, mi, r.endpoint, &p, src, rts),
                None => s.unexpected.push_back(Unexpected::Rts {
                    src,
                    rts: Box::new(rts),
                }),
            }
        }),
    )?;
    let st = state.clone();
    m.register_am(
        protocol::FIN,
        Box::new(move |_m, r: &Received<'_>| {
            let mut s = lock(&st);
            if let Some((sreq, _taken)) = protocol::decode_fin(&r.to_vec()) {
                if let Some(status) = s.reqs.get(sreq).map(|q| q.status) {
                    s.complete(sreq, Ok(status));
                }
            }
        }),
    )?;
    let st = state.clone();
    m.register_error(Box::new(move |event| {
        if let Some(rank) = event.rank {
            lock(&st).peer_failed(rank, event.error.to_string());
        }
    }));
    Ok(())
}

/// Match an eager message from `src` (its header `head`, then `data`) with a posted
/// receive, or keep it as unexpected.
#[inline(always)]
fn receive_eager(st: &Shared, m: &mut dyn Module, src: u32, head: &[u8], data: &[u8]) {
    let Ok(head) = <[u8; protocol::EAGER_HEADER]>::try_from(head) else {
        return;
    };
    let tag = i32::from_le_bytes(head);
    let mut s = lock(st);
    match s.take_match(m, src, tag) {
        Some(p) => s.deliver_eager(&p, src, tag, data),
        None => s.keep_unexpected(src, tag, data),
    }
}

/// An eager message that arrived in pieces other than (header, payload): joined first.
#[cold]
#[inline(never)]
fn receive_gathered(st: &Shared, m: &mut dyn Module, src: u32, r: &Received<'_>) {
    let joined = r.to_vec();
    let (head, data) = joined.split_at(protocol::EAGER_HEADER.min(joined.len()));
    receive_eager(st, m, src, head, data);
}

/// This host's name (for the modex: ranks on one node share memory).
fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}
