//! The collectives' bindings, blocking and nonblocking: build the schedule
//! ([`super::build`]), then run it to its end or hand it out as a request. A small
//! blocking one first tries its way without a schedule (`collective_small!`).

use super::args::in_place;
use super::{run_blocking, run_in_state};
use crate::entry::call;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::p2p::check_count;
use crate::state::Mpi;
use std::ptr::null;

collective_small!(PMPI_Barrier, PMPI_Ibarrier, PMPI_Barrier_init, (comm: Handle),
    small(Mpi::barrier_small, comm, false),
    |mpi| mpi.build_barrier(comm));

collective_small!(PMPI_Bcast, PMPI_Ibcast, PMPI_Bcast_init,
    (buffer: *mut c_void, count: c_int, datatype: Handle, root: c_int, comm: Handle),
    small(Mpi::bcast_small, (buffer, count, datatype, root, comm), false),
    |mpi| mpi.build_bcast(buffer, count, datatype, root, comm));

collective_small!(PMPI_Reduce, PMPI_Ireduce, PMPI_Reduce_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, root: c_int, comm: Handle),
    small(Mpi::reduce_small, (sendbuf, recvbuf, count, datatype, op, root, comm), true),
    |mpi| mpi.build_reduce((sendbuf, recvbuf), count, datatype, op, root, comm));

#[no_mangle]
pub unsafe extern "C" fn PMPI_Allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    let small = unsafe { super::small::allreduce((sendbuf, recvbuf, count, datatype, op, comm)) };
    if let Some(code) = small {
        return code;
    }
    run_blocking("MPI_Allreduce", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe { mpi.build_allreduce(sendbuf, recvbuf, count, datatype, op, comm) }?;
        Ok(s)
    })
}

nonblocking!(PMPI_Iallreduce,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle),
    |mpi| mpi.build_allreduce(sendbuf, recvbuf, count, datatype, op, comm));
persistent!(PMPI_Allreduce_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle),
    |mpi| mpi.build_allreduce(sendbuf, recvbuf, count, datatype, op, comm));

reduction!(PMPI_Scan, PMPI_Iscan, PMPI_Scan_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle),
    |mpi| mpi.build_scan((sendbuf, recvbuf), count, datatype, op, comm, false));

reduction!(PMPI_Exscan, PMPI_Iexscan, PMPI_Exscan_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle),
    |mpi| mpi.build_scan((sendbuf, recvbuf), count, datatype, op, comm, true));

/// The counts of `MPI_Reduce_scatter`.
///
/// # Safety
///
/// `counts` holds the communicator's size of ints (its local group's).
pub unsafe fn scatter_counts(mpi: &Mpi, comm: Handle, counts: *const c_int) -> Result<Vec<usize>> {
    let n = mpi.comm(comm)?.size() as usize;
    if counts.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "the counts array is null"));
    }
    // SAFETY: the caller's contract.
    let counts = unsafe { rbtl::btl::slice_at(counts, n) };
    counts.iter().map(|&c| check_count(c)).collect()
}

collective_small!(PMPI_Reduce_scatter, PMPI_Ireduce_scatter, PMPI_Reduce_scatter_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: Handle, op: Handle, comm: Handle),
    small(Mpi::reduce_scatter_small, (sendbuf, recvbuf, Some(recvcounts), 0, datatype, op, comm), true),
    |mpi| {
    let counts = scatter_counts(mpi, comm, recvcounts)?;
    mpi.build_reduce_scatter(sendbuf, recvbuf, &counts, datatype, op, comm)
});

collective_small!(PMPI_Reduce_scatter_block, PMPI_Ireduce_scatter_block, PMPI_Reduce_scatter_block_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: Handle, op: Handle, comm: Handle),
    small(Mpi::reduce_scatter_small, (sendbuf, recvbuf, None, recvcount, datatype, op, comm), true),
    |mpi| {
    let counts = vec![check_count(recvcount)?; mpi.comm(comm)?.size() as usize];
    mpi.build_reduce_scatter(sendbuf, recvbuf, &counts, datatype, op, comm)
});

collective_small!(PMPI_Gather, PMPI_Igather, PMPI_Gather_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle),
    small(Mpi::gather_small, (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm), false),
    |mpi| mpi.build_gather((sendbuf, sendcount, sendtype), recvbuf, (recvcount, null(), null()), recvtype, root, comm));

collective!(PMPI_Gatherv, PMPI_Igatherv, PMPI_Gatherv_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, root: c_int, comm: Handle),
    |mpi| mpi.build_gather((sendbuf, sendcount, sendtype), recvbuf, (0, recvcounts, displs), recvtype, root, comm));

collective_small!(PMPI_Scatter, PMPI_Iscatter, PMPI_Scatter_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle),
    small(Mpi::scatter_small, (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm), false),
    |mpi| mpi.build_scatter(sendbuf, (sendcount, null(), null()), sendtype, (recvbuf, recvcount, recvtype), root, comm));

collective!(PMPI_Scatterv, PMPI_Iscatterv, PMPI_Scatterv_init,
    (sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle),
    |mpi| mpi.build_scatter(sendbuf, (0, sendcounts, displs), sendtype, (recvbuf, recvcount, recvtype), root, comm));

collective_small!(PMPI_Allgather, PMPI_Iallgather, PMPI_Allgather_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle),
    small(Mpi::allgather_small, (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), false),
    |mpi| mpi.build_allgather((sendbuf, sendcount, sendtype), recvbuf, (recvcount, null(), null()), recvtype, comm));

collective!(PMPI_Allgatherv, PMPI_Iallgatherv, PMPI_Allgatherv_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, comm: Handle),
    |mpi| mpi.build_allgather((sendbuf, sendcount, sendtype), recvbuf, (0, recvcounts, displs), recvtype, comm));

collective_small!(PMPI_Alltoall, PMPI_Ialltoall, PMPI_Alltoall_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle),
    small(Mpi::alltoall_small, (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), false),
    |mpi| mpi.build_alltoall(
    (sendbuf, (sendcount, null(), null()), &[sendtype]),
    (recvbuf, (recvcount, null(), null()), &[recvtype]),
    comm,
    false,
));

collective!(PMPI_Alltoallv, PMPI_Ialltoallv, PMPI_Alltoallv_init,
(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle, comm: Handle),
|mpi| mpi.build_alltoall(
    (sendbuf, (0, sendcounts, sdispls), &[sendtype]),
    (recvbuf, (0, recvcounts, rdispls), &[recvtype]),
    comm,
    false,
));

/// The per-peer types of `MPI_Alltoallw`.
///
/// # Safety
///
/// `types` holds a handle per peer (member of the other group of an
/// intercommunicator).
pub unsafe fn types_of<'a>(mpi: &Mpi, comm: Handle, types: *const Handle) -> Result<&'a [Handle]> {
    let n = mpi.comm(comm)?.peers().size() as usize;
    if types.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "the datatypes array is null"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { rbtl::btl::slice_at(types, n) })
}

collective!(PMPI_Alltoallw, PMPI_Ialltoallw, PMPI_Alltoallw_init,
(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const Handle, comm: Handle),
|mpi| {
    let rts = types_of(mpi, comm, recvtypes)?;
    let sts = if in_place(sendbuf) {
        rts
    } else {
        types_of(mpi, comm, sendtypes)?
    };
    mpi.build_alltoall(
        (sendbuf, (0, sendcounts, sdispls), sts),
        (recvbuf, (0, recvcounts, rdispls), rts),
        comm,
        true,
    )
});
