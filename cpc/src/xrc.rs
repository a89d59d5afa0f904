//! The `xrc` connection method's handshake, with no I/O (Open MPI: the XRC part of
//! `btl_openib_connect_xoob.c` and `btl_openib_xrc.c`).
//!
//! With XRC a process sends to every process of a remote node through one send queue
//! pair (an XRC initiator), connected to one receive queue pair on that node (an XRC
//! target, in the node's shared XRC domain); each message names the receiving
//! process's XRC shared receive queue. Connections go one way: each side connects its
//! own initiator to the other's node, so there is nothing to decide about who starts.
//!
//! ```text
//! first peer of a node                process of that node
//!   Connect(initiator) ------------->   creates a target towards it (RTR)
//!                      <-------------   Accept(target, its receive queue)
//!   initiator to RTR+RTS: node and peer up
//!
//! any other peer of a connected node
//!   Attach(target's number) -------->   opens the node's target (keeps it alive)
//!                      <-------------   Attached(its receive queue)
//!   peer up
//! ```
//!
//! Peers wanted while their node is connecting wait for it. When the peer that was
//! connecting the node fails, the initiator is dropped and the next waiting peer
//! connects the node again; when the node's connection breaks, every peer of it fails.
//! [`Node`] is one remote node's side of this process; [`respond`] answers the
//! requests of other nodes' processes.

use crate::oob::QpInfo;
use std::collections::BTreeMap;

/// A handshake message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// Connect a target of your node to my initiator.
    Connect(QpInfo),
    /// Done: the target, and my receive queue's number.
    Accept {
        /// The target queue pair, in RTR towards the initiator.
        target: QpInfo,
        /// The receiving process's XRC shared receive queue.
        srqn: u32,
    },
    /// Your node's target `qpn` is connected to my initiator: open it, tell me your
    /// receive queue.
    Attach {
        /// The target's queue pair number.
        qpn: u32,
    },
    /// Opened: my receive queue's number.
    Attached {
        /// The receiving process's XRC shared receive queue.
        srqn: u32,
    },
}

impl Message {
    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + crate::oob::INFO_LEN + 4);
        match self {
            Message::Connect(i) => {
                out.push(1);
                i.encode(&mut out);
            }
            Message::Accept { target, srqn } => {
                out.push(2);
                target.encode(&mut out);
                out.extend_from_slice(&srqn.to_le_bytes());
            }
            Message::Attach { qpn } => {
                out.push(3);
                out.extend_from_slice(&qpn.to_le_bytes());
            }
            Message::Attached { srqn } => {
                out.push(4);
                out.extend_from_slice(&srqn.to_le_bytes());
            }
        }
        out
    }

    /// A message from its bytes; `None` if they are not one.
    pub fn decode(b: &[u8]) -> Option<Message> {
        let (&kind, rest) = b.split_first()?;
        let word = |b: &[u8]| -> Option<u32> { Some(u32::from_le_bytes(b.try_into().ok()?)) };
        match kind {
            1 => QpInfo::decode(rest).map(Message::Connect),
            2 if rest.len() == crate::oob::INFO_LEN + 4 => {
                let (target, srqn) = rest.split_at(crate::oob::INFO_LEN);
                Some(Message::Accept {
                    target: QpInfo::decode(target)?,
                    srqn: word(srqn)?,
                })
            }
            3 => Some(Message::Attach { qpn: word(rest)? }),
            4 => Some(Message::Attached { srqn: word(rest)? }),
            _ => None,
        }
    }
}

/// What the driver must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create this node's initiator (in INIT) and hand it to [`Node::initiator`].
    CreateInitiator,
    /// Destroy this node's initiator (its connection failed before it was up).
    DropInitiator,
    /// Send a message to a peer.
    Send(u32, Message),
    /// Move the initiator to RTR then RTS towards the node's target.
    Connect(QpInfo),
    /// The peer is reachable: messages to it go through the initiator to its receive
    /// queue `srqn`.
    Up {
        /// The peer.
        peer: u32,
        /// Its XRC shared receive queue.
        srqn: u32,
    },
    /// Connecting to the peer failed.
    Fail {
        /// The peer.
        peer: u32,
        /// Why.
        why: String,
    },
}

/// Where the node's connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// No initiator.
    Idle,
    /// Waiting for the driver to create the initiator, for `peer`.
    Creating { peer: u32 },
    /// `peer` was sent the initiator and is connecting the node.
    Connecting { peer: u32 },
    /// Connected to the target `qpn`.
    Up { qpn: u32 },
    /// Broken: every peer fails.
    Failed,
}

