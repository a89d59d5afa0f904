//! What the multi-process test binaries share: this binary, started again under the
//! launcher as the rank program.

use rbtl::launcher::{self, LaunchOptions};
use std::time::Duration;

/// Run `ranks` copies of this test binary, each running only its `rank_role_entry`
/// test with `env` added (and the tcp transport on loopback); the job's exit code.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn launch_ranks(ranks: u32, env: Vec<(String, String)>) -> i32 {
    launch(LaunchOptions {
        ranks,
        env,
        grace: Duration::from_secs(5),
        ..LaunchOptions::default()
    })
}

/// Run this test binary as the rank program under `opts`, each rank running only its
/// `rank_role_entry` test, with the tcp transport on loopback; the job's exit code.
pub fn launch(mut opts: LaunchOptions) -> i32 {
    // The tcp transport opens beside the others: on loopback only.
    opts.env
        .push(("RBTL_BTL_TCP_IF_INCLUDE".into(), "lo".into()));
    let exe = std::env::current_exe().unwrap();
    let args: Vec<std::ffi::OsString> = [
        "rank_role_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]
    .iter()
    .map(Into::into)
    .collect();
    launcher::launch(&exe, &args, &opts).unwrap().code
}
