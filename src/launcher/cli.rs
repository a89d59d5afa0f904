//! The command line of `rbtlrun`.

use super::{App, Error, LaunchOptions};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// `rbtlrun --help`.
pub const HELP: &str = "\
rbtlrun: start the local ranks of a job and serve them PMI-1

Usage: rbtlrun [OPTIONS] PROGRAM [ARGS...]
       rbtlrun [OPTIONS] PROGRAM [ARGS...] : [-n N] [--env NAME=VALUE]...
               [--wdir DIR] PROGRAM [ARGS...] [: ...]

Starts N copies (ranks) of PROGRAM on this machine. Each rank gets a connection
to the launcher's PMI-1 server (PMI_FD, with PMI_RANK and PMI_SIZE), the same
wire protocol as MPICH's mpiexec, so rbtl::pmi::job() and other PMI-1 clients
find their rank, job size and the job-wide key-value store (the modex). A
PROGRAM named without '/' is looked for in PATH, then in the working folder.

Several programs make one job when ':' separates them (MPMD, as MPICH's mpiexec
and Open MPI's mpirun take them): each has its own -n (default 1), --env (set in
its ranks only, after the job's) and --wdir (instead of the job's); the other
options apply to the whole job and come before the first program, where
--program-env sets a variable in the first program's ranks only. A program's
ranks follow those of the programs before it, and PMI's get_appnum answers its
index from 0 (MPI_APPNUM).

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
  --program-env NAME=VALUE
                       set one in this program's ranks only (as --env after
                       ':'; before the first program, in that program's ranks,
                       as hydra's -env there; repeatable)
  --wdir DIR           the folder the ranks run in, and those they spawn unless
                       the spawn's info names one (default: rbtlrun's)
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
        /// Its programs, in order: one, unless `:` joins several (their ranks sum to
        /// `options.ranks`).
        apps: Vec<App>,
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
        Ok(Invocation::Run { apps, mut options }) => {
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
            match super::launch_apps(&apps, &options) {
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
            | "--program-env"
            | "--wdir"
            | "--timeout"
    )
}

/// The options a program after a `:` may take (the rest apply to the whole job).
fn program_option(name: &str) -> bool {
    matches!(
        name,
        "-n" | "-np" | "--np" | "--ranks" | "--env" | "--program-env" | "--wdir" | "--"
    )
}

/// Parses `rbtlrun`'s arguments (without the program name).
pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, Error> {
    let usage = |msg: String| Error::Usage(format!("{msg}; run 'rbtlrun --help' for the options"));
    let mut options = LaunchOptions::default();
    let mut args = args.into_iter();
    let mut apps: Vec<App> = Vec::new();
    loop {
        let first = apps.is_empty();
        // The program's variables; before the first program, `--env`'s go to
        // `job_env`, every rank's.
        let (mut ranks, mut env, mut job_env, mut wdir) = (1u32, Vec::new(), Vec::new(), None);
        let program = loop {
            let Some(arg) = args.next() else {
                return Err(usage(match first {
                    true => "no PROGRAM given".into(),
                    false => "no PROGRAM after ':'".into(),
                }));
            };
            if arg == ":" {
                return Err(usage("':' with no PROGRAM before it".into()));
            }
            let Some(text) = arg.to_str().filter(|t| t.starts_with('-') && *t != "-") else {
                break arg;
            };
            let (name, inline) = match text.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
                _ => (text.to_string(), None),
            };
            let takes_value = takes_value(&name);
            if inline.is_some() && !takes_value {
                return Err(usage(format!("option '{name}' takes no value")));
            }
            if !first && !program_option(&name) {
                return Err(usage(format!(
                    "option '{name}' after ':' (a program there takes -n, --env, --program-env and --wdir; \
                     the rest apply to the whole job: give them before the first program)"
                )));
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
                    break args
                        .next()
                        .ok_or_else(|| usage("no PROGRAM after '--'".into()))?;
                }
                "-n" | "-np" | "--np" | "--ranks" => {
                    let v = value()?;
                    ranks = v.parse().ok().filter(|&n: &u32| n > 0).ok_or_else(|| {
                        usage(format!(
                            "'{name} {v}': want a whole number of ranks, 1 or more"
                        ))
                    })?;
                }
                "--env" | "--program-env" => {
                    let v = value()?;
                    let pair = match v.split_once('=') {
                        Some((k, val)) if !k.is_empty() => (k.to_string(), val.to_string()),
                        _ => return Err(usage(format!("'{name} {v}': want NAME=VALUE"))),
                    };
                    match first && name == "--env" {
                        true => job_env.push(pair),
                        false => env.push(pair),
                    }
                }
                "--wdir" => wdir = Some(PathBuf::from(value()?)),
                _ => {
                    let v = if takes_value { Some(value()?) } else { None };
                    job_option(&mut options, &name, v.unwrap_or_default()).map_err(usage)?
                }
            }
        };
        // The job's own variables and folder are those given before its first
        // program.
        if first {
            options.env = job_env;
            options.wdir = wdir.take();
        }
        let mut program_args = Vec::new();
        let mut more = false;
        for a in args.by_ref() {
            if a == ":" {
                more = true;
                break;
            }
            program_args.push(a);
        }
        apps.push(App {
            program,
            args: program_args,
            ranks,
            env,
            wdir,
        });
        if !more {
            break;
        }
    }
    options.ranks = apps
        .iter()
        .try_fold(0u32, |n, a| n.checked_add(a.ranks))
        .ok_or_else(|| usage("the programs' ranks number more than 2^32".into()))?;
    Ok(Invocation::Run { apps, options })
}