/// Where one peer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    /// Wanted; waits for the node.
    Waiting,
    /// Connecting the node (sent `Connect`).
    Connecting,
    /// Sent `Attach`.
    Attaching,
    /// Reachable through its receive queue.
    Up { srqn: u32 },
    /// Failed.
    Failed,
}

/// This process's connection to one remote node, and to each of its processes.
#[derive(Debug)]
pub struct Node {
    link: Link,
    peers: BTreeMap<u32, Peer>,
}

impl Default for Node {
    fn default() -> Self {
        Node::new()
    }
}

impl Node {
    /// A node nothing was asked of yet.
    pub fn new() -> Node {
        Node {
            link: Link::Idle,
            peers: BTreeMap::new(),
        }
    }

    /// Whether `peer` is reachable, and through which receive queue.
    pub fn srqn(&self, peer: u32) -> Option<u32> {
        match self.peers.get(&peer) {
            Some(Peer::Up { srqn }) => Some(*srqn),
            _ => None,
        }
    }

    /// The local side wants `peer`, a process of this node.
    pub fn start(&mut self, peer: u32) -> Vec<Action> {
        if self.peers.contains_key(&peer) {
            return Vec::new();
        }
        match self.link {
            Link::Failed => {
                self.peers.insert(peer, Peer::Failed);
                vec![Action::Fail {
                    peer,
                    why: "xrc: the connection to its node broke".into(),
                }]
            }
            Link::Up { qpn } => {
                self.peers.insert(peer, Peer::Attaching);
                vec![Action::Send(peer, Message::Attach { qpn })]
            }
            Link::Creating { .. } | Link::Connecting { .. } => {
                self.peers.insert(peer, Peer::Waiting);
                Vec::new()
            }
            Link::Idle => {
                self.peers.insert(peer, Peer::Connecting);
                self.link = Link::Creating { peer };
                vec![Action::CreateInitiator]
            }
        }
    }

    /// The initiator the driver created (in INIT) after [`Action::CreateInitiator`].
    pub fn initiator(&mut self, local: QpInfo) -> Vec<Action> {
        match self.link {
            Link::Creating { peer } => {
                self.link = Link::Connecting { peer };
                vec![Action::Send(peer, Message::Connect(local))]
            }
            _ => Vec::new(),
        }
    }

    /// A message from `peer` arrived.
    pub fn on_message(&mut self, peer: u32, m: Message) -> Vec<Action> {
        let state = self.peers.get(&peer).copied();
        match (self.link, state, m) {
            (
                Link::Connecting { peer: p },
                Some(Peer::Connecting),
                Message::Accept { target, srqn },
            ) if p == peer => {
                self.link = Link::Up { qpn: target.qpn };
                self.peers.insert(peer, Peer::Up { srqn });
                let mut acts = vec![Action::Connect(target), Action::Up { peer, srqn }];
                acts.extend(self.attach_waiting(target.qpn));
                acts
            }
            (Link::Up { .. }, Some(Peer::Attaching), Message::Attached { srqn }) => {
                self.peers.insert(peer, Peer::Up { srqn });
                vec![Action::Up { peer, srqn }]
            }
            (link, state, m) => self.fail(
                peer,
                format!("xrc: unexpected {m:?} from a peer in state {state:?} (node {link:?})"),
            ),
        }
    }

    /// `peer` failed (it died, or refused). If it was connecting the node, the next
    /// waiting peer connects it with a new initiator.
    pub fn on_failure(&mut self, peer: u32, why: &str) -> Vec<Action> {
        self.fail(peer, format!("xrc: {why}"))
    }

    /// The node's connection broke (an error on the initiator): every peer of it fails.
    pub fn on_broken(&mut self, why: &str) -> Vec<Action> {
        self.link = Link::Failed;
        let mut acts = Vec::new();
        for (&peer, state) in self.peers.iter_mut() {
            if *state != Peer::Failed {
                *state = Peer::Failed;
                acts.push(Action::Fail {
                    peer,
                    why: format!("xrc: the connection to its node broke: {why}"),
                });
            }
        }
        acts
    }

