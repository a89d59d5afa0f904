//! The blocking collectives' bindings: build the schedule ([`super::build`]), then
//! run it.

use super::build::in_place;
use super::run_blocking;
use crate::entry::call;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::p2p::check_count;
use crate::state::Mpi;
#[no_mangle]
pub unsafe extern "C" fn PMPI_Barrier(comm: Handle) -> c_int {
    call("MPI_Barrier", Object::Comm(comm), |mpi| {
        if mpi.comm(comm)?.remote.is_some() {
            return mpi.intercomm_barrier(comm);
        }
        let s = mpi.build_barrier(comm)?;
        mpi.run(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Bcast(
    buffer: *mut c_void,
    count: c_int,
    datatype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Bcast", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        if let Some(done) = unsafe { mpi.bcast_small((buffer, count, datatype, root, comm)) } {
            return done;
        }
        // SAFETY: the binding's contract.
        let s = unsafe { mpi.build_bcast(buffer, count, datatype, root, comm) }?;
        mpi.run(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    run_blocking("MPI_Reduce", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe { mpi.build_reduce((sendbuf, recvbuf), count, datatype, op, root, comm) }?;
        Ok(s)
    })
}

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

#[no_mangle]
pub unsafe extern "C" fn PMPI_Scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    run_blocking("MPI_Scan", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe { mpi.build_scan((sendbuf, recvbuf), count, datatype, op, comm, false) }?;
        Ok(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Exscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    run_blocking("MPI_Exscan", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe { mpi.build_scan((sendbuf, recvbuf), count, datatype, op, comm, true) }?;
        Ok(s)
    })
}

/// The counts of `MPI_Reduce_scatter`.
///
/// # Safety
///
/// `counts` holds the communicator's size of ints.
pub unsafe fn scatter_counts(mpi: &Mpi, comm: Handle, counts: *const c_int) -> Result<Vec<usize>> {
    let n = mpi.comm(comm)?.size() as usize;
    if counts.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "the counts array is null"));
    }
    // SAFETY: the caller's contract.
    let counts = unsafe { std::slice::from_raw_parts(counts, n) };
    counts.iter().map(|&c| check_count(c)).collect()
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    run_blocking("MPI_Reduce_scatter", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe {
            let counts = scatter_counts(mpi, comm, recvcounts)?;
            mpi.build_reduce_scatter(sendbuf, recvbuf, &counts, datatype, op, comm)
        }?;
        Ok(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Reduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    run_blocking("MPI_Reduce_scatter_block", Object::Comm(comm), |mpi| {
        let counts = vec![check_count(recvcount)?; mpi.comm(comm)?.size() as usize];
        // SAFETY: the binding's contract.
        let s = unsafe { mpi.build_reduce_scatter(sendbuf, recvbuf, &counts, datatype, op, comm) }?;
        Ok(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Gather", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe {
            mpi.build_gather(
                (sendbuf, sendcount, sendtype),
                recvbuf,
                (recvcount, std::ptr::null(), std::ptr::null()),
                recvtype,
                root,
                comm,
            )
        }?;
        mpi.run(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Gatherv", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe {
            mpi.build_gather(
                (sendbuf, sendcount, sendtype),
                recvbuf,
                (0, recvcounts, displs),
                recvtype,
                root,
                comm,
            )
        }?;
        mpi.run(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Scatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Scatter", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe {
            mpi.build_scatter(
                sendbuf,
                (sendcount, std::ptr::null(), std::ptr::null()),
                sendtype,
                (recvbuf, recvcount, recvtype),
                root,
                comm,
            )
        }?;
        mpi.run(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Scatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Scatterv", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe {
            mpi.build_scatter(
                sendbuf,
                (0, sendcounts, displs),
                sendtype,
                (recvbuf, recvcount, recvtype),
                root,
                comm,
            )
        }?;
        mpi.run(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Allgather", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe {
            mpi.build_allgather(
                (sendbuf, sendcount, sendtype),
                recvbuf,
                (recvcount, std::ptr::null(), std::ptr::null()),
                recvtype,
                comm,
            )
        }?;
        mpi.run(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Allgatherv", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe {
            mpi.build_allgather(
                (sendbuf, sendcount, sendtype),
                recvbuf,
                (0, recvcounts, displs),
                recvtype,
                comm,
            )
        }?;
        mpi.run(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Alltoall", Object::Comm(comm), |mpi| {
        let null = std::ptr::null();
        // SAFETY: the binding's contract.
        let s = unsafe {
            mpi.build_alltoall(
                (sendbuf, (sendcount, null, null), &[sendtype]),
                (recvbuf, (recvcount, null, null), &[recvtype]),
                comm,
                false,
            )
        }?;
        mpi.run(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Alltoallv", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe {
            mpi.build_alltoall(
                (sendbuf, (0, sendcounts, sdispls), &[sendtype]),
                (recvbuf, (0, recvcounts, rdispls), &[recvtype]),
                comm,
                false,
            )
        }?;
        mpi.run(s)
    })
}

/// The per-peer types of `MPI_Alltoallw`.
///
/// # Safety
///
/// `types` holds the communicator's size of handles.
pub unsafe fn types_of<'a>(mpi: &Mpi, comm: Handle, types: *const Handle) -> Result<&'a [Handle]> {
    let n = mpi.comm(comm)?.size() as usize;
    if types.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "the datatypes array is null"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(types, n) })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Alltoallw", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let s = unsafe {
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
        }?;
        mpi.run(s)
    })
}
