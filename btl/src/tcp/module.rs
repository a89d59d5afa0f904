//! The `tcp` module: the contract's operations over the links to each peer, and its
//! progress: readiness, then the frames each link brings (active messages to their
//! callbacks or the expected receive; put, get and atomic requests applied after the
//! target's checks; their answers to the origin's operations), then completions.
//!
//! (Over 600 lines: one type, whose frames run the user's callbacks with the module
//! itself, so frame handling, failures and the contract's operations share its state.
//! What stands apart lives beside it: connections and links in [`net`](super::net),
//! streaming data in [`sink`](super::sink), the operations' bookkeeping and frames in
//! [`rdma`](super::rdma), the frame format in [`wire`](super::wire).)

use super::conn::Role;
use super::link::{Head, Item, RxBuf};
use super::net::{DescSent, Net};
use super::peer::{endpoint, ConnId};
use super::published::Published;
use super::rdma::{self, Ops, Pending};
use super::sink::Sink;
use super::wire::{self, Frame, Limits};
use super::{Refused, Settings, MODEX_KEY, NAME};
use crate::done::Done;
use crate::keytable::{self, HANDLE_SIZE};
use crate::registrations::{NoPin, Reg, Registrations};
use crate::send_frags::SendFrags;
use crate::{
    AmCallback, AmTable, AtomicOp, AtomicRequest, AtomicWidth, Attributes, DesFlags, Descriptor,
    Endpoint, Error, ErrorCallback, ErrorEvent, Expected, ExpectedSlot, MemHandle, Modex, Module,
    ModuleId, Order, Proc, RdmaCallback, Received, RegRequest, RemoteHandle, Result,
    SendCompletion, SendError, SendOutcome, SendiOutcome, Tag, MAX_SEGMENTS,
};
use rbtl_mpool::Region;
use rbtl_rcache::{Access, Rcache};
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest put or get chunk a receiver takes (a protocol bound, above any setting).
pub const MAX_CHUNK: usize = 16 << 20;
/// How long the module must have had nothing to do before a peer whose links closed
/// is reported failed (as `sm` reports a peer's end only while idle): a peer that ends
/// right after its last messages is not reported while the upper layer still matches
/// them.
const QUIET_BEFORE_REPORT: Duration = Duration::from_millis(10);

/// What handling one frame came to.
enum Handled {
    /// Taken.
    Taken,
    /// Taken by the expected receive: progress returns now.
    Filled,
    /// Its callback is running further up the stack: the frame waits.
    Wait,
    /// Its data streams in next.
    Stream(Sink),
    /// The peer broke the protocol.
    Violation(&'static str),
}

/// The `tcp` module.
pub struct TcpModule {
    id: ModuleId,
    rank: u32,
    attrs: Attributes,
    limits: Limits,
    rdma_chunk: usize,
    net: Net,
    regs: Arc<Registrations>,
    rcache: Arc<Rcache<NoPin>>,
    frags: SendFrags,
    am: AmTable,
    expected: ExpectedSlot,
    error_cb: Option<ErrorCallback>,
    done: VecDeque<Done>,
    ops: Ops,
    /// Peers whose links closed, not reported yet, and since when progress has found
    /// nothing to do.
    unreported: Vec<(usize, String)>,
    quiet_since: Option<Instant>,
}

impl TcpModule {
    /// Listen on every address of `interfaces` and publish them in the modex.
    pub fn new(
        attrs: Attributes,
        settings: Settings,
        interfaces: &[super::interfaces::Interface],
        modex: &mut dyn Modex,
    ) -> Result<TcpModule> {
        let id = ModuleId::fresh();
        let capacity = settings.max_registrations.max(1);
        let table = Arc::new(Region::anonymous(keytable::table_bytes(capacity))?);
        // SAFETY: a fresh anonymous mapping is zeroed, page-aligned and ours alone; the
        // Arc handed over keeps it mapped.
        let regs = unsafe { Registrations::new(table.as_ptr(), capacity, table.clone()) };
        let limits = Limits {
            am_payload: attrs.max_send_size,
            rdma_data: MAX_CHUNK,
        };
        let (rank, size) = (modex.rank(), modex.size());
        let net = Net::new(
            id,
            regs.view(),
            settings.clone(),
            limits,
            rank,
            size,
            interfaces,
        )?;
        modex.publish(MODEX_KEY, &net.published(id).encode())?;
        Ok(TcpModule {
            id,
            rank,
            limits,
            rdma_chunk: settings.rdma_chunk,
            frags: SendFrags::new(id, attrs.max_send_size, settings.max_frags)?,
            rcache: Rcache::new(NoPin, settings.rcache.clone()),
            attrs,
            net,
            regs,
            am: AmTable::default(),
            expected: ExpectedSlot::default(),
            error_cb: None,
            done: VecDeque::new(),
            ops: Ops::default(),
            unreported: Vec::new(),
            quiet_since: None,
        })
    }