    fn fail(&mut self, peer: u32, why: String) -> Vec<Action> {
        let mut acts = Vec::new();
        if self.peers.get(&peer) != Some(&Peer::Failed) {
            self.peers.insert(peer, Peer::Failed);
            acts.push(Action::Fail { peer, why });
        }
        let (connecting, created) = match self.link {
            Link::Creating { peer: p } => (p == peer, false),
            Link::Connecting { peer: p } => (p == peer, true),
            _ => (false, false),
        };
        if connecting {
            if created {
                acts.push(Action::DropInitiator);
            }
            self.link = Link::Idle;
            let next = self
                .peers
                .iter()
                .find(|(_, s)| **s == Peer::Waiting)
                .map(|(&p, _)| p);
            if let Some(next) = next {
                self.peers.remove(&next);
                acts.extend(self.start(next));
            }
        }
        acts
    }

    fn attach_waiting(&mut self, qpn: u32) -> Vec<Action> {
        let mut acts = Vec::new();
        for (&peer, state) in self.peers.iter_mut() {
            if *state == Peer::Waiting {
                *state = Peer::Attaching;
                acts.push(Action::Send(peer, Message::Attach { qpn }));
            }
        }
        acts
    }
}

/// What the receiving side does with the node's targets (the driver's verbs calls).
pub trait Targets {
    /// Create a target in the node's XRC domain, moved to RTR towards `initiator`.
    fn create(&mut self, initiator: QpInfo) -> Result<QpInfo, String>;
    /// Open the node's existing target `qpn` (a reference that keeps it alive).
    fn open(&mut self, qpn: u32) -> Result<(), String>;
}

