//! The `osu` binary as a user runs it: alone (it launches its own ranks), under
//! `rbtlrun`, and under MPICH's `mpiexec.mpich` (PMI-1 from hydra), with OSU's output
//! format, JSON and SVG files, and clear errors; and the embedding guide's program
//! (`examples/btl_hello.rs`) as a user runs it.

use std::path::PathBuf;
use std::process::{Command, Output};

const OSU: &str = env!("CARGO_BIN_EXE_osu");
const RBTLRUN: &str = env!("CARGO_BIN_EXE_rbtlrun");
const RBTL_INFO: &str = env!("CARGO_BIN_EXE_rbtl_info");

fn run(cmd: &mut Command) -> Output {
    // The tcp transport opens beside sm: on loopback only.
    let out = cmd
        .env("RBTL_BTL_TCP_IF_INCLUDE", "lo")
        .output()
        .expect("start");
    if !out.status.success() {
        panic!(
            "{cmd:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// The rows of an OSU table: (size, value), checking the `%-10d%20.2f` layout.
fn rows(stdout: &[u8]) -> Vec<(usize, f64)> {
    let text = String::from_utf8_lossy(stdout);
    let mut lines = text.lines();
    let title = lines.next().expect("a header");
    assert!(title.starts_with("# OSU "), "{title}");
    let mut out = Vec::new();
    for line in lines.filter(|l| !l.starts_with('#')) {
        assert_eq!(line.len(), 30, "`{line}` is %-10d%20.2f");
        let size = line[..10].trim_end().parse().expect("size");
        let value: f64 = line[10..].trim_start().parse().expect("value");
        assert!(value > 0.0 && value.is_finite(), "{line}");
        assert_eq!(
            line[10..].split('.').nth(1).map(str::len),
            Some(2),
            "two decimals: {line}"
        );
        out.push((size, value));
    }
    out
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rbtl-osu-{}-{name}", std::process::id()))
}

#[test]
fn latency_alone_launches_its_own_ranks_and_writes_json_and_svg() {
    let (json, svg) = (tmp("lat.json"), tmp("lat.svg"));
    let out = run(Command::new(OSU)
        .args([
            "latency",
            "--max-size",
            "1024",
            "--iterations",
            "200",
            "--skip",
            "10",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&svg));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Latency Test") && text.contains("over sm"),
        "{text}"
    );
    // OSU's column header: "# Size" in 10 columns, the unit right-aligned in 20.
    assert_eq!(
        text.lines().nth(1),
        Some("# Size            Latency (us)"),
        "{text}"
    );
    let sizes: Vec<usize> = rows(&out.stdout).iter().map(|r| r.0).collect();
    assert_eq!(sizes, [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]);
    let j = std::fs::read_to_string(&json).unwrap();
    for key in [
        "\"benchmark\": \"latency\"",
        "\"transport\": \"sm\"",
        "\"host\"",
        "\"version\"",
        "{\"size\": 1024, \"value\": ",
    ] {
        assert!(j.contains(key), "{key} in {j}");
    }
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(
        s.starts_with("<svg") && s.contains("<polyline") && s.matches("<circle").count() == 12,
        "{s}"
    );
    let _ = (std::fs::remove_file(json), std::fs::remove_file(svg));
}

/// A short run of `osu` with `args` (three iterations, window 8), its header naming the
/// transport `over`; its output.
fn short_run(args: &[&str], over: &str) -> Output {
    let out = run(Command::new(OSU).args(args).args([
        "--iterations",
        "3",
        "--skip",
        "1",
        "--window",
        "8",
    ]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let header = text.lines().next().unwrap_or("");
    assert!(
        header.ends_with(&format!(" over {over})")),
        "{args:?}: {text}"
    );
    out
}

/// Every two-rank benchmark in a short sweep, with `extra` arguments, over `over`:
/// the one-sided ones, and `bw` at a rendezvous size.
fn short_sweeps(extra: &[&str], over: &str) {
    for (bench, min, max) in [
        ("latency", "0", "4096"),
        ("bw", "1024", "65536"),
        ("bw", "1048576", "1048576"),
        ("bibw", "1024", "65536"),
        ("put-latency", "8", "4096"),
        ("get-latency", "8", "4096"),
        ("put-bw", "1024", "65536"),
        ("get-bw", "1024", "65536"),
    ] {
        let mut args = vec![bench, "--min-size", min, "--max-size", max];
        args.extend_from_slice(extra);
        let out = short_run(&args, over);
        let r = rows(&out.stdout);
        assert_eq!(r.first().map(|r| r.0), min.parse().ok(), "{bench}");
        assert_eq!(r.last().map(|r| r.0), max.parse().ok(), "{bench}");
    }
}

#[test]
fn every_benchmark_runs_a_short_sweep() {
    short_sweeps(&[], "sm");
    // Rendezvous sizes through the copy path and through cross-memory attach.
    for rdma in ["copy", "cma"] {
        let out = run(Command::new(OSU)
            .args([
                "bw",
                "--min-size",
                "1048576",
                "--max-size",
                "1048576",
                "--iterations",
                "2",
                "--skip",
                "1",
                "--param",
            ])
            .arg(format!("btl_sm_rdma={rdma}")));
        assert_eq!(rows(&out.stdout).len(), 1);
    }
}

#[test]
fn mbw_mr_runs_several_pairs() {
    let out = run(Command::new(OSU).args([
        "mbw-mr",
        "-n",
        "2",
        "--min-size",
        "8",
        "--max-size",
        "64",
        "--iterations",
        "5",
        "--skip",
        "1",
        "--window",
        "16",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("over sm)") && text.contains("pairs: 2") && text.contains("Messages/s"),
        "{text}"
    );
    let data: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(data.len(), 4, "{text}");
    assert!(data.iter().all(|l| l.len() == 50), "{text}");
}

/// Every benchmark over `tcp` alone (`--btl tcp,self`, on loopback), the header
/// naming it: the one-sided ones, `bw` at a rendezvous size, and `mbw-mr` with two
/// pairs.
#[test]
fn every_benchmark_runs_over_tcp() {
    let tcp = ["--btl", "tcp,self"];
    short_sweeps(&tcp, "tcp");
    let mut args = vec!["mbw-mr", "-n", "2", "--min-size", "8", "--max-size", "64"];
    args.extend_from_slice(&tcp);
    let out = short_run(&args, "tcp");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("# OSU Multiple Bandwidth"), "{text}");
    assert_eq!(
        text.lines().filter(|l| !l.starts_with('#')).count(),
        4,
        "{text}"
    );
}

#[test]
fn runs_under_rbtlrun_and_over_the_self_transport_alone() {
    let out = run(Command::new(RBTLRUN).args([
        "-n",
        "2",
        OSU,
        "latency",
        "--max-size",
        "8",
        "--iterations",
        "50",
    ]));
    assert_eq!(rows(&out.stdout).len(), 5);
    // With sm excluded, two processes cannot reach each other: a clear error.
    let (_, err) = failing(Command::new(OSU).args(["latency", "--btl", "self", "--max-size", "8"]));
    assert!(err.contains("unreachable") && err.contains("btl"), "{err}");
    // tcp chosen, but its include list matches no interface here: the error says so.
    let (_, err) = failing(
        Command::new(OSU)
            .args(["latency", "--btl", "self,tcp", "--max-size", "8"])
            .args(["--param", "btl_tcp_if_include=198.19.255.0/24"]),
    );
    assert!(
        err.contains("unreachable")
            && err.contains(
                "tcp: found no address to use: btl_tcp_if_include = 198.19.255.0/24 leaves \
                 none of this host's up interfaces ("
            )
            && err.contains("lo 127.0.0.1/8"),
        "{err}"
    );
}

/// The embedding guide's complete BTL-level program: alone (through `self`) and under
/// the launcher with 2 and 4 ranks (through `sm`), every rank sees its left
/// neighbour's put.
#[test]
fn the_embedding_example_runs_alone_and_under_rbtlrun() {
    // `cargo test` builds the examples beside the test binaries (target/<profile>/examples).
    let example = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("examples").join("btl_hello"))
        .unwrap();
    assert!(
        example.exists(),
        "{} is missing: run the whole `cargo test`, which builds the examples",
        example.display()
    );
    let alone = run(&mut Command::new(&example));
    assert_eq!(
        String::from_utf8_lossy(&alone.stdout),
        "rank 0: rank 0 wrote into my memory\n"
    );
    for n in [2u32, 4] {
        let out = run(Command::new(RBTLRUN)
            .arg("-n")
            .arg(n.to_string())
            .arg(&example));
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        let expected: Vec<String> = (0..n)
            .map(|me| format!("rank {me}: rank {} wrote into my memory", (me + n - 1) % n))
            .collect();
        assert_eq!(lines, expected);
    }
}

/// `rbtl_info` lists the transports, the interfaces tcp would listen on, and every
/// parameter; an interface that does not exist is an error naming those that do.
#[test]
fn rbtl_info_lists_transports_interfaces_and_parameters() {
    let out = run(Command::new(RBTL_INFO).args(["--param", "btl_tcp_if_include=lo"]));
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "  tcp      selected",
        "tcp interfaces",
        "  lo       127.0.0.1/8",
        "  lo       ::1/128",
    ] {
        assert!(text.contains(line), "`{line}` in:\n{text}");
    }
    assert!(text.contains("btl_tcp_if_include = \"lo\""), "{text}");
    // Which memory monitor runs (these tests run where userfaultfd is available), and
    // the reason when none does.
    assert!(
        text.contains("memory monitor: userfaultfd (events unmap, remove, remap;"),
        "{text}"
    );
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    assert!(
        text.contains("unmaps in flight checked after a mapping (libc's mmap"),
        "{text}"
    );
    let each = run(Command::new(RBTL_INFO).args(["--param", "rcache_monitor_mmap_hooks=false"]));
    let each = String::from_utf8_lossy(&each.stdout);
    assert!(
        each.contains(
            "unmaps in flight checked at each lookup: mapping hooks turned off \
             (rcache_monitor_mmap_hooks = false)"
        ),
        "{each}"
    );
    let off = run(Command::new(RBTL_INFO).args(["--param", "rcache_monitor=none"]));
    let off = String::from_utf8_lossy(&off.stdout);
    assert!(
        off.contains("memory monitor: none: turned off (rcache_monitor = none)"),
        "{off}"
    );
    let (_, err) =
        failing(Command::new(RBTL_INFO).args(["--param", "btl_tcp_if_include=no-such-if0"]));
    assert!(
        err.contains("no interface `no-such-if0`") && err.contains("lo"),
        "{err}"
    );
}

#[test]
fn bad_arguments_and_parameters_are_clear_errors() {
    for (args, says) in [
        (vec!["latancy"], "unknown benchmark `latancy`"),
        (
            vec!["latency", "--max-sise", "8"],
            "unknown option `--max-sise`",
        ),
        (
            vec!["latency", "--btl", "sm,warp", "--max-size", "8"],
            "unknown transport `warp`",
        ),
        (
            vec![
                "latency",
                "--param",
                "btl_sm_eagr_limit=1",
                "--max-size",
                "8",
            ],
            "btl_sm_eager_limit",
        ),
    ] {
        let (_, err) = failing(Command::new(OSU).args(&args));
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let help = run(Command::new(OSU).arg("--help"));
    assert!(String::from_utf8_lossy(&help.stdout).contains("mbw-mr"));
}

#[test]
fn runs_under_mpich_hydra() {
    if Command::new("mpiexec.mpich")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIP: mpiexec.mpich is not installed (apt-get install mpich)");
        return;
    }
    let out = run(Command::new("mpiexec.mpich").args([
        "-n",
        "2",
        OSU,
        "latency",
        "--max-size",
        "4096",
        "--iterations",
        "100",
    ]));
    assert_eq!(rows(&out.stdout).len(), 14);
    let out = run(Command::new("mpiexec.mpich").args([
        "-n",
        "2",
        OSU,
        "bw",
        "--min-size",
        "65536",
        "--max-size",
        "1048576",
        "--iterations",
        "3",
        "--skip",
        "1",
    ]));
    assert_eq!(rows(&out.stdout).len(), 5);
}

/// `cmd`, which must fail: its exit code and stderr.
fn failing(cmd: &mut Command) -> (Option<i32>, String) {
    let out = cmd.output().expect("start");
    assert!(
        !out.status.success(),
        "{cmd:?} succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn failures_exit_non_zero() {
    let (_, err) = failing(Command::new(RBTLRUN).args(["-n", "1", OSU, "latency"]));
    assert!(err.contains("needs at least 2 ranks"), "{err}");
    for flag in ["--json", "--plot"] {
        let (_, err) = failing(Command::new(OSU).args([
            "latency",
            "--max-size",
            "8",
            "--iterations",
            "10",
            flag,
            "/nonexistent/x.out",
        ]));
        assert!(err.contains("cannot write /nonexistent/x.out"), "{err}");
    }
}

#[test]
fn out_of_range_values_are_errors_naming_the_valid_range() {
    for (args, says) in [
        (
            &["latency", "--iterations", "0"][..],
            "--iterations 0: out of range; want a whole number from 1 to",
        ),
        (
            &["bw", "--window", "0"][..],
            "--window 0: out of range; want a whole number from 1 to",
        ),
        (
            &["mbw-mr", "-n", "0"][..],
            "-n 0: out of range; want a whole number from 1 to",
        ),
        (
            &["mbw-mr", "-n", "4294967297"][..],
            "-n 4294967297: out of range",
        ),
        (
            &["mbw-mr", "-n", "2147483648"][..],
            "-n 2147483648: out of range",
        ),
        (
            &[
                "latency",
                "--min-size",
                "68719476736",
                "--max-size",
                "68719476736",
                "--iterations",
                "1",
                "--skip",
                "0",
            ][..],
            "--min-size 68719476736: too large; want a size from 0 to 1g",
        ),
    ] {
        let (code, err) = failing(Command::new(OSU).args(args));
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn sizes_take_the_suffixes_of_configuration_sizes() {
    let out = run(Command::new(OSU).args([
        "latency",
        "--min-size",
        "4k",
        "--max-size",
        "4K",
        "--iterations",
        "5",
        "--skip",
        "0",
    ]));
    let sizes: Vec<usize> = rows(&out.stdout).iter().map(|r| r.0).collect();
    assert_eq!(sizes, [4096]);
}

#[test]
fn openib_options_in_a_build_without_openib_say_so() {
    if cfg!(feature = "openib") {
        return;
    }
    let (code, err) = failing(Command::new(OSU).args(["latency", "--cpc", "oob"]));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("the openib transport is not built: rebuild with --features openib"),
        "{err}"
    );
}

/// The pids of the processes `pid` started.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    out
}

/// The `PMI_RANK` of process `pid`.
fn pmi_rank(pid: u32) -> Option<u32> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ
        .split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(b"PMI_RANK="))
        .and_then(|r| std::str::from_utf8(r).ok()?.parse().ok())
}

#[test]
fn killing_one_rank_of_mbw_mr_blames_that_rank() {
    for run in 0..3 {
        let child = Command::new(OSU)
            .args(["mbw-mr", "-n", "2", "--min-size", "8", "--max-size", "8"])
            .args(["--iterations", "100000000", "--skip", "0", "--window", "16"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let osu = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        // Wait for the four ranks, then a moment for them to be measuring.
        let start = std::time::Instant::now();
        let rank3 = loop {
            let ranks: Vec<(u32, u32)> = children(osu)
                .into_iter()
                .filter_map(|c| Some((pmi_rank(c)?, c)))
                .collect();
            if ranks.len() == 4 {
                break ranks.iter().find(|(r, _)| *r == 3).unwrap().1;
            }
            assert!(start.elapsed().as_secs() < 60, "the ranks did not start");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        // SAFETY: kill(2) with plain integers, on a rank of the osu this test started.
        unsafe { libc::kill(rank3 as libc::pid_t, libc::SIGKILL) };
        let out = match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(out) => out.unwrap(),
            Err(_) => {
                // SAFETY: as above, on the osu this test started.
                unsafe { libc::kill(osu as libc::pid_t, libc::SIGKILL) };
                panic!("osu did not end after its rank 3 was killed");
            }
        };
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(128 + libc::SIGKILL),
            "run {run}: {err}"
        );
        assert!(
            err.contains("[rbtl launcher] rank 3 was killed by signal 9"),
            "run {run}: {err}"
        );
    }
}
