//! Running a launcher with a deadline, and reading what `osu --verbose` reports.

use rbtl_testkit::process::run_limited;
use std::process::Command;
use std::time::Duration;

/// What a finished launch printed.
pub struct Ran {
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` in a process group of its own; kills the whole group and panics when
/// it has not ended within `limit`, or when it fails.
pub fn run(cmd: &mut Command, limit: Duration) -> Ran {
    let o = run_limited(cmd, limit).unwrap_or_else(|why| panic!("{why}"));
    let ran = Ran {
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    assert!(
        o.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        o.status,
        ran.stdout,
        ran.stderr
    );
    ran
}

/// One rank's line of `osu --verbose`: its host and its transport to every rank.
#[derive(Debug, PartialEq, Eq)]
pub struct Route {
    pub host: String,
    pub transports: Vec<String>,
}

/// The `# routes: rank R on HOST: T0 T1 ...` lines, in rank order.
pub fn routes(stdout: &str) -> Vec<Route> {
    let mut out = Vec::new();
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("# routes: rank ") else {
            continue;
        };
        let (rank, rest) = rest.split_once(" on ").expect("rank R on HOST: ...");
        assert_eq!(rank.parse::<usize>().ok(), Some(out.len()), "{line}");
        let (host, transports) = rest.split_once(": ").expect("HOST: ...");
        out.push(Route {
            host: host.to_string(),
            transports: transports.split(' ').map(str::to_string).collect(),
        });
    }
    out
}

/// Checks that rank `r` runs on `hosts[r]` and reaches every rank as it should:
/// itself over `self`, ranks on its node over `sm`, the others over `tcp`.
pub fn check_routes(stdout: &str, hosts: &[String]) {
    let routes = routes(stdout);
    assert_eq!(
        routes.len(),
        hosts.len(),
        "one routes line per rank:\n{stdout}"
    );
    for (r, route) in routes.iter().enumerate() {
        assert_eq!(route.host, hosts[r], "rank {r}'s host:\n{stdout}");
        let want: Vec<&str> = (0..hosts.len())
            .map(|p| match p {
                p if p == r => "self",
                p if hosts[p] == hosts[r] => "sm",
                _ => "tcp",
            })
            .collect();
        assert_eq!(route.transports, want, "rank {r}'s routes:\n{stdout}");
    }
}

/// The benchmark's rows (size, value), checking OSU's `%-10d%20.2f` layout.
pub fn rows(stdout: &str) -> Vec<(usize, f64)> {
    stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|line| {
            assert_eq!(line.len(), 30, "`{line}` is %-10d%20.2f");
            let size = line[..10].trim_end().parse().expect("size");
            let value: f64 = line[10..].trim_start().parse().expect("value");
            assert!(value > 0.0 && value.is_finite(), "{line}");
            (size, value)
        })
        .collect()
}
