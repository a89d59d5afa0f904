//! Running a launcher with a deadline, and reading what `osu --verbose` reports.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a finished launch printed.
pub struct Ran {
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` in a process group of its own; kills the whole group and panics when
/// it has not ended within `limit`, or when it fails.
pub fn run(cmd: &mut Command, limit: Duration) -> Ran {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let reader = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("piped")));
    let err = reader(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            // SAFETY: kill takes no pointers; the group is the child's own.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ran = Ran {
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    match status {
        Some(s) if s.success() => ran,
        Some(s) => panic!(
            "{shown} failed ({s}):\nstdout:\n{}\nstderr:\n{}",
            ran.stdout, ran.stderr
        ),
        None => panic!(
            "{shown} did not end within {limit:?}; killed:\nstdout:\n{}\nstderr:\n{}",
            ran.stdout, ran.stderr
        ),
    }
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
