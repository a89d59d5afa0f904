//! The MPI standard ABI, tested from outside: programs built with `mpicc` against
//! the MPI Forum's reference header (`../shared/external/mpi-abi/mpi.h`, the judge
//! of binary compatibility) or the project's own, run under `mpiexec`.
//!
//! * [`header`]: the project's `mpi.h` agrees with the reference, constant by
//!   constant, layout by layout, binding by binding; the library exports every
//!   function of it.
//! * [`programs`]: the library's own conformance programs (`programs/*.c`).
//! * [`launchers`]: what `mpiexec` and hydra give those programs (the universe's
//!   size, program numbers, spawning).
//! * [`unsupported`]: every function of the reference header not implemented
//!   refuses, naming itself.
//! * [`bad_arguments`]: every function implemented refuses a null pointer to a
//!   value it must read or write, and a handle of another kind.
//! * [`osu`]: the OSU micro-benchmarks, built unmodified.
//! * [`rsmpi`]: the Rust `mpi` crate from crates.io, built unmodified, and its
//!   examples.

mod bad_arguments;
mod header;
mod launchers;
mod osu;
mod programs;
mod rsmpi;
mod unsupported;

pub use rbtl_testkit::process::run_limited;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

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
    succeed(
        mpicc(reference)
            .args([
                "-O1",
                "-Wall",
                "-Werror=implicit-function-declaration",
                "-o",
            ])
            .arg(out)
            .arg(source),
        &format!("mpicc {}", source.display()),
    );
}

/// Run `cmd` to its end: its output. Panics, naming it `what` and showing what it
/// printed, when it cannot start or ends with a status that is not 0.
pub fn succeed(cmd: &mut Command, what: &str) -> Output {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// What a run printed, and its status, for a failure's report.
pub fn report(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Run `cmd`, killed (with everything it started) after `limit`: its output.
pub fn run_for(cmd: &mut Command, limit: Duration) -> Output {
    run_limited(cmd, limit).unwrap_or_else(|why| panic!("{why}"))
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

/// An argument that is not UTF-8 gets a clear refusal from `mpicc`, not a crash.
#[test]
fn mpicc_refuses_an_argument_that_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let o = mpicc(true)
        .arg(std::ffi::OsStr::from_bytes(b"prog\xff.c"))
        .output()
        .expect("mpicc starts");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "mpicc's status; it said: {err}");
    assert!(err.contains("is not UTF-8"), "mpicc said: {err}");
}
