//! Completing requests: `MPI_Test*` and `MPI_Wait*`.

use crate::entry::call;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::request::{pending_id, Outcome, Request};
use crate::state::Mpi;
use rbtl::msg::IdleWait;

impl Mpi {
    /// Look at request `h` once, without progress: its outcome. A completed request
    /// leaves the table unless it is persistent; a null or inactive one is complete
    /// with an empty status.
    pub fn look(&mut self, h: Handle) -> Result<Outcome> {
        let inactive = Outcome::Complete {
            status: Status::empty(),
            error: None,
            keep: true,
        };
        if h == MPI_REQUEST_NULL {
            return Ok(inactive);
        }
        let Mpi {
            requests,
            msg,
            active,
            ..
        } = self;
        let r = requests.get_mut(h).ok_or_else(|| bad_request(h))?;
        let outcome = match r {
            Request::Done(status) => Outcome::Complete {
                status: *status,
                error: None,
                keep: false,
            },
            Request::P2p(p) => match msg.test(p.id) {
                None => return Ok(Outcome::Pending),
                Some(out) => {
                    let Some(Request::P2p(p)) = requests.remove(h) else {
                        unreachable!("looked at just now")
                    };
                    let (status, error) = p.finish(out);
                    return Ok(Outcome::Complete {
                        status,
                        error,
                        keep: false,
                    });
                }
            },
            Request::Persistent(p) => match p.active.as_ref().map(|a| msg.test(a.id)) {
                None => match p.done.take() {
                    Some(status) => Outcome::Complete {
                        status,
                        error: None,
                        keep: true,
                    },
                    None => inactive,
                },
                Some(None) => Outcome::Pending,
                Some(Some(out)) => {
                    let a = p.active.take().expect("active");
                    let (status, error) = a.finish(out);
                    Outcome::Complete {
                        status,
                        error,
                        keep: true,
                    }
                }
            },
            Request::Coll(s) => match s.outcome() {
                None => return Ok(Outcome::Pending),
                Some(result) => {
                    active.retain(|a| *a != h);
                    requests.remove(h);
                    Outcome::Complete {
                        status: Status::empty(),
                        error: result.err(),
                        keep: false,
                    }
                }
            },
        };
        if let Outcome::Complete { keep: false, .. } = outcome {
            requests.remove(h);
        }
        Ok(outcome)
    }

    /// Progress until `step` says the wait is over. Each round `step` looks
    /// (without progress); when asked (`look` true, every so many idle rounds) it
    /// also names the message-layer request it needs, so that a wait for a silent or
    /// failed peer ends as the message layer's waits do (see `rbtl::msg`).
    pub fn wait_for(&mut self, mut step: impl FnMut(&mut Mpi, bool) -> Result<Step>) -> Result<()> {
        let mut idle = IdleWait::new();
        let mut look = false;
        loop {
            match step(self, look)? {
                Step::Done => return Ok(()),
                Step::Pending(Some(id)) if look => self.msg.look_at(id, &mut idle),
                Step::Pending(_) => {}
            }
            look = false;
            if self.progress() > 0 {
                idle.busy();
            } else if idle.idle() {
                look = true;
            }
        }
    }

    /// The message-layer request request `h` waits on.
    pub fn pending_of(&self, h: Handle) -> Option<rbtl::msg::ReqId> {
        self.requests.get(h).and_then(pending_id)
    }

    /// `MPI_Wait`: the status and error of `*h`, which becomes null unless persistent.
    pub fn wait(&mut self, h: &mut Handle) -> Result<(Status, Option<Error>)> {
        let mut out = None;
        let handle = *h;
        self.wait_for(|mpi, look| {
            if let Outcome::Complete {
                status,
                error,
                keep,
            } = mpi.look(handle)?
            {
                out = Some((status, error, keep));
                return Ok(Step::Done);
            }
            Ok(Step::Pending(
                look.then(|| mpi.pending_of(handle)).flatten(),
            ))
        })?;
        let (status, error, keep) = out.expect("set when done");
        if !keep {
            *h = MPI_REQUEST_NULL;
        }
        Ok((status, error))
    }
}

/// Where a wait stands after a look.
pub enum Step {
    Done,
    /// Not yet; the request it needs, when asked for.
    Pending(Option<rbtl::msg::ReqId>),
}

#[cold]
fn bad_request(h: Handle) -> Error {
    Error::new(
        MPI_ERR_REQUEST,
        format!(
            "{h:#x} is not a request (completed and freed already, or a handle of another kind)"
        ),
    )
}

