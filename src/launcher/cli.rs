//! The command line of `rbtlrun`.

use super::{Error, LaunchOptions};
use std::ffi::OsString;
use std::time::Duration;

/// `rbtlrun --help`.
pub const HELP: &str = "\
rbtlrun: start the local ranks of a job and serve them PMI-1

Usage: rbtlrun [OPTIONS] PROGRAM [ARGS...]

Starts N copies (ranks) of PROGRAM on this machine. Each rank gets a connection
to the launcher's PMI-1 server (PMI_FD, with PMI_RANK and PMI_SIZE), the same
wire protocol as MPICH's mpiexec, so rbtl::pmi::job() and other PMI-1 clients
find their rank, job size and the job-wide key-value store (the modex). A
PROGRAM named without '/' is looked for in PATH, then in the working folder.

Options:
  -n, -np, --ranks N   number of ranks to start (default 1)
  --universe-size N    the processes the job and those it spawns may number,
                       as PMI's get_universe_size answers (MPI_UNIVERSE_SIZE;
                       hydra's -usize); at least the ranks (default: the ranks)
  --bind-to none|core  none (default): ranks run where the OS puts them;
                       core: rank r is pinned to the r-th CPU (modulo their
                       number) of those this launcher may run on. These are
                       logical CPUs as the kernel numbers them; a hwloc
                       topology query would place ranks on distinct physical
                       cores, which this launcher does not do (it keeps free
                       of the libhwloc dependency)
  --tag-output         prefix every line of output with \"[rank] \"
  --grace SECS         when a rank fails, the time the others get to exit on
                       their own (to notice the dead peer and report it)
                       before SIGTERM; SIGKILL follows 2 s later (default 1)
  --env NAME=VALUE     set an environment variable in every rank (repeatable)
  --timeout SECS       end every rank once the job has run SECS seconds, and
                       exit 124 (default: the environment's MPIEXEC_TIMEOUT,
                       as MPICH's and Open MPI's launchers read it; else none)
  -h, --help           print this help
  -V, --version        print the version
  --                   end of options (PROGRAM may then start with '-')

Output: each rank's stdout and stderr are copied byte for byte to rbtlrun's
stdout and stderr, a whole line at a time, so that lines of up to 64 KiB are
never cut into each other. When they cannot be written (a closed pipe, a full
disk) the job ends: exit status 141 for a closed pipe, else 1. Rank 0 reads
rbtlrun's stdin, the others read nothing.

PMI: the key-value store takes keys of at most 64 bytes, values of at most
1024, and 1 MiB of keys and values per rank (each entry counting 64 bytes
more); a put beyond them is refused (rc=-1). A request that is not PMI-1, or
longer than a put at those maxima, closes that rank's PMI connection.

Exit status: 0 when every rank exits 0; otherwise the first failure in time:
a rank's non-zero exit code; 128+S for a rank killed by signal S; 1 for a rank
that used PMI and exited 0 without finalizing, or that exited 0 while others
wait for it in a PMI barrier; the code a rank passed to PMI abort (1 if it
passed 0), which ends the job at once, printing its message; 1 for a rank that
used PMI, closed its connection without finalizing and lives on. A program that
never uses PMI may exit 0 at any time. Interrupting rbtlrun (Ctrl-C, SIGTERM,
SIGHUP) ends every rank and exits with 128+signal; a job past its time limit
(--timeout, MPIEXEC_TIMEOUT) is ended alike and exits with 124.

Each rank runs in a process group of its own (except rank 0 when stdin is a
terminal, so that it can read it): ending the job ends what the ranks started,
and once every rank has ended, what they left running is ended too.

Afterwards rbtlrun removes shared-memory segments (/dev/shm/rbtl.*) left by
ranks that died.
";

/// What the command line asks for.
#[derive(Debug)]
pub enum Invocation {
    /// `--help`.
    Help,
    /// `--version`.
    Version,
    /// Run a job.
    Run {
        /// The program each rank runs.
        program: OsString,
        /// Its arguments.
        args: Vec<OsString>,
        /// How to run it.
        options: LaunchOptions,
    },
}

