//! The progress thread (`msg_progress_thread`, off by default): a thread of the
//! library that drives the transports every so often while none of the program's
//! calls is inside, so that what needs this process advances while the program
//! computes: accumulates shipped to its windows, atomics on its lock words over a
//! transport, rendezvous. Without it, progress is weak (as Open MPI's `osc/pt2pt`
//! without its progress thread): such work waits for the process's next call.
//!
//! A look that finds a call of the program since the last one skips the round (the
//! program drives progress itself) and sleeps longer, up to 128 intervals. The thread
//! enters the library's cell only when it is free, and never waits for it: a call of
//! the program that is inside (a blocking one drives progress itself) keeps it out,
//! and one that comes while the thread is inside waits for its round to end. So that
//! such a call waits rather than being refused, the cell is taken by a locked
//! exchange from then on, as with `MPI_THREAD_MULTIPLE`, whatever level the program
//! asked for. Functions a round runs (a program's reduction function in a
//! nonblocking collective) may run on this thread. The thread runs on the processors
//! of its rank (bound, it shares the rank's), and ends at its first look after the
//! library's state ends.

use crate::error::{Error, Result};
use crate::ffi::MPI_ERR_OTHER;
use crate::global::{self, Phase};
use std::time::Duration;

/// Start the thread, a round of progress every `every`.
pub fn start(every: Duration) -> Result<()> {
    global::allow_threads();
    std::thread::Builder::new()
        .name("rbtl-progress".into())
        .spawn(move || run(every))
        .map_err(|e| {
            Error::new(
                MPI_ERR_OTHER,
                format!("starting the progress thread (msg_progress_thread) failed: {e}"),
            )
        })?;
    Ok(())
}

/// How much longer than the interval the thread sleeps at most, while the program
/// keeps calling in: each look that finds a call since the last doubles the sleep
/// up to this many intervals; one that finds none runs a round and goes back to the
/// interval. A thread that woke every interval took the processors from ranks that
/// communicate (a rank's core, where ranks fill the cores: docs/performance.md,
/// 2026-12-05); this wakes it seldom then, and leaves a rank that stops calling in
/// without progress for this many intervals at most.
const SLEEP_UP_TO: u32 = 128;

/// How late the thread's sleeps may end, in nanoseconds.
const TIMER_SLACK_NS: libc::c_ulong = 1_000;

/// Each look: nothing but a longer sleep where the program called in since the last
/// (it drives progress itself), else one round of progress if the cell is free.
fn run(every: Duration) {
    // Its sleeps as long as asked, not up to the default 50 µs more (the timer
    // slack, a setting of each thread): a round comes after an interval.
    // SAFETY: PR_SET_TIMERSLACK takes a number of nanoseconds and touches nothing
    // else; a refusal leaves the default.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, TIMER_SLACK_NS) };
    let (mut seen, mut sleep) = (global::entries(), every);
    loop {
        std::thread::sleep(sleep);
        if global::phase() != Phase::Running {
            return;
        }
        let now = global::entries();
        if now != seen {
            seen = now;
            sleep = sleep
                .saturating_mul(2)
                .min(every.saturating_mul(SLEEP_UP_TO));
            continue;
        }
        sleep = every;
        // (Taken by a call meanwhile: it drives progress itself.)
        let _ = global::try_with(|mpi| mpi.progress());
    }
}
