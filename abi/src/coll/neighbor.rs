//! Neighbourhood collectives (MPI 4.1, 8.6): `MPI_Neighbor_allgather(v)` and
//! `MPI_Neighbor_alltoall(v, w)`, blocking, nonblocking and persistent, on a
//! communicator with a Cartesian, graph or distributed-graph topology
//! ([`Mpi::neighbours`]). Each is one round, as Open MPI's `coll/basic` does them: a
//! receive from every source into its block and a send to every destination, all at
//! once. A neighbour beyond a grid's edge (`MPI_PROC_NULL`) moves nothing, and its
//! receive block stays as it was. There is no `MPI_IN_PLACE` for these (the standard
//! has none).

use super::args;
use super::args::in_place;
use super::schedule::{Loc, Schedule, Xfer};
use super::{run_in_state, Members};
use crate::comm::graph::graph_neighbours;
use crate::comm::topo::Topology;
use crate::entry::call;
use crate::error::{array, Error, Object, Result};
use crate::ffi::*;
use crate::p2p::check_count;
use crate::state::Mpi;

/// A communicator's neighbours in its topology, as its ranks, each list in the order
/// of the blocks of a neighbourhood collective's buffers.
pub struct Neighbours {
    /// Whom blocks are received from (`MPI_PROC_NULL` beyond a grid's edge).
    pub sources: Vec<c_int>,
    /// Whom blocks are sent to.
    pub destinations: Vec<c_int>,
    /// The order in which the sends are posted (indices of `destinations`). On a grid,
    /// toward +1 before -1 in each dimension, where the receives are posted from -1
    /// before +1: where one process is the neighbour on both sides (a periodic
    /// dimension of 1 or 2), messages between two processes match in the order they
    /// are posted, so what goes toward +1 lands in the block from -1.
    pub send_order: Vec<usize>,
}

impl Mpi {
    /// The neighbours of `comm` in its topology (MPI 4.1, 8.6): on a Cartesian grid,
    /// for each dimension, the process at -1 then at +1, both as sources and as
    /// destinations; in a graph, its neighbours, both ways; in a distributed graph,
    /// its sources and destinations.
    pub fn neighbours(&self, comm: Handle) -> Result<Neighbours> {
        let c = self.comm(comm)?;
        match &c.topo {
            Some(Topology::Cart { dims, periods }) => {
                let me = Topology::coords(dims, c.rank as c_int);
                let mut around = Vec::with_capacity(2 * dims.len());
                let mut send_order = Vec::with_capacity(2 * dims.len());
                for d in 0..dims.len() {
                    for shift in [-1, 1] {
                        around.push(Topology::shifted(dims, periods, &me, d, shift));
                    }
                    send_order.extend([2 * d + 1, 2 * d]);
                }
                Ok(Neighbours {
                    sources: around.clone(),
                    destinations: around,
                    send_order,
                })
            }
            Some(Topology::Graph { index, edges }) => {
                let around = graph_neighbours(index, edges, c.rank as usize).to_vec();
                Ok(Neighbours {
                    sources: around.clone(),
                    send_order: (0..around.len()).collect(),
                    destinations: around,
                })
            }
            Some(Topology::DistGraph {
                sources,
                destinations,
                ..
            }) => Ok(Neighbours {
                sources: sources.clone(),
                destinations: destinations.clone(),
                send_order: (0..destinations.len()).collect(),
            }),
            None => Err(Error::new(
                MPI_ERR_TOPOLOGY,
                "a neighbourhood collective needs a communicator with a topology",
            )),
        }
    }
}

/// Where the displacements of a side's blocks are.
#[derive(Clone, Copy)]
pub enum Displs {
    /// Block `i` at `i * count` extents (one count for every block).
    Equal(c_int),
    /// A count per block, displacements in extents of the type (`_allgatherv`,
    /// `_alltoallv`).
    Extents(*const c_int, *const c_int),
    /// A count per block, displacements in bytes (`_alltoallw`).
    Bytes(*const c_int, *const Aint),
}

