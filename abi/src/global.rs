//! The library's one state per process, and the entry to it.
//!
//! MPI is a process-wide library: every call reaches the same state. It lives in a
//! cell entered by one call at a time. Below `MPI_THREAD_MULTIPLE` a call made
//! while another is inside (from another thread, or from a callback run inside: a
//! program's reduction function in a nonblocking collective) is refused with
//! `MPI_ERR_OTHER` instead of racing. With `MPI_THREAD_MULTIPLE` granted, a call
//! of another thread waits to enter, and a blocking call lets such calls in
//! between its rounds of progress ([`Held::let_others_in`]); a call from a
//! callback of the thread inside is still refused (it would wait for itself).
//! The callbacks that may call MPI run outside the cell, between steps of the
//! call that runs them: error handlers, attribute copy and delete functions, the
//! reduction functions of blocking collectives and of `MPI_Reduce_local`, the
//! functions of generalized requests.

use crate::error::{Error, Handler, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

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
    /// Set once `MPI_THREAD_MULTIPLE` is granted: a call waits for another
    /// thread's to leave instead of being refused.
    multiple: AtomicBool,
    /// With `multiple`: the thread inside ([`this_thread`]; 0 between calls).
    owner: AtomicUsize,
    /// With `multiple`: threads waiting to enter.
    waiting: AtomicUsize,
    /// Blocking calls between two rounds, out of the cell to let others in.
    paused: AtomicUsize,
    phase: AtomicU8,
    state: UnsafeCell<Option<Mpi>>,
}

// SAFETY: `state` is reached only by the holder of `busy` (see `enter`), one at a
// time, whatever the thread: with `MPI_THREAD_MULTIPLE` taken by a locked exchange;
// below it, the program's promise of one call at a time (the flag only looked at).
unsafe impl Sync for Global {}

static GLOBAL: Global = Global {
    busy: AtomicBool::new(false),
    multiple: AtomicBool::new(false),
    owner: AtomicUsize::new(0),
    waiting: AtomicUsize::new(0),
    paused: AtomicUsize::new(0),
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
        if !GLOBAL.multiple.load(Ordering::Acquire) {
            // One call at a time is the program's promise below
            // `MPI_THREAD_MULTIPLE`: the flag is then only looked at, to refuse a
            // call from inside another (a callback's) and one of another thread
            // seen inside. A locked exchange would also wait until every store of
            // the call before (a message into a peer's ring) reached the cache.
            if GLOBAL.busy.load(Ordering::Relaxed) {
                return enter_contended();
            }
            GLOBAL.busy.store(true, Ordering::Relaxed);
            return Ok(Entered);
        }
        if GLOBAL.busy.swap(true, Ordering::Acquire) {
            return enter_contended();
        }
        GLOBAL.owner.store(this_thread(), Ordering::Relaxed);
        count_entry();
        Ok(Entered)
    }
}

impl Drop for Entered {
    #[inline(always)]
    fn drop(&mut self) {
        leave();
    }
}

/// Leave the cell.
#[inline(always)]
fn leave() {
    if GLOBAL.multiple.load(Ordering::Relaxed) {
        GLOBAL.owner.store(0, Ordering::Relaxed);
    }
    GLOBAL.busy.store(false, Ordering::Release);
}

/// A number of the calling thread, unique among the live threads, never 0: the
/// address of a thread-local.
fn this_thread() -> usize {
    thread_local!(static MARK: u8 = const { 0 });
    MARK.with(|m| m as *const u8 as usize)
}

/// Enter the cell that another call holds: wait for it with `MPI_THREAD_MULTIPLE`,
/// unless the caller is the thread inside (a callback's call); else refuse.
#[cold]
fn enter_contended() -> Result<Entered> {
    let multiple = GLOBAL.multiple.load(Ordering::Relaxed);
    if !multiple || GLOBAL.owner.load(Ordering::Relaxed) == this_thread() {
        return Err(Error::new(
            MPI_ERR_OTHER,
            match multiple {
                true => "an MPI call from a callback that this thread's call runs inside the library (a reduction function of a nonblocking collective): only calls that do not enter the library are allowed there",
                false => "another MPI call is in progress (from another thread, or from a callback of this library): the library gives MPI_THREAD_SERIALIZED unless MPI_THREAD_MULTIPLE is asked for",
            },
        ));
    }
    acquire();
    Ok(Entered)
}

