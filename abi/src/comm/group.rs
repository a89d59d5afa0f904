//! Groups: `MPI_Comm_group` and the `MPI_Group_*` operations.

use super::Group;
use crate::entry::{call, query_binding};
use crate::error::{non_null, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::sync::Arc;

impl Mpi {
    /// The group `h`.
    pub fn group(&self, h: Handle) -> Result<Arc<Group>> {
        match h {
            MPI_GROUP_EMPTY => Ok(Arc::new(Group::new(Vec::new()))),
            _ => self.groups.get(h).cloned().ok_or_else(|| {
                let null = (MPI_GROUP_NULL, "MPI_GROUP_NULL");
                crate::error::bad_handle(h, null, MPI_ERR_GROUP, "a group")
            }),
        }
    }

    /// Hand out `g` as a group handle (`MPI_GROUP_EMPTY` when it is empty).
    ///
    /// # Safety
    ///
    /// `out` is writable.
    pub unsafe fn hand_out_group(&mut self, g: Group, out: *mut Handle) -> Result<()> {
        non_null(out, MPI_ERR_ARG, "group")?;
        let h = if g.size() == 0 {
            MPI_GROUP_EMPTY
        } else {
            self.groups.insert(Arc::new(g))?
        };
        // SAFETY: the caller's contract.
        unsafe { out.write(h) };
        Ok(())
    }
}

/// Rank `r` of a group of `size`, checked.
fn member(r: c_int, size: u32) -> Result<u32> {
    u32::try_from(r).ok().filter(|&r| r < size).ok_or_else(|| {
        Error::new(
            MPI_ERR_RANK,
            format!("rank {r} is not in the group of {size}"),
        )
    })
}

/// The ranks of an array argument, checked against a group of `size`.
///
/// # Safety
///
/// `ranks` holds `n` ints.
unsafe fn ranks_in(ranks: *const c_int, n: c_int, size: u32) -> Result<Vec<u32>> {
    let n = crate::p2p::check_count(n)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if ranks.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "the ranks array is null"));
    }
    // SAFETY: the caller's contract.
    let v = unsafe { rbtl::btl::slice_at(ranks, n) };
    v.iter().map(|&r| member(r, size)).collect()
}

/// The ranks of `MPI_Group_range_incl`/`excl`'s triplets.
///
/// # Safety
///
/// `ranges` holds `n` triplets.
unsafe fn range_ranks(ranges: *mut c_int, n: c_int, size: u32) -> Result<Vec<u32>> {
    let n = crate::p2p::check_count(n)?;
    if n > 0 && ranges.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "the ranges array is null"));
    }
    let mut out = Vec::new();
    for i in 0..n {
        // SAFETY: the caller's contract.
        let [first, last, stride] = unsafe { *ranges.cast::<[c_int; 3]>().add(i) };
        if stride == 0 {
            return Err(Error::new(MPI_ERR_ARG, "a range's stride is 0"));
        }
        let mut r = first;
        while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
            out.push(member(r, size)?);
            r += stride;
        }
    }
    Ok(out)
}

/// A group of `g`'s members at `ranks`.
fn pick(g: &Group, ranks: impl IntoIterator<Item = u32>) -> Result<Group> {
    let v: Vec<u32> = ranks
        .into_iter()
        .map(|r| g.job_rank(r).expect("checked"))
        .collect();
    let mut seen = std::collections::HashSet::new();
    if !v.iter().all(|j| seen.insert(*j)) {
        return Err(Error::new(MPI_ERR_RANK, "a rank is named twice"));
    }
    Ok(Group::new(v).in_session(g.session()))
}

