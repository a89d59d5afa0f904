//! The environment: starting and ending the library, time, names and versions,
//! error strings.

use crate::comm::api::write_name;
use crate::entry::{call, call_in_steps};
use crate::error::{self, write_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global::{self, Phase};
use crate::state::Mpi;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// The highest thread level this library gives: calls from any thread at once.
pub const THREAD_LEVEL: c_int = MPI_THREAD_MULTIPLE;

/// The library's version text.
pub const LIBRARY_VERSION: &str = concat!(
    "rbtl libmpi_abi ",
    env!("CARGO_PKG_VERSION"),
    ": the MPI standard ABI 1.0 over rbtl's message layer (MPI_THREAD_MULTIPLE, MPI-IO; no Fortran bindings)"
);

/// Where the world model is in its life: never started, started by `MPI_Init`
/// (the library may run for sessions without it), ended by `MPI_Finalize`.
static WORLD_MODEL: AtomicU8 = AtomicU8::new(NEVER);
const NEVER: u8 = 0;
const STARTED: u8 = 1;
const ENDED: u8 = 2;

/// Start the world model (`MPI_Init`, `MPI_Init_thread`) at the highest level not
/// above the one asked for (the ABI leaves room between MPI_THREAD_SERIALIZED and
/// MPI_THREAD_MULTIPLE: no value there is a level); the library's state with it,
/// unless sessions started it (then the level is the higher of theirs and this).
fn init(required: c_int) -> Result<c_int> {
    let mut provided = [
        MPI_THREAD_MULTIPLE,
        MPI_THREAD_SERIALIZED,
        MPI_THREAD_FUNNELED,
    ]
    .into_iter()
    .find(|&level| level <= required.min(THREAD_LEVEL))
    .unwrap_or(MPI_THREAD_SINGLE);
    if WORLD_MODEL.load(Ordering::Acquire) != NEVER {
        return Err(Error::new(
            MPI_ERR_OTHER,
            "MPI_Init was called twice (or after MPI_Finalize): MPI is initialized once per process",
        ));
    }
    if global::phase() == Phase::Running {
        provided = global::with(|mpi| {
            mpi.raise_thread_level(provided);
            mpi.main_thread = std::thread::current().id();
            Ok(mpi.thread_level)
        })?;
    } else {
        start_state(provided)?;
    }
    WORLD_MODEL.store(STARTED, Ordering::Release);
    Ok(provided)
}

/// Start the library's state at thread level `provided`: the job from the
/// launcher, the transports from rbtl's configuration (`RBTL_*` variables,
/// `RBTL_CONFIG_FILE`).
fn start_state(provided: c_int) -> Result<()> {
    std::sync::LazyLock::force(&START);
    global::start(|| {
        let msg = rbtl::msg::Comm::init(&[]).map_err(|e| {
            let what = match e {
                // A parameter the message layer refused: the configuration's fault.
                rbtl::msg::Error::BadParameter(_) | rbtl::msg::Error::Config(_) => {
                    "rbtl's configuration was refused"
                }
                _ => "starting the transports failed",
            };
            Error::new(MPI_ERR_OTHER, format!("{what}: {e}"))
        })?;
        let mut mpi = Mpi::new(msg, provided);
        mpi.appnum = mpi.msg.appnum()?.and_then(|n| c_int::try_from(n).ok());
        // A spawned job meets its parents before MPI_Init returns.
        mpi.attach_parent()?;
        Ok(mpi)
    })?;
    if provided == MPI_THREAD_MULTIPLE {
        global::allow_threads();
    }
    if let Some(every) = global::with(|mpi| Ok(mpi.msg.progress_thread()))? {
        crate::progress_thread::start(every)?;
    }
    STARTED_IN.store(std::process::id(), Ordering::Release);
    // SAFETY: `end_at_exit` is a plain function that stays in the library (which
    // is not unloaded while the process runs MPI).
    unsafe { libc::atexit(end_at_exit) };
    Ok(())
}

/// The process that started the library's state (a child it forks inherits the
/// exit handler, not the job).
static STARTED_IN: AtomicU32 = AtomicU32::new(0);

/// At the process's exit: end the library's state if sessions left it dormant
/// (the world model never started, or ended with a session open). A world model
/// still running is left as it is: the process ends without `MPI_Finalize`, as
/// the launcher then reports.
extern "C" fn end_at_exit() {
    let here = STARTED_IN.load(Ordering::Acquire) == std::process::id();
    if here && WORLD_MODEL.load(Ordering::Acquire) != STARTED {
        if let Err(e) = stop_state(false) {
            if global::phase() != Phase::Finalized {
                eprintln!("rbtl libmpi_abi: ending the library at exit: {}", e.message);
            }
        }
    }
}

/// End the library's state (the transports' end), unless a session is open or
/// the world model runs: decided while holding the state. With `ending` (from
/// `MPI_Finalize`) the world model ends then, whether the state does or not.
fn stop_state(ending: bool) -> Result<()> {
    let needed = |mpi: &Mpi| {
        if ending {
            WORLD_MODEL.store(ENDED, Ordering::Release);
        }
        !mpi.sessions.is_empty() || WORLD_MODEL.load(Ordering::Acquire) == STARTED
    };
    global::stop(needed, |mpi| {
        mpi.msg
            .finalize()
            .map_err(|e| Error::new(MPI_ERR_OTHER, format!("ending the transports failed: {e}")))
    })
}

/// The library's state for `MPI_Session_init`: started if nothing started it yet.
pub fn start_for_session() -> Result<()> {
    match global::phase() {
        Phase::Running => Ok(()),
        Phase::Before => start_state(MPI_THREAD_SINGLE),
        Phase::Finalized => Err(Error::new(
            MPI_ERR_OTHER,
            "the library has ended (MPI_Finalize ended it with no session open): it does not start again in this process",
        )),
    }
}

/// Report an error of a call made outside the library's life (no handler to go
/// through but the initial, fatal one).
fn outside(name: &str, r: Result<()>) -> c_int {
    match r {
        Ok(()) => MPI_SUCCESS,
        Err(e) => error::raise(name, Object::None, e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    outside("MPI_Init", init(MPI_THREAD_SINGLE).map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    // Refused before anything starts, as MPICH refuses it.
    if provided.is_null() {
        let e = Error::new(MPI_ERR_ARG, "provided is a null pointer");
        return outside("MPI_Init_thread", Err(e));
    }
    outside(
        "MPI_Init_thread",
        init(required).map(|p| {
            // SAFETY: not null (checked), writable by the caller's contract.
            unsafe { put(provided, p) }
        }),
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Finalize() -> c_int {
    if WORLD_MODEL.load(Ordering::Acquire) != STARTED {
        let e = Error::new(
            MPI_ERR_OTHER,
            "MPI_Finalize without MPI_Init, or called twice",
        );
        return outside("MPI_Finalize", Err(e));
    }
    // Attributes on MPI_COMM_SELF go first, as the standard asks (their delete
    // functions may still use MPI).
    let deleted = call_in_steps("MPI_Finalize", Object::None, || {
        crate::attr::delete_attrs(crate::attr::Holder::comm(MPI_COMM_SELF), None)
    });
    if deleted != MPI_SUCCESS {
        return deleted;
    }
    // Sessions still open keep the library running. A refused end (another
    // thread's call under way) leaves the world model running.
    outside("MPI_Finalize", stop_state(true))
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Initialized(flag: *mut c_int) -> c_int {
    let started = c_int::from(WORLD_MODEL.load(Ordering::Acquire) != NEVER);
    // SAFETY: null or writable.
    outside("MPI_Initialized", unsafe {
        write_arg(flag, started, "flag")
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Finalized(flag: *mut c_int) -> c_int {
    let ended = c_int::from(WORLD_MODEL.load(Ordering::Acquire) == ENDED);
    // SAFETY: null or writable.
    outside("MPI_Finalized", unsafe { write_arg(flag, ended, "flag") })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Query_thread(provided: *mut c_int) -> c_int {
    call("MPI_Query_thread", Object::None, |mpi| {
        // SAFETY: null or writable.
        unsafe { write_arg(provided, mpi.thread_level, "provided") }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Is_thread_main(flag: *mut c_int) -> c_int {
    call("MPI_Is_thread_main", Object::None, |mpi| {
        let main = mpi.main_thread == std::thread::current().id();
        // SAFETY: null or writable.
        unsafe { write_arg(flag, c_int::from(main), "flag") }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Abort(comm: Handle, errorcode: c_int) -> c_int {
    let message = format!("MPI_Abort was called with error code {errorcode}");
    let _ = global::with(|mpi| {
        mpi.comm(comm)?;
        Ok(())
    });
    global::abort_job(errorcode, &message)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Wtime() -> f64 {
    // The monotonic clock read directly (a benchmark's timed loop calls this twice
    // an iteration): seconds since the library's clock started.
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let (s0, n0) = *START;
    (ts.tv_sec - s0) as f64 + (ts.tv_nsec - n0) as f64 * 1e-9
}

/// The monotonic clock when the library first read it (seconds, nanoseconds).
static START: std::sync::LazyLock<(libc::time_t, libc::c_long)> = std::sync::LazyLock::new(|| {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: as in `PMPI_Wtime`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec, ts.tv_nsec)
});

#[no_mangle]
pub unsafe extern "C" fn PMPI_Wtick() -> f64 {
    1e-9
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Get_processor_name(
    name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    let n = rbtl::pmi::host_name();
    // SAFETY: the binding's contract: room for MPI_MAX_PROCESSOR_NAME bytes.
    outside("MPI_Get_processor_name", unsafe {
        write_name(&n, name, resultlen, MPI_MAX_PROCESSOR_NAME as usize)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
    // SAFETY: null or writable.
    let r = unsafe {
        write_arg(version, MPI_VERSION, "version")
            .and_then(|()| write_arg(subversion, MPI_SUBVERSION, "subversion"))
    };
    outside("MPI_Get_version", r)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Get_library_version(
    version: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    // SAFETY: the binding's contract: room for MPI_MAX_LIBRARY_VERSION_STRING bytes.
    outside("MPI_Get_library_version", unsafe {
        write_name(
            LIBRARY_VERSION,
            version,
            resultlen,
            MPI_MAX_LIBRARY_VERSION_STRING as usize,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Abi_get_version(
    abi_major: *mut c_int,
    abi_minor: *mut c_int,
) -> c_int {
    // SAFETY: null or writable.
    let r = unsafe {
        write_arg(abi_major, MPI_ABI_VERSION, "ABI major version")
            .and_then(|()| write_arg(abi_minor, MPI_ABI_SUBVERSION, "ABI minor version"))
    };
    outside("MPI_Abi_get_version", r)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Error_string(
    errorcode: c_int,
    string: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    let text = error::string_of(errorcode);
    let r = match text {
        // SAFETY: the binding's contract: room for MPI_MAX_ERROR_STRING bytes.
        Some(t) => unsafe { write_name(&t, string, resultlen, MPI_MAX_ERROR_STRING as usize) },
        None => Err(Error::new(
            MPI_ERR_ARG,
            format!("{errorcode} is not an error code"),
        )),
    };
    outside("MPI_Error_string", r)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
    let r = match error::error_class_of(errorcode) {
        // SAFETY: null or writable.
        Some(c) => unsafe { write_arg(errorclass, c, "error class") },
        None => Err(Error::new(
            MPI_ERR_ARG,
            format!("{errorcode} is not an error code"),
        )),
    };
    outside("MPI_Error_class", r)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Add_error_class(errorclass: *mut c_int) -> c_int {
    call("MPI_Add_error_class", Object::None, |_| {
        error::non_null(errorclass, MPI_ERR_ARG, "error class")?;
        let c = error::add_class()?;
        // SAFETY: writable (checked not null).
        unsafe { errorclass.write(c) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> c_int {
    call("MPI_Add_error_code", Object::None, |_| {
        error::non_null(errorcode, MPI_ERR_ARG, "error code")?;
        let c = error::add_code(errorclass)?;
        // SAFETY: writable (checked not null).
        unsafe { errorcode.write(c) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Add_error_string(errorcode: c_int, string: *const c_char) -> c_int {
    call("MPI_Add_error_string", Object::None, |_| {
        // SAFETY: the binding's contract.
        let s = unsafe { crate::comm::api::read_str(string) }?;
        error::add_string(errorcode, s)
    })
}

/// The bindings of MPI 4.1's removals of error classes, codes and strings: each
/// `$name` calls `$remove` on its argument.
macro_rules! remove_binding {
    ($name:ident, $remove:path) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(errorcode: c_int) -> c_int {
            call(&stringify!($name)[1..], Object::None, |_| {
                $remove(errorcode)
            })
        }
    };
}

remove_binding!(PMPI_Remove_error_class, error::remove_class);
remove_binding!(PMPI_Remove_error_code, error::remove_code);
remove_binding!(PMPI_Remove_error_string, error::remove_string);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Abi_get_info(info: *mut Handle) -> c_int {
    // (At any time, as the info objects: it needs no state.)
    call_in_steps("MPI_Abi_get_info", Object::None, || {
        let size = |key: &str, n: usize| (key.to_string(), n.to_string());
        let entries = vec![
            size("mpi_aint_size", std::mem::size_of::<Aint>()),
            size("mpi_count_size", std::mem::size_of::<Count>()),
            size("mpi_offset_size", std::mem::size_of::<Count>()),
        ];
        // SAFETY: the binding's contract: `info` null or writable.
        unsafe { crate::info::hand_out(entries, info) }
    })
}

/// `MPI_Get_hw_resource_info`: no key (the library knows no more of the hardware
/// than the node).
#[no_mangle]
pub unsafe extern "C" fn PMPI_Get_hw_resource_info(hw_info: *mut Handle) -> c_int {
    call("MPI_Get_hw_resource_info", Object::None, |_| {
        // SAFETY: the binding's contract: `hw_info` null or writable.
        unsafe { crate::info::hand_out(Vec::new(), hw_info) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Pcontrol(_level: c_int) -> c_int {
    MPI_SUCCESS
}
