//! Info objects: keys and values a program passes as hints (`MPI_Info_*`). They
//! live in a table of their own, outside the library's state: a program may make
//! and read them before `MPI_Init` and after `MPI_Finalize` (MPI 4.1, 11.2.1), to
//! give `MPI_Session_init` its hints.

use crate::comm::api::{read_str, write_str};
use crate::entry::call;
use crate::error::{non_null, raise, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::handles::{Kind, Table};
use crate::state::{Info, Mpi};
use std::sync::{Mutex, MutexGuard};

static INFOS: Mutex<Table<Info>> = Mutex::new(Table::new(Kind::Info));

/// The info objects (a call that panicked while it held them left them whole:
/// each change is one step).
fn infos() -> MutexGuard<'static, Table<Info>> {
    INFOS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `f` of the info objects (for the conversions to and from Fortran).
pub fn with_infos<R>(f: impl FnOnce(&Table<Info>) -> R) -> R {
    f(&infos())
}

/// Run binding `name` as `f`, which takes the info objects itself ([`infos`], never
/// while it waits for the library's state: a call inside the state takes them
/// too): `MPI_SUCCESS`, or the code of its error (through the handler of errors
/// that concern no object, which is fatal before `MPI_Init`).
fn info_call(name: &str, f: impl FnOnce() -> Result<()>) -> c_int {
    match f() {
        Ok(()) => MPI_SUCCESS,
        Err(e) => raise(name, Object::None, e),
    }
}

/// The process's arguments (any that is not UTF-8 with its bad bytes replaced).
fn process_args() -> impl Iterator<Item = String> {
    std::env::args_os().map(|a| a.to_string_lossy().into_owned())
}

/// The info object `h` (`MPI_INFO_NULL` reads as empty, `MPI_INFO_ENV` as the job's,
/// given its size and thread level by `job`, called without the info objects held).
fn lookup(h: Handle, job: impl FnOnce() -> (u32, c_int)) -> Result<Info> {
    match h {
        MPI_INFO_NULL => Ok(Vec::new()),
        MPI_INFO_ENV => Ok(env_info(process_args(), job())),
        _ => infos().get(h).cloned().ok_or_else(|| bad(h)),
    }
}

/// The job's size and thread level for `MPI_INFO_ENV` where a binding of this
/// module asks: the running library's, else (before `MPI_Init`) the launcher's
/// size and `MPI_THREAD_SINGLE`.
fn job_now() -> (u32, c_int) {
    global::with(|mpi| Ok((mpi.world.size(), mpi.thread_level))).unwrap_or_else(|_| {
        let size = std::env::var("PMI_SIZE").ok().and_then(|s| s.parse().ok());
        (size.unwrap_or(1), MPI_THREAD_SINGLE)
    })
}

impl Mpi {
    /// The info object `h` (`MPI_INFO_NULL` reads as empty).
    pub(crate) fn info(&self, h: Handle) -> Result<Info> {
        lookup(h, || (self.world.size(), self.thread_level))
    }

    /// The value of `key` in info object `h`, if it has one.
    pub(crate) fn value_of(&self, h: Handle, key: &str) -> Result<Option<String>> {
        Ok(value_in(self.info(h)?, key))
    }
}

/// The value of `key` in `info`, if it has one.
fn value_in(info: Info, key: &str) -> Option<String> {
    info.into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// What `MPI_INFO_ENV` holds (MPI 4.1, 11.4) for a program started with `args`
/// in a job of `size` processes at `thread_level`: `command`, `argv` (the arguments
/// after it, by spaces), `maxprocs` (the processes started with it: the world),
/// `wdir`, `thread_level`.
fn env_info(mut args: impl Iterator<Item = String>, (size, thread_level): (u32, c_int)) -> Info {
    let mut info = Vec::new();
    let mut put = |k: &str, v: String| info.push((k.to_string(), v));
    put("command", args.next().unwrap_or_default());
    put("argv", args.collect::<Vec<_>>().join(" "));
    put("maxprocs", size.to_string());
    if let Ok(dir) = std::env::current_dir() {
        put("wdir", dir.display().to_string());
    }
    let level = crate::session::level_name(thread_level).unwrap_or("MPI_THREAD_SINGLE");
    put("thread_level", level.to_string());
    info
}

/// Set `key` to `value` in info object `h` (for calls that answer through one).
pub(crate) fn set_value(h: Handle, key: &str, value: &str) -> Result<()> {
    let mut t = infos();
    let i = info_mut(&mut t, h)?;
    match i.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = value.to_string(),
        None => i.push((key.to_string(), value.to_string())),
    }
    Ok(())
}

fn info_mut(table: &mut Table<Info>, h: Handle) -> Result<&mut Info> {
    table.get_mut(h).ok_or_else(|| bad(h))
}

/// The check of an info argument that a call takes but does not read: the null
/// object, `MPI_INFO_ENV` or a live info object (`MPI_ERR_INFO` for any other
/// handle, as MPICH refuses it).
pub(crate) fn check(h: Handle) -> Result<()> {
    match h {
        MPI_INFO_NULL | MPI_INFO_ENV => Ok(()),
        _ if infos().get(h).is_some() => Ok(()),
        _ => Err(bad(h)),
    }
}

fn bad(h: Handle) -> Error {
    Error::new(
        MPI_ERR_INFO,
        format!("{h:#x} is not an info object (freed, predefined, or a handle of another kind)"),
    )
}

/// A key argument, within the standard's length.
///
/// # Safety
///
/// `key` is null or a NUL-ended string.
unsafe fn key_of(key: *const c_char) -> Result<String> {
    // SAFETY: the caller's contract.
    let k = unsafe { read_str(key) }?;
    if k.is_empty() || k.len() >= MPI_MAX_INFO_KEY as usize {
        return Err(Error::new(
            MPI_ERR_INFO_KEY,
            format!("key {k:?} is empty or longer than MPI_MAX_INFO_KEY"),
        ));
    }
    Ok(k)
}

/// Write a new info handle.
///
/// # Safety
///
/// `out` is null or writable.
pub(crate) unsafe fn hand_out(info: Info, out: *mut Handle) -> Result<()> {
    non_null(out, MPI_ERR_ARG, "info")?;
    let h = infos().insert(info)?;
    // SAFETY: checked not null.
    unsafe { out.write(h) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Info_create(info: *mut Handle) -> c_int {
    // SAFETY: the binding's contract.
    info_call("MPI_Info_create", || unsafe { hand_out(Vec::new(), info) })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Info_create_env(
    argc: c_int,
    argv: *mut *mut c_char,
    info: *mut Handle,
) -> c_int {
    let job = job_now();
    info_call("MPI_Info_create_env", || {
        // The arguments given (as `main` has them), else the process's own.
        let env = match (argv.is_null(), usize::try_from(argc)) {
            (false, Ok(n)) => {
                let mut args = Vec::with_capacity(n);
                for i in 0..n {
                    // SAFETY: the binding's contract: `argc` strings.
                    let a = unsafe { *argv.add(i) };
                    // SAFETY: as above: each NUL-ended.
                    args.push(unsafe { read_str(a) }?);
                }
                env_info(args.into_iter(), job)
            }
            _ => env_info(process_args(), job),
        };
        // SAFETY: the binding's contract: `info` null or writable.
        unsafe { hand_out(env, info) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Info_dup(info: Handle, newinfo: *mut Handle) -> c_int {
    info_call("MPI_Info_dup", || {
        let i = read(info)?;
        // SAFETY: the binding's contract.
        unsafe { hand_out(i, newinfo) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Info_free(info: *mut Handle) -> c_int {
    info_call("MPI_Info_free", || {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(info, MPI_ERR_ARG, "info") }?;
        infos().remove(h).ok_or_else(|| bad(h))?;
        // SAFETY: checked not null.
        unsafe { info.write(MPI_INFO_NULL) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Info_set(
    info: Handle,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    info_call("MPI_Info_set", || {
        // SAFETY: the binding's contract: NUL-ended strings.
        let (k, v) = unsafe { (key_of(key)?, read_str(value)?) };
        if v.len() >= MPI_MAX_INFO_VAL as usize {
            return Err(Error::new(
                MPI_ERR_INFO_VALUE,
                "the value is longer than MPI_MAX_INFO_VAL",
            ));
        }
        set_value(info, &k, &v)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Info_delete(info: Handle, key: *const c_char) -> c_int {
    info_call("MPI_Info_delete", || {
        // SAFETY: the binding's contract.
        let k = unsafe { key_of(key) }?;
        let mut t = infos();
        let i = info_mut(&mut t, info)?;
        let before = i.len();
        i.retain(|(ik, _)| *ik != k);
        if i.len() == before {
            return Err(Error::new(MPI_ERR_INFO_NOKEY, format!("no key {k:?}")));
        }
        Ok(())
    })
}

/// The info object `h` as a binding of this module reads it (`MPI_INFO_ENV` for
/// the job as it is now); `MPI_INFO_NULL`, which other functions take as no hints,
/// is no object to read.
fn read(h: Handle) -> Result<Info> {
    if h == MPI_INFO_NULL {
        return Err(Error::new(MPI_ERR_INFO, "MPI_INFO_NULL is no info object"));
    }
    lookup(h, job_now)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Info_get_nkeys(info: Handle, nkeys: *mut c_int) -> c_int {
    info_call("MPI_Info_get_nkeys", || {
        let n = read(info)?.len() as c_int;
        // SAFETY: the binding's contract: null or writable.
        unsafe { crate::error::write_arg(nkeys, n, "nkeys") }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Info_get_nthkey(info: Handle, n: c_int, key: *mut c_char) -> c_int {
    info_call("MPI_Info_get_nthkey", || {
        let i = read(info)?;
        let k = usize::try_from(n)
            .ok()
            .and_then(|n| i.get(n))
            .ok_or_else(|| Error::new(MPI_ERR_ARG, format!("no key number {n}")))?;
        // SAFETY: the binding's contract: room for MPI_MAX_INFO_KEY bytes.
        unsafe { write_str(&k.0, key, MPI_MAX_INFO_KEY as usize) }.map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Info_get_string(
    info: Handle,
    key: *const c_char,
    buflen: *mut c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    info_call("MPI_Info_get_string", || {
        // SAFETY: the binding's contract.
        let k = unsafe { key_of(key) }?;
        non_null(buflen, MPI_ERR_ARG, "length")?;
        non_null(flag, MPI_ERR_ARG, "flag")?;
        let found = value_in(read(info)?, &k);
        // SAFETY: checked not null; `value` has room for `*buflen` bytes.
        unsafe {
            flag.write(c_int::from(found.is_some()));
            if let Some(v) = found {
                let room = (*buflen).max(0) as usize;
                if room > 0 && !value.is_null() {
                    write_str(&v, value, room)?;
                }
                buflen.write(v.len() as c_int + 1);
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Info_get(
    info: Handle,
    key: *const c_char,
    valuelen: c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    info_call("MPI_Info_get", || {
        // SAFETY: the binding's contract.
        let k = unsafe { key_of(key) }?;
        non_null(flag, MPI_ERR_ARG, "flag")?;
        let room = usize::try_from(valuelen)
            .map_err(|_| Error::new(MPI_ERR_ARG, format!("valuelen {valuelen} is negative")))?;
        let found = value_in(read(info)?, &k);
        // SAFETY: checked not null.
        unsafe { flag.write(c_int::from(found.is_some())) };
        if let Some(v) = found {
            // SAFETY: the binding's contract: `value` has room for `valuelen` + 1 bytes.
            unsafe { write_str(&v, value, room + 1) }?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Info_get_valuelen(
    info: Handle,
    key: *const c_char,
    valuelen: *mut c_int,
    flag: *mut c_int,
) -> c_int {
    info_call("MPI_Info_get_valuelen", || {
        // SAFETY: the binding's contract.
        let k = unsafe { key_of(key) }?;
        non_null(valuelen, MPI_ERR_ARG, "valuelen")?;
        non_null(flag, MPI_ERR_ARG, "flag")?;
        let found = value_in(read(info)?, &k);
        // SAFETY: checked not null.
        unsafe {
            flag.write(c_int::from(found.is_some()));
            if let Some(v) = found {
                valuelen.write(v.len() as c_int);
            }
        }
        Ok(())
    })
}

/// The hints of communicators and windows: `MPI_*_set_info` reads them and takes
/// none (this library acts on no hint); `MPI_*_get_info` gives the hints in use: a
/// new, empty info object.
macro_rules! object_hints {
    ($set:ident, $get:ident, $object:ident, $lookup:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $set(h: Handle, info: Handle) -> c_int {
            call(&stringify!($set)[1..], Object::$object(h), |mpi| {
                mpi.$lookup(h)?;
                mpi.info(info).map(|_| ())
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $get(h: Handle, info_used: *mut Handle) -> c_int {
            call(&stringify!($get)[1..], Object::$object(h), |mpi| {
                mpi.$lookup(h)?;
                // SAFETY: the binding's contract.
                unsafe { hand_out(Vec::new(), info_used) }
            })
        }
    };
}

object_hints!(PMPI_Comm_set_info, PMPI_Comm_get_info, Comm, comm);
object_hints!(PMPI_Win_set_info, PMPI_Win_get_info, Win, win);
