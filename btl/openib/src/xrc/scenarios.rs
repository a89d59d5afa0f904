//! The XRC logic of several processes on fake nodes (see `fake` for the rules the fake
//! device keeps, and why it is used): complete handshakes, targets outliving their
//! maker, connecting peers that end, refuse or are stopped past their deadline, broken
//! initiators, and random interleavings of all of these.

use super::engine::{Engine, NodeId};
use super::fake::{FakeDevice, World, MAX_DEPTH, PER_PEER};
use std::collections::BTreeSet;

/// Three processes on each of two nodes, each wanting every process of the other
/// node: one initiator per (process, remote node), one target per sender on each
/// node, opened by the other processes there, and every send lands in the right queue
/// with the right sender.
#[test]
fn every_process_reaches_a_node_through_one_initiator() {
    let mut w = World::new(&["a", "a", "a", "b", "b", "b"]);
    for me in 0..6 {
        let others = if me < 3 { 3..6 } else { 0..3 };
        for p in others {
            w.start(me, p);
        }
    }
    w.settle();
    w.check();
    for me in 0..6u32 {
        let remote = if me < 3 { "b" } else { "a" };
        assert_eq!(w.shared.made[&(me, remote.to_string())], 1, "rank {me}");
        assert_eq!(w.heard[me as usize].up.len(), 3);
        assert!(w.waiting(me).is_empty());
        let nodes: BTreeSet<NodeId> = w.heard[me as usize]
            .up
            .values()
            .map(|(r, _)| r.node)
            .collect();
        assert_eq!(nodes.len(), 1);
    }
    assert_eq!(w.shared.targets.len(), 6, "one target per sender");
    for t in w.shared.targets.values() {
        assert_eq!(t.holders.len(), 3, "held by every process of its node");
    }
    // A node's own processes too: 0 wants 1 and 2 (its node), through one initiator.
    w.start(0, 1);
    w.start(0, 2);
    w.settle();
    w.check();
    assert_eq!(w.shared.made[&(0, "a".to_string())], 1);
}

/// The process that made a target ends: those that opened it keep it, and sends to
/// them go on; when every holder has ended, a new peer's attach finds it gone and the
/// node is connected again, through a new initiator and target.
#[test]
fn a_target_outlives_its_maker_and_is_made_again_when_all_holders_end() {
    let mut w = World::new(&["a", "b", "b", "b", "b"]);
    w.start(0, 1);
    w.start(0, 2);
    w.settle();
    let t = w.engines[1].as_ref().unwrap().inbound_target(0).unwrap();
    assert_eq!(w.engines[2].as_ref().unwrap().inbound_target(0), Some(t));
    w.kill(1);
    w.settle();
    w.check();
    assert!(w.heard[0].failed.contains_key(&1));
    assert_eq!(
        w.send_data(0, 2),
        Ok((2, 0)),
        "target {t} lives on in rank 2"
    );
    w.kill(2);
    w.settle();
    assert!(
        !w.shared.targets.contains_key(&t),
        "gone with its last holder"
    );
    w.start(0, 3);
    w.start(0, 4);
    w.settle();
    w.check();
    assert_eq!(w.shared.made[&(0, "b".to_string())], 2, "connected anew");
    assert_eq!(w.heard[0].up.len(), 2);
    assert!(w.waiting(0).is_empty());
}

/// The peer connecting a node ends mid-handshake: the next waiting peer connects it;
/// one that cannot make a target refuses, fails alone, and the next one connects.
#[test]
fn connecting_peers_that_end_or_refuse_pass_the_node_on() {
    let mut w = World::new(&["a", "b", "b", "b"]);
    w.shared.refuse.insert(1);
    w.start(0, 1);
    w.start(0, 2);
    w.start(0, 3);
    w.settle();
    w.check();
    assert!(w.heard[0].failed[&1].contains("could not make a target"));
    assert_eq!(w.heard[0].up.len(), 2);
    let mut w = World::new(&["a", "b", "b"]);
    w.start(0, 1);
    w.start(0, 2);
    // Rank 1 ends before it reads the Connect.
    w.kill(1);
    w.settle();
    w.check();
    assert!(w.heard[0].failed.contains_key(&1));
    assert!(w.heard[0].up.contains_key(&2));
    assert_eq!(w.shared.made[&(0, "b".to_string())], 2);
}

/// The peer connecting a node is stopped (it reads nothing): past its deadline it
/// fails, saying what was awaited, and the next waiting peer connects the node. When
/// the stopped peer runs again, its answer to the dropped initiator changes nothing,
/// and it never comes up.
#[test]
fn a_stopped_connecting_peer_past_its_deadline_passes_the_node_on() {
    let mut w = World::new(&["a", "b", "b"]);
    w.start(0, 1);
    w.start(0, 2);
    w.settle_but(1);
    assert_eq!(w.waiting(0), vec![1, 2]);
    w.time_out(0, 1);
    w.settle_but(1);
    w.check();
    let why = &w.heard[0].failed[&1];
    assert!(
        why.contains("not up within 500 ms") && why.contains("no Accept"),
        "{why}"
    );
    assert!(w.heard[0].up.contains_key(&2), "connected through rank 2");
    assert_eq!(w.shared.made[&(0, "b".to_string())], 2);
    // Rank 1 runs again and answers the Connect it was sent.
    w.settle();
    w.check();
    assert!(!w.heard[0].up.contains_key(&1) && w.waiting(0).is_empty());
    assert_eq!(w.send_data(0, 2), Ok((2, 0)));
}

