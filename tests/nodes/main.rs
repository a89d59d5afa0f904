//! Jobs across simulated nodes (`tools/nodes.sh`: network and UTS namespaces on a
//! bridge, 198.18.1.0/24, and a second one, 198.18.2.0/24): `osu` under MPICH's
//! hydra on 2 and 3 nodes with 1 and 2 ranks per node, under Slurm (`srun
//! --mpi=pmi2`), and `osu init`; each run's routing (`osu --verbose`) is checked
//! against where the launcher put the ranks: `sm` within a node, `tcp` across; and
//! `osu bw` on two nodes over both networks, its data shared between them. Also the
//! tool itself: a second user is refused, and nothing is left behind after a crashed
//! session or an interrupted `up`.
//!
//! Needs root, MPICH and, for Slurm, `slurmctld slurmd slurm-client munge`
//! (`bash tools/packages.sh install host nodes`). Without them each test says SKIP,
//! unless `NODES_REQUIRED=1` (as `.ci/run` sets; not `RBTL_*`, which names
//! configuration parameters): then it fails. The tests take
//! turns (one set of nodes on the machine at a time).

mod cluster;
mod launch;

use cluster::{can_run, carried, node, Nodes, BRIDGE, CIDR, CIDR2};
use launch::{check_routes, rows, run};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const OSU: &str = env!("CARGO_BIN_EXE_osu");
/// The most any one launch may take (a loaded machine runs them slowly).
const LAUNCH_LIMIT: Duration = Duration::from_secs(240);

/// One set of simulated nodes at a time.
static TURN: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `count` nodes (with a Slurm cluster when `slurm`), with this test's turn, which it
/// holds while they are up; `None` where the machine cannot run them (the test then
/// says SKIP).
fn nodes_up(count: usize, slurm: bool) -> Option<(std::sync::MutexGuard<'static, ()>, Nodes)> {
    let turn = turn();
    if !can_run(slurm) {
        return None;
    }
    Some((turn, Nodes::up(count, slurm)))
}

/// `mpiexec.mpich` across the nodes, as docs/nodes.md shows it.
fn hydra(hosts: &str, ranks: usize, per_node: usize) -> Command {
    let mut cmd = Command::new("mpiexec.mpich");
    cmd.args(["-iface", BRIDGE, "-launcher", "ssh", "-launcher-exec"])
        .arg(cluster::ssh())
        .args(["-hosts", hosts, "-n", &ranks.to_string()])
        .args(["-ppn", &per_node.to_string()])
        .env("RBTL_BTL_TCP_IF_INCLUDE", CIDR);
    cmd
}

/// `osu`'s options for a short run: sizes up to `max_size`, each timed over `iterations`
/// after `skip` untimed.
fn short_run<'a>(max_size: &'a str, iterations: &'a str, skip: &'a str) -> [&'a str; 6] {
    [
        "--max-size",
        max_size,
        "--iterations",
        iterations,
        "--skip",
        skip,
    ]
}

/// The host of every rank when ranks fill each node in turn, `per_node` each.
fn block_hosts(ranks: usize, per_node: usize) -> Vec<String> {
    (0..ranks).map(|r| node(r / per_node + 1)).collect()
}

/// `osu latency` and `osu bw` across `nodes` nodes with 1 and 2 ranks per node.
fn hydra_on(nodes: &Nodes, count: usize) {
    let hosts = nodes.hosts(count);
    for per_node in [1, 2] {
        let ranks = count * per_node;
        let out = run(
            hydra(&hosts, ranks, per_node)
                .args([OSU, "latency", "--verbose"])
                .args(short_run("4096", "100", "10")),
            LAUNCH_LIMIT,
        );
        // Ranks 0 and 1 measure: one node when two share it.
        let over = if per_node == 2 {
            "over sm)"
        } else {
            "over tcp)"
        };
        assert!(
            out.stdout.starts_with("# OSU Latency Test"),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.lines().next().unwrap().ends_with(over),
            "{}",
            out.stdout
        );
        check_routes(&out.stdout, &block_hosts(ranks, per_node));
        let pairs = ranks * (ranks - 1) / 2;
        let sm = count * per_node * (per_node - 1) / 2;
        let summary = if sm == 0 {
            format!("# routes: pairs over tcp {pairs}")
        } else {
            format!("over sm {sm}, over tcp {}", pairs - sm)
        };
        assert!(out.stdout.contains(&summary), "{summary}:\n{}", out.stdout);
        assert_eq!(rows(&out.stdout).len(), 14, "{}", out.stdout);
    }
    // Large messages across two nodes.
    let out = run(
        hydra(&nodes.hosts(2), 2, 1)
            .args([OSU, "bw", "--min-size", "65536"])
            .args(short_run("1m", "3", "1")),
        LAUNCH_LIMIT,
    );
    assert!(out.stdout.contains("over tcp)"), "{}", out.stdout);
    assert_eq!(rows(&out.stdout).len(), 5, "{}", out.stdout);
    // mbw-mr with two ranks per node pairs rank i with rank i + 2, on the other node:
    // its header names tcp, though ranks 0 and 1 share a node.
    let out = run(
        hydra(&nodes.hosts(2), 4, 2)
            .args([OSU, "mbw-mr"])
            .args(short_run("64", "3", "1")),
        LAUNCH_LIMIT,
    );
    let header = out.stdout.lines().next().unwrap_or("");
    assert!(
        header.starts_with("# OSU Multiple Bandwidth") && header.ends_with("over tcp)"),
        "{}",
        out.stdout
    );
}

