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

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
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

/// Run `cmd`, killed after `limit`: its output.
pub fn run_for(cmd: &mut Command, limit: Duration) -> Output {
    use std::io::Read;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let o = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let e = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let (so, se) = (o.join().unwrap(), e.join().unwrap());
            panic!(
                "{cmd:?} still ran after {limit:?}: killed\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&so),
                String::from_utf8_lossy(&se)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: o.join().unwrap(),
        stderr: e.join().unwrap(),
    }
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
