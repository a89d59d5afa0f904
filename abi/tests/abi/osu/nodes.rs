//! `osu_latency`, `osu_bw`, `osu_allreduce` and `osu_bcast` across two simulated nodes
//! (`tools/nodes.sh`) under MPICH's hydra and under Slurm, and the shared-memory
//! windows', the ports' and the collectives' programs (`programs/shared.c`, `ports.c`,
//! `coll.c`) on two ranks of each node, and `spawn.c` from one on each.

use std::process::Command;
use std::time::{Duration, Instant};

use super::{check_table, options, report, suite, turn, COLLECTIVES, PT2PT};
use crate::run_limited;

/// How long a run across nodes may take (launcher and wire-up included).
const LAUNCH_LIMIT: Duration = Duration::from_secs(240);
/// How long to wait for another process's simulated nodes to go down.
const NODES_WAIT: Duration = Duration::from_secs(600);

/// Brings up `count` nodes. The tool refuses a second set on the machine ("up
/// already"): while another process's are up, waits for them to go (as its `status`
/// tells), up to `NODES_WAIT`.
fn nodes_up(count: usize, slurm: bool) -> cluster::Nodes {
    let deadline = Instant::now() + NODES_WAIT;
    loop {
        while !nodes_down() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_secs(1));
        }
        match std::panic::catch_unwind(|| cluster::Nodes::up(count, slurm)) {
            Ok(nodes) => return nodes,
            Err(panic) => {
                let said = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .unwrap_or("");
                if !said.contains("up already") || Instant::now() >= deadline {
                    std::panic::resume_unwind(panic);
                }
            }
        }
    }
}

/// Whether no simulated nodes are up (`tools/nodes.sh status` says `down`).
fn nodes_down() -> bool {
    let mut status = Command::new("bash");
    status.arg(cluster::tool()).arg("status");
    run_limited(&mut status, Duration::from_secs(30)).is_ok_and(|o| o.stdout == b"down\n")
}

/// A launcher across the nodes.
#[derive(Clone, Copy, Debug)]
enum Launcher {
    Hydra,
    Slurm,
}

impl Launcher {
    /// The command that starts `ranks` ranks on two nodes, half on each (the first
    /// takes the odd one).
    fn command(self, nodes: &cluster::Nodes, ranks: usize) -> Command {
        let per_node = ranks.div_ceil(2).to_string();
        let mut cmd = match self {
            Launcher::Hydra => {
                let mut cmd = Command::new("mpiexec.mpich");
                cmd.args(["-iface", cluster::BRIDGE, "-launcher", "ssh"])
                    .arg("-launcher-exec")
                    .arg(cluster::ssh())
                    .args(["-hosts", &nodes.hosts(2), "-n", &ranks.to_string()])
                    .args(["-ppn", &per_node]);
                cmd
            }
            // Slurm's block distribution fills the first node, then the second.
            Launcher::Slurm => {
                let mut cmd = Command::new("bash");
                cmd.arg(cluster::tool())
                    .args(["slurm", "srun", "-N", "2", "-n", &ranks.to_string()])
                    .args(["--ntasks-per-node", &per_node, "--mpi=pmi2", "--time=5"]);
                cmd
            }
        };
        cmd.env("RBTL_BTL_TCP_IF_INCLUDE", cluster::CIDR);
        cmd
    }
}

