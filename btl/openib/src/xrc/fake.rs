//! Several processes on fake nodes, each with its XRC [`Engine`], talking through a
//! fake XRC device and a fake out-of-band network. A fake device is used here only
//! because no device this project runs on has XRC (soft-RoCE and siw refuse the
//! domain): everything else in the transport runs on a real device in the test guest.
//!
//! The fake keeps XRC's rules as the hardware does: a node's domain holds its targets
//! and its processes' receive queues; a target lives while some process of its node
//! holds it (made or opened); an initiator in RTS reaches one target, and a request
//! through it lands in the receive queue it names only if that queue is in the
//! target's domain. The network keeps each pair's messages in order, and a process
//! hears of another's end on any connection between them (as the TCP channel does).
//! A send through an up peer's route is checked to land in that peer's queue, with
//! the sender named by the target it came through.

use super::engine::{Device, DeviceError, Engine, Event, NodeId, Route};
use crate::channel::ChannelError;
use rbtl_cpc::oob::QpInfo;
use rbtl_cpc::xrc::Message;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Per-peer depth the engines ask for, and the device's largest queue.
pub(super) const PER_PEER: u32 = 10;
pub(super) const MAX_DEPTH: u32 = 1000;

#[derive(Debug)]
struct Initiator {
    owner: u32,
    /// The owner's number of the remote node, and that node's name.
    node: NodeId,
    remote: String,
    /// The target it is connected to.
    target: Option<u32>,
    retired: bool,
    broken: bool,
}

#[derive(Debug)]
pub(super) struct Target {
    /// The node whose domain holds it.
    domain: String,
    /// The initiator it is connected to.
    initiator: u32,
    pub(super) holders: BTreeSet<u32>,
}

/// What is on the wire between two processes.
#[derive(Clone, Copy, Debug)]
enum Envelope {
    Msg(Message),
    /// The sender's process ended.
    Closed,
}

/// The device, domains and network every fake process shares.
#[derive(Debug, Default)]
pub(super) struct Shared {
    node_of: Vec<String>,
    pub(super) alive: Vec<bool>,
    next_qpn: u32,
    initiators: BTreeMap<u32, Initiator>,
    pub(super) targets: BTreeMap<u32, Target>,
    /// In flight, per (from, to), in order.
    wire: BTreeMap<(u32, u32), Vec<Envelope>>,
    /// Pairs with a connection (either way): a process's end is heard on it.
    talked: BTreeSet<(u32, u32)>,
    /// Processes that cannot make targets.
    pub(super) refuse: BTreeSet<u32>,
    /// Initiators made, per (owner, remote node name).
    pub(super) made: BTreeMap<(u32, String), usize>,
}

impl Shared {
    fn srqn(rank: u32) -> u32 {
        5000 + rank
    }

    fn qpn(&mut self) -> u32 {
        self.next_qpn += 1;
        self.next_qpn
    }

    fn live_initiator(&self, owner: u32, node: NodeId) -> Option<u32> {
        self.initiators
            .iter()
            .find(|(_, i)| i.owner == owner && i.node == node && !i.retired)
            .map(|(&q, _)| q)
    }

    fn release(&mut self, rank: u32, qpn: u32) {
        if let Some(t) = self.targets.get_mut(&qpn) {
            t.holders.remove(&rank);
            if t.holders.is_empty() {
                self.targets.remove(&qpn);
            }
        }
    }
}

/// One process's view of the shared device.
pub(super) struct FakeDevice<'a> {
    pub(super) me: u32,
    /// The node names of this process's engine, by number.
    pub(super) names: Vec<String>,
    pub(super) shared: &'a mut Shared,
}

/// `call` failing with `errno`, as the verbs wrapper reports it.
fn verbs_error(call: &'static str, errno: i32) -> DeviceError {
    DeviceError::Verbs(rbtl_verbs::Error::Call {
        call,
        source: std::io::Error::from_raw_os_error(errno),
    })
}