    /// Connections closed before they were trusted, by reason.
    pub fn refused(&self) -> Refused {
        self.net.refused()
    }

    /// The addresses this module listens on.
    pub fn listening(&self) -> Vec<std::net::SocketAddrV4> {
        self.net.listening()
    }

    /// How many links reach `endpoint`, and how many of them are up.
    pub fn links(&self, endpoint: Endpoint) -> Option<(usize, usize)> {
        let p = self.net.peers.get(endpoint.0 as usize)?;
        Some((
            p.links.len(),
            p.links.iter().filter(|s| s.up.is_some()).count(),
        ))
    }

    /// Run what the connections left: completions of descriptors written whole, and
    /// the end of peers whose links failed.
    fn settle(&mut self) {
        loop {
            if let Some(d) = self.net.written.pop() {
                self.finish_send(d, false, Ok(()));
            } else if let Some((p, why)) = self.net.failures.pop() {
                self.peer_closed(p, why);
            } else {
                return;
            }
        }
    }

    /// Queue `item` on link `k` of peer `p` (written at once when the link is idle).
    fn push(&mut self, p: usize, k: usize, item: Item) {
        self.net.push(p, k, item);
        self.settle();
    }

    // ---- Sending.

    fn finish_send(
        &mut self,
        mut des: Descriptor,
        immediate: bool,
        status: Result<()>,
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
            Some(callback) => self.done.push_back(Done::Send {
                callback,
                endpoint: des.endpoint(),
                descriptor: des,
                status,
            }),
            None => self.frags.recycle(des),
        }
        None
    }

    // ---- Failures.

    fn report(&mut self, p: Option<usize>, error: Error) {
        let event = ErrorEvent {
            endpoint: p.map(endpoint),
            rank: p.map(|p| self.net.peers[p].rank),
            error,
        };
        self.done.push_back(Done::Error(event));
    }

    /// A link of peer `p` closed or failed: take what its other links hold already (a
    /// peer that ends closes them all, and its last messages may be on another one),
    /// then end it: its operations fail now, the error callback hears of it once this
    /// module is idle ([`QUIET_BEFORE_REPORT`]).
    fn peer_closed(&mut self, p: usize, why: String) {
        if self.net.peers[p].closing || self.net.peers[p].is_gone() {
            return;
        }
        self.net.peers[p].closing = true;
        for k in 0..self.net.peers[p].links.len() {
            let Some(id) = self.net.peers[p].links[k].up else {
                continue;
            };
            if let Some(c) = self.net.conns.get_mut(id).filter(|c| !c.busy) {
                c.readable = true;
                self.service_link(id);
            }
        }
        if self.net.peers[p].is_gone() {
            return;
        }
        tracing::info!(rank = self.net.peers[p].rank, %why, "tcp: peer closed");
        self.end_peer(p, why.clone());
        self.unreported.push((p, why));
    }

