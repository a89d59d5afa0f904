//! The nonblocking collectives: the same schedules as the blocking ones, handed out
//! as requests that advance whenever the library progresses.

use super::api::{scatter_counts, types_of};
use super::build::in_place;
use crate::entry::call;
use crate::error::Object;
use crate::ffi::*;
use crate::p2p::check_count;

/// The last of a list of identifiers.
macro_rules! last {
    ($x:ident) => { $x };
    ($x:ident, $($rest:ident),+) => { last!($($rest),+) };
}

/// A nonblocking binding: `$build` makes the schedule (given `mpi`), which starts as
/// the request written to `request`.
macro_rules! nonblocking {
    ($name:ident, $label:literal, ($($arg:ident: $ty:ty),*), |$mpi:ident| $build:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty,)* request: *mut Handle) -> c_int {
            // Every collective's last argument before its request is its communicator.
            let object = Object::Comm(last!($($arg),*));
            call($label, object, |$mpi| {
                // SAFETY: the binding's contract: the buffers stay valid until the
                // request completes; `request` is writable.
                unsafe {
                    let s = $build?;
                    $mpi.start_collective(s, request)
                }
            })
        }
    };
}

nonblocking!(PMPI_Ibarrier, "MPI_Ibarrier", (comm: Handle), |mpi| mpi.build_barrier(comm));

nonblocking!(PMPI_Ibcast, "MPI_Ibcast", (buffer: *mut c_void, count: c_int, datatype: Handle, root: c_int, comm: Handle), |mpi| mpi
    .build_bcast(buffer, count, datatype, root, comm));

nonblocking!(PMPI_Ireduce, "MPI_Ireduce", (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, root: c_int, comm: Handle), |mpi| mpi
    .build_reduce((sendbuf, recvbuf), count, datatype, op, root, comm));

nonblocking!(PMPI_Iallreduce, "MPI_Iallreduce", (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle), |mpi| mpi
    .build_allreduce(sendbuf, recvbuf, count, datatype, op, comm));

nonblocking!(PMPI_Iscan, "MPI_Iscan", (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle), |mpi| mpi
    .build_scan((sendbuf, recvbuf), count, datatype, op, comm, false));

nonblocking!(PMPI_Iexscan, "MPI_Iexscan", (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: Handle, op: Handle, comm: Handle), |mpi| mpi
    .build_scan((sendbuf, recvbuf), count, datatype, op, comm, true));

nonblocking!(PMPI_Ireduce_scatter, "MPI_Ireduce_scatter", (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: Handle, op: Handle, comm: Handle), |mpi| {
    let counts = scatter_counts(mpi, comm, recvcounts)?;
    mpi.build_reduce_scatter(sendbuf, recvbuf, &counts, datatype, op, comm)
});

nonblocking!(PMPI_Ireduce_scatter_block, "MPI_Ireduce_scatter_block", (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: Handle, op: Handle, comm: Handle), |mpi| {
    let counts = vec![check_count(recvcount)?; mpi.comm(comm)?.size() as usize];
    mpi.build_reduce_scatter(sendbuf, recvbuf, &counts, datatype, op, comm)
});

nonblocking!(PMPI_Igather, "MPI_Igather", (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle), |mpi| mpi
    .build_gather((sendbuf, sendcount, sendtype), recvbuf, (recvcount, std::ptr::null(), std::ptr::null()), recvtype, root, comm));

nonblocking!(PMPI_Igatherv, "MPI_Igatherv", (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, root: c_int, comm: Handle), |mpi| mpi
    .build_gather((sendbuf, sendcount, sendtype), recvbuf, (0, recvcounts, displs), recvtype, root, comm));

nonblocking!(PMPI_Iscatter, "MPI_Iscatter", (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle), |mpi| mpi
    .build_scatter(sendbuf, (sendcount, std::ptr::null(), std::ptr::null()), sendtype, (recvbuf, recvcount, recvtype), root, comm));

nonblocking!(PMPI_Iscatterv, "MPI_Iscatterv", (sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, root: c_int, comm: Handle), |mpi| mpi
    .build_scatter(sendbuf, (0, sendcounts, displs), sendtype, (recvbuf, recvcount, recvtype), root, comm));

nonblocking!(PMPI_Iallgather, "MPI_Iallgather", (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle), |mpi| mpi
    .build_allgather((sendbuf, sendcount, sendtype), recvbuf, (recvcount, std::ptr::null(), std::ptr::null()), recvtype, comm));

nonblocking!(PMPI_Iallgatherv, "MPI_Iallgatherv", (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, comm: Handle), |mpi| mpi
    .build_allgather((sendbuf, sendcount, sendtype), recvbuf, (0, recvcounts, displs), recvtype, comm));

nonblocking!(PMPI_Ialltoall, "MPI_Ialltoall", (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle), |mpi| mpi
    .build_alltoall((sendbuf, (sendcount, std::ptr::null(), std::ptr::null()), &[sendtype]), (recvbuf, (recvcount, std::ptr::null(), std::ptr::null()), &[recvtype]), comm, false));

nonblocking!(PMPI_Ialltoallv, "MPI_Ialltoallv", (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle, comm: Handle), |mpi| mpi
    .build_alltoall((sendbuf, (0, sendcounts, sdispls), &[sendtype]), (recvbuf, (0, recvcounts, rdispls), &[recvtype]), comm, false));

nonblocking!(PMPI_Ialltoallw, "MPI_Ialltoallw", (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const Handle, comm: Handle), |mpi| {
    let rts = types_of(mpi, comm, recvtypes)?;
    let sts = if in_place(sendbuf) { rts } else { types_of(mpi, comm, sendtypes)? };
    mpi.build_alltoall((sendbuf, (0, sendcounts, sdispls), sts), (recvbuf, (0, recvcounts, rdispls), rts), comm, true)
});
