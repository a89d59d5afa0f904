//! The constructors of parts of multidimensional arrays (MPI 4.1 §5.1.3-5.1.4):
//! `MPI_Type_create_subarray` (a box of the array) and `MPI_Type_create_darray`
//! (this process's share of an array distributed over a grid of processes, as HPF
//! distributes it). Both enumerate the elements they hold in the array's memory
//! order, one run per row of the fastest dimension, and span the whole array (lower
//! bound 0, extent the array's): what MPI-IO file views are made of.

use super::build::resized;
use super::constructors::{counts, envelope, Form, Wide};
use super::{Envelope, Layout};
use crate::entry::call;
use crate::error::{array, non_null, Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::sync::Arc;

/// `count` ints at `p`, as a vector.
///
/// # Safety
///
/// `p` holds `count` ints.
unsafe fn ints(p: *const c_int, count: usize) -> Result<Vec<c_int>> {
    // SAFETY: the caller's contract.
    Ok(unsafe { array(p, count) }?.to_vec())
}

fn bad(what: String) -> Error {
    Error::new(MPI_ERR_ARG, what)
}

/// The dimensions from slowest to fastest: reversed for Fortran order.
fn slowest_first<T: Clone>(v: &[T], order: c_int) -> Result<Vec<T>> {
    match order {
        MPI_ORDER_C => Ok(v.to_vec()),
        MPI_ORDER_FORTRAN => Ok(v.iter().rev().cloned().collect()),
        o => Err(bad(format!(
            "order {o} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"
        ))),
    }
}

impl Mpi {
    /// The type of the elements of an array of `sizes` (slowest dimension first) of
    /// `oldtype` whose index along each dimension is in `owned[d]` (in increasing
    /// order), spanning the whole array; its handle into `out`.
    fn array_part(
        &mut self,
        sizes: &[usize],
        owned: &[Vec<usize>],
        oldtype: Handle,
        envelope: Envelope,
        out: *mut Handle,
    ) -> Result<()> {
        non_null(out, MPI_ERR_ARG, "new type")?;
        let old = self.dtype_any(oldtype)?.clone();
        let extent = old.extent();
        let too_big = || {
            Error::new(
                MPI_ERR_COUNT,
                "the array's extent overflows the address space",
            )
        };
        // The stride of each dimension, in elements.
        let mut strides = vec![1usize; sizes.len()];
        for d in (0..sizes.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1]
                .checked_mul(sizes[d + 1])
                .ok_or_else(too_big)?;
        }
        let total = strides[0].checked_mul(sizes[0]).ok_or_else(too_big)?;
        let mut l = Layout::new();
        let last = sizes.len() - 1;
        if owned.iter().all(|o| !o.is_empty()) {
            // Every combination of the slower dimensions' indices, in memory order;
            // the fastest dimension's indices in runs of consecutive ones.
            let mut at = vec![0usize; last];
            'rows: loop {
                let base: usize = at
                    .iter()
                    .enumerate()
                    .map(|(d, &k)| owned[d][k] * strides[d])
                    .sum();
                let fast = &owned[last];
                let mut k = 0;
                while k < fast.len() {
                    let start = k;
                    while k + 1 < fast.len() && fast[k + 1] == fast[k] + 1 {
                        k += 1;
                    }
                    let disp = (base + fast[start]) as isize * extent;
                    l.push(disp, &old, k - start + 1);
                    k += 1;
                }
                for d in (0..last).rev() {
                    at[d] += 1;
                    if at[d] < owned[d].len() {
                        continue 'rows;
                    }
                    at[d] = 0;
                }
                break;
            }
        }
        let made = l.finish(false, envelope.clone())?;
        let span = (total as isize).checked_mul(extent).ok_or_else(too_big)?;
        let mut t = resized(&made, 0, span, envelope);
        t.made_of = Arc::from(vec![old]);
        let h = self.types.insert(t)?;
        // SAFETY: checked not null; the binding's contract.
        unsafe { out.write(h) };
        Ok(())
    }
}

/// Room for `n` indices of a dimension; `MPI_ERR_NO_MEM` where they do not fit in
/// memory (the large-count constructors take dimensions of any size).
fn room(n: usize) -> Result<Vec<usize>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::new(
            MPI_ERR_NO_MEM,
            format!("{n} indices of a dimension do not fit in memory"),
        )
    })?;
    Ok(v)
}

/// The indices of `range`, listed (as [`room`] allows).
fn listed(range: std::ops::Range<usize>) -> Result<Vec<usize>> {
    let mut v = room(range.len())?;
    v.extend(range);
    Ok(v)
}

