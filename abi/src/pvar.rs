//! The tool interface's performance variables (MPI 4.1 15.3.7), read from the
//! message layer: how many of its requests have completed (a counter), the lengths
//! of its two matching queues, posted receives and unexpected messages (sizes), as
//! MPICH's `unexpected_recvq_length` and Open MPI's `unexpected_msgq_length`, and how
//! many of the processes it is connected to are known to have failed (a size: of
//! this job, or of other jobs not disconnected from); and from the collectives, how
//! many sends and receives their schedules' rounds have started (a counter: the
//! messages an algorithm takes). Each is an `unsigned long long`, bound to no
//! object, read-only and continuous: always counting, so `MPI_T_pvar_start` and
//! `_stop` are refused (`MPI_T_ERR_PVAR_NO_STARTSTOP`). A counter reads what has
//! happened since its handle was allocated or last reset; a size cannot be reset.
//! Before `MPI_Init` and after `MPI_Finalize` every variable reads 0.
//!
//! Sessions and handles live under a lock of their own, taken inside the tool
//! interface's; the values are read from the library's state first, outside both.

use crate::ffi::*;
use crate::global::{self, Phase};
use crate::tool::{index_of, item, put_str, with};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A performance variable.
struct Pvar {
    name: &'static str,
    description: &'static str,
    class: c_int,
}

const PVARS: [Pvar; 5] = [
    Pvar {
        name: "msg_completed_requests",
        description: "requests of the message layer completed (sends and receives)",
        class: MPI_T_PVAR_CLASS_COUNTER,
    },
    Pvar {
        name: "msg_posted_receives",
        description: "receives posted that no message has matched yet",
        class: MPI_T_PVAR_CLASS_SIZE,
    },
    Pvar {
        name: "msg_unexpected_messages",
        description: "messages arrived that no posted receive has matched yet",
        class: MPI_T_PVAR_CLASS_SIZE,
    },
    Pvar {
        name: "msg_failed_peers",
        description: "processes known to have failed, of this job or of other jobs not disconnected from (MPI_Comm_disconnect)",
        class: MPI_T_PVAR_CLASS_SIZE,
    },
    Pvar {
        name: "coll_schedule_transfers",
        description: "sends and receives started by the rounds of collectives' schedules (not counted: the short all-reductions, broadcasts and barriers run without a schedule)",
        class: MPI_T_PVAR_CLASS_COUNTER,
    },
];

/// The variables' values now, in the order of [`PVARS`].
fn sample() -> Result<[u64; 5], c_int> {
    if global::phase() != Phase::Running {
        return Ok([0; 5]);
    }
    let mut out = [0; 5];
    global::with(|mpi| {
        let (posted, unexpected) = mpi.msg.queue_lengths();
        out = [
            mpi.msg.completions() as u64,
            posted as u64,
            unexpected as u64,
            mpi.msg.failed_peers() as u64,
            crate::coll::transfers_started(),
        ];
        Ok(())
    })
    .map_err(|_| MPI_T_ERR_INVALID)?;
    Ok(out)
}

/// A handle: its variable, and for a counter the value it counts from.
struct Bound {
    var: usize,
    base: u64,
}

/// Sessions by handle, each with its handles.
struct Sessions {
    next: usize,
    open: BTreeMap<Handle, BTreeMap<Handle, Bound>>,
}

static SESSIONS: Mutex<Sessions> = Mutex::new(Sessions {
    // 0 and 1 are the null handles and `MPI_T_PVAR_ALL_HANDLES`.
    next: 2,
    open: BTreeMap::new(),
});

/// Run `f` on the sessions, once the tool interface is initialized.
fn with_sessions(f: impl FnOnce(&mut Sessions) -> Result<(), c_int>) -> c_int {
    with(|_| {
        let mut s = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut s)
    })
}

impl Sessions {
    fn fresh(&mut self) -> Handle {
        let h = self.next;
        self.next += 1;
        h
    }

    /// Session `s`'s handles.
    fn session(&mut self, s: Handle) -> Result<&mut BTreeMap<Handle, Bound>, c_int> {
        self.open.get_mut(&s).ok_or(MPI_T_ERR_INVALID_SESSION)
    }
}

/// Handle `h` of session `s`.
fn bound(sessions: &mut Sessions, s: Handle, h: Handle) -> Result<&mut Bound, c_int> {
    sessions
        .session(s)?
        .get_mut(&h)
        .ok_or(MPI_T_ERR_INVALID_HANDLE)
}

