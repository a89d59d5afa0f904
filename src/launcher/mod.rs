//! Starting the local ranks of a job, with a PMI-1 server for them: the library
//! behind the `rbtlrun` binary, for programs that launch themselves.
//!
//! [`launch`] starts `ranks` copies of a program. Each gets one end of a socketpair
//! as its PMI connection (`PMI_FD`, `PMI_RANK`, `PMI_SIZE`: what
//! [`crate::pmi::Client::from_env`] reads) and a thread of the launcher serves it
//! the PMI-1 commands: `init`, `get_maxes`, `get_appnum`, `get_my_kvsname`,
//! `get_universe_size`, `put`, `get`, `barrier_in`, `finalize` and `abort`, over one
//! key-value space for the job.
//!
//! Each rank's stdout and stderr are copied to the launcher's line by line. When a
//! rank fails (exits non-zero or dies of a signal) the others get
//! [`LaunchOptions::grace`] to exit on their own, then SIGTERM, then SIGKILL two
//! seconds later; a rank's PMI `abort`, or SIGINT/SIGTERM/SIGHUP to the launcher, ends
//! them at once (SIGTERM, then SIGKILL). Once all have ended, shared-memory segments
//! left behind by dead ranks are removed ([`crate::mpool::cleanup_stale`], plus the
//! directory `RBTL_SHM_DIR` names in [`LaunchOptions::env`], if it does).

pub mod cli;
mod cores;
mod error;
mod exit_status;
mod job;
mod options;
mod output;
mod server;
mod signals;
mod spawn;

pub use cli::Invocation;
pub use error::Error;
pub use exit_status::{Abort, ExitStatusSummary, RankExit};
pub use job::launch;
pub use options::{Bind, LaunchOptions};