    /// Report the peers whose links closed.
    #[cold]
    fn report_closed(&mut self) -> usize {
        let closed = std::mem::take(&mut self.unreported);
        let n = closed.len();
        for (p, why) in closed {
            let rank = self.net.peers[p].rank;
            self.report(Some(p), Error::PeerFailed { rank, why });
        }
        n + self.run_done()
    }

    /// Peer `p` is gone: fail what involves it and tell the upper layer.
    fn fail_peer(&mut self, p: usize, why: String) {
        if self.net.peers[p].is_gone() {
            return;
        }
        tracing::warn!(rank = self.net.peers[p].rank, %why, "tcp: peer failed");
        self.end_peer(p, why.clone());
        let rank = self.net.peers[p].rank;
        self.report(Some(p), Error::PeerFailed { rank, why });
    }

    /// Close every link of peer `p` and fail its operations and queued sends.
    fn end_peer(&mut self, p: usize, why: String) {
        let rank = self.net.peers[p].rank;
        self.net.peers[p].failed = Some(why.clone());
        let err = || Error::PeerFailed {
            rank,
            why: why.clone(),
        };
        let items = self.net.close_peer(p);
        for item in items {
            if let Item::Desc { descriptor, .. } = item {
                self.finish_send(descriptor, false, Err(err()));
            }
        }
        for (cb, done) in self.ops.fail(endpoint(p), err) {
            self.done.push_back(Done::Rdma(cb, done));
        }
    }

    // ---- Receiving.

    fn service(&mut self, id: ConnId) -> (usize, bool) {
        let Some(c) = self.net.conns.get_mut(id) else {
            return (0, false);
        };
        if c.busy {
            c.pending = true;
            return (0, false);
        }
        match c.role {
            Role::Accepting { .. } => {
                let n = self.net.service_accepting(id);
                self.settle();
                (n, false)
            }
            Role::Early { .. } => {
                c.readable = false;
                (0, false)
            }
            Role::Attempt { .. } => {
                let (n, up) = self.net.service_attempt(id);
                self.settle();
                if !up {
                    return (n, false);
                }
                let (m, stop) = self.service_link(id);
                (n + m, stop)
            }
            Role::Link { peer, link } => {
                let mut n = 0;
                if c.writable && !self.net.peers[peer].links[link].queue.is_empty() {
                    self.net.drain(peer, link);
                    self.settle();
                    n += 1;
                }
                let (m, stop) = self.service_link(id);
                (n + m, stop)
            }
        }
    }

