//! Looking at requests without completing them: `MPI_Request_get_status` and the
//! `_all`, `_any` and `_some` forms of MPI 4.1, which never free a request nor
//! make a persistent one inactive.

use super::bsend::flushed;
use super::wait::{bad_request, handles, put_status};
use super::wait_some::is_inactive;
use crate::entry::call;
use crate::error::{non_null, Object, Result};
use crate::ffi::*;
use crate::request::{Finished, Request};
use crate::state::Mpi;

impl Mpi {
    /// The status of request `h` if it has completed, without completing it
    /// (`MPI_Request_get_status`): the outcome of a send or receive is taken from the
    /// message layer and kept in the request for the call that completes it.
    pub(super) fn peek(&mut self, h: Handle) -> Result<Option<Status>> {
        if let Some(Request::CollInit(c)) = self.requests.get(h) {
            // Not started: complete, with an empty status.
            return match c.started {
                None => Ok(Some(Status::empty())),
                Some(inner) => self.peek(inner),
            };
        }
        let Mpi {
            requests,
            msg,
            detached,
            ..
        } = self;
        let r = requests.get_mut(h).ok_or_else(|| bad_request(h))?;
        if let Request::P2p(p) = r {
            let Some(out) = msg.test(p.id) else {
                return Ok(None);
            };
            let Request::P2p(mut p) = std::mem::replace(r, Request::Done(Status::empty())) else {
                unreachable!("matched just now")
            };
            let comm = p.comm;
            let (status, error) = p.finish(out);
            *r = Request::Finished(Box::new(Finished {
                status,
                error,
                comm,
            }));
            return Ok(Some(status));
        }
        Ok(match r {
            Request::Done(s) => Some(*s),
            Request::Finished(f) => Some(f.status),
            Request::Generalized(g) => g.done.as_ref().map(|d| d.0),
            Request::Rma(op) => op.pending.is_idle().then(Status::empty),
            Request::Flush { owner, upto } => {
                flushed(detached, *owner, *upto).0.then(Status::empty)
            }
            Request::Coll(s) => s.is_done().then(Status::empty),
            Request::Dup(a) => a.is_done().then(Status::empty),
            Request::P2p(_) | Request::CollInit(_) => unreachable!("looked at above"),
            Request::Persistent(p) => match (&p.done, p.active.as_ref().map(|a| msg.test(a.id))) {
                (Some((s, _)), _) => Some(*s),
                (None, None) if p.unposted() => None,
                // Not started: complete, with an empty status.
                (None, None) => Some(Status::empty()),
                (None, Some(None)) => None,
                (None, Some(Some(out))) => {
                    let (status, error) = p.finish_active(out);
                    p.done = Some((status, error));
                    Some(status)
                }
            },
        })
    }