/// The indices of dimension `d` (size `g`, over `p` processes, this one at `c`)
/// that `distrib` with argument `darg` gives this process.
fn distributed(
    d: usize,
    (g, p, c): (usize, usize, usize),
    distrib: c_int,
    darg: c_int,
) -> Result<Vec<usize>> {
    let block = |default: usize| -> Result<usize> {
        match darg {
            MPI_DISTRIBUTE_DFLT_DARG => Ok(default),
            b if b > 0 => Ok(b as usize),
            b => Err(bad(format!("dimension {d}: distribution argument {b}"))),
        }
    };
    match distrib {
        MPI_DISTRIBUTE_NONE if p == 1 => listed(0..g),
        MPI_DISTRIBUTE_NONE => Err(bad(format!(
            "dimension {d}: MPI_DISTRIBUTE_NONE over {p} processes"
        ))),
        MPI_DISTRIBUTE_BLOCK => {
            let b = block(g.div_ceil(p))?;
            if b * p < g {
                return Err(bad(format!(
                    "dimension {d}: blocks of {b} over {p} processes miss some of {g}"
                )));
            }
            listed(c * b..((c + 1) * b).min(g))
        }
        MPI_DISTRIBUTE_CYCLIC => {
            let b = block(1)?;
            let mut v = room((g / (p * b) + 1).saturating_mul(b).min(g))?;
            let mut start = c * b;
            while start < g {
                v.extend(start..(start + b).min(g));
                start += p * b;
            }
            Ok(v)
        }
        x => Err(bad(format!("dimension {d}: distribution {x}"))),
    }
}

