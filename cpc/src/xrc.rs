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

use crate::deadline::timed_out;
use crate::oob::{QpInfo, INFO_LEN};
use crate::Failure;
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
        why: Failure,
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
                    why: broken("the connection to its node broke".into()),
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
            Link::Creating { peer } => self.fail(peer, broken(format!("no initiator: {why}"))),
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
                broken("it could not make a target for this process".into()),
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
                    broken(format!(
                        "it could not serve this process through target {qpn}"
                    )),
                ),
            (Link::Up { qpn }, Some(Peer::Attaching { qpn: q }), Message::Gone { qpn: g })
                if qpn == q && g == q =>
            {
                self.gone(peer, qpn)
            }
            (_, Some(state), m) if Self::is_stale(state, &m) => Vec::new(),
            (link, state, m) => self.fail(
                peer,
                Failure::Protocol {
                    cpc: "xrc",
                    what: format!(
                        "unexpected {m:?} from a peer in state {state:?} (node {link:?})"
                    ),
                },
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
                broken(format!(
                    "it could not open its node's target {qpn}, which other processes \
                     there hold (do the processes of a node share their XRC domain file?)"
                )),
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
        self.fail(peer, broken(why.to_string()))
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
        self.fail(peer, timed_out("xrc", waited, &waiting_for))
    }

    /// Forget `peer` (it was removed): as a failure, without reporting it.
    pub fn forget(&mut self, peer: u32) -> Vec<Action> {
        let mut acts = self.fail(peer, Failure::Removed { cpc: "xrc" });
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
                    why: broken(format!("the connection to its node broke: {why}")),
                });
            }
        }
        acts
    }

    fn fail(&mut self, peer: u32, why: Failure) -> Vec<Action> {
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

/// An `xrc` connection ended or refused (by the peer, the device, or the node's
/// connection).
fn broken(what: String) -> Failure {
    Failure::Broken { cpc: "xrc", what }
}

#[cfg(test)]
mod tests;
