//! `mpiexec`: start an MPI program's ranks on this node, through rbtl's launcher
//! (`rbtlrun`, a PMI-1 server). Across nodes, MPICH's `mpiexec` (hydra) and Slurm's
//! `srun --mpi=pmi2` start the same programs: they speak the same PMI.
//!
//! It takes the common spellings of MPICH's and Open MPI's launchers and hands the
//! rest to `rbtlrun` (see `rbtlrun --help`): `-n`/`-np N`; hydra's `-genv NAME
//! VALUE` and, before the first program, Open MPI's `-x NAME=VALUE` set a variable
//! in every rank (as `--env NAME=VALUE`); hydra's `-env NAME VALUE` sets one in its
//! program's ranks only (as `--program-env NAME=VALUE`), and so does `-x` after a
//! `:` that joins programs into one job (MPMD); hydra's
//! `-usize N` sets `MPI_UNIVERSE_SIZE` (as `--universe-size N`); MPICH's `-wdir DIR`
//! and Open MPI's `-wd DIR` name the ranks' folder (as `--wdir DIR`); MPICH's `-l`
//! and `-prepend-rank` put each line's rank before it (as `--tag-output`), its
//! `-bind-to` is `--bind-to`; `--oversubscribe` is accepted (ranks may always
//! outnumber cores here); `-host`, `-hosts`, `-f` and `--hostfile` are refused with
//! the way to run across nodes. hydra's `-configfile FILE` and Open MPI's `--app FILE`
//! take the programs from FILE, one a line with its options, after the options of the
//! whole job.
//!
//! The ranks find `libmpi_abi.so` where this `mpiexec` finds it (beside itself, or
//! in `../lib`): that folder goes first in their `LD_LIBRARY_PATH`, as Open MPI's
//! `mpirun --prefix` does, so that programs linked without a run path (the Rust
//! `mpi` crate's) start.

use rbtl::launcher::cli;
use std::ffi::OsString;
use std::process::ExitCode;

/// Copy a program's arguments from `it` to `out`, up to and with the `:` that
/// starts the next program's options, if there is one: whether there is.
fn program_args(it: &mut impl Iterator<Item = OsString>, out: &mut Vec<OsString>) -> bool {
    for a in it.by_ref() {
        let next = a == ":";
        out.push(a);
        if next {
            return true;
        }
    }
    false
}

/// `rbtlrun`'s name for another launcher's option that takes a value.
fn rbtlrun_name(option: &str) -> Option<&'static str> {
    match option {
        "-usize" => Some("--universe-size"),
        "-bind-to" => Some("--bind-to"),
        "-wdir" | "-wd" | "--wd" => Some("--wdir"),
        _ => None,
    }
}

/// The programs of a configuration file (hydra's `-configfile`, Open MPI's `--app`):
/// each line one program's options and arguments, split at white space (no quoting),
/// the lines joined by `:`; empty lines and lines starting with `#` are skipped.
fn programs_in(file: &OsString) -> Result<Vec<OsString>, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.to_string_lossy()))?;
    let mut args: Vec<OsString> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !args.is_empty() {
            args.push(":".into());
        }
        args.extend(line.split_whitespace().map(OsString::from));
    }
    if args.is_empty() {
        return Err(format!("{} names no program", file.to_string_lossy()));
    }
    Ok(args)
}

