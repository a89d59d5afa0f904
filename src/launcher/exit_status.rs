//! How each rank ended, and the job as a whole.

use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;

/// How one rank ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankExit {
    /// It exited with this code.
    Exited(i32),
    /// It was killed by this signal.
    Signaled(i32),
}

impl RankExit {
    /// The shell's view: the exit code, or 128 + the signal.
    pub fn code(self) -> i32 {
        match self {
            RankExit::Exited(code) => code,
            RankExit::Signaled(signal) => 128 + signal,
        }
    }

    /// Whether it exited with code 0.
    pub fn success(self) -> bool {
        self == RankExit::Exited(0)
    }

    pub(super) fn from_status(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => RankExit::Exited(code),
            (None, Some(signal)) => RankExit::Signaled(signal),
            (None, None) => RankExit::Exited(-1),
        }
    }
}

impl fmt::Display for RankExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RankExit::Exited(code) => write!(f, "exited with code {code}"),
            RankExit::Signaled(signal) => write!(f, "was killed by signal {signal}"),
        }
    }
}

/// A rank's PMI `abort`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abort {
    /// The rank that aborted.
    pub rank: u32,
    /// The exit code it asked for.
    pub code: i32,
    /// Its message.
    pub message: String,
}

/// How a job ended.
#[derive(Debug, Clone)]
pub struct ExitStatusSummary {
    /// How each rank ended, by rank.
    pub ranks: Vec<RankExit>,
    /// The job's exit code: 0 if every rank exited 0; otherwise the first failure in
    /// time: a rank's non-zero exit code, 128 + S for a rank killed by signal S, the
    /// code of a PMI `abort`, or 128 + S when the launcher got signal S.
    pub code: i32,
    /// The first PMI `abort`, if a rank sent one.
    pub abort: Option<Abort>,
    /// The signal that interrupted the launcher, if one did.
    pub interrupted: Option<i32>,
    /// Shared-memory segments of dead processes removed after the job.
    pub removed_segments: Vec<PathBuf>,
}

impl ExitStatusSummary {
    /// Whether the job succeeded (`code == 0`).
    pub fn success(&self) -> bool {
        self.code == 0
    }
}
