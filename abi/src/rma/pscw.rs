//! Generalized active-target synchronization (MPI 4.1 12.5.2): `MPI_Win_post`,
//! `MPI_Win_start`, `MPI_Win_complete`, `MPI_Win_wait` and `MPI_Win_test`. Each
//! side's epoch sends empty tokens over the window's communicator: a target's post
//! to each origin of its group, an origin's complete (once its operations toward
//! that target are complete) to each target of its group. `MPI_Win_start` waits for
//! the posts, `MPI_Win_wait` for the completes, letting other threads' calls in
//! meanwhile (with `MPI_THREAD_MULTIPLE`, one of them may send what a member waits
//! for before it sends its token).

use super::sync::{check_assert, complete_toward, sync_error, State, NOCHECK, POST_MODES};
use crate::entry::{call, call_held};
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::global::Held as Inside;
use crate::p2p::wait::Step;
use crate::state::Mpi;
use std::collections::VecDeque;
use std::ptr::NonNull;

/// Tags of the post/start/complete/wait tokens on the window's communicator.
const POST_TAG: i32 = 1;
const DONE_TAG: i32 = 2;

/// A side of a post/start/complete/wait epoch.
#[derive(Clone, Copy)]
enum Side {
    /// The origin's, from `MPI_Win_start` to `MPI_Win_complete`.
    Access,
    /// The target's, from `MPI_Win_post` to `MPI_Win_wait`.
    Exposure,
}

impl State {
    /// The group of `side`'s epoch, while one is open.
    fn group(&mut self, side: Side) -> &mut Option<Vec<usize>> {
        match side {
            Side::Access => &mut self.access,
            Side::Exposure => &mut self.exposure,
        }
    }
}

impl Mpi {
    /// The context of window `h`'s communicator, and the job ranks of its members
    /// `members`: where its post/start/complete/wait tokens go.
    fn token_peers(&self, h: Handle, members: &[usize]) -> Result<(u32, Vec<u32>)> {
        let w = self.win(h)?;
        let ctx = self.comm(w.comm)?.ctx;
        Ok((ctx, members.iter().map(|&r| w.peers[r].job).collect()))
    }

    /// Send a post/start/complete/wait token to each member of `to`.
    fn tokens_to(&mut self, h: Handle, to: &[usize], tag: i32) -> Result<()> {
        let (ctx, jobs) = self.token_peers(h, to)?;
        for j in jobs {
            self.msg.send_in(ctx, &[], j, tag)?;
        }
        Ok(())
    }

    /// The members of group `g` for `side`'s epoch of window `h`, which must not be
    /// open yet.
    fn epoch_members(&mut self, h: Handle, g: Handle, side: Side) -> Result<Vec<usize>> {
        if self.win_mut(h)?.sync.group(side).is_some() {
            return Err(sync_error(match side {
                Side::Access => "an access epoch is open already",
                Side::Exposure => "an exposure epoch is open already",
            }));
        }
        self.members_of(h, g)
    }

    /// Open `side`'s epoch of window `h` toward the members of group `g`, once
    /// `tokens` has exchanged its tokens with them.
    fn open_epoch(
        &mut self,
        h: Handle,
        g: Handle,
        side: Side,
        tokens: impl FnOnce(&mut Mpi, &[usize]) -> Result<()>,
    ) -> Result<()> {
        let members = self.epoch_members(h, g, side)?;
        tokens(self, &members)?;
        *self.win_mut(h)?.sync.group(side) = Some(members);
        Ok(())
    }

    /// The group of `side`'s open epoch of window `h`.
    fn epoch_group(&mut self, h: Handle, side: Side) -> Result<Vec<usize>> {
        self.win_mut(h)?.sync.group(side).clone().ok_or_else(|| {
            sync_error(match side {
                Side::Access => "MPI_Win_start was not called",
                Side::Exposure => "MPI_Win_post was not called",
            })
        })
    }

    /// The members of group `g` by their rank in window `h`'s group.
    fn members_of(&self, h: Handle, g: Handle) -> Result<Vec<usize>> {
        let group = self.group(g)?;
        let w = self.win(h)?;
        group
            .ranks()
            .iter()
            .map(|&j| {
                w.group.rank_of(j).map(|r| r as usize).ok_or_else(|| {
                    Error::new(
                        MPI_ERR_GROUP,
                        "the group has processes outside the window's",
                    )
                })
            })
            .collect()
    }
}

