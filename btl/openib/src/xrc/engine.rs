//! XRC addressing and connection state for one module, with no verbs calls: which
//! remote node each peer is on, the one initiator per node that serves all its peers,
//! the receive queue each peer's messages name, what becomes of the peers of a node
//! when its connection fails, and the answers to other processes' requests.
//!
//! The handshake towards each node is `rbtl_cpc::xrc::Node`; the receiving side is
//! [`Inbound`]; the share of a node's send queue each of its peers gets is [`Room`].
//! What they need done on the device and on the out-of-band channel goes through a
//! [`Device`] (the verbs glue in `device.rs`; a fake one in the tests), and what the
//! transport must learn comes back as [`Event`]s, which the module applies to its
//! peers.

use super::inbound::Inbound;
use super::room::Room;
use crate::channel::ChannelError;
use rbtl_cpc::oob::QpInfo;
use rbtl_cpc::xrc::{Action, Message, Node};
use rbtl_cpc::Failure;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// A remote node, as this engine numbers them (from 0, in the order peers were
/// added): also the index of its initiator.
pub type NodeId = usize;

/// How a message reaches a peer: through its node's initiator, to its receive queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The node whose initiator carries it.
    pub node: NodeId,
    /// The peer's XRC shared receive queue: every work request to the peer names it.
    pub srqn: u32,
}

