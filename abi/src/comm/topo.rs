//! Virtual topologies and Cartesian grids (graphs are in [`super::graph`]). A
//! topology is a communicator's description of its ranks; ranks are never reordered
//! here.

use super::api::comm_maker;
use super::Communicator;
use crate::entry::{call, call_held, query_binding};
use crate::error::{non_null, Error, Object, Result};
use crate::ffi::*;
use crate::global::Held;
use crate::state::Mpi;

/// A communicator's topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    Cart {
        dims: Vec<c_int>,
        periods: Vec<bool>,
    },
    /// An MPI-1 graph: node `i`'s neighbours are `edges[index[i - 1]..index[i]]`
    /// (from 0 for node 0), every node knowing the whole graph.
    Graph {
        index: Vec<c_int>,
        edges: Vec<c_int>,
    },
    DistGraph {
        sources: Vec<c_int>,
        destinations: Vec<c_int>,
        /// The weights of the sources' and destinations' edges (`None`: created
        /// with `MPI_UNWEIGHTED`).
        weights: Option<(Vec<c_int>, Vec<c_int>)>,
    },
}

impl Topology {
    /// The coordinates of `rank` in a grid of `dims` (row-major).
    pub fn coords(dims: &[c_int], rank: c_int) -> Vec<c_int> {
        let mut r = rank;
        let mut out = vec![0; dims.len()];
        for i in (0..dims.len()).rev() {
            out[i] = r % dims[i];
            r /= dims[i];
        }
        out
    }

    /// The rank `shift` away from `coords` in dimension `dim` (wrapped where it is
    /// periodic); `MPI_PROC_NULL` off the grid.
    pub fn shifted(
        dims: &[c_int],
        periods: &[bool],
        coords: &[c_int],
        dim: usize,
        shift: c_int,
    ) -> c_int {
        let mut at = coords.to_vec();
        at[dim] += shift;
        Topology::rank(dims, periods, &at).unwrap_or(MPI_PROC_NULL)
    }

    /// The rank at `coords` (wrapped in periodic dimensions); `None` off the grid.
    pub fn rank(dims: &[c_int], periods: &[bool], coords: &[c_int]) -> Option<c_int> {
        let mut r = 0;
        for i in 0..dims.len() {
            let mut c = coords[i];
            if periods[i] {
                c = c.rem_euclid(dims[i]);
            } else if c < 0 || c >= dims[i] {
                return None;
            }
            r = r * dims[i] + c;
        }
        Some(r)
    }
}

/// The check that a topology (`made`: "a grid", "a graph") is made over an
/// intracommunicator, as the standard asks (MPI 4.1, 8.1): `MPI_ERR_COMM` for an
/// intercommunicator.
pub(super) fn over_intracommunicator(c: &Communicator, made: &str) -> Result<()> {
    match c.remote {
        Some(_) => Err(Error::new(
            MPI_ERR_COMM,
            format!("{made} is made over an intracommunicator"),
        )),
        None => Ok(()),
    }
}

/// `MPI_Dims_create`: fill the zero entries of `dims` so that the product is `n`,
/// the dimensions as close to each other as they can be, in non-increasing order.
pub fn dims_create(n: c_int, dims: &mut [c_int]) -> Result<()> {
    if n < 0 {
        return Err(Error::new(MPI_ERR_ARG, format!("nnodes {n} is negative")));
    }
    let fixed: c_int = dims.iter().filter(|&&d| d > 0).product();
    if dims.iter().any(|&d| d < 0) || fixed == 0 || n % fixed != 0 {
        return Err(Error::new(
            MPI_ERR_DIMS,
            format!("{n} processes cannot fill dimensions {dims:?}"),
        ));
    }
    let free = dims.iter().filter(|&&d| d == 0).count();
    if free == 0 {
        return Ok(());
    }
    // The decomposition whose largest and smallest dimensions are closest (as
    // MPICH's), found among the divisors of what is left.
    let rest = i64::from(n / fixed);
    let divisors: Vec<i64> = (1..)
        .take_while(|d| d * d <= rest)
        .filter(|d| rest % d == 0)
        .flat_map(|d| [d, rest / d])
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut best = Balanced {
        spread: i64::MAX,
        dims: Vec::new(),
    };
    best.search(rest, free, (i64::MAX, None), &divisors, &mut Vec::new());
    let mut out: Vec<c_int> = best.dims.iter().map(|&d| d as c_int).collect();
    out.sort_by(|a, b| b.cmp(a));
    let mut it = out.into_iter();
    for d in dims.iter_mut().filter(|d| **d == 0) {
        *d = it.next().expect("one per free dimension");
    }
    Ok(())
}

