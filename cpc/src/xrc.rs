//! The `xrc` connection method's handshake towards one remote node, with no I/O (Open
//! MPI: the XRC part of `connect/btl_openib_connect_udcm.c`, and `btl_openib_xrc.c`).
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
//!                      <-------------   Accept(initiator, target, its receive queue)
//!   initiator to RTR+RTS: node and peer up
//!
//! any other peer of a connected node
//!   Attach(target's number) -------->   opens the node's target (keeps it alive)
//!                      <-------------   Attached(target, its receive queue)
//!   peer up
//! ```
//!
//! Every answer names what it answers (the initiator, or the target), so an answer to
//! an earlier request is told apart and ignored. Peers wanted while their node is
//! connecting wait for it. When the peer that was connecting the node fails, its
//! initiator is dropped and the next waiting peer connects the node again; when the
//! node's connection breaks, every peer of it fails. A peer that cannot open the
//! node's target answers `Gone`: if no peer of the node is up (none holds the target
//! any more, so it was destroyed with the last process that held it), the node is
//! connected again from scratch through that peer (Open MPI: `udcm_xrc_restart_connect`);
//! otherwise the target exists and only that peer fails. A peer not up by its deadline
//! fails as if it had ended ([`Node::time_out`]). [`Node`] is one remote node's side of
//! this process.
//!
//! (Past this project's usual file length: the messages and the state machine are one
//! protocol, about 510 lines, and their tests stay beside them.)

use crate::deadline::expired_why;
use crate::oob::{QpInfo, INFO_LEN};
use std::collections::BTreeMap;
use std::time::Duration;

/// A handshake message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// Connect a target of your node to my initiator.
    Connect(QpInfo),
    /// Done: the target, in RTR towards `initiator`, and my receive queue's number.
    Accept {
        /// The initiator's queue pair number (from the `Connect` this answers).
        initiator: u32,
        /// The target queue pair.
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
    /// Opened target `qpn`: my receive queue's number.
    Attached {
        /// The target (from the `Attach` this answers).
        qpn: u32,
        /// The receiving process's XRC shared receive queue.
        srqn: u32,
    },
    /// Target `qpn` could not be opened: it is gone (or in another domain).
    Gone {
        /// The target (from the `Attach` this answers).
        qpn: u32,
    },
    /// The request naming `qpn` (an initiator to connect, a target to open) could not
    /// be served: this process could not make a target or has no receive queue.
    Refuse {
        /// The initiator or target of the request this answers.
        qpn: u32,
    },
}

impl Message {
    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 4 + INFO_LEN + 4);
        let word = |out: &mut Vec<u8>, w: u32| out.extend_from_slice(&w.to_le_bytes());
        match *self {
            Message::Connect(i) => {
                out.push(1);
                i.encode(&mut out);
            }
            Message::Accept {
                initiator,
                target,
                srqn,
            } => {
                out.push(2);
                word(&mut out, initiator);
                target.encode(&mut out);
                word(&mut out, srqn);
            }
            Message::Attach { qpn } => {
                out.push(3);
                word(&mut out, qpn);
            }
            Message::Attached { qpn, srqn } => {
                out.push(4);
                word(&mut out, qpn);
                word(&mut out, srqn);
            }
            Message::Gone { qpn } => {
                out.push(5);
                word(&mut out, qpn);
            }
            Message::Refuse { qpn } => {
                out.push(6);
                word(&mut out, qpn);
            }
        }
        out
    }

    /// A message from its bytes; `None` if they are not one.
    pub fn decode(b: &[u8]) -> Option<Message> {
        let (&kind, rest) = b.split_first()?;
        let word = |b: &[u8]| -> Option<u32> { Some(u32::from_le_bytes(b.try_into().ok()?)) };
        let words = |b: &[u8]| -> Option<(u32, u32)> {
            (b.len() == 8).then_some(())?;
            Some((word(&b[..4])?, word(&b[4..])?))
        };
        match kind {
            1 => QpInfo::decode(rest).map(Message::Connect),
            2 if rest.len() == 4 + INFO_LEN + 4 => Some(Message::Accept {
                initiator: word(&rest[..4])?,
                target: QpInfo::decode(&rest[4..4 + INFO_LEN])?,
                srqn: word(&rest[4 + INFO_LEN..])?,
            }),
            3 => Some(Message::Attach { qpn: word(rest)? }),
            4 => words(rest).map(|(qpn, srqn)| Message::Attached { qpn, srqn }),
            5 => Some(Message::Gone { qpn: word(rest)? }),
            6 => Some(Message::Refuse { qpn: word(rest)? }),
            _ => None,
        }
    }

    /// Whether it asks something of the receiver (else it answers the receiver).
    pub fn is_request(&self) -> bool {
        matches!(self, Message::Connect(_) | Message::Attach { .. })
    }
}