/// `osu_latency` and `osu_bw` (one rank on each node), `osu_allreduce` (two on each)
/// and `osu_bcast` (two and one) across two nodes under `launcher`: each ends with
/// its table, its data checked, and node 1's link carried at least what the timed
/// iterations of the largest size had to move between the nodes. Then `shared.c`,
/// two ranks on each node, `rma.c held-lock`, one, and `ports.c`, two: every rank
/// passes, as does `coll.c`, two on each node, and `spawn.c`, one on each (its
/// children too, and one placed on node 2; under Slurm, one asked on a node outside
/// the job is refused on every rank), and two on each spawning on their own.
fn across_two_nodes(launcher: Launcher) {
    let slurm = matches!(launcher, Launcher::Slurm);
    let _turn = turn();
    if !cluster::can_run(slurm) {
        return;
    }
    let bin = suite();
    let nodes = nodes_up(2, slurm);
    let bench = |name: &str| {
        PT2PT
            .iter()
            .chain(COLLECTIVES)
            .find(|b| b.name == name)
            .expect("a benchmark of the tables")
    };
    // (benchmark, ranks, iterations, largest size, bytes each timed iteration of the
    // largest size must move between the nodes, both ways together).
    let runs = [
        // Past tcp's eager limit, into its rendezvous.
        (bench("osu_latency"), 2, 10, 128 << 10, 2 * (128 << 10)),
        // A window of 64 messages, node 1 to node 2.
        (bench("osu_bw"), 2, 4, 256 << 10, 64 * (256 << 10)),
        // Each node's result needs the other's data.
        (bench("osu_allreduce"), 4, 5, 64 << 10, 2 * (64 << 10)),
        // Two ranks on node 1 (sm between them), one on node 2 (tcp only): every rank
        // must cut a broadcast into the same pieces whatever transports it uses.
        (bench("osu_bcast"), 3, 5, 64 << 10, 64 << 10),
    ];
    let mut failed = Vec::new();
    for (b, ranks, iterations, max, per_iteration) in runs {
        let before = cluster::carried(1, false);
        let mut cmd = launcher.command(&nodes, ranks);
        cmd.arg(bin.join(b.name))
            .args(options(b, iterations, 1, max));
        let shown = format!("{cmd:?}");
        let why = match run_limited(&mut cmd, LAUNCH_LIMIT) {
            Err(why) => why,
            Ok(o) if !o.status.success() => format!("failed\n{}", report(&o)),
            Ok(o) => match check_table(b, &o, max) {
                Err(why) => format!("{why}\n{}", report(&o)),
                Ok(_) => {
                    let carried = cluster::carried(1, false) - before;
                    let least = iterations as u64 * per_iteration as u64;
                    if carried >= least {
                        continue;
                    }
                    format!(
                        "node 1's link carried {carried} bytes, less than the {least} the \
                         benchmark moved between the nodes: not over tcp on {}\n{}",
                        cluster::CIDR,
                        report(&o)
                    )
                }
            },
        };
        failed.push(format!(
            "{} at {ranks} ranks ({launcher:?}): {shown}: {why}",
            b.name
        ));
    }
    // A program of `ranks` ranks, with `env` and `args`: every rank passes.
    let mut programs_run = 0;
    let mut program = |name: &str, ranks: usize, env: &[(&str, &str)], args: &[&str]| {
        programs_run += 1;
        let mut cmd = launcher.command(&nodes, ranks);
        cmd.envs(env.iter().copied())
            .arg(crate::programs::build(name))
            .args(args);
        let shown = format!("{cmd:?}");
        let (why, out) = match run_limited(&mut cmd, LAUNCH_LIMIT) {
            Err(why) => (Some(why), None),
            Ok(o) => (crate::programs::passed(&o, name, ranks).err(), Some(o)),
        };
        if let Some(why) = why {
            failed.push(format!(
                "{name} {args:?} at {ranks} ranks ({launcher:?}): {shown}: {why}"
            ));
        }
        out
    };
    // Shared-memory windows, two ranks on each node: on each node's communicator,
    // and refused alike on every rank for the world's.
    program("shared", 4, &[], &[]);
    // A lock held by a rank of the other node while it computes past the peer
    // timeout is waited for (its process answers probes across the nodes), and one
    // held while its holder waits for the taker is given up on.
    program("rma", 2, &[("RBTL_MSG_PEER_TIMEOUT", "1")], &["held-lock"]);
    // Ports between two groups of the job, two ranks on each node, and joins on
    // each node: met by messages, the port found through the launcher's names
    // (srun's under Slurm); MPI_APPNUM absent or not negative.
    program("ports", 4, &[], &[]);
    // Every collective, two ranks on each node: long all-reductions halve their
    // vector across the nodes (counts that do not divide by the members, from a send
    // buffer and in place).
    program("coll", 4, &[], &[]);
    // Dynamic processes, one parent on each node: the jobs meet in the launcher's
    // name service (under Slurm, the spawned job step shares the processors the
    // first holds, `SLURM_OVERLAP`, and may hold more processes than the job has
    // processors, `SLURM_OVERCOMMIT`: srun hands both to the step it starts).
    // A child asked on node 2 (the info key `host`) runs there.
    let overlap = [("SLURM_OVERLAP", "1"), ("SLURM_OVERCOMMIT", "1")];
    if let Some(o) = program("spawn", 2, &overlap, &[]) {
        let shown = format!("spawn across two nodes ({launcher:?})");
        crate::programs::assert_children_passed(&o, &shown);
    }
    // Two parents on each node spawning on their own at once: every child reports
    // (Slurm's step daemon crashed, now and then, when two tasks of its node asked
    // at once: the rounds make that likely; hydra's ssh launches are slow).
    let rounds = if slurm { 10 } else { 2 };
    let selves = program("spawn", 4, &overlap, &["selves", &rounds.to_string()]);
    let placed = program("spawn", 2, &overlap, &["placed", "rbtl-n2"]);
    // A child asked on a node outside the job fails the spawn on every rank, naming
    // the key (Slurm itself would wait for the PMI time limit, or end the job;
    // hydra waits for the ssh launch).
    if slurm {
        program("spawn", 2, &overlap, &["misplaced", "rbtl-n9"]);
    }
    if let Some(o) = selves {
        if let Err(why) = crate::programs::selves_reported(&o, 4, rounds) {
            failed.push(format!("{why}\n{}", report(&o)));
        }
    }
    let reported = |o: &_| crate::programs::printed(o, crate::programs::PLACED_PASSED);
    if let Some(o) = placed.filter(|o| !reported(o)) {
        failed.push(format!(
            "the child placed on rbtl-n2 did not report\n{}",
            report(&o)
        ));
    }
    drop(nodes);
    assert!(
        failed.is_empty(),
        "{} of {} runs failed across nodes:\n\n{}",
        failed.len(),
        runs.len() + programs_run,
        failed.join("\n\n")
    );
}

#[test]
fn latency_bw_and_allreduce_across_two_nodes_under_hydra() {
    across_two_nodes(Launcher::Hydra);
}

#[test]
fn latency_bw_and_allreduce_across_two_nodes_under_slurm() {
    across_two_nodes(Launcher::Slurm);
}

// The root package's simulated nodes (`tests/nodes/cluster.rs`). It finds `tools/`

// The root package's simulated nodes (`tests/nodes/cluster.rs`). It finds `tools/`
// under `env!("CARGO_MANIFEST_DIR")`, the root package's folder; this package's is
// `abi/`, one below. Within the module (this macro's scope: it follows the code
// above, which keeps the standard `env!`), that name gives the folder above.
macro_rules! env {
    ("CARGO_MANIFEST_DIR") => {
        concat!(std::env!("CARGO_MANIFEST_DIR"), "/..")
    };
    ($name:literal) => {
        std::env!($name)
    };
}

#[allow(dead_code)]
#[path = "../../../../tests/nodes/cluster.rs"]
mod cluster;
