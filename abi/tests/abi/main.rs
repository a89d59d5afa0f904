//! The MPI standard ABI, tested from outside: programs built with `mpicc` against
//! the MPI Forum's reference header (`../shared/external/mpi-abi/mpi.h`, the judge
//! of binary compatibility) or the project's own, run under `mpiexec`.
//!
//! * [`header`]: the project's `mpi.h` agrees with the reference, constant by
//!   constant, layout by layout, binding by binding; the library exports every
//!   function of it.
//! * [`programs`]: the library's own conformance programs (`programs/*.c`).
//! * [`osu`]: the OSU micro-benchmarks, built unmodified.
//! * [`rsmpi`]: the Rust `mpi` crate from crates.io, built unmodified, and its
//!   examples.

mod header;
mod osu;
mod programs;
mod rsmpi;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The compiler wrapper and the launcher of this build.
pub const MPICC: &str = env!("CARGO_BIN_EXE_mpicc");
pub const MPIEXEC: &str = env!("CARGO_BIN_EXE_mpiexec");

/// The folder of the outside material (read only: built from, never changed).
pub fn external() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/external")
}

/// The MPI Forum's reference header's folder.
pub fn reference_include() -> PathBuf {
    external().join("mpi-abi")
}

/// A folder of this test's own under the build's target folder (made afresh).
pub fn scratch(name: &str) -> PathBuf {
    let target = Path::new(MPICC).parent().expect("a folder").to_path_buf();
    let dir = target.join("abi-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// `mpicc` set to build against the reference header (`reference`) or ours.
pub fn mpicc(reference: bool) -> Command {
    let mut c = Command::new(MPICC);
    if reference {
        c.env("MPICC_INCDIR", reference_include());
    } else {
        c.env_remove("MPICC_INCDIR");
    }
    c
}

/// Compile the C program `source` into `out`; panics with the compiler's words.
pub fn compile(source: &Path, out: &Path, reference: bool) {
    let o = mpicc(reference)
        .args([
            "-O1",
            "-Wall",
            "-Werror=implicit-function-declaration",
            "-o",
        ])
        .arg(out)
        .arg(source)
        .output()
        .expect("run mpicc");
    assert!(
        o.status.success(),
        "mpicc {}: {}{}",
        source.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Run `cmd`, killed (with everything it started) after `limit`: its output.
pub fn run_for(cmd: &mut Command, limit: Duration) -> Output {
    run_limited(cmd, limit).unwrap_or_else(|why| panic!("{why}"))
}

/// Runs `cmd` in a process group of its own with its output captured; kills the
/// group when it has not ended within `limit` (an error with what it printed). Its
/// output is read until the pipes close, for at most `PIPES_LIMIT` after it ended
/// (a process it left behind could hold them open).
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    const PIPES_LIMIT: Duration = Duration::from_secs(10);
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let reader = |mut pipe: Box<dyn Read + Send>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = tx.send(bytes);
        });
        rx
    };
    let out = reader(Box::new(child.stdout.take().expect("piped")));
    let err = reader(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            kill_group(child.id());
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |rx: mpsc::Receiver<Vec<u8>>| {
        rx.recv_timeout(PIPES_LIMIT)
            .unwrap_or_else(|_| b"(still open after it ended: not read)".to_vec())
    };
    let (stdout, stderr) = (read(out), read(err));
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(format!(
            "{cmd:?} did not end within {limit:?}; killed\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        )),
    }
}

/// Sends SIGKILL to the process group `group` (through the shell's `kill`, to which
/// a negative pid names a group).
fn kill_group(group: u32) {
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -KILL -{group}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `mpiexec -n ranks program args...`, within `limit`.
pub fn mpiexec(ranks: usize, program: &Path, args: &[&str], limit: Duration) -> Output {
    run_for(
        Command::new(MPIEXEC)
            .args(["-n", &ranks.to_string()])
            .arg(program)
            .args(args),
        limit,
    )
}
