//! The message layer's errors.

use rbtl_btl::PeerFailure;

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
        "rank {rank} is unreachable by the selected transports ({tried}){closed}: check the btl parameter"
    )]
    Unreachable {
        /// The rank.
        rank: u32,
        /// The transports tried.
        tried: String,
        /// Why selected transports stayed closed here (`; tcp: found no address ...`),
        /// or nothing.
        closed: String,
    },
    /// No selected transport reaches this rank itself (that is `self`'s job).
    #[error(
        "rank {rank} cannot reach itself with the selected transports ({tried}): add `self` to the btl parameter (e.g. btl = self,{tried})"
    )]
    SelfUnreachable {
        /// This rank.
        rank: u32,
        /// The transports tried.
        tried: String,
    },
    /// A peer died.
    #[error("rank {rank} failed: {why}")]
    PeerFailed {
        /// The rank.
        rank: u32,
        /// Why (as the transport or this layer saw it).
        why: PeerFailure,
    },
    /// A receive from any source cannot complete: every other rank has failed.
    #[error(
        "a receive from any source cannot complete: every other rank has failed: {}",
        failed_list(failed)
    )]
    AllFailed {
        /// Each other rank, with why it failed.
        failed: Vec<(u32, PeerFailure)>,
    },
    /// A peer this call needed sent nothing for the peer timeout (`msg_peer_timeout`),
    /// and its process did not answer probes; it is treated as failed from now on.
    #[error("rank {rank} did not respond for {} s (msg_peer_timeout): nothing came from it, and its process did not answer probes: it is stopped, or out of reach; raise msg_peer_timeout (0: wait forever) to wait longer", waited.as_secs())]
    PeerTimeout {
        /// The rank.
        rank: u32,
        /// How long the call waited without any progress.
        waited: std::time::Duration,
    },
    /// A peer this call needed sent nothing for the peer timeout (`msg_peer_timeout`),
    /// and it and every other rank were waiting as well: the job waits on itself. The
    /// peer is treated as failed from now on.
    #[error("rank {rank} sent nothing for {} s (msg_peer_timeout) while it and every other rank were waiting as well: no rank can send what another waits for", waited.as_secs())]
    Stalled {
        /// The rank.
        rank: u32,
        /// How long the call waited without any progress.
        waited: std::time::Duration,
    },
    /// A receive from any source, with several other ranks alive, saw no progress at
    /// all for the peer timeout (`msg_peer_timeout`), and none of them answered
    /// probes, or every one was waiting as well. No rank is treated as failed: none in
    /// particular was needed.
    #[error("a receive from any source heard nothing from ranks {live:?} for {} s (msg_peer_timeout): their processes did not answer probes (stopped, or out of reach), or each was waiting as well, so that none can send", waited.as_secs())]
    AnySourceTimeout {
        /// The other ranks alive, any of which could have sent.
        live: Vec<u32>,
        /// How long the call waited without any progress.
        waited: std::time::Duration,
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
    /// A window access that does not lie inside the window.
    #[error("{len} bytes at offset {offset} fall outside rank {rank}'s window of {window} bytes: keep offset + length within Window::len()")]
    OutOfWindow {
        /// The rank whose window it is.
        rank: u32,
        /// Offset of the access.
        offset: usize,
        /// Its length.
        len: usize,
        /// The window's length.
        window: usize,
    },
    /// A parameter of the message layer with a value it cannot use.
    #[error("{0}")]
    BadParameter(String),
    /// The receive or send was cancelled ([`Comm::cancel`](super::Comm::cancel),
    /// [`Comm::cancel_send`](super::Comm::cancel_send)) before it was matched.
    #[error("the operation was cancelled before it was matched")]
    Cancelled,
    /// A window used with a communicator other than the one that made it.
    #[error("this window belongs to another communicator")]
    WrongComm,
    /// Slurm did not start a spawn's job step within the PMI time limit.
    #[error(
        "{0} (Slurm starts a spawn as a job step, which waits for free processors in \
         the job's allocation, or shares the processors of the steps running where the \
         first srun runs with --overlap or SLURM_OVERLAP=1)"
    )]
    StepWaiting(#[source] crate::pmi::Error),
}

impl Error {
    /// The error of this process's read of a message that rank `sender` announced
    /// (rendezvous): the sender keeps the message's registration until the receiver's
    /// FIN, so a refusal of its handle means its registrations are being torn down,
    /// which happens when its process is going away. That is reported as the sender's
    /// failure; every other error stays as it is.
    pub(crate) fn reading_from_sender(sender: u32, e: rbtl_btl::Error) -> Error {
        match e {
            rbtl_btl::Error::BadRemoteHandle(why) => Error::PeerFailed {
                rank: sender,
                why: PeerFailure::Broken(format!(
                    "the registration of the message it announced was refused before the message was read ({why}): its process is going away"
                )),
            },
            e => e.into(),
        }
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `rank r (why), ...`.
fn failed_list(failed: &[(u32, PeerFailure)]) -> String {
    let each: Vec<String> = failed
        .iter()
        .map(|(r, why)| format!("rank {r} ({why})"))
        .collect();
    each.join(", ")
}