/// Store a request's status: into `statuses[i]`, if given.
///
/// # Safety
///
/// `statuses` is null (`MPI_STATUSES_IGNORE`) or holds at least `i + 1` statuses.
unsafe fn put_status(statuses: *mut Status, i: usize, s: Status) {
    if !statuses.is_null() {
        // SAFETY: the caller's contract.
        unsafe { statuses.add(i).write(s) };
    }
}

/// A wait on an array of requests: done, or the first one still running (when
/// asked for).
fn pending(mpi: &Mpi, done: bool, look: bool, reqs: &[Handle]) -> Step {
    if done {
        return Step::Done;
    }
    Step::Pending(if look {
        reqs.iter().find_map(|h| mpi.pending_of(*h))
    } else {
        None
    })
}

/// The requests of an array argument.
///
/// # Safety
///
/// `reqs` holds `count` handles (when `count` > 0).
unsafe fn handles<'a>(count: c_int, reqs: *mut Handle) -> Result<&'a mut [Handle]> {
    let n = crate::p2p::check_count(count)?;
    if n == 0 {
        return Ok(&mut []);
    }
    if reqs.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "the array of requests is null"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(reqs, n) })
}

/// The error of a call that completed several requests: `MPI_ERR_IN_STATUS`, each
/// status's `MPI_ERROR` set, when one of them failed.
fn in_status(errors: &[Option<Error>]) -> Result<()> {
    match errors.iter().flatten().next() {
        None => Ok(()),
        Some(first) => Err(Error::new(
            MPI_ERR_IN_STATUS,
            format!(
                "a request failed (its status holds its error): {}",
                first.message
            ),
        )),
    }
}

