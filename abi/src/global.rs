//! The library's one state per process, and the entry to it.
//!
//! MPI is a process-wide library: every call reaches the same state. It lives in a
//! cell entered by one call at a time (`MPI_THREAD_SERIALIZED`): a call made while
//! another is inside, from another thread or from a callback run inside (a
//! program's reduction function in a nonblocking collective), is refused with
//! `MPI_ERR_OTHER` instead of racing. The callbacks that may call MPI run outside
//! the cell, between steps of the call that runs them: error handlers, attribute
//! copy and delete functions, the reduction functions of blocking collectives and
//! of `MPI_Reduce_local`.

use crate::error::{Error, Handler, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Where the library is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Before = 0,
    Running = 1,
    Finalized = 2,
}

struct Global {
    /// Set while a call is inside.
    busy: AtomicBool,
    phase: AtomicU8,
    state: UnsafeCell<Option<Mpi>>,
}

// SAFETY: `state` is reached only by the holder of `busy` (see `enter`), one at a
// time, whatever the thread.
unsafe impl Sync for Global {}

static GLOBAL: Global = Global {
    busy: AtomicBool::new(false),
    phase: AtomicU8::new(Phase::Before as u8),
    state: UnsafeCell::new(None),
};

/// The library's phase.
pub fn phase() -> Phase {
    match GLOBAL.phase.load(Ordering::Acquire) {
        0 => Phase::Before,
        1 => Phase::Running,
        _ => Phase::Finalized,
    }
}

/// The state, held by one call; released when dropped.
struct Entered;

impl Entered {
    #[inline(always)]
    fn try_enter() -> Result<Entered> {
        if GLOBAL.busy.swap(true, Ordering::Acquire) {
            return Err(Error::new(
                MPI_ERR_OTHER,
                "another MPI call is in progress (from another thread, or from a callback of this library): the library gives MPI_THREAD_SERIALIZED",
            ));
        }
        Ok(Entered)
    }
}

impl Drop for Entered {
    #[inline(always)]
    fn drop(&mut self) {
        GLOBAL.busy.store(false, Ordering::Release);
    }
}

/// Run `f` on the state of a running library.
#[inline(always)]
pub fn with<R>(f: impl FnOnce(&mut Mpi) -> Result<R>) -> Result<R> {
    let _entered = Entered::try_enter()?;
    // SAFETY: `busy` is held (by `_entered`) until this returns: nobody else reaches
    // the cell meanwhile.
    let state = unsafe { &mut *GLOBAL.state.get() };
    match state {
        Some(mpi) => f(mpi),
        None => Err(not_running()),
    }
}

#[cold]
fn not_running() -> Error {
    match phase() {
        Phase::Finalized => Error::new(
            MPI_ERR_OTHER,
            "MPI was finalized: no MPI call but a few inquiries is allowed after MPI_Finalize",
        ),
        _ => Error::new(
            MPI_ERR_OTHER,
            "MPI is not initialized: call MPI_Init or MPI_Init_thread first",
        ),
    }
}

/// Make the state with `init` (once in the process's life).
pub fn start(init: impl FnOnce() -> Result<Mpi>) -> Result<()> {
    let _entered = Entered::try_enter()?;
    if phase() != Phase::Before {
        return Err(Error::new(
            MPI_ERR_OTHER,
            "MPI_Init was called twice (or after MPI_Finalize): MPI is initialized once per process",
        ));
    }
    let mpi = init()?;
    // SAFETY: `busy` is held (`_entered`).
    unsafe { *GLOBAL.state.get() = Some(mpi) };
    GLOBAL.phase.store(Phase::Running as u8, Ordering::Release);
    Ok(())
}

/// End the state with `finish`.
pub fn stop(finish: impl FnOnce(Mpi) -> Result<()>) -> Result<()> {
    let _entered = Entered::try_enter()?;
    // SAFETY: `busy` is held (`_entered`).
    let state = unsafe { (*GLOBAL.state.get()).take() };
    let Some(mpi) = state else {
        return Err(not_running());
    };
    GLOBAL
        .phase
        .store(Phase::Finalized as u8, Ordering::Release);
    finish(mpi)
}

/// The error handler of `object` (what an error raised on it does). Before
/// `MPI_Init` and after `MPI_Finalize` errors are fatal, as the standard's initial
/// handler; a call refused because another is inside (from another thread, or from
/// a callback) returns its error: the caller inside a callback can act on it.
pub fn handler_of(object: Object) -> Handler {
    match with(|mpi| Ok(mpi.handler_of(object))) {
        Ok(h) => h,
        Err(_) if phase() == Phase::Running => Handler::Return,
        Err(_) => Handler::Fatal,
    }
}

/// Call the user's error handler `f` on `object` with `code`.
pub fn call_user_handler(f: usize, object: Object, code: c_int) {
    let mut handle = match object {
        Object::None => MPI_COMM_SELF,
        Object::Comm(h) | Object::Win(h) | Object::File(h) | Object::Session(h) => h,
    };
    let mut code = code;
    type HandlerFn = unsafe extern "C" fn(*mut Handle, *mut c_int);
    // SAFETY: `f` came from MPI_*_create_errhandler, whose caller gave a function of
    // the errhandler type; its variadic tail carries nothing (as every implementation).
    let f: HandlerFn = unsafe { std::mem::transmute::<usize, HandlerFn>(f) };
    // SAFETY: the handler gets valid pointers to the handle and the code.
    unsafe { f(&mut handle, &mut code) };
}

/// Print `message` and end the job with `code`: through the process manager where
/// there is one (it ends every rank at once), else by exiting.
pub fn abort_job(code: c_int, message: &str) -> ! {
    let rank = with(|mpi| Ok(mpi.world_rank())).ok();
    match rank {
        Some(r) => eprintln!("[rank {r}] {message}"),
        None => eprintln!("{message}"),
    }
    let _ = with(|mpi| {
        mpi.abort_through_launcher(code, message);
        Ok(())
    });
    std::process::exit(if code == 0 { 1 } else { code & 0xff })
}
