//! How to run a job: the number of ranks, the universe's size, their binding,
//! output tagging, the grace period after a failure, the time limit, their
//! environment and working folder; and the programs of a job of several (MPMD).

use std::ffi::OsString;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// Where ranks may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bind {
    /// Wherever the OS puts them.
    #[default]
    None,
    /// Rank r pinned (with `sched_setaffinity`, before it starts) to the
    /// hardware threads of the `r % n`-th of the n physical cores the launcher may
    /// run on, as hwloc's topology lists them (Open MPI: `--bind-to core`). Where
    /// hwloc cannot read the topology, to the `r % n`-th allowed logical CPU.
    Core,
}

impl FromStr for Bind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Bind::None),
            "core" => Ok(Bind::Core),
            other => Err(format!("'--bind-to {other}': want none or core")),
        }
    }
}

/// How to run a job.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// Number of ranks (default 1).
    pub ranks: u32,
    /// How many processes the job and those it spawns may number, as PMI's
    /// `get_universe_size` tells them (MPI's `MPI_UNIVERSE_SIZE`; default: the
    /// number of ranks).
    pub universe_size: Option<u32>,
    /// Where ranks may run (default [`Bind::None`]).
    pub bind: Bind,
    /// Prefix each forwarded line with `[rank] ` (default off).
    pub tag_output: bool,
    /// When a rank fails, how long the others get to exit on their own before SIGTERM
    /// (default 1 s).
    pub grace: Duration,
    /// Environment variables set in every rank, on top of the launcher's own.
    pub env: Vec<(String, String)>,
    /// The folder every program runs in, unless its own says otherwise, and the
    /// processes ranks spawn, unless the spawn's info does (`--wdir`; the launcher's
    /// without).
    pub wdir: Option<PathBuf>,
    /// The longest the job may run: past it the launcher ends every rank (default
    /// none; `--timeout`, or `MPIEXEC_TIMEOUT` as MPICH's and Open MPI's launchers
    /// read it).
    pub timeout: Option<Duration>,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        Self {
            ranks: 1,
            universe_size: None,
            bind: Bind::None,
            tag_output: false,
            grace: Duration::from_secs(1),
            env: Vec::new(),
            wdir: None,
            timeout: None,
        }
    }
}

/// One program of a job of several (`rbtlrun -n 2 a : -n 3 b`, MPI 4.1 11.5.2): its
/// ranks follow those of the programs before it, and PMI's `get_appnum` answers its
/// index from 0 (`MPI_APPNUM`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// The program (looked for as a single program's is).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Its ranks, 1 or more.
    pub ranks: u32,
    /// Variables set in its ranks only, after the job's ([`LaunchOptions::env`]).
    pub env: Vec<(String, String)>,
    /// The folder its ranks run in, where it has one of its own (else the job's,
    /// [`LaunchOptions::wdir`]).
    pub wdir: Option<PathBuf>,
}