    /// What each request of `reqs` is: `None` null or not active (a persistent one
    /// not started), `Some(None)` still running, `Some(Some(status))` complete.
    fn peek_all(&mut self, reqs: &[Handle]) -> Result<Vec<Option<Option<Status>>>> {
        self.progress();
        reqs.iter()
            .map(|&h| match h == MPI_REQUEST_NULL || is_inactive(self, h) {
                true => Ok(None),
                false => self.peek(h).map(Some),
            })
            .collect()
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Request_get_status(
    request: Handle,
    flag: *mut c_int,
    status: *mut Status,
) -> c_int {
    // SAFETY: one handle.
    let _waiting = unsafe { super::grequest::before_completion(1, &request) };
    call("MPI_Request_get_status", Object::None, |mpi| {
        non_null(flag, MPI_ERR_ARG, "flag")?;
        mpi.progress();
        if request == MPI_REQUEST_NULL {
            // SAFETY: checked not null; `status` null or valid.
            unsafe {
                flag.write(1);
                crate::p2p::put_empty(status);
            }
            return Ok(());
        }
        let found = mpi.peek(request)?;
        // SAFETY: checked not null; `status` null or valid.
        unsafe { crate::p2p::put_found(flag, status, found) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Request_get_status_all(
    count: c_int,
    array_of_requests: *mut Handle,
    flag: *mut c_int,
    array_of_statuses: *mut Status,
) -> c_int {
    // SAFETY: the binding's contract: null or `count` handles.
    let _waiting = unsafe { super::grequest::before_completion(count, array_of_requests) };
    call("MPI_Request_get_status_all", Object::None, |mpi| {
        non_null(flag, MPI_ERR_ARG, "flag")?;
        // SAFETY: the binding's contract.
        let reqs = unsafe { handles(count, array_of_requests) }?;
        let seen = mpi.peek_all(reqs)?;
        let all = seen.iter().all(|s| !matches!(s, Some(None)));
        // SAFETY: checked not null; `array_of_statuses` ignored or `count` statuses.
        unsafe {
            flag.write(c_int::from(all));
            if all {
                for (i, s) in seen.iter().enumerate() {
                    put_status(array_of_statuses, i, s.flatten().unwrap_or(Status::empty()));
                }
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Request_get_status_any(
    count: c_int,
    array_of_requests: *mut Handle,
    indx: *mut c_int,
    flag: *mut c_int,
    status: *mut Status,
) -> c_int {
    // SAFETY: the binding's contract: null or `count` handles.
    let _waiting = unsafe { super::grequest::before_completion(count, array_of_requests) };
    call("MPI_Request_get_status_any", Object::None, |mpi| {
        non_null(indx, MPI_ERR_ARG, "indx")?;
        non_null(flag, MPI_ERR_ARG, "flag")?;
        // SAFETY: the binding's contract.
        let reqs = unsafe { handles(count, array_of_requests) }?;
        let seen = mpi.peek_all(reqs)?;
        let found = seen
            .iter()
            .enumerate()
            .find_map(|(i, s)| s.flatten().map(|s| (i as c_int, s)));
        let none_active = seen.iter().all(Option::is_none);
        let (i, f, s) = match found {
            Some((i, s)) => (i, 1, Some(s)),
            // No active request: true, no index, an empty status.
            None if none_active => (MPI_UNDEFINED, 1, Some(Status::empty())),
            None => (MPI_UNDEFINED, 0, None),
        };
        // SAFETY: checked not null; `status` null or valid.
        unsafe {
            indx.write(i);
            flag.write(f);
            match s {
                Some(_) if none_active => crate::p2p::put_empty(status),
                Some(s) => crate::p2p::put_one(status, s),
                None => {}
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Request_get_status_some(
    incount: c_int,
    array_of_requests: *mut Handle,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut Status,
) -> c_int {
    // SAFETY: the binding's contract: null or `incount` handles.
    let _waiting = unsafe { super::grequest::before_completion(incount, array_of_requests) };
    call("MPI_Request_get_status_some", Object::None, |mpi| {
        non_null(outcount, MPI_ERR_ARG, "outcount")?;
        if incount > 0 {
            non_null(array_of_indices, MPI_ERR_ARG, "array_of_indices")?;
        }
        // SAFETY: the binding's contract.
        let reqs = unsafe { handles(incount, array_of_requests) }?;
        let seen = mpi.peek_all(reqs)?;
        if seen.iter().all(Option::is_none) {
            // SAFETY: checked not null.
            unsafe { outcount.write(MPI_UNDEFINED) };
            return Ok(());
        }
        let mut n = 0;
        for (i, s) in seen.iter().enumerate() {
            if let Some(Some(s)) = s {
                // SAFETY: the binding's contract: room for `incount` indices and
                // statuses (or ignored).
                unsafe {
                    array_of_indices.add(n).write(i as c_int);
                    put_status(array_of_statuses, n, *s);
                }
                n += 1;
            }
        }
        // SAFETY: checked not null.
        unsafe { outcount.write(n as c_int) };
        Ok(())
    })
}