/// The types of a side's blocks.
#[derive(Clone, Copy)]
pub enum Types {
    One(Handle),
    /// One per block (`_alltoallw`).
    Each(*const Handle),
}

/// One side of a neighbourhood collective: its buffer, and where its blocks are.
#[derive(Clone, Copy)]
pub struct Side {
    pub buf: *const c_void,
    pub displs: Displs,
    pub types: Types,
}

impl Side {
    /// The `n` blocks: each one's address, count and type.
    ///
    /// # Safety
    ///
    /// The arrays hold `n` items each.
    unsafe fn blocks(&self, mpi: &Mpi, n: usize) -> Result<Vec<(*mut c_void, usize, Handle)>> {
        let types = match self.types {
            Types::One(t) => vec![t; n],
            // SAFETY: the caller's contract.
            Types::Each(p) => unsafe { array(p, n) }?.to_vec(),
        };
        let mut out = Vec::with_capacity(n);
        for (i, &ty) in types.iter().enumerate() {
            let extent = mpi.dtype(ty)?.extent();
            // SAFETY: the caller's contract.
            let (count, offset) = unsafe {
                match self.displs {
                    Displs::Equal(k) => (
                        k,
                        (i as isize).wrapping_mul(k as isize).wrapping_mul(extent),
                    ),
                    Displs::Extents(c, d) => (
                        array(c, n)?[i],
                        (array(d, n)?[i] as isize).wrapping_mul(extent),
                    ),
                    Displs::Bytes(c, d) => (array(c, n)?[i], array(d, n)?[i]),
                }
            };
            let at = self.buf.cast::<u8>().wrapping_offset(offset).cast_mut();
            out.push((at.cast(), check_count(count)?, ty));
        }
        Ok(out)
    }
}

/// What a neighbourhood collective sends.
#[derive(Clone, Copy)]
pub enum Sends {
    /// The same data to every destination (`_allgather`, `_allgatherv`).
    Same(*const c_void, c_int, Handle),
    /// A block for each.
    Blocks(Side),
}

impl Mpi {
    /// A neighbourhood collective on `comm`: `sends` to its destinations, a block of
    /// `recvs` from each of its sources.
    ///
    /// # Safety
    ///
    /// The buffers hold their blocks until the collective ends; the arrays hold a
    /// count (displacement, type) per neighbour.
    pub unsafe fn build_neighbor(
        &mut self,
        sends: Sends,
        recvs: Side,
        comm: Handle,
    ) -> Result<Box<Schedule>> {
        let n = self.neighbours(comm)?;
        let (mut s, m) = self.collective(comm)?;
        let send_buf = match sends {
            Sends::Same(buf, ..) => buf,
            Sends::Blocks(side) => side.buf,
        };
        if in_place(send_buf) {
            return Err(Error::new(
                MPI_ERR_BUFFER,
                "neighbourhood collectives take no MPI_IN_PLACE",
            ));
        }
        let mut unpacks = Vec::new();
        let mut into = Vec::with_capacity(n.sources.len());
        // SAFETY: the caller's contract.
        let blocks = unsafe { recvs.blocks(self, n.sources.len()) }?;
        for (&source, (buf, count, ty)) in n.sources.iter().zip(blocks) {
            let t = self.dtype(ty)?.clone();
            if source == MPI_PROC_NULL {
                // Nothing lands there: no unpacking either.
                into.push((Loc::User(buf.cast()), 0));
                continue;
            }
            // SAFETY: the caller's contract.
            let (at, len, unpack) = unsafe { args::output(&mut s, buf, count, &t) }?;
            into.push((at, len));
            unpacks.push(unpack);
        }
        let from: Vec<(Loc, usize)> = match sends {
            Sends::Same(buf, count, ty) => {
                let t = self.dtype(ty)?.clone();
                // SAFETY: the caller's contract; packed once for every destination.
                let one = unsafe { args::input(&mut s, buf, check_count(count)?, &t) }?;
                vec![one; n.destinations.len()]
            }
            Sends::Blocks(side) => {
                let mut from = Vec::with_capacity(n.destinations.len());
                // SAFETY: the caller's contract.
                for (buf, count, ty) in unsafe { side.blocks(self, n.destinations.len()) }? {
                    let t = self.dtype(ty)?.clone();
                    // SAFETY: the caller's contract.
                    from.push(unsafe { args::input(&mut s, buf, count, &t) }?);
                }
                from
            }
        };
        one_round(&mut s, &m, &n, &into, &from);
        args::finish(&mut s, unpacks);
        Ok(s)
    }
}

