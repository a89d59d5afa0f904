//! Graph topologies: MPI-1's graphs, which every member describes whole
//! (`MPI_Graph_create`), and distributed graphs, which each member describes in part
//! (`MPI_Dist_graph_create`) or by its own edges (`MPI_Dist_graph_create_adjacent`).
//! Ranks are never reordered here.

use super::api::comm_maker;
use super::topo::{ints, over_intracommunicator, Topology};
use crate::coll::{allgather_here, allgatherv_here, Inside};
use crate::entry::{call, call_held, query_binding};
use crate::error::{non_null, Error, Object, Result};
use crate::ffi::*;
use crate::global::Held;
use crate::state::Mpi;

/// The weights of a distributed graph's source and destination edges.
type EdgeWeights = (Vec<c_int>, Vec<c_int>);

/// `MPI_UNWEIGHTED`, as the pointer the header defines.
fn unweighted(p: *const c_int) -> bool {
    p as usize == MPI_UNWEIGHTED
}

/// The neighbours of node `node` of an MPI-1 graph.
pub fn graph_neighbours<'a>(index: &[c_int], edges: &'a [c_int], node: usize) -> &'a [c_int] {
    let from = node.checked_sub(1).map_or(0, |p| index[p] as usize);
    &edges[from..index[node] as usize]
}

/// Check an MPI-1 graph for a communicator of `size`: no more nodes than members,
/// the index never decreases, the edges name nodes.
fn check_graph(index: &[c_int], edges: &[c_int], size: usize) -> Result<()> {
    if index.len() > size {
        return Err(Error::new(
            MPI_ERR_ARG,
            format!(
                "a graph of {} nodes needs more processes than the {size} of the communicator",
                index.len()
            ),
        ));
    }
    let mut last = 0;
    for (i, &x) in index.iter().enumerate() {
        if x < last {
            return Err(Error::new(
                MPI_ERR_ARG,
                format!("index[{i}] = {x} is below the one before it ({last})"),
            ));
        }
        last = x;
    }
    if let Some(bad) = edges.iter().find(|&&e| e < 0 || e as usize >= index.len()) {
        return Err(Error::new(
            MPI_ERR_ARG,
            format!(
                "edge to {bad} names no node of the graph of {}",
                index.len()
            ),
        ));
    }
    Ok(())
}

impl Mpi {
    /// The MPI-1 graph of `comm`.
    fn graph(&self, comm: Handle) -> Result<(&[c_int], &[c_int])> {
        match &self.comm(comm)?.topo {
            Some(Topology::Graph { index, edges }) => Ok((index, edges)),
            _ => Err(Error::new(
                MPI_ERR_TOPOLOGY,
                "the communicator has no graph topology",
            )),
        }
    }

    /// The distributed graph of `comm`: its sources, destinations and their
    /// weights (`None`: unweighted).
    fn dist_graph_of(&self, comm: Handle) -> Result<(&[c_int], &[c_int], Option<&EdgeWeights>)> {
        match &self.comm(comm)?.topo {
            Some(Topology::DistGraph {
                sources,
                destinations,
                weights,
            }) => Ok((sources, destinations, weights.as_ref())),
            _ => Err(Error::new(
                MPI_ERR_TOPOLOGY,
                "the communicator has no distributed graph topology",
            )),
        }
    }

    /// The neighbours of `rank` in `comm`'s graph.
    fn graph_neighbours_of(&self, comm: Handle, rank: c_int) -> Result<&[c_int]> {
        let (index, edges) = self.graph(comm)?;
        let node = usize::try_from(rank)
            .ok()
            .filter(|&r| r < index.len())
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_RANK,
                    format!("rank {rank} is not a node of the graph of {}", index.len()),
                )
            })?;
        Ok(graph_neighbours(index, edges, node))
    }
}

#[rustfmt::skip]
comm_maker!(PMPI_Graph_create, comm_old,
    (nnodes: c_int, index: *const c_int, edges: *const c_int, _reorder: c_int), comm_graph,
    |mpi| {
        // SAFETY: the binding's contract: `index` holds `nnodes` ints, `edges` as many
        // as the last of them says.
        unsafe { graph(mpi, comm_old, (nnodes, index, edges)) }
    });