/// `rbtlrun`'s arguments for an `mpiexec` command line (programs joined by `:`
/// each take their own options).
fn translate(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let mut out = Vec::new();
    let mut it = args.into_iter();
    // Past the first program: options are that program's own.
    let mut later = false;
    // The programs come from a configuration file.
    let mut from_file = false;
    while let Some(a) = it.next() {
        let text = match a.to_str() {
            Some(t) if t.starts_with('-') => t.to_string(),
            _ => {
                out.push(a);
                later |= program_args(&mut it, &mut out);
                continue;
            }
        };
        if later && text == "-genv" {
            return Err("'-genv' sets a variable in every rank: give it before the first program (after ':', -env sets one for that program's ranks)".into());
        }
        if matches!(text.as_str(), "-configfile" | "--app" | "-app") {
            if later || from_file {
                return Err(format!(
                    "'{text}' is an option of the whole job: give it once, before any program"
                ));
            }
            let file = it.next().ok_or_else(|| format!("'{text}' needs a FILE"))?;
            if it.next().is_some() {
                return Err(format!(
                    "'{text} FILE' takes the programs from FILE: nothing may follow it"
                ));
            }
            it = programs_in(&file)?.into_iter();
            from_file = true;
            continue;
        }
        if let Some(name) = rbtlrun_name(&text) {
            out.push(name.into());
            out.extend(it.next());
            continue;
        }
        match text.as_str() {
            "-genv" | "-env" => {
                let (name, value) = (it.next(), it.next());
                match (name.and_then(|n| n.into_string().ok()), value.and_then(|v| v.into_string().ok())) {
                    (Some(n), Some(v)) => {
                        // hydra's `-env` is its program's, also before the first.
                        out.push(if text == "-env" { "--program-env" } else { "--env" }.into());
                        out.push(format!("{n}={v}").into());
                    }
                    _ => return Err(format!("'{text}' needs NAME and VALUE")),
                }
            }
            "-x" => {
                let v = it.next().and_then(|v| v.into_string().ok()).ok_or("'-x' needs NAME=VALUE")?;
                let v = if v.contains('=') {
                    v
                } else {
                    // Open MPI's `-x NAME` passes the launcher's own value.
                    format!("{v}={}", std::env::var(&v).unwrap_or_default())
                };
                out.push("--env".into());
                out.push(v.into());
            }
            "--oversubscribe" | "-oversubscribe" => {}
            "-l" | "-prepend-rank" | "--prepend-rank" => out.push("--tag-output".into()),
            "-host" | "--host" | "-hosts" | "-f" | "--hostfile" | "-hostfile" | "-machinefile" => {
                return Err(format!(
                    "'{text}': this mpiexec starts ranks on this node only; across nodes, run the program under MPICH's mpiexec (hydra) or Slurm's srun --mpi=pmi2"
                ))
            }
            "--" => {
                out.push(a);
                out.extend(it.next());
                later |= program_args(&mut it, &mut out);
            }
            _ => {
                out.push(a);
                // rbtlrun's own options with a value: the value goes along.
                if !text.contains('=') && cli::takes_value(&text) {
                    out.extend(it.next());
                }
            }
        }
    }
    Ok(out)
}

/// The folder of `libmpi_abi.so` beside this program, if it is there.
fn library_folder() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?.canonicalize().ok()?;
    let here = exe.parent()?;
    [here.to_path_buf(), here.join("../lib")]
        .into_iter()
        .find(|d| d.join("libmpi_abi.so").is_file())
        .and_then(|d| d.canonicalize().ok())
}

