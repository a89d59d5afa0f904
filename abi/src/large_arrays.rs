//! The large-count bindings with arrays of counts or displacements (MPI 4.1, 2.5.8):
//! `MPI_Allgatherv_c`, `MPI_Alltoallw_c`, ... (the type constructors' are in
//! `datatype::constructors`, `indexed` and `arrays`). Each copies
//! its arrays into `int` arrays of its own, as `large_count` narrows single counts,
//! and calls its `int` twin with them; a value beyond `int` (2,147,483,647) is refused
//! with `MPI_ERR_COUNT`, naming the binding and the array. An array is read only where
//! the standard makes it significant: as many entries as the communicator has members
//! (the remote group's on an intercommunicator), as the process has neighbours in or
//! out of its topology; a rooted collective's
//! at its root alone; a send side that `MPI_IN_PLACE` replaces not at all. The twin
//! judges the rest (a null array, a bad communicator) and its errors name the twin.
//! A persistent collective (`_init_c`) keeps its copies as long as its request, as
//! each start reads them.

use crate::coll::args::in_place;
use crate::coll::last;
use crate::error::{raise, Object};
use crate::ffi::*;
use crate::global;
use crate::large_count::narrow;
use std::ptr::null;

/// The arrays of one call, narrowed, and what their lengths depend on.
struct Narrowed {
    name: &'static str,
    object: Object,
    /// The copies handed to the twin: each stays where it is while this lives.
    kept: Vec<Vec<c_int>>,
    /// The communicator's members (the remote group's on an intercommunicator), this
    /// process's rank, whether the communicator is an intercommunicator, and its
    /// neighbours in and out: unknown where the communicator is not valid (the twin
    /// then says why), or has no topology.
    members: Option<usize>,
    /// The size of this process's group (the communicator's size).
    local: Option<usize>,
    rank: c_int,
    inter: bool,
    neighbours: Option<(usize, usize)>,
}

impl Narrowed {
    /// For binding `name`, whose errors go to `object`'s handler, on `comm` (none for
    /// a type constructor).
    fn new(name: &'static str, object: Object, comm: Option<Handle>) -> Narrowed {
        let mut n = Narrowed {
            name,
            object,
            kept: Vec::new(),
            members: None,
            local: None,
            rank: 0,
            inter: false,
            neighbours: None,
        };
        if let Some(comm) = comm {
            let _ = global::with(|mpi| {
                let c = mpi.comm(comm)?;
                n.members = Some(c.peers().size() as usize);
                n.local = Some(c.size() as usize);
                n.rank = c.rank as c_int;
                n.inter = c.remote.is_some();
                if c.topo.is_none() {
                    return Ok(());
                }
                let around = mpi.neighbours(comm)?;
                n.neighbours = Some((around.sources.len(), around.destinations.len()));
                Ok(())
            });
        }
        n
    }

    /// Single count `value`, parameter `param`, as an `int`.
    fn one(&self, param: &str, value: i64) -> Result<c_int, c_int> {
        narrow(self.name, param, value, self.object)
    }

    /// `len` values at `values`, parameter `param`, copied as `int`s: the copy, kept
    /// while this lives. Null where `values` is null or `len` unknown (the twin then
    /// reports what is wrong before it reads the array).
    ///
    /// # Safety
    ///
    /// `values` holds `len` values when it is not null.
    unsafe fn each(
        &mut self,
        param: &str,
        values: *const i64,
        len: Option<usize>,
    ) -> Result<*const c_int, c_int> {
        let Some(len) = len.filter(|_| !values.is_null()) else {
            return Ok(null());
        };
        // SAFETY: the caller's contract.
        let values = unsafe { rbtl::btl::slice_at(values, len) };
        let copy = values
            .iter()
            .enumerate()
            .map(|(i, &v)| c_int::try_from(v).or_else(|_| self.one(&format!("{param}[{i}]"), v)))
            .collect::<Result<Vec<c_int>, c_int>>()?;
        self.kept.push(copy);
        Ok(self.kept.last().map_or(null(), |c| c.as_ptr()))
    }

    /// As many as the communicator has members.
    fn members(&self) -> Option<usize> {
        self.members
    }

    /// The members of this process's group.
    fn local(&self) -> Option<usize> {
        self.local
    }

    /// The members, where this process is `root` of a rooted collective, else none
    /// (its arrays are not read).
    fn members_at(&self, root: c_int) -> Option<usize> {
        let is_root = if self.inter {
            root == MPI_ROOT
        } else {
            root == self.rank
        };
        self.members.filter(|_| is_root)
    }

