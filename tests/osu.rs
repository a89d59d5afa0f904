//! The `osu` binary as a user runs it: alone (it launches its own ranks), under
//! `rbtlrun`, and under MPICH's `mpiexec.mpich` (PMI-1 from hydra), with OSU's output
//! format, JSON and SVG files, and clear errors.

use std::path::PathBuf;
use std::process::{Command, Output};

const OSU: &str = env!("CARGO_BIN_EXE_osu");
const RBTLRUN: &str = env!("CARGO_BIN_EXE_rbtlrun");

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

#[test]
fn every_benchmark_runs_a_short_sweep() {
    for (bench, max) in [
        ("bw", "65536"),
        ("bibw", "65536"),
        ("put-latency", "4096"),
        ("get-latency", "4096"),
        ("put-bw", "65536"),
        ("get-bw", "65536"),
    ] {
        let out = run(Command::new(OSU).args([
            bench,
            "--min-size",
            "1024",
            "--max-size",
            max,
            "--iterations",
            "3",
            "--skip",
            "1",
            "--window",
            "8",
        ]));
        let r = rows(&out.stdout);
        assert_eq!(r.first().map(|r| r.0), Some(1024), "{bench}");
        assert_eq!(r.last().map(|r| r.0), max.parse().ok(), "{bench}");
    }
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
        text.contains("pairs: 2") && text.contains("Messages/s"),
        "{text}"
    );
    let data: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(data.len(), 4, "{text}");
    assert!(data.iter().all(|l| l.len() == 50), "{text}");
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
    let bad = Command::new(OSU)
        .args(["latency", "--btl", "self", "--max-size", "8"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("unreachable") && err.contains("btl"), "{err}");
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
        let out = Command::new(OSU).args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
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