fn main() -> ExitCode {
    let mut args = match translate(std::env::args_os().skip(1).collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mpiexec: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(dir) = library_folder() {
        let path = match std::env::var("LD_LIBRARY_PATH") {
            Ok(old) if !old.is_empty() => format!("{}:{old}", dir.display()),
            _ => dir.display().to_string(),
        };
        args.splice(
            0..0,
            ["--env".into(), format!("LD_LIBRARY_PATH={path}").into()],
        );
    }
    let banner = "mpiexec: the MPI launcher of rbtl's libmpi_abi, over rbtlrun\n\nUsage: mpiexec [-genv NAME VALUE]... [-x NAME=VALUE]... -n N [-env NAME VALUE]... PROGRAM [ARGS...] [: -n N [-env NAME VALUE]... PROGRAM [ARGS...]]...\n       mpiexec [OPTIONS] -configfile FILE   (or --app FILE: a program with its options a line)\n\nEvery other option is rbtlrun's:\n\n";
    let version = concat!("mpiexec (rbtl) ", env!("CARGO_PKG_VERSION"));
    cli::main("mpiexec", banner, version, args)
}

#[cfg(test)]
mod tests {
    use super::translate;

    fn t(args: &[&str]) -> Result<Vec<String>, String> {
        translate(args.iter().map(Into::into).collect())
            .map(|v| v.into_iter().map(|a| a.into_string().unwrap()).collect())
    }

    #[test]
    fn mpich_and_open_mpi_spellings_become_rbtlrun_options() {
        assert_eq!(
            t(&[
                "-n",
                "2",
                "-genv",
                "A",
                "1",
                "-x",
                "B=2",
                "--bind-to",
                "core",
                "prog",
                "-genv"
            ])
            .unwrap(),
            [
                "-n",
                "2",
                "--env",
                "A=1",
                "--env",
                "B=2",
                "--bind-to",
                "core",
                "prog",
                "-genv"
            ]
        );
        assert_eq!(
            t(&["-np=3", "--", "-prog"]).unwrap(),
            ["-np=3", "--", "-prog"]
        );
        assert_eq!(
            t(&["-usize", "8", "prog"]).unwrap(),
            ["--universe-size", "8", "prog"]
        );
        assert_eq!(
            t(&["-l", "-bind-to", "core", "p"]).unwrap(),
            ["--tag-output", "--bind-to", "core", "p"]
        );
        assert_eq!(
            t(&["-wdir", "/a", "p", ":", "-wd", "/b", "q"]).unwrap(),
            ["--wdir", "/a", "p", ":", "--wdir", "/b", "q"]
        );
        assert!(t(&["-genv", "A"]).unwrap_err().contains("NAME and VALUE"));
        // Programs joined by ':' (MPMD), each with its own options.
        assert_eq!(
            t(&["-n", "1", "-genv", "A", "1", "a", "-x", ":", "-np", "2", "-env", "B", "2", "b"])
                .unwrap(),
            [
                "-n",
                "1",
                "--env",
                "A=1",
                "a",
                "-x",
                ":",
                "-np",
                "2",
                "--program-env",
                "B=2",
                "b"
            ]
        );
        // hydra's -env is its program's, the first's too; -x before the first, every rank's.
        assert_eq!(
            t(&["-env", "A", "1", "-x", "B=2", "a", ":", "-x", "C=3", "b"]).unwrap(),
            [
                "--program-env",
                "A=1",
                "--env",
                "B=2",
                "a",
                ":",
                "--env",
                "C=3",
                "b"
            ]
        );
        assert!(t(&["a", ":", "-genv", "A", "1", "b"])
            .unwrap_err()
            .contains("every rank"));
        assert!(t(&["-hosts", "a,b", "prog"]).unwrap_err().contains("hydra"));
    }

    #[test]
    fn a_configuration_file_gives_one_program_a_line() {
        let dir = std::env::temp_dir().join(format!("rbtl-mpiexec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("job");
        let path = file.to_str().unwrap();
        std::fs::write(&file, "# two programs\n-n 1 -env A 1 a x\n\n  -np 2 b -y\n").unwrap();
        assert_eq!(
            t(&["-genv", "G", "0", "-configfile", path]).unwrap(),
            [
                "--env",
                "G=0",
                "-n",
                "1",
                "--program-env",
                "A=1",
                "a",
                "x",
                ":",
                "-np",
                "2",
                "b",
                "-y"
            ]
        );
        assert_eq!(t(&["--app", path]).unwrap()[..2], ["-n", "1"]);
        // After a program, its own argument.
        assert_eq!(
            t(&["p", "-configfile", path]).unwrap(),
            ["p", "-configfile", path]
        );
        assert!(t(&["-configfile", path, "p"])
            .unwrap_err()
            .contains("nothing may follow"));
        assert!(t(&["-configfile"]).unwrap_err().contains("needs a FILE"));
        assert!(t(&["a", ":", "-configfile", path])
            .unwrap_err()
            .contains("before any program"));
        std::fs::write(&file, "-configfile other\n").unwrap();
        assert!(t(&["-configfile", path])
            .unwrap_err()
            .contains("before any program"));
        std::fs::write(&file, "# nothing\n\n").unwrap();
        assert!(t(&["-configfile", path])
            .unwrap_err()
            .contains("names no program"));
        let missing = dir.join("missing");
        assert!(t(&["--app", missing.to_str().unwrap()])
            .unwrap_err()
            .contains("cannot read"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