#[test]
fn hydra_on_two_nodes_routes_sm_within_a_node_and_tcp_across() {
    let Some((_turn, nodes)) = nodes_up(2, false) else {
        return;
    };
    hydra_on(&nodes, 2);
    striped_over_two_networks(&nodes);
}

/// With both networks of the nodes included, each rank has a link to its partner
/// on each (one per pair of interfaces), and `osu bw` at 1 MiB shares its data
/// between them: each network carries a third or more of it.
fn striped_over_two_networks(nodes: &Nodes) {
    const PAYLOAD: u64 = 64 << 20;
    let before = [carried(1, false), carried(1, true)];
    let out = run(
        hydra(&nodes.hosts(2), 2, 1)
            .env("RBTL_BTL_TCP_IF_INCLUDE", format!("{CIDR},{CIDR2}"))
            .args([OSU, "bw", "--min-size", "1m"])
            .args(short_run("1m", "1", "0")),
        LAUNCH_LIMIT,
    );
    assert!(out.stdout.contains("over tcp)"), "{}", out.stdout);
    assert_eq!(rows(&out.stdout).len(), 1, "{}", out.stdout);
    let first = carried(1, false) - before[0];
    let second = carried(1, true) - before[1];
    // A window of 64 messages of 1 MiB, node 1 to node 2.
    assert!(
        first + second >= PAYLOAD,
        "{first} + {second} bytes for {PAYLOAD} sent"
    );
    for (net, bytes) in [(CIDR, first), (CIDR2, second)] {
        assert!(
            bytes >= (first + second) / 3,
            "{net} carried {bytes} of {} bytes:\n{}",
            first + second,
            out.stdout
        );
    }
}

#[test]
fn hydra_on_three_nodes_routes_sm_within_a_node_and_tcp_across() {
    let Some((_turn, nodes)) = nodes_up(3, false) else {
        return;
    };
    hydra_on(&nodes, 3);
    // One-sided operations across nodes (put and get over tcp need the target to
    // progress, which it does in the benchmark's flush and barrier).
    for bench in ["put-latency", "get-latency"] {
        let out = run(
            hydra(&nodes.hosts(3), 3, 1)
                .args([OSU, bench])
                .args(short_run("4096", "50", "5")),
            LAUNCH_LIMIT,
        );
        assert!(out.stdout.contains("over tcp)"), "{bench}: {}", out.stdout);
        assert_eq!(rows(&out.stdout).len(), 14, "{bench}: {}", out.stdout);
    }
}

#[test]
fn slurm_runs_osu_across_nodes_with_pmi2() {
    let Some((_turn, nodes)) = nodes_up(2, true) else {
        return;
    };
    for (ranks, over) in [(4, "over sm)"), (2, "over tcp)")] {
        let out = run(
            Command::new("bash")
                .arg(cluster::tool())
                .args(["slurm", "srun", "-N", "2", "-n", &ranks.to_string()])
                .args(["--mpi=pmi2", "--time=5", OSU, "latency", "--verbose"])
                .args(short_run("4096", "100", "10"))
                .env("RBTL_BTL_TCP_IF_INCLUDE", CIDR),
            LAUNCH_LIMIT,
        );
        // Slurm's block distribution: the first half of the ranks on the first node.
        check_routes(&out.stdout, &block_hosts(ranks, ranks / 2));
        assert!(
            out.stdout.lines().next().unwrap().ends_with(over),
            "{}",
            out.stdout
        );
        assert_eq!(rows(&out.stdout).len(), 14, "{}", out.stdout);
    }
    drop(nodes);
}

#[test]
fn osu_init_connects_each_rank_to_the_ranks_of_other_nodes_only() {
    let Some((_turn, nodes)) = nodes_up(4, false) else {
        return;
    };
    for (count, ranks) in [(2, 4), (4, 8)] {
        let per_node = ranks / count;
        let out = run(
            hydra(&nodes.hosts(count), ranks, per_node).args([OSU, "init", "--verbose"]),
            LAUNCH_LIMIT,
        );
        let text = &out.stdout;
        assert!(text.starts_with("# OSU Init Test"), "{text}");
        assert!(
            text.contains(&format!("nprocs: {ranks}, nodes: {count}, min: ")),
            "{text}"
        );
        check_routes(text, &block_hosts(ranks, per_node));
        // Connections are made on first use, one per peer over tcp: the ranks of
        // the other nodes, and nothing to the ranks of its own.
        let remote = ranks - per_node;
        assert!(
            text.contains(&format!(
                "tcp connections opened per process: min {remote}, max {remote}, avg {remote}.00"
            )),
            "{remote} connections each:\n{text}"
        );
    }
}

