//! The communicator bindings: rank, size, making and freeing, comparing, names,
//! error handlers.

use super::attr;
use super::group::compare;
use crate::entry::{call, call_in_steps};
use crate::error::{non_null, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::handles::Kind;
use crate::state::{Errhandler, Mpi};

/// Copy `name` into a C buffer of `MPI_MAX_OBJECT_NAME` bytes (cut short, ended by
/// NUL), its length into `len`.
///
/// # Safety
///
/// `out` has room for `max` bytes; `len` is null or writable.
pub unsafe fn write_name(name: &str, out: *mut c_char, len: *mut c_int, max: usize) -> Result<()> {
    if out.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "the name buffer is null"));
    }
    let bytes = name.as_bytes();
    let n = bytes.len().min(max - 1);
    // SAFETY: the caller's contract: room for `max` bytes, `n` + 1 of them written.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), n);
        out.add(n).write(0);
        put(len, n as c_int);
    }
    Ok(())
}

/// A C string argument.
///
/// # Safety
///
/// `s` is null or a NUL-ended string.
pub unsafe fn read_str(s: *const c_char) -> Result<String> {
    if s.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "a string argument is null"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::ffi::CStr::from_ptr(s) }
        .to_string_lossy()
        .into_owned())
}

/// An object's name argument (of `MPI_Comm_set_name` and the like), cut to
/// `MPI_MAX_OBJECT_NAME - 1` bytes.
///
/// # Safety
///
/// As [`read_str`].
pub unsafe fn read_object_name(s: *const c_char) -> Result<String> {
    // SAFETY: the caller's contract.
    let mut name = unsafe { read_str(s) }?;
    name.truncate(MPI_MAX_OBJECT_NAME as usize - 1);
    Ok(name)
}