/// Take the cell, waiting for its holder (counted in `waiting`, so that a call
/// inside that waits lets this one in): spinning a little, then yielding the
/// processor (the holder may need it, where threads outnumber processors).
/// The caller is the thread inside then.
fn acquire() {
    GLOBAL.waiting.fetch_add(1, Ordering::Relaxed);
    let mut tries = 0u32;
    while GLOBAL.busy.load(Ordering::Relaxed) || GLOBAL.busy.swap(true, Ordering::Acquire) {
        tries = tries.saturating_add(1);
        if tries < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    GLOBAL.waiting.fetch_sub(1, Ordering::Relaxed);
    GLOBAL.owner.store(this_thread(), Ordering::Relaxed);
    count_entry();
}

/// Calls that entered the cell with threads allowed (a count that may lose some:
/// written by the thread inside, read by the progress thread to see whether the
/// program called in lately).
static ENTRIES: AtomicUsize = AtomicUsize::new(0);

/// Count an entry (by the thread inside, without a locked instruction).
#[inline(always)]
fn count_entry() {
    ENTRIES.store(
        ENTRIES.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// How many of the program's calls entered the cell with threads allowed, as far
/// as the count goes: one that changed since the last look says that the program
/// calls in, and drives progress itself.
pub fn entries() -> usize {
    ENTRIES.load(Ordering::Relaxed)
}

/// Grant `MPI_THREAD_MULTIPLE`: from now on calls of other threads wait to enter.
pub fn allow_threads() {
    GLOBAL.multiple.store(true, Ordering::Release);
}

/// Whether threads wait to enter (with `MPI_THREAD_MULTIPLE`): a call inside
/// that waits should leave the cell to them.
#[inline(always)]
pub fn others_waiting() -> bool {
    GLOBAL.waiting.load(Ordering::Relaxed) > 0
}

/// Between the steps of a call made outside the cell: let the threads waiting
/// to enter go first.
#[inline(always)]
pub fn yield_to_waiting() {
    if others_waiting() {
        std::thread::yield_now();
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

/// Run `f` on the state of a running library if no call is inside, without
/// waiting and without being counted among the threads that wait to enter (a
/// blocking call inside would leave the cell to them between its rounds): `None`
/// where the cell is taken or the library does not run. For the library's own
/// thread ([`crate::progress_thread`]), once threads are allowed.
pub fn try_with<R>(f: impl FnOnce(&mut Mpi) -> R) -> Option<R> {
    if GLOBAL.busy.load(Ordering::Relaxed) || GLOBAL.busy.swap(true, Ordering::Acquire) {
        return None;
    }
    GLOBAL.owner.store(this_thread(), Ordering::Relaxed);
    let _entered = Entered;
    // SAFETY: `busy` is held (by `_entered`) until this returns: nobody else reaches
    // the cell meanwhile.
    let state = unsafe { &mut *GLOBAL.state.get() };
    state.as_mut().map(f)
}

/// The state held by a blocking call, which may let other threads' calls in
/// while it waits ([`Held::let_others_in`]). It gives the state for as long as
/// the borrow of the `Held` lasts, each time a reference made afresh from the
/// cell: no reference into the state outlives a borrow, so none is alive while
/// another thread's call is inside.
pub struct Held {
    _entered: Entered,
}

impl Held {
    /// The state.
    ///
    /// # Safety
    ///
    /// The cell is held, and the reference is not used once it is left.
    #[inline(always)]
    unsafe fn state<'a>() -> &'a mut Mpi {
        // SAFETY: the caller holds the cell. The state is there: `with_held` made
        // the `Held` only on a running library, and it stays while a `Held`
        // lives (`stop` needs the cell, and refuses while a call has let others
        // in, `paused`).
        unsafe { (*GLOBAL.state.get()).as_mut().unwrap_unchecked() }
    }
}

impl Deref for Held {
    type Target = Mpi;
    #[inline(always)]
    fn deref(&self) -> &Mpi {
        // SAFETY: the cell is held (`_entered`) for as long as the borrow of
        // `self`, which the reference lives no longer than.
        unsafe { Held::state() }
    }
}

impl DerefMut for Held {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Mpi {
        // SAFETY: as `deref`; the `&mut self` borrow is the only way in.
        unsafe { Held::state() }
    }
}

impl Held {
    /// With `MPI_THREAD_MULTIPLE` and threads waiting to enter: leave the cell to
    /// them and enter again. The state may have changed meanwhile (requests,
    /// communicators): whatever the caller needs of it, it looks up again.
    #[inline(always)]
    pub fn let_others_in(&mut self) {
        if others_waiting() {
            self.pause();
        }
    }

    #[cold]
    fn pause(&mut self) {
        GLOBAL.paused.fetch_add(1, Ordering::Relaxed);
        leave();
        std::thread::yield_now();
        // Waiting now, as the others: the one inside lets this call in in turn.
        acquire();
        GLOBAL.paused.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Run `f` on the state of a running library, given as a [`Held`] (a blocking
/// call that lets other threads in while it waits).
#[inline(always)]
pub fn with_held<R>(f: impl FnOnce(&mut Held) -> Result<R>) -> Result<R> {
    let entered = Entered::try_enter()?;
    // SAFETY: `busy` is held (by `entered`).
    if unsafe { (*GLOBAL.state.get()).is_none() } {
        return Err(not_running());
    }
    f(&mut Held { _entered: entered })
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

/// End the state with `finish`, unless `keep` says it is still needed (decided
/// while holding it, so that no other call comes between).
pub fn stop(keep: impl FnOnce(&Mpi) -> bool, finish: impl FnOnce(Mpi) -> Result<()>) -> Result<()> {
    let _entered = Entered::try_enter()?;
    if GLOBAL.paused.load(Ordering::Relaxed) > 0 {
        return Err(Error::new(
            MPI_ERR_OTHER,
            "MPI_Finalize while a blocking call of another thread is under way: every thread's calls must end first",
        ));
    }
    // SAFETY: `busy` is held (`_entered`).
    if unsafe { (*GLOBAL.state.get()).as_ref() }.is_some_and(keep) {
        return Ok(());
    }
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
    // (A handler given to the call needs no state, which may not be there yet: the
    // program's handlers live outside it.)
    match object {
        Object::Given(MPI_ERRORS_RETURN, _) => return Handler::Return,
        Object::Given(MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT, _) => return Handler::Fatal,
        Object::Given(h, _) => {
            if let Some(e) = crate::comm::api::errhandler(h) {
                return Handler::User(e.function);
            }
        }
        _ => {}
    }
    match with(|mpi| Ok(mpi.handler_of(object))) {
        Ok(h) => h,
        Err(_) if phase() == Phase::Running => Handler::Return,
        Err(_) => Handler::Fatal,
    }
}

/// Call the user's error handler `f` on `object` with `code`: the code it leaves,
/// which the call that raised the error returns (the handler's second argument is
/// "the error code to be returned by the MPI routine", MPI 4.1, 9.3).
pub fn call_user_handler(f: usize, object: Object, code: c_int) -> c_int {
    let mut handle = match object {
        Object::None => with(|mpi| Ok(mpi.no_object_comm())).unwrap_or(MPI_COMM_SELF),
        Object::Comm(h) | Object::Win(h) | Object::File(h) | Object::Session(h) => h,
        Object::Given(_, null) => null,
    };
    let mut code = code;
    type HandlerFn = unsafe extern "C" fn(*mut Handle, *mut c_int);
    // SAFETY: `f` came from MPI_*_create_errhandler, whose caller gave a function of
    // the errhandler type; its variadic tail carries nothing (as every implementation).
    let f: HandlerFn = unsafe { std::mem::transmute::<usize, HandlerFn>(f) };
    // SAFETY: the handler gets valid pointers to the handle and the code.
    unsafe { f(&mut handle, &mut code) };
    code
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