    /// The members, unless `sendbuf` is `MPI_IN_PLACE` (the send side is not read).
    fn members_unless_in_place(&self, sendbuf: *const c_void) -> Option<usize> {
        self.members.filter(|_| !in_place(sendbuf))
    }

    /// The neighbours blocks come from.
    fn sources(&self) -> Option<usize> {
        self.neighbours.map(|n| n.0)
    }

    /// The neighbours blocks go to.
    fn destinations(&self) -> Option<usize> {
        self.neighbours.map(|n| n.1)
    }
}

/// Run `twin` on the arrays that `narrowed` copies, for binding `name`: its code, or
/// that of the narrowing's error.
fn narrowed(
    name: &'static str,
    object: Object,
    comm: Option<Handle>,
    twin: impl FnOnce(&mut Narrowed) -> Result<c_int, c_int>,
) -> c_int {
    let mut n = Narrowed::new(name, object, comm);
    twin(&mut n).unwrap_or_else(|code| code)
}

/// As [`narrowed`], for a persistent collective: the copies are kept with the request
/// the twin hands out into `request`.
fn narrowed_kept(
    name: &'static str,
    comm: Handle,
    request: *mut Handle,
    twin: impl FnOnce(&mut Narrowed) -> Result<c_int, c_int>,
) -> c_int {
    let mut n = Narrowed::new(name, Object::Comm(comm), Some(comm));
    let code = twin(&mut n).unwrap_or_else(|code| code);
    if code == MPI_SUCCESS && !request.is_null() {
        // SAFETY: not null, and written by the twin that succeeded.
        let h = unsafe { request.read() };
        let kept = std::mem::take(&mut n.kept);
        if let Err(e) = global::with(|mpi| mpi.keep_with_collective(h, kept)) {
            return raise(name, Object::Comm(comm), e);
        }
    }
    code
}

