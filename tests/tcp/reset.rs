//! A link between two live ranks broken from outside (`ss -K`, as an administrator or
//! a firewall would): neither rank is said to have ended. The rank whose socket was
//! killed says its host aborted the connection, the other that the connection was
//! reset; each says the peer may still run and that what was in flight is lost (why
//! its peer is failed all the same, as Open MPI's tcp does). Ranks of `tcp.rs`'s
//! launcher.

use super::{errors, expect_all_ok, report_ok, send_byte, tcp_module};
use crate::common::{progress_until, senders};
use rbtl::btl::Tag;

/// Rank 0 kills its end of the link to rank 1 once both have talked over it; each
/// rank's error callback must report the other, with what happened to the link.
pub fn role_reset() {
    let (mut m, eps, mut job) = tcp_module();
    let rank = job.rank;
    let ep = eps[(rank ^ 1) as usize].expect("tcp reaches the peer");
    let seen = errors(&mut m);
    let ping = senders(&mut m, Tag::USR);
    send_byte(&mut m, ep, Tag::USR);
    progress_until(&mut m, "the peer's ping", || {
        !ping.lock().unwrap().is_empty()
    });
    job.modex.fence().unwrap();
    if rank == 0 {
        let link = m
            .link_bytes(ep)
            .unwrap()
            .remove(0)
            .expect("TCP_INFO of the link");
        let out = std::process::Command::new("ss")
            .args(["-K", "src"])
            .arg(link.local.ip().to_string())
            .arg(format!("sport = :{}", link.local.port()))
            .arg("dst")
            .arg(link.peer.ip().to_string())
            .arg(format!("dport = :{}", link.peer.port()))
            .output()
            .expect("ss");
        assert!(out.status.success(), "ss -K: {out:?}");
    }
    progress_until(&mut m, "the broken link's report", || {
        !seen.lock().unwrap().is_empty()
    });
    let why = seen.lock().unwrap().join("\n");
    let peer = rank ^ 1;
    assert!(why.starts_with(&format!("Some({peer}): ")), "{why}");
    let (said, not) = match rank {
        0 => ("the connection was aborted on this host", "reset by"),
        _ => ("the connection was reset by the peer's host", "aborted"),
    };
    assert!(
        why.contains(said)
            && !why.contains(not)
            && why.contains("what was in flight on it is lost"),
        "rank {rank}: {why}"
    );
    assert!(!why.contains("the connection closed"), "rank {rank}: {why}");
    report_ok(rank, "ok");
}

/// Needs root (`ss -K`); says SKIP without it, unless `NODES_REQUIRED=1`.
#[test]
fn a_link_broken_from_outside_is_reported_as_such_on_both_sides() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return rbtl_testkit::cannot_run("a_link_broken_from_outside", "ss -K needs root");
    }
    expect_all_ok("reset", 2, &[]);
}
