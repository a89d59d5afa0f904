//! The connection table of a `tcp` module and the peers' links: which connection each
//! link runs on, how a link comes up (our attempt, or the peer's connection accepted
//! by our [`acceptor`], the lower rank's winning when both connect at
//! once), by when it must, and writing to the links.
//!
//! What it cannot settle itself it leaves for the module: descriptors written whole
//! ([`Net::written`], whose completions the module runs) and peers whose link failed
//! ([`Net::failures`], which the module ends after reading what their other links
//! hold).

use crate::acceptor::{self, Acceptor, Heard};
use crate::attempt::{Attempt, Outcome};
use crate::conn::{Conn, Conns, Role};
use crate::handshake::{self, LinkState, Verdict};
use crate::interfaces::Interface;
use crate::link::{Head, Item, RxBuf};
use crate::pairing;
use crate::peer::{ConnId, Peer};
use crate::published::{Listener, Published};
use crate::readiness::Readiness;
use crate::slot::Sent;
use crate::sockets;
use crate::wire::{Hello, Kind, Limits, VERSION};
use crate::{Refused, Settings};
use rbtl_btl::transport_kit::keytable::KeyTableView;
use rbtl_btl::{Descriptor, Endpoint, Error, ModuleId, PeerFailure, Result};
use std::collections::HashMap;
use std::time::Instant;

/// Connection attempts made again, per link, after the peer closed one before
/// answering (it expired our handshake while this process did not progress).
const RETRIES: u8 = 2;

/// A module's connections and links.
pub struct Net {
    rank: u32,
    size: u32,
    me: ModuleId,
    /// The module's registrations, checked again before a get reply is written.
    table: KeyTableView,
    settings: Settings,
    limits: Limits,
    readiness: Readiness,
    acceptor: Acceptor,
    /// Every connection.
    pub conns: Conns,
    /// Peers, by endpoint.
    pub peers: Vec<Peer>,
    /// Peer index by rank (a map: the ranks a module reaches may be few in a large
    /// rank space).
    rank_ep: HashMap<u32, usize>,
    /// Links on their way up, (peer, link), whose deadlines are watched.
    connecting: Vec<(usize, usize)>,
    /// Descriptors written whole, for the module to complete.
    pub written: Vec<Descriptor>,
    /// Peers one of whose links failed, and why, for the module to end.
    pub failures: Vec<(usize, PeerFailure)>,
}

impl Net {
    /// Listen on every address of `interfaces`, each with a fresh secret.
    pub fn new(
        me: ModuleId,
        table: KeyTableView,
        settings: Settings,
        limits: Limits,
        (rank, size): (u32, u32),
        interfaces: &[Interface],
    ) -> Result<Net> {
        let readiness = Readiness::new().map_err(|source| Error::Os {
            call: "epoll_create",
            source,
        })?;
        let acceptor = Acceptor::listen(
            interfaces,
            &settings.sockets,
            settings.handshake_timeout,
            readiness.registry(),
        )?;
        Ok(Net {
            rank,
            size,
            me,
            table,
            settings,
            limits,
            readiness,
            acceptor,
            conns: Conns::default(),
            peers: Vec::new(),
            rank_ep: HashMap::new(),
            connecting: Vec::new(),
            written: Vec::new(),
            failures: Vec::new(),
        })
    }

    /// What this module publishes.
    pub fn published(&self, module: ModuleId) -> Published {
        self.acceptor.published(module.0)
    }

    /// Connections closed before they were trusted, by reason.
    pub fn refused(&self) -> Refused {
        self.acceptor.refused()
    }

    /// The addresses it listens on.
    pub fn listening(&self) -> Vec<std::net::SocketAddr> {
        self.acceptor.listening()
    }