/// What handle `b` reads when its variable's value is `now`.
fn value(b: &Bound, now: &[u64; 5]) -> u64 {
    now[b.var].wrapping_sub(b.base)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_get_num(num_pvar: *mut c_int) -> c_int {
    // SAFETY: the binding's contract: null or writable.
    with(|_| unsafe { crate::tool::write_out(num_pvar, PVARS.len() as c_int) })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_get_info(
    pvar_index: c_int,
    name: *mut c_char,
    name_len: *mut c_int,
    verbosity: *mut c_int,
    var_class: *mut c_int,
    datatype: *mut Handle,
    enumtype: *mut Handle,
    desc: *mut c_char,
    desc_len: *mut c_int,
    bind: *mut c_int,
    readonly: *mut c_int,
    continuous: *mut c_int,
    atomic: *mut c_int,
) -> c_int {
    with(|_| {
        let v = item(&PVARS, pvar_index)?;
        // SAFETY: the binding's contract: each null or writable, the strings by the
        // interface's length convention.
        unsafe {
            put_str(v.name, name, name_len);
            put(verbosity, MPI_T_VERBOSITY_USER_BASIC);
            put(var_class, v.class);
            put(datatype, MPI_UNSIGNED_LONG_LONG);
            put(enumtype, MPI_T_ENUM_NULL);
            put_str(v.description, desc, desc_len);
            put(bind, MPI_T_BIND_NO_OBJECT);
            put(readonly, 1);
            put(continuous, 1);
            put(atomic, 0);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_get_index(
    name: *const c_char,
    var_class: c_int,
    pvar_index: *mut c_int,
) -> c_int {
    // A variable of another class is named "\0", which no C string is.
    let names = PVARS
        .iter()
        .map(move |v| if v.class == var_class { v.name } else { "\0" });
    // SAFETY: the binding's contract.
    with(|_| unsafe { index_of(names, name, pvar_index) })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_session_create(session: *mut Handle) -> c_int {
    with_sessions(|s| {
        if session.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        let h = s.fresh();
        s.open.insert(h, BTreeMap::new());
        // SAFETY: checked not null.
        unsafe { session.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_session_free(session: *mut Handle) -> c_int {
    with_sessions(|s| {
        if session.is_null() {
            return Err(MPI_T_ERR_INVALID_SESSION);
        }
        // SAFETY: checked not null.
        let h = unsafe { *session };
        s.open.remove(&h).ok_or(MPI_T_ERR_INVALID_SESSION)?;
        // SAFETY: as above.
        unsafe { session.write(MPI_T_PVAR_SESSION_NULL) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_handle_alloc(
    session: Handle,
    pvar_index: c_int,
    _obj_handle: *mut c_void,
    handle: *mut Handle,
    count: *mut c_int,
) -> c_int {
    let now = match sample() {
        Ok(now) => now,
        Err(e) => return e,
    };
    with_sessions(|s| {
        item(&PVARS, pvar_index)?;
        if handle.is_null() || count.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        s.session(session)?;
        let var = pvar_index as usize;
        let base = match PVARS[var].class {
            MPI_T_PVAR_CLASS_COUNTER => now[var],
            _ => 0,
        };
        let h = s.fresh();
        s.session(session)?.insert(h, Bound { var, base });
        // SAFETY: both checked not null.
        unsafe {
            handle.write(h);
            count.write(1);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_handle_free(session: Handle, handle: *mut Handle) -> c_int {
    with_sessions(|s| {
        if handle.is_null() {
            return Err(MPI_T_ERR_INVALID_HANDLE);
        }
        // SAFETY: checked not null.
        let h = unsafe { *handle };
        s.session(session)?
            .remove(&h)
            .ok_or(MPI_T_ERR_INVALID_HANDLE)?;
        // SAFETY: as above.
        unsafe { handle.write(MPI_T_PVAR_HANDLE_NULL) };
        Ok(())
    })
}

/// `MPI_T_pvar_start` and `_stop`: every variable is continuous, so only
/// `MPI_T_PVAR_ALL_HANDLES` (which starts or stops the session's variables that are
/// not) does nothing, successfully.
fn start_stop(session: Handle, handle: Handle) -> c_int {
    with_sessions(|s| {
        s.session(session)?;
        if handle == MPI_T_PVAR_ALL_HANDLES {
            return Ok(());
        }
        bound(s, session, handle)?;
        Err(MPI_T_ERR_PVAR_NO_STARTSTOP)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_start(session: Handle, handle: Handle) -> c_int {
    start_stop(session, handle)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_stop(session: Handle, handle: Handle) -> c_int {
    start_stop(session, handle)
}

/// Read handle `handle` into `buf` (when given), then reset it (when `reset`).
///
/// # Safety
///
/// `buf` is null or holds an `unsigned long long`.
unsafe fn read_reset(session: Handle, handle: Handle, buf: *mut c_void, reset: bool) -> c_int {
    let now = match sample() {
        Ok(now) => now,
        Err(e) => return e,
    };
    with_sessions(|s| {
        let b = bound(s, session, handle)?;
        let counter = PVARS[b.var].class == MPI_T_PVAR_CLASS_COUNTER;
        if reset && !counter {
            return Err(MPI_T_ERR_PVAR_NO_WRITE);
        }
        if !buf.is_null() {
            // SAFETY: the caller's contract.
            unsafe { buf.cast::<u64>().write_unaligned(value(b, &now)) };
        }
        if reset {
            b.base = now[b.var];
        }
        Ok(())
    })
}

/// `MPI_T_pvar_read` and `_readreset`: into `buf`, which must be given.
///
/// # Safety
///
/// As [`read_reset`].
unsafe fn read_into(session: Handle, handle: Handle, buf: *mut c_void, reset: bool) -> c_int {
    if buf.is_null() {
        return MPI_T_ERR_INVALID;
    }
    // SAFETY: the caller's contract.
    unsafe { read_reset(session, handle, buf, reset) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_read(
    session: Handle,
    handle: Handle,
    buf: *mut c_void,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe { read_into(session, handle, buf, false) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_readreset(
    session: Handle,
    handle: Handle,
    buf: *mut c_void,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe { read_into(session, handle, buf, true) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_reset(session: Handle, handle: Handle) -> c_int {
    if handle != MPI_T_PVAR_ALL_HANDLES {
        // SAFETY: no buffer.
        return unsafe { read_reset(session, handle, std::ptr::null_mut(), true) };
    }
    // Every counter of the session (the sizes cannot be reset, and are skipped).
    let now = match sample() {
        Ok(now) => now,
        Err(e) => return e,
    };
    with_sessions(|s| {
        for b in s.session(session)?.values_mut() {
            if PVARS[b.var].class == MPI_T_PVAR_CLASS_COUNTER {
                b.base = now[b.var];
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_pvar_write(
    session: Handle,
    handle: Handle,
    _buf: *const c_void,
) -> c_int {
    with_sessions(|s| {
        bound(s, session, handle)?;
        Err(MPI_T_ERR_PVAR_NO_WRITE)
    })
}