impl Inside {
    /// Receive a token from each member of `from`, letting other threads' calls in
    /// while they are awaited (with `MPI_THREAD_MULTIPLE`: one of them may send
    /// what a member waits for before it sends its token).
    fn tokens_from(&mut self, h: Handle, from: &[usize], tag: i32) -> Result<()> {
        let (ctx, jobs) = self.token_peers(h, from)?;
        let mut waiting = VecDeque::with_capacity(jobs.len());
        for j in jobs {
            // SAFETY: an empty receive writes nothing.
            let posted = unsafe {
                self.msg
                    .irecv_in(ctx, NonNull::dangling().as_ptr(), 0, Some(j), Some(tag))
            };
            match posted {
                Ok(r) => waiting.push_back(r),
                Err(e) => {
                    self.withdraw_tokens(waiting);
                    return Err(e.into());
                }
            }
        }
        let got = self.wait_for(|mpi, look| {
            while let Some(&r) = waiting.front() {
                match mpi.msg.test(r) {
                    None => return Ok(Step::Pending(Some(r).filter(|_| look))),
                    Some(outcome) => {
                        waiting.pop_front();
                        outcome?;
                    }
                }
            }
            Ok(Step::Done)
        });
        if got.is_err() {
            self.withdraw_tokens(waiting);
        }
        got
    }

    /// Give up the token receives `waiting` (after an error).
    fn withdraw_tokens(&mut self, waiting: VecDeque<rbtl::msg::ReqId>) {
        for r in waiting {
            if self.msg.cancel(r) {
                self.msg.test(r);
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_post(group: Handle, assert: c_int, win: Handle) -> c_int {
    call("MPI_Win_post", Object::Win(win), |mpi| {
        check_assert(mpi, win, assert, ("MPI_Win_post", POST_MODES))?;
        mpi.open_epoch(win, group, Side::Exposure, |mpi, members| {
            mpi.tokens_to(win, members, POST_TAG)
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_start(group: Handle, assert: c_int, win: Handle) -> c_int {
    call_held("MPI_Win_start", Object::Win(win), |mpi| {
        check_assert(mpi, win, assert, ("MPI_Win_start", NOCHECK))?;
        // Each target's post first.
        let members = mpi.epoch_members(win, group, Side::Access)?;
        mpi.tokens_from(win, &members, POST_TAG)?;
        *mpi.win_mut(win)?.sync.group(Side::Access) = Some(members);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_complete(win: Handle) -> c_int {
    call_held("MPI_Win_complete", Object::Win(win), |mpi| {
        let members = mpi.epoch_group(win, Side::Access)?;
        for &r in &members {
            complete_toward(mpi, win, r)?;
        }
        mpi.tokens_to(win, &members, DONE_TAG)?;
        mpi.win_mut(win)?.sync.access = None;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_wait(win: Handle) -> c_int {
    call_held("MPI_Win_wait", Object::Win(win), |mpi| {
        let members = mpi.epoch_group(win, Side::Exposure)?;
        mpi.tokens_from(win, &members, DONE_TAG)?;
        mpi.win_mut(win)?.sync.exposure = None;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_test(win: Handle, flag: *mut c_int) -> c_int {
    call("MPI_Win_test", Object::Win(win), |mpi| {
        let members = mpi.epoch_group(win, Side::Exposure)?;
        let (ctx, jobs) = mpi.token_peers(win, &members)?;
        mpi.progress();
        // Done once every origin's token waits; then they are taken.
        let mut all = true;
        for &j in &jobs {
            all &= mpi.msg.iprobe_in(ctx, Some(j), Some(DONE_TAG))?.is_some();
        }
        if all {
            for &j in &jobs {
                mpi.msg.recv_in(ctx, &mut [], Some(j), Some(DONE_TAG))?;
            }
            mpi.win_mut(win)?.sync.exposure = None;
        }
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(flag, c_int::from(all), "flag") }
    })
}