    /// Take the frames link `id` has (reading as needed); the frames handled, and
    /// whether the expected receive was filled (progress returns then).
    fn service_link(&mut self, id: ConnId) -> (usize, bool) {
        let Some(c) = self.net.conns.get_mut(id) else {
            return (0, false);
        };
        let Role::Link { peer: p, link: k } = c.role else {
            return (0, false);
        };
        let gen = c.gen;
        let mut rx = std::mem::replace(&mut c.rx, RxBuf::new(0));
        let mut sink = c.sink.take();
        c.busy = true;
        c.pending = false;
        let (mut n, mut stop, mut pending) = (0, false, false);
        // Err((violation, why)): the peer broke the protocol, or the link closed.
        let outcome: std::result::Result<(), (bool, String)> = loop {
            if let Some(s) = sink.take() {
                match self.stream(p, k, id, &mut rx, s) {
                    Ok(None) => n += 1,
                    Ok(Some(s)) => {
                        sink = Some(s);
                        break Ok(());
                    }
                    Err(why) => break Err((false, why)),
                }
                continue;
            }
            let step = match wire::decode(rx.data(), &self.limits) {
                Err(wire::Invalid(why)) => break Err((true, format!("protocol error: {why}"))),
                Ok(None) => None,
                Ok(Some((frame, used))) => Some((self.on_frame(p, k, frame), used)),
            };
            let Some(c) = self.net.conns.same(id, gen) else {
                break Ok(());
            };
            let Some((handled, used)) = step else {
                if !c.readable {
                    break Ok(());
                }
                match rx.fill(&c.sock, wire::needed(rx.data())) {
                    Ok((0, _)) => break Err((false, "the connection closed".into())),
                    Ok((_, full)) => c.read_some(full),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.readable = false,
                    Err(e) => break Err((false, format!("reading: {e}"))),
                }
                continue;
            };
            match handled {
                Handled::Taken => rx.consume(used),
                Handled::Filled => {
                    rx.consume(used);
                    (n, stop, pending) = (n + 1, true, true);
                    break Ok(());
                }
                Handled::Wait => {
                    pending = true;
                    break Ok(());
                }
                Handled::Stream(s) => {
                    rx.consume(used);
                    sink = Some(s);
                }
                Handled::Violation(why) => break Err((true, format!("protocol error: {why}"))),
            }
            n += 1;
        };
        if let Some(c) = self.net.conns.same(id, gen) {
            c.rx = rx;
            c.sink = sink;
            c.busy = false;
            c.pending |= pending;
            match outcome {
                Ok(()) => {}
                Err((true, why)) => self.fail_peer(p, why),
                Err((false, why)) => self.peer_closed(p, why),
            }
        }
        (n, stop)
    }

    /// Stream a put's or get's data into place; the sink back while more is to come
    /// and the socket has none yet.
    fn stream(
        &mut self,
        p: usize,
        k: usize,
        id: ConnId,
        rx: &mut RxBuf,
        mut sink: Sink,
    ) -> std::result::Result<Option<Sink>, String> {
        let table = self.regs.view();
        let Some(c) = self.net.conns.get_mut(id) else {
            return Ok(None);
        };
        if !sink.pour(c, rx, &table, self.id)? {
            return Ok(Some(sink));
        }
        if let Some(ack) = sink.answer() {
            self.push(p, k, ack);
        }
        Ok(None)
    }

    fn on_frame(&mut self, p: usize, k: usize, frame: Frame<'_>) -> Handled {
        let ep = endpoint(p);
        let view = self.regs.view();
        match frame {
            Frame::Am {
                tag,
                lens,
                nseg,
                payload,
            } => self.deliver(ep, tag, &lens[..nseg], payload),
            Frame::Put {
                req,
                addr,
                handle,
                data_len,
            } => {
                let Ok(h) = <[u8; HANDLE_SIZE]>::try_from(handle) else {
                    return Handled::Violation("malformed memory handle");
                };
                let status = rdma::check(&view, self.id, &h, addr, data_len, crate::PUT_REMOTE);
                Handled::Stream(Sink::Put {
                    req,
                    at: addr as usize,
                    left: data_len,
                    status: status.map(drop),
                    handle: h,
                })
            }
            Frame::GetReq {
                req,
                offset,
                addr,
                len,
                handle,
            } => {
                let item = rdma::serve_get(&view, self.id, req, offset, addr, len, handle);
                self.push(p, k, item);
                Handled::Taken
            }
            Frame::AtomicReq {
                req,
                addr,
                op,
                width,
                operand,
                compare,
                handle,
            } => {
                let atomic = AtomicRequest { op, width };
                let item =
                    rdma::serve_atomic(&view, self.id, req, addr, atomic, operand, compare, handle);
                self.push(p, k, item);
                Handled::Taken
            }
            Frame::GetData {
                req,
                offset,
                data_len,
            } => match self.ops.get_target(req, ep, offset, data_len) {
                Some(at) => Handled::Stream(Sink::Get { at, left: data_len }),
                None => Handled::Violation("data of no get"),
            },
            Frame::PutAck { req, status } => match self.ops.pending(req, ep) {
                Some(Pending::Put) => self.chunk_done(req, status),
                _ => Handled::Violation("an acknowledgement of no put"),
            },
            Frame::GetDone { req, status, .. } => match self.ops.pending(req, ep) {
                Some(Pending::Get { .. }) => self.chunk_done(req, status),
                _ => Handled::Violation("the end of no get"),
            },
            Frame::AtomicResp { req, old, status } => match self.ops.pending(req, ep) {
                Some(Pending::Atomic { result, width }) => {
                    if let (Ok(()), Some(at)) = (&status, result) {
                        // SAFETY: `width` bytes checked against a live local registration
                        // with local-write access when the atomic started.
                        unsafe { width.store(at, old) };
                    }
                    self.chunk_done(req, status)
                }
                _ => Handled::Violation("the answer of no atomic"),
            },
            Frame::Hello(_) | Frame::HelloAck | Frame::HelloNack => {
                Handled::Violation("a handshake frame on a link that is up")
            }
        }
    }

