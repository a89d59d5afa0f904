//! What can go wrong launching a job.

use std::io;
use std::path::PathBuf;

/// What went wrong launching a job.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line of `rbtlrun` is wrong.
    #[error("{0}")]
    Usage(String),
    /// A job of zero ranks.
    #[error("a job needs at least one rank: ask for 1 or more")]
    NoRanks,
    /// The PMI socketpair for a rank could not be made.
    #[error("cannot create the PMI socket of rank {rank}: {source}; too many open files?")]
    Socket {
        /// The rank.
        rank: u32,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A rank's process could not be started.
    #[error(
        "cannot start rank {rank} ({program}): {source}; check the program's path and permissions"
    )]
    Spawn {
        /// The rank.
        rank: u32,
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The CPUs this launcher may use could not be read, for `--bind-to core`.
    #[error("cannot read this process's CPU affinity for --bind-to core: {0}; use --bind-to none")]
    Affinity(#[source] io::Error),
    /// A thread of the launcher could not be started.
    #[error("cannot start a launcher thread: {0}")]
    Thread(#[source] io::Error),
}