/// The best decomposition found so far: its dimensions, non-increasing, and the
/// difference between the first and the last.
struct Balanced {
    spread: i64,
    dims: Vec<i64>,
}

impl Balanced {
    /// Try every way of ending `chosen` (non-increasing, the largest first) with
    /// `k` dimensions, each at most `cap`, that multiply to `m` (`largest`: the
    /// first dimension chosen), among `divisors` (ascending) of the whole. Of two
    /// as close, the one whose smallest dimension is larger is kept (then the one
    /// whose next smallest is, and so on): MPICH's pick.
    fn search(
        &mut self,
        m: i64,
        k: usize,
        (cap, largest): (i64, Option<i64>),
        divisors: &[i64],
        chosen: &mut Vec<i64>,
    ) {
        if k == 1 {
            if m <= cap {
                let spread = largest.unwrap_or(m) - m;
                chosen.push(m);
                let tie_won = || chosen.iter().rev().cmp(self.dims.iter().rev()).is_gt();
                if spread < self.spread || (spread == self.spread && tie_won()) {
                    self.spread = spread;
                    self.dims = chosen.clone();
                }
                chosen.pop();
            }
            return;
        }
        // Largest first: the smallest part is at most this one, so a part too far
        // below the largest ends the search.
        for &d in divisors.iter().rev().filter(|&&d| d <= cap && m % d == 0) {
            let top = largest.unwrap_or(d);
            if top - d > self.spread || (d as f64).powi(k as i32) < m as f64 {
                break;
            }
            chosen.push(d);
            self.search(m / d, k - 1, (d, Some(top)), divisors, chosen);
            chosen.pop();
        }
    }
}

impl Mpi {
    /// The Cartesian topology of `comm`.
    fn cart(&self, comm: Handle) -> Result<(Vec<c_int>, Vec<bool>)> {
        match &self.comm(comm)?.topo {
            Some(Topology::Cart { dims, periods }) => Ok((dims.clone(), periods.clone())),
            _ => Err(Error::new(
                MPI_ERR_TOPOLOGY,
                "the communicator has no Cartesian topology",
            )),
        }
    }
}

/// An int array argument of `n`.
///
/// # Safety
///
/// `p` holds `n` ints.
pub(super) unsafe fn ints<'a>(p: *const c_int, n: c_int) -> Result<&'a [c_int]> {
    // SAFETY: the caller's contract.
    unsafe { crate::error::array(p, crate::p2p::check_count(n)?) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    call("MPI_Dims_create", Object::None, |_| {
        let n = crate::p2p::check_count(ndims)?;
        if n > 0 && dims.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "the dims array is null"));
        }
        let d = if n == 0 {
            &mut [][..]
        } else {
            // SAFETY: the binding's contract: `ndims` ints.
            unsafe { rbtl::btl::slice_at_mut(dims, n) }
        };
        dims_create(nnodes, d)
    })
}

#[rustfmt::skip]
comm_maker!(PMPI_Cart_create, comm_old,
    (ndims: c_int, dims: *const c_int, periods: *const c_int, _reorder: c_int), comm_cart,
    |mpi| {
        // SAFETY: the binding's contract: `dims` and `periods` hold `ndims` ints.
        unsafe { cart(mpi, comm_old, (ndims, dims, periods)) }
    });

