//! What can make a benchmark run fail, once its command line is accepted.

use std::path::PathBuf;

/// Why `osu` failed.
#[derive(Debug, thiserror::Error)]
pub enum OsuError {
    /// From the message layer (including the job's set-up).
    #[error(transparent)]
    Msg(#[from] rbtl::msg::Error),
    /// The job has fewer than two ranks.
    #[error(
        "needs at least 2 ranks, the job has {0}: run osu alone (it starts its own ranks) \
         or under a launcher with -n 2 or more"
    )]
    TooFewRanks(u32),
    /// The benchmark buffers could not be allocated.
    #[error(
        "cannot allocate the two benchmark buffers of {size} bytes each: {source}; \
         use a smaller --max-size"
    )]
    Buffers {
        /// The size asked for (the largest message).
        size: usize,
        /// Why.
        #[source]
        source: rbtl::mpool::Error,
    },
    /// A results file could not be created or written.
    #[error("cannot write {}: {source}; check that its directory exists and is writable", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A rank of `osu init` received another payload than its sender's rank.
    #[error(
        "rank {from} sent {got} instead of its rank in the wire-up exchange: a message went astray"
    )]
    WrongPayload {
        /// The sender.
        from: u32,
        /// What arrived.
        got: u32,
    },
    /// `/proc/self` could not be read to count descriptors and connections.
    #[error("cannot count this process's descriptors and connections in /proc/self: {0}")]
    Usage(#[source] std::io::Error),
}

/// Result alias of `osu`.
pub type Result<T, E = OsuError> = std::result::Result<T, E>;