/// `g` without its members at `ranks`.
fn without(g: &Group, ranks: &[u32]) -> Group {
    let out: std::collections::HashSet<u32> = ranks.iter().copied().collect();
    Group::new(
        (0..g.size())
            .filter(|r| !out.contains(r))
            .map(|r| g.job_rank(r).expect("a member"))
            .collect(),
    )
    .in_session(g.session())
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_group(comm: Handle, group: *mut Handle) -> c_int {
    call("MPI_Comm_group", Object::Comm(comm), |mpi| {
        let g = (*mpi.comm(comm)?.group).clone();
        // SAFETY: the binding's contract.
        unsafe { mpi.hand_out_group(g, group) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_remote_group(comm: Handle, group: *mut Handle) -> c_int {
    call("MPI_Comm_remote_group", Object::Comm(comm), |mpi| {
        let g = match &mpi.comm(comm)?.remote {
            Some(r) => (**r).clone(),
            None => return Err(Error::new(MPI_ERR_COMM, "not an intercommunicator")),
        };
        // SAFETY: the binding's contract.
        unsafe { mpi.hand_out_group(g, group) }
    })
}

query_binding!(PMPI_Group_size, group, Object::None, |mpi|
    => size: c_int = mpi.group(group)?.size() as c_int);
query_binding!(PMPI_Group_rank, group, Object::None, |mpi| {
    let g = mpi.group(group)?;
} => rank: c_int = g.rank_of(mpi.world_rank()).map_or(MPI_UNDEFINED, |r| r as c_int));

/// A binding making the group of `group`'s members named by `n` entries of `$list`
/// (read by `$read`: ranks, or ranges of ranks): `$new`, given the group `g` and
/// those `ranks`.
macro_rules! subgroup {
    ($name:ident, $list:ident: $ty:ty, $read:ident, |$g:ident, $ranks:ident| $new:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            group: Handle,
            n: c_int,
            $list: $ty,
            newgroup: *mut Handle,
        ) -> c_int {
            call(&stringify!($name)[1..], Object::None, |mpi| {
                let $g = mpi.group(group)?;
                // SAFETY: the binding's contract.
                let $ranks = unsafe { $read($list, n, $g.size()) }?;
                let new = $new;
                // SAFETY: the binding's contract.
                unsafe { mpi.hand_out_group(new, newgroup) }
            })
        }
    };
}

subgroup!(PMPI_Group_incl, ranks: *const c_int, ranks_in, |g, r| pick(&g, r)?);
subgroup!(PMPI_Group_excl, ranks: *const c_int, ranks_in, |g, r| without(&g, &r));
subgroup!(PMPI_Group_range_incl, ranges: *mut c_int, range_ranks, |g, r| pick(&g, r)?);
subgroup!(PMPI_Group_range_excl, ranges: *mut c_int, range_ranks, |g, r| without(&g, &r));

/// A set operation on two groups: the members of the result, in order.
fn combine(a: &Group, b: &Group, f: impl Fn(&Group, &Group) -> Vec<u32>) -> Group {
    Group::new(f(a, b)).in_session(a.session().or(b.session()))
}

macro_rules! group_op {
    ($name:ident, $label:literal, $f:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            group1: Handle,
            group2: Handle,
            newgroup: *mut Handle,
        ) -> c_int {
            call($label, Object::None, |mpi| {
                let (a, b) = (mpi.group(group1)?, mpi.group(group2)?);
                let g = combine(&a, &b, $f);
                // SAFETY: the binding's contract.
                unsafe { mpi.hand_out_group(g, newgroup) }
            })
        }
    };
}

/// The members of `a`, in order, that are in `b` (`in_b`) or not.
fn sifted(a: &Group, b: &Group, in_b: bool) -> Vec<u32> {
    let kept = |j: &u32| b.rank_of(*j).is_some() == in_b;
    a.ranks().iter().copied().filter(kept).collect()
}

group_op!(PMPI_Group_union, "MPI_Group_union", |a, b| {
    [a.ranks(), &sifted(b, a, false)].concat()
});
group_op!(PMPI_Group_intersection, "MPI_Group_intersection", |a, b| {
    sifted(a, b, true)
});
group_op!(PMPI_Group_difference, "MPI_Group_difference", |a, b| {
    sifted(a, b, false)
});

#[no_mangle]
pub unsafe extern "C" fn PMPI_Group_translate_ranks(
    group1: Handle,
    n: c_int,
    ranks1: *const c_int,
    group2: Handle,
    ranks2: *mut c_int,
) -> c_int {
    call("MPI_Group_translate_ranks", Object::None, |mpi| {
        let (a, b) = (mpi.group(group1)?, mpi.group(group2)?);
        let k = crate::p2p::check_count(n)?;
        if k > 0 && (ranks1.is_null() || ranks2.is_null()) {
            return Err(Error::new(MPI_ERR_ARG, "a ranks array is null"));
        }
        for i in 0..k {
            // SAFETY: both arrays hold `n` ints.
            let r = unsafe { *ranks1.add(i) };
            let out = match r {
                MPI_PROC_NULL => MPI_PROC_NULL,
                r if r < 0 || r as u32 >= a.size() => {
                    return Err(Error::new(
                        MPI_ERR_RANK,
                        format!("rank {r} is not in the first group of {}", a.size()),
                    ))
                }
                r => b
                    .rank_of(a.job_rank(r as u32).expect("checked"))
                    .map_or(MPI_UNDEFINED, |x| x as c_int),
            };
            // SAFETY: as above.
            unsafe { ranks2.add(i).write(out) };
        }
        Ok(())
    })
}

/// `MPI_IDENT`, `MPI_SIMILAR` or `MPI_UNEQUAL`.
pub fn compare(a: &Group, b: &Group) -> c_int {
    if a.ranks() == b.ranks() {
        MPI_IDENT
    } else if a.size() == b.size() && a.ranks().iter().all(|j| b.rank_of(*j).is_some()) {
        MPI_SIMILAR
    } else {
        MPI_UNEQUAL
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Group_compare(
    group1: Handle,
    group2: Handle,
    result: *mut c_int,
) -> c_int {
    call("MPI_Group_compare", Object::None, |mpi| {
        let (a, b) = (mpi.group(group1)?, mpi.group(group2)?);
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(result, compare(&a, &b), "result") }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Group_free(group: *mut Handle) -> c_int {
    call("MPI_Group_free", Object::None, |mpi| {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(group, MPI_ERR_ARG, "group") }?;
        if h != MPI_GROUP_EMPTY {
            mpi.groups.remove(h).ok_or_else(|| {
                Error::new(
                    MPI_ERR_GROUP,
                    format!("{h:#x} is not a group (freed already?)"),
                )
            })?;
        }
        // SAFETY: checked not null.
        unsafe { group.write(MPI_GROUP_NULL) };
        Ok(())
    })
}
