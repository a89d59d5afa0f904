//! How a job ends when a rank fails: exit codes, signals to the survivors, aborts,
//! and the shared memory dead ranks leave behind.

use crate::harness::{launch_self, launch_self_within, options, Scratch};
use rbtl::launcher::{ExitStatusSummary, Failure, RankExit};
use std::path::PathBuf;
use std::time::Duration;

/// The deadline of jobs that once hung: each ends by itself well within it.
const ONCE_HUNG: Duration = Duration::from_secs(30);

/// A job of `ranks` ranks running `role` (reporting in a scratch directory named after
/// it), which must end with exit code `code`: its summary.
fn job_ending_with(code: i32, ranks: u32, role: &str) -> ExitStatusSummary {
    let scratch = Scratch::new(role);
    let summary = launch_self(options(ranks, role, &scratch));
    assert_eq!(summary.code, code, "{summary:?}");
    summary
}

#[test]
fn a_failing_rank_sets_the_exit_code_and_the_others_are_ended() {
    let summary = job_ending_with(3, 3, "exit3");
    let ended = RankExit::Signaled(libc::SIGTERM);
    assert_eq!(summary.ranks, [ended, RankExit::Exited(3), ended]);
}

#[test]
fn a_rank_killed_by_sigkill_gives_137_and_survivors_are_terminated_then_killed() {
    let summary = job_ending_with(128 + libc::SIGKILL, 3, "kill_self");
    // Whether they got as far as reporting depends on timing; what ends them does not.
    let killed = RankExit::Signaled(libc::SIGKILL);
    let ended = RankExit::Signaled(libc::SIGTERM);
    assert_eq!(summary.ranks, [killed, ended, killed]);
}

#[test]
fn abort_ends_the_job_with_its_code() {
    let summary = job_ending_with(5, 3, "abort");
    let abort = summary.abort.expect("the abort is reported");
    assert_eq!(abort.rank, 1);
    assert_eq!(abort.code, 5);
    assert_eq!(abort.message, "rank 1 gives up: no peers");
    assert!(
        summary.ranks.iter().all(|r| !r.success()),
        "{:?}",
        summary.ranks
    );
}

#[test]
fn segments_of_a_dead_rank_are_removed() {
    let scratch = Scratch::new("shm");
    let shm = scratch.0.join("shm");
    std::fs::create_dir(&shm).unwrap();
    let mut opts = options(2, "shm_crash", &scratch);
    opts.env
        .push(("RBTL_SHM_DIR".into(), shm.to_string_lossy().into_owned()));
    let summary = launch_self(opts);
    assert_eq!(summary.code, 128 + libc::SIGKILL, "{summary:?}");
    let segment = PathBuf::from(std::fs::read_to_string(scratch.0.join("segment")).unwrap());
    assert!(segment.starts_with(&shm), "{segment:?}");
    assert!(!segment.exists(), "{segment:?} was left behind");
    assert!(summary.removed_segments.contains(&segment), "{summary:?}");
}

/// Rank 1 of a 3-rank job running `role` leaves PMI without finalizing: the job ends
/// by itself and fails with `failure` and code 1, rank 1 ending as `exit`; the failure
/// says `says`.
fn rank_1_fails_the_job_unfinalized(role: &str, failure: Failure, exit: RankExit, says: &str) {
    let scratch = Scratch::new(role);
    let summary = launch_self_within(options(3, role, &scratch), ONCE_HUNG);
    assert_eq!(summary.failure, Some(failure), "{summary:?}");
    assert_eq!(summary.code, 1);
    assert_eq!(summary.ranks[1], exit);
    let message = summary.failure.unwrap().to_string();
    assert!(message.contains(says), "{message}");
}

#[test]
fn a_rank_that_exits_0_without_finalizing_pmi_fails_the_job() {
    rank_1_fails_the_job_unfinalized(
        "unfinalized",
        Failure::Unfinalized {
            rank: 1,
            broken: None,
        },
        RankExit::Exited(0),
        "rank 1 exited with code 0 without finalizing",
    );
}

#[test]
fn a_rank_that_closes_pmi_and_lives_on_fails_the_job_at_once() {
    // Rank 1 would sleep for minutes: the job ends because its connection closed.
    rank_1_fails_the_job_unfinalized(
        "pmi_closed",
        Failure::PmiClosed {
            rank: 1,
            broken: None,
        },
        RankExit::Signaled(libc::SIGTERM),
        "rank 1 closed its PMI connection without finalizing",
    );
}

#[test]
fn a_rank_that_never_speaks_pmi_cannot_strand_the_others_in_a_barrier() {
    let scratch = Scratch::new("never_init");
    let summary = launch_self_within(options(3, "never_init", &scratch), ONCE_HUNG);
    assert_eq!(summary.code, 1, "{summary:?}");
    match summary.failure {
        Some(Failure::Stranded {
            rank: 1,
            finalized: false,
            ref waiting,
        }) if !waiting.is_empty() && !waiting.contains(&1) => {}
        ref other => panic!("{other:?}"),
    }
    assert_eq!(summary.ranks[1], RankExit::Exited(0));
}

#[test]
fn an_abort_with_exit_code_0_still_fails_the_job() {
    let summary = job_ending_with(1, 2, "abort_zero");
    let abort = summary.abort.clone().expect("the abort is reported");
    assert_eq!((abort.rank, abort.code), (1, 0));
    assert!(!summary.success());
    let message = summary.failure.unwrap().to_string();
    assert!(message.contains("an aborted job exits with 1"), "{message}");
}

#[test]
fn the_rank_that_died_first_is_blamed_not_the_peer_that_noticed() {
    // Rank 1 exits with 1 within moments of rank 3's SIGKILL: often in the same
    // glance of a launcher that looks at its ranks in turn, and on a busy machine
    // often seen first by a launcher that watches each rank with a thread.
    for run in 0..5 {
        let scratch = Scratch::new(&format!("blame{run}"));
        let summary = launch_self(options(4, "blame", &scratch));
        assert_eq!(summary.ranks[1], RankExit::Exited(1), "{summary:?}");
        assert_eq!(
            summary.failure,
            Some(Failure::Rank {
                rank: 3,
                exit: RankExit::Signaled(libc::SIGKILL)
            }),
            "run {run}: {summary:?}"
        );
        assert_eq!(summary.code, 128 + libc::SIGKILL);
    }
}
