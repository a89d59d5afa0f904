//! `MPI_Win_lock_all` and `MPI_Win_unlock_all`: every member's lock word taken
//! shared ([`super::lock_word`]), the takes started together and waited for together.

use super::atomics::FETCHES_AT_ONCE;
use super::lock_word::{acquire, EXCLUSIVE, NEXT_WRITER};
use super::sync::{check_assert, complete_all, sync_error, NOCHECK};
use super::{bad_win, LOCK_WORD};
use crate::coll::Inside;
use crate::entry::call_held;
use crate::error::{Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use rbtl::btl::AtomicOp;
use rbtl::msg::Atomic;

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_lock_all(assert: c_int, win: Handle) -> c_int {
    call_held("MPI_Win_lock_all", Object::Win(win), |mpi| {
        check_assert(mpi, win, assert, ("MPI_Win_lock_all", NOCHECK))?;
        let w = mpi.win(win)?;
        w.sync.may_lock_all()?;
        let nocheck = assert & MPI_MODE_NOCHECK != 0;
        let mut taken = Vec::new();
        let outcome = match nocheck {
            true => Ok(()),
            false => take_all_shared(mpi, win, &mut taken),
        };
        let outcome = outcome.and_then(|()| {
            let sync = &mut mpi.win_mut(win)?.sync;
            sync.may_lock_all()?;
            sync.lock_all = Some(nocheck);
            sync.fence = false;
            Ok(())
        });
        if outcome.is_err() {
            for (r, _) in taken.iter().enumerate().filter(|(_, &t)| t) {
                mpi.win_release(win, r, LOCK_WORD, false)?;
            }
        }
        outcome
    })
}

/// Take every member's lock word shared, for `MPI_Win_lock_all`: additions are
/// started toward the members together ([`FETCHES_AT_ONCE`] at most) and their
/// answers waited for together (a round trip for them all, where taking one member
/// after another took one each); a member that a writer holds gets its one back and
/// is then taken as [`acquire`] takes it. `taken` says which members were taken, to
/// give back on a failure.
fn take_all_shared(inside: &mut impl Inside, h: Handle, taken: &mut Vec<bool>) -> Result<()> {
    let Mpi { wins, msg, .. } = inside.state();
    let w = wins.get(h).ok_or_else(|| bad_win(h))?;
    let n = w.peers.len();
    taken.resize(n, false);
    // Each word before its addition, written by the transport.
    let mut old = vec![0u64; n];
    let (mut outcome, mut all_answered, mut held) = (Ok(()), true, Vec::new());
    let mut from = 0;
    while from < n && outcome.is_ok() {
        let (to, mut started) = ((from + FETCHES_AT_ONCE).min(n), from);
        for r in from..to {
            let add = Atomic::Op(AtomicOp::Add, 1);
            // SAFETY: room for the word; `old` lives until every addition started
            // is waited for below (and for good if a wait fails).
            let at = unsafe { old.as_mut_ptr().add(r) }.cast::<u8>();
            // SAFETY: as just said.
            let start = unsafe {
                msg.atomic_on(&w.peers[r].ctrl, LOCK_WORD, add, false, at, &w.pending[r])
            };
            if let Err(e) = start {
                outcome = Err(e.into());
                break;
            }
            started = r + 1;
        }
        for r in from..started {
            match msg.complete(&w.pending[r], Some(w.peers[r].job)) {
                Ok(()) if old[r] & (EXCLUSIVE | NEXT_WRITER) == 0 => taken[r] = true,
                Ok(()) => held.push(r),
                Err(e) => {
                    all_answered = false;
                    outcome = outcome.and(Err(e.into()));
                }
            }
        }
        from = to;
    }
    if !all_answered {
        // An addition not waited for may still write its old value.
        std::mem::forget(old);
    }
    for r in held {
        inside.state().win_release(h, r, LOCK_WORD, false)?;
        if outcome.is_ok() {
            outcome = acquire(inside, h, r, LOCK_WORD, false);
            taken[r] = outcome.is_ok();
        }
    }
    outcome
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_unlock_all(win: Handle) -> c_int {
    call_held("MPI_Win_unlock_all", Object::Win(win), |mpi| {
        if mpi.win(win)?.sync.lock_all.is_none() {
            return Err(sync_error("MPI_Win_lock_all was not called"));
        }
        let done = complete_all(mpi, win);
        let Some(nocheck) = mpi.win_mut(win)?.sync.lock_all.take() else {
            return Err(sync_error("another thread unlocked the window meanwhile"));
        };
        if !nocheck {
            for r in 0..mpi.win(win)?.peers.len() {
                mpi.win_release(win, r, LOCK_WORD, false)?;
            }
        }
        done
    })
}
