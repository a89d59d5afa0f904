//! Request-based one-sided operations: `MPI_Rput`, `MPI_Rget`, `MPI_Raccumulate`
//! and `MPI_Rget_accumulate`, inside a passive-target epoch (MPI 4.1, 12.3.5).
//!
//! Each is its plain form followed by the completion of every operation toward its
//! target (what `MPI_Win_flush` does), so the request it hands out is complete
//! already: a wait or test on it returns at once. The standard asks only that the
//! operation be complete locally when the wait returns; completing it earlier is
//! allowed, and here it is also complete at the target. What this gives up is
//! overlap: several request-based operations do not travel together, each waits
//! for its target before the next starts.

use super::ops::{origin_target_binding, rdma};
use super::sync::{complete_toward, sync_error};
use crate::error::{non_null, Result};
use crate::ffi::*;
use crate::request::Request;
use crate::state::Mpi;

impl Mpi {
    /// Check that a request-based operation may start on window `win`: a
    /// passive-target epoch is open, and `request` is a place to write its handle.
    fn request_based(&self, win: Handle, request: *mut Handle) -> Result<()> {
        if !self.win(win)?.sync.passive() {
            return Err(sync_error(
                "a request-based operation outside a passive-target (lock) epoch",
            ));
        }
        non_null(request, MPI_ERR_ARG, "request")
    }

    /// Complete every operation toward `rank` of window `win`, then hand out a
    /// request complete already into `request`.
    ///
    /// # Safety
    ///
    /// `request` is writable.
    unsafe fn completed(&mut self, win: Handle, rank: c_int, request: *mut Handle) -> Result<()> {
        if rank != MPI_PROC_NULL {
            let r = self.win(win)?.peer(rank)?;
            complete_toward(self, win, r)?;
        }
        // SAFETY: the caller's contract.
        unsafe { self.hand_out(Request::Done(Status::empty()), request) }
    }
}

origin_target_binding!(
    PMPI_Rput(origin_addr: *const c_void, ..) -> request,
    |mpi, origin, target, win| {
        mpi.request_based(win, request)?;
        let (buf, count, ty) = origin;
        // SAFETY: the binding's contract; the operation completes below.
        unsafe {
            rdma(mpi, true, (buf.cast_mut(), count, ty), target, win)?;
            mpi.completed(win, target.0, request)
        }
    }
);

origin_target_binding!(
    PMPI_Rget(origin_addr: *mut c_void, ..) -> request,
    |mpi, origin, target, win| {
        mpi.request_based(win, request)?;
        // SAFETY: the binding's contract; the operation completes below.
        unsafe {
            rdma(mpi, false, origin, target, win)?;
            mpi.completed(win, target.0, request)
        }
    }
);

origin_target_binding!(
    PMPI_Raccumulate(origin_addr: *const c_void, .. op: Handle) -> request,
    |mpi, origin, target, win| {
        mpi.request_based(win, request)?;
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
        mpi.request_based(win, request)?;
        let result = (result_addr, result_count, result_datatype);
        // SAFETY: the binding's contract.
        unsafe {
            mpi.get_accumulate(origin, Some(result), target, op, win)?;
            mpi.completed(win, target.0, request)
        }
    }
);
