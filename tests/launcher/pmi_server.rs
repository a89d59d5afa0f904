//! The launcher's PMI server against clients that misbehave: it answers what it can
//! with an error, closes a connection it cannot serve (the client sees the end of
//! it), refuses what exceeds its announced maxima and its store's bounds, and fails
//! the job of a rank whose connection broke and that exits without finalizing.

use crate::harness::{launch_self_within, options, Scratch};
use rbtl::launcher::{ExitStatusSummary, Failure, RankExit, STORE_PER_RANK};
use std::time::Duration;

/// The deadline of jobs that once hung: each ends by itself well within it.
const ONCE_HUNG: Duration = Duration::from_secs(30);

/// One rank of `role` with `RBTL_TEST_CASE=case`; the summary and what the rank
/// reported in `outcome`.
fn run(role: &str, case: &str) -> (ExitStatusSummary, String) {
    let scratch = Scratch::new(&format!("{role}-{case}"));
    let mut opts = options(1, role, &scratch);
    opts.env.push(("RBTL_TEST_CASE".into(), case.into()));
    let summary = launch_self_within(opts, ONCE_HUNG);
    let outcome = std::fs::read_to_string(scratch.0.join("outcome"))
        .unwrap_or_else(|e| panic!("{case}: no outcome ({e}): {summary:?}"));
    (summary, outcome)
}

#[test]
fn a_malformed_or_over_long_request_closes_the_connection_and_fails_the_rank() {
    for case in ["garbage", "no_cmd", "not_utf8", "oversized"] {
        let (summary, outcome) = run("bad_pmi", case);
        assert!(
            outcome.starts_with("eof"),
            "{case}: the server kept the connection open: {outcome}"
        );
        assert_eq!(summary.ranks, [RankExit::Exited(0)], "{case}");
        assert_eq!(summary.code, 1, "{case}: {summary:?}");
        match &summary.failure {
            Some(Failure::Unfinalized {
                rank: 0,
                broken: Some(why),
            }) => {
                if case == "oversized" {
                    assert!(why.contains("longer than"), "{why}");
                }
            }
            other => panic!("{case}: {other:?}"),
        }
    }
}

#[test]
fn a_half_closed_connection_is_closed_in_turn() {
    let (summary, outcome) = run("bad_pmi", "half_close");
    assert_eq!(outcome, "eof: ", "the server kept the connection open");
    // It never spoke PMI: a program that does not use PMI succeeds.
    assert_eq!(summary.code, 0, "{summary:?}");
    assert_eq!(summary.failure, None);
}

#[test]
fn an_unknown_command_gets_an_error_reply_and_the_connection_stays_usable() {
    let scratch = Scratch::new("bad_pmi-unknown");
    let mut opts = options(1, "bad_pmi", &scratch);
    opts.env.push(("RBTL_TEST_CASE".into(), "unknown".into()));
    let summary = launch_self_within(opts, ONCE_HUNG);
    let reply = std::fs::read_to_string(scratch.0.join("reply")).unwrap();
    assert!(
        reply.starts_with("cmd=spawn_result rc=-1 msg="),
        "{reply:?}"
    );
    let outcome = std::fs::read_to_string(scratch.0.join("outcome")).unwrap();
    assert_eq!(outcome, "eof: ");
    // It spoke PMI and left without finalizing.
    assert_eq!(summary.code, 1, "{summary:?}");
}

#[test]
fn keys_values_and_each_ranks_store_are_bounded() {
    let (summary, outcome) = run("kvs_bounds", "-");
    assert_eq!(summary.code, 0, "{summary:?}\n{outcome}");
    let line = |prefix: &str| {
        outcome
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {outcome}"))
            .to_string()
    };
    // The line after `prefix` is a refusal saying `why`.
    let refused = |prefix: &str, why: &str| {
        let reply = line(prefix);
        assert!(reply.contains("rc=-1") && reply.contains(why), "{reply}");
    };
    assert!(outcome.contains("vallen_max=1024"), "{outcome}");
    refused("long value: ", "vallen_max_1024");
    refused("long key: ", "keylen_max_64");
    assert!(line("at the maxima: ").contains("rc=0"), "{outcome}");
    let filled: usize = line("filled: ").parse().unwrap();
    assert!(
        filled > 0 && filled * 1000 <= STORE_PER_RANK,
        "stored {filled} values of 1000 bytes"
    );
    refused("refusal: ", "store_full");
    assert!(line("after: ").contains("rc=0"), "{outcome}");
    assert!(outcome.contains("cmd=finalize_ack"), "{outcome}");
}
