//! One-sided operations started and not yet waited for ([`Pending`]), and the wait
//! for them ([`Comm::complete`]).

use super::liveness::{IdleWait, Needs};
use super::{Comm, Result};
use rbtl_btl::{MemHandle, RdmaCallback};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One-sided operations started and not yet waited for, and the first failure among
/// them.
#[derive(Clone, Default)]
pub struct Pending(Arc<Counts>);

#[derive(Default)]
struct Counts {
    started: AtomicUsize,
    done: AtomicUsize,
    /// Whether `error` may hold one (read without the lock).
    failed: AtomicBool,
    error: Mutex<Option<rbtl_btl::Error>>,
}

impl Pending {
    /// Whether every operation started has completed.
    pub fn is_idle(&self) -> bool {
        self.0.done.load(Ordering::Acquire) == self.0.started.load(Ordering::Relaxed)
    }

    /// Whether every operation started has completed and none failed: nothing for
    /// a wait to do or report.
    #[inline]
    pub fn is_settled(&self) -> bool {
        self.is_idle() && !self.0.failed.load(Ordering::Acquire)
    }

    /// Start one operation counted here: `start` starts it with the callback it is
    /// given, which keeps `keep` (a registration the operation uses) until it runs.
    /// One that fails to start is not counted.
    pub(super) fn started<E>(
        &self,
        keep: Option<Arc<MemHandle>>,
        start: impl FnOnce(RdmaCallback) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        self.0.started.fetch_add(1, Ordering::Relaxed);
        let started = start(self.callback(keep));
        if started.is_err() {
            // Nothing went: done.
            self.0.done.fetch_add(1, Ordering::Release);
        }
        started
    }

    /// The callback of one operation; `keep` is a registration it uses, released
    /// once it completes.
    fn callback(&self, keep: Option<Arc<MemHandle>>) -> RdmaCallback {
        let counts = self.0.clone();
        Box::new(move |_, c| {
            drop(keep);
            if let Err(e) = c.status {
                counts
                    .error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(e);
                counts.failed.store(true, Ordering::Release);
            }
            counts.done.fetch_add(1, Ordering::Release);
        })
    }

    /// The first failure, taken.
    fn take_error(&self) -> Option<rbtl_btl::Error> {
        // A load first: the swap, a locked write, only when one failed.
        if !self.0.failed.load(Ordering::Acquire) || !self.0.failed.swap(false, Ordering::AcqRel) {
            return None;
        }
        self.0
            .error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

impl Comm {
    /// Progress until every operation `pending` counts has completed: the first
    /// failure among them. A peer that stops answering ends the wait as the message
    /// layer's other waits do (`rank` names the peer the wait needs, if one).
    pub fn complete(&mut self, pending: &Pending, rank: Option<u32>) -> Result<()> {
        let mut idle = IdleWait::new();
        loop {
            if let Some(done) = self.complete_round(pending, rank, &mut idle) {
                return done;
            }
        }
    }

    /// One round of [`Comm::complete`], for a caller that does something else
    /// between rounds: its outcome once every operation `pending` counts has
    /// completed (or the peer `rank` is found gone), else `None` after one progress
    /// call. `idle` carries the wait from one round to the next.
    #[inline]
    pub fn complete_round(
        &mut self,
        pending: &Pending,
        rank: Option<u32>,
        idle: &mut IdleWait,
    ) -> Option<Result<()>> {
        if pending.is_idle() {
            return Some(match pending.take_error() {
                Some(e) => Err(e.into()),
                None => Ok(()),
            });
        }
        if self.progress() > 0 {
            idle.busy();
        } else if idle.idle() {
            if let Some(r) = rank {
                if let Some(e) = self.look_for(Needs::Rank(r), idle) {
                    return Some(Err(e));
                }
            }
        }
        None
    }
}
