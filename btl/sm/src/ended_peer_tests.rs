//! A peer whose process ends, or that removes us: what it sent before is read first,
//! and only then does it count as failed (the last messages of a peer that finished,
//! such as its last barrier's, are not lost to the look that finds it gone).

use super::SmModule;
use crate::component::{default_attributes, Settings};
use crate::liveness::Process;
use crate::test_modex::Shared;
use rbtl_btl::{ActiveMessage, Endpoint, Error, Module, PeerFailure, SendiOutcome, Tag};
use std::sync::{Arc, Mutex};

/// A process that has ended (and was reaped), watched since it ran.
fn ended_process() -> Process {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let watched = Process::new(child.id() as i32);
    child.wait().unwrap();
    assert!(watched.has_exited());
    watched
}

#[test]
fn what_an_ended_peer_sent_is_read_before_it_fails() {
    read_before_failing(
        |m0, _, to1, _| m0.peers[to1.0 as usize].watch(ended_process()),
        |why| matches!(why, PeerFailure::Ended(_)),
    );
}

#[test]
fn what_a_peer_sent_before_it_removed_us_is_read_before_it_fails() {
    read_before_failing(
        |_, m1, _, to0| m1.del_procs(&[to0]).unwrap(),
        |why| matches!(why, PeerFailure::RemovedUs),
    );
}

/// Rank 1 sends three messages to rank 0, then `goes` (rank 0's module, rank 1's, the
/// endpoints of rank 1 and of rank 0) before rank 0 reads any: rank 0's look at its
/// peers fails rank 1 (`failure` says whether with the right reason) only once they
/// are read.
fn read_before_failing(
    goes: impl FnOnce(&mut SmModule, &mut SmModule, Endpoint, Endpoint),
    failure: fn(&PeerFailure) -> bool,
) {
    let job = Shared::job(2);
    let mut modex = [0, 1].map(|rank| job.at(rank));
    let settings = || Settings {
        heap_bytes: 1 << 20,
        ..Settings::default()
    };
    let mut ranks = Vec::new();
    for m in modex.iter_mut() {
        ranks.push(SmModule::new(default_attributes(), settings(), m).unwrap());
    }
    let procs = job.procs();
    let [mut m0, mut m1] = <[SmModule; 2]>::try_from(ranks).ok().unwrap();
    let to1 = m0.add_procs(&procs, &mut modex[0]).unwrap()[1].unwrap();
    let to0 = m1.add_procs(&procs, &mut modex[1]).unwrap()[0].unwrap();

    let tag = Tag(Tag::PML.0 + 1);
    let got = Arc::new(Mutex::new(Vec::new()));
    let heard = got.clone();
    m0.register_am(
        tag,
        Box::new(move |_, r| heard.lock().unwrap().push(r.segments.concat())),
    )
    .unwrap();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let told = errors.clone();
    m0.register_error(Box::new(move |e| {
        let failed = matches!(e.error, Error::PeerFailed { rank: 1, .. });
        told.lock().unwrap().push((failed, e.error.to_string()))
    }));

    for i in 0..3u8 {
        let sent = m1.sendi(&ActiveMessage::new(to0, tag, &[i], &[])).unwrap();
        assert!(matches!(sent, SendiOutcome::Sent));
    }
    goes(&mut m0, &mut m1, to1, to0);
    let i = to1.0 as usize;

    // The look that finds it gone leaves it be while its ring holds messages...
    m0.check_liveness();
    assert!(
        m0.peers[i].failed.is_none(),
        "failed with its messages unread"
    );
    while m0.progress() > 0 {}
    assert_eq!(*got.lock().unwrap(), [vec![0], vec![1], vec![2]]);
    assert!(errors.lock().unwrap().is_empty());

    // ... and fails it once they are read: what involves it fails from then on.
    m0.check_liveness();
    let why = m0.peers[i].failed.as_ref();
    assert!(why.is_some_and(failure), "{why:?}");
    m0.progress();
    let told = errors.lock().unwrap();
    assert!(matches!(told[..], [(true, _)]), "{told:?}");
    drop(told);
    let late = m0.sendi(&ActiveMessage::new(to1, tag, &[9], &[]));
    assert!(
        matches!(late, Err(Error::PeerFailed { rank: 1, .. })),
        "{late:?}"
    );
}
