//! Generalized requests (MPI 4.1, 13.2): operations a program runs itself (a
//! thread of its own, an outside library), which the completion calls then wait for
//! and test like any request, through three functions of the program's: `query_fn`
//! (the status), `free_fn` (its resources) and `cancel_fn`.
//!
//! The program's functions may call MPI (`query_fn` commonly sets the status with
//! `MPI_Status_set_elements`), so each runs outside the library's state:
//! - `query_fn` once the program has called `MPI_Grequest_complete`, by the first
//!   completion call (or `MPI_Request_get_status`) given the request, before it
//!   enters the state ([`before_completion`]); the status and error it gives are kept
//!   for the call that completes the request. A completion call already waiting
//!   inside the state when the program completes the request (another thread's)
//!   cannot leave it: then `MPI_Grequest_complete` runs `query_fn` itself. The
//!   standard lets `query_fn` be called several times; here it is called once,
//!   after which nothing the library does changes the answer (a cancel after
//!   completion is too late to succeed);
//! - `free_fn` after the completion call (or `MPI_Request_free`) has taken the
//!   request, once that call has left the state; its error is that call's, if the
//!   call had none; a request freed before it completes is freed (without a query)
//!   when the program completes it;
//! - `cancel_fn` from `MPI_Cancel`, told whether the request has completed.

use crate::entry::call_in_steps;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::request::Request;
use crate::state::Mpi;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

type QueryFn = unsafe extern "C" fn(*mut c_void, *mut Status) -> c_int;
type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type CancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// The program's functions of a generalized request and their extra state.
#[derive(Clone, Copy, Debug)]
pub struct Callbacks {
    query: usize,
    free: usize,
    cancel: usize,
    extra: usize,
}

/// A generalized request.
pub struct Grequest {
    pub callbacks: Callbacks,
    /// Completed by the program (`MPI_Grequest_complete`).
    pub completed: bool,
    /// The status and error its query gave, once the program completed it.
    pub done: Option<(Status, Option<Error>)>,
    /// Freed (`MPI_Request_free`) before it completed: it goes when it does.
    pub freed: bool,
}

/// The error of the program's function `what`, unless its return code `rc` is
/// `MPI_SUCCESS` ([`Error::returned`]).
fn returned(what: &str, rc: c_int) -> Result<()> {
    if rc == MPI_SUCCESS {
        return Ok(());
    }
    Err(Error::returned(
        rc,
        format!("the generalized request's {what} function returned {rc}"),
    ))
}

impl Callbacks {
    /// Ask `query_fn` for the status.
    ///
    /// # Safety
    ///
    /// Runs the program's function (which may call MPI): called outside the
    /// library's state.
    unsafe fn query(&self) -> (Status, Option<Error>) {
        let mut status = Status::empty();
        // SAFETY: MPI_Grequest_start's caller gave a query function.
        let f = unsafe { std::mem::transmute::<usize, QueryFn>(self.query) };
        // SAFETY: the function gets the standard's arguments.
        let rc = unsafe { f(self.extra as *mut c_void, &mut status) };
        (status, returned("query", rc).err())
    }

    /// Run `free_fn`.
    ///
    /// # Safety
    ///
    /// Runs the program's function (which may call MPI): called outside the
    /// library's state.
    pub unsafe fn free(&self) -> Result<()> {
        // SAFETY: MPI_Grequest_start's caller gave a free function.
        let f = unsafe { std::mem::transmute::<usize, FreeFn>(self.free) };
        // SAFETY: the function gets the standard's arguments.
        returned("free", unsafe { f(self.extra as *mut c_void) })
    }

    /// Run `cancel_fn`, told whether the request has completed.
    ///
    /// # Safety
    ///
    /// Runs the program's function (which may call MPI): called outside the
    /// library's state.
    pub unsafe fn cancel(&self, complete: bool) -> Result<()> {
        // SAFETY: MPI_Grequest_start's caller gave a cancel function.
        let f = unsafe { std::mem::transmute::<usize, CancelFn>(self.cancel) };
        // SAFETY: the function gets the standard's arguments.
        returned("cancel", unsafe {
            f(self.extra as *mut c_void, c_int::from(complete))
        })
    }
}

/// Whether the program ever started a generalized request (else completion calls
/// skip [`before_completion`] at the cost of one load).
static STARTED: AtomicBool = AtomicBool::new(false);

