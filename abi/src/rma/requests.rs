//! Request-based one-sided operations: `MPI_Rput`, `MPI_Rget`, `MPI_Raccumulate`
//! and `MPI_Rget_accumulate`, inside a passive-target epoch (MPI 4.1, 12.3.5).
//!
//! Each is its plain form, with a request that is done once every operation toward
//! its target member has completed ([`RmaOp`]): several travel together, and a
//! wait or test on one progresses them all. The standard asks only that the
//! operation be complete locally when the wait returns; here it is then also
//! complete at the target (as after `MPI_Win_flush`), and it may have waited for
//! the operations toward the same member started before and after it. A get into
//! a non-contiguous origin buffer (unpacked once it has arrived) and the
//! accumulates that run to their end inside the call complete before the call
//! returns.

use super::ops::{origin_target_binding, rdma};
use super::sync::{complete_toward, sync_error};
use crate::coll::KeepOut;
use crate::error::{non_null, Result};
use crate::ffi::*;
use crate::request::{Request, RmaOp};
use crate::state::Mpi;
use rbtl::msg::IdleWait;

impl Mpi {
    /// Check that a request-based operation to `rank` may start on window `win`: a
    /// passive-target epoch is open (or the target is `MPI_PROC_NULL`, which any
    /// epoch reaches, as MPICH has it), and `request` is a place to write its handle.
    fn request_based(&self, win: Handle, rank: c_int, request: *mut Handle) -> Result<()> {
        if !self.to_proc_null(win, rank)? && !self.win(win)?.sync.passive() {
            return Err(sync_error(
                "a request-based operation outside a passive-target (lock) epoch",
            ));
        }
        non_null(request, MPI_ERR_ARG, "request")
    }

    /// Hand out into `request` the request of the operation just started toward
    /// `rank` of window `win`. Where the operation left work for its completion (a
    /// get to unpack), it completes first and the request is done already.
    ///
    /// # Safety
    ///
    /// `request` is writable.
    unsafe fn completed(&mut self, win: Handle, rank: c_int, request: *mut Handle) -> Result<()> {
        let r = if rank == MPI_PROC_NULL {
            Request::Done(Status::empty())
        } else {
            let w = self.win(win)?;
            let r = w.peer(rank)?;
            if w.staged_for(r) {
                complete_toward(&mut KeepOut(self), win, r)?;
                Request::Done(Status::empty())
            } else {
                Request::Rma(Box::new(RmaOp {
                    pending: w.pending[r].clone(),
                    job: w.peers[r].job,
                    idle: IdleWait::new(),
                }))
            }
        };
        // SAFETY: the caller's contract.
        unsafe { self.hand_out(r, request) }
    }
}

origin_target_binding!(
    PMPI_Rput(origin_addr: *const c_void, ..) -> request,
    |mpi, origin, target, win| {
        mpi.request_based(win, target.0, request)?;
        let (buf, count, ty) = origin;
        // SAFETY: the binding's contract; the request waits for the operation.
        unsafe {
            rdma(mpi, true, (buf.cast_mut(), count, ty), target, win)?;
            mpi.completed(win, target.0, request)
        }
    }
);

origin_target_binding!(
    PMPI_Rget(origin_addr: *mut c_void, ..) -> request,
    |mpi, origin, target, win| {
        mpi.request_based(win, target.0, request)?;
        // SAFETY: the binding's contract; the request waits for the operation.
        unsafe {
            rdma(mpi, false, origin, target, win)?;
            mpi.completed(win, target.0, request)
        }
    }
);

origin_target_binding!(
    PMPI_Raccumulate(origin_addr: *const c_void, .. op: Handle) -> request,
    |mpi, origin, target, win| {
        mpi.request_based(win, target.0, request)?;
        // SAFETY: the binding's contract.
        unsafe {
            mpi.accumulate_to(origin, target, op, win)?;
            mpi.completed(win, target.0, request)
        }
    }
);

origin_target_binding!(
    PMPI_Rget_accumulate(
        origin_addr: *const c_void,
        result_addr: *mut c_void,
        result_count: c_int,
        result_datatype: Handle,
        .. op: Handle
    ) -> request,
    |mpi, origin, target, win| {
        mpi.request_based(win, target.0, request)?;
        let result = (result_addr, result_count, result_datatype);
        // SAFETY: the binding's contract.
        unsafe {
            mpi.get_accumulate(origin, Some(result), target, op, win)?;
            mpi.completed(win, target.0, request)
        }
    }
);