    /// Peer `ep`'s index, if it takes operations.
    #[inline]
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
        self.rank_ep.get(&rank).copied()
    }

    /// Add rank `rank`, which published `remote`; its index, or `None` when no pair of
    /// interfaces reaches it.
    pub fn add_peer(&mut self, rank: u32, remote: &Published, same_node: bool) -> Option<usize> {
        let ours: Vec<Listener> = self.acceptor.listeners();
        let our_ips: Vec<_> = ours.iter().map(|l| l.addr.ip()).collect();
        let pairs = pairing::pairs_with(self.rank, &ours, rank, &remote.listeners, same_node);
        if pairs.is_empty() {
            return None;
        }
        let p = self.peers.len();
        let peer = Peer::new(rank, remote, &our_ips, &pairs, self.settings.links);
        self.peers.push(peer);
        self.rank_ep.insert(rank, p);
        self.attach_early(rank, p);
        Some(p)
    }

    /// Close every connection of peer `p`; what was queued for it.
    pub fn close_peer(&mut self, p: usize) -> Vec<Item> {
        let mut items = Vec::new();
        for k in 0..self.peers[p].links.len() {
            let slot = &mut self.peers[p].links[k];
            let conns = [slot.up.take(), slot.attempt.take()];
            slot.deadline = None;
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

    /// List the connections to look at (see [`Readiness`]) and accept what the
    /// listeners have; the connections accepted.
    #[inline]
    pub fn look(&mut self) -> usize {
        if !self.readiness.look(&mut self.conns) && !self.acceptor.retry() {
            return 0;
        }
        let registry = self.readiness.registry();
        let fresh = self.acceptor.accept_all(&mut self.conns, registry);
        for &id in &fresh {
            self.readiness.enqueue(&mut self.conns, id, false);
        }
        fresh.len()
    }

    /// Whether anything waits for a deadline: handshakes of accepted connections, or
    /// links on their way up.
    #[inline]
    pub fn timers_pending(&self) -> bool {
        self.conns.accepting() > 0 || !self.connecting.is_empty()
    }

    /// Close accepted connections whose HELLO is late, and fail the peers of links
    /// not up by their deadline.
    pub fn expire(&mut self) {
        let now = Instant::now();
        if self.conns.accepting() > 0 {
            self.acceptor
                .expire(&mut self.conns, self.readiness.registry(), now);
        }
        let mut i = 0;
        while i < self.connecting.len() {
            let (p, k) = self.connecting[i];
            let slot = &self.peers[p].links[k];
            let deadline = match slot.deadline {
                Some(d) if slot.up.is_none() && !self.peers[p].is_gone() => d,
                _ => {
                    self.connecting.swap_remove(i);
                    continue;
                }
            };
            if now < deadline {
                i += 1;
                continue;
            }
            let waiting = match slot.attempt.and_then(|id| self.conns.get(id)) {
                Some(Conn {
                    role: Role::Attempt(a),
                    ..
                }) => a.waiting_for(),
                _ if slot.declined => "the peer declined our connection and did not connect itself",
                _ => "no connection",
            };
            let why = format!(
                "link {k} to {} was not up within {} ms: {waiting}",
                self.peers[p].route(k).1.addr,
                self.settings.connect_timeout.as_millis()
            );
            let slot = &mut self.peers[p].links[k];
            slot.deadline = None;
            if let Some(a) = slot.attempt.take() {
                self.close(a);
            }
            self.connecting.swap_remove(i);
            self.failed(p, PeerFailure::Connect(why));
        }
    }

    /// Connections listed now.
    #[inline]
    pub fn ready_len(&self) -> usize {
        self.readiness.listed()
    }

    /// The next connection listed, if it is still there (its generation too).
    #[inline]
    pub fn next_ready(&mut self) -> Option<Option<(ConnId, u64)>> {
        self.readiness.next(&mut self.conns)
    }

    /// List connection `id` again if it was left with work.
    #[inline]
    pub fn relist(&mut self, id: ConnId, gen: u64) {
        self.readiness.relist(&mut self.conns, id, gen);
    }

    /// List connection `id` to be looked at next, to be read whatever its readiness.
    pub fn look_next(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(id) {
            c.readable = true;
        }
        self.readiness.enqueue(&mut self.conns, id, true);
    }

    fn failed(&mut self, p: usize, why: PeerFailure) {
        self.failures.push((p, why));
    }

    fn close(&mut self, id: ConnId) {
        self.conns.remove(self.readiness.registry(), id);
    }

    /// Read what accepted connection `id` has sent of its HELLO, and trust or refuse
    /// it; the events handled.
    pub fn service_accepting(&mut self, id: ConnId) -> usize {
        let links = self.settings.links * self.acceptor.count();
        let who = (
            self.rank,
            self.size,
            links.min(usize::from(u16::MAX)) as u16,
        );
        let registry = self.readiness.registry();
        match self.acceptor.hear(&mut self.conns, registry, id, who) {
            Heard::Waiting => 0,
            Heard::Refused => 1,
            Heard::Member { rank, link } => {
                self.conns.set_role(id, Role::Early { rank, link });
                self.member(id, rank, usize::from(link));
                1
            }
        }
    }

    /// Write an 8-byte answer on a member's fresh connection; whether it went whole.
    fn answer(&self, id: ConnId, kind: Kind) -> bool {
        self.conns
            .get(id)
            .is_some_and(|c| acceptor::answer(&c.sock, kind))
    }

    /// A member's connection for `link`: keep it or decline it.
    fn member(&mut self, id: ConnId, rank: u32, link: usize) {
        let Some(&p) = self.rank_ep.get(&rank) else {
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
        slot.deadline = None;
        if let Some(a) = slot.attempt.take() {
            if a != id {
                self.close(a);
            }
        }
        self.conns.set_role(id, Role::Link { peer: p, link: k });
        if let Some(c) = self.conns.get_mut(id) {
            c.writable = true;
            if c.rx.capacity() < self.settings.rx_bytes && c.rx.data().is_empty() {
                c.rx = RxBuf::new(self.settings.rx_bytes);
            }
        }
        self.drain(p, k);
        self.readiness.enqueue(&mut self.conns, id, false);
    }

    /// Start connecting link `k` of peer `p` unless it is up or on its way.
    fn connect(&mut self, p: usize, k: usize) {
        let slot = &self.peers[p].links[k];
        if slot.up.is_some() || slot.attempt.is_some() || slot.declined || self.peers[p].is_gone() {
            return;
        }
        let (local, to) = self.peers[p].route(k);
        let hello = Hello {
            secret: to.secret,
            rank: self.rank,
            link: k as u16,
            version: VERSION,
        };
        let opts = self.settings.sockets;
        let mut opened;
        loop {
            opened = Attempt::open(p, k, &hello, local, to.addr, &opts).and_then(|(sock, a)| {
                let registry = self.readiness.registry();
                self.conns
                    .insert(registry, sock, Role::Attempt(a), self.settings.rx_bytes)
            });
            // The descriptors of connections still to prove themselves are given up
            // first: a crowd of strangers does not cut the job's own links.
            let short = matches!(&opened, Err(e) if acceptor::short_of_descriptors(e));
            if !(short
                && self
                    .acceptor
                    .make_room(&mut self.conns, self.readiness.registry()))
            {
                break;
            }
        }
        match opened {
            Ok(id) => {
                let slot = &mut self.peers[p].links[k];
                slot.attempt = Some(id);
                if slot.deadline.is_none() {
                    slot.deadline = Some(Instant::now() + self.settings.connect_timeout);
                    slot.retries = RETRIES;
                    self.connecting.push((p, k));
                }
            }
            Err(e) => self.failed(
                p,
                PeerFailure::Connect(format!("cannot connect to {}: {e}", to.addr)),
            ),
        }
    }

    /// Drive our connection attempt `id`: its connect, its HELLO, its answer; the
    /// events handled, and `true` once it is up (its frames are the module's then).
    pub fn service_attempt(&mut self, id: ConnId) -> (usize, bool) {
        let limits = self.limits;
        let Some(Conn {
            sock,
            rx,
            readable,
            writable,
            role: Role::Attempt(a),
            ..
        }) = self.conns.get_mut(id)
        else {
            return (0, false);
        };
        let (p, k) = (a.peer, a.link);
        let outcome = a.advance(sock, rx, readable, writable, &limits);
        let connected = a.connected();
        match outcome {
            Outcome::Waiting => (0, false),
            Outcome::Up => {
                self.link_up(p, k, id);
                (1, true)
            }
            Outcome::Declined => {
                self.close(id);
                let slot = &mut self.peers[p].links[k];
                slot.attempt = None;
                slot.declined = slot.up.is_none();
                (1, false)
            }
            Outcome::Failed(why) => {
                self.attempt_failed(p, k, id, why, connected);
                (1, false)
            }
        }
    }

    fn attempt_failed(&mut self, p: usize, k: usize, id: ConnId, why: String, connected: bool) {
        self.close(id);
        let to = self.peers[p].route(k).1.addr;
        let slot = &mut self.peers[p].links[k];
        if slot.attempt == Some(id) {
            slot.attempt = None;
        }
        if slot.up.is_some() || slot.declined {
            return;
        }
        if connected && slot.retries > 0 {
            // The peer's listener took it and then closed it: most likely the peer
            // expired our handshake while this process did not progress.
            slot.retries -= 1;
            tracing::info!(%to, link = k, %why, "tcp: connecting again");
            self.connect(p, k);
            return;
        }
        self.failed(p, PeerFailure::Connect(format!("link {k} to {to}: {why}")));
    }

    /// Queue `item` on link `k` of peer `p`, writing at once when the link is idle.
    pub fn push(&mut self, p: usize, k: usize, item: Item) {
        let slot = &mut self.peers[p].links[k];
        let conn = slot.up.and_then(|c| self.conns.get_mut(c));
        match slot.push(conn, item, &self.table, self.me, &mut self.written) {
            Sent::NotUp => self.connect(p, k),
            Sent::Failed(why, ()) => self.failed(p, PeerFailure::Broken(why)),
            Sent::Written(()) | Sent::Queued => {}
        }
    }

    /// Write what waits on link `k` of peer `p`, as far as the socket takes it.
    pub fn drain(&mut self, p: usize, k: usize) {
        let slot = &mut self.peers[p].links[k];
        let Some(conn) = slot.up.and_then(|c| self.conns.get_mut(c)) else {
            return;
        };
        if let Err(e) = slot.drain(conn, &self.table, self.me, &mut self.written) {
            self.failed(p, PeerFailure::Broken(sockets::broken("writing", &e)));
        }
    }

    /// Write a small frame of `parts` (at most three) on link 0 of `p` now if the link
    /// is idle, else queue a copy; `Err(OutOfResource)` when too much waits.
    #[inline]
    pub fn send_small(&mut self, p: usize, parts: &[&[u8]]) -> Result<()> {
        let slot = &mut self.peers[p].links[0];
        let conn = slot.up.and_then(|c| self.conns.get_mut(c));
        match slot.send_small(conn, parts)? {
            Sent::NotUp => self.connect(p, 0),
            Sent::Failed(why, ()) => self.failed(p, PeerFailure::Broken(why)),
            Sent::Written(()) | Sent::Queued => {}
        }
        Ok(())
    }

    /// Send an active message of `head` then `descriptor`'s bytes on link 0 of `p`:
    /// written now if the link is idle, else queued (never [`Sent::NotUp`]: the link
    /// is being connected then).
    pub fn send_desc(&mut self, p: usize, head: Head, descriptor: Descriptor) -> Sent<Descriptor> {
        let slot = &mut self.peers[p].links[0];
        let conn = slot.up.and_then(|c| self.conns.get_mut(c));
        match slot.send_desc(conn, head, descriptor) {
            Sent::NotUp => {
                self.connect(p, 0);
                Sent::Queued
            }
            other => other,
        }
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