/// Answer a request from another node's process, whose messages will arrive in this
/// process's receive queue `srqn`; `None` for a message that is not a request.
pub fn respond(
    m: Message,
    srqn: u32,
    targets: &mut impl Targets,
) -> Option<Result<Message, String>> {
    match m {
        Message::Connect(initiator) => Some(
            targets
                .create(initiator)
                .map(|target| Message::Accept { target, srqn }),
        ),
        Message::Attach { qpn } => Some(targets.open(qpn).map(|()| Message::Attached { srqn })),
        Message::Accept { .. } | Message::Attached { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(qpn: u32) -> QpInfo {
        QpInfo {
            qpn,
            psn: qpn + 7,
            lid: 0,
            gid: [qpn as u8; 16],
            mtu: 3,
        }
    }

    /// A node's targets as a list: the qpn a target gets, the qpns opened.
    #[derive(Default)]
    struct FakeTargets {
        created: Vec<QpInfo>,
        opened: Vec<u32>,
        refuse: bool,
    }

    impl Targets for FakeTargets {
        fn create(&mut self, initiator: QpInfo) -> Result<QpInfo, String> {
            if self.refuse {
                return Err("ibv_create_qp: out of resources".into());
            }
            self.created.push(initiator);
            Ok(info(900 + self.created.len() as u32))
        }
        fn open(&mut self, qpn: u32) -> Result<(), String> {
            if !(901..=900 + self.created.len() as u32).contains(&qpn) {
                return Err(format!("no target {qpn}"));
            }
            self.opened.push(qpn);
            Ok(())
        }
    }

    /// Run the sender's actions against a remote node whose process `p` has receive
    /// queue `100 + p`, until no message is left; what the sender did.
    fn run(node: &mut Node, targets: &mut FakeTargets, first: Vec<Action>) -> Vec<Action> {
        let mut done = Vec::new();
        let mut todo = first;
        while !todo.is_empty() {
            let mut next = Vec::new();
            for a in todo {
                match &a {
                    Action::CreateInitiator => next.extend(node.initiator(info(1))),
                    Action::Send(peer, m) => match respond(*m, 100 + peer, targets) {
                        Some(Ok(reply)) => next.extend(node.on_message(*peer, reply)),
                        Some(Err(why)) => next.extend(node.on_failure(*peer, &why)),
                        None => panic!("{m:?} is not a request"),
                    },
                    _ => {}
                }
                done.push(a);
            }
            todo = next;
        }
        done
    }

    #[test]
    fn the_first_peer_connects_the_node_and_the_others_attach() {
        let mut node = Node::new();
        let mut t = FakeTargets::default();
        let first = node.start(5);
        assert_eq!(first, vec![Action::CreateInitiator]);
        // Two more peers of the node are wanted before the driver made the initiator.
        assert!(node.start(6).is_empty() && node.start(7).is_empty());
        let done = run(&mut node, &mut t, first);
        assert_eq!(t.created, vec![info(1)], "one target for the whole node");
        assert_eq!(t.opened, vec![901, 901], "the others open it");
        assert!(done.contains(&Action::Connect(info(901))));
        for p in [5, 6, 7] {
            assert_eq!(node.srqn(p), Some(100 + p));
            assert!(done.contains(&Action::Up {
                peer: p,
                srqn: 100 + p
            }));
        }
        // The initiator is connected before anyone is reported up.
        let connect = done.iter().position(|a| matches!(a, Action::Connect(_)));
        let up = done.iter().position(|a| matches!(a, Action::Up { .. }));
        assert!(connect < up);
        // A peer wanted once the node is up only attaches.
        let first = node.start(8);
        let done = run(&mut node, &mut t, first);
        assert_eq!(done[0], Action::Send(8, Message::Attach { qpn: 901 }));
        assert_eq!(node.srqn(8), Some(108));
        assert_eq!(t.created.len(), 1);
        assert!(node.start(8).is_empty(), "a peer is started once");
    }

    #[test]
    fn a_failed_connecting_peer_hands_the_node_to_the_next_waiting_one() {
        let mut node = Node::new();
        assert_eq!(node.start(5), vec![Action::CreateInitiator]);
        assert!(node.start(6).is_empty());
        assert_eq!(
            node.initiator(info(1)),
            vec![Action::Send(5, Message::Connect(info(1)))]
        );
        let acts = node.on_failure(5, "the process ended");
        assert!(matches!(&acts[0], Action::Fail { peer: 5, why } if why.contains("ended")));
        assert_eq!(acts[1..], [Action::DropInitiator, Action::CreateInitiator]);
        let mut t = FakeTargets::default();
        let done = run(&mut node, &mut t, vec![Action::CreateInitiator]);
        assert!(done.contains(&Action::Up { peer: 6, srqn: 106 }));
        assert_eq!(node.srqn(5), None);
    }

    #[test]
    fn a_refused_connect_fails_the_peer_and_nothing_is_left_waiting() {
        let mut node = Node::new();
        let mut t = FakeTargets {
            refuse: true,
            ..FakeTargets::default()
        };
        let first = node.start(3);
        let done = run(&mut node, &mut t, first);
        assert!(
            done.iter().any(
                |a| matches!(a, Action::Fail { peer: 3, why } if why.contains("out of resources"))
            ),
            "{done:?}"
        );
        assert!(done.contains(&Action::DropInitiator));
        // The node can be tried again for another peer.
        t.refuse = false;
        let again = node.start(4);
        assert_eq!(again, vec![Action::CreateInitiator]);
        run(&mut node, &mut t, again);
        assert_eq!(node.srqn(4), Some(104));
    }

    #[test]
    fn a_broken_node_fails_its_peers_now_and_later() {
        let mut node = Node::new();
        let mut t = FakeTargets::default();
        let first = node.start(1);
        assert!(node.start(2).is_empty());
        run(&mut node, &mut t, first);
        let acts = node.on_broken("retry count exceeded");
        assert_eq!(acts.len(), 2);
        assert!(acts
            .iter()
            .all(|a| matches!(a, Action::Fail { why, .. } if why.contains("retry count"))));
        assert!(matches!(&node.start(3)[..], [Action::Fail { peer: 3, .. }]));
        assert_eq!(node.srqn(1), None);
    }

    #[test]
    fn unexpected_messages_fail_the_peer_with_the_states() {
        let mut node = Node::new();
        let acts = node.on_message(9, Message::Attached { srqn: 1 });
        assert!(
            matches!(&acts[..], [Action::Fail { peer: 9, why }] if why.contains("Attached") && why.contains("Idle")),
            "{acts:?}"
        );
        // An accept from a peer that is not the one connecting the node.
        let mut node = Node::new();
        node.start(1);
        node.start(2);
        node.initiator(info(1));
        let acts = node.on_message(
            2,
            Message::Accept {
                target: info(5),
                srqn: 2,
            },
        );
        assert!(
            matches!(&acts[..], [Action::Fail { peer: 2, .. }]),
            "{acts:?}"
        );
        assert_eq!(node.srqn(1), None, "the node is still connecting");
    }

    #[test]
    fn messages_round_trip() {
        for m in [
            Message::Connect(info(7)),
            Message::Accept {
                target: info(8),
                srqn: 77,
            },
            Message::Attach { qpn: 12 },
            Message::Attached { srqn: 13 },
        ] {
            assert_eq!(Message::decode(&m.encode()), Some(m));
        }
        assert_eq!(Message::decode(&[3, 1, 2]), None);
        assert_eq!(Message::decode(&[2, 1]), None);
        assert_eq!(Message::decode(&[]), None);
        assert_eq!(Message::decode(&[9, 0, 0, 0, 0]), None);
    }
}
