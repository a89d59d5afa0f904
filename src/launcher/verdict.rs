//! Deciding how a job failed: the first failure in time among the ranks' ends and
//! aborts, judged in the order they were seen, and barriers no rank can complete.
//!
//! The order in which the launcher's threads see ranks end can differ from the order
//! they ended in: a rank that notices a peer's death and exits at once may be seen
//! first when the machine is busy. But when a failure is about to be declared, its
//! cause has already happened: so the launcher looks at every rank then, and a rank
//! killed by a signal (the launcher has sent none yet) is taken as the cause over a
//! rank that exited on its own. An abort is taken as it was seen.

use super::event::Event;
use super::server::Shared;
use super::{Abort, Failure, RankExit};
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
    /// Whether the ranks' output could not be written (the job loop notes it).
    pub output_lost: bool,
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
    /// job's first failure if it was found by this call. `ended` lists the ranks
    /// that have ended but whose end has not been queued yet.
    pub fn judge(
        &mut self,
        shared: &Shared,
        ended: impl FnOnce() -> Vec<(u32, RankExit)>,
    ) -> Option<Failure> {
        let mut ended = Some(ended);
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
                // Judged by the job loop as it arrives.
                Event::OutputLost { .. } => None,
                Event::PmiClosed { .. } if self.failure.is_some() => None,
                Event::PmiClosed { rank } => {
                    if arrived.elapsed() < PMI_SETTLE {
                        // A rank that died closed it too: judge it (and what came
                        // after) once its end had time to be seen.
                        break;
                    }
                    let rank = *rank;
                    let ended = self.exited_cleanly.iter().any(|&(r, _)| r == rank)
                        || self
                            .queue
                            .iter()
                            .any(|(e, _)| matches!(e, Event::Ended { rank: r, .. } if *r == rank));
                    (!ended).then(|| Failure::PmiClosed {
                        rank,
                        broken: shared.universe().rank_pmi(rank).broken,
                    })
                }
                Event::Ended { rank, .. } => {
                    let pmi = shared.universe().rank_pmi(*rank);
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
            if let Some(failure) = failure.filter(|_| self.failure.is_none()) {
                let ended = ended.take().map(|f| f()).unwrap_or_default();
                self.failure = Some(self.cause(failure, ended));
            }
            self.queue.pop_front();
        }
        if self.failure.is_none() {
            if let Some(failure) = self.stranded_barrier(shared) {
                let ended = ended.take().map(|f| f()).unwrap_or_default();
                self.failure = Some(self.cause(failure, ended));
            }
        }
        if had_failure {
            None
        } else {
            self.failure.clone()
        }
    }

    /// The cause of the job's first `failure`: `failure` itself, unless it is a
    /// rank's own end while another rank (queued, or among those that have `ended`
    /// unreported) was killed by a signal.
    fn cause(&self, failure: Failure, ended: Vec<(u32, RankExit)>) -> Failure {
        if matches!(
            failure,
            Failure::Aborted(_)
                | Failure::Interrupted(_)
                | Failure::TimedOut(_)
                | Failure::Rank {
                    exit: RankExit::Signaled(_),
                    ..
                }
        ) {
            return failure;
        }
        let queued = self.queue.iter().filter_map(|(event, _)| match event {
            Event::Ended { rank, exit } => Some((*rank, *exit)),
            Event::Abort { .. } | Event::OutputLost { .. } | Event::PmiClosed { .. } => None,
        });
        queued
            .chain(ended)
            .find(|(_, exit)| matches!(exit, RankExit::Signaled(_)))
            .map_or(failure, |(rank, exit)| Failure::Rank { rank, exit })
    }

    /// A barrier that ranks wait in and that a rank that has exited will never enter.
    fn stranded_barrier(&self, shared: &Shared) -> Option<Failure> {
        let &(rank, finalized) = self
            .exited_cleanly
            .iter()
            .find(|(_, finalized)| !finalized)
            .or(self.exited_cleanly.first())?;
        let waiting = shared.universe().barrier_waiters_with(rank);
        (!waiting.is_empty()).then_some(Failure::Stranded {
            rank,
            finalized,
            waiting,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(rank: u32, exit: RankExit) -> Event {
        Event::Ended { rank, exit }
    }

    /// A verdict that has seen `events`, in order.
    fn seen(events: impl IntoIterator<Item = Event>) -> Verdict {
        let mut verdict = Verdict::default();
        for event in events {
            verdict.push(event);
        }
        verdict
    }

    #[test]
    fn a_rank_killed_by_a_signal_is_the_cause_over_one_that_exited() {
        let shared = Shared::new(4, "kvs".into());
        // Seen in the wrong order.
        let mut verdict = seen([
            ended(1, RankExit::Exited(1)),
            ended(3, RankExit::Signaled(9)),
        ]);
        let first = verdict.judge(&shared, Vec::new);
        let killed = Failure::Rank {
            rank: 3,
            exit: RankExit::Signaled(9),
        };
        assert_eq!(first, Some(killed.clone()));
        // Not seen yet, but ended.
        let mut verdict = seen([ended(1, RankExit::Exited(1))]);
        let first = verdict.judge(&shared, || vec![(3, RankExit::Signaled(9))]);
        assert_eq!(first, Some(killed));
        assert_eq!(verdict.judge(&shared, Vec::new), None, "reported once");
        // Without a signal, the first seen stays the cause.
        let mut verdict = seen([ended(2, RankExit::Exited(4)), ended(1, RankExit::Exited(1))]);
        let first = verdict.judge(&shared, || vec![(0, RankExit::Exited(7))]);
        assert_eq!(
            first,
            Some(Failure::Rank {
                rank: 2,
                exit: RankExit::Exited(4)
            })
        );
    }

    #[test]
    fn an_abort_seen_first_stays_the_cause() {
        let shared = Shared::new(2, "kvs".into());
        let abort = Event::Abort {
            rank: 0,
            code: 3,
            message: "m".into(),
        };
        let mut verdict = seen([abort, ended(1, RankExit::Signaled(9))]);
        let first = verdict.judge(&shared, Vec::new);
        assert!(matches!(first, Some(Failure::Aborted(_))), "{first:?}");
        assert!(verdict.take_abort_news());
        assert_eq!(first.unwrap().code(), 3);
    }

    #[test]
    fn a_clean_exit_is_judged_once_its_pmi_connection_is_read() {
        let shared = Shared::new(2, "kvs".into());
        let mut verdict = seen([ended(1, RankExit::Exited(0)), ended(0, RankExit::Exited(2))]);
        // Rank 1's connection is still open: nothing is judged before the settle
        // time, not even the later failure.
        assert_eq!(verdict.judge(&shared, Vec::new), None);
        assert!(!verdict.settled());
        std::thread::sleep(PMI_SETTLE);
        let first = verdict.judge(&shared, Vec::new);
        assert_eq!(
            first,
            Some(Failure::Rank {
                rank: 0,
                exit: RankExit::Exited(2)
            })
        );
        assert!(verdict.settled());
    }
}
