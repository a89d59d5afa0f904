//! What can go wrong talking PMI.

use std::io;
use std::time::Duration;

/// What went wrong talking PMI.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A PMI environment variable does not hold what it should.
    #[error(
        "environment variable {name}={value:?} is not usable: {why}; \
         start the program with a PMI-1 launcher (rbtlrun, mpiexec.mpich) or unset it"
    )]
    BadEnv {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// `PMI_PORT` names a server that cannot be reached.
    #[error(
        "cannot connect to the PMI server at {addr}: {source}; \
         check that the launcher that set PMI_PORT is still running"
    )]
    Connect {
        /// The `host:port` from `PMI_PORT`.
        addr: String,
        /// Why the connection failed.
        #[source]
        source: io::Error,
    },
    /// Reading from or writing to the PMI connection failed.
    #[error("PMI I/O failed during {request}: {source}; the launcher has probably ended the job")]
    Io {
        /// The request under way.
        request: String,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// The server did not reply in time.
    #[error(
        "the PMI server did not answer {request} within {:.0} s; the launcher may be \
         stopped, overloaded or not a PMI-1 server (set {variable} to wait longer, \
         0 for no limit)",
        waited.as_secs_f64()
    )]
    Timeout {
        /// The request under way.
        request: String,
        /// How long the client waited.
        waited: Duration,
        /// The environment variable that sets this limit.
        variable: &'static str,
    },
    /// The server closed the connection instead of replying.
    #[error(
        "the PMI server closed the connection during {request}; \
         the launcher has probably ended the job (look at its messages)"
    )]
    Closed {
        /// The request under way.
        request: String,
    },
    /// The server replied with something other than the expected command.
    #[error(
        "unexpected reply to {request} from the PMI server: {reply:?}; \
         the launcher does not speak PMI-1 as this client does"
    )]
    Protocol {
        /// The request under way.
        request: String,
        /// What came back.
        reply: String,
    },
    /// The server answered with a non-zero `rc`.
    #[error("the PMI server refused {request}: rc={rc} ({msg})")]
    Refused {
        /// The request.
        request: String,
        /// Its return code.
        rc: i64,
        /// The server's `msg`, if any.
        msg: String,
    },
    /// The launcher does not say it can do what was to be asked of it: not asked.
    #[error("{what} is not asked of this launcher: {why}")]
    NotOffered {
        /// What was not asked.
        what: &'static str,
        /// Why not.
        why: String,
    },
    /// A key or value cannot be carried by PMI-1 as it is.
    #[error("the {what} {value:?} cannot be sent over PMI-1: {why}")]
    InvalidToken {
        /// "key" or "value".
        what: &'static str,
        /// The offending text (cut short when long).
        value: String,
        /// Why, and what to do instead.
        why: String,
    },
    /// The launcher's `PMI_process_mapping` is not in MPICH's format.
    #[error(
        "the launcher's PMI_process_mapping {value:?} cannot be read: {why}; \
         it should be (vector,(start,nodes,ranks),...) as hydra and Slurm give it"
    )]
    ProcessMapping {
        /// The text (cut short when long).
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// The process already made its PMI client.
    #[error(
        "this process already created its PMI client (the PMI connection can have only \
         one owner); pass the existing Client or PmiModex around instead"
    )]
    AlreadyClaimed,
}
