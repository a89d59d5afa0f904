//! The connections of a `tcp` module: its listeners, the handshakes of accepted
//! connections and of its own attempts, which connection each peer's link runs on,
//! and the writing side of the links (queues drained as the sockets take them).
//!
//! What it cannot settle itself it leaves for the module: descriptors written whole
//! ([`Net::written`], whose completions the module runs) and peers whose link failed
//! ([`Net::failures`], which the module ends after reading what their other links
//! hold).
//!
//! (Over 600 lines: one type, the owner of the connection table and the peers' link
//! slots, which the accept, handshake, connect and write paths all update together.)

use super::conn::{Conn, Conns, Role};
use super::handshake::{self, Expect, LinkState, Refusal, Step, Verdict};
use super::interfaces::Interface;
use super::link::{Head, Item, RxBuf};
use super::peer::{endpoint, ConnId, Peer};
use super::published::{self, Listener, Published};
use super::wire::{self, Frame, Hello, Kind, Limits};
use super::{sockets, Refused, Settings};
use crate::keytable::KeyTableView;
use crate::{Descriptor, Endpoint, Error, ModuleId, Result};
use mio::{Events, Poll, Token};
use socket2::Socket;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::time::Instant;

/// Tokens from here up are listeners (`usize::MAX - index`).
const LISTENER_BASE: usize = usize::MAX - 1024;
/// Bytes queued on a link beyond which `sendi` says `OutOfResource`.
const MAX_QUEUED: usize = 4 << 20;

/// What became of a descriptor given to [`Net::send_desc`].
pub enum DescSent {
    /// Written whole at once.
    Written(Descriptor),
    /// Queued (partly written, or the link is busy or not up yet).
    Queued,
    /// The write failed: the peer is gone.
    Failed(String, Descriptor),
}

/// A module's connections and links.
pub struct Net {
    rank: u32,
    size: u32,
    me: ModuleId,
    /// The module's registrations, checked again before a get reply is written.
    table: KeyTableView,
    settings: Settings,
    limits: Limits,
    poll: Poll,
    events: Events,
    listeners: Vec<(Socket, Listener)>,
    /// Every connection.
    pub conns: Conns,
    /// Peers, by endpoint.
    pub peers: Vec<Peer>,
    rank_ep: Vec<Option<usize>>,
    /// Connections to look at (readable, or stopped early), with their generation.
    ready: VecDeque<(ConnId, u64)>,
    /// Accepted connections before their HELLO.
    accepting: usize,
    refused: Refused,
    /// Descriptors written whole, for the module to complete.
    pub written: Vec<Descriptor>,
    /// Peers one of whose links failed, and why, for the module to end.
    pub failures: Vec<(usize, String)>,
}

fn os(call: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Os { call, source }
}