/// The front end of a launcher command (`rbtlrun`, or `mpiexec` over it): parse
/// `args`, print help or version, or launch the job; the exit code is the job's (the
/// worst of its ranks), 1 when it could not start, 2 for a bad command line.
/// `name` prefixes its messages (and replaces `rbtlrun` in their advice), `banner`
/// comes before the options in its help, `version` is what `--version` prints.
pub fn main(
    name: &str,
    banner: &str,
    version: &str,
    args: Vec<OsString>,
) -> std::process::ExitCode {
    use std::io::Write;
    use std::process::ExitCode;
    match parse_args(args) {
        // (A closed stdout, as `| head` leaves it, is no error of the user's.)
        Ok(Invocation::Help) => {
            let _ = write!(std::io::stdout(), "{banner}{HELP}");
            ExitCode::SUCCESS
        }
        Ok(Invocation::Version) => {
            let _ = writeln!(std::io::stdout(), "{version}");
            ExitCode::SUCCESS
        }
        Ok(Invocation::Run {
            program,
            args,
            mut options,
        }) => {
            if options.timeout.is_none() {
                let env = std::env::var("MPIEXEC_TIMEOUT").ok();
                match timeout_from_env(env.as_deref()) {
                    Ok(t) => options.timeout = t,
                    Err(e) => {
                        eprintln!("{name}: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            match super::launch(std::path::Path::new(&program), &args, &options) {
                Ok(summary) => ExitCode::from(summary.exit_byte()),
                Err(e) => {
                    eprintln!("{name}: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Err(e) => {
            let advice = format!("{name} --help");
            eprintln!(
                "{name}: {}",
                e.to_string().replace("rbtlrun --help", &advice)
            );
            ExitCode::from(2)
        }
    }
}

/// Whether option `name` takes a value (`-n 4`, `--bind-to=core`).
pub fn takes_value(name: &str) -> bool {
    matches!(
        name,
        "-n" | "-np"
            | "--np"
            | "--ranks"
            | "--universe-size"
            | "--bind-to"
            | "--grace"
            | "--env"
            | "--timeout"
    )
}

/// Parses `rbtlrun`'s arguments (without the program name).
pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, Error> {
    let usage = |msg: String| Error::Usage(format!("{msg}; run 'rbtlrun --help' for the options"));
    let mut options = LaunchOptions::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str().filter(|t| t.starts_with('-') && *t != "-") else {
            return Ok(Invocation::Run {
                program: arg,
                args: args.collect(),
                options,
            });
        };
        let (name, inline) = match text.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (text.to_string(), None),
        };
        let takes_value = takes_value(&name);
        if inline.is_some() && !takes_value {
            return Err(usage(format!("option '{name}' takes no value")));
        }
        let mut value = || -> Result<String, Error> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => args
                    .next()
                    .and_then(|v| v.into_string().ok())
                    .ok_or_else(|| usage(format!("option '{name}' needs a value"))),
            }
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Invocation::Help),
            "-V" | "--version" => return Ok(Invocation::Version),
            "--" => {
                let program = args
                    .next()
                    .ok_or_else(|| usage("no PROGRAM after '--'".into()))?;
                return Ok(Invocation::Run {
                    program,
                    args: args.collect(),
                    options,
                });
            }
            "-n" | "-np" | "--np" | "--ranks" => {
                let v = value()?;
                options.ranks = v.parse().ok().filter(|&n: &u32| n > 0).ok_or_else(|| {
                    usage(format!(
                        "'{name} {v}': want a whole number of ranks, 1 or more"
                    ))
                })?;
            }
            "--universe-size" => {
                let v = value()?;
                let n = v.parse().ok().filter(|&n: &u32| n > 0);
                options.universe_size = Some(n.ok_or_else(|| {
                    usage(format!(
                        "'--universe-size {v}': want a whole number of processes, 1 or more"
                    ))
                })?);
            }
            "--bind-to" => {
                let v = value()?;
                options.bind = v.parse().map_err(usage)?;
            }
            "--tag-output" => options.tag_output = true,
            "--grace" => {
                let v = value()?;
                options.grace = v
                    .parse::<f64>()
                    .ok()
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .ok_or_else(|| {
                        usage(format!(
                            "'--grace {v}': want a number of seconds, 0 or more"
                        ))
                    })?;
            }
            "--timeout" => {
                let v = value()?;
                options.timeout = Some(seconds(&v).ok_or_else(|| {
                    usage(format!(
                        "'--timeout {v}': want a number of seconds, more than 0"
                    ))
                })?);
            }
            "--env" => {
                let v = value()?;
                match v.split_once('=') {
                    Some((k, val)) if !k.is_empty() => {
                        options.env.push((k.to_string(), val.to_string()))
                    }
                    _ => return Err(usage(format!("'--env {v}': want NAME=VALUE"))),
                }
            }
            _ => return Err(usage(format!("unknown option '{name}'"))),
        }
    }
    Err(usage("no PROGRAM given".into()))
}

/// A time limit of `v` seconds, more than 0 (fractions allowed).
fn seconds(v: &str) -> Option<Duration> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|&s| s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

/// The time limit `MPIEXEC_TIMEOUT` gives (`value`, the variable's), for options
/// that set none; a value that is no number of seconds is an error.
pub fn timeout_from_env(value: Option<&str>) -> Result<Option<Duration>, Error> {
    match value {
        None => Ok(None),
        Some(v) => seconds(v).map(Some).ok_or_else(|| {
            Error::Usage(format!(
                "MPIEXEC_TIMEOUT={v}: want a number of seconds, more than 0"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::Bind;

    fn parse(args: &[&str]) -> Result<Invocation, Error> {
        parse_args(args.iter().map(OsString::from))
    }

    #[test]
    fn parses_a_full_command_line() {
        let Invocation::Run {
            program,
            args,
            options,
        } = parse(&[
            "-n",
            "4",
            "--bind-to=core",
            "--tag-output",
            "--grace",
            "0.5",
            "--env",
            "A=b=c",
            "--timeout=2.5",
            "--universe-size",
            "16",
            "prog",
            "-n",
            "x",
        ])
        .unwrap()
        else {
            panic!("not a run");
        };
        assert_eq!(program, "prog");
        assert_eq!(args, ["-n", "x"]);
        assert_eq!(options.ranks, 4);
        assert_eq!(options.bind, Bind::Core);
        assert!(options.tag_output);
        assert_eq!(options.grace, Duration::from_millis(500));
        assert_eq!(options.env, [("A".to_string(), "b=c".to_string())]);
        assert_eq!(options.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(options.universe_size, Some(16));
    }

    #[test]
    fn defaults_and_double_dash() {
        let Invocation::Run {
            program, options, ..
        } = parse(&["--", "-weird"]).unwrap()
        else {
            panic!("not a run");
        };
        assert_eq!(program, "-weird");
        assert_eq!(options.ranks, 1);
        assert_eq!(options.bind, Bind::None);
        assert!(!options.tag_output);
        assert_eq!(options.grace, Duration::from_secs(1));
        assert_eq!(options.timeout, None);
        // MPIEXEC_TIMEOUT, where the command line sets no limit.
        assert_eq!(timeout_from_env(None).unwrap(), None);
        assert_eq!(
            timeout_from_env(Some(" 10 ")).unwrap(),
            Some(Duration::from_secs(10))
        );
        for bad in ["0", "-3", "ten", ""] {
            let err = timeout_from_env(Some(bad)).unwrap_err().to_string();
            assert!(err.contains(&format!("MPIEXEC_TIMEOUT={bad}:")), "{err}");
        }
    }

    #[test]
    fn errors_name_the_problem() {
        for (args, needle) in [
            (&["--frobnicate", "prog"][..], "'--frobnicate'"),
            (&["-n", "0", "prog"][..], "-n 0"),
            (&["-n"][..], "needs a value"),
            (&["--bind-to", "socket", "prog"][..], "socket"),
            (&["--grace", "-1", "prog"][..], "--grace -1"),
            (&["--timeout", "0", "prog"][..], "--timeout 0"),
            (&["--timeout=never", "prog"][..], "--timeout never"),
            (&["--universe-size", "0", "prog"][..], "--universe-size 0"),
            (&["--tag-output=yes", "prog"][..], "takes no value"),
            (&[][..], "no PROGRAM"),
        ] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
            assert!(err.contains("--help"), "{err}");
        }
        assert!(matches!(parse(&["--help", "x"]), Ok(Invocation::Help)));
    }
}
