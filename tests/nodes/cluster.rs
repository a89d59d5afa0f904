//! Simulated nodes for one test: a `tools/nodes.sh hold` session that takes them
//! down when this guard is dropped, when the test process dies (its standard input
//! closes) or on Ctrl-C (the session gets the terminal's SIGINT too); and what the
//! tool may leave on the machine, to check that it left nothing.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The tool.
pub fn tool() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/nodes.sh")
}

/// The ssh stand-in for launchers.
pub fn ssh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/nodes-ssh")
}

/// Why this machine cannot run the simulated nodes, if it cannot.
pub fn missing(slurm: bool) -> Option<String> {
    // The owner of /proc/self is the process's effective user.
    let euid = std::fs::metadata("/proc/self").map(|m| m.uid());
    if euid.ok() != Some(0) {
        return Some("simulated nodes need root".into());
    }
    let mut tools = vec!["ip", "nsenter", "unshare", "mpiexec.mpich"];
    if slurm {
        tools.extend(["munged", "slurmctld", "slurmd", "srun"]);
    }
    let absent: Vec<&str> = tools
        .into_iter()
        .filter(|t| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    (!absent.is_empty()).then(|| {
        format!(
            "{} not installed (bash tools/packages.sh install host nodes)",
            absent.join(", ")
        )
    })
}

/// Whether to go on; panics when the machine cannot and `NODES_REQUIRED=1`.
pub fn can_run(slurm: bool) -> bool {
    match missing(slurm) {
        None => true,
        Some(why) => {
            rbtl_testkit::cannot_run("jobs across simulated nodes", &why);
            false
        }
    }
}

/// The bridge hydra's proxies reach `mpiexec` through.
pub const BRIDGE: &str = "rbtl-br0";
/// The network of the nodes, for `RBTL_BTL_TCP_IF_INCLUDE`.
pub const CIDR: &str = "198.18.1.0/24";
/// Their second network (a second interface on each node, on a bridge of its own).
pub const CIDR2: &str = "198.18.2.0/24";

/// Bytes node `k`'s interface on the first network (`second`: on the second) has
/// carried both ways so far, as the counters of its veth's end in the root namespace
/// give them.
pub fn carried(k: usize, second: bool) -> u64 {
    let link = format!("rbtl-{}{k}", if second { 'w' } else { 'v' });
    ["rx_bytes", "tx_bytes"]
        .iter()
        .map(|c| {
            let path = format!("/sys/class/net/{link}/statistics/{c}");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            text.trim().parse::<u64>().unwrap()
        })
        .sum()
}
/// How long bringing the nodes up, or down, may take.
const UP_DOWN_LIMIT: Duration = Duration::from_secs(120);

/// The name of node `k` (from 1).
pub fn node(k: usize) -> String {
    format!("rbtl-n{k}")
}

/// Nodes that are up while this lives.
pub struct Nodes {
    session: Child,
    stdin: Option<ChildStdin>,
    stderr: mpsc::Receiver<String>,
    /// Whether the session said the nodes were up (so that they are ours to take
    /// down, even when the session cannot).
    ours: bool,
    pub count: usize,
}

impl Nodes {
    /// Brings up `count` nodes (with a Slurm cluster when `slurm`); panics with the
    /// tool's words when it cannot.
    pub fn up(count: usize, slurm: bool) -> Nodes {
        Nodes::up_with(count, if slurm { &["--slurm"] } else { &[] })
    }

    /// Brings up `count` nodes with the tool's `options` (`--slurm`, `--own-cpus`).
    pub fn up_with(count: usize, options: &[&str]) -> Nodes {
        let mut cmd = Command::new("bash");
        cmd.arg(tool())
            .arg("hold")
            .arg(count.to_string())
            .args(options);
        let mut session = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tools/nodes.sh hold");
        let stdin = session.stdin.take();
        let stdout = session.stdout.take().expect("piped");
        let mut stderr_pipe = session.stderr.take().expect("piped");
        let (err_tx, stderr) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr_pipe.read_to_string(&mut text);
            let _ = err_tx.send(text);
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut nodes = Nodes {
            session,
            stdin,
            stderr,
            ours: false,
            count,
        };
        match rx.recv_timeout(UP_DOWN_LIMIT) {
            Ok(line) if line.trim() == "up" => {
                nodes.ours = true;
                nodes
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Stuck midway: what it made is ours.
                nodes.ours = true;
                let why = nodes.end();
                panic!("tools/nodes.sh hold {count} did not come up in {UP_DOWN_LIMIT:?}: {why}");
            }
            got => {
                let why = nodes.end();
                panic!("tools/nodes.sh hold {count} did not come up ({got:?}): {why}");
            }
        }
    }

    /// Ends the session (it takes the nodes down) and returns what it said on stderr.
    fn end(&mut self) -> String {
        drop(self.stdin.take());
        let deadline = Instant::now() + UP_DOWN_LIMIT;
        loop {
            match self.session.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = self.session.kill();
                    let _ = self.session.wait();
                    break;
                }
            }
        }
        // Whatever the session could not take down (never nodes of another user,
        // which a refused `up` leaves alone).
        if self.ours {
            let _ = Command::new("bash")
                .arg(tool())
                .arg("down")
                .stdin(Stdio::null())
                .status();
        }
        self.stderr
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_default()
    }

    /// `a,b,...`: the first `n` nodes.
    pub fn hosts(&self, n: usize) -> String {
        assert!(n <= self.count, "only {} nodes are up", self.count);
        (1..=n).map(node).collect::<Vec<_>>().join(",")
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        if !self.ours {
            return;
        }
        let said = self.end();
        let left = leftovers();
        if !left.is_empty() && !std::thread::panicking() {
            panic!("the nodes left {left:?} behind; the tool said: {said}");
        }
    }
}

/// Everything of the tool's still on the machine: namespaces, links, its state
/// folder and lock, processes whose command line names its state folder (munged,
/// slurmctld, slurmd), and any line of /etc/hosts naming a node.
pub fn leftovers() -> Vec<String> {
    let mut left = Vec::new();
    let text = |cmd: &mut Command| {
        cmd.output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    for line in text(Command::new("ip").args(["netns", "list"])).lines() {
        if line.starts_with("rbtl-") {
            left.push(format!("namespace {line}"));
        }
    }
    for line in text(Command::new("ip").args(["-o", "link", "show"])).lines() {
        if let Some(name) = line.split(": ").nth(1) {
            if name.starts_with("rbtl-") {
                left.push(format!("link {name}"));
            }
        }
    }
    for path in ["/run/rbtl-nodes", "/run/lock/rbtl-nodes.lock"] {
        if Path::new(path).exists() {
            left.push(path.to_string());
        }
    }
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for p in procs.flatten() {
            let Ok(cmdline) = std::fs::read(p.path().join("cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains("/run/rbtl-nodes") {
                left.push(format!(
                    "process {}: {cmdline}",
                    p.file_name().to_string_lossy()
                ));
            }
        }
    }
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    if hosts.contains("rbtl-") {
        left.push("a line of /etc/hosts".into());
    }
    left
}
