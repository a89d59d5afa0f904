//! A window's synchronization: fences, passive-target locks and flushes (and the
//! state of its epochs; post/start/complete/wait is in `pscw`, `MPI_Win_lock_all` in
//! `lock_all`, the lock words in `lock_word`).
//!
//! An operation completes at its target when the message layer's put, get or atomic
//! completes (its callback runs once the data is visible there), so every
//! completion call (flush, unlock, fence, complete) waits for the operations counted
//! toward the members it concerns. A lock's release is started, not waited for (its
//! old value tells nothing): an unlock returns once the epoch's operations have
//! completed, without one more round trip. It is counted with the operations toward
//! its member, so that the next completion toward the member (at the latest, freeing
//! the window) waits for it and reports its failure; a take that reaches the word
//! before the release it follows finds it held and tries again.

use super::lock_word::acquire;
use super::{bad_win, Held, Win, LOCK_WORD};
use crate::coll::Inside;
use crate::entry::{call, call_held};
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use rbtl::msg::IdleWait;
use std::collections::BTreeMap;

/// Which epochs a window has open.
#[derive(Default, Debug)]
pub struct State {
    /// An epoch opened by a fence (until a fence with `MPI_MODE_NOSUCCEED`).
    pub fence: bool,
    /// Passive-target locks held, by member.
    pub locks: BTreeMap<usize, Held>,
    /// `MPI_Win_lock_all` is in force (`Some(true)` under `MPI_MODE_NOCHECK`).
    pub lock_all: Option<bool>,
    /// The access group of a post/start/complete/wait epoch, from start to complete.
    pub access: Option<Vec<usize>>,
    /// The exposure group, from post to wait.
    pub exposure: Option<Vec<usize>>,
}

impl State {
    /// Whether a passive-target epoch is open (a lock, or `lock_all`).
    pub fn passive(&self) -> bool {
        !self.locks.is_empty() || self.lock_all.is_some()
    }

    /// Whether this process holds member `r`'s lock exclusively (taken, or asserted
    /// under `MPI_MODE_NOCHECK`): no other process accesses its memory in the
    /// window meanwhile.
    pub fn sole(&self, r: usize) -> bool {
        self.locks.get(&r).is_some_and(|h| h.exclusive)
    }

    /// Whether member `r` may be accessed now.
    pub fn may_access(&self, r: usize) -> bool {
        self.fence
            || self.lock_all.is_some()
            || self.locks.contains_key(&r)
            || self.access.as_ref().is_some_and(|g| g.contains(&r))
    }
}

/// An error of synchronization order.
pub(super) fn sync_error(what: &str) -> Error {
    Error::new(MPI_ERR_RMA_SYNC, what.to_string())
}

/// Complete every operation toward member `r` of window `h`, then the work that
/// waited for them. In a [`crate::global::Held`], other threads' calls come in
/// between the rounds of the wait.
pub fn complete_toward(inside: &mut impl Inside, h: Handle, r: usize) -> Result<()> {
    let w = inside.state().win(h)?;
    // Nothing under way toward it, nor failed (a flush after operations done at once,
    // on memory mapped here): one round of progress, as below.
    if w.pending[r].is_settled() && w.staged.is_empty() {
        inside.state().progress();
        return Ok(());
    }
    wait_toward(inside, h, r)
}

/// [`complete_toward`] where operations may be under way, or may have failed.
#[inline(never)]
fn wait_toward(inside: &mut impl Inside, h: Handle, r: usize) -> Result<()> {
    let mut idle = IdleWait::new();
    let Mpi { wins, msg, .. } = inside.state();
    let w = wins.get(h).ok_or_else(|| bad_win(h))?;
    let (pending, job) = (&w.pending[r], w.peers[r].job);
    let done = match msg.complete_round(pending, Some(job), &mut idle) {
        Some(done) => {
            // Nothing was under way: still one round of progress, so that a program
            // that only flushes (polling its own memory, say) answers what other
            // processes need of it (MPI 4.1, 12.7: every call progresses).
            inside.state().progress();
            done
        }
        // Waited for on a count of its own: the window may go meanwhile.
        None => {
            let pending = pending.clone();
            loop {
                inside.turn();
                let round = inside
                    .state()
                    .msg
                    .complete_round(&pending, Some(job), &mut idle);
                if let Some(done) = round {
                    break done;
                }
            }
        }
    };
    let mpi = inside.state();
    if !mpi.win(h)?.staged.is_empty() {
        mpi.finish_staged(h, Some(r))?;
    }
    Ok(done?)
}