impl Device for FakeDevice<'_> {
    fn srqn(&mut self) -> Result<u32, DeviceError> {
        Ok(Shared::srqn(self.me))
    }

    fn create_initiator(&mut self, node: NodeId, depth: u32) -> Result<(QpInfo, u32), DeviceError> {
        assert!(
            self.shared.live_initiator(self.me, node).is_none(),
            "rank {} made a second live initiator for node {node}",
            self.me
        );
        let qpn = self.shared.qpn();
        let remote = self.names[node].clone();
        *self
            .shared
            .made
            .entry((self.me, remote.clone()))
            .or_default() += 1;
        self.shared.initiators.insert(
            qpn,
            Initiator {
                owner: self.me,
                node,
                remote,
                target: None,
                retired: false,
                broken: false,
            },
        );
        Ok((info(qpn), depth))
    }

    fn connect_initiator(&mut self, node: NodeId, target: &QpInfo) -> Result<(), DeviceError> {
        let q = self
            .shared
            .live_initiator(self.me, node)
            .expect("made first");
        self.shared.initiators.get_mut(&q).unwrap().target = Some(target.qpn);
        Ok(())
    }

    fn retire_initiator(&mut self, node: NodeId) {
        if let Some(q) = self.shared.live_initiator(self.me, node) {
            self.shared.initiators.get_mut(&q).unwrap().retired = true;
        }
    }

    fn create_target(&mut self, initiator: &QpInfo) -> Result<QpInfo, DeviceError> {
        if self.shared.refuse.contains(&self.me) {
            return Err(verbs_error("ibv_create_qp_ex", libc::ENOMEM));
        }
        let qpn = self.shared.qpn();
        let domain = self.shared.node_of[self.me as usize].clone();
        self.shared.targets.insert(
            qpn,
            Target {
                domain,
                initiator: initiator.qpn,
                holders: BTreeSet::from([self.me]),
            },
        );
        Ok(info(qpn))
    }

    fn open_target(&mut self, qpn: u32) -> Result<(), DeviceError> {
        let domain = &self.shared.node_of[self.me as usize];
        match self.shared.targets.get_mut(&qpn) {
            Some(t) if t.domain == *domain => {
                t.holders.insert(self.me);
                Ok(())
            }
            _ => Err(verbs_error("ibv_open_qp", libc::ENOENT)),
        }
    }

    fn drop_target(&mut self, qpn: u32) {
        self.shared.release(self.me, qpn);
    }

    fn send(&mut self, rank: u32, m: Message) -> Result<(), DeviceError> {
        if !self.shared.alive[rank as usize] {
            return Err(ChannelError::Unreachable {
                cpc: "xrc",
                rank,
                tried: Vec::new(),
            }
            .into());
        }
        let pair = (self.me.min(rank), self.me.max(rank));
        self.shared.talked.insert(pair);
        let q = self.shared.wire.entry((self.me, rank)).or_default();
        q.push(Envelope::Msg(m));
        Ok(())
    }
}

fn info(qpn: u32) -> QpInfo {
    QpInfo {
        qpn,
        psn: qpn & 0xff_ffff,
        lid: 0,
        gid: [0; 16],
        mtu: 3,
    }
}

/// What one process's transport heard.
#[derive(Debug, Default)]
pub(super) struct Heard {
    pub(super) up: BTreeMap<u32, (Route, u32)>,
    pub(super) failed: BTreeMap<u32, String>,
    /// Receives: target -> sender.
    served: HashMap<u32, u32>,
    pub(super) started: BTreeSet<u32>,
}

/// The processes of a job on fake nodes.
pub(super) struct World {
    pub(super) shared: Shared,
    pub(super) engines: Vec<Option<Engine>>,
    pub(super) heard: Vec<Heard>,
}

impl World {
    /// Processes on the nodes named, in rank order.
    pub(super) fn new(nodes: &[&str]) -> World {
        let n = nodes.len();
        let mut engines = Vec::new();
        for me in 0..n as u32 {
            let mut e = Engine::new(PER_PEER, MAX_DEPTH);
            for (r, node) in nodes.iter().enumerate() {
                if r as u32 != me {
                    e.add_peer(r as u32, Some(node));
                }
            }
            engines.push(Some(e));
        }
        World {
            shared: Shared {
                node_of: nodes.iter().map(|s| s.to_string()).collect(),
                alive: vec![true; n],
                next_qpn: 100,
                ..Shared::default()
            },
            engines,
            heard: (0..n).map(|_| Heard::default()).collect(),
        }
    }

