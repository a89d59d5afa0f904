//! Completing one or some of an array of requests: `MPI_Waitany`, `MPI_Testany`,
//! `MPI_Waitsome`, `MPI_Testsome`.

use super::wait::{complete_array, handles, in_status, pending, put_status, with_error};
use crate::error::{non_null, Error, Result};
use crate::ffi::*;
use crate::request::{Outcome, Request};
use crate::state::Mpi;

/// Look at the requests in turn, from `start`: the index and outcome of the first
/// complete one among those active.
fn first_complete(
    mpi: &mut Mpi,
    reqs: &mut [Handle],
) -> Result<Option<(usize, Status, Option<Error>)>> {
    for (i, h) in reqs.iter_mut().enumerate() {
        if let Some((status, error)) = take_complete(mpi, h)? {
            return Ok(Some((i, status, error)));
        }
    }
    Ok(None)
}

/// The outcome of request `h` if it is active and complete (`h` then becomes
/// `MPI_REQUEST_NULL`, unless the request is persistent).
fn take_complete(mpi: &mut Mpi, h: &mut Handle) -> Result<Option<(Status, Option<Error>)>> {
    if *h == MPI_REQUEST_NULL || is_inactive(mpi, *h) {
        return Ok(None);
    }
    match mpi.look(*h)? {
        Outcome::Complete {
            status,
            error,
            keep,
            ..
        } => {
            if !keep {
                *h = MPI_REQUEST_NULL;
            }
            Ok(Some((status, error)))
        }
        _ => Ok(None),
    }
}

/// A persistent request not started.
pub(super) fn is_inactive(mpi: &Mpi, h: Handle) -> bool {
    match mpi.requests.get(h) {
        Some(Request::Persistent(p)) => p.active.is_none() && p.done.is_none() && !p.unposted(),
        Some(Request::CollInit(c)) => c.started.is_none(),
        _ => false,
    }
}

/// Whether no request of `reqs` is active.
fn none_active(mpi: &Mpi, reqs: &[Handle]) -> bool {
    reqs.iter()
        .all(|&h| h == MPI_REQUEST_NULL || is_inactive(mpi, h))
}

/// A binding that completes one (`$how` `any`) or some (`some`) of an array of
/// requests, waiting (`$wait`) or testing; `$out`, made of the arguments after the
/// array, says where the outcome goes.
macro_rules! completion {
    ($name:ident, $how:ident, $wait:literal, ($($arg:ident: $ty:ty),*) => $out:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            count: c_int,
            array_of_requests: *mut Handle,
            $($arg: $ty),*
        ) -> c_int {
            // SAFETY: the binding's contract.
            unsafe { $how(&stringify!($name)[1..], $wait, count, array_of_requests, $out) }
        }
    };
}

completion!(PMPI_Waitany, any, true,
    (index: *mut c_int, status: *mut Status) => (index, std::ptr::null_mut(), status));
completion!(PMPI_Testany, any, false,
    (index: *mut c_int, flag: *mut c_int, status: *mut Status) => (index, flag, status));

/// `MPI_Waitany` (`wait`: until one is done) and `MPI_Testany` (whether one is done
/// after one round of progress, written to `flag`): the index and status of the one
/// done, written to `out`. With no request active, the index is `MPI_UNDEFINED`, the
/// status empty (and the flag set).
///
/// # Safety
///
/// `requests` holds `count` handles; `out` as the bindings' contract says (`flag`
/// is only written by `MPI_Testany`).
unsafe fn any(
    name: &str,
    wait: bool,
    count: c_int,
    requests: *mut Handle,
    (index, flag, status): (*mut c_int, *mut c_int, *mut Status),
) -> c_int {
    // SAFETY: the caller's contract.
    let reqs = unsafe { handles(count, requests) };
    complete_array(name, reqs, |mpi, reqs, of, comm| {
        non_null(index, MPI_ERR_ARG, "index")?;
        if !wait {
            non_null(flag, MPI_ERR_ARG, "flag")?;
            mpi.progress();
        }
        let found = if none_active(mpi, reqs) {
            Some((MPI_UNDEFINED, Status::empty(), None))
        } else {
            let done = if wait {
                let mut found = None;
                mpi.wait_for(|mpi, look| {
                    found = first_complete(mpi, reqs)?;
                    Ok(pending(mpi, found.is_some(), look, reqs))
                })?;
                Some(found.expect("set when done"))
            } else {
                first_complete(mpi, reqs)?
            };
            done.map(|(i, s, e)| {
                *comm = of[i];
                (i as c_int, s, e)
            })
        };
        // SAFETY: checked not null; `status` null or valid.
        unsafe {
            if !wait {
                flag.write(c_int::from(found.is_some()));
            }
            let Some((i, s, e)) = found else {
                index.write(MPI_UNDEFINED);
                return Ok(());
            };
            index.write(i);
            match i {
                MPI_UNDEFINED => crate::p2p::put_empty(status),
                _ => crate::p2p::put_one(status, s),
            }
            e.map_or(Ok(()), Err)
        }
    })
}