/// The blocking, nonblocking and persistent large-count forms of a collective, each
/// passing `$pass` (where `$n` narrows) to its `int` twin.
macro_rules! large_collective {
    ($blocking:ident, $nonblocking:ident, $init:ident => $twin:ident, $itwin:ident, $init_twin:ident,
     ($($arg:ident: $ty:ty),*), |$n:ident| ($($pass:expr),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $blocking($($arg: $ty),*) -> c_int {
            let comm = last!($($arg),*);
            narrowed(&stringify!($blocking)[1..], Object::Comm(comm), Some(comm), |$n| {
                // SAFETY: the binding's contract, passed on with its arrays narrowed.
                Ok(unsafe { $twin($($pass),*) })
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $nonblocking($($arg: $ty,)* request: *mut Handle) -> c_int {
            let comm = last!($($arg),*);
            // (The nonblocking twin reads its arrays before it returns.)
            narrowed(&stringify!($nonblocking)[1..], Object::Comm(comm), Some(comm), |$n| {
                // SAFETY: as above.
                Ok(unsafe { $itwin($($pass,)* request) })
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $init($($arg: $ty,)* info: Handle, request: *mut Handle) -> c_int {
            let comm = last!($($arg),*);
            narrowed_kept(&stringify!($init)[1..], comm, request, |$n| {
                // SAFETY: as above; the copies live as long as the request.
                Ok(unsafe { $init_twin($($pass,)* info, request) })
            })
        }
    };
}

use crate::coll::api::*;
use crate::coll::neighbor::*;

large_collective!(PMPI_Allgatherv_c, PMPI_Iallgatherv_c, PMPI_Allgatherv_init_c
    => PMPI_Allgatherv, PMPI_Iallgatherv, PMPI_Allgatherv_init,
    (sendbuf: *const c_void, sendcount: Count, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const Count, displs: *const Aint, recvtype: Handle, comm: Handle),
    |n| (sendbuf, n.one("sendcount", sendcount)?, sendtype, recvbuf,
        n.each("recvcounts", recvcounts, n.members())?,
        n.each("displs", displs.cast(), n.members())?, recvtype, comm));

large_collective!(PMPI_Gatherv_c, PMPI_Igatherv_c, PMPI_Gatherv_init_c
    => PMPI_Gatherv, PMPI_Igatherv, PMPI_Gatherv_init,
    (sendbuf: *const c_void, sendcount: Count, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const Count, displs: *const Aint, recvtype: Handle, root: c_int, comm: Handle),
    |n| (sendbuf, n.one("sendcount", sendcount)?, sendtype, recvbuf,
        n.each("recvcounts", recvcounts, n.members_at(root))?,
        n.each("displs", displs.cast(), n.members_at(root))?, recvtype, root, comm));

large_collective!(PMPI_Scatterv_c, PMPI_Iscatterv_c, PMPI_Scatterv_init_c
    => PMPI_Scatterv, PMPI_Iscatterv, PMPI_Scatterv_init,
    (sendbuf: *const c_void, sendcounts: *const Count, displs: *const Aint, sendtype: Handle, recvbuf: *mut c_void, recvcount: Count, recvtype: Handle, root: c_int, comm: Handle),
    |n| (sendbuf, n.each("sendcounts", sendcounts, n.members_at(root))?,
        n.each("displs", displs.cast(), n.members_at(root))?, sendtype, recvbuf,
        n.one("recvcount", recvcount)?, recvtype, root, comm));

large_collective!(PMPI_Alltoallv_c, PMPI_Ialltoallv_c, PMPI_Alltoallv_init_c
    => PMPI_Alltoallv, PMPI_Ialltoallv, PMPI_Alltoallv_init,
    (sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const Aint, recvtype: Handle, comm: Handle),
    |n| (sendbuf, n.each("sendcounts", sendcounts, n.members_unless_in_place(sendbuf))?,
        n.each("sdispls", sdispls.cast(), n.members_unless_in_place(sendbuf))?, sendtype, recvbuf,
        n.each("recvcounts", recvcounts, n.members())?,
        n.each("rdispls", rdispls.cast(), n.members())?, recvtype, comm));

large_collective!(PMPI_Alltoallw_c, PMPI_Ialltoallw_c, PMPI_Alltoallw_init_c
    => PMPI_Alltoallw, PMPI_Ialltoallw, PMPI_Alltoallw_init,
    (sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const Aint, recvtypes: *const Handle, comm: Handle),
    |n| (sendbuf, n.each("sendcounts", sendcounts, n.members_unless_in_place(sendbuf))?,
        n.each("sdispls", sdispls.cast(), n.members_unless_in_place(sendbuf))?, sendtypes, recvbuf,
        n.each("recvcounts", recvcounts, n.members())?,
        n.each("rdispls", rdispls.cast(), n.members())?, recvtypes, comm));

large_collective!(PMPI_Reduce_scatter_c, PMPI_Ireduce_scatter_c, PMPI_Reduce_scatter_init_c
    => PMPI_Reduce_scatter, PMPI_Ireduce_scatter, PMPI_Reduce_scatter_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const Count, datatype: Handle, op: Handle, comm: Handle),
    |n| (sendbuf, recvbuf, n.each("recvcounts", recvcounts, n.local())?, datatype, op, comm));

large_collective!(PMPI_Neighbor_allgatherv_c, PMPI_Ineighbor_allgatherv_c, PMPI_Neighbor_allgatherv_init_c
    => PMPI_Neighbor_allgatherv, PMPI_Ineighbor_allgatherv, PMPI_Neighbor_allgatherv_init,
    (sendbuf: *const c_void, sendcount: Count, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const Count, displs: *const Aint, recvtype: Handle, comm: Handle),
    |n| (sendbuf, n.one("sendcount", sendcount)?, sendtype, recvbuf,
        n.each("recvcounts", recvcounts, n.sources())?,
        n.each("displs", displs.cast(), n.sources())?, recvtype, comm));

large_collective!(PMPI_Neighbor_alltoallv_c, PMPI_Ineighbor_alltoallv_c, PMPI_Neighbor_alltoallv_init_c
    => PMPI_Neighbor_alltoallv, PMPI_Ineighbor_alltoallv, PMPI_Neighbor_alltoallv_init,
    (sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const Aint, recvtype: Handle, comm: Handle),
    |n| (sendbuf, n.each("sendcounts", sendcounts, n.destinations())?,
        n.each("sdispls", sdispls.cast(), n.destinations())?, sendtype, recvbuf,
        n.each("recvcounts", recvcounts, n.sources())?,
        n.each("rdispls", rdispls.cast(), n.sources())?, recvtype, comm));

// (Its displacements are in bytes, `MPI_Aint` in both forms.)
large_collective!(PMPI_Neighbor_alltoallw_c, PMPI_Ineighbor_alltoallw_c, PMPI_Neighbor_alltoallw_init_c
    => PMPI_Neighbor_alltoallw, PMPI_Ineighbor_alltoallw, PMPI_Neighbor_alltoallw_init,
    (sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const Aint, recvtypes: *const Handle, comm: Handle),
    |n| (sendbuf, n.each("sendcounts", sendcounts, n.destinations())?, sdispls, sendtypes, recvbuf,
        n.each("recvcounts", recvcounts, n.sources())?, rdispls, recvtypes, comm));