/// What the driver must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create this node's initiator (in INIT) and hand it to [`Node::initiator`], or
    /// report failing to with [`Node::initiator_failed`].
    CreateInitiator,
    /// Retire this node's initiator: no peer is up through it, and a new one may be
    /// created.
    DropInitiator,
    /// Send a message to a peer.
    Send(u32, Message),
    /// Move the initiator to RTR then RTS towards the node's target (if that fails,
    /// report it with [`Node::on_broken`] and drop the actions after this one).
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
    /// `peer` was sent the initiator (`initiator`) and is connecting the node.
    Connecting { peer: u32, initiator: u32 },
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
    /// Sent `Attach` for target `qpn`.
    Attaching { qpn: u32 },
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

    /// The target the node's initiator is connected to, once it is.
    pub fn target(&self) -> Option<u32> {
        match self.link {
            Link::Up { qpn } => Some(qpn),
            _ => None,
        }
    }

    /// Whether the node's connection broke for good.
    pub fn is_broken(&self) -> bool {
        self.link == Link::Failed
    }

    /// Whether `peer` was started and has neither come up nor failed.
    pub fn is_pending(&self, peer: u32) -> bool {
        matches!(
            self.peers.get(&peer),
            Some(Peer::Waiting | Peer::Connecting | Peer::Attaching { .. })
        )
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
                self.peers.insert(peer, Peer::Attaching { qpn });
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
                self.link = Link::Connecting {
                    peer,
                    initiator: local.qpn,
                };
                vec![Action::Send(peer, Message::Connect(local))]
            }
            _ => Vec::new(),
        }
    }

    /// The driver could not create the initiator: the peer it was for fails, and the
    /// next waiting one tries.
    pub fn initiator_failed(&mut self, why: &str) -> Vec<Action> {
        match self.link {
            Link::Creating { peer } => self.fail(peer, format!("xrc: no initiator: {why}")),
            _ => Vec::new(),
        }
    }

    /// A message from `peer` arrived (requests are not for this side: see
    /// [`Message::is_request`]).
    pub fn on_message(&mut self, peer: u32, m: Message) -> Vec<Action> {
        let state = self.peers.get(&peer).copied();
        match (self.link, state, m) {
            (
                Link::Connecting { peer: p, initiator },
                Some(Peer::Connecting),
                Message::Accept {
                    initiator: i,
                    target,
                    srqn,
                },
            ) if p == peer && i == initiator => {
                self.link = Link::Up { qpn: target.qpn };
                self.peers.insert(peer, Peer::Up { srqn });
                let mut acts = vec![Action::Connect(target), Action::Up { peer, srqn }];
                acts.extend(self.attach_waiting(target.qpn));
                acts
            }
            (
                Link::Connecting { peer: p, initiator },
                Some(Peer::Connecting),
                Message::Refuse { qpn },
            ) if p == peer && qpn == initiator => self.fail(
                peer,
                "xrc: it could not make a target for this process".into(),
            ),
            (
                Link::Up { qpn },
                Some(Peer::Attaching { qpn: q }),
                Message::Attached { qpn: a, srqn },
            ) if qpn == q && a == q => {
                self.peers.insert(peer, Peer::Up { srqn });
                vec![Action::Up { peer, srqn }]
            }
            (_, Some(Peer::Attaching { qpn: q }), Message::Refuse { qpn }) if qpn == q => self
                .fail(
                    peer,
                    format!("xrc: it could not serve this process through target {qpn}"),
                ),
            (Link::Up { qpn }, Some(Peer::Attaching { qpn: q }), Message::Gone { qpn: g })
                if qpn == q && g == q =>
            {
                self.gone(peer, qpn)
            }
            (_, Some(state), m) if Self::is_stale(state, &m) => Vec::new(),
            (link, state, m) => self.fail(
                peer,
                format!("xrc: unexpected {m:?} from a peer in state {state:?} (node {link:?})"),
            ),
        }
    }

    /// Whether `m` answers a request of an earlier state of a peer now in `state`.
    fn is_stale(state: Peer, m: &Message) -> bool {
        let answer = matches!(
            m,
            Message::Accept { .. }
                | Message::Attached { .. }
                | Message::Gone { .. }
                | Message::Refuse { .. }
        );
        let names = match *m {
            Message::Attached { qpn, .. } | Message::Gone { qpn } | Message::Refuse { qpn } => {
                Some(qpn)
            }
            _ => None,
        };
        match state {
            Peer::Waiting | Peer::Failed => answer,
            Peer::Attaching { qpn } => answer && names != Some(qpn),
            Peer::Connecting => matches!(m, Message::Accept { .. } | Message::Refuse { .. }),
            Peer::Up { .. } => false,
        }
    }

    /// `peer` could not open target `qpn`.
    fn gone(&mut self, peer: u32, qpn: u32) -> Vec<Action> {
        if self.peers.values().any(|s| matches!(s, Peer::Up { .. })) {
            // Its up peers hold the target open: it exists, this peer cannot reach it.
            return self.fail(
                peer,
                format!(
                    "xrc: it could not open its node's target {qpn}, which other processes \
                     there hold (do the processes of a node share their XRC domain file?)"
                ),
            );
        }
        // Nobody holds the target: it went with the processes that did. Connect the
        // node again, through this peer; those attaching to the old target wait.
        let mut acts = vec![Action::DropInitiator];
        self.link = Link::Idle;
        for state in self.peers.values_mut() {
            if matches!(state, Peer::Attaching { .. }) {
                *state = Peer::Waiting;
            }
        }
        self.peers.remove(&peer);
        acts.extend(self.start(peer));
        acts
    }

    /// `peer` failed (it died, or refused). If it was connecting the node, the next
    /// waiting peer connects it with a new initiator.
    pub fn on_failure(&mut self, peer: u32, why: &str) -> Vec<Action> {
        self.fail(peer, format!("xrc: {why}"))
    }

    /// `peer` was not up within `waited` of being wanted: it fails, saying what it was
    /// waiting for; if it was connecting the node, the next waiting peer connects it
    /// (nothing happens for a peer that is up, failed or unknown). Its late answers are
    /// stale then.
    pub fn time_out(&mut self, peer: u32, waited: Duration) -> Vec<Action> {
        let waiting_for = match (self.peers.get(&peer), self.link) {
            (
                Some(Peer::Waiting),
                Link::Creating { peer: p } | Link::Connecting { peer: p, .. },
            ) => format!("it waited for its node's connection, which rank {p} is making"),
            (Some(Peer::Waiting), _) => "it waited for its node's connection".into(),
            (Some(Peer::Connecting), _) => {
                "we sent it our initiator (Connect) and it sent no Accept".into()
            }
            (Some(Peer::Attaching { qpn }), _) => format!(
                "we asked it to open its node's target {qpn} (Attach) and it did not answer"
            ),
            _ => return Vec::new(),
        };
        self.fail(peer, expired_why("xrc", waited, &waiting_for))
    }

    /// Forget `peer` (it was removed): as a failure, without reporting it.
    pub fn forget(&mut self, peer: u32) -> Vec<Action> {
        let mut acts = self.fail(peer, String::new());
        acts.retain(|a| !matches!(a, Action::Fail { peer: p, .. } if *p == peer));
        self.peers.remove(&peer);
        acts
    }

    /// The node's connection broke (an error on the initiator, or it could not be
    /// connected): every peer of it fails, now and later. The initiator stays (its
    /// outstanding work completes, with errors, through it).
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
            Link::Connecting { peer: p, .. } => (p == peer, true),
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
                *state = Peer::Attaching { qpn };
                acts.push(Action::Send(peer, Message::Attach { qpn }));
            }
        }
        acts
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

    /// A node's processes as the sender sees them answer: process `p` has receive
    /// queue `100 + p`; targets are numbered from 901 and opened while `alive`.
    #[derive(Default)]
    struct Remote {
        created: Vec<QpInfo>,
        opened: Vec<u32>,
        refuse: bool,
        /// Targets that still exist.
        alive: Vec<u32>,
    }

    impl Remote {
        fn answer(&mut self, peer: u32, m: Message) -> Message {
            match m {
                Message::Connect(i) if self.refuse => Message::Refuse { qpn: i.qpn },
                Message::Connect(i) => {
                    self.created.push(i);
                    let t = info(900 + self.created.len() as u32);
                    self.alive.push(t.qpn);
                    Message::Accept {
                        initiator: i.qpn,
                        target: t,
                        srqn: 100 + peer,
                    }
                }
                Message::Attach { qpn } if self.alive.contains(&qpn) => {
                    self.opened.push(qpn);
                    Message::Attached {
                        qpn,
                        srqn: 100 + peer,
                    }
                }
                Message::Attach { qpn } => Message::Gone { qpn },
                other => panic!("{other:?} is not a request"),
            }
        }
    }

    /// Run the sender's actions against `remote` until no message is left; what the
    /// sender did. Initiators are numbered from 1.
    fn run(node: &mut Node, remote: &mut Remote, first: Vec<Action>) -> Vec<Action> {
        let mut done = Vec::new();
        let mut todo = first;
        let mut initiators = 0;
        while !todo.is_empty() {
            let mut next = Vec::new();
            for a in todo {
                match &a {
                    Action::CreateInitiator => {
                        initiators += 1;
                        next.extend(node.initiator(info(initiators)));
                    }
                    Action::Send(peer, m) => {
                        let reply = remote.answer(*peer, *m);
                        next.extend(node.on_message(*peer, reply));
                    }
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
        let mut r = Remote::default();
        let first = node.start(5);
        assert_eq!(first, vec![Action::CreateInitiator]);
        // Two more peers of the node are wanted before the driver made the initiator.
        assert!(node.start(6).is_empty() && node.start(7).is_empty());
        assert!(node.is_pending(6));
        let done = run(&mut node, &mut r, first);
        assert_eq!(r.created, vec![info(1)], "one target for the whole node");
        assert_eq!(r.opened, vec![901, 901], "the others open it");
        assert!(done.contains(&Action::Connect(info(901))));
        assert_eq!(node.target(), Some(901));
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
        let done = run(&mut node, &mut r, first);
        assert_eq!(done[0], Action::Send(8, Message::Attach { qpn: 901 }));
        assert_eq!(node.srqn(8), Some(108));
        assert_eq!(r.created.len(), 1);
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
        let mut r = Remote::default();
        let done = run(&mut node, &mut r, vec![Action::CreateInitiator]);
        assert!(done.contains(&Action::Up { peer: 6, srqn: 106 }));
        assert_eq!(node.srqn(5), None);
        // Rank 5's answer to its Connect, arriving late, changes nothing.
        let late = Message::Accept {
            initiator: 1,
            target: info(950),
            srqn: 105,
        };
        assert!(node.on_message(5, late).is_empty());
        assert_eq!(node.target(), Some(901));
    }

    #[test]
    fn a_refused_connect_fails_the_peer_and_nothing_is_left_waiting() {
        let mut node = Node::new();
        let mut r = Remote {
            refuse: true,
            ..Remote::default()
        };
        let first = node.start(3);
        let done = run(&mut node, &mut r, first);
        assert!(
            done.iter().any(
                |a| matches!(a, Action::Fail { peer: 3, why } if why.contains("could not make a target"))
            ),
            "{done:?}"
        );
        assert!(done.contains(&Action::DropInitiator));
        // The node can be tried again for another peer.
        r.refuse = false;
        let again = node.start(4);
        assert_eq!(again, vec![Action::CreateInitiator]);
        run(&mut node, &mut r, again);
        assert_eq!(node.srqn(4), Some(104));
    }

    #[test]
    fn a_creation_failure_passes_the_node_to_the_next_peer() {
        let mut node = Node::new();
        node.start(1);
        node.start(2);
        let acts = node.initiator_failed("ibv_create_qp_ex failed: out of memory");
        assert!(matches!(&acts[0], Action::Fail { peer: 1, why } if why.contains("out of memory")));
        assert_eq!(acts[1..], [Action::CreateInitiator], "no initiator to drop");
        assert!(node.initiator_failed("again").len() == 1);
        assert!(node.initiator_failed("no one left").is_empty());
    }

    #[test]
    fn a_broken_node_fails_its_peers_now_and_later() {
        let mut node = Node::new();
        let mut r = Remote::default();
        let first = node.start(1);
        assert!(node.start(2).is_empty());
        run(&mut node, &mut r, first);
        let acts = node.on_broken("retry count exceeded");
        assert_eq!(acts.len(), 2);
        assert!(acts
            .iter()
            .all(|a| matches!(a, Action::Fail { why, .. } if why.contains("retry count"))));
        assert!(node.is_broken());
        assert!(matches!(&node.start(3)[..], [Action::Fail { peer: 3, .. }]));
        assert_eq!(node.srqn(1), None);
    }

    /// The process that created the target ended and nobody else held it: the peer
    /// asked to attach answers Gone, and connects the node anew (a new initiator, a new
    /// target); a peer attaching to the old target meanwhile waits and attaches to the
    /// new one, its late answer about the old one ignored.
    #[test]
    fn a_gone_target_with_nobody_up_connects_the_node_again() {
        let mut node = Node::new();
        let mut r = Remote::default();
        let first = node.start(1);
        run(&mut node, &mut r, first);
        node.on_failure(1, "the process ended");
        r.alive.clear();
        assert_eq!(
            node.start(2),
            vec![Action::Send(2, Message::Attach { qpn: 901 })]
        );
        assert_eq!(
            node.start(3),
            vec![Action::Send(3, Message::Attach { qpn: 901 })]
        );
        let acts = node.on_message(2, Message::Gone { qpn: 901 });
        assert_eq!(acts, [Action::DropInitiator, Action::CreateInitiator]);
        assert_eq!(node.initiator(info(2)).len(), 1);
        let acts = node.on_message(2, r.answer(2, Message::Connect(info(2))));
        assert_eq!(acts[0], Action::Connect(info(902)));
        assert_eq!(acts[1], Action::Up { peer: 2, srqn: 102 });
        assert_eq!(acts[2], Action::Send(3, Message::Attach { qpn: 902 }));
        assert!(node.on_message(3, Message::Gone { qpn: 901 }).is_empty());
        let acts = node.on_message(3, r.answer(3, Message::Attach { qpn: 902 }));
        assert_eq!(acts, [Action::Up { peer: 3, srqn: 103 }]);
    }

    /// Peers up through the target hold it open: a peer that cannot open it only
    /// fails itself, saying what to check.
    #[test]
    fn a_gone_target_with_peers_up_fails_only_that_peer() {
        let mut node = Node::new();
        let mut r = Remote::default();
        let first = node.start(1);
        run(&mut node, &mut r, first);
        node.start(2);
        let acts = node.on_message(2, Message::Gone { qpn: 901 });
        assert!(
            matches!(&acts[..], [Action::Fail { peer: 2, why }] if why.contains("XRC domain file")),
            "{acts:?}"
        );
        assert_eq!(node.srqn(1), Some(101));
    }

    #[test]
    fn a_forgotten_connecting_peer_passes_the_node_on_unreported() {
        let mut node = Node::new();
        node.start(1);
        node.start(2);
        node.initiator(info(1));
        let acts = node.forget(1);
        assert_eq!(acts, [Action::DropInitiator, Action::CreateInitiator]);
        assert!(!node.is_pending(1));
        // Started again later, it is a new peer.
        assert!(node.start(1).is_empty(), "waits for the node again");
        assert!(node.is_pending(1));
    }

    /// The peer connecting the node is silent past its deadline: it fails, saying so,
    /// and the node passes to a waiting peer; a waiting peer past its own deadline says
    /// whom it waited for; an up peer has nothing to give up; and the silent peer's
    /// late Accept is stale.
    #[test]
    fn a_peer_past_its_deadline_fails_and_passes_the_node_on() {
        let waited = Duration::from_millis(1500);
        let mut node = Node::new();
        node.start(1);
        node.start(2);
        node.start(3);
        node.initiator(info(1));
        let acts = node.time_out(1, waited);
        assert!(
            matches!(&acts[0], Action::Fail { peer: 1, why }
                if why.starts_with("xrc: the connection was not up within 1500 ms")
                    && why.contains("no Accept")
                    && why.contains("btl_openib_connect_timeout")),
            "{acts:?}"
        );
        assert_eq!(acts[1..], [Action::DropInitiator, Action::CreateInitiator]);
        assert!(node.time_out(1, waited).is_empty(), "failed once");
        node.initiator(info(2));
        // Rank 3 waits for the node, which rank 2 is connecting now.
        let acts = node.time_out(3, waited);
        assert!(
            matches!(&acts[..], [Action::Fail { peer: 3, why }] if why.contains("which rank 2 is making")),
            "{acts:?}"
        );
        // Rank 1 wakes up and accepts its (dropped) initiator: stale.
        let late = Message::Accept {
            initiator: 1,
            target: info(950),
            srqn: 101,
        };
        assert!(node.on_message(1, late).is_empty());
        let mut r = Remote::default();
        let acts = node.on_message(2, r.answer(2, Message::Connect(info(2))));
        assert!(
            acts.contains(&Action::Up { peer: 2, srqn: 102 }),
            "{acts:?}"
        );
        assert!(node.time_out(2, waited).is_empty(), "up");
        // An attaching peer that never answers.
        node.start(4);
        let acts = node.time_out(4, waited);
        assert!(
            matches!(&acts[..], [Action::Fail { peer: 4, why }] if why.contains("(Attach) and it did not answer")),
            "{acts:?}"
        );
        assert_eq!(node.srqn(2), Some(102));
        assert!(node.time_out(77, waited).is_empty(), "unknown");
    }

    #[test]
    fn unexpected_messages_fail_the_peer_with_the_states() {
        let mut node = Node::new();
        let acts = node.on_message(9, Message::Attached { qpn: 1, srqn: 1 });
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
                initiator: 1,
                target: info(5),
                srqn: 2,
            },
        );
        assert!(
            acts.is_empty(),
            "a waiting peer's answer is stale: {acts:?}"
        );
        let acts = node.on_message(2, Message::Connect(info(3)));
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
                initiator: 3,
                target: info(8),
                srqn: 77,
            },
            Message::Attach { qpn: 12 },
            Message::Attached { qpn: 12, srqn: 13 },
            Message::Gone { qpn: 14 },
            Message::Refuse { qpn: 15 },
        ] {
            assert_eq!(Message::decode(&m.encode()), Some(m));
            assert_eq!(
                m.is_request(),
                matches!(m, Message::Connect(_) | Message::Attach { .. })
            );
        }
        assert_eq!(Message::decode(&[3, 1, 2]), None);
        assert_eq!(Message::decode(&[2, 1]), None);
        assert_eq!(Message::decode(&[4, 1, 0, 0, 0]), None);
        assert_eq!(Message::decode(&[]), None);
        assert_eq!(Message::decode(&[9, 0, 0, 0, 0]), None);
    }
}
