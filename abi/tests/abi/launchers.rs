//! What the launchers give a program, through `comm` and `spawn` of
//! [`super::programs`]: the universe's size (this `mpiexec`'s and hydra's `-usize`),
//! the program's number in a job of several (`:`), and spawning under hydra.

use super::programs::{assert_children_passed, build, job_passes};
use std::process::Command;

/// Whether hydra (`mpiexec.mpich`) is installed; if not, `test` says it cannot run.
fn hydra_here(test: &str) -> bool {
    let found = Command::new("mpiexec.mpich")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        rbtl_testkit::cannot_run(
            test,
            "mpiexec.mpich is not installed (bash tools/packages.sh install host nodes)",
        );
    }
    found
}

/// `MPI_UNIVERSE_SIZE`: the job's size by default, what hydra's `-usize` says (as
/// this `mpiexec` takes it); under hydra itself, absent unless `-usize` says.
#[test]
fn universe_size() {
    let exe = build("comm");
    let mut runs = vec![
        (super::MPIEXEC, None, Some("2")),
        (super::MPIEXEC, Some("8"), Some("8")),
    ];
    if hydra_here("comm under hydra") {
        runs.extend([
            ("mpiexec.mpich", None, None),
            ("mpiexec.mpich", Some("8"), Some("8")),
        ]);
    }
    for (launcher, usize, want) in runs {
        let mut cmd = Command::new(launcher);
        cmd.args(["-n", "2"]);
        if let Some(n) = usize {
            cmd.args(["-usize", n]);
        }
        if let Some(w) = want {
            cmd.args(["-genv", "ABI_TEST_UNIVERSE", w]);
        }
        let shown = format!("comm under {launcher} in a universe of {want:?}");
        job_passes(cmd.arg(&exe), "comm", 2, &shown);
    }
}

/// Programs joined by `:` make one job (MPMD): three of 1, 2 and 1 ranks run
/// `comm` as ranks 0 to 3 of 4, each with `MPI_APPNUM` its program's index and
/// the variables given after its `:` (the first program, given none, sees 0); under
/// this `mpiexec`, and under hydra, which numbers them alike. The same three from a
/// configuration file (`-configfile`, one program a line) make the same job.
#[test]
fn programs_joined_by_colons_are_one_job_numbered_by_program() {
    let exe = build("comm");
    let mut launchers = vec![super::MPIEXEC];
    if hydra_here("comm as three programs under hydra") {
        launchers.push("mpiexec.mpich");
    }
    let exe_text = exe.to_str().expect("a UTF-8 path");
    let mut lines = vec![format!("-n 1 {exe_text}")];
    for (ranks, appnum) in [("2", "1"), ("1", "2")] {
        lines.push(format!(
            "-n {ranks} -env ABI_TEST_APPNUM {appnum} {exe_text}"
        ));
    }
    let file = std::env::temp_dir().join(format!("rbtl-abi-configfile-{}", std::process::id()));
    std::fs::write(&file, lines.join("\n") + "\n").expect("write the configuration file");
    for launcher in launchers {
        let mut cmd = Command::new(launcher);
        cmd.args(["-n", "1"]).arg(&exe);
        for (ranks, appnum) in [("2", "1"), ("1", "2")] {
            cmd.args([":", "-n", ranks, "-env", "ABI_TEST_APPNUM", appnum])
                .arg(&exe);
        }
        let shown = format!("comm as three programs under {launcher}");
        job_passes(&mut cmd, "comm", 4, &shown);
        let mut cmd = Command::new(launcher);
        cmd.arg("-configfile").arg(&file);
        let shown = format!("comm as three programs of a configuration file under {launcher}");
        job_passes(&mut cmd, "comm", 4, &shown);
    }
    let _ = std::fs::remove_file(&file);
}

/// Under hydra, which starts what it is asked to and then lets neither job read the
/// other's key-value space, the jobs meet in its name service: the whole of `spawn`
/// (spawns from every parent and from one, traffic, ports and `MPI_Intercomm_create`
/// between the jobs, a spawn of the spawned) at 1 and 2 parents. Four parents
/// spawning on their own at once, each under a hydra proxy of its own (all started
/// here, as hydra starts them on four nodes): every child reports. (Hydra gathers
/// the commands of a spawn from every proxy in one list: without the turn to spawn
/// in its name service, two parents' spawns were made into one, in about half the
/// runs of 40 rounds.)
#[test]
fn spawn_under_hydra() {
    if !hydra_here("spawn under hydra") {
        return;
    }
    let exe = build("spawn");
    for parents in [1, 2] {
        let mut cmd = Command::new("mpiexec.mpich");
        cmd.args(["-n", &parents.to_string()]).arg(&exe);
        let shown = format!("spawn from {parents} ranks under hydra");
        let o = job_passes(&mut cmd, "spawn", parents, &shown);
        assert_children_passed(&o, &shown);
    }
    let rounds = 40;
    let mut cmd = Command::new("mpiexec.mpich");
    let proxies = "proxy-a,proxy-b,proxy-c,proxy-d";
    cmd.args(["-launcher", "fork", "-hosts", proxies, "-ppn", "1"])
        .args(["-n", "4"])
        .arg(&exe)
        .args(["selves", &rounds.to_string()]);
    let o = job_passes(
        &mut cmd,
        "spawn",
        4,
        "spawn selves under four hydra proxies",
    );
    if let Err(why) = super::programs::selves_reported(&o, 4, rounds) {
        panic!("{why}\n{}", super::report(&o));
    }
}