/// `MPI_Cart_create` of the grid of `ndims` dimensions `dims` (`periods`) over
/// `comm_old`: the new communicator (null at a process outside the grid).
///
/// # Safety
///
/// `dims` and `periods` hold `ndims` ints.
unsafe fn cart(
    mpi: &mut Held,
    comm_old: Handle,
    (ndims, dims, periods): (c_int, *const c_int, *const c_int),
) -> Result<Handle> {
    // SAFETY: the caller's contract.
    let (d, p) = unsafe {
        (
            ints(dims, ndims)?.to_vec(),
            ints(periods, ndims)?
                .iter()
                .map(|&x| x != 0)
                .collect::<Vec<_>>(),
        )
    };
    if d.iter().any(|&x| x <= 0) {
        return Err(Error::new(
            MPI_ERR_DIMS,
            format!("dimensions {d:?} are not all positive"),
        ));
    }
    let cells: i64 = d.iter().map(|&x| i64::from(x)).product();
    let c = mpi.comm(comm_old)?;
    over_intracommunicator(c, "a grid")?;
    if cells > i64::from(c.size()) {
        return Err(Error::new(
            MPI_ERR_DIMS,
            format!(
                "a grid of {cells} cells needs more processes than the {} of the communicator",
                c.size()
            ),
        ));
    }
    let rank = c.rank as i64;
    let h = super::create::split(
        mpi,
        comm_old,
        if rank < cells { 0 } else { MPI_UNDEFINED },
        0,
    )?;
    if h != MPI_COMM_NULL {
        mpi.comm_mut(h)?.topo = Some(Topology::Cart {
            dims: d,
            periods: p,
        });
    }
    Ok(h)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Cart_map(
    comm: Handle,
    ndims: c_int,
    dims: *const c_int,
    _periods: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    call("MPI_Cart_map", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        let d = unsafe { ints(dims, ndims) }?;
        let cells: i64 = d.iter().map(|&x| i64::from(x)).product();
        let r = mpi.comm(comm)?.rank as i64;
        let r = if r < cells { r as c_int } else { MPI_UNDEFINED };
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(newrank, r, "newrank") }
    })
}