impl Net {
    /// Listen on every address of `interfaces`, each with a fresh secret.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        me: ModuleId,
        table: KeyTableView,
        settings: Settings,
        limits: Limits,
        rank: u32,
        size: u32,
        interfaces: &[Interface],
    ) -> Result<Net> {
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
        Ok(Net {
            rank,
            size,
            me,
            table,
            settings,
            limits,
            poll,
            events: Events::with_capacity(64),
            listeners,
            conns: Conns::default(),
            peers: Vec::new(),
            rank_ep: vec![None; size as usize],
            ready: VecDeque::new(),
            accepting: 0,
            refused: Refused::default(),
            written: Vec::new(),
            failures: Vec::new(),
        })
    }

    /// What this module publishes.
    pub fn published(&self, module: ModuleId) -> Published {
        Published {
            module: module.0,
            listeners: self.listeners.iter().map(|(_, l)| *l).collect(),
        }
    }

    /// Connections closed before they were trusted, by reason.
    pub fn refused(&self) -> Refused {
        self.refused
    }

    /// The addresses it listens on.
    pub fn listening(&self) -> Vec<std::net::SocketAddrV4> {
        self.listeners.iter().map(|(_, l)| l.addr).collect()
    }

    /// Accepted connections wait for their HELLO.
    pub fn handshakes_pending(&self) -> bool {
        self.accepting > 0
    }

    /// Peer `ep`'s index, if it takes operations.
    pub fn live_peer(&self, ep: Endpoint) -> Result<usize> {
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

    /// Rank `rank`'s peer index, if added.
    pub fn peer_of(&self, rank: u32) -> Option<usize> {
        self.rank_ep.get(rank as usize).copied().flatten()
    }

    /// Add rank `rank`, which published `remote`; its index, or `None` when no pair of
    /// interfaces reaches it.
    pub fn add_peer(&mut self, rank: u32, remote: &Published, same_node: bool) -> Option<usize> {
        let ours: Vec<Listener> = self.listeners.iter().map(|(_, l)| *l).collect();
        let our_ips: Vec<_> = ours.iter().map(|l| *l.addr.ip()).collect();
        let pairs: Vec<(usize, usize)> = if self.rank < rank {
            published::pairs(&ours, &remote.listeners, same_node)
        } else {
            published::pairs(&remote.listeners, &ours, same_node)
                .into_iter()
                .map(|(a, b)| (b, a))
                .collect()
        };
        if pairs.is_empty() {
            return None;
        }
        let p = self.peers.len();
        let peer = Peer::new(rank, remote, &our_ips, &pairs, self.settings.links);
        self.peers.push(peer);
        self.rank_ep[rank as usize] = Some(p);
        self.attach_early(rank, p);
        Some(p)
    }

    /// Close every connection of peer `p`; what was queued for it.
    pub fn close_peer(&mut self, p: usize) -> Vec<Item> {
        let mut items = Vec::new();
        for k in 0..self.peers[p].links.len() {
            let slot = &mut self.peers[p].links[k];
            let conns = [slot.up.take(), slot.attempt.take()];
            items.extend(slot.queue.take_all());
            for c in conns.into_iter().flatten() {
                self.close(c);
            }
        }
        items
    }

    /// Whether frames wait for a peer that still takes them.
    pub fn frames_waiting(&self) -> bool {
        self.peers
            .iter()
            .any(|p| !p.is_gone() && p.links.iter().any(|l| !l.queue.is_empty()))
    }

    /// Ask `epoll` what is ready (without waiting), accept what listeners have, and
    /// list the connections to look at; the connections accepted.
    #[inline]
    pub fn poll_events(&mut self) -> usize {
        if let Err(e) = self
            .poll
            .poll(&mut self.events, Some(std::time::Duration::ZERO))
        {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!(%e, "tcp: epoll_wait failed");
            }
        }
        let mut accept = false;
        for ev in self.events.iter() {
            let t = ev.token().0;
            if t >= LISTENER_BASE {
                accept = true;
                continue;
            }
            if let Some(c) = self.conns.get_mut(t) {
                c.readable |= ev.is_readable() || ev.is_read_closed() || ev.is_error();
                c.hup |= ev.is_read_closed() || ev.is_error();
                c.writable |= ev.is_writable() || ev.is_error();
                if !c.queued {
                    c.queued = true;
                    self.ready.push_back((t, c.gen));
                }
            }
        }
        if accept {
            self.accept_all()
        } else {
            0
        }
    }

    /// Connections listed now.
    #[inline]
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// The next connection listed, if it is still there (its generation too).
    #[inline]
    pub fn next_ready(&mut self) -> Option<Option<(ConnId, u64)>> {
        let (id, gen) = self.ready.pop_front()?;
        Some(self.conns.same(id, gen).map(|c| {
            c.queued = false;
            c.pending = false;
            (id, gen)
        }))
    }

    /// List connection `id` again if it was left with work.
    #[inline]
    pub fn relist(&mut self, id: ConnId, gen: u64) {
        if let Some(c) = self.conns.same(id, gen) {
            let more = c.pending || (c.readable && !matches!(c.role, Role::Early { .. }));
            if more && !c.queued {
                c.queued = true;
                self.ready.push_back((id, gen));
            }
        }
    }

    fn failed(&mut self, p: usize, why: String) {
        self.failures.push((p, why));
    }

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

    /// Close (and count) accepted connections whose HELLO is late.
    pub fn expire_handshakes(&mut self) {
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

    /// Read what accepted connection `id` has sent of its HELLO, and trust or refuse
    /// it; the events handled.
    pub fn service_accepting(&mut self, id: ConnId) -> usize {
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
            Err(e) => self.failed(p, format!("cannot connect to {}: {e}", to.addr)),
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
            self.failed(p, format!("link {k} to {to}: {why}"));
        }
    }

    /// Drive our connection attempt `id`: its connect, its HELLO, its answer; the
    /// events handled, and `true` once it is up (its frames are the module's then).
    pub fn service_attempt(&mut self, id: ConnId) -> (usize, bool) {
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
                        c.read_some(full);
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
                    (1, true)
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

    /// Queue `item` on link `k` of peer `p`, writing at once when the link is idle.
    pub fn push(&mut self, p: usize, k: usize, item: Item) {
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
    pub fn drain(&mut self, p: usize, k: usize) {
        let slot = &mut self.peers[p].links[k];
        let Some(conn) = slot.up.and_then(|c| self.conns.get_mut(c)) else {
            return;
        };
        let written = &mut self.written;
        let r = slot.queue.drain(&conn.sock, &self.table, self.me, |item| {
            if let Item::Desc { descriptor, .. } = item {
                written.push(descriptor);
            }
        });
        match r {
            Ok(all) => conn.writable = all,
            Err(e) => self.failed(p, format!("writing: {e}")),
        }
    }

    /// Write a small frame of `parts` (at most three) on link 0 of `p` now if the link
    /// is idle, else queue a copy; `Err(OutOfResource)` when too much waits.
    #[inline]
    pub fn send_now(&mut self, p: usize, parts: &[&[u8]]) -> Result<()> {
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
                            self.failed(p, format!("writing: {e}"));
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

    /// Send an active message of `head` then `descriptor`'s bytes on link 0 of `p`:
    /// written now if the link is idle, else queued.
    pub fn send_desc(&mut self, p: usize, head: Head, descriptor: Descriptor) -> DescSent {
        let slot = &mut self.peers[p].links[0];
        let conn = slot.up.and_then(|c| self.conns.get_mut(c));
        let Some(conn) = conn.filter(|_| slot.queue.is_empty()) else {
            self.push(p, 0, Item::Desc { head, descriptor });
            return DescSent::Queued;
        };
        let mut sent = 0;
        if conn.writable {
            let iov = [
                IoSlice::new(head.as_slice()),
                IoSlice::new(descriptor.bytes()),
            ];
            match sockets::send(&conn.sock, &iov) {
                Ok(n) if n == head.as_slice().len() + descriptor.len() => {
                    return DescSent::Written(descriptor)
                }
                Ok(n) => sent = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return DescSent::Failed(format!("writing: {e}"), descriptor),
            }
            conn.writable = false;
        }
        slot.queue
            .push_partial(Item::Desc { head, descriptor }, sent);
        DescSent::Queued
    }
}
