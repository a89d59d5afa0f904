//! What the launcher's helper threads tell the job loop, in the order it happened.

use super::RankExit;

/// One thing that happened to a rank, sent to the job loop over one channel, so that
/// the loop sees aborts and rank ends in the order they occurred.
#[derive(Debug)]
pub(super) enum Event {
    /// The rank sent `cmd=abort`.
    Abort {
        rank: u32,
        code: i32,
        message: String,
    },
    /// The rank's process ended (it is a zombie until the launcher reaps it).
    Ended { rank: u32, exit: RankExit },
    /// The PMI connection of a rank that owes a `finalize` closed (the rank closed
    /// it, died, or sent what the server cannot serve).
    PmiClosed { rank: u32 },
    /// Writing a rank's output to the launcher's `stream` failed.
    OutputLost {
        stream: super::output::Stream,
        error: std::io::Error,
    },
}
