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
    #[error(
        "cannot create the PMI socket of rank {rank}: {source}; {}",
        hint(source)
    )]
    Socket {
        /// The rank.
        rank: u32,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A rank's process could not be started.
    #[error("cannot start rank {rank} ({}): {source}; {}", program.display(), hint(source))]
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
    /// The job needs more of a resource than this process may have.
    #[error(
        "-n {ranks} needs about {need} {what}, and this process may have {limit}: raise the limit or start fewer ranks"
    )]
    Limit {
        /// The ranks asked for.
        ranks: u64,
        /// What they need.
        need: u64,
        /// Of what, and the limit's name.
        what: &'static str,
        /// What the limit allows.
        limit: u64,
    },
    /// A thread of the launcher could not be started.
    #[error("cannot start a launcher thread: {}; {}", .0, hint(.0))]
    Thread(#[source] io::Error),
}

/// What to do about `e`, for the messages above.
fn hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EMFILE) => {
            "the launcher ran out of file descriptors (it keeps about 4 per rank): \
             raise the open-file limit (ulimit -n) or start fewer ranks"
        }
        Some(libc::ENFILE) => {
            "the system ran out of file descriptors: start fewer ranks or close other \
             programs"
        }
        Some(libc::EAGAIN) => {
            "the process or thread limit is reached: raise it (ulimit -u) or start fewer \
             ranks"
        }
        Some(libc::ENOMEM) => "not enough memory: start fewer ranks",
        Some(libc::ENOENT) => {
            "check the program's path (a name without '/' is looked up in PATH, then in \
             the working folder)"
        }
        Some(libc::EACCES | libc::EPERM) => {
            "check the program's permissions: it must be an executable file"
        }
        Some(libc::ENOEXEC) => "the file is not a program this system can run",
        _ => "check the program's path and permissions",
    }
}
