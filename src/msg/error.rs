//! The message layer's errors.

/// Errors of the message layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// From a transport.
    #[error(transparent)]
    Btl(#[from] rbtl_btl::Error),
    /// From the configuration.
    #[error(transparent)]
    Config(#[from] rbtl_config::Error),
    /// From the process manager.
    #[error(transparent)]
    Pmi(#[from] crate::pmi::Error),
    /// The message does not fit the receive buffer: an eager message's first bytes
    /// were written, a rendezvous message was not transferred at all.
    #[error("message of {len} bytes from rank {sender} (tag {tag}) does not fit the {capacity}-byte receive buffer")]
    Truncated {
        /// Sender.
        sender: u32,
        /// Tag.
        tag: i32,
        /// Message length.
        len: usize,
        /// Receive buffer length.
        capacity: usize,
    },
    /// No selected transport reaches a rank.
    #[error(
        "rank {rank} is unreachable by the selected transports ({tried}): check the btl parameter"
    )]
    Unreachable {
        /// The rank.
        rank: u32,
        /// The transports tried.
        tried: String,
    },
    /// A peer died.
    #[error("rank {rank} failed: {why}")]
    PeerFailed {
        /// The rank.
        rank: u32,
        /// What was seen.
        why: String,
    },
    /// A rank outside the job.
    #[error("rank {0} is outside the job of {1} processes")]
    BadRank(u32, u32),
    /// User tags are non-negative.
    #[error("tag {0} is negative: user tags are >= 0")]
    BadTag(i32),
    /// A request id that is not (or no longer) live: each request is waited for once.
    #[error("request {0:#x} is unknown or was already waited for")]
    UnknownRequest(u64),
    /// A window used with a communicator other than the one that made it.
    #[error("this window belongs to another communicator")]
    WrongComm,
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