/// `MPI_Type_create_subarray` in `form`.
///
/// # Safety
///
/// Each array holds `ndims` items.
unsafe fn subarray<T: Wide>(
    (name, form): (&str, Form),
    ndims: c_int,
    (sizes, subsizes, starts): (*const T, *const T, *const T),
    order: c_int,
    oldtype: Handle,
    out: *mut Handle,
) -> c_int {
    call(name, Object::None, |mpi| {
        let n = usize::try_from(ndims)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| bad(format!("ndims {ndims}")))?;
        // SAFETY: the caller's contract: `ndims` of each.
        let (sizes, subsizes, starts) =
            unsafe { (counts(sizes, n)?, counts(subsizes, n)?, counts(starts, n)?) };
        let mut owned = Vec::with_capacity(n);
        let mut dims = Vec::with_capacity(n);
        for d in 0..n {
            let (g, s, a) = (sizes[d], subsizes[d], starts[d]);
            if g < 1 || s < 0 || a < 0 || s > g || a > g - s {
                return Err(bad(format!(
                    "dimension {d}: a subarray of {s} from {a} in an array of {g}"
                )));
            }
            dims.push(g as usize);
            owned.push(listed(a as usize..(a + s) as usize)?);
        }
        let wide = [&sizes[..], &subsizes, &starts].concat();
        let e = match form {
            Form::Int => envelope(
                form,
                MPI_COMBINER_SUBARRAY,
                &[&[ndims.into()][..], &wide, &[order.into()]].concat(),
                &[],
                vec![oldtype],
            ),
            Form::Large => Envelope {
                ints: vec![ndims, order],
                ..envelope(form, MPI_COMBINER_SUBARRAY, &wide, &[], vec![oldtype])
            },
        };
        let (dims, owned) = (slowest_first(&dims, order)?, slowest_first(&owned, order)?);
        mpi.array_part(&dims, &owned, oldtype, e, out)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_subarray(
    ndims: c_int,
    array_of_sizes: *const c_int,
    array_of_subsizes: *const c_int,
    array_of_starts: *const c_int,
    order: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let arrays = (array_of_sizes, array_of_subsizes, array_of_starts);
    let name = ("MPI_Type_create_subarray", Form::Int);
    // SAFETY: the binding's contract: `ndims` of each.
    unsafe { subarray(name, ndims, arrays, order, oldtype, newtype) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_subarray_c(
    ndims: c_int,
    array_of_sizes: *const Count,
    array_of_subsizes: *const Count,
    array_of_starts: *const Count,
    order: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let arrays = (array_of_sizes, array_of_subsizes, array_of_starts);
    let name = ("MPI_Type_create_subarray_c", Form::Large);
    // SAFETY: the binding's contract: `ndims` of each.
    unsafe { subarray(name, ndims, arrays, order, oldtype, newtype) }
}

/// How the processes share an array in `MPI_Type_create_darray`: the grid's
/// size, this process's rank in it, and per dimension the distribution, its
/// argument and the processes along it.
struct Grid {
    size: c_int,
    rank: c_int,
    distribs: *const c_int,
    dargs: *const c_int,
    psizes: *const c_int,
}

/// `MPI_Type_create_darray` in `form`.
///
/// # Safety
///
/// Each array holds `ndims` items.
unsafe fn darray<T: Wide>(
    (name, form): (&str, Form),
    grid: Grid,
    (ndims, gsizes): (c_int, *const T),
    order: c_int,
    oldtype: Handle,
    out: *mut Handle,
) -> c_int {
    call(name, Object::None, |mpi| {
        let Grid { size, rank, .. } = grid;
        let n = usize::try_from(ndims)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| bad(format!("ndims {ndims}")))?;
        // SAFETY: the caller's contract: `ndims` of each.
        let (gsizes, distribs, dargs, psizes) = unsafe {
            (
                counts(gsizes, n)?,
                ints(grid.distribs, n)?,
                ints(grid.dargs, n)?,
                ints(grid.psizes, n)?,
            )
        };
        if gsizes.iter().any(|&x| x < 1) || psizes.iter().any(|&x| x < 1) {
            return Err(bad(
                "every global size and process count must be positive".into()
            ));
        }
        let grid: usize = psizes.iter().map(|&p| p as usize).product();
        if size < 1 || grid != size as usize || rank < 0 || rank >= size {
            return Err(bad(format!(
                "rank {rank} of {size} processes on a grid of {grid}"
            )));
        }
        // This process's place in the grid, in row-major order whatever the array's.
        let mut coords = vec![0usize; n];
        let mut r = rank as usize;
        for d in (0..n).rev() {
            coords[d] = r % psizes[d] as usize;
            r /= psizes[d] as usize;
        }
        let mut owned = Vec::with_capacity(n);
        for d in 0..n {
            let place = (gsizes[d] as usize, psizes[d] as usize, coords[d]);
            owned.push(distributed(d, place, distribs[d], dargs[d])?);
        }
        let shares = [&distribs[..], &dargs, &psizes, &[order]].concat();
        let e = match form {
            Form::Int => {
                let head = [size, rank, ndims].map(Count::from);
                let shares: Vec<Count> = shares.iter().map(|&i| i.into()).collect();
                let all = [&head[..], &gsizes, &shares].concat();
                envelope(form, MPI_COMBINER_DARRAY, &all, &[], vec![oldtype])
            }
            Form::Large => Envelope {
                ints: [&[size, rank, ndims][..], &shares].concat(),
                ..envelope(form, MPI_COMBINER_DARRAY, &gsizes, &[], vec![oldtype])
            },
        };
        let dims: Vec<usize> = gsizes.iter().map(|&g| g as usize).collect();
        let (dims, owned) = (slowest_first(&dims, order)?, slowest_first(&owned, order)?);
        mpi.array_part(&dims, &owned, oldtype, e, out)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_darray(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    array_of_gsizes: *const c_int,
    array_of_distribs: *const c_int,
    array_of_dargs: *const c_int,
    array_of_psizes: *const c_int,
    order: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let grid = Grid {
        size,
        rank,
        distribs: array_of_distribs,
        dargs: array_of_dargs,
        psizes: array_of_psizes,
    };
    let name = ("MPI_Type_create_darray", Form::Int);
    // SAFETY: the binding's contract: `ndims` of each.
    unsafe {
        darray(
            name,
            grid,
            (ndims, array_of_gsizes),
            order,
            oldtype,
            newtype,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_darray_c(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    array_of_gsizes: *const Count,
    array_of_distribs: *const c_int,
    array_of_dargs: *const c_int,
    array_of_psizes: *const c_int,
    order: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let grid = Grid {
        size,
        rank,
        distribs: array_of_distribs,
        dargs: array_of_dargs,
        psizes: array_of_psizes,
    };
    let name = ("MPI_Type_create_darray_c", Form::Large);
    // SAFETY: the binding's contract: `ndims` of each.
    unsafe {
        darray(
            name,
            grid,
            (ndims, array_of_gsizes),
            order,
            oldtype,
            newtype,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_and_cyclic_shares_cover_the_dimension_once() {
        for (distrib, darg) in [
            (MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_DFLT_DARG),
            (MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_DFLT_DARG),
            (MPI_DISTRIBUTE_CYCLIC, 2),
        ] {
            let mut all: Vec<usize> = (0..3)
                .flat_map(|c| distributed(0, (10, 3, c), distrib, darg).unwrap())
                .collect();
            all.sort();
            assert_eq!(all, (0..10).collect::<Vec<_>>(), "{distrib} {darg}");
        }
        assert_eq!(
            distributed(
                0,
                (10, 3, 1),
                MPI_DISTRIBUTE_BLOCK,
                MPI_DISTRIBUTE_DFLT_DARG
            )
            .unwrap(),
            vec![4, 5, 6, 7]
        );
        assert_eq!(
            distributed(0, (10, 3, 1), MPI_DISTRIBUTE_CYCLIC, 2).unwrap(),
            vec![2, 3, 8, 9]
        );
        assert!(
            distributed(0, (10, 3, 0), MPI_DISTRIBUTE_BLOCK, 3).is_err(),
            "3 x 3 < 10"
        );
        assert!(distributed(0, (10, 2, 0), MPI_DISTRIBUTE_NONE, 0).is_err());
    }
}
