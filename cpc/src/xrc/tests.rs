//! The `xrc` handshake's tests: a node reached through one initiator, the peers that
//! fail, refuse, are forgotten or pass their deadline while connecting it, broken
//! nodes and gone targets, unexpected messages, and the messages' bytes.

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

/// A node wanted by `peers`, in turn (so the first connects it), what each start
/// asked for left undone.
fn wanted_by(peers: &[u32]) -> Node {
    let mut node = Node::new();
    for &peer in peers {
        node.start(peer);
    }
    node
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

/// A node that peer 1 connected, and the remote side that answered.
fn connected_by_peer_1() -> (Node, Remote) {
    let mut node = Node::new();
    let mut r = Remote::default();
    let first = node.start(1);
    run(&mut node, &mut r, first);
    (node, r)
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
    assert!(matches!(&acts[0], Action::Fail { peer: 5, why } if why.to_string().contains("ended")));
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
            |a| matches!(a, Action::Fail { peer: 3, why } if why.to_string().contains("could not make a target"))
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
    let mut node = wanted_by(&[1, 2]);
    let acts = node.initiator_failed("ibv_create_qp_ex failed: out of memory");
    assert!(
        matches!(&acts[0], Action::Fail { peer: 1, why } if why.to_string().contains("out of memory"))
    );
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
        .all(|a| matches!(a, Action::Fail { why, .. } if why.to_string().contains("retry count"))));
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
    let (mut node, mut r) = connected_by_peer_1();
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
    let (mut node, _) = connected_by_peer_1();
    node.start(2);
    let acts = node.on_message(2, Message::Gone { qpn: 901 });
    assert!(
        matches!(&acts[..], [Action::Fail { peer: 2, why }] if why.to_string().contains("XRC domain file")),
        "{acts:?}"
    );
    assert_eq!(node.srqn(1), Some(101));
}

#[test]
fn a_forgotten_connecting_peer_passes_the_node_on_unreported() {
    let mut node = wanted_by(&[1, 2]);
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
    let mut node = wanted_by(&[1, 2, 3]);
    node.initiator(info(1));
    let acts = node.time_out(1, waited);
    assert!(
        matches!(&acts[0], Action::Fail { peer: 1, why }
            if why.to_string().starts_with("xrc: the connection was not up within 1500 ms")
                && why.to_string().contains("no Accept")
                && why.to_string().contains("btl_openib_connect_timeout")),
        "{acts:?}"
    );
    assert_eq!(acts[1..], [Action::DropInitiator, Action::CreateInitiator]);
    assert!(node.time_out(1, waited).is_empty(), "failed once");
    node.initiator(info(2));
    // Rank 3 waits for the node, which rank 2 is connecting now.
    let acts = node.time_out(3, waited);
    assert!(
        matches!(&acts[..], [Action::Fail { peer: 3, why }] if why.to_string().contains("which rank 2 is making")),
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
        matches!(&acts[..], [Action::Fail { peer: 4, why }] if why.to_string().contains("(Attach) and it did not answer")),
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
        matches!(&acts[..], [Action::Fail { peer: 9, why }] if why.to_string().contains("Attached") && why.to_string().contains("Idle")),
        "{acts:?}"
    );
    // An accept from a peer that is not the one connecting the node.
    let mut node = wanted_by(&[1, 2]);
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