query_binding!(PMPI_Cartdim_get, comm, Object::Comm(comm), |mpi| {
    let (d, _) = mpi.cart(comm)?;
} => ndims: c_int = d.len() as c_int);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Cart_get(
    comm: Handle,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> c_int {
    call("MPI_Cart_get", Object::Comm(comm), |mpi| {
        let (d, p) = mpi.cart(comm)?;
        let c = Topology::coords(&d, mpi.comm(comm)?.rank as c_int);
        if maxdims > 0 {
            for (a, what) in [(dims, "dims"), (periods, "periods"), (coords, "coords")] {
                non_null(a, MPI_ERR_ARG, what)?;
            }
        }
        let n = (maxdims.max(0) as usize).min(d.len());
        for i in 0..n {
            // SAFETY: each array holds `maxdims` ints (checked not null).
            unsafe {
                dims.add(i).write(d[i]);
                periods.add(i).write(c_int::from(p[i]));
                coords.add(i).write(c[i]);
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Cart_rank(
    comm: Handle,
    coords: *const c_int,
    rank: *mut c_int,
) -> c_int {
    call("MPI_Cart_rank", Object::Comm(comm), |mpi| {
        let (d, p) = mpi.cart(comm)?;
        // SAFETY: the binding's contract: one int per dimension.
        let c = unsafe { ints(coords, d.len() as c_int) }?;
        let r = Topology::rank(&d, &p, c).ok_or_else(|| {
            Error::new(
                MPI_ERR_ARG,
                format!("coordinates {c:?} are off the grid {d:?}"),
            )
        })?;
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(rank, r, "rank") }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Cart_coords(
    comm: Handle,
    rank: c_int,
    maxdims: c_int,
    coords: *mut c_int,
) -> c_int {
    call("MPI_Cart_coords", Object::Comm(comm), |mpi| {
        let (d, _) = mpi.cart(comm)?;
        let size = mpi.comm(comm)?.size() as c_int;
        if rank < 0 || rank >= size {
            return Err(Error::new(
                MPI_ERR_RANK,
                format!("rank {rank} is not in the grid of {size}"),
            ));
        }
        if maxdims > 0 {
            non_null(coords, MPI_ERR_ARG, "coords")?;
        }
        let c = Topology::coords(&d, rank);
        for (i, v) in c.iter().enumerate().take(maxdims.max(0) as usize) {
            // SAFETY: `coords` holds `maxdims` ints (checked not null).
            unsafe { coords.add(i).write(*v) };
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Cart_shift(
    comm: Handle,
    direction: c_int,
    disp: c_int,
    rank_source: *mut c_int,
    rank_dest: *mut c_int,
) -> c_int {
    call("MPI_Cart_shift", Object::Comm(comm), |mpi| {
        let (d, p) = mpi.cart(comm)?;
        let dir = usize::try_from(direction)
            .ok()
            .filter(|&x| x < d.len())
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_ARG,
                    format!(
                        "direction {direction} is not one of the {} dimensions",
                        d.len()
                    ),
                )
            })?;
        let me = Topology::coords(&d, mpi.comm(comm)?.rank as c_int);
        let at = |shift: c_int| Topology::shifted(&d, &p, &me, dir, shift);
        non_null(rank_source, MPI_ERR_ARG, "rank_source")?;
        // SAFETY: null or writable (checked not null).
        unsafe {
            crate::error::write_arg(rank_dest, at(disp), "rank_dest")?;
            rank_source.write(at(-disp));
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Cart_sub(
    comm: Handle,
    remain_dims: *const c_int,
    newcomm: *mut Handle,
) -> c_int {
    call_held("MPI_Cart_sub", Object::Comm(comm), |mpi| {
        let (d, p) = mpi.cart(comm)?;
        // SAFETY: one int per dimension.
        let keep: Vec<bool> = unsafe { ints(remain_dims, d.len() as c_int) }?
            .iter()
            .map(|&x| x != 0)
            .collect();
        let me = Topology::coords(&d, mpi.comm(comm)?.rank as c_int);
        // The colour: the coordinates in the dropped dimensions; the key: the rank.
        let mut colour: c_int = 0;
        for i in 0..d.len() {
            if !keep[i] {
                colour = colour * d[i] + me[i];
            }
        }
        let key = mpi.comm(comm)?.rank as c_int;
        let h = super::create::split(mpi, comm, colour, key)?;
        let dims = (0..d.len()).filter(|&i| keep[i]).map(|i| d[i]).collect();
        let periods = (0..d.len()).filter(|&i| keep[i]).map(|i| p[i]).collect();
        mpi.comm_mut(h)?.topo = Some(Topology::Cart { dims, periods });
        // SAFETY: null or writable.
        unsafe { super::api::hand_out(Ok(h), newcomm, |h| mpi.comm_free(h)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Topo_test(comm: Handle, status: *mut c_int) -> c_int {
    call("MPI_Topo_test", Object::Comm(comm), |mpi| {
        let t = match mpi.comm(comm)?.topo {
            Some(Topology::Cart { .. }) => MPI_CART,
            Some(Topology::Graph { .. }) => MPI_GRAPH,
            Some(Topology::DistGraph { .. }) => MPI_DIST_GRAPH,
            None => MPI_UNDEFINED,
        };
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(status, t, "status") }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_are_balanced() {
        let mut d = [0, 0];
        dims_create(12, &mut d).unwrap();
        assert_eq!(d, [4, 3]);
        let mut d = [0, 3, 0];
        dims_create(24, &mut d).unwrap();
        assert_eq!(d, [4, 3, 2]);
        assert!(dims_create(10, &mut [3, 0]).is_err());
        assert!(dims_create(-5, &mut []).is_err() && dims_create(-4, &mut [0, 0]).is_err());
        // The closest largest and smallest, where handing out prime factors one by
        // one gives 28 x 18 and 12 x 7 x 6.
        // Of equally close ones, the larger smallest (20 x 18 x 14 and
        // 25 x 24 x 18 are as close), as MPICH picks.
        let cases: [(c_int, &[c_int]); 6] = [
            (504, &[24, 21]),
            (504, &[9, 8, 7]),
            (13392, &[31, 9, 8, 6]),
            (1, &[1; 5]),
            (5040, &[21, 16, 15]),
            (10800, &[27, 20, 20]),
        ];
        for (n, want) in cases {
            let mut d = vec![0; want.len()];
            dims_create(n, &mut d).unwrap();
            assert_eq!(d, want, "{n} in {} dimensions", want.len());
        }
    }

    #[test]
    fn coordinates_and_ranks() {
        let dims = [2, 3];
        assert_eq!(Topology::coords(&dims, 4), vec![1, 1]);
        assert_eq!(Topology::rank(&dims, &[false, true], &[1, 4]), Some(4));
        assert_eq!(Topology::rank(&dims, &[false, false], &[2, 0]), None);
    }
}