/// Complete every request of `reqs` that is done: their indices written to
/// `indices`, statuses to `statuses`; how many.
///
/// # Safety
///
/// `indices` holds `reqs.len()` ints; `statuses` is null or holds as many statuses.
unsafe fn complete_some(
    mpi: &mut Mpi,
    reqs: &mut [Handle],
    indices: *mut c_int,
    statuses: *mut Status,
    errors: &mut Vec<Option<Error>>,
) -> Result<usize> {
    let mut n = 0;
    for (i, h) in reqs.iter_mut().enumerate() {
        if let Some((status, error)) = take_complete(mpi, h)? {
            // SAFETY: the caller's contract; `n` < `reqs.len()`.
            unsafe {
                indices.add(n).write(i as c_int);
                put_status(statuses, n, with_error(status, &error));
            }
            errors.push(error);
            n += 1;
        }
    }
    Ok(n)
}

completion!(PMPI_Waitsome, some, true,
    (outcount: *mut c_int, indices: *mut c_int, statuses: *mut Status) => (outcount, indices, statuses));
completion!(PMPI_Testsome, some, false,
    (outcount: *mut c_int, indices: *mut c_int, statuses: *mut Status) => (outcount, indices, statuses));

/// `MPI_Waitsome` (`wait`: until at least one is done) and `MPI_Testsome` (what is
/// done after one round of progress): the requests done, written to `out` (the
/// count, their indices and statuses).
///
/// # Safety
///
/// `requests` holds `incount` handles; `out` as the bindings' contract says.
unsafe fn some(
    name: &str,
    wait: bool,
    incount: c_int,
    requests: *mut Handle,
    (outcount, indices, statuses): (*mut c_int, *mut c_int, *mut Status),
) -> c_int {
    // SAFETY: the caller's contract.
    let reqs = unsafe { handles(incount, requests) };
    complete_array(name, reqs, |mpi, reqs, of, comm| {
        non_null(outcount, MPI_ERR_ARG, "outcount")?;
        if !reqs.is_empty() {
            non_null(indices, MPI_ERR_ARG, "indices")?;
        }
        if none_active(mpi, reqs) {
            // SAFETY: checked not null.
            unsafe { outcount.write(MPI_UNDEFINED) };
            return Ok(());
        }
        let mut errors = Vec::new();
        let mut n = 0;
        if wait {
            mpi.wait_for(|mpi, look| {
                // SAFETY: the caller's contract: `incount` indices and statuses.
                n = unsafe { complete_some(mpi, reqs, indices, statuses, &mut errors) }?;
                Ok(pending(mpi, n > 0, look, reqs))
            })?;
        } else {
            mpi.progress();
            // SAFETY: as above.
            n = unsafe { complete_some(mpi, reqs, indices, statuses, &mut errors) }?;
        }
        // SAFETY: checked not null.
        unsafe { outcount.write(n as c_int) };
        if let Some(k) = errors.iter().position(Option::is_some) {
            // SAFETY: the first `n` indices were written just now.
            let i = unsafe { *indices.add(k) } as usize;
            *comm = of[i];
        }
        in_status(&errors)
    })
}