    fn chunk_done(&mut self, req: u64, status: Result<()>) -> Handled {
        if let Some((cb, done)) = self.ops.chunk_done(req, status) {
            self.done.push_back(Done::Rdma(cb, done));
        }
        Handled::Taken
    }

    /// An active message from `ep`: to the expected receive, or its tag's callback.
    fn deliver(&mut self, ep: Endpoint, tag: Tag, lens: &[u32], payload: &[u8]) -> Handled {
        let mut segs: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
        let mut at = 0;
        for (s, &l) in segs.iter_mut().zip(lens) {
            *s = &payload[at..at + l as usize];
            at += l as usize;
        }
        let segs = &segs[..lens.len()];
        // SAFETY: the posted buffer is valid as `Module::expect` requires.
        if self.expected.is_posted() && unsafe { self.expected.fill(ep, tag, segs) } {
            return Handled::Filled;
        }
        let Some(mut cb) = self.am.take(tag) else {
            if self.am.is_registered(tag) {
                return Handled::Wait;
            }
            self.report(
                Some(ep.0 as usize),
                Error::BadTag {
                    tag,
                    why: "a message arrived for it, but no receive callback is registered; dropped",
                },
            );
            return Handled::Taken;
        };
        cb(
            self,
            &Received {
                endpoint: ep,
                tag,
                segments: segs,
            },
        );
        self.am.restore(tag, cb);
        Handled::Taken
    }

    fn run_done(&mut self) -> usize {
        let n = self.done.len();
        for _ in 0..n {
            match self.done.pop_front() {
                Some(Done::Send {
                    callback,
                    endpoint,
                    descriptor,
                    status,
                }) => {
                    if descriptor.flags.contains(DesFlags::OWNERSHIP) {
                        let c = SendCompletion {
                            endpoint,
                            descriptor: None,
                            status,
                        };
                        callback(self, c);
                        self.frags.recycle(descriptor);
                    } else {
                        let c = SendCompletion {
                            endpoint,
                            descriptor: Some(descriptor),
                            status,
                        };
                        callback(self, c);
                    }
                }
                Some(Done::Rdma(cb, done)) => cb(self, done),
                Some(Done::Error(event)) => match &mut self.error_cb {
                    Some(cb) => cb(&event),
                    None => tracing::error!(?event, "tcp"),
                },
                None => break,
            }
        }
        n
    }