/// The `MPI_ERROR` field of a completed request's status.
fn with_error(mut s: Status, e: &Option<Error>) -> Status {
    s.error = e.as_ref().map_or(MPI_SUCCESS, crate::error::code_of);
    s
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Wait(request: *mut Handle, status: *mut Status) -> c_int {
    call("MPI_Wait", Object::None, |mpi| {
        if request.is_null() {
            return Err(Error::new(MPI_ERR_REQUEST, "the request pointer is null"));
        }
        // SAFETY: the binding's contract: `request` points to a handle.
        let h = unsafe { &mut *request };
        let (s, e) = mpi.wait(h)?;
        // SAFETY: `status` is null (ignored) or points to a status.
        unsafe { put(status, s) };
        e.map_or(Ok(()), Err)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Test(
    request: *mut Handle,
    flag: *mut c_int,
    status: *mut Status,
) -> c_int {
    call("MPI_Test", Object::None, |mpi| {
        if request.is_null() || flag.is_null() {
            return Err(Error::new(
                MPI_ERR_ARG,
                "the request or flag pointer is null",
            ));
        }
        // SAFETY: the binding's contract.
        let h = unsafe { &mut *request };
        mpi.progress();
        match mpi.look(*h)? {
            Outcome::Pending => {
                // SAFETY: checked not null.
                unsafe { flag.write(0) };
                Ok(())
            }
            Outcome::Complete {
                status: s,
                error,
                keep,
            } => {
                if !keep {
                    *h = MPI_REQUEST_NULL;
                }
                // SAFETY: checked not null; `status` null or valid.
                unsafe {
                    flag.write(1);
                    put(status, s);
                }
                error.map_or(Ok(()), Err)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Waitall(
    count: c_int,
    array_of_requests: *mut Handle,
    array_of_statuses: *mut Status,
) -> c_int {
    call("MPI_Waitall", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        let reqs = unsafe { handles(count, array_of_requests) }?;
        let mut errors: Vec<Option<Error>> = vec![None; reqs.len()];
        let mut left = reqs.iter().filter(|h| **h != MPI_REQUEST_NULL).count();
        for (i, h) in reqs.iter().enumerate() {
            if *h == MPI_REQUEST_NULL {
                // SAFETY: `array_of_statuses` is ignored or holds `count` statuses.
                unsafe { put_status(array_of_statuses, i, Status::empty()) };
            }
        }
        let mut finished = vec![false; reqs.len()];
        mpi.wait_for(|mpi, look| {
            for i in 0..reqs.len() {
                let h = reqs[i];
                if h == MPI_REQUEST_NULL || finished[i] {
                    continue;
                }
                if let Outcome::Complete {
                    status,
                    error,
                    keep,
                } = mpi.look(h)?
                {
                    // SAFETY: as above.
                    unsafe { put_status(array_of_statuses, i, with_error(status, &error)) };
                    errors[i] = error;
                    if !keep {
                        reqs[i] = MPI_REQUEST_NULL;
                    } else {
                        // A persistent request stays, inactive: not looked at again.
                        finished[i] = true;
                    }
                    left -= 1;
                }
            }
            Ok(pending(mpi, left == 0, look, reqs))
        })?;
        in_status(&errors)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Testall(
    count: c_int,
    array_of_requests: *mut Handle,
    flag: *mut c_int,
    array_of_statuses: *mut Status,
) -> c_int {
    call("MPI_Testall", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        let reqs = unsafe { handles(count, array_of_requests) }?;
        if flag.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "the flag pointer is null"));
        }
        mpi.progress();
        // All or nothing: look without completing first.
        let all = reqs.iter().all(|&h| match mpi.requests.get(h) {
            None => true,
            Some(Request::P2p(p)) => mpi.msg.is_complete(p.id),
            Some(Request::Persistent(p)) => {
                p.active.as_ref().is_none_or(|a| mpi.msg.is_complete(a.id))
            }
            Some(Request::Done(_)) => true,
            Some(Request::Coll(s)) => s.is_done(),
        });
        if !all {
            // SAFETY: checked not null.
            unsafe { flag.write(0) };
            return Ok(());
        }
        let mut errors = vec![None; reqs.len()];
        for (i, h) in reqs.iter_mut().enumerate() {
            if let Outcome::Complete {
                status,
                error,
                keep,
            } = mpi.look(*h)?
            {
                // SAFETY: ignored or `count` statuses.
                unsafe { put_status(array_of_statuses, i, with_error(status, &error)) };
                errors[i] = error;
                if !keep {
                    *h = MPI_REQUEST_NULL;
                }
            }
        }
        // SAFETY: checked not null.
        unsafe { flag.write(1) };
        in_status(&errors)
    })
}

/// Look at the requests in turn, from `start`: the index and outcome of the first
/// complete one among those active.
fn first_complete(
    mpi: &mut Mpi,
    reqs: &mut [Handle],
) -> Result<Option<(usize, Status, Option<Error>)>> {
    for (i, h) in reqs.iter_mut().enumerate() {
        if *h == MPI_REQUEST_NULL || is_inactive(mpi, *h) {
            continue;
        }
        if let Outcome::Complete {
            status,
            error,
            keep,
        } = mpi.look(*h)?
        {
            if !keep {
                *h = MPI_REQUEST_NULL;
            }
            return Ok(Some((i, status, error)));
        }
    }
    Ok(None)
}

/// A persistent request not started.
fn is_inactive(mpi: &Mpi, h: Handle) -> bool {
    matches!(mpi.requests.get(h), Some(Request::Persistent(p)) if p.active.is_none() && p.done.is_none())
}

/// Whether no request of `reqs` is active.
fn none_active(mpi: &Mpi, reqs: &[Handle]) -> bool {
    reqs.iter()
        .all(|&h| h == MPI_REQUEST_NULL || is_inactive(mpi, h))
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Waitany(
    count: c_int,
    array_of_requests: *mut Handle,
    index: *mut c_int,
    status: *mut Status,
) -> c_int {
    call("MPI_Waitany", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        let reqs = unsafe { handles(count, array_of_requests) }?;
        if index.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "the index pointer is null"));
        }
        if none_active(mpi, reqs) {
            // SAFETY: checked not null; `status` null or valid.
            unsafe {
                index.write(MPI_UNDEFINED);
                put(status, Status::empty());
            }
            return Ok(());
        }
        let mut found = None;
        mpi.wait_for(|mpi, look| {
            found = first_complete(mpi, reqs)?;
            Ok(pending(mpi, found.is_some(), look, reqs))
        })?;
        let (i, s, e) = found.expect("set when done");
        // SAFETY: as above.
        unsafe {
            index.write(i as c_int);
            put(status, s);
        }
        e.map_or(Ok(()), Err)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Testany(
    count: c_int,
    array_of_requests: *mut Handle,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut Status,
) -> c_int {
    call("MPI_Testany", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        let reqs = unsafe { handles(count, array_of_requests) }?;
        if index.is_null() || flag.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "the index or flag pointer is null"));
        }
        mpi.progress();
        let (flag_v, index_v, s, e) = if none_active(mpi, reqs) {
            (1, MPI_UNDEFINED, Status::empty(), None)
        } else {
            match first_complete(mpi, reqs)? {
                Some((i, s, e)) => (1, i as c_int, s, e),
                None => (0, MPI_UNDEFINED, Status::empty(), None),
            }
        };
        // SAFETY: checked not null; `status` null or valid.
        unsafe {
            flag.write(flag_v);
            index.write(index_v);
            if flag_v == 1 {
                put(status, s);
            }
        }
        e.map_or(Ok(()), Err)
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
        if *h == MPI_REQUEST_NULL || is_inactive(mpi, *h) {
            continue;
        }
        if let Outcome::Complete {
            status,
            error,
            keep,
        } = mpi.look(*h)?
        {
            if !keep {
                *h = MPI_REQUEST_NULL;
            }
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

#[no_mangle]
pub unsafe extern "C" fn PMPI_Waitsome(
    incount: c_int,
    array_of_requests: *mut Handle,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut Status,
) -> c_int {
    call("MPI_Waitsome", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        let reqs = unsafe { handles(incount, array_of_requests) }?;
        if outcount.is_null() || (!reqs.is_empty() && array_of_indices.is_null()) {
            return Err(Error::new(
                MPI_ERR_ARG,
                "the outcount or indices pointer is null",
            ));
        }
        if none_active(mpi, reqs) {
            // SAFETY: checked not null.
            unsafe { outcount.write(MPI_UNDEFINED) };
            return Ok(());
        }
        let mut errors = Vec::new();
        let mut n = 0;
        mpi.wait_for(|mpi, look| {
            // SAFETY: the binding's contract: `incount` indices and statuses.
            n = unsafe {
                complete_some(mpi, reqs, array_of_indices, array_of_statuses, &mut errors)
            }?;
            Ok(pending(mpi, n > 0, look, reqs))
        })?;
        // SAFETY: checked not null.
        unsafe { outcount.write(n as c_int) };
        in_status(&errors)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Testsome(
    incount: c_int,
    array_of_requests: *mut Handle,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut Status,
) -> c_int {
    call("MPI_Testsome", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        let reqs = unsafe { handles(incount, array_of_requests) }?;
        if outcount.is_null() || (!reqs.is_empty() && array_of_indices.is_null()) {
            return Err(Error::new(
                MPI_ERR_ARG,
                "the outcount or indices pointer is null",
            ));
        }
        if none_active(mpi, reqs) {
            // SAFETY: checked not null.
            unsafe { outcount.write(MPI_UNDEFINED) };
            return Ok(());
        }
        mpi.progress();
        let mut errors = Vec::new();
        // SAFETY: the binding's contract.
        let n =
            unsafe { complete_some(mpi, reqs, array_of_indices, array_of_statuses, &mut errors) }?;
        // SAFETY: checked not null.
        unsafe { outcount.write(n as c_int) };
        in_status(&errors)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Request_free(request: *mut Handle) -> c_int {
    call("MPI_Request_free", Object::None, |mpi| {
        if request.is_null() {
            return Err(Error::new(MPI_ERR_REQUEST, "the request pointer is null"));
        }
        // SAFETY: the binding's contract.
        let h = unsafe { &mut *request };
        mpi.free_request(*h)?;
        *h = MPI_REQUEST_NULL;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Request_get_status(
    request: Handle,
    flag: *mut c_int,
    status: *mut Status,
) -> c_int {
    call("MPI_Request_get_status", Object::None, |mpi| {
        if flag.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "the flag pointer is null"));
        }
        mpi.progress();
        let (done, s) = match mpi.requests.get(request) {
            _ if request == MPI_REQUEST_NULL => (true, Status::empty()),
            None => return Err(bad_request(request)),
            Some(Request::Done(s)) => (true, *s),
            Some(Request::P2p(p)) => (mpi.msg.is_complete(p.id), Status::empty()),
            Some(Request::Persistent(p)) => (
                p.active.as_ref().is_none_or(|a| mpi.msg.is_complete(a.id)),
                Status::empty(),
            ),
            Some(Request::Coll(s)) => (s.is_done(), Status::empty()),
        };
        // SAFETY: checked not null; `status` null or valid.
        unsafe {
            flag.write(c_int::from(done));
            if done {
                put(status, s);
            }
        }
        Ok(())
    })
}

impl Mpi {
    /// `MPI_Request_free`: forget `h`; an operation under way still completes, driven
    /// by progress (its buffers kept until then).
    pub fn free_request(&mut self, h: Handle) -> Result<()> {
        match self.requests.remove(h) {
            None => Err(bad_request(h)),
            Some(r @ Request::P2p(_)) => {
                self.detached.push((r, 0));
                Ok(())
            }
            Some(r @ Request::Coll(_)) => {
                self.active.retain(|a| *a != h);
                self.detached.push((r, 0));
                Ok(())
            }
            Some(Request::Persistent(p)) => {
                if let Some(a) = p.active {
                    self.detached.push((Request::P2p(a), 0));
                }
                Ok(())
            }
            Some(Request::Done(_)) => Ok(()),
        }
    }
}