    fn ranks(&self) -> std::ops::Range<u32> {
        0..self.engines.len() as u32
    }

    /// Run `f` on `me`'s engine with its device, and apply what it reports.
    fn with(&mut self, me: u32, f: impl FnOnce(&mut Engine, &mut FakeDevice) -> Vec<Event>) {
        let Some(engine) = self.engines[me as usize].as_mut() else {
            return;
        };
        let names = (0..)
            .map_while(|n| engine.node_name(n).map(String::from))
            .collect();
        let mut dev = FakeDevice {
            me,
            names,
            shared: &mut self.shared,
        };
        let events = f(engine, &mut dev);
        let heard = &mut self.heard[me as usize];
        for e in events {
            match e {
                Event::Up { rank, route, quota } => {
                    assert!(
                        !heard.failed.contains_key(&rank),
                        "rank {me}: {rank} up after failing"
                    );
                    assert!(heard.up.insert(rank, (route, quota)).is_none());
                }
                Event::Failed { rank, why } => {
                    heard.up.remove(&rank);
                    heard.failed.insert(rank, why.to_string());
                }
                Event::Serve { qpn, rank } => {
                    heard.served.insert(qpn, rank);
                }
                Event::Unserve { qpn } => {
                    heard.served.remove(&qpn);
                }
            }
        }
    }

    pub(super) fn start(&mut self, me: u32, peer: u32) {
        self.heard[me as usize].started.insert(peer);
        self.with(me, |e, d| e.start(peer, d));
    }