    // ---- One-sided operations.

    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &mut self,
        ep: Endpoint,
        put: bool,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        size: usize,
        callback: RdmaCallback,
    ) -> Result<()> {
        self.attrs.check_transfer(put, local, remote, size)?;
        let p = self.net.live_peer(ep)?;
        let (local_needs, remote_needs) = if put {
            (Access::LOCAL_READ, crate::PUT_REMOTE)
        } else {
            (Access::LOCAL_WRITE, crate::GET_REMOTE)
        };
        local_handle.check::<Reg<NoPin>>(self.id, local, size, local_needs)?;
        let remote_handle = &rdma::precheck(
            self.net.peers[p].module,
            remote_handle,
            remote,
            size,
            remote_needs,
        )?;
        let chunk = self.rdma_chunk;
        let n = rdma::chunks(size, chunk).count();
        let what = if put {
            Pending::Put
        } else {
            Pending::Get { local }
        };
        let req = self.ops.start(ep, local, size, what, n, callback);
        let links: Vec<usize> = self.net.peers[p].stripe(n).collect();
        let h = remote_handle.as_bytes();
        for ((off, len), k) in rdma::chunks(size, chunk).zip(links) {
            let at = remote + off as u64;
            let item = if put {
                rdma::put_chunk(req, at, h, local + off, len)
            } else {
                rdma::get_request(req, off as u64, at, len, h)
            };
            self.push(p, k, item);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        ep: Endpoint,
        result: Option<(usize, &MemHandle)>,
        remote: u64,
        remote_handle: &RemoteHandle,
        code: u8,
        operand: u64,
        compare: u64,
        flags: u32,
        callback: RdmaCallback,
    ) -> Result<()> {
        let width = AtomicWidth::of(flags);
        width.check_aligned(remote)?;
        let code = match width {
            AtomicWidth::W32 => code | wire::ATOMIC_32BIT,
            AtomicWidth::W64 => code,
        };
        let p = self.net.live_peer(ep)?;
        if let Some((local, handle)) = result {
            handle.check::<Reg<NoPin>>(self.id, local, width.bytes(), Access::LOCAL_WRITE)?;
        }
        let remote_handle = &rdma::precheck(
            self.net.peers[p].module,
            remote_handle,
            remote,
            width.bytes(),
            Access::ATOMIC,
        )?;
        let local = result.map(|r| r.0);
        let what = Pending::Atomic {
            result: local,
            width,
        };
        let size = width.bytes();
        let req = self
            .ops
            .start(ep, local.unwrap_or(0), size, what, 1, callback);
        let msg = rdma::atomic_request(
            req,
            remote,
            code,
            operand,
            compare,
            remote_handle.as_bytes(),
        );
        self.push(p, 0, msg);
        Ok(())
    }
}

impl TcpModule {
    /// Look at what is ready: connections and listeners with news, connections left
    /// with work; the events handled and whether the expected receive was filled.
    #[inline]
    fn poll_ready(&mut self) -> (usize, bool) {
        let mut n = self.net.poll_events();
        // Only what is listed now: a connection left with work waits for the next call.
        for _ in 0..self.net.ready_len() {
            let Some(next) = self.net.next_ready() else {
                break;
            };
            let Some((id, gen)) = next else {
                continue;
            };
            let (m, stop) = self.service(id);
            n += m;
            self.net.relist(id, gen);
            if stop {
                return (n, true);
            }
        }
        (n, false)
    }
}

