//! The `tcp` module: the contract's operations over the links to each peer, and the
//! progress engine that drives them (readiness from `mio`, accepts, handshakes, frames
//! in and out).
//!
//! (Over 600 lines: one type, the module, whose operations and progress share its
//! state at every step; the parts that stand alone live in the sibling files.)

use super::conn::{Conn, Conns, Role, Sink};
use super::handshake::{self, Expect, LinkState, Refusal, Step, Verdict};
use super::link::{self, GetReply, Head, Item, RxBuf};
use super::peer::{endpoint, ConnId, Peer};
use super::published::{self, Listener, Published};
use super::rdma::{self, Ops, Pending};
use super::wire::{self, Frame, Hello, Kind, Limits};
use super::{sockets, Refused, Settings, MODEX_KEY, NAME};
use crate::keytable::{self, HANDLE_SIZE};
use crate::registrations::{NoPin, Reg, Registrations};
use crate::send_frags::SendFrags;
use crate::{
    AmCallback, AmTable, AtomicOp, Attributes, DesFlags, Descriptor, Endpoint, Error,
    ErrorCallback, ErrorEvent, Expected, ExpectedSlot, MemHandle, Modex, Module, ModuleId, Order,
    Proc, RdmaCallback, RdmaCompletion, Received, RemoteHandle, Result, SendCompletion, SendError,
    SendOutcome, SendiOutcome, Tag, MAX_SEGMENTS,
};
use mio::{Events, Poll, Token};
use rbtl_mpool::Region;
use rbtl_rcache::{Access, Rcache};
use socket2::Socket;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tokens from here up are listeners (`usize::MAX - index`).
const LISTENER_BASE: usize = usize::MAX - 1024;
/// Bytes queued on a link beyond which `sendi` says `OutOfResource`.
const MAX_QUEUED: usize = 4 << 20;
/// Largest put or get chunk a receiver takes (a protocol bound, above any setting).
pub const MAX_CHUNK: usize = 16 << 20;
/// Idle progress calls before a peer whose links closed is reported failed (as `sm`
/// reports a peer's end only while idle): a peer that ends right after its last
/// messages is not reported while the upper layer still matches them.
const IDLE_BEFORE_REPORT: u32 = 1 << 14;

enum Done {
    Send {
        callback: crate::SendCallback,
        endpoint: Endpoint,
        descriptor: Descriptor,
        status: Result<()>,
    },
    Rdma(RdmaCallback, RdmaCompletion),
    Error(ErrorEvent),
}

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
    size: u32,
    attrs: Attributes,
    settings: Settings,
    limits: Limits,
    poll: Poll,
    events: Events,
    listeners: Vec<(Socket, Listener)>,
    conns: Conns,
    peers: Vec<Peer>,
    rank_ep: Vec<Option<usize>>,
    /// Connections to look at (readable, or stopped early), with their generation.
    ready: VecDeque<(ConnId, u64)>,
    /// Accepted connections before their HELLO.
    accepting: usize,
    regs: Arc<Registrations>,
    rcache: Arc<Rcache<NoPin>>,
    frags: SendFrags,
    am: AmTable,
    expected: ExpectedSlot,
    error_cb: Option<ErrorCallback>,
    done: VecDeque<Done>,
    ops: Ops,
    refused: Refused,
    written: Vec<Descriptor>,
    /// Peers whose links closed, not reported yet, and the idle calls since the last
    /// event.
    unreported: Vec<(usize, String)>,
    idle: u32,
}

