//! `mpicc`: the C compiler with the flags that build a program against this
//! library's `mpi.h` and link it to `libmpi_abi.so`, in the convention of MPICH's
//! and Open MPI's wrappers.
//!
//! `mpicc [-show] [-c|-S|-E|-M|-MM] ARGS...` runs (or, with `-show`, prints) the
//! compiler with ARGS, then `-I<include dir>` and, when linking, `-L<lib dir>
//! -Wl,-rpath,<lib dir> -lmpi_abi`. `-showme:compile`, `-showme:link`,
//! `-showme:incdir`, `-showme:libdir` and `-showme:libs` (or MPICH's
//! `-show-compile-info`, ...) print those parts alone. `-cc=CC` picks the compiler.
//!
//! The compiler: `-cc=`, else `MPICC_CC`, `MPICH_CC`, `MPI_CC`, `CC` (the
//! first set, unless it names this wrapper), else `cc`. (None of these variables
//! starts with `RBTL_`: those name rbtl's configuration parameters, which an MPI
//! program reads from its environment at `MPI_Init` and refuses when unknown.) The header's folder:
//! `MPICC_INCDIR`, else `../include` beside this program when it holds `mpi.h`
//! (an installed layout), else the crate's own `include/`. The library's folder:
//! `MPICC_LIBDIR`, else this program's folder when it holds `libmpi_abi.so` (a
//! cargo build), else `../lib`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const HELP: &str = "\
mpicc: compile and link C programs against the MPI standard ABI of rbtl

Usage: mpicc [-show] [-cc=CC] [-c|-S|-E|-M|-MM] ARGS...
       mpicc -showme:compile|-showme:link|-showme:incdir|-showme:libdir|-showme:libs

Options:
  -show, -showme      print the compiler command instead of running it
  -cc=CC              use CC as the compiler
  -showme:compile     print the compile flags (also -show-compile-info)
  -showme:link        print the link flags (also -show-link-info)
  -showme:incdir      print the header's folder (also -show-incdir)
  -showme:libdir      print the library's folder (also -show-libdir)
  -showme:libs        print the library's name (also -show-libs)
  --help              print this help

Environment: MPICC_CC, MPICH_CC, MPI_CC or CC name the compiler (cc by
default); MPICC_INCDIR and MPICC_LIBDIR override where mpi.h and
libmpi_abi.so are found.
";

/// What the wrapper is asked to do.
#[derive(Debug, PartialEq, Eq)]
enum Mode {
    Link,
    Compile,
    Show(&'static str),
}

fn main() -> ExitCode {
    let args: Vec<String> = match std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect()
    {
        Ok(args) => args,
        Err(bad) => {
            eprintln!("mpicc: the argument {bad:?} is not UTF-8 (give file names in UTF-8)");
            return ExitCode::from(1);
        }
    };
    if args.is_empty() || args.iter().any(|a| a == "--help") {
        print!("{HELP}");
        return if args.is_empty() {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        };
    }
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.canonicalize().ok());
    let here = exe.as_deref().and_then(Path::parent).map(Path::to_path_buf);
    let incdir = folder("MPICC_INCDIR", here.as_deref(), "../include", "mpi.h")
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/include")));
    let libdir = folder("MPICC_LIBDIR", here.as_deref(), ".", "libmpi_abi.so")
        .or_else(|| here.as_ref().map(|h| h.join("../lib")))
        .unwrap_or_else(|| PathBuf::from("."));
    let mut cc: Vec<String> = compiler(exe.as_deref())
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let mut show = false;
    let mut mode = Mode::Link;
    let mut rest = Vec::new();
    for a in args {
        match a.as_str() {
            "-show" | "-showme" => show = true,
            "-c" | "-S" | "-E" | "-M" | "-MM" => {
                if mode == Mode::Link {
                    mode = Mode::Compile;
                }
                rest.push(a);
            }
            "-showme:compile" | "-show-compile-info" => mode = Mode::Show("compile"),
            "-showme:link" | "-show-link-info" => mode = Mode::Show("link"),
            "-showme:incdir" | "-show-incdir" => mode = Mode::Show("incdir"),
            "-showme:libdir" | "-show-libdir" => mode = Mode::Show("libdir"),
            "-showme:libs" | "-show-libs" => mode = Mode::Show("libs"),
            _ if a.starts_with("-cc=") => cc = vec![a["-cc=".len()..].to_string()],
            _ => rest.push(a),
        }
    }
    let inc = format!("-I{}", incdir.display());
    let link = vec![
        format!("-L{}", libdir.display()),
        format!("-Wl,-rpath,{}", libdir.display()),
        "-lmpi_abi".to_string(),
    ];
    let cmd: Vec<String> = match mode {
        Mode::Show(part) => {
            let text = match part {
                "compile" => inc,
                "link" => link.join(" "),
                "incdir" => incdir.display().to_string(),
                "libdir" => libdir.display().to_string(),
                _ => "mpi_abi".to_string(),
            };
            println!("{text}");
            return ExitCode::SUCCESS;
        }
        Mode::Compile => [cc, rest, vec![inc]].concat(),
        Mode::Link => [cc, rest, vec![inc], link].concat(),
    };
    if show {
        println!(
            "{}",
            cmd.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
        );
        return ExitCode::SUCCESS;
    }
    match Command::new(&cmd[0]).args(&cmd[1..]).status() {
        Ok(s) => ExitCode::from(s.code().unwrap_or(1).clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("mpicc: cannot run {}: {e}", cmd[0]);
            ExitCode::from(127)
        }
    }
}

/// The folder the variable `var` names, else `rel` beside this program when it
/// holds `file`.
fn folder(var: &str, here: Option<&Path>, rel: &str, file: &str) -> Option<PathBuf> {
    if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(v));
    }
    let dir = here?.join(rel);
    dir.join(file)
        .exists()
        .then(|| dir.canonicalize().unwrap_or(dir))
}

/// The C compiler to run: the first of the variables that is set and is not this
/// wrapper (configure scripts often export `CC=mpicc`).
fn compiler(exe: Option<&Path>) -> String {
    for var in ["MPICC_CC", "MPICH_CC", "MPI_CC", "CC"] {
        let Ok(v) = std::env::var(var) else { continue };
        let first = v.split_whitespace().next().unwrap_or("");
        if first.is_empty() {
            continue;
        }
        let same = which(first)
            .and_then(|p| p.canonicalize().ok())
            .is_some_and(|p| Some(p.as_path()) == exe);
        if !same && !first.ends_with("mpicc") {
            return v;
        }
    }
    "cc".to_string()
}

/// Where `name` is found on `PATH` (or itself, when it has a slash).
fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// An argument as a shell reads it back.
fn quote(a: &str) -> String {
    if !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=/.,:+@%".contains(c))
    {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}