/// `MPI_Graph_create` of the `nnodes` nodes `index` and `edges` over `comm_old`:
/// the new communicator (null at a process outside the graph).
///
/// # Safety
///
/// `index` holds `nnodes` ints, `edges` as many as the last of them says.
unsafe fn graph(
    mpi: &mut Held,
    comm_old: Handle,
    (nnodes, index, edges): (c_int, *const c_int, *const c_int),
) -> Result<Handle> {
    // SAFETY: the caller's contract.
    let index = unsafe { ints(index, nnodes) }?.to_vec();
    let nedges = index.last().copied().unwrap_or(0);
    // SAFETY: the caller's contract.
    let edges = unsafe { ints(edges, nedges) }?.to_vec();
    let c = mpi.comm(comm_old)?;
    over_intracommunicator(c, "a graph")?;
    check_graph(&index, &edges, c.size() as usize)?;
    let member = (c.rank as usize) < index.len();
    let h = super::create::split(mpi, comm_old, if member { 0 } else { MPI_UNDEFINED }, 0)?;
    if h != MPI_COMM_NULL {
        mpi.comm_mut(h)?.topo = Some(Topology::Graph { index, edges });
    }
    Ok(h)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Graph_map(
    comm: Handle,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    call("MPI_Graph_map", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract, as for `MPI_Graph_create`.
        let index = unsafe { ints(index, nnodes) }?;
        // SAFETY: as above.
        let edges = unsafe { ints(edges, index.last().copied().unwrap_or(0)) }?;
        let c = mpi.comm(comm)?;
        check_graph(index, edges, c.size() as usize)?;
        let r = c.rank as usize;
        let r = if r < index.len() {
            r as c_int
        } else {
            MPI_UNDEFINED
        };
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(newrank, r, "newrank") }
    })
}

query_binding!(PMPI_Graphdims_get, comm, Object::Comm(comm), |mpi| {
    let (index, edges) = mpi.graph(comm)?;
} => nnodes: c_int = index.len() as c_int, nedges: c_int = edges.len() as c_int);

