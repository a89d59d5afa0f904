//! How a job ends when a rank fails: exit codes, signals to the survivors, aborts,
//! and the shared memory dead ranks leave behind.

use crate::harness::{launch_self, options, Scratch};
use rbtl::launcher::RankExit;
use std::path::PathBuf;

#[test]
fn a_failing_rank_sets_the_exit_code_and_the_others_are_ended() {
    let scratch = Scratch::new("exit3");
    let summary = launch_self(options(3, "exit3", &scratch));
    assert_eq!(summary.code, 3, "{summary:?}");
    assert_eq!(summary.ranks[1], RankExit::Exited(3));
    assert_eq!(summary.ranks[0], RankExit::Signaled(libc::SIGTERM));
    assert_eq!(summary.ranks[2], RankExit::Signaled(libc::SIGTERM));
}

#[test]
fn a_rank_killed_by_sigkill_gives_137_and_survivors_are_terminated_then_killed() {
    let scratch = Scratch::new("kill");
    let summary = launch_self(options(3, "kill_self", &scratch));
    assert_eq!(summary.code, 128 + libc::SIGKILL, "{summary:?}");
    assert_eq!(summary.ranks[0], RankExit::Signaled(libc::SIGKILL));
    // Whether they got as far as reporting depends on timing; what ends them does not.
    assert_eq!(summary.ranks[1], RankExit::Signaled(libc::SIGTERM));
    assert_eq!(summary.ranks[2], RankExit::Signaled(libc::SIGKILL));
}

#[test]
fn abort_ends_the_job_with_its_code() {
    let scratch = Scratch::new("abort");
    let summary = launch_self(options(3, "abort", &scratch));
    assert_eq!(summary.code, 5, "{summary:?}");
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