/// An error on a node's initiator fails every peer of that node, now and later, and
/// no other node's.
#[test]
fn a_broken_initiator_fails_every_peer_of_its_node_only() {
    let mut w = World::new(&["a", "b", "b", "c"]);
    for p in 1..4 {
        w.start(0, p);
    }
    w.settle();
    let b = w.heard[0].up[&1].0.node;
    w.break_node(0, b);
    w.check();
    let h = &w.heard[0];
    assert!(h.failed[&1].contains("retry count") && h.failed[&2].contains("retry count"));
    assert!(h.up.contains_key(&3), "node c is untouched");
    w.engines[0].as_mut().unwrap().forget(
        2,
        &mut FakeDevice {
            me: 0,
            names: vec![],
            shared: &mut w.shared,
        },
    );
    w.engines[0].as_mut().unwrap().add_peer(2, Some("b"));
    w.start(0, 2);
    assert!(w.heard[0].failed[&2].contains("broke"), "still broken");
}

/// Peers of unknown nodes are nodes of their own: never one initiator for two hosts.
#[test]
fn peers_of_unknown_nodes_get_their_own_initiators() {
    let mut e = Engine::new(PER_PEER, MAX_DEPTH);
    let (a, b) = (e.add_peer(1, None), e.add_peer(2, None));
    assert_ne!(a, b);
    assert_eq!(e.add_peer(3, Some("x")), e.add_peer(4, Some("x")));
    assert_eq!(e.add_peer(1, Some("x")), a, "a known rank keeps its node");
    assert_eq!(e.peers_of(e.node_of(3).unwrap()), vec![3, 4]);
}

mod sequences {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Step {
        Start(u32, u32),
        Deliver(usize),
        Kill(u32),
        Break(u32, u32),
        Refuse(u32),
        TimeOut(u32, u32),
    }

    fn step(n: u32) -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0..n, 0..n).prop_map(|(a, b)| Step::Start(a, b)),
            8 => (0usize..64).prop_map(Step::Deliver),
            1 => (0..n).prop_map(Step::Kill),
            1 => (0..n, 0..n).prop_map(|(a, b)| Step::Break(a, b)),
            1 => (0..n).prop_map(Step::Refuse),
            1 => (0..n, 0..n).prop_map(|(a, b)| Step::TimeOut(a, b)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        /// Any interleaving of wanting peers, messages, processes ending, initiators
        /// breaking, refusals and connections past their deadline: at every step each up peer is reached through its
        /// node's one initiator, naming its own queue, and received as who sent it;
        /// once the network is quiet, no process waits for a peer, and a peer on whose
        /// way nothing failed is up.
        #[test]
        fn connections_stay_consistent(
            nodes in prop::collection::vec(0u8..3, 2..7),
            steps in prop::collection::vec(step(7), 0..80),
        ) {
            let names: Vec<String> = nodes.iter().map(|n| format!("n{n}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let n = names.len() as u32;
            let mut w = World::new(&names);
            let mut troubled = BTreeSet::new();
            for s in steps {
                match s {
                    Step::Start(a, b) if a < n && b < n && a != b => w.start(a, b),
                    Step::Deliver(k) => {
                        w.deliver(k);
                    }
                    Step::Kill(r) if r < n => {
                        w.kill(r);
                        troubled.insert(names[r as usize]);
                    }
                    Step::Break(a, b) if a < n && b < n && a != b => {
                        if let Some(node) = w.engines[a as usize].as_ref().and_then(|e| e.node_of(b)) {
                            w.break_node(a, node);
                            troubled.insert(names[b as usize]);
                        }
                    }
                    Step::Refuse(r) if r < n => {
                        w.shared.refuse.insert(r);
                        troubled.insert(names[r as usize]);
                    }
                    Step::TimeOut(a, b) if a < n && b < n && a != b => {
                        w.time_out(a, b);
                        troubled.insert(names[b as usize]);
                    }
                    _ => {}
                }
                w.check();
            }
            w.settle();
            w.check();
            for a in 0..n {
                prop_assert!(w.waiting(a).is_empty(), "rank {a} waits for {:?}", w.waiting(a));
                if !w.shared.alive[a as usize] {
                    continue;
                }
                for &p in &w.heard[a as usize].started {
                    if !troubled.contains(names[p as usize]) {
                        prop_assert!(
                            w.heard[a as usize].up.contains_key(&p),
                            "{a} -> {p}: {:?}", w.heard[a as usize].failed.get(&p)
                        );
                    }
                }
            }
        }
    }
}