/// Completion calls waiting for a generalized request the program had not completed
/// when they started, across threads: a program completing one meanwhile runs its
/// query itself (such a call cannot leave the state to run it).
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// A completion call counted in `WAITING` while it lives.
pub struct Waiting(());

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Before a completion call (or `MPI_Request_get_status`) on the `count` requests
/// at `reqs` enters the state: run the query functions of the generalized requests
/// among them that the program completed and that were not asked yet, keeping what
/// each gives; count the call in `WAITING` while it lives if one of them is not
/// completed yet. (A state that cannot be read now leaves them to the call itself,
/// which then fails.)
///
/// # Safety
///
/// `reqs` is null or holds `count` handles.
pub unsafe fn before_completion(count: c_int, reqs: *const Handle) -> Option<Waiting> {
    if !STARTED.load(Ordering::Acquire) || reqs.is_null() || count <= 0 {
        return None;
    }
    // SAFETY: the caller's contract.
    let handles = unsafe { std::slice::from_raw_parts(reqs, count as usize) };
    let (todo, waits) = global::with(|mpi| {
        let mut todo = Vec::new();
        let mut waits = false;
        for &h in handles {
            if let Some(Request::Generalized(g)) = mpi.requests.get(h) {
                match (g.completed, &g.done) {
                    (false, _) => waits = true,
                    (true, None) => todo.push((h, g.callbacks)),
                    (true, Some(_)) => {}
                }
            }
        }
        if waits {
            // (Under the state, as MPI_Grequest_complete looks at it.)
            WAITING.fetch_add(1, Ordering::SeqCst);
        }
        Ok((todo, waits))
    })
    .unwrap_or_default();
    for (h, callbacks) in todo {
        // SAFETY: outside the state.
        keep_query(h, unsafe { callbacks.query() });
    }
    waits.then(|| Waiting(()))
}

/// Keep the answer `done` of request `h`'s query, unless it has one already.
fn keep_query(h: Handle, done: (Status, Option<Error>)) {
    let _ = global::with(|mpi| {
        if let Some(Request::Generalized(g)) = mpi.requests.get_mut(h) {
            g.done.get_or_insert(done);
        }
        Ok(())
    });
}

/// Run the free functions of the generalized requests a call has taken, outside
/// the library's state: the first error, once all have run.
pub fn free_all(taken: Vec<Callbacks>) -> Result<()> {
    let mut first = Ok(());
    for c in taken {
        // SAFETY: called by the completion calls once they left the state.
        let r = unsafe { c.free() };
        first = first.and(r);
    }
    first
}

impl Mpi {
    /// The generalized request `h` (not completed yet).
    fn grequest(&mut self, h: Handle) -> Result<&mut Grequest> {
        match self.requests.get_mut(h) {
            Some(Request::Generalized(g)) if !g.completed => Ok(g),
            Some(Request::Generalized(_)) => Err(Error::new(
                MPI_ERR_REQUEST,
                format!("the generalized request {h:#x} was completed already"),
            )),
            _ => Err(Error::new(
                MPI_ERR_REQUEST,
                format!("{h:#x} is not a generalized request"),
            )),
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Grequest_start(
    query_fn: *mut c_void,
    free_fn: *mut c_void,
    cancel_fn: *mut c_void,
    extra_state: *mut c_void,
    request: *mut Handle,
) -> c_int {
    crate::entry::call("MPI_Grequest_start", Object::None, |mpi| {
        if query_fn.is_null() || free_fn.is_null() || cancel_fn.is_null() {
            return Err(Error::new(
                MPI_ERR_ARG,
                "a generalized request needs its query, free and cancel functions",
            ));
        }
        let g = Grequest {
            callbacks: Callbacks {
                query: query_fn as usize,
                free: free_fn as usize,
                cancel: cancel_fn as usize,
                extra: extra_state as usize,
            },
            completed: false,
            done: None,
            freed: false,
        };
        STARTED.store(true, Ordering::Release);
        // SAFETY: the binding's contract: `request` null or writable.
        unsafe { mpi.hand_out(Request::Generalized(Box::new(g)), request) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Grequest_complete(request: Handle) -> c_int {
    call_in_steps("MPI_Grequest_complete", Object::None, || {
        // (Marked under the state, where a completion call starting counts itself
        // as waiting: either it finds the request completed, or this finds it
        // waiting.)
        let (callbacks, freed, waited_for) = global::with(|mpi| {
            let g = mpi.grequest(request)?;
            g.completed = true;
            let (callbacks, freed) = (g.callbacks, g.freed);
            if freed {
                mpi.requests.remove(request);
            }
            Ok((callbacks, freed, WAITING.load(Ordering::SeqCst) > 0))
        })?;
        if freed {
            // A request nobody can complete any more has no status to give.
            // SAFETY: outside the state.
            return unsafe { callbacks.free() };
        }
        if waited_for {
            // SAFETY: outside the state.
            keep_query(request, unsafe { callbacks.query() });
        }
        Ok(())
    })
}
