//! The Rust `mpi` crate (rsmpi 0.8, `mpi-sys` 0.2) from crates.io, unmodified:
//! built with `MPICC` set to this library's wrapper (against the reference header),
//! and each of the examples its package ships run on 2 and 3 ranks, as its own
//! `ci/run-examples.sh` runs them (a debug build, `cargo mpirun`'s way). Its
//! dependencies come from crates.io: the test needs the network.

use super::{mpiexec, reference_include, scratch, succeed, MPICC};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The crate's version.
const VERSION: &str = "0.8.2";

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // The outer build's settings are not the crate's.
    for (k, _) in std::env::vars() {
        if k.starts_with("CARGO_") && k != "CARGO_HOME" {
            c.env_remove(k);
        }
    }
    c
}

/// The crate's sources, fetched from crates.io and copied under `dir`.
fn fetch(dir: &Path) -> PathBuf {
    let probe = dir.join("probe");
    std::fs::create_dir_all(probe.join("src")).unwrap();
    std::fs::write(
        probe.join("Cargo.toml"),
        format!("[package]\nname = \"probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[dependencies]\nmpi = \"={VERSION}\"\n"),
    )
    .unwrap();
    std::fs::write(probe.join("src/main.rs"), "fn main() {}\n").unwrap();
    let o = succeed(
        cargo()
            .args(["metadata", "--format-version", "1"])
            .current_dir(&probe),
        "cargo metadata",
    );
    let meta = String::from_utf8(o.stdout).unwrap();
    // The manifest of `mpi` itself: `.../mpi-0.8.2/Cargo.toml`.
    let needle = format!("mpi-{VERSION}/Cargo.toml\"");
    let end = meta.find(&needle).expect("the mpi crate in the metadata") + needle.len()
        - "/Cargo.toml\"".len();
    let start = meta[..end].rfind('"').expect("a path") + 1;
    let source = PathBuf::from(&meta[start..end]);
    let copy = dir.join(format!("mpi-{VERSION}"));
    succeed(
        Command::new("cp").arg("-r").arg(&source).arg(&copy),
        &format!("copying {}", source.display()),
    );
    copy
}

/// A fresh folder outside the workspace, named after this build's target folder
/// (two builds never share one).
fn outside_workspace() -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    Path::new(MPICC).hash(&mut h);
    let dir = std::env::temp_dir().join(format!("rbtl-abi-rsmpi-{:016x}", h.finish()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

/// The names of the crate's examples, from its manifest.
fn examples(crate_dir: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let mut names = Vec::new();
    let mut in_example = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_example = line == "[[example]]";
        } else if in_example {
            if let Some(v) = line.strip_prefix("name = ") {
                names.push(v.trim_matches('"').to_string());
            }
        }
    }
    names
}

/// Whether libclang is where `mpi-sys`'s bindgen looks for it (`LIBCLANG_PATH`, or
/// the distribution's folders: Debian's libclang-dev). Without it the test says SKIP,
/// unless `RSMPI_REQUIRED=1` (as `.ci/run` sets, after installing it); then it fails.
fn libclang_found() -> bool {
    let found = Command::new("sh")
        .arg("-c")
        .arg(
            "for f in ${LIBCLANG_PATH:+\"$LIBCLANG_PATH\"/libclang*.so*} \
             /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/*/libclang*.so*; do \
             [ -e \"$f\" ] && exit 0; done; exit 1",
        )
        .status()
        .is_ok_and(|s| s.success());
    if !found && std::env::var("RSMPI_REQUIRED").as_deref() == Ok("1") {
        panic!(
            "RSMPI_REQUIRED=1 but libclang is not installed (bash tools/packages.sh install host)"
        );
    }
    if !found {
        eprintln!("SKIP: libclang is not installed (bash tools/packages.sh install host)");
    }
    found
}

#[test]
fn every_example_of_the_rust_mpi_crate_runs_on_2_and_3_ranks() {
    if !libclang_found() {
        return;
    }
    // The crate builds outside this workspace (cargo would take a package below it
    // for one of its members), in a folder of this build's own; its target folder
    // stays under this build's, kept between runs: the dependencies build once.
    let dir = outside_workspace();
    let crate_dir = fetch(&dir);
    let names = examples(&crate_dir);
    assert_eq!(names.len(), 58, "the package's examples: {names:?}");
    let target = scratch("rsmpi").join("../rsmpi-target");
    succeed(
        cargo()
            .args(["build", "--examples", "--all-features"])
            .current_dir(&crate_dir)
            .env("CARGO_TARGET_DIR", &target)
            .env("MPICC", MPICC)
            .env("MPICC_INCDIR", reference_include()),
        "building the examples",
    );
    let mut failed = Vec::new();
    for name in &names {
        let exe = target.join("debug/examples").join(name);
        for ranks in [2, 3] {
            let out = mpiexec(ranks, &exe, &[], Duration::from_secs(120));
            if !out.status.success() {
                failed.push(format!(
                    "{name} on {ranks} ranks: {}\n{}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
                break;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failed.is_empty(),
        "{} of {} examples failed:\n{}",
        failed.len(),
        names.len(),
        failed.join("\n")
    );
}