impl Module for TcpModule {
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
        modex: &mut dyn Modex,
    ) -> Result<Vec<Option<Endpoint>>> {
        let my_node = procs
            .iter()
            .find(|p| p.rank == self.rank)
            .map(|p| p.node.clone());
        let mut out = Vec::with_capacity(procs.len());
        for proc_ in procs {
            let r = proc_.rank;
            if r == self.rank || r >= modex.size() {
                out.push(None);
                continue;
            }
            if let Some(p) = self.net.peer_of(r) {
                out.push((!self.net.peers[p].removed).then(|| endpoint(p)));
                continue;
            }
            let Some(blob) = modex.lookup(r, MODEX_KEY)? else {
                out.push(None);
                continue;
            };
            let remote = Published::decode(&blob).ok_or_else(|| {
                Error::Modex(format!(
                    "the tcp address of rank {r} is malformed ({} bytes)",
                    blob.len()
                ))
            })?;
            let same_node = my_node.as_ref() == Some(&proc_.node);
            let p = self.net.add_peer(r, &remote, same_node);
            self.settle();
            out.push(p.map(endpoint));
        }
        Ok(out)
    }

    fn del_procs(&mut self, endpoints: &[Endpoint]) -> Result<()> {
        for &ep in endpoints {
            let p = ep.0 as usize;
            let peer = self.net.peers.get(p).ok_or(Error::UnknownEndpoint(ep.0))?;
            if !peer.removed {
                if peer.failed.is_none() {
                    self.end_peer(p, "removed by del_procs".into());
                }
                self.net.peers[p].removed = true;
            }
        }
        Ok(())
    }

    fn register_am(&mut self, tag: Tag, callback: AmCallback) -> Result<()> {
        self.am.register(tag, callback)
    }

    fn register_error(&mut self, callback: ErrorCallback) {
        self.error_cb = Some(callback);
    }

    unsafe fn register(&mut self, request: &RegRequest) -> Result<MemHandle> {
        self.regs
            .register(self.id, &self.attrs, &self.rcache, request)
    }

    fn deregister_mem(&mut self, handle: &mut MemHandle) -> Result<()> {
        handle.release(self.id)
    }

    fn alloc(
        &mut self,
        endpoint: Endpoint,
        order: Order,
        size: usize,
        flags: DesFlags,
    ) -> Result<Descriptor> {
        self.net.live_peer(endpoint)?;
        self.frags.alloc(endpoint, size, order, flags)
    }

    fn prepare_src(
        &mut self,
        endpoint: Endpoint,
        order: Order,
        reserve: usize,
        data: &[&[u8]],
        flags: DesFlags,
    ) -> Result<Descriptor> {
        self.net.live_peer(endpoint)?;
        self.frags
            .prepare_src(endpoint, order, reserve, data, flags)
    }

    fn free(&mut self, descriptor: Descriptor) -> Result<()> {
        self.frags.free(descriptor)
    }

    fn send(
        &mut self,
        endpoint: Endpoint,
        descriptor: Descriptor,
        tag: Tag,
    ) -> Result<SendOutcome, SendError> {
        let checked = descriptor
            .check_owner(self.id)
            .and_then(|_| crate::am_table::check_not_reserved(tag))
            .and_then(|_| self.net.live_peer(endpoint));
        let p = match checked {
            Ok(p) => p,
            Err(error) => return Err(SendError { error, descriptor }),
        };
        let mut lens = [0usize; MAX_SEGMENTS];
        for (l, s) in lens.iter_mut().zip(descriptor.segment_lens()) {
            *l = s;
        }
        let head = wire::am(tag, &lens[..descriptor.segment_count()]);
        let head = Head::new(head.as_bytes());
        let outcome = self.net.send_desc(p, head, descriptor);
        self.settle();
        match outcome {
            DescSent::Written(d) => Ok(SendOutcome::Done(self.finish_send(d, true, Ok(())))),
            DescSent::Queued => Ok(SendOutcome::Queued),
            DescSent::Failed(why, descriptor) => {
                self.peer_closed(p, why);
                let error = self
                    .net
                    .live_peer(endpoint)
                    .err()
                    .unwrap_or(Error::UnknownEndpoint(endpoint.0));
                Err(SendError { error, descriptor })
            }
        }
    }

    #[inline]
    fn sendi(
        &mut self,
        endpoint: Endpoint,
        header: &[u8],
        payload: &[u8],
        _order: Order,
        _flags: DesFlags,
        tag: Tag,
    ) -> Result<SendiOutcome> {
        crate::am_table::check_not_reserved(tag)?;
        let size = header.len() + payload.len();
        if size > self.attrs.max_send_size {
            return Err(Error::TooLarge(format!(
                "{size} bytes exceed max_send_size {}",
                self.attrs.max_send_size
            )));
        }
        let p = self.net.live_peer(endpoint)?;
        let head = wire::am(tag, &[size]);
        let sent = self.net.send_now(p, &[head.as_bytes(), header, payload]);
        self.settle();
        sent?;
        Ok(SendiOutcome::Sent)
    }

    fn put(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        size: usize,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        self.transfer(
            endpoint,
            true,
            local,
            remote,
            local_handle,
            remote_handle,
            size,
            callback,
        )
    }

    fn get(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        size: usize,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        self.transfer(
            endpoint,
            false,
            local,
            remote,
            local_handle,
            remote_handle,
            size,
            callback,
        )
    }

    fn atomic_op(
        &mut self,
        endpoint: Endpoint,
        remote: u64,
        remote_handle: &RemoteHandle,
        op: AtomicOp,
        operand: u64,
        flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        let (h, code) = (remote_handle, wire::op_code(op));
        self.atomic(endpoint, None, remote, h, code, operand, 0, flags, callback)
    }

    fn atomic_fop(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        op: AtomicOp,
        operand: u64,
        flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        let (result, h, code) = (
            Some((local, local_handle)),
            remote_handle,
            wire::op_code(op),
        );
        self.atomic(
            endpoint, result, remote, h, code, operand, 0, flags, callback,
        )
    }

    fn atomic_cswap(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        compare: u64,
        value: u64,
        flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        let (result, h) = (Some((local, local_handle)), remote_handle);
        self.atomic(
            endpoint,
            result,
            remote,
            h,
            wire::CSWAP,
            value,
            compare,
            flags,
            callback,
        )
    }

    fn flush(&mut self, endpoint: Option<Endpoint>) -> Result<()> {
        if let Some(ep) = endpoint {
            self.net
                .peers
                .get(ep.0 as usize)
                .ok_or(Error::UnknownEndpoint(ep.0))?;
        }
        while self.ops.pending_on(endpoint) {
            if self.progress() == 0 {
                // The peer serving the operation may need this processor.
                std::thread::yield_now();
            }
        }
        // Completed operations' callbacks run before flush returns.
        while self.done.iter().any(|d| matches!(d, Done::Rdma(..))) {
            self.run_done();
        }
        Ok(())
    }

    unsafe fn expect(&mut self, e: Expected) -> bool {
        if self
            .net
            .peers
            .get(e.endpoint.0 as usize)
            .is_none_or(|p| p.removed)
        {
            return false;
        }
        self.expected.post(&e);
        true
    }

    fn take_expected(&mut self) -> Option<usize> {
        self.expected.take()
    }

    fn cancel_expected(&mut self) {
        self.expected.cancel();
    }

    fn progress(&mut self) -> usize {
        let (mut n, filled) = self.poll_ready();
        if filled {
            // The caller learns of it before any later message is delivered.
            return n;
        }
        if self.net.handshakes_pending() {
            self.net.expire_handshakes();
        }
        if !self.done.is_empty() {
            n += self.run_done();
        }
        if n > 0 {
            self.quiet_since = None;
        } else if !self.unreported.is_empty() {
            let now = Instant::now();
            let since = *self.quiet_since.get_or_insert(now);
            if now.duration_since(since) >= QUIET_BEFORE_REPORT {
                self.quiet_since = None;
                n += self.report_closed();
            }
        }
        n
    }
}

impl Drop for TcpModule {
    /// Frames still queued (a last message sent just before the end) go out first, for
    /// as long as their peers take them, at most a few seconds.
    fn drop(&mut self) {
        // No callback of the user's runs from here on: messages that still arrive are
        // dropped.
        self.am = AmTable::default();
        self.expected.cancel();
        self.error_cb = None;
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.net.frames_waiting() {
            if Instant::now() >= deadline {
                tracing::warn!("tcp: frames still queued at the end are dropped");
                break;
            }
            if self.poll_ready().0 == 0 {
                std::thread::yield_now();
            }
        }
    }
}
