//! Starting the local ranks of a job, with a PMI-1 server for them: the library
//! behind the `rbtlrun` binary, for programs that launch themselves.
//!
//! [`launch`] starts `ranks` copies of a program ([`launch_apps`], of several programs
//! one after the other: MPMD), each in a process group of its own:
//! every process first, then the threads that serve them, so that start-up time grows
//! linearly with the ranks (a signal, or a started rank's failure, stops the start).
//! A job the open-file limit, the user's process limit or the kernel's pid space
//! cannot hold (about 4 descriptors and 5 tasks per rank) is refused before anything
//! starts ([`Error::Limit`]); soft limits below what it needs are raised up to the
//! hard ones.
//! Each gets one end of a socketpair as its PMI connection (`PMI_FD`, `PMI_RANK`,
//! `PMI_SIZE`: what [`crate::pmi::Client::from_env`] reads) and a thread of the
//! launcher serves it the PMI-1 commands: `init`, `get_maxes`, `get_appnum`,
//! `get_my_kvsname`, `get_universe_size`, `put`, `get`, `barrier_in`, `finalize` and
//! `abort`, over one key-value space for the job.
//!
//! The server holds clients to what it announces: keys of at most 64 bytes, values of
//! at most 1024, and each rank to [`STORE_PER_RANK`] bytes of keys and values (each
//! entry counting [`ENTRY_COST`] more); a `put` beyond them gets `rc=-1` and a `msg`
//! saying which bound. A request line longer than a `put` at those maxima can be, or
//! one that is not PMI-1, closes that rank's connection; an unknown command gets an
//! error reply. When a rank closes its connection, the server closes its side.
//!
//! Each rank's stdout and stderr are copied to the launcher's byte for byte, a whole
//! line at a time. The job fails, and the first failure in time is the one reported
//! ([`Failure`]), when a rank exits non-zero or dies of a signal; when a rank that
//! used PMI exits with code 0 without `finalize`; when ranks wait in a PMI barrier
//! that a rank that has exited can never enter; on a rank's PMI `abort` (even with
//! exit code 0); when a rank that used PMI closes its connection without
//! `finalize` and lives on; on SIGINT, SIGTERM or SIGHUP to the launcher; or when the
//! ranks' output cannot be written (a closed pipe, a full disk). A program that never speaks PMI may exit 0
//! whenever it likes. After a failure the others get [`LaunchOptions::grace`] to exit
//! on their own (those in a PMI barrier see their connection closed), then SIGTERM,
//! then SIGKILL two seconds later; an abort or a signal ends them at once (SIGTERM,
//! then SIGKILL). Signals go to each rank's process group, so they reach what the
//! ranks started; once every rank has ended, whatever is left in their groups gets
//! SIGTERM, then SIGKILL once output has drained. Then shared-memory segments left
//! behind by dead ranks are removed ([`crate::mpool::cleanup_stale`], plus the
//! directory `RBTL_SHM_DIR` names in [`LaunchOptions::env`], if it does).

/// `eprintln!` for the launcher's own messages, which never panics: its stderr may
/// be a closed pipe or a full disk (then the job ends for that, see `output`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod cli;
mod cores;
mod error;
mod event;
mod exit_status;
mod job;
mod kvs;
mod options;
mod output;
mod rank_process;
mod server;
#[cfg(test)]
mod server_fuzz;
mod signals;
mod spawn;
mod startup;
mod universe;
mod verdict;

pub use cli::Invocation;
pub use error::Error;
pub use exit_status::{Abort, ExitStatusSummary, Failure, RankExit};
pub use job::{launch, launch_apps};
pub use kvs::{ENTRY_COST, STORE_PER_RANK};
pub use options::{App, Bind, LaunchOptions};