    /// Deliver the next message on the `k`-th busy pair (modulo their number); false
    /// when nothing is in flight.
    pub(super) fn deliver(&mut self, k: usize) -> bool {
        let busy: Vec<(u32, u32)> = self
            .shared
            .wire
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&p, _)| p)
            .collect();
        if busy.is_empty() {
            return false;
        }
        let (from, to) = busy[k % busy.len()];
        let env = self.shared.wire.get_mut(&(from, to)).unwrap().remove(0);
        if !self.shared.alive[to as usize] {
            return true;
        }
        match env {
            Envelope::Msg(m) => self.with(to, |e, d| e.on_message(from, m, d)),
            Envelope::Closed => self.with(to, |e, d| e.on_peer_gone(from, "it ended", d)),
        }
        true
    }

    pub(super) fn settle(&mut self) {
        while self.deliver(0) {}
    }

    /// Deliver everything but what is for `stopped` (a process that does not progress:
    /// what is sent to it waits).
    pub(super) fn settle_but(&mut self, stopped: u32) {
        loop {
            let next = self
                .shared
                .wire
                .iter()
                .find(|(&(_, to), q)| to != stopped && !q.is_empty())
                .map(|(&pair, _)| pair);
            let Some((from, to)) = next else {
                return;
            };
            let env = self.shared.wire.get_mut(&(from, to)).unwrap().remove(0);
            if !self.shared.alive[to as usize] {
                continue;
            }
            match env {
                Envelope::Msg(m) => self.with(to, |e, d| e.on_message(from, m, d)),
                Envelope::Closed => self.with(to, |e, d| e.on_peer_gone(from, "it ended", d)),
            }
        }
    }

    /// `me`'s connection to `peer` is past its deadline.
    pub(super) fn time_out(&mut self, me: u32, peer: u32) {
        let waited = std::time::Duration::from_millis(500);
        self.with(me, |e, d| e.time_out(peer, waited, d));
    }

    /// End `rank`'s process: what it held is released, and those with a connection
    /// to it hear of it after what it sent them.
    pub(super) fn kill(&mut self, rank: u32) {
        if !self.shared.alive[rank as usize] {
            return;
        }
        self.shared.alive[rank as usize] = false;
        self.engines[rank as usize] = None;
        let held: Vec<u32> = self
            .shared
            .targets
            .iter()
            .filter(|(_, t)| t.holders.contains(&rank))
            .map(|(&q, _)| q)
            .collect();
        for q in held {
            self.shared.release(rank, q);
        }
        for other in self.ranks().filter(|&r| r != rank) {
            if self
                .shared
                .talked
                .contains(&(rank.min(other), rank.max(other)))
            {
                let q = self.shared.wire.entry((rank, other)).or_default();
                q.push(Envelope::Closed);
            }
        }
    }

    /// An error completion on `me`'s initiator to `node`.
    pub(super) fn break_node(&mut self, me: u32, node: NodeId) {
        if let Some(q) = self.shared.live_initiator(me, node) {
            self.shared.initiators.get_mut(&q).unwrap().broken = true;
        }
        self.with(me, |e, d| e.on_broken(node, "retry count exceeded", d));
    }

    /// A send from `from` to `to` through `to`'s route: who received it, as whom.
    pub(super) fn send_data(&self, from: u32, to: u32) -> Result<(u32, u32), String> {
        let engine = self.engines[from as usize].as_ref().ok_or("sender ended")?;
        let route = engine.route(to).ok_or("no route")?;
        let q = self
            .shared
            .live_initiator(from, route.node)
            .ok_or("no live initiator")?;
        let ini = &self.shared.initiators[&q];
        if ini.broken {
            return Err("initiator broken".into());
        }
        let t = ini.target.ok_or("initiator not connected")?;
        let target = self.shared.targets.get(&t).ok_or("target gone")?;
        if target.initiator != q {
            return Err(format!("target {t} serves initiator {}", target.initiator));
        }
        let receiver = self
            .ranks()
            .find(|&r| {
                self.shared.alive[r as usize]
                    && Shared::srqn(r) == route.srqn
                    && self.shared.node_of[r as usize] == target.domain
            })
            .ok_or(format!("no receive queue {} in that domain", route.srqn))?;
        let sender = *self.heard[receiver as usize]
            .served
            .get(&t)
            .ok_or(format!("rank {receiver} does not know target {t}"))?;
        Ok((receiver, sender))
    }

    /// What holds after every step.
    pub(super) fn check(&self) {
        for a in self.ranks().filter(|&r| self.shared.alive[r as usize]) {
            let engine = self.engines[a as usize].as_ref().unwrap();
            let mut initiator_of_node: BTreeMap<String, NodeId> = BTreeMap::new();
            for (&p, &(route, quota)) in &self.heard[a as usize].up {
                let node = self.shared.node_of[p as usize].clone();
                assert_eq!(engine.route(p), Some(route));
                assert_eq!(engine.node_name(route.node), Some(node.as_str()));
                assert_eq!(route.srqn, Shared::srqn(p), "{a} -> {p}: the peer's queue");
                assert!((1..=PER_PEER).contains(&quota));
                // One initiator per remote node serves all its peers.
                let same = *initiator_of_node.entry(node.clone()).or_insert(route.node);
                assert_eq!(same, route.node, "{a}: two initiators for node {node}");
                if self.shared.alive[p as usize] {
                    assert_eq!(self.send_data(a, p), Ok((p, a)), "{a} -> {p}");
                }
            }
            for ((owner, node), made) in &self.shared.made {
                let live = self
                    .shared
                    .initiators
                    .values()
                    .filter(|i| i.owner == *owner && &i.remote == node && !i.retired)
                    .count();
                assert!(
                    live <= 1,
                    "{owner}: {live} live initiators to {node} ({made} made)"
                );
            }
        }
    }

    /// The peers `me` started and still waits for.
    pub(super) fn waiting(&self, me: u32) -> Vec<u32> {
        let Some(engine) = self.engines[me as usize].as_ref() else {
            return Vec::new();
        };
        let h = &self.heard[me as usize];
        h.started
            .iter()
            .copied()
            .filter(|p| {
                engine.is_pending(*p) || !(h.up.contains_key(p) || h.failed.contains_key(p))
            })
            .collect()
    }
}