/// Write the first `max` of `values` to `out`, an array of `max` ints
/// (`MPI_ERR_ARG` where it is null and `max` is positive).
///
/// # Safety
///
/// `out` holds `max` ints (or is null).
unsafe fn write_ints(out: *mut c_int, max: c_int, values: &[c_int]) -> Result<()> {
    if max <= 0 {
        return Ok(());
    }
    non_null(out, MPI_ERR_ARG, "array")?;
    for (i, v) in values.iter().enumerate().take(max as usize) {
        // SAFETY: the caller's contract (not null, checked above).
        unsafe { out.add(i).write(*v) };
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Graph_get(
    comm: Handle,
    maxindex: c_int,
    maxedges: c_int,
    index: *mut c_int,
    edges: *mut c_int,
) -> c_int {
    call("MPI_Graph_get", Object::Comm(comm), |mpi| {
        let (i, e) = mpi.graph(comm)?;
        // SAFETY: the binding's contract: `maxindex` and `maxedges` ints.
        unsafe {
            write_ints(index, maxindex, i)?;
            write_ints(edges, maxedges, e)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Graph_neighbors_count(
    comm: Handle,
    rank: c_int,
    nneighbors: *mut c_int,
) -> c_int {
    call("MPI_Graph_neighbors_count", Object::Comm(comm), |mpi| {
        let n = mpi.graph_neighbours_of(comm, rank)?.len();
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(nneighbors, n as c_int, "nneighbors") }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Graph_neighbors(
    comm: Handle,
    rank: c_int,
    maxneighbors: c_int,
    neighbors: *mut c_int,
) -> c_int {
    call("MPI_Graph_neighbors", Object::Comm(comm), |mpi| {
        let around = mpi.graph_neighbours_of(comm, rank)?;
        // SAFETY: the binding's contract: `maxneighbors` ints.
        unsafe { write_ints(neighbors, maxneighbors, around) }
    })
}

/// One member's edges of a distributed graph, as `MPI_Dist_graph_create` takes them.
struct Part {
    /// (source, destination, weight), the weight 1 where none is given.
    edges: Vec<[c_int; 3]>,
    /// The member's say on weights: given, `MPI_UNWEIGHTED`, or none (no edges and
    /// no `MPI_UNWEIGHTED`: it agrees with the others).
    weights: Weights,
}

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
enum Weights {
    Unweighted = 0,
    Given = 1,
    Either = 2,
}

/// Read `MPI_Dist_graph_create`'s description of a member's edges.
///
/// # Safety
///
/// The arrays hold what the binding's contract says.
unsafe fn read_part(
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    weights: *const c_int,
) -> Result<Part> {
    // SAFETY: the caller's contract: `n` sources and degrees.
    let (s, deg) = unsafe { (ints(sources, n)?, ints(degrees, n)?) };
    if let Some(bad) = deg.iter().find(|&&d| d < 0) {
        return Err(Error::new(MPI_ERR_ARG, format!("degree {bad} is negative")));
    }
    let total = deg
        .iter()
        .try_fold(0 as c_int, |t, &d| t.checked_add(d))
        .ok_or_else(|| Error::new(MPI_ERR_ARG, "more than 2^31 edges"))?;
    // SAFETY: as above: as many destinations as the degrees add up to.
    let d = unsafe { ints(destinations, total) }?;
    let (w, say) = if unweighted(weights) {
        (None, Weights::Unweighted)
    } else if total == 0 {
        (None, Weights::Either)
    } else if weights as usize == MPI_WEIGHTS_EMPTY {
        return Err(Error::new(
            MPI_ERR_ARG,
            format!("MPI_WEIGHTS_EMPTY for {total} edges"),
        ));
    } else {
        // SAFETY: as above: one weight per edge.
        (Some(unsafe { ints(weights, total) }?), Weights::Given)
    };
    let mut edges = Vec::with_capacity(total as usize);
    let mut at = 0;
    for (&from, &k) in s.iter().zip(deg) {
        for _ in 0..k {
            edges.push([from, d[at], w.map_or(1, |w| w[at])]);
            at += 1;
        }
    }
    Ok(Part {
        edges,
        weights: say,
    })
}

/// A duplicate of intracommunicator `comm` (its callers check) with a distributed
/// graph of these edges of this member.
fn dist_graph(
    inside: &mut impl Inside,
    comm: Handle,
    sources: Vec<c_int>,
    destinations: Vec<c_int>,
    weights: Option<(Vec<c_int>, Vec<c_int>)>,
) -> Result<Handle> {
    let size = inside.state().comm(comm)?.size() as c_int;
    if let Some(bad) = sources
        .iter()
        .chain(&destinations)
        .find(|&&r| r < 0 || r >= size)
    {
        return Err(Error::new(
            MPI_ERR_RANK,
            format!("neighbour {bad} is not in the communicator of {size}"),
        ));
    }
    let h = super::create::dup(inside, comm)?;
    inside.state().comm_mut(h)?.topo = Some(Topology::DistGraph {
        sources,
        destinations,
        weights,
    });
    Ok(h)
}

/// `MPI_Dist_graph_create`: every member's edges gathered by all, each member
/// keeping those that start or end at it, in the order of the members that gave
/// them and of their lists (so that repeated edges between two members pair up
/// in the same order at both ends). A member's bad arguments fail every member:
/// each checks every edge.
fn dist_graph_create(inside: &mut impl Inside, comm: Handle, mine: Result<Part>) -> Result<Handle> {
    over_intracommunicator(inside.state().comm(comm)?, "a graph")?;
    let (len, say) = match &mine {
        Ok(p) => (p.edges.len() as c_int, p.weights),
        Err(_) => (-1, Weights::Either),
    };
    let heads = allgather_here(inside, comm, &[len, say as c_int])?;
    let mine = mine?;
    if let Some(who) = heads.chunks(2).position(|h| h[0] < 0) {
        return Err(Error::new(
            MPI_ERR_ARG,
            format!("member {who} gave a graph it could not describe"),
        ));
    }
    let says = |w: Weights| heads.chunks(2).any(|h| h[1] == w as c_int);
    if says(Weights::Unweighted) && says(Weights::Given) {
        return Err(Error::new(
            MPI_ERR_ARG,
            "some members gave weights and others MPI_UNWEIGHTED",
        ));
    }
    let counts = heads
        .chunks(2)
        .map(|h| h[0].checked_mul(3))
        .collect::<Option<Vec<c_int>>>()
        .ok_or_else(|| Error::new(MPI_ERR_ARG, "a member gave more than 2^31 / 3 edges"))?;
    let flat: Vec<c_int> = mine.edges.iter().flatten().copied().collect();
    let all = allgatherv_here(inside, comm, &flat, &counts)?;
    let me = inside.state().comm(comm)?.rank as c_int;
    let (mut s, mut sw, mut d, mut dw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let size = inside.state().comm(comm)?.size() as c_int;
    for e in all.chunks(3) {
        if let Some(bad) = e[..2].iter().find(|&&r| r < 0 || r >= size) {
            return Err(Error::new(
                MPI_ERR_RANK,
                format!(
                    "edge {} -> {}: {bad} is not in the communicator of {size}",
                    e[0], e[1]
                ),
            ));
        }
        if e[2] < 0 {
            return Err(Error::new(
                MPI_ERR_ARG,
                format!("edge {} -> {} has the negative weight {}", e[0], e[1], e[2]),
            ));
        }
        if e[1] == me {
            s.push(e[0]);
            sw.push(e[2]);
        }
        if e[0] == me {
            d.push(e[1]);
            dw.push(e[2]);
        }
    }
    let weighted = !says(Weights::Unweighted);
    dist_graph(inside, comm, s, d, weighted.then_some((sw, dw)))
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Dist_graph_create(
    comm_old: Handle,
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    weights: *const c_int,
    info: Handle,
    _reorder: c_int,
    comm_dist_graph: *mut Handle,
) -> c_int {
    call_held("MPI_Dist_graph_create", Object::Comm(comm_old), |mpi| {
        crate::info::check(info)?;
        // SAFETY: the binding's contract.
        let mine = unsafe { read_part(n, sources, degrees, destinations, weights) };
        let h = dist_graph_create(mpi, comm_old, mine)?;
        // SAFETY: null or writable.
        unsafe { super::api::hand_out(Ok(h), comm_dist_graph, |h| mpi.comm_free(h)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Dist_graph_create_adjacent(
    comm_old: Handle,
    indegree: c_int,
    sources: *const c_int,
    sourceweights: *const c_int,
    outdegree: c_int,
    destinations: *const c_int,
    destweights: *const c_int,
    info: Handle,
    _reorder: c_int,
    comm_dist_graph: *mut Handle,
) -> c_int {
    call_held(
        "MPI_Dist_graph_create_adjacent",
        Object::Comm(comm_old),
        |mpi| {
            crate::info::check(info)?;
            // SAFETY: the binding's contract.
            let (s, d) = unsafe {
                (
                    ints(sources, indegree)?.to_vec(),
                    ints(destinations, outdegree)?.to_vec(),
                )
            };
            // Weights are given for both sides or for neither (MPI_UNWEIGHTED,
            // MPI_WEIGHTS_EMPTY for a side of no edges).
            let weights = if unweighted(sourceweights) || unweighted(destweights) {
                None
            } else {
                let side = |w: *const c_int, n: c_int| -> Result<Vec<c_int>> {
                    if n == 0 {
                        return Ok(Vec::new());
                    }
                    if w as usize == MPI_WEIGHTS_EMPTY {
                        return Err(Error::new(
                            MPI_ERR_ARG,
                            format!("MPI_WEIGHTS_EMPTY for {n} edges"),
                        ));
                    }
                    // SAFETY: the binding's contract: `n` weights.
                    Ok(unsafe { ints(w, n) }?.to_vec())
                };
                Some((
                    side(sourceweights, indegree)?,
                    side(destweights, outdegree)?,
                ))
            };
            over_intracommunicator(mpi.comm(comm_old)?, "a graph")?;
            let h = dist_graph(mpi, comm_old, s, d, weights)?;
            // SAFETY: null or writable.
            unsafe { super::api::hand_out(Ok(h), comm_dist_graph, |h| mpi.comm_free(h)) }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Dist_graph_neighbors_count(
    comm: Handle,
    indegree: *mut c_int,
    outdegree: *mut c_int,
    weighted: *mut c_int,
) -> c_int {
    call(
        "MPI_Dist_graph_neighbors_count",
        Object::Comm(comm),
        |mpi| {
            let (sources, destinations, weights) = mpi.dist_graph_of(comm)?;
            for (p, what) in [
                (indegree, "indegree"),
                (outdegree, "outdegree"),
                (weighted, "weighted"),
            ] {
                non_null(p, MPI_ERR_ARG, what)?;
            }
            // SAFETY: writable (checked not null).
            unsafe {
                indegree.write(sources.len() as c_int);
                outdegree.write(destinations.len() as c_int);
                weighted.write(c_int::from(weights.is_some()));
            }
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Dist_graph_neighbors(
    comm: Handle,
    maxindegree: c_int,
    sources: *mut c_int,
    sourceweights: *mut c_int,
    maxoutdegree: c_int,
    destinations: *mut c_int,
    destweights: *mut c_int,
) -> c_int {
    call("MPI_Dist_graph_neighbors", Object::Comm(comm), |mpi| {
        let (s, d, weights) = mpi.dist_graph_of(comm)?;
        // SAFETY: the binding's contract: `maxindegree` and `maxoutdegree` ints.
        unsafe {
            write_ints(sources, maxindegree, s)?;
            write_ints(destinations, maxoutdegree, d)?;
        }
        // The weights, where the graph has them and the caller asks for them.
        if let Some((sw, dw)) = weights {
            let asked = |p: *mut c_int| !p.is_null() && !unweighted(p);
            // SAFETY: as above.
            unsafe {
                if asked(sourceweights) {
                    write_ints(sourceweights, maxindegree, sw)?;
                }
                if asked(destweights) {
                    write_ints(destweights, maxoutdegree, dw)?;
                }
            }
        }
        Ok(())
    })
}
