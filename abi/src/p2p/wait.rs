//! Completing requests: `MPI_Test*` and `MPI_Wait*`.

use super::bsend::{flushed, Room};
use super::grequest;
use crate::error::{non_null, raise, Error, Object, Result};
use crate::ffi::*;
use crate::global::{self, Held};
use crate::request::{comm_of, pending_id, Outcome, Request};
use crate::state::Mpi;
use rbtl::msg::IdleWait;

impl Mpi {
    /// Look at request `h` once, without progress: its outcome. A completed request
    /// leaves the table unless it is persistent; a null or inactive one is complete
    /// with an empty status.
    pub fn look(&mut self, h: Handle) -> Result<Outcome> {
        if h == MPI_REQUEST_NULL {
            return Ok(Outcome::inactive(None));
        }
        let mut entry = self.requests.entry(h).ok_or_else(|| bad_request(h))?;
        let comm = comm_of(entry.get());
        let (status, error, keep) = match entry.get_mut() {
            Request::P2p(p) => match self.msg.test(p.id) {
                None => return Ok(Outcome::Pending),
                Some(out) => {
                    let (status, error) = p.finish(out);
                    entry.delete();
                    (status, error, false)
                }
            },
            Request::Done(status) => {
                let status = *status;
                entry.delete();
                (status, None, false)
            }
            Request::Finished(f) => {
                let (status, error) = (f.status, f.error.take());
                entry.delete();
                (status, error, false)
            }
            Request::Flush { owner, upto } => match flushed(&self.detached, *owner, *upto).0 {
                false => return Ok(Outcome::Pending),
                true => {
                    entry.delete();
                    (Status::empty(), None, false)
                }
            },
            Request::Rma(op) => match op.look(&mut self.msg) {
                None => return Ok(Outcome::Pending),
                Some(result) => {
                    entry.delete();
                    (Status::empty(), result.err(), false)
                }
            },
            Request::Generalized(g) => match g.done.take() {
                None => return Ok(Outcome::Pending),
                Some((status, error)) => {
                    self.grequest_frees.push(g.callbacks);
                    entry.delete();
                    (status, error, false)
                }
            },
            Request::Persistent(p) => match p.active.as_ref().map(|a| self.msg.test(a.id)) {
                None => match p.done.take() {
                    Some((status, error)) => (status, error, true),
                    None if p.unposted() => return Ok(Outcome::Pending),
                    None => return Ok(Outcome::inactive(comm)),
                },
                Some(None) => return Ok(Outcome::Pending),
                Some(Some(out)) => {
                    let (status, error) = p.finish_active(out);
                    (status, error, true)
                }
            },
            Request::Coll(s) => match s.outcome() {
                None => return Ok(Outcome::Pending),
                Some(result) => {
                    self.active.retain(|a| *a != h);
                    entry.delete();
                    (Status::empty(), result.err(), false)
                }
            },
            Request::Dup(a) => match &a.outcome {
                None => return Ok(Outcome::Pending),
                Some(result) => {
                    let error = result.as_ref().err().cloned();
                    self.active.retain(|a| *a != h);
                    entry.delete();
                    (Status::empty(), error, false)
                }
            },
            Request::CollInit(c) => {
                let started = c.started;
                return self.look_collective_init(h, started, comm);
            }
        };
        Ok(Outcome::Complete {
            status,
            error,
            keep,
            comm,
        })
    }

    /// The message-layer request request `h` waits on.
    pub fn pending_of(&self, h: Handle) -> Option<rbtl::msg::ReqId> {
        match self.requests.get(h)? {
            Request::CollInit(c) => c.started.and_then(|inner| self.pending_of(inner)),
            Request::Flush { owner, upto } => flushed(&self.detached, *owner, *upto).1,
            r => pending_id(r),
        }
    }
}

