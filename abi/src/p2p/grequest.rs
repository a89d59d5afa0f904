//! Generalized requests (MPI 4.1, 13.2): operations a program runs itself (a
//! thread of its own, an outside library), which the completion calls then wait for
//! and test like any request, through three functions of the program's: `query_fn`
//! (the status), `free_fn` (its resources) and `cancel_fn`.
//!
//! The program's functions may call MPI (`query_fn` commonly sets the status with
//! `MPI_Status_set_elements`), so each runs outside the library's state:
//! - `query_fn` when the program calls `MPI_Grequest_complete`, the status and error
//!   it gives kept for the call that completes the request (and for
//!   `MPI_Request_get_status`): the standard lets `query_fn` be called several
//!   times; here it is called once, after which nothing the library does changes
//!   the answer (a cancel after completion is too late to succeed);
//! - `free_fn` after the completion call (or `MPI_Request_free`) has taken the
//!   request, once that call has left the state; its error is that call's, if the
//!   call had none; a request freed before it completes is freed (without a query)
//!   when the program completes it;
//! - `cancel_fn` from `MPI_Cancel`, told whether the request has completed.

use crate::entry::call_in_steps;
use crate::error::{class_of, Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::request::Request;
use crate::state::Mpi;

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
    /// The status and error its query gave, once the program completed it.
    pub done: Option<(Status, Option<Error>)>,
    /// Freed (`MPI_Request_free`) before it completed: it goes when it does.
    pub freed: bool,
}

/// The error of the program's function `what`, unless its return code `rc` is
/// `MPI_SUCCESS`: its class (`MPI_ERR_OTHER` for a code that is not MPI's).
fn returned(what: &str, rc: c_int) -> Result<()> {
    if rc == MPI_SUCCESS {
        return Ok(());
    }
    Err(Error::new(
        class_of(rc).unwrap_or(MPI_ERR_OTHER),
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
            Some(Request::Generalized(g)) if g.done.is_none() => Ok(g),
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
            done: None,
            freed: false,
        };
        // SAFETY: the binding's contract: `request` null or writable.
        unsafe { mpi.hand_out(Request::Generalized(Box::new(g)), request) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Grequest_complete(request: Handle) -> c_int {
    call_in_steps("MPI_Grequest_complete", Object::None, || {
        let (callbacks, freed) = global::with(|mpi| {
            let g = mpi.grequest(request)?;
            Ok((g.callbacks, g.freed))
        })?;
        // A request nobody can complete any more has no status to give.
        // SAFETY: outside the state.
        let done = (!freed).then(|| unsafe { callbacks.query() });
        let gone = global::with(|mpi| {
            let g = mpi.grequest(request)?;
            if g.freed {
                mpi.requests.remove(request);
                return Ok(true);
            }
            g.done = done;
            Ok(false)
        })?;
        match gone {
            // SAFETY: outside the state.
            true => unsafe { callbacks.free() },
            false => Ok(()),
        }
    })
}