/// Complete every operation of window `h`, as [`complete_toward`] each member.
pub fn complete_all(inside: &mut impl Inside, h: Handle) -> Result<()> {
    let n = inside.state().win(h)?.peers.len();
    let mut first = Ok(());
    for r in 0..n {
        if let Err(e) = complete_toward(inside, h, r) {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

/// The assertions of `MPI_Win_fence`.
pub(super) const FENCE_MODES: &[(c_int, &str)] = &[
    (MPI_MODE_NOSTORE, "MPI_MODE_NOSTORE"),
    (MPI_MODE_NOPUT, "MPI_MODE_NOPUT"),
    (MPI_MODE_NOPRECEDE, "MPI_MODE_NOPRECEDE"),
    (MPI_MODE_NOSUCCEED, "MPI_MODE_NOSUCCEED"),
];
/// The assertions of `MPI_Win_post`.
pub(super) const POST_MODES: &[(c_int, &str)] = &[
    (MPI_MODE_NOCHECK, "MPI_MODE_NOCHECK"),
    (MPI_MODE_NOSTORE, "MPI_MODE_NOSTORE"),
    (MPI_MODE_NOPUT, "MPI_MODE_NOPUT"),
];
/// The assertion of `MPI_Win_start`, `MPI_Win_lock` and `MPI_Win_lock_all`.
pub(super) const NOCHECK: &[(c_int, &str)] = &[(MPI_MODE_NOCHECK, "MPI_MODE_NOCHECK")];

/// `assert` of a synchronization call `call` of window `win`: only bits of the
/// `modes` it takes, else `MPI_ERR_ASSERT` (as Open MPI refuses it, and MPICH but
/// for `MPI_Win_post`), once the window is known to be one (a good assertion
/// leaves the window to the call's own look-up).
pub(super) fn check_assert(
    mpi: &Mpi,
    win: Handle,
    assert: c_int,
    (call, modes): (&str, &[(c_int, &str)]),
) -> Result<()> {
    let allowed = modes.iter().fold(0, |all, &(bit, _)| all | bit);
    if assert & !allowed == 0 {
        return Ok(());
    }
    mpi.win(win)?;
    let names: Vec<&str> = modes.iter().map(|&(_, name)| name).collect();
    Err(Error::new(
        MPI_ERR_ASSERT,
        format!(
            "assertion {assert:#x} holds bits other than those {call} takes ({})",
            names.join(", ")
        ),
    ))
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_fence(assert: c_int, win: Handle) -> c_int {
    call_held("MPI_Win_fence", Object::Win(win), |mpi| {
        check_assert(mpi, win, assert, ("MPI_Win_fence", FENCE_MODES))?;
        let w = mpi.win(win)?;
        if w.sync.passive() || w.sync.access.is_some() || w.sync.exposure.is_some() {
            return Err(sync_error("a fence inside a lock or post/start epoch"));
        }
        let comm = w.comm;
        // (Other threads' calls come in while the operations and the barrier wait.)
        complete_all(mpi, win)?;
        let s = mpi.build_barrier(comm)?;
        mpi.run_letting_in(s)?;
        mpi.win_mut(win)?.sync.fence = assert & MPI_MODE_NOSUCCEED == 0;
        Ok(())
    })
}

impl State {
    /// Whether member `r` may be locked now, else the error that says why not. (A
    /// fence without `MPI_MODE_NOSUCCEED` starts an epoch only if operations
    /// follow it (MPI 4.1, 12.5.1): a lock may follow it, which ends it.)
    fn may_lock(&self, r: usize) -> Result<()> {
        if self.locks.contains_key(&r) || self.lock_all.is_some() {
            return Err(sync_error(
                "the target is locked already, or a lock_all epoch is open",
            ));
        }
        self.outside_start()
    }

    /// Whether no access epoch of `MPI_Win_start` is open, in which no
    /// passive-target epoch may begin (MPI 4.1, 12.5).
    fn outside_start(&self) -> Result<()> {
        match self.access {
            Some(_) => Err(sync_error(
                "a lock inside an access epoch of MPI_Win_start (complete it first)",
            )),
            None => Ok(()),
        }
    }

    /// Whether `MPI_Win_lock_all` may be called now, else the error that says why
    /// not (after a fence, as [`State::may_lock`]).
    pub(super) fn may_lock_all(&self) -> Result<()> {
        if self.passive() {
            return Err(sync_error("a lock or lock_all epoch is open already"));
        }
        self.outside_start()
    }
}

// The lock calls let other threads' calls in while they wait for a lock word (its
// holder may wait for one of them), and while operations complete: the epoch is
// looked at again once the wait is over, as another thread may have opened or
// closed it meanwhile (which the standard makes erroneous: it is refused).
// `MPI_PROC_NULL` is a target they do nothing to (as MPICH has it).

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_lock(
    lock_type: c_int,
    rank: c_int,
    assert: c_int,
    win: Handle,
) -> c_int {
    call_held("MPI_Win_lock", Object::Win(win), |mpi| {
        check_assert(mpi, win, assert, ("MPI_Win_lock", NOCHECK))?;
        if mpi.to_proc_null(win, rank)? {
            return Ok(());
        }
        let w = mpi.win(win)?;
        let r = w.peer(rank)?;
        w.sync.may_lock(r)?;
        let exclusive = match lock_type {
            MPI_LOCK_EXCLUSIVE => true,
            MPI_LOCK_SHARED => false,
            t => {
                return Err(Error::new(
                    MPI_ERR_LOCKTYPE,
                    format!("lock type {t} is neither MPI_LOCK_SHARED nor MPI_LOCK_EXCLUSIVE"),
                ))
            }
        };
        let held = Held {
            exclusive,
            taken: assert & MPI_MODE_NOCHECK == 0,
        };
        if held.taken {
            acquire(mpi, win, r, LOCK_WORD, exclusive)?;
        }
        let sync = &mut mpi.win_mut(win)?.sync;
        if let Err(e) = sync.may_lock(r) {
            if held.taken {
                mpi.win_release(win, r, LOCK_WORD, exclusive)?;
            }
            return Err(e);
        }
        sync.locks.insert(r, held);
        sync.fence = false;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_unlock(rank: c_int, win: Handle) -> c_int {
    call_held("MPI_Win_unlock", Object::Win(win), |mpi| {
        if mpi.to_proc_null(win, rank)? {
            return Ok(());
        }
        let r = mpi.win(win)?.peer(rank)?;
        if !mpi.win(win)?.sync.locks.contains_key(&r) {
            return Err(sync_error("the target is not locked"));
        }
        let done = complete_toward(mpi, win, r);
        let Some(held) = mpi.win_mut(win)?.sync.locks.remove(&r) else {
            return Err(sync_error("another thread unlocked the target meanwhile"));
        };
        if held.taken {
            mpi.win_release(win, r, LOCK_WORD, held.exclusive)?;
        }
        done
    })
}

/// The flushes: `rank` one member, `None` every member (local completion is
/// remote completion here).
fn flush(name: &str, rank: Option<c_int>, win: Handle) -> c_int {
    call_held(name, Object::Win(win), |mpi| {
        let w = mpi.win(win)?;
        if rank == Some(MPI_PROC_NULL) {
            return Ok(());
        }
        if !w.sync.passive() {
            return Err(sync_error("a flush outside a passive-target (lock) epoch"));
        }
        match rank {
            Some(rank) => {
                let r = w.peer(rank)?;
                complete_toward(mpi, win, r)
            }
            None => complete_all(mpi, win),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_flush(rank: c_int, win: Handle) -> c_int {
    flush("MPI_Win_flush", Some(rank), win)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_flush_local(rank: c_int, win: Handle) -> c_int {
    flush("MPI_Win_flush_local", Some(rank), win)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_flush_all(win: Handle) -> c_int {
    flush("MPI_Win_flush_all", None, win)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_flush_local_all(win: Handle) -> c_int {
    flush("MPI_Win_flush_local_all", None, win)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_sync(win: Handle) -> c_int {
    call("MPI_Win_sync", Object::Win(win), |mpi| {
        mpi.win(win)?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    })
}

impl Win {
    /// Whether member `r` may be accessed now, else the error that says why not.
    pub fn check_access(&self, r: usize) -> Result<()> {
        if self.sync.may_access(r) {
            Ok(())
        } else {
            Err(sync_error("no access epoch to this target is open: call MPI_Win_fence, MPI_Win_lock(_all) or MPI_Win_start first"))
        }
    }
}