impl Held {
    /// Progress until `step` says the wait is over. `step` looks (without progress)
    /// first, then after each round of progress that moved something (nothing
    /// completes otherwise); when asked (`look` true, every so many idle rounds) it
    /// also names the message-layer request it needs, so that a wait for a silent or
    /// failed peer ends as the message layer's waits do (see `rbtl::msg`). Between
    /// rounds other threads' calls go in ([`Held::let_others_in`]): `step` looks
    /// up whatever it needs of the state each time.
    pub fn wait_for(&mut self, mut step: impl FnMut(&mut Mpi, bool) -> Result<Step>) -> Result<()> {
        let mut idle = IdleWait::new();
        let mut look = false;
        let mut moved = true;
        loop {
            if moved || look {
                match step(&mut *self, look)? {
                    Step::Done => return Ok(()),
                    Step::Pending(Some(id)) if look => self.msg.look_at(id, &mut idle),
                    Step::Pending(_) => {}
                }
            }
            // A look may have failed requests (a peer gone): look again after it.
            moved = look;
            look = false;
            if self.progress() > 0 {
                idle.busy();
                moved = true;
            } else if idle.idle() {
                look = true;
            }
            self.let_others_in();
        }
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
                ..
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
pub(super) fn bad_request(h: Handle) -> Error {
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
pub(super) unsafe fn put_status(statuses: *mut Status, i: usize, s: Status) {
    if !statuses.is_null() {
        // SAFETY: the caller's contract.
        unsafe { statuses.add(i).write(s) };
    }
}

/// A wait on an array of requests: done, or the first one still running (when
/// asked for).
pub(super) fn pending(mpi: &Mpi, done: bool, look: bool, reqs: &[Handle]) -> Step {
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
pub(super) unsafe fn handles<'a>(count: c_int, reqs: *mut Handle) -> Result<&'a mut [Handle]> {
    let n = crate::p2p::check_count(count)?;
    if n == 0 {
        return Ok(&mut []);
    }
    if reqs.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "the array of requests is null"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { rbtl::btl::slice_at_mut(reqs, n) })
}

/// The error of a call that completed several requests: `MPI_ERR_IN_STATUS`, each
/// status's `MPI_ERROR` set, when one of them failed.
pub(super) fn in_status(errors: &[Option<Error>]) -> Result<()> {
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

/// Run completion call `name` as `f`, which notes in its second argument the
/// communicator of the request whose error it returns: such an error goes through
/// that communicator's error handler (as in MPICH and Open MPI), any other (a bad
/// request handle, a null pointer, a generalized request's free function) through
/// `MPI_COMM_SELF`'s. The free functions of the generalized requests it took run
/// once it has left the state.
pub(super) fn complete(
    name: &str,
    f: impl FnOnce(&mut Held, &mut Option<Handle>) -> Result<()>,
) -> c_int {
    let mut comm = None;
    let mut taken = Vec::new();
    let done = global::with_held(|mpi| {
        let r = f(mpi, &mut comm);
        if !mpi.grequest_frees.is_empty() {
            taken = std::mem::take(&mut mpi.grequest_frees);
        }
        r
    });
    let freed = match taken.is_empty() {
        true => Ok(()),
        false => grequest::free_all(taken),
    };
    match (done, freed) {
        (Ok(()), Ok(())) => MPI_SUCCESS,
        (Err(e), _) => raise(name, comm.map_or(Object::None, Object::Comm), e),
        (Ok(()), Err(e)) => raise(name, Object::None, e),
    }
}

/// Run completion call `name` (as [`complete`]) over an array argument of requests
/// (or the error of reading it, [`handles`]): `f` is given them and the
/// communicator of each.
pub(super) fn complete_array(
    name: &str,
    reqs: Result<&mut [Handle]>,
    f: impl FnOnce(&mut Held, &mut [Handle], &[Option<Handle>], &mut Option<Handle>) -> Result<()>,
) -> c_int {
    let _waiting = match &reqs {
        // SAFETY: the handles of the array argument.
        Ok(r) => unsafe { grequest::before_completion(r.len() as c_int, r.as_ptr()) },
        Err(_) => None,
    };
    complete(name, |mpi, comm| {
        let reqs = reqs?;
        let of = comms(mpi, reqs);
        f(mpi, reqs, &of, comm)
    })
}

/// The communicator of each request of `reqs` (`None` for a null one).
pub(super) fn comms(mpi: &Mpi, reqs: &[Handle]) -> Vec<Option<Handle>> {
    reqs.iter()
        .map(|h| mpi.requests.get(*h).and_then(comm_of))
        .collect()
}

/// The `MPI_ERROR` field of a completed request's status.
pub(super) fn with_error(mut s: Status, e: &Option<Error>) -> Status {
    s.error = e.as_ref().map_or(MPI_SUCCESS, crate::error::code_of);
    s
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Wait(request: *mut Handle, status: *mut Status) -> c_int {
    // SAFETY: the binding's contract: null or a handle.
    let _waiting = unsafe { grequest::before_completion(1, request) };
    complete("MPI_Wait", |mpi, comm| {
        non_null(request, MPI_ERR_REQUEST, "request")?;
        // SAFETY: the binding's contract: `request` points to a handle.
        let h = unsafe { &mut *request };
        let (c, null) = (
            mpi.requests.get(*h).and_then(comm_of),
            *h == MPI_REQUEST_NULL,
        );
        let (s, e) = mpi.wait(h)?;
        // SAFETY: `status` is null (ignored) or points to a status.
        unsafe {
            match null {
                true => crate::p2p::put_empty(status),
                false => crate::p2p::put_one(status, s),
            }
        }
        *comm = c;
        e.map_or(Ok(()), Err)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Test(
    request: *mut Handle,
    flag: *mut c_int,
    status: *mut Status,
) -> c_int {
    // SAFETY: the binding's contract: null or a handle.
    let _waiting = unsafe { grequest::before_completion(1, request) };
    complete("MPI_Test", |mpi, comm| {
        non_null(request, MPI_ERR_ARG, "request")?;
        non_null(flag, MPI_ERR_ARG, "flag")?;
        // SAFETY: the binding's contract.
        let h = unsafe { &mut *request };
        mpi.progress();
        *comm = mpi.requests.get(*h).and_then(comm_of);
        let null = *h == MPI_REQUEST_NULL;
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
                ..
            } => {
                if !keep {
                    *h = MPI_REQUEST_NULL;
                }
                // SAFETY: checked not null; `status` null or valid.
                unsafe {
                    flag.write(1);
                    match null {
                        true => crate::p2p::put_empty(status),
                        false => crate::p2p::put_one(status, s),
                    }
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
    // SAFETY: the binding's contract: null or `count` handles.
    let _waiting = unsafe { grequest::before_completion(count, array_of_requests) };
    complete("MPI_Waitall", |mpi, comm| {
        // SAFETY: the binding's contract.
        let reqs = unsafe { handles(count, array_of_requests) }?;
        let mut errors: Vec<Option<Error>> = vec![None; reqs.len()];
        // The communicator of the first request that failed.
        let mut failed = None;
        let mut left = reqs.iter().filter(|h| **h != MPI_REQUEST_NULL).count();
        for (i, h) in reqs.iter().enumerate() {
            if *h == MPI_REQUEST_NULL {
                // SAFETY: `array_of_statuses` is ignored or holds `count` statuses.
                unsafe { put_status(array_of_statuses, i, Status::empty()) };
            }
        }
        let mut finished = vec![false; reqs.len()];
        // The requests are taken in order: those before `next` are done, and a look
        // stops at the first still running (all must end, so later ones can wait).
        let mut next = 0;
        mpi.wait_for(|mpi, look| {
            while next < reqs.len() {
                let h = reqs[next];
                if h == MPI_REQUEST_NULL || finished[next] {
                    next += 1;
                    continue;
                }
                let Outcome::Complete {
                    status,
                    error,
                    keep,
                    comm: on,
                } = mpi.look(h)?
                else {
                    break;
                };
                if error.is_some() && failed.is_none() {
                    failed = Some(on);
                }
                // SAFETY: as above.
                unsafe { put_status(array_of_statuses, next, with_error(status, &error)) };
                errors[next] = error;
                if !keep {
                    reqs[next] = MPI_REQUEST_NULL;
                } else {
                    // A persistent request stays, inactive: not looked at again.
                    finished[next] = true;
                }
                left -= 1;
                next += 1;
            }
            Ok(pending(mpi, left == 0, look, &reqs[next.min(reqs.len())..]))
        })?;
        *comm = failed.flatten();
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
    // SAFETY: the binding's contract: null or `count` handles.
    let _waiting = unsafe { grequest::before_completion(count, array_of_requests) };
    complete("MPI_Testall", |mpi, comm| {
        // SAFETY: the binding's contract.
        let reqs = unsafe { handles(count, array_of_requests) }?;
        non_null(flag, MPI_ERR_ARG, "flag")?;
        mpi.progress();
        // All or nothing: look without completing first.
        let all = reqs.iter().all(|&h| match mpi.requests.get(h) {
            None => true,
            Some(Request::P2p(p)) => mpi.msg.is_complete(p.id),
            Some(Request::Persistent(p)) => {
                !p.unposted() && p.active.as_ref().is_none_or(|a| mpi.msg.is_complete(a.id))
            }
            Some(Request::Done(_) | Request::Finished(_)) => true,
            Some(Request::Generalized(g)) => g.done.is_some(),
            Some(Request::Rma(op)) => op.pending.is_idle(),
            Some(Request::Flush { owner, upto }) => flushed(&mpi.detached, *owner, *upto).0,
            Some(Request::Coll(s)) => s.is_done(),
            Some(Request::Dup(a)) => a.is_done(),
            Some(Request::CollInit(c)) => mpi.collective_init_done(c),
        });
        if !all {
            // SAFETY: checked not null.
            unsafe { flag.write(0) };
            return Ok(());
        }
        let mut errors = vec![None; reqs.len()];
        let mut failed = None;
        for (i, h) in reqs.iter_mut().enumerate() {
            if let Outcome::Complete {
                status,
                error,
                keep,
                comm: on,
            } = mpi.look(*h)?
            {
                if error.is_some() && failed.is_none() {
                    failed = Some(on);
                }
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
        *comm = failed.flatten();
        in_status(&errors)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Request_free(request: *mut Handle) -> c_int {
    complete("MPI_Request_free", |mpi, _| {
        non_null(request, MPI_ERR_REQUEST, "request")?;
        // SAFETY: the binding's contract.
        let h = unsafe { &mut *request };
        mpi.free_request(*h)?;
        *h = MPI_REQUEST_NULL;
        Ok(())
    })
}

impl Mpi {
    /// `MPI_Request_free`: forget `h`; an operation under way still completes, driven
    /// by progress (its buffers kept until then).
    pub fn free_request(&mut self, h: Handle) -> Result<()> {
        if let Some(Request::Generalized(g)) = self.requests.get_mut(h) {
            if !g.completed {
                // It goes when the program completes it.
                g.freed = true;
                return Ok(());
            }
        }
        match self.requests.remove(h) {
            None => Err(bad_request(h)),
            Some(r @ Request::P2p(_)) => {
                self.detached.push((r, Room::default()));
                Ok(())
            }
            Some(r @ (Request::Coll(_) | Request::Dup(_))) => {
                self.active.retain(|a| *a != h);
                self.detached.push((r, Room::default()));
                Ok(())
            }
            Some(Request::Persistent(p)) => {
                self.free_persistent(&p);
                if let Some(a) = p.active {
                    self.detached.push((Request::P2p(a), Room::default()));
                }
                Ok(())
            }
            Some(Request::CollInit(c)) => {
                let c = *c;
                // (The start under way was built with its types and operation.)
                self.free_owned(c.own);
                match c.started {
                    // The start under way still completes, driven by progress.
                    Some(inner) => self.free_request(inner),
                    None => Ok(()),
                }
            }
            // (A one-sided operation still completes, in its window's synchronization.)
            Some(
                Request::Done(_) | Request::Finished(_) | Request::Flush { .. } | Request::Rma(_),
            ) => Ok(()),
            Some(Request::Generalized(g)) => {
                self.grequest_frees.push(g.callbacks);
                Ok(())
            }
        }
    }
}