/// The round: a receive from every source into its block, in order, then a send of
/// every destination's block, in the neighbours' send order.
fn one_round(
    s: &mut Schedule,
    m: &Members,
    n: &Neighbours,
    into: &[(Loc, usize)],
    from: &[(Loc, usize)],
) {
    let r = s.round();
    for (&source, &(at, len)) in n.sources.iter().zip(into) {
        if source != MPI_PROC_NULL {
            r.xfers.push(Xfer::Recv {
                into: at,
                len,
                from: m.job(source as u32),
            });
        }
    }
    for &j in &n.send_order {
        let dest = n.destinations[j];
        if dest != MPI_PROC_NULL {
            let (at, len) = from[j];
            r.xfers.push(Xfer::Send {
                from: at,
                len,
                to: m.job(dest as u32),
            });
        }
    }
}

collective!(PMPI_Neighbor_allgather, PMPI_Ineighbor_allgather, PMPI_Neighbor_allgather_init,
(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle),
|mpi| mpi.build_neighbor(
    Sends::Same(sendbuf, sendcount, sendtype),
    Side { buf: recvbuf, displs: Displs::Equal(recvcount), types: Types::One(recvtype) },
    comm,
));

collective!(PMPI_Neighbor_allgatherv, PMPI_Ineighbor_allgatherv, PMPI_Neighbor_allgatherv_init,
(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle, comm: Handle),
|mpi| mpi.build_neighbor(
    Sends::Same(sendbuf, sendcount, sendtype),
    Side { buf: recvbuf, displs: Displs::Extents(recvcounts, displs), types: Types::One(recvtype) },
    comm,
));

collective!(PMPI_Neighbor_alltoall, PMPI_Ineighbor_alltoall, PMPI_Neighbor_alltoall_init,
(sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, comm: Handle),
|mpi| mpi.build_neighbor(
    Sends::Blocks(Side { buf: sendbuf, displs: Displs::Equal(sendcount), types: Types::One(sendtype) }),
    Side { buf: recvbuf, displs: Displs::Equal(recvcount), types: Types::One(recvtype) },
    comm,
));

collective!(PMPI_Neighbor_alltoallv, PMPI_Ineighbor_alltoallv, PMPI_Neighbor_alltoallv_init,
(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle, comm: Handle),
|mpi| mpi.build_neighbor(
    Sends::Blocks(Side { buf: sendbuf, displs: Displs::Extents(sendcounts, sdispls), types: Types::One(sendtype) }),
    Side { buf: recvbuf, displs: Displs::Extents(recvcounts, rdispls), types: Types::One(recvtype) },
    comm,
));

collective!(PMPI_Neighbor_alltoallw, PMPI_Ineighbor_alltoallw, PMPI_Neighbor_alltoallw_init,
(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const Aint, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const Aint, recvtypes: *const Handle, comm: Handle),
|mpi| mpi.build_neighbor(
    Sends::Blocks(Side { buf: sendbuf, displs: Displs::Bytes(sendcounts, sdispls), types: Types::Each(sendtypes) }),
    Side { buf: recvbuf, displs: Displs::Bytes(recvcounts, rdispls), types: Types::Each(recvtypes) },
    comm,
));