/// Set option `name` of the whole job in `options` to `v` (empty for an option that
/// takes no value); the error's message (an unknown option, a bad value).
fn job_option(options: &mut LaunchOptions, name: &str, v: String) -> Result<(), String> {
    match name {
        "--universe-size" => {
            let n = v.parse().ok().filter(|&n: &u32| n > 0);
            options.universe_size = Some(n.ok_or_else(|| {
                format!("'--universe-size {v}': want a whole number of processes, 1 or more")
            })?);
        }
        "--bind-to" => options.bind = v.parse()?,
        "--tag-output" => options.tag_output = true,
        "--grace" => {
            options.grace = v
                .parse::<f64>()
                .ok()
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .ok_or_else(|| format!("'--grace {v}': want a number of seconds, 0 or more"))?;
        }
        "--timeout" => {
            let t = seconds(&v);
            options.timeout = Some(t.ok_or_else(|| {
                format!("'--timeout {v}': want a number of seconds, more than 0")
            })?);
        }
        _ => return Err(format!("unknown option '{name}'")),
    }
    Ok(())
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

    /// The one program of a run, and its options.
    fn single(args: &[&str]) -> (App, LaunchOptions) {
        let Invocation::Run { mut apps, options } = parse(args).unwrap() else {
            panic!("not a run");
        };
        assert_eq!(apps.len(), 1, "{apps:?}");
        (apps.remove(0), options)
    }

    #[test]
    fn parses_a_full_command_line() {
        let (app, options) = single(&[
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
        ]);
        assert_eq!(app.program, "prog");
        assert_eq!(app.args, ["-n", "x"]);
        assert_eq!((app.ranks, options.ranks), (4, 4));
        assert!(app.env.is_empty());
        assert_eq!(options.bind, Bind::Core);
        assert!(options.tag_output);
        assert_eq!(options.grace, Duration::from_millis(500));
        assert_eq!(options.env, [("A".to_string(), "b=c".to_string())]);
        assert_eq!(options.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(options.universe_size, Some(16));
    }

    #[test]
    fn defaults_and_double_dash() {
        let (app, options) = single(&["--", "-weird"]);
        assert_eq!(app.program, "-weird");
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
    fn programs_joined_by_colons_make_one_job() {
        let Invocation::Run { apps, options } = parse(&[
            "--tag-output",
            "--env",
            "ALL=1",
            "--program-env",
            "FIRST=a",
            "--wdir",
            "/job",
            "-n",
            "2",
            "a",
            "x",
            ":",
            "b",
            ":",
            "-n",
            "3",
            "--env",
            "ONLY=c",
            "--program-env=ALSO=c",
            "--wdir=/own",
            "--",
            "-c",
            "y",
            "z",
        ])
        .unwrap() else {
            panic!("not a run");
        };
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let want = [
            ("a", &["x"][..], 2, env(&[("FIRST", "a")])),
            ("b", &[], 1, env(&[])),
            ("-c", &["y", "z"], 3, env(&[("ONLY", "c"), ("ALSO", "c")])),
        ];
        assert_eq!(apps.len(), want.len());
        for (app, (program, args, ranks, env)) in apps.iter().zip(want) {
            assert_eq!(
                (app.program.to_str().unwrap(), app.ranks, &app.env),
                (program, ranks, &env)
            );
            assert_eq!(app.args, args);
        }
        let wdirs: Vec<_> = apps.iter().map(|a| a.wdir.as_deref()).collect();
        assert_eq!(wdirs, [None, None, Some(std::path::Path::new("/own"))]);
        assert_eq!(options.wdir.as_deref(), Some(std::path::Path::new("/job")));
        assert_eq!(options.ranks, 6);
        assert!(options.tag_output);
        assert_eq!(options.env, env(&[("ALL", "1")]));
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
            (&["a", ":"][..], "no PROGRAM after ':'"),
            (&["-n", "2", ":", "b"][..], "':' with no PROGRAM before it"),
            (&["a", ":", ":", "b"][..], "':' with no PROGRAM before it"),
            (&["a", ":", "-n", "0", "b"][..], "-n 0"),
            (
                &["a", ":", "--bind-to", "core", "b"][..],
                "'--bind-to' after ':'",
            ),
            (&["a", ":", "--help"][..], "'--help' after ':'"),
            (&["-n", "4294967295", "a", ":", "b"][..], "more than 2^32"),
        ] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
            assert!(err.contains("--help"), "{err}");
        }
        assert!(matches!(parse(&["--help", "x"]), Ok(Invocation::Help)));
    }
}