fn os(call: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Os { call, source }
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
        let poll = Poll::new().map_err(os("epoll_create"))?;
        let mut listeners = Vec::new();
        for (i, itf) in interfaces.iter().enumerate() {
            let (sock, addr) =
                sockets::listen(itf.addr, &settings.sockets).map_err(os("listen"))?;
            let secret = handshake::fresh_secret().map_err(os("getrandom"))?;
            poll.registry()
                .register(
                    &mut mio::unix::SourceFd(&std::os::fd::AsRawFd::as_raw_fd(&sock)),
                    Token(usize::MAX - i),
                    mio::Interest::READABLE,
                )
                .map_err(os("epoll_ctl"))?;
            let l = Listener {
                addr,
                prefix: itf.prefix,
                secret,
            };
            listeners.push((sock, l));
        }
        let published = Published {
            module: id.0,
            listeners: listeners.iter().map(|(_, l)| *l).collect(),
        };
        modex.publish(MODEX_KEY, &published.encode())?;
        let table = Arc::new(Region::anonymous(keytable::table_bytes(
            settings.max_registrations.max(1),
        ))?);
        // SAFETY: a fresh anonymous mapping is zeroed, page-aligned and ours alone; the
        // Arc handed over keeps it mapped.
        let regs = unsafe {
            Registrations::new(
                table.as_ptr(),
                settings.max_registrations.max(1),
                table.clone(),
            )
        };
        Ok(TcpModule {
            id,
            rank: modex.rank(),
            size: modex.size(),
            limits: Limits {
                am_payload: attrs.max_send_size,
                rdma_data: MAX_CHUNK,
            },
            frags: SendFrags::new(id, attrs.max_send_size, settings.max_frags)?,
            rcache: Rcache::new(NoPin, settings.rcache.clone()),
            attrs,
            settings,
            poll,
            events: Events::with_capacity(64),
            listeners,
            conns: Conns::default(),
            peers: Vec::new(),
            rank_ep: vec![None; modex.size() as usize],
            ready: VecDeque::new(),
            accepting: 0,
            regs,
            am: AmTable::default(),
            expected: ExpectedSlot::default(),
            error_cb: None,
            done: VecDeque::new(),
            ops: Ops::default(),
            refused: Refused::default(),
            written: Vec::new(),
            unreported: Vec::new(),
            idle: 0,
        })
    }

    /// Connections closed before they were trusted, by reason.
    pub fn refused(&self) -> Refused {
        self.refused
    }

    /// The addresses this module listens on.
    pub fn listening(&self) -> Vec<std::net::SocketAddrV4> {
        self.listeners.iter().map(|(_, l)| l.addr).collect()
    }

    /// How many links reach `endpoint`, and how many of them are up.
    pub fn links(&self, endpoint: Endpoint) -> Option<(usize, usize)> {
        let p = self.peers.get(endpoint.0 as usize)?;
        Some((
            p.links.len(),
            p.links.iter().filter(|s| s.up.is_some()).count(),
        ))
    }

    fn live_peer(&self, ep: Endpoint) -> Result<usize> {
        let Some(p) = self.peers.get(ep.0 as usize) else {
            return Err(Error::UnknownEndpoint(ep.0));
        };
        match &p.failed {
            Some(why) => Err(Error::PeerFailed {
                rank: p.rank,
                why: why.clone(),
            }),
            None if p.removed => Err(Error::UnknownEndpoint(ep.0)),
            None => Ok(ep.0 as usize),
        }
    }

    // ---- Connections.

    fn close(&mut self, id: ConnId) {
        if let Some(Conn {
            role: Role::Accepting { .. },
            ..
        }) = self.conns.get(id)
        {
            self.accepting -= 1;
        }
        self.conns.remove(self.poll.registry(), id);
    }

    fn refuse(&mut self, id: ConnId, why: Refusal) {
        let from = self.conns.get(id).and_then(|c| c.sock.peer_addr().ok());
        tracing::info!(
            ?from,
            ?why,
            "tcp: a connection that did not prove it belongs to the job closed"
        );
        self.refused.count(why);
        self.close(id);
    }

    fn accept_all(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.listeners.len() {
            loop {
                let sock = match sockets::accept(&self.listeners[i].0, &self.settings.sockets) {
                    Ok(s) => s,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        tracing::warn!(%e, "tcp: accept failed");
                        break;
                    }
                };
                let hs = handshake::Accepting::new(Instant::now(), self.settings.handshake_timeout);
                let role = Role::Accepting { listener: i, hs };
                match self.conns.insert(self.poll.registry(), sock, role, 0) {
                    Ok(id) => {
                        self.accepting += 1;
                        self.enqueue(id);
                        n += 1;
                    }
                    Err(e) => tracing::warn!(%e, "tcp: cannot watch an accepted connection"),
                }
            }
        }
        n
    }

    fn enqueue(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(id) {
            if !c.queued {
                c.queued = true;
                self.ready.push_back((id, c.gen));
            }
        }
    }

    fn expire_handshakes(&mut self) {
        let now = Instant::now();
        for id in self.conns.ids(|r| matches!(r, Role::Accepting { .. })) {
            let why = match self.conns.get(id).map(|c| &c.role) {
                Some(Role::Accepting { hs, .. }) => hs.check(false, now),
                _ => None,
            };
            if let Some(why) = why {
                self.refuse(id, why);
            }
        }
    }

    fn service_accepting(&mut self, id: ConnId) -> usize {
        let (me, size) = (self.rank, self.size);
        let links = (self.settings.links * self.listeners.len()).min(usize::from(u16::MAX)) as u16;
        loop {
            let Some(c) = self.conns.get_mut(id) else {
                return 0;
            };
            let Role::Accepting { listener, hs } = &mut c.role else {
                return 0;
            };
            let expect = Expect {
                secret: self.listeners[*listener].1.secret,
                me,
                size,
                links,
            };
            let step = match sockets::recv(&c.sock, hs.room()) {
                Ok(0) => Step::Refuse(Refusal::Closed),
                Ok(n) => hs.received(n, &expect),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.readable = false;
                    return 0;
                }
                Err(_) => Step::Refuse(Refusal::Closed),
            };
            match step {
                Step::Waiting => continue,
                Step::Refuse(why) => {
                    self.refuse(id, why);
                    return 1;
                }
                Step::Member { rank, link } => {
                    self.accepting -= 1;
                    if let Some(c) = self.conns.get_mut(id) {
                        c.role = Role::Early { rank, link };
                    }
                    self.member(id, rank, usize::from(link));
                    return 1;
                }
            }
        }
    }

    /// Write an 8-byte answer on a fresh connection; whether it went whole.
    fn answer(&self, id: ConnId, kind: Kind) -> bool {
        let Some(c) = self.conns.get(id) else {
            return false;
        };
        let frame = wire::Encoder::new(kind, 0, 0, 0);
        matches!(
            sockets::send(&c.sock, &[IoSlice::new(frame.as_bytes())]),
            Ok(wire::HEADER)
        )
    }

    /// A member's connection for `link`: keep it or decline it.
    fn member(&mut self, id: ConnId, rank: u32, link: usize) {
        let Some(p) = self.rank_ep[rank as usize] else {
            // Not added yet: keep it, unread, until `add_procs` adds the rank.
            if !self.answer(id, Kind::HelloAck) {
                self.close(id);
            } else if let Some(c) = self.conns.get_mut(id) {
                c.readable = false;
            }
            return;
        };
        let peer = &self.peers[p];
        if peer.is_gone() || link >= peer.links.len() {
            self.close(id);
            return;
        }
        let slot = &peer.links[link];
        let ours = match (slot.up, slot.attempt) {
            (Some(_), _) => LinkState::Up,
            (None, Some(_)) => LinkState::Connecting,
            (None, None) => LinkState::None,
        };
        match handshake::verdict(self.rank, rank, ours) {
            Verdict::Keep if self.answer(id, Kind::HelloAck) => self.link_up(p, link, id),
            Verdict::Keep => self.close(id),
            Verdict::Decline => {
                self.answer(id, Kind::HelloNack);
                self.close(id);
            }
        }
    }

    /// Connection `id` is now link `k` of peer `p`: what queued for it goes out.
    fn link_up(&mut self, p: usize, k: usize, id: ConnId) {
        let slot = &mut self.peers[p].links[k];
        slot.up = Some(id);
        slot.declined = false;
        if let Some(a) = slot.attempt.take() {
            if a != id {
                self.close(a);
            }
        }
        if let Some(c) = self.conns.get_mut(id) {
            c.role = Role::Link { peer: p, link: k };
            c.writable = true;
            if c.rx.capacity() < self.settings.rx_bytes && c.rx.data().is_empty() {
                c.rx = RxBuf::new(self.settings.rx_bytes);
            }
        }
        self.drain(p, k);
        self.enqueue(id);
    }

    /// Start connecting link `k` of peer `p` unless it is up or on its way.
    fn connect(&mut self, p: usize, k: usize) {
        let slot = &self.peers[p].links[k];
        if slot.up.is_some() || slot.attempt.is_some() || slot.declined || self.peers[p].is_gone() {
            return;
        }
        let (local, to) = self.peers[p].route(k);
        let hello = wire::hello(&Hello {
            secret: to.secret,
            rank: self.rank,
            link: k as u16,
            version: wire::VERSION,
        });
        let opened = sockets::connect(local, to.addr, &self.settings.sockets).and_then(|sock| {
            let role = Role::Attempt {
                peer: p,
                link: k,
                state: handshake::Connecting::Opening,
                hello: hello.as_bytes().to_vec(),
            };
            self.conns
                .insert(self.poll.registry(), sock, role, self.settings.rx_bytes)
        });
        match opened {
            Ok(id) => self.peers[p].links[k].attempt = Some(id),
            Err(e) => self.peer_closed(p, format!("cannot connect to {}: {e}", to.addr)),
        }
    }

    fn attempt_failed(&mut self, id: ConnId, why: String) {
        let Some(Role::Attempt {
            peer: p, link: k, ..
        }) = self.conns.get(id).map(|c| &c.role)
        else {
            return;
        };
        let (p, k) = (*p, *k);
        self.close(id);
        let slot = &mut self.peers[p].links[k];
        if slot.attempt == Some(id) {
            slot.attempt = None;
        }
        if slot.up.is_none() && !slot.declined {
            let to = self.peers[p].route(k).1.addr;
            self.peer_closed(p, format!("link {k} to {to}: {why}"));
        }
    }

    fn service_attempt(&mut self, id: ConnId) -> (usize, bool) {
        use handshake::{Connecting as C, Event};
        let Some(c) = self.conns.get_mut(id) else {
            return (0, false);
        };
        let Role::Attempt {
            peer: p,
            link: k,
            state,
            hello,
        } = &mut c.role
        else {
            return (0, false);
        };
        let (p, k) = (*p, *k);
        if *state == C::Opening {
            if !c.writable {
                return (0, false);
            }
            match sockets::connect_result(&c.sock) {
                Ok(()) => *state = state.on(Event::Opened),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                    c.writable = false;
                    return (0, false);
                }
                Err(e) => {
                    self.attempt_failed(id, e.to_string());
                    return (1, false);
                }
            }
        }
        while !hello.is_empty() {
            match sockets::send(&c.sock, &[IoSlice::new(hello)]) {
                Ok(n) => drop(hello.drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.writable = false;
                    return (0, false);
                }
                Err(e) => {
                    self.attempt_failed(id, e.to_string());
                    return (1, false);
                }
            }
        }
        loop {
            let Some(c) = self.conns.get_mut(id) else {
                return (1, false);
            };
            let answer = match wire::decode(c.rx.data(), &self.limits) {
                Ok(Some((Frame::HelloAck, used))) => Some((Event::Ack, used)),
                Ok(Some((Frame::HelloNack, used))) => Some((Event::Nack, used)),
                Ok(Some(_)) | Err(_) => Some((Event::Other, 0)),
                Ok(None) => None,
            };
            let event = match answer {
                Some((event, used)) => {
                    c.rx.consume(used);
                    event
                }
                None if !c.readable => return (0, false),
                None => match c.rx.fill(&c.sock, wire::HEADER) {
                    Ok((0, _)) => Event::Closed,
                    Ok((_, full)) => {
                        c.readable = full;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        c.readable = false;
                        continue;
                    }
                    Err(_) => Event::Closed,
                },
            };
            let Role::Attempt { state, .. } = &mut c.role else {
                return (0, false);
            };
            *state = state.on(event);
            return match *state {
                C::Up => {
                    self.link_up(p, k, id);
                    let (n, stop) = self.service_link(id);
                    (n + 1, stop)
                }
                C::Declined => {
                    self.close(id);
                    let slot = &mut self.peers[p].links[k];
                    slot.attempt = None;
                    slot.declined = slot.up.is_none();
                    (1, false)
                }
                _ => {
                    self.attempt_failed(id, format!("the handshake failed ({event:?})"));
                    (1, false)
                }
            };
        }
    }

    // ---- Sending.

    /// Queue `item` on link `k` of peer `p`, writing at once when the link is idle.
    fn push(&mut self, p: usize, k: usize, item: Item) {
        let slot = &mut self.peers[p].links[k];
        let was_empty = slot.queue.is_empty();
        slot.queue.push(item);
        match slot.up {
            Some(c) if was_empty && self.conns.get(c).is_some_and(|c| c.writable) => {
                self.drain(p, k)
            }
            Some(_) => {}
            None => self.connect(p, k),
        }
    }

    /// Write what waits on link `k` of peer `p`, as far as the socket takes it.
    fn drain(&mut self, p: usize, k: usize) {
        let slot = &mut self.peers[p].links[k];
        let Some(conn) = slot.up.and_then(|c| self.conns.get_mut(c)) else {
            return;
        };
        let written = &mut self.written;
        let view = self.regs.view();
        let r = slot.queue.drain(&conn.sock, &view, self.id, |item| {
            if let Item::Desc { descriptor, .. } = item {
                written.push(descriptor);
            }
        });
        match r {
            Ok(all) => conn.writable = all,
            Err(e) => self.peer_closed(p, format!("writing: {e}")),
        }
        while let Some(d) = self.written.pop() {
            self.finish_send(d, false, Ok(()));
        }
    }

    /// Write a small frame of `parts` (at most three) on link 0 of `p` now if the link
    /// is idle, else queue a copy; `Err(OutOfResource)` when too much waits.
    #[inline]
    fn send_now(&mut self, p: usize, parts: &[&[u8]]) -> Result<()> {
        let total: usize = parts.iter().map(|s| s.len()).sum();
        let slot = &mut self.peers[p].links[0];
        if slot.queue.is_empty() {
            if let Some(conn) = slot.up.and_then(|c| self.conns.get_mut(c)) {
                let mut sent = 0;
                if conn.writable {
                    let iov = [
                        IoSlice::new(parts[0]),
                        IoSlice::new(parts.get(1).copied().unwrap_or_default()),
                        IoSlice::new(parts.get(2).copied().unwrap_or_default()),
                    ];
                    match sockets::send(&conn.sock, &iov[..parts.len()]) {
                        Ok(n) if n == total => return Ok(()),
                        Ok(n) => sent = n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => {
                            self.peer_closed(p, format!("writing: {e}"));
                            return self.live_peer(endpoint(p)).map(drop);
                        }
                    }
                    conn.writable = false;
                }
                slot.queue.push_partial(Item::Bytes(parts.concat()), sent);
                return Ok(());
            }
        } else if slot.queue.bytes() > MAX_QUEUED {
            return Err(Error::OutOfResource("tcp send queue"));
        }
        self.push(p, 0, Item::Bytes(parts.concat()));
        Ok(())
    }

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
            rank: p.map(|p| self.peers[p].rank),
            error,
        };
        self.done.push_back(Done::Error(event));
    }

    /// A link of peer `p` closed or failed: take what its other links hold already (a
    /// peer that ends closes them all, and its last messages may be on another one),
    /// then end it: its operations fail now, the error callback hears of it once this
    /// module is idle ([`IDLE_BEFORE_REPORT`]).
    fn peer_closed(&mut self, p: usize, why: String) {
        if self.peers[p].closing || self.peers[p].is_gone() {
            return;
        }
        self.peers[p].closing = true;
        for k in 0..self.peers[p].links.len() {
            let Some(id) = self.peers[p].links[k].up else {
                continue;
            };
            if let Some(c) = self.conns.get_mut(id).filter(|c| !c.busy) {
                c.readable = true;
                self.service_link(id);
            }
        }
        if self.peers[p].is_gone() {
            return;
        }
        tracing::info!(rank = self.peers[p].rank, %why, "tcp: peer closed");
        self.end_peer(p, why.clone());
        self.unreported.push((p, why));
    }

    /// Report the peers whose links closed.
    #[cold]
    fn report_closed(&mut self) -> usize {
        let closed = std::mem::take(&mut self.unreported);
        let n = closed.len();
        for (p, why) in closed {
            let rank = self.peers[p].rank;
            self.report(Some(p), Error::PeerFailed { rank, why });
        }
        n + self.run_done()
    }

    /// Peer `p` is gone: fail what involves it and tell the upper layer.
    fn fail_peer(&mut self, p: usize, why: String) {
        if self.peers[p].is_gone() {
            return;
        }
        tracing::warn!(rank = self.peers[p].rank, %why, "tcp: peer failed");
        self.end_peer(p, why.clone());
        let rank = self.peers[p].rank;
        self.report(Some(p), Error::PeerFailed { rank, why });
    }

    /// Close every link of peer `p` and fail its operations and queued sends.
    fn end_peer(&mut self, p: usize, why: String) {
        let rank = self.peers[p].rank;
        self.peers[p].failed = Some(why.clone());
        let err = || Error::PeerFailed {
            rank,
            why: why.clone(),
        };
        let mut items = Vec::new();
        for k in 0..self.peers[p].links.len() {
            let slot = &mut self.peers[p].links[k];
            let conns = [slot.up.take(), slot.attempt.take()];
            items.extend(slot.queue.take_all());
            for c in conns.into_iter().flatten() {
                self.close(c);
            }
        }
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
        let Some(c) = self.conns.get_mut(id) else {
            return (0, false);
        };
        if c.busy {
            c.pending = true;
            return (0, false);
        }
        match c.role {
            Role::Accepting { .. } => (self.service_accepting(id), false),
            Role::Early { .. } => {
                c.readable = false;
                (0, false)
            }
            Role::Attempt { .. } => self.service_attempt(id),
            Role::Link { peer, link } => {
                let mut n = 0;
                if c.writable && !self.peers[peer].links[link].queue.is_empty() {
                    self.drain(peer, link);
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
        let Some(c) = self.conns.get_mut(id) else {
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
            let Some(c) = self.conns.same(id, gen) else {
                break Ok(());
            };
            let Some((handled, used)) = step else {
                if !c.readable {
                    break Ok(());
                }
                match rx.fill(&c.sock, wire::needed(rx.data())) {
                    Ok((0, _)) => break Err((false, "the connection closed".into())),
                    Ok((_, full)) => c.readable = full,
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
        if let Some(c) = self.conns.same(id, gen) {
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

    /// Stream data into place: from the buffer, then straight from the socket. The
    /// sink back while more is to come and the socket has none yet.
    fn stream(
        &mut self,
        p: usize,
        k: usize,
        id: ConnId,
        rx: &mut RxBuf,
        mut sink: Sink,
    ) -> std::result::Result<Option<Sink>, String> {
        let view = self.regs.view();
        loop {
            // Where the next bytes go (0: discarded), and how many are to come.
            let (at, left) = match &mut sink {
                Sink::Put {
                    at,
                    left,
                    status,
                    handle,
                    ..
                } => {
                    if status.is_ok() && *left > 0 {
                        *status = rdma::check(
                            &view,
                            self.id,
                            handle,
                            *at as u64,
                            *left,
                            crate::PUT_REMOTE,
                        )
                        .map(drop);
                    }
                    (if status.is_ok() { *at } else { 0 }, *left)
                }
                Sink::Get { at, left } => (*at, *left),
            };
            if left == 0 {
                break;
            }
            let held = rx.data().len().min(left);
            let took = if held > 0 {
                if at != 0 {
                    // SAFETY: `at` is checked memory: for a put, our live registration
                    // with remote-write access (checked just now); for a get, the
                    // origin's buffer, checked with local-write access when the get
                    // started and kept by the caller until its completion.
                    unsafe { crate::copy_bytes(rx.data().as_ptr(), at as *mut u8, held) };
                }
                rx.consume(held);
                held
            } else {
                let Some(c) = self.conns.get_mut(id) else {
                    return Ok(None);
                };
                if !c.readable {
                    return Ok(Some(sink));
                }
                let read = if at != 0 {
                    // SAFETY: as above.
                    unsafe { sockets::recv_into(&c.sock, at as *mut u8, left) }
                } else {
                    // Discarded from the buffer on the next turn.
                    rx.fill(&c.sock, 1).map(|(n, full)| {
                        c.readable = full;
                        if n == 0 {
                            return 0;
                        }
                        usize::MAX
                    })
                };
                match read {
                    Ok(0) => return Err("the connection closed".into()),
                    Ok(usize::MAX) => 0,
                    Ok(n) => {
                        if n < left {
                            c.readable = false;
                        }
                        n
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        c.readable = false;
                        0
                    }
                    Err(e) => return Err(format!("reading: {e}")),
                }
            };
            match &mut sink {
                Sink::Put { at, left, .. } | Sink::Get { at, left } => {
                    *at += took;
                    *left -= took;
                }
            }
        }
        if let Sink::Put { req, status, .. } = sink {
            let ack = wire::Encoder::new(Kind::PutAck, 0, 0, Kind::PutAck.ext())
                .u64(req)
                .status(&status);
            self.push(p, k, Item::Bytes(ack.as_bytes().to_vec()));
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
                let item = match rdma::check(
                    &view,
                    self.id,
                    handle,
                    addr,
                    len as usize,
                    crate::GET_REMOTE,
                ) {
                    Ok(h) => Item::GetReply(Box::new(GetReply::new(
                        req,
                        offset,
                        addr as usize,
                        len as usize,
                        h,
                    ))),
                    Err(e) => Item::Bytes(
                        link::done_frame(req, offset, len, &Err(e))
                            .as_bytes()
                            .to_vec(),
                    ),
                };
                self.push(p, k, item);
                Handled::Taken
            }
            Frame::AtomicReq {
                req,
                addr,
                op,
                operand,
                compare,
                handle,
            } => {
                let r = rdma::apply_atomic(&view, self.id, handle, addr, op, operand, compare);
                let (old, status) = match r {
                    Ok(old) => (old, Ok(())),
                    Err(e) => (0, Err(e)),
                };
                let resp = wire::Encoder::new(Kind::AtomicResp, 0, 0, Kind::AtomicResp.ext())
                    .u64(req)
                    .u64(old)
                    .status(&status);
                self.push(p, k, Item::Bytes(resp.as_bytes().to_vec()));
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
                Some(Pending::Atomic { result }) => {
                    if let (Ok(()), Some(at)) = (&status, result) {
                        // SAFETY: 8 bytes checked against a live local registration with
                        // local-write access when the atomic started.
                        unsafe { (at as *mut u64).write_unaligned(old) };
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
        let p = self.live_peer(ep)?;
        let (local_needs, remote_needs) = if put {
            (Access::LOCAL_READ, crate::PUT_REMOTE)
        } else {
            (Access::LOCAL_WRITE, crate::GET_REMOTE)
        };
        local_handle.check::<Reg<NoPin>>(self.id, local, size, local_needs)?;
        rdma::precheck(
            self.peers[p].module,
            remote_handle,
            remote,
            size,
            remote_needs,
        )?;
        let chunk = self.settings.rdma_chunk;
        let n = rdma::chunks(size, chunk).count();
        let what = if put {
            Pending::Put
        } else {
            Pending::Get { local }
        };
        let req = self.ops.start(ep, local, size, what, n, callback);
        let links: Vec<usize> = self.peers[p].stripe(n).collect();
        let h = remote_handle.as_bytes();
        for ((off, len), k) in rdma::chunks(size, chunk).zip(links) {
            let at = remote + off as u64;
            let item = if put {
                let head =
                    wire::Encoder::new(Kind::Put, HANDLE_SIZE as u8, 0, Kind::Put.ext() + len)
                        .u64(req)
                        .u64(at)
                        .handle(h);
                Item::Put {
                    head: Head::new(head.as_bytes()),
                    data: local + off,
                    len,
                }
            } else {
                let head =
                    wire::Encoder::new(Kind::GetReq, HANDLE_SIZE as u8, 0, Kind::GetReq.ext())
                        .u64(req)
                        .u64(off as u64)
                        .u64(at)
                        .u64(len as u64)
                        .handle(h);
                Item::Bytes(head.as_bytes().to_vec())
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
        callback: RdmaCallback,
    ) -> Result<()> {
        if remote % 8 != 0 {
            return Err(Error::Misaligned(remote));
        }
        let p = self.live_peer(ep)?;
        if let Some((local, handle)) = result {
            handle.check::<Reg<NoPin>>(self.id, local, 8, Access::LOCAL_WRITE)?;
        }
        rdma::precheck(
            self.peers[p].module,
            remote_handle,
            remote,
            8,
            Access::ATOMIC,
        )?;
        let local = result.map(|r| r.0);
        let what = Pending::Atomic { result: local };
        let req = self.ops.start(ep, local.unwrap_or(0), 8, what, 1, callback);
        let msg = wire::Encoder::new(
            Kind::AtomicReq,
            HANDLE_SIZE as u8,
            code,
            Kind::AtomicReq.ext(),
        )
        .u64(req)
        .u64(remote)
        .u64(operand)
        .u64(compare)
        .handle(remote_handle.as_bytes());
        self.push(p, 0, Item::Bytes(msg.as_bytes().to_vec()));
        Ok(())
    }
}

impl TcpModule {
    /// Look at what is ready: connections and listeners with news, connections left
    /// with work; the events handled and whether the expected receive was filled.
    #[inline]
    fn poll_ready(&mut self) -> (usize, bool) {
        let mut n = 0;
        let mut events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        if let Err(e) = self.poll.poll(&mut events, Some(Duration::ZERO)) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!(%e, "tcp: epoll_wait failed");
            }
        }
        let mut accept = false;
        for ev in events.iter() {
            let t = ev.token().0;
            if t >= LISTENER_BASE {
                accept = true;
                continue;
            }
            if let Some(c) = self.conns.get_mut(t) {
                c.readable |= ev.is_readable() || ev.is_read_closed() || ev.is_error();
                c.writable |= ev.is_writable() || ev.is_error();
                if !c.queued {
                    c.queued = true;
                    self.ready.push_back((t, c.gen));
                }
            }
        }
        // Callbacks below may progress again: they need the event buffer.
        self.events = events;
        if accept {
            n += self.accept_all();
        }
        // Only what is ready now: a connection left with work waits for the next call.
        for _ in 0..self.ready.len() {
            let Some((id, gen)) = self.ready.pop_front() else {
                break;
            };
            let Some(c) = self.conns.same(id, gen) else {
                continue;
            };
            c.queued = false;
            c.pending = false;
            let (m, stop) = self.service(id);
            n += m;
            if let Some(c) = self.conns.same(id, gen) {
                let more = c.pending || (c.readable && !matches!(c.role, Role::Early { .. }));
                if more && !c.queued {
                    c.queued = true;
                    self.ready.push_back((id, gen));
                }
            }
            if stop {
                return (n, true);
            }
        }
        (n, false)
    }

    /// Attach the connections that rank `rank` made before it was added.
    fn attach_early(&mut self, rank: u32, p: usize) {
        let early = self
            .conns
            .ids(|r| matches!(r, Role::Early { rank: r, .. } if *r == rank));
        for id in early {
            let Some(Role::Early { link, .. }) = self.conns.get(id).map(|c| &c.role) else {
                continue;
            };
            let k = usize::from(*link);
            if k < self.peers[p].links.len() && self.peers[p].links[k].up.is_none() {
                if let Some(c) = self.conns.get_mut(id) {
                    c.readable = true;
                }
                self.link_up(p, k, id);
            } else {
                self.close(id);
            }
        }
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
        let ours: Vec<Listener> = self.listeners.iter().map(|(_, l)| *l).collect();
        let our_ips: Vec<_> = ours.iter().map(|l| *l.addr.ip()).collect();
        let mut out = Vec::with_capacity(procs.len());
        for proc_ in procs {
            let r = proc_.rank;
            if r == self.rank || r >= self.size {
                out.push(None);
                continue;
            }
            if let Some(p) = self.rank_ep[r as usize] {
                out.push((!self.peers[p].removed).then(|| endpoint(p)));
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
            let pairs: Vec<(usize, usize)> = if self.rank < r {
                published::pairs(&ours, &remote.listeners, same_node)
            } else {
                published::pairs(&remote.listeners, &ours, same_node)
                    .into_iter()
                    .map(|(a, b)| (b, a))
                    .collect()
            };
            if pairs.is_empty() {
                out.push(None);
                continue;
            }
            let p = self.peers.len();
            self.peers
                .push(Peer::new(r, &remote, &our_ips, &pairs, self.settings.links));
            self.rank_ep[r as usize] = Some(p);
            self.attach_early(r, p);
            out.push(Some(endpoint(p)));
        }
        Ok(out)
    }

    fn del_procs(&mut self, endpoints: &[Endpoint]) -> Result<()> {
        for &ep in endpoints {
            let p = ep.0 as usize;
            let peer = self.peers.get(p).ok_or(Error::UnknownEndpoint(ep.0))?;
            if !peer.removed {
                if peer.failed.is_none() {
                    self.end_peer(p, "removed by del_procs".into());
                }
                self.peers[p].removed = true;
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

    unsafe fn register_mem(
        &mut self,
        _endpoint: Option<Endpoint>,
        base: usize,
        len: usize,
        access: Access,
    ) -> Result<MemHandle> {
        self.regs.register(self.id, &self.rcache, base, len, access)
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
        self.live_peer(endpoint)?;
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
        self.live_peer(endpoint)?;
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
            .and_then(|_| self.live_peer(endpoint));
        let p = match checked {
            Ok(p) => p,
            Err(error) => return Err(SendError { error, descriptor }),
        };
        let mut lens = [0usize; MAX_SEGMENTS];
        for (l, s) in lens.iter_mut().zip(descriptor.segment_lens()) {
            *l = s;
        }
        let head = wire::am(tag, &lens[..descriptor.segment_count()]);
        let slot = &mut self.peers[p].links[0];
        let conn = slot.up.and_then(|c| self.conns.get_mut(c));
        let mut sent = 0;
        if let (true, Some(conn)) = (slot.queue.is_empty(), conn) {
            if conn.writable {
                let iov = [
                    IoSlice::new(head.as_bytes()),
                    IoSlice::new(descriptor.bytes()),
                ];
                match sockets::send(&conn.sock, &iov) {
                    Ok(n) if n == head.as_bytes().len() + descriptor.len() => {
                        return Ok(SendOutcome::Done(self.finish_send(
                            descriptor,
                            true,
                            Ok(()),
                        )));
                    }
                    Ok(n) => sent = n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => {
                        self.peer_closed(p, format!("writing: {e}"));
                        let error = self
                            .live_peer(endpoint)
                            .err()
                            .unwrap_or(Error::UnknownEndpoint(endpoint.0));
                        return Err(SendError { error, descriptor });
                    }
                }
                conn.writable = false;
            }
            let item = Item::Desc {
                head: Head::new(head.as_bytes()),
                descriptor,
            };
            slot.queue.push_partial(item, sent);
            return Ok(SendOutcome::Queued);
        }
        let item = Item::Desc {
            head: Head::new(head.as_bytes()),
            descriptor,
        };
        self.push(p, 0, item);
        Ok(SendOutcome::Queued)
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
        let p = self.live_peer(endpoint)?;
        let head = wire::am(tag, &[size]);
        self.send_now(p, &[head.as_bytes(), header, payload])?;
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
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        let code = wire::op_code(op);
        self.atomic(
            endpoint,
            None,
            remote,
            remote_handle,
            code,
            operand,
            0,
            callback,
        )
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
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        let result = Some((local, local_handle));
        let code = wire::op_code(op);
        self.atomic(
            endpoint,
            result,
            remote,
            remote_handle,
            code,
            operand,
            0,
            callback,
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
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        let result = Some((local, local_handle));
        self.atomic(
            endpoint,
            result,
            remote,
            remote_handle,
            wire::CSWAP,
            value,
            compare,
            callback,
        )
    }

    fn flush(&mut self, endpoint: Option<Endpoint>) -> Result<()> {
        if let Some(ep) = endpoint {
            self.peers
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
        if self.accepting > 0 {
            self.expire_handshakes();
        }
        if !self.done.is_empty() {
            n += self.run_done();
        }
        if n > 0 {
            self.idle = 0;
        } else if !self.unreported.is_empty() {
            self.idle += 1;
            if self.idle >= IDLE_BEFORE_REPORT {
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
        let waiting = |m: &TcpModule| {
            m.peers
                .iter()
                .any(|p| !p.is_gone() && p.links.iter().any(|l| !l.queue.is_empty()))
        };
        while waiting(self) {
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
