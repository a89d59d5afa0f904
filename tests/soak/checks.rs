//! What the harness asserts of a run's reports, and the counts it adds up.

use crate::report::{End, RankLog};
use std::collections::BTreeMap;

/// Failures an operation involving a killed rank may end with.
const PEER_FAILURES: [&str; 5] = [
    "PeerFailed",
    "AllFailed",
    "PeerTimeout",
    "BtlPeerFailed",
    "BtlPeerTimeout",
];

/// How a device answers a one-sided operation that reaches a target being killed once
/// the dying process's memory registrations are gone but before its queue pairs are:
/// with a remote access error, as for a key that was never live (the origin cannot
/// tell the two apart when the error arrives). Accepted only on such operations with
/// a killed rank.
const DYING_TARGET_REFUSAL: &str = "BtlBadRemoteHandle";

/// The one-sided operations, which reach the target's registered memory.
const ONE_SIDED: [&str; 6] = ["put", "get", "add", "fetch-add", "cswap", "cswap-miss"];

/// What runs did, added up.
#[derive(Default)]
pub struct Stats {
    pub runs: u64,
    pub kills: u64,
    pub started: u64,
    pub ok: u64,
    /// Failures by error variant.
    pub failed: BTreeMap<String, u64>,
    /// Operations started, by kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Operations completed and verified, by kind.
    pub ok_by_kind: BTreeMap<String, u64>,
    /// Messages a killed sender had completed that their receiver did not get (the
    /// message layer drops what a rank sent once it knows that rank failed).
    pub dropped_from_killed: u64,
    pub lost: u64,
    pub corrupt: u64,
}

impl Stats {
    pub fn add(&mut self, run: Stats) {
        self.runs += run.runs;
        self.kills += run.kills;
        self.started += run.started;
        self.ok += run.ok;
        self.dropped_from_killed += run.dropped_from_killed;
        self.lost += run.lost;
        self.corrupt += run.corrupt;
        for (k, v) in run.failed {
            *self.failed.entry(k).or_default() += v;
        }
        for (k, v) in run.by_kind {
            *self.by_kind.entry(k).or_default() += v;
        }
        for (k, v) in run.ok_by_kind {
            *self.ok_by_kind.entry(k).or_default() += v;
        }
    }
}

/// What is wrong with a run whose ranks wrote `logs`, `killed` being the ranks it
/// killed, `with_kills` whether it meant to, and `code` its exit code; the counts go
/// to `stats`.
pub fn check(
    with_kills: bool,
    killed: &[u32],
    code: i32,
    logs: &[RankLog],
    stats: &mut Stats,
) -> Vec<String> {
    let mut bad = Vec::new();
    let typed_blaming_killed = |class: &str, blamed: Option<u32>| {
        PEER_FAILURES.contains(&class) && blamed.is_some_and(|b| killed.contains(&b))
    };
    for (r, log) in logs.iter().enumerate() {
        let r = r as u32;
        let survivor = !killed.contains(&r);
        if log.pid.is_none() {
            bad.push(format!("rank {r} wrote no report"));
        }
        if log.watchdog {
            bad.push(format!("rank {r} was ended by its watchdog"));
        }
        bad.extend(log.panics.iter().map(|p| format!("rank {r}: {p}")));
        for (class, blamed, line) in &log.early_failures {
            if !typed_blaming_killed(class, *blamed) {
                bad.push(format!("rank {r}: {line}"));
            }
        }
        if survivor && !log.done {
            bad.push(format!("rank {r} survived but did not finish its schedule"));
        }
        // A collective cannot succeed once a rank died: any peer failure will do.
        match (&log.finalize, survivor) {
            (Some(Ok(())), _) | (None, false) => {}
            (Some(Err((class, _))), true)
                if with_kills && PEER_FAILURES.contains(&class.as_str()) => {}
            (other, _) => bad.push(format!("rank {r}: finalize {other:?}")),
        }
        for (n, op) in &log.ops {
            stats.started += 1;
            *stats.by_kind.entry(op.kind.clone()).or_default() += 1;
            match &op.end {
                End::Ok => {
                    stats.ok += 1;
                    *stats.ok_by_kind.entry(op.kind.clone()).or_default() += 1;
                }
                End::Open if survivor => {
                    bad.push(format!("rank {r}: operation {n} ({op:?}) never ended"))
                }
                End::Open => {}
                End::Fail {
                    class,
                    blamed,
                    text,
                } => {
                    *stats.failed.entry(class.clone()).or_default() += 1;
                    let refused_by_dying_target = class == DYING_TARGET_REFUSAL
                        && ONE_SIDED.contains(&op.kind.as_str())
                        && op.peer.is_some_and(|p| killed.contains(&p));
                    let blames_its_killed_peer =
                        typed_blaming_killed(class, *blamed) && *blamed == op.peer;
                    if !refused_by_dying_target && !blames_its_killed_peer {
                        bad.push(format!(
                            "rank {r}: operation {n} {} with {:?} (step {}) failed: {class} blaming {blamed:?}: {text}",
                            op.kind, op.peer, op.step
                        ));
                    }
                }
                End::Corrupt(what) => {
                    stats.corrupt += 1;
                    bad.push(format!(
                        "rank {r}: operation {n} {} corrupt: {what}",
                        op.kind
                    ));
                }
            }
        }
    }
    bad.extend(lost_messages(killed, logs, stats));
    if !with_kills && code != 0 {
        bad.push(format!("a run without kills ended with code {code}"));
    }
    if stats.started == 0 {
        bad.push("no operation was started".into());
    }
    bad
}

/// Every message a sender completed reached a receiver that survived, unless the
/// sender was killed; and nothing was received that was not sent.
fn lost_messages(killed: &[u32], logs: &[RankLog], stats: &mut Stats) -> Vec<String> {
    let mut bad = Vec::new();
    let send_of = |a: u32, step: u64| {
        logs.get(a as usize)?
            .ops
            .values()
            .find(|o| o.kind == "send" && o.step == step)
    };
    for (b, log) in logs.iter().enumerate() {
        if killed.contains(&(b as u32)) {
            continue;
        }
        for op in log.ops.values().filter(|o| o.kind == "recv") {
            let Some(a) = op.peer else {
                bad.push(format!("rank {b}: a receive names no sender"));
                continue;
            };
            let sent = send_of(a, op.step);
            if op.end == End::Ok && sent.is_none() {
                bad.push(format!(
                    "rank {b} received step {} from {a}, which never sent it",
                    op.step
                ));
            }
            if sent.is_some_and(|s| s.end == End::Ok) && op.end != End::Ok {
                if killed.contains(&a) {
                    stats.dropped_from_killed += 1;
                } else {
                    stats.lost += 1;
                    bad.push(format!(
                        "lost: rank {a}'s message of step {} to rank {b} completed, the receive ended {:?}",
                        op.step, op.end
                    ));
                }
            }
        }
    }
    bad
}
