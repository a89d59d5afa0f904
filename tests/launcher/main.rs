//! The launcher, the PMI-1 client and the PMI modex, with real processes: this test
//! binary re-executes itself as the rank program. `RBTL_TEST_ROLE` selects what a
//! rank does inside the `rank_role_entry` test (which does nothing when the variable
//! is unset, as in an ordinary test run); ranks leave `ok.<rank>` files in the
//! directory named by `RBTL_TEST_DIR` to report success.

mod failures;
mod harness;
mod output;
mod pmi_client;
mod pmi_server;
mod programs;
mod raw_pmi;
mod rbtlrun;
mod roles;
mod scale;
mod spawning;

/// Entry point of the ranks: runs the role named by `RBTL_TEST_ROLE`.
#[test]
fn rank_role_entry() {
    let Ok(role) = std::env::var("RBTL_TEST_ROLE") else {
        return;
    };
    match role.as_str() {
        "modex" => roles::modex(),
        "job" => roles::job(),
        "singleton" => roles::singleton(),
        "exit3" => roles::exit(3),
        "kill_self" => roles::kill_self(),
        "echo" => roles::echo(),
        "abort" => roles::abort(),
        "shm_crash" => roles::shm_crash(),
        "sleep" => roles::sleep(),
        "unfinalized" => roles::unfinalized(),
        "pmi_closed" => roles::pmi_closed(),
        "never_init" => roles::never_init(),
        "abort_zero" => roles::abort_zero(),
        "blame" => roles::blame(),
        "bad_pmi" => raw_pmi::bad_pmi(),
        "kvs_bounds" => raw_pmi::kvs_bounds(),
        "silent_server" => pmi_client::silent_server_role(),
        "spawn" => spawning::role(),
        "bad_spawn" => spawning::bad_spawn_role(),
        other => panic!("unknown RBTL_TEST_ROLE {other:?}"),
    }
}