/// Nodes given processors of their own (`up --own-cpus`, a share each of this
/// machine's) run their processes on them, and ranks that outnumber their node's
/// share see it (`osu --verbose`'s placement line): they take turns on them.
#[test]
fn ranks_of_nodes_with_processors_of_their_own_see_whether_they_take_turns() {
    let _turn = turn();
    if !can_run(false) {
        return;
    }
    let nodes = Nodes::up_with(2, &["--own-cpus"]);
    let on_node = |k: usize| {
        let out = run(
            Command::new("bash").arg(cluster::tool()).args([
                "exec",
                &node(k),
                "cat",
                "/proc/self/status",
            ]),
            LAUNCH_LIMIT,
        );
        rbtl_testkit::cpus::allowed_in_status(&out.stdout).len()
    };
    // The tool runs on this test's processors: half each.
    let here = rbtl_testkit::cpus::allowed().len();
    let share = (here / 2).max(1);
    assert_eq!(
        (on_node(1), on_node(2)),
        (share, share),
        "each node's share"
    );
    for per_node in [1, 2] {
        let out = run(
            hydra(&nodes.hosts(2), 2 * per_node, per_node)
                .args([OSU, "latency", "--verbose"])
                .args(short_run("8", "10", "1")),
            LAUNCH_LIMIT,
        );
        let seen = if per_node > share {
            "outnumber"
        } else {
            "do not outnumber"
        };
        let line = format!(
            "# placement: the ranks of rank 0's node {seen} the processors they may run on"
        );
        assert!(out.stdout.contains(&line), "{line}:\n{}", out.stdout);
    }
    drop(nodes);
}

/// The tool's own guarantees: one user at a time, the nodes' names resolving while
/// they are up, nothing left after a session killed outright (once `down` has run) or
/// an `up` interrupted midway.
#[test]
fn the_tool_refuses_a_second_user_and_leaves_nothing_behind() {
    let _turn = turn();
    if !can_run(true) {
        return;
    }
    let tool = |args: &[&str]| {
        let mut cmd = Command::new("bash");
        cmd.arg(cluster::tool()).args(args).stdin(Stdio::null());
        cmd
    };
    assert_eq!(
        cluster::leftovers(),
        Vec::<String>::new(),
        "before the test"
    );
    // Whatever happens below, `down` runs last.
    struct Down;
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = Command::new("bash")
                .arg(cluster::tool())
                .arg("down")
                .status();
        }
    }
    let _down = Down;

    let nodes = Nodes::up(2, true);
    // The nodes' names resolve while they are up, as a cluster's do.
    let want: std::net::IpAddr = "198.18.1.2".parse().unwrap();
    let n2: Vec<std::net::IpAddr> = std::net::ToSocketAddrs::to_socket_addrs(&("rbtl-n2", 0))
        .map(|found| found.map(|a| a.ip()).collect())
        .unwrap_or_default();
    assert!(!n2.is_empty() && n2.iter().all(|&ip| ip == want), "{n2:?}");
    let second = tool(&["up", "1"]).output().expect("run the tool");
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success() && said.contains("up already"),
        "{said}"
    );
    let wrong = tool(&["exec", "rbtl-n9", "true"]).output().expect("run");
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        !wrong.status.success() && said.contains("no simulated node 'rbtl-n9'"),
        "{said}"
    );
    drop(nodes);
    assert_eq!(cluster::leftovers(), Vec::<String>::new());

    // A session killed outright leaves its nodes up; `down` takes them away.
    let mut session = tool(&["hold", "2", "--slurm"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a session");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(session.stdout.take().unwrap()),
        &mut line,
    )
    .expect("read");
    assert_eq!(line.trim(), "up");
    session.kill().expect("SIGKILL the session");
    session.wait().expect("reap");
    let left = cluster::leftovers();
    assert!(
        left.iter().any(|l| l.starts_with("namespace rbtl-n2")),
        "{left:?}"
    );
    assert!(left.iter().any(|l| l.contains("slurmctld")), "{left:?}");
    let down = tool(&["down"]).output().expect("down");
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(cluster::leftovers(), Vec::<String>::new());
    // Twice is fine.
    assert!(tool(&["down"]).status().expect("down").success());

    // An `up` interrupted at several points: nothing remains once it has ended.
    for after_ms in [30, 120, 400] {
        let mut up = tool(&["up", "3", "--slurm"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start up");
        std::thread::sleep(Duration::from_millis(after_ms));
        // SAFETY: kill takes no pointers; the pid is our child's.
        unsafe { libc::kill(up.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(60);
        while up.try_wait().expect("wait").is_none() {
            assert!(Instant::now() < deadline, "up ignored SIGINT for 60 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        let left = cluster::leftovers();
        if up.wait().expect("status").success() {
            // It was done before the signal came: take it down as a user would.
            assert!(tool(&["down"]).status().expect("down").success());
            assert_eq!(cluster::leftovers(), Vec::<String>::new());
        } else {
            assert_eq!(left, Vec::<String>::new(), "after SIGINT at {after_ms} ms");
        }
    }
}