/// Why a request of the engine to the [`Device`] failed: the peer it was for (or every
/// peer of the node, for the node's initiator) fails with it.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The node's domain file could not be opened.
    #[error("xrc: the domain file {}: {source}", path.display())]
    DomainFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A verbs call failed (the domain, the receive queue, a queue pair or its move).
    #[error(transparent)]
    Verbs(#[from] rbtl_verbs::Error),
    /// The receive queue's buffers could not be posted.
    #[error("xrc: posting the receive queue's buffers: {0}")]
    Receives(#[from] rbtl_btl::Error),
    /// Opening this process's XRC resources failed before: they are not tried again.
    #[error("{0}")]
    Unusable(std::sync::Arc<DeviceError>),
    /// The node has no initiator to connect.
    #[error("no initiator for node {node}")]
    NoInitiator {
        /// The node.
        node: NodeId,
    },
    /// The message could not go out over the out-of-band channel.
    #[error(transparent)]
    Channel(#[from] ChannelError),
}

/// What the engine needs done: verbs calls on this process's resources, and messages
/// to peers.
pub trait Device {
    /// This process's XRC SRQ number (made, with the node's domain, on first use).
    fn srqn(&mut self) -> Result<u32, DeviceError>;
    /// A new initiator for `node` of at least `depth` send-queue entries, in INIT: its
    /// address and the depth it got.
    fn create_initiator(&mut self, node: NodeId, depth: u32) -> Result<(QpInfo, u32), DeviceError>;
    /// Move `node`'s initiator to RTR and RTS towards `target`.
    fn connect_initiator(&mut self, node: NodeId, target: &QpInfo) -> Result<(), DeviceError>;
    /// `node`'s initiator serves no one any more: keep it aside until the end (work
    /// posted on it may still complete), and let a new one take its place.
    fn retire_initiator(&mut self, node: NodeId);
    /// A target in this node's domain, in RTR from `initiator`.
    fn create_target(&mut self, initiator: &QpInfo) -> Result<QpInfo, DeviceError>;
    /// Open the node's target `qpn` (fails when it is gone).
    fn open_target(&mut self, qpn: u32) -> Result<(), DeviceError>;
    /// Release the target `qpn` made or opened here.
    fn drop_target(&mut self, qpn: u32);
    /// Send `m` to `rank` over the out-of-band channel.
    fn send(&mut self, rank: u32, m: Message) -> Result<(), DeviceError>;
}

/// What the transport must learn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `rank` is reachable by `route`, with `quota` send-queue entries of its own.
    Up {
        /// The peer.
        rank: u32,
        /// Its node's initiator and its receive queue.
        route: Route,
        /// Its share of the initiator's send queue.
        quota: u32,
    },
    /// Connecting to `rank` failed, or its connection broke.
    Failed {
        /// The peer.
        rank: u32,
        /// Why.
        why: Failure,
    },
    /// Messages arriving through target `qpn` come from `rank`.
    Serve {
        /// The target.
        qpn: u32,
        /// The sender.
        rank: u32,
    },
    /// Nothing arrives through target `qpn` any more.
    Unserve {
        /// The target.
        qpn: u32,
    },
}

/// One remote node.
#[derive(Debug)]
struct NodeEntry {
    /// The node's name; `None` for a peer whose node is unknown (it is a node alone).
    name: Option<String>,
    handshake: Node,
    /// The room of its initiator, once made.
    room: Option<Room>,
    /// Peers known on it (the initiator is sized for them).
    peers: usize,
}

/// The XRC state of one module.
#[derive(Debug)]
pub struct Engine {
    /// Send-queue entries a peer wants.
    per_peer: u32,
    /// The device's largest send queue.
    max_depth: u32,
    nodes: Vec<NodeEntry>,
    by_name: HashMap<String, NodeId>,
    node_of: HashMap<u32, NodeId>,
    routes: HashMap<u32, Route>,
    inbound: Inbound,
}

impl Engine {
    /// An engine whose peers each want `per_peer` send-queue entries, on a device
    /// whose largest queue has `max_depth`.
    pub fn new(per_peer: u32, max_depth: u32) -> Engine {
        Engine {
            per_peer,
            max_depth,
            nodes: Vec::new(),
            by_name: HashMap::new(),
            node_of: HashMap::new(),
            routes: HashMap::new(),
            inbound: Inbound::default(),
        }
    }

    /// Know `rank` as a process of `node` (`None`: unknown, a node of its own); its
    /// node's number. A rank already known keeps its node.
    pub fn add_peer(&mut self, rank: u32, node: Option<&str>) -> NodeId {
        if let Some(&id) = self.node_of.get(&rank) {
            return id;
        }
        let id = match node.and_then(|n| self.by_name.get(n)) {
            Some(&id) => id,
            None => {
                let id = self.nodes.len();
                self.nodes.push(NodeEntry {
                    name: node.map(String::from),
                    handshake: Node::new(),
                    room: None,
                    peers: 0,
                });
                if let Some(n) = node {
                    self.by_name.insert(n.to_string(), id);
                }
                id
            }
        };
        self.nodes[id].peers += 1;
        self.node_of.insert(rank, id);
        id
    }

    /// The node of `rank`, if known.
    pub fn node_of(&self, rank: u32) -> Option<NodeId> {
        self.node_of.get(&rank).copied()
    }

    /// The name `node` was added with.
    pub fn node_name(&self, node: NodeId) -> Option<&str> {
        self.nodes.get(node)?.name.as_deref()
    }

    /// How messages reach `rank`, once it is up.
    pub fn route(&self, rank: u32) -> Option<Route> {
        self.routes.get(&rank).copied()
    }

    /// The known peers on `node`.
    pub fn peers_of(&self, node: NodeId) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .node_of
            .iter()
            .filter(|&(_, &n)| n == node)
            .map(|(&r, _)| r)
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether `rank` was started and is neither up nor failed.
    pub fn is_pending(&self, rank: u32) -> bool {
        self.node_of(rank)
            .is_some_and(|n| self.nodes[n].handshake.is_pending(rank))
    }

    /// The target `sender`'s messages to this process come through.
    pub fn inbound_target(&self, sender: u32) -> Option<u32> {
        self.inbound.target_of(sender)
    }

    /// The transport wants `rank` (added before).
    pub fn start(&mut self, rank: u32, dev: &mut impl Device) -> Vec<Event> {
        let Some(node) = self.node_of(rank) else {
            return vec![Event::Failed {
                rank,
                why: Failure::broken("xrc", "not a peer of this module"),
            }];
        };
        let acts = self.nodes[node].handshake.start(rank);
        self.run(node, acts, dev)
    }

    /// A message from `rank` arrived.
    pub fn on_message(&mut self, rank: u32, m: Message, dev: &mut impl Device) -> Vec<Event> {
        if m.is_request() {
            let mut events = Vec::new();
            if let Some(reply) = self.inbound.answer(rank, m, dev, &mut events) {
                if let Err(why) = dev.send(rank, reply) {
                    events.extend(self.on_peer_gone(rank, &why.to_string(), dev));
                }
            }
            return events;
        }
        let Some(node) = self.node_of(rank) else {
            tracing::warn!(rank, ?m, "xrc: an answer from a process that is not a peer");
            return Vec::new();
        };
        let acts = self.nodes[node].handshake.on_message(rank, m);
        self.run(node, acts, dev)
    }

    /// `rank`'s process ended (or cannot be reached): its connection fails, and what
    /// this process held for it is released.
    pub fn on_peer_gone(&mut self, rank: u32, why: &str, dev: &mut impl Device) -> Vec<Event> {
        let mut events = Vec::new();
        self.inbound.release(rank, dev, &mut events);
        if let Some(node) = self.node_of(rank) {
            let acts = self.nodes[node].handshake.on_failure(rank, why);
            events.extend(self.run(node, acts, dev));
        }
        events
    }

    /// `rank` was not up within `waited` of being wanted: it fails, saying what it
    /// waited for, and if it was connecting its node, the next waiting peer does.
    pub fn time_out(&mut self, rank: u32, waited: Duration, dev: &mut impl Device) -> Vec<Event> {
        let Some(node) = self.node_of(rank) else {
            return Vec::new();
        };
        let acts = self.nodes[node].handshake.time_out(rank, waited);
        self.run(node, acts, dev)
    }

    /// `node`'s initiator broke (an error completion): every peer there fails.
    pub fn on_broken(&mut self, node: NodeId, why: &str, dev: &mut impl Device) -> Vec<Event> {
        let Some(entry) = self.nodes.get_mut(node) else {
            return Vec::new();
        };
        let acts = entry.handshake.on_broken(why);
        self.run(node, acts, dev)
    }

    /// Forget `rank` (removed by the transport), unreported.
    pub fn forget(&mut self, rank: u32, dev: &mut impl Device) -> Vec<Event> {
        let mut events = Vec::new();
        self.inbound.release(rank, dev, &mut events);
        if let Some(node) = self.node_of.remove(&rank) {
            self.routes.remove(&rank);
            let entry = &mut self.nodes[node];
            entry.peers -= 1;
            let acts = entry.handshake.forget(rank);
            events.extend(self.run(node, acts, dev));
        }
        events
    }

    /// Carry out `node`'s handshake actions, in order, with what they lead to.
    fn run(&mut self, node: NodeId, acts: Vec<Action>, dev: &mut impl Device) -> Vec<Event> {
        let mut events = Vec::new();
        let mut todo: VecDeque<Action> = acts.into();
        let entry = &mut self.nodes[node];
        while let Some(a) = todo.pop_front() {
            match a {
                Action::CreateInitiator => {
                    let depth = Room::depth(self.per_peer, entry.peers, self.max_depth);
                    match dev.create_initiator(node, depth) {
                        Ok((info, granted)) => {
                            entry.room = Some(Room::new(granted, self.per_peer, entry.peers));
                            todo.extend(entry.handshake.initiator(info));
                        }
                        Err(why) => todo.extend(entry.handshake.initiator_failed(&why.to_string())),
                    }
                }
                Action::DropInitiator => {
                    entry.room = None;
                    dev.retire_initiator(node);
                }
                Action::Send(peer, m) => {
                    if let Err(why) = dev.send(peer, m) {
                        todo.extend(entry.handshake.on_failure(peer, &why.to_string()));
                    }
                }
                Action::Connect(target) => {
                    if let Err(why) = dev.connect_initiator(node, &target) {
                        // What followed assumed a connected initiator.
                        todo.clear();
                        let why = format!("connecting its initiator: {why}");
                        todo.extend(entry.handshake.on_broken(&why));
                    }
                }
                Action::Up { peer, srqn } => match entry.room.as_mut().and_then(Room::take) {
                    Some(quota) => {
                        let route = Route { node, srqn };
                        self.routes.insert(peer, route);
                        events.push(Event::Up {
                            rank: peer,
                            route,
                            quota,
                        });
                    }
                    None => {
                        let why = format!(
                            "no room left in the send queue to its node, shared by {} peers; \
                             lower btl_openib_recv_depth or btl_openib_rdma_depth",
                            entry.peers
                        );
                        todo.extend(entry.handshake.on_failure(peer, &why));
                    }
                },
                Action::Fail { peer, why } => {
                    self.routes.remove(&peer);
                    events.push(Event::Failed { rank: peer, why });
                }
            }
        }
        events
    }
}
