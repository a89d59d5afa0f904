//! How each rank ended, and the job as a whole.

use std::fmt;
use std::path::PathBuf;

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

/// What made a job fail: the first failure in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A rank exited with a non-zero code or was killed by a signal.
    Rank {
        /// The rank.
        rank: u32,
        /// How it ended.
        exit: RankExit,
    },
    /// A rank that used PMI (or whose PMI connection the launcher closed for a bad
    /// request) exited with code 0 without PMI `finalize`: a crash in disguise, or a
    /// program that forgot to finalize; its peers may wait for it.
    Unfinalized {
        /// The rank.
        rank: u32,
        /// Why the launcher had closed its PMI connection, if it had (a malformed
        /// or over-long request).
        broken: Option<String>,
    },
    /// Ranks wait in a PMI barrier that can never complete, because a rank that
    /// exited with code 0 will never enter it.
    Stranded {
        /// The rank that exited.
        rank: u32,
        /// Whether that rank had finalized PMI (else it never used PMI at all).
        finalized: bool,
        /// The ranks waiting in the barrier.
        waiting: Vec<u32>,
    },
    /// A rank sent PMI `abort`.
    Aborted(Abort),
    /// A rank that used PMI closed its connection (or the launcher closed it, for a
    /// bad request) without `finalize`, and lived on: its peers can no longer meet
    /// it in a PMI barrier.
    PmiClosed {
        /// The rank.
        rank: u32,
        /// Why the launcher had closed the connection, if it had.
        broken: Option<String>,
    },
    /// The launcher got this signal.
    Interrupted(i32),
    /// The job ran past its time limit (`--timeout`, `MPIEXEC_TIMEOUT`).
    TimedOut(std::time::Duration),
    /// The launcher could not write the ranks' output to its own `stream` (stdout or
    /// stderr): a closed pipe (`broken_pipe`), a full disk.
    OutputLost {
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// What writing it said.
        error: String,
        /// Whether the reader had closed the pipe.
        broken_pipe: bool,
    },
}

/// The job's exit code past its time limit (`timeout(1)`'s).
pub const TIMED_OUT: i32 = 124;

impl Failure {
    /// The job's exit code for this failure: the rank's code or 128 + its signal; 1
    /// for a rank that did not finalize, that strands a barrier or that closed its
    /// PMI connection and lives on; the abort's code,
    /// or 1 for an abort with code 0 (an aborted job never succeeds); 128 + the
    /// launcher's signal; 124 past the time limit (as `timeout(1)`); for lost output
    /// 128 + SIGPIPE when the pipe was closed (what a shell reports of a writer its
    /// pipe ended), else 1.
    pub fn code(&self) -> i32 {
        match self {
            Failure::Rank { exit, .. } => exit.code(),
            Failure::Unfinalized { .. } | Failure::Stranded { .. } | Failure::PmiClosed { .. } => 1,
            Failure::Aborted(abort) if abort.code == 0 => 1,
            Failure::Aborted(abort) => abort.code,
            Failure::Interrupted(signal) => 128 + signal,
            Failure::TimedOut(_) => TIMED_OUT,
            Failure::OutputLost {
                broken_pipe: true, ..
            } => 128 + libc::SIGPIPE,
            Failure::OutputLost { .. } => 1,
        }
    }
}

/// `r0, r1 and r2`, for messages.
fn list(ranks: &[u32]) -> String {
    let names: Vec<String> = ranks.iter().map(u32::to_string).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Rank { rank, exit } => write!(f, "rank {rank} {exit}"),
            Failure::Unfinalized { rank, broken } => {
                write!(f, "rank {rank} exited with code 0 without finalizing PMI")?;
                if let Some(why) = broken {
                    write!(f, ", after the launcher closed its PMI connection ({why})")?;
                }
                Ok(())
            }
            Failure::Stranded {
                rank,
                finalized,
                waiting,
            } => {
                let (verb, s) = if waiting.len() == 1 {
                    ("waits", "")
                } else {
                    ("wait", "s")
                };
                if *finalized {
                    write!(f, "rank {rank} finalized PMI and exited with code 0")?;
                } else {
                    write!(
                        f,
                        "rank {rank} exited with code 0 without finalizing PMI (it never \
                         initialized it)"
                    )?;
                }
                write!(
                    f,
                    ", so the PMI barrier that rank{s} {} {verb} in can never complete",
                    list(waiting)
                )
            }
            Failure::Aborted(abort) => {
                write!(
                    f,
                    "rank {} aborted the job with exit code {}",
                    abort.rank, abort.code
                )?;
                if abort.code == 0 {
                    write!(f, " (an aborted job exits with 1)")?;
                }
                write!(f, ": {}", abort.message)
            }
            Failure::PmiClosed { rank, broken } => {
                match broken {
                    Some(why) => write!(
                        f,
                        "the launcher closed rank {rank}'s PMI connection ({why})"
                    )?,
                    None => write!(
                        f,
                        "rank {rank} closed its PMI connection without finalizing"
                    )?,
                }
                write!(
                    f,
                    " and the rank lives on: its peers can no longer meet it in PMI"
                )
            }
            Failure::Interrupted(signal) => write!(f, "got signal {signal}: ending the job"),
            Failure::TimedOut(limit) => write!(
                f,
                "the job ran past its time limit of {} s (--timeout, MPIEXEC_TIMEOUT): ending it",
                limit.as_secs_f64()
            ),
            Failure::OutputLost { stream, error, .. } => {
                write!(
                    f,
                    "could not write the ranks' output to its {stream} ({error}): ending the job"
                )
            }
        }
    }
}

/// How a job ended.
#[derive(Debug, Clone)]
pub struct ExitStatusSummary {
    /// How each rank ended, by rank.
    pub ranks: Vec<RankExit>,
    /// The job's exit code: 0 if every rank exited 0 and no other failure happened;
    /// otherwise [`Failure::code`] of the first failure in time.
    pub code: i32,
    /// The first failure in time, if any.
    pub failure: Option<Failure>,
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

    /// The job's code as a process exit status: its low byte, except that a failing
    /// code whose low byte is 0 (256, ...) becomes 1 rather than success.
    pub fn exit_byte(&self) -> u8 {
        match (self.code & 0xff) as u8 {
            0 if self.code != 0 => 1,
            byte => byte,
        }
    }
}