/// Write a new communicator's handle.
///
/// # Safety
///
/// `out` is null or writable.
unsafe fn hand_out(h: Result<Handle>, out: *mut Handle) -> Result<()> {
    non_null(out, MPI_ERR_ARG, "communicator")?;
    // SAFETY: checked not null.
    unsafe { out.write(h?) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_rank(comm: Handle, rank: *mut c_int) -> c_int {
    call("MPI_Comm_rank", Object::Comm(comm), |mpi| {
        let r = mpi.comm(comm)?.rank;
        // SAFETY: null or writable.
        unsafe { put(rank, r as c_int) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_size(comm: Handle, size: *mut c_int) -> c_int {
    call("MPI_Comm_size", Object::Comm(comm), |mpi| {
        let n = mpi.comm(comm)?.size();
        // SAFETY: null or writable.
        unsafe { put(size, n as c_int) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_remote_size(comm: Handle, size: *mut c_int) -> c_int {
    call("MPI_Comm_remote_size", Object::Comm(comm), |mpi| {
        let Some(r) = &mpi.comm(comm)?.remote else {
            return Err(Error::new(MPI_ERR_COMM, "not an intercommunicator"));
        };
        // SAFETY: null or writable.
        unsafe { put(size, r.size() as c_int) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_test_inter(comm: Handle, flag: *mut c_int) -> c_int {
    call("MPI_Comm_test_inter", Object::Comm(comm), |mpi| {
        let inter = mpi.comm(comm)?.remote.is_some();
        // SAFETY: null or writable.
        unsafe { put(flag, c_int::from(inter)) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_dup(comm: Handle, newcomm: *mut Handle) -> c_int {
    // SAFETY: the binding's contract.
    call_in_steps("MPI_Comm_dup", Object::Comm(comm), || unsafe {
        hand_out(dup_with_attrs(comm), newcomm)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_dup_with_info(
    comm: Handle,
    _info: Handle,
    newcomm: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    call_in_steps("MPI_Comm_dup_with_info", Object::Comm(comm), || unsafe {
        hand_out(dup_with_attrs(comm), newcomm)
    })
}

/// `MPI_Comm_dup`: the duplicate, then the attributes copied by their keys' copy
/// functions (run outside the library's state: they may call MPI). A failed copy
/// frees the duplicate.
fn dup_with_attrs(comm: Handle) -> Result<Handle> {
    let h = global::with(|mpi| mpi.comm_dup(comm))?;
    if let Err(e) = attr::copy_attrs(comm, h) {
        global::with(|mpi| mpi.comm_free(h))?;
        return Err(e);
    }
    Ok(h)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_split(
    comm: Handle,
    color: c_int,
    key: c_int,
    newcomm: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    call("MPI_Comm_split", Object::Comm(comm), |mpi| unsafe {
        hand_out(mpi.comm_split(comm, color, key), newcomm)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_split_type(
    comm: Handle,
    split_type: c_int,
    key: c_int,
    _info: Handle,
    newcomm: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    call("MPI_Comm_split_type", Object::Comm(comm), |mpi| unsafe {
        hand_out(mpi.comm_split_type(comm, split_type, key), newcomm)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_create(
    comm: Handle,
    group: Handle,
    newcomm: *mut Handle,
) -> c_int {
    call("MPI_Comm_create", Object::Comm(comm), |mpi| {
        let g = mpi.group(group)?;
        // SAFETY: the binding's contract.
        unsafe { hand_out(mpi.comm_create(comm, g), newcomm) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_create_group(
    comm: Handle,
    group: Handle,
    tag: c_int,
    newcomm: *mut Handle,
) -> c_int {
    call("MPI_Comm_create_group", Object::Comm(comm), |mpi| {
        let g = mpi.group(group)?;
        // SAFETY: the binding's contract.
        unsafe { hand_out(mpi.comm_create_group(comm, g, tag), newcomm) }
    })
}

impl Mpi {
    /// Whether `h` is a communicator the program may free.
    pub fn check_freeable(&self, h: Handle) -> Result<()> {
        match h {
            MPI_COMM_WORLD | MPI_COMM_SELF => Err(Error::new(
                MPI_ERR_COMM,
                "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed",
            )),
            _ => self.comm(h).map(|_| ()),
        }
    }

    /// The end of `MPI_Comm_free`, its attributes' deletions run
    /// ([`attr::delete_attrs`]): the handle dead. Operations still under way on it
    /// complete as usual (their requests hold what they need).
    pub fn comm_free(&mut self, h: Handle) -> Result<()> {
        match h {
            MPI_COMM_WORLD | MPI_COMM_SELF => Err(Error::new(
                MPI_ERR_COMM,
                "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed",
            )),
            _ => {
                self.forget_attrs(h, None)?;
                self.comms.remove(h);
                // The parents' intercommunicator, freed, is not handed out again.
                if self.parent == h {
                    self.parent = MPI_COMM_NULL;
                }
                Ok(())
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_free(comm: *mut Handle) -> c_int {
    call_in_steps("MPI_Comm_free", Object::None, || {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(comm, MPI_ERR_ARG, "communicator") }?;
        global::with(|mpi| mpi.check_freeable(h))?;
        attr::delete_attrs(h, None)?;
        global::with(|mpi| mpi.comm_free(h))?;
        // SAFETY: checked not null.
        unsafe { comm.write(MPI_COMM_NULL) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_disconnect(comm: *mut Handle) -> c_int {
    call_in_steps("MPI_Comm_disconnect", Object::None, || {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(comm, MPI_ERR_ARG, "communicator") }?;
        // Everything pending on it completes first: a barrier over it (both groups
        // of an intercommunicator).
        global::with(|mpi| {
            mpi.check_freeable(h)?;
            if mpi.comm(h)?.remote.is_some() {
                mpi.intercomm_barrier(h)
            } else {
                let s = mpi.build_barrier(h)?;
                mpi.run(s)
            }
        })?;
        attr::delete_attrs(h, None)?;
        global::with(|mpi| mpi.comm_free(h))?;
        // SAFETY: checked not null.
        unsafe { comm.write(MPI_COMM_NULL) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_compare(
    comm1: Handle,
    comm2: Handle,
    result: *mut c_int,
) -> c_int {
    call("MPI_Comm_compare", Object::Comm(comm1), |mpi| {
        let (a, b) = (mpi.comm(comm1)?, mpi.comm(comm2)?);
        let r = if comm1 == comm2 {
            MPI_IDENT
        } else {
            match compare(&a.group, &b.group) {
                MPI_IDENT => MPI_CONGRUENT,
                other => other,
            }
        };
        // SAFETY: null or writable.
        unsafe { put(result, r) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_set_name(comm: Handle, comm_name: *const c_char) -> c_int {
    call("MPI_Comm_set_name", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract: a NUL-ended string.
        let name = unsafe { read_object_name(comm_name) }?;
        mpi.comm_mut(comm)?.name = name;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_get_name(
    comm: Handle,
    comm_name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    call("MPI_Comm_get_name", Object::Comm(comm), |mpi| {
        let name = mpi.comm(comm)?.name.clone();
        // SAFETY: the binding's contract: room for MPI_MAX_OBJECT_NAME bytes.
        unsafe { write_name(&name, comm_name, resultlen, MPI_MAX_OBJECT_NAME as usize) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_get_parent(parent: *mut Handle) -> c_int {
    call("MPI_Comm_get_parent", Object::None, |mpi| {
        let p = mpi.parent;
        // SAFETY: null or writable.
        unsafe { put(parent, p) };
        Ok(())
    })
}

/// An error handler argument.
fn check_errhandler(mpi: &Mpi, h: Handle, kind: Kind) -> Result<()> {
    match h {
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_RETURN | MPI_ERRORS_ABORT => Ok(()),
        _ => match mpi.errhandlers.get(h) {
            Some(e) if e.kind == kind => Ok(()),
            Some(_) => Err(Error::new(
                MPI_ERR_ERRHANDLER,
                "the error handler was made for another kind of object",
            )),
            None => Err(Error::new(
                MPI_ERR_ERRHANDLER,
                format!("{h:#x} is not an error handler"),
            )),
        },
    }
}

/// `MPI_*_create_errhandler`.
///
/// # Safety
///
/// `out` is null or writable.
pub unsafe fn create_errhandler(
    name: &str,
    function: *mut c_void,
    out: *mut Handle,
    kind: Kind,
) -> c_int {
    call(name, Object::None, |mpi| {
        non_null(function, MPI_ERR_ARG, "function")?;
        non_null(out, MPI_ERR_ARG, "handler")?;
        let h = mpi.errhandlers.insert(Errhandler {
            kind,
            function: function as usize,
        })?;
        // SAFETY: checked not null.
        unsafe { out.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_create_errhandler(
    comm_errhandler_fn: *mut c_void,
    errhandler: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract: `errhandler` is writable.
    unsafe {
        create_errhandler(
            "MPI_Comm_create_errhandler",
            comm_errhandler_fn,
            errhandler,
            Kind::Comm,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_set_errhandler(comm: Handle, errhandler: Handle) -> c_int {
    call("MPI_Comm_set_errhandler", Object::Comm(comm), |mpi| {
        check_errhandler(mpi, errhandler, Kind::Comm)?;
        mpi.comm_mut(comm)?.errhandler = errhandler;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_get_errhandler(comm: Handle, errhandler: *mut Handle) -> c_int {
    call("MPI_Comm_get_errhandler", Object::Comm(comm), |mpi| {
        let h = mpi.comm(comm)?.errhandler;
        // SAFETY: null or writable.
        unsafe { put(errhandler, h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Errhandler_free(errhandler: *mut Handle) -> c_int {
    call("MPI_Errhandler_free", Object::None, |mpi| {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(errhandler, MPI_ERR_ARG, "handler") }?;
        if !matches!(
            h,
            MPI_ERRORS_ARE_FATAL | MPI_ERRORS_RETURN | MPI_ERRORS_ABORT
        ) && mpi.errhandlers.get(h).is_none()
        {
            return Err(Error::new(
                MPI_ERR_ERRHANDLER,
                format!("{h:#x} is not an error handler"),
            ));
        }
        // A handler still set on an object stays usable there (the standard frees it
        // with the last reference); its handle is gone for the caller.
        // SAFETY: checked not null.
        unsafe { errhandler.write(MPI_ERRHANDLER_NULL) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_call_errhandler(comm: Handle, errorcode: c_int) -> c_int {
    let handler = crate::global::handler_of(Object::Comm(comm));
    match handler {
        crate::error::Handler::Return => MPI_SUCCESS,
        crate::error::Handler::Fatal => {
            let e = Error::new(
                crate::error::class_of(errorcode).unwrap_or(MPI_ERR_UNKNOWN),
                crate::error::string_of(errorcode).unwrap_or_default(),
            );
            crate::error::fatal("MPI_Comm_call_errhandler", &e)
        }
        crate::error::Handler::User(f) => {
            crate::global::call_user_handler(f, Object::Comm(comm), errorcode);
            MPI_SUCCESS
        }
    }
}
