//! Deciding how a job failed: the first failure in time among the ranks' ends and
//! aborts, judged in the order they happened, and barriers no rank can complete.

use super::event::Event;
use super::server::Shared;
use super::{Abort, Failure};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// After a rank exits with code 0, how long to wait for the server to read its PMI
/// connection to the end (a `finalize` it sent last) before judging it. The end comes
/// at once unless a process the rank started still holds the connection.
const PMI_SETTLE: Duration = Duration::from_millis(500);

/// The job's failure, decided from events in the order they arrived.
#[derive(Default)]
pub(super) struct Verdict {
    /// Events not yet judged, with when they arrived.
    queue: VecDeque<(Event, Instant)>,
    /// Ranks that exited with code 0 and were judged, in that order, with whether
    /// they had finalized PMI.
    exited_cleanly: Vec<(u32, bool)>,
    /// The first failure.
    pub failure: Option<Failure>,
    /// The first PMI abort.
    pub abort: Option<Abort>,
    /// Set when an abort was judged since the last [`take_abort_news`].
    ///
    /// [`take_abort_news`]: Verdict::take_abort_news
    abort_news: bool,
}

impl Verdict {
    /// Queues `event` for judging.
    pub fn push(&mut self, event: Event) {
        self.queue.push_back((event, Instant::now()));
    }

    /// Whether every queued event has been judged.
    pub fn settled(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether an abort was judged since the last call.
    pub fn take_abort_news(&mut self) -> bool {
        std::mem::take(&mut self.abort_news)
    }

    /// Judges queued events in order, as far as they can be judged now; returns the
    /// job's first failure if it was found by this call.
    pub fn judge(&mut self, shared: &Shared) -> Option<Failure> {
        let had_failure = self.failure.is_some();
        while let Some((event, arrived)) = self.queue.front() {
            let failure = match event {
                Event::Abort {
                    rank,
                    code,
                    message,
                } => {
                    let abort = Abort {
                        rank: *rank,
                        code: *code,
                        message: message.clone(),
                    };
                    self.abort.get_or_insert(abort.clone());
                    self.abort_news = true;
                    Some(Failure::Aborted(abort))
                }
                Event::Ended { rank, exit } if !exit.success() => Some(Failure::Rank {
                    rank: *rank,
                    exit: *exit,
                }),
                Event::Ended { .. } if self.failure.is_some() => None,
                Event::Ended { rank, .. } => {
                    let pmi = shared.rank_pmi(*rank);
                    if !pmi.closed && arrived.elapsed() < PMI_SETTLE {
                        // Its last requests may not have been read yet: judge it, and
                        // everything after it, once they have.
                        break;
                    }
                    self.exited_cleanly.push((*rank, pmi.finalized));
                    // A rank that used PMI, or tried to (its connection broke),
                    // owes a finalize.
                    let owes_finalize = pmi.spoke || pmi.broken.is_some();
                    (owes_finalize && !pmi.finalized).then_some(Failure::Unfinalized {
                        rank: *rank,
                        broken: pmi.broken,
                    })
                }
            };
            self.queue.pop_front();
            if let Some(failure) = failure {
                self.failure.get_or_insert(failure);
            }
        }
        if self.failure.is_none() {
            self.failure = self.stranded_barrier(shared);
        }
        if had_failure {
            None
        } else {
            self.failure.clone()
        }
    }

    /// A barrier that ranks wait in and that a rank that has exited will never enter.
    fn stranded_barrier(&self, shared: &Shared) -> Option<Failure> {
        let &(rank, finalized) = self
            .exited_cleanly
            .iter()
            .find(|(_, finalized)| !finalized)
            .or(self.exited_cleanly.first())?;
        let waiting = shared.barrier_waiters();
        (!waiting.is_empty()).then_some(Failure::Stranded {
            rank,
            finalized,
            waiting,
        })
    }
}
