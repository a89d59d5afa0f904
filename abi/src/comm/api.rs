//! The communicator bindings: rank, size, making and freeing, comparing, names,
//! error handlers.

use super::create;
use super::group::compare;
use super::Group;
use crate::attr::{self, Holder};
use crate::entry::{call, call_in_steps, query_binding};
use crate::error::{freed_object, non_null, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::handles::{Kind, Table};
use crate::state::{Errhandler, Mpi};
use std::sync::{Mutex, MutexGuard};

/// Copy `name` into a C buffer of `max` bytes (cut short, ended by NUL), its length
/// into `len`, which the call must write (`MPI_ERR_ARG` when it is null).
///
/// # Safety
///
/// `out` is null or has room for `max` bytes; `len` is null or writable.
pub unsafe fn write_name(name: &str, out: *mut c_char, len: *mut c_int, max: usize) -> Result<()> {
    crate::error::non_null(len, MPI_ERR_ARG, "result length")?;
    // SAFETY: the caller's contract.
    let n = unsafe { write_str(name, out, max) }?;
    // SAFETY: checked not null; writable by the caller's contract.
    unsafe { len.write(n as c_int) };
    Ok(())
}

/// Copy `name` into a C buffer of `max` bytes (cut short, ended by NUL): the bytes
/// copied before the NUL.
///
/// # Safety
///
/// `out` is null or has room for `max` bytes.
pub unsafe fn write_str(name: &str, out: *mut c_char, max: usize) -> Result<usize> {
    if out.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "the name buffer is null"));
    }
    let bytes = name.as_bytes();
    let n = bytes.len().min(max - 1);
    // SAFETY: the caller's contract: room for `max` bytes, `n` + 1 of them written.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), n);
        out.add(n).write(0);
    }
    Ok(n)
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

/// Write a new communicator's handle; with `out` null, free the communicator (if
/// this process is in it) by `free`, as it was made with the other members, who
/// keep theirs, and refuse (`MPI_ERR_ARG`).
///
/// # Safety
///
/// `out` is null or writable.
pub(super) unsafe fn hand_out(
    h: Result<Handle>,
    out: *mut Handle,
    free: impl FnOnce(Handle) -> Result<()>,
) -> Result<()> {
    if out.is_null() {
        h.and_then(|h| if h == MPI_COMM_NULL { Ok(()) } else { free(h) })?;
        return non_null(out, MPI_ERR_ARG, "communicator");
    }
    // SAFETY: checked not null.
    unsafe { give(h, out) }
}

/// Write communicator `h` at `out` (if not null): one not made is null, as MPICH
/// hands it out. `h`'s error, if any.
///
/// # Safety
///
/// `out` is null or writable.
unsafe fn give(h: Result<Handle>, out: *mut Handle) -> Result<()> {
    // SAFETY: the caller's contract.
    unsafe { put(out, *h.as_ref().unwrap_or(&MPI_COMM_NULL)) };
    h.map(|_| ())
}

query_binding!(PMPI_Comm_rank, comm, Object::Comm(comm), |mpi|
    => rank: c_int = mpi.comm(comm)?.rank as c_int);
query_binding!(PMPI_Comm_size, comm, Object::Comm(comm), |mpi|
    => size: c_int = mpi.comm(comm)?.size() as c_int);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_remote_size(comm: Handle, size: *mut c_int) -> c_int {
    call("MPI_Comm_remote_size", Object::Comm(comm), |mpi| {
        let Some(r) = &mpi.comm(comm)?.remote else {
            return Err(Error::new(MPI_ERR_COMM, "not an intercommunicator"));
        };
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(size, r.size() as c_int, "size") }
    })
}

query_binding!(PMPI_Comm_test_inter, comm, Object::Comm(comm), |mpi|
    => flag: c_int = c_int::from(mpi.comm(comm)?.remote.is_some()));

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_dup(comm: Handle, newcomm: *mut Handle) -> c_int {
    // SAFETY: the binding's contract.
    call_in_steps("MPI_Comm_dup", Object::Comm(comm), || unsafe {
        hand_out(dup_with_attrs(comm), newcomm, free_with_attrs)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_dup_with_info(
    comm: Handle,
    info: Handle,
    newcomm: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    call_in_steps("MPI_Comm_dup_with_info", Object::Comm(comm), || unsafe {
        crate::info::check(info)?;
        hand_out(dup_with_attrs(comm), newcomm, free_with_attrs)
    })
}

/// `MPI_Comm_idup`: the duplicate and its attributes, made at once, and the
/// request of the members' agreement on its context ([`Mpi::comm_idup`]). Once the
/// agreement has begun, it goes on whatever else fails (the other members take
/// part in it): the request is then freed, the duplicate with it once agreed.
///
/// # Safety
///
/// `newcomm` and `request` are null or writable.
unsafe fn idup(comm: Handle, newcomm: *mut Handle, request: *mut Handle) -> Result<()> {
    non_null(request, MPI_ERR_ARG, "request")?;
    non_null(newcomm, MPI_ERR_ARG, "newcomm")?;
    let (made, r) = global::with(|mpi| mpi.comm_idup(comm))?;
    if let Err(e) = attr::copy_attrs(Holder::comm(comm), Holder::comm(made)) {
        global::with(|mpi| {
            mpi.orphan_idup(r);
            mpi.free_request(r)
        })?;
        return Err(e);
    }
    // SAFETY: the caller's contract; checked not null.
    unsafe {
        newcomm.write(made);
        request.write(r);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_idup(
    comm: Handle,
    newcomm: *mut Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    call_in_steps("MPI_Comm_idup", Object::Comm(comm), || unsafe {
        idup(comm, newcomm, request)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_idup_with_info(
    comm: Handle,
    info: Handle,
    newcomm: *mut Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    call_in_steps("MPI_Comm_idup_with_info", Object::Comm(comm), || unsafe {
        crate::info::check(info)?;
        idup(comm, newcomm, request)
    })
}

/// `MPI_Comm_dup`: the duplicate, then the attributes copied by their keys' copy
/// functions (run outside the library's state: they may call MPI). A failed copy
/// frees the duplicate.
fn dup_with_attrs(comm: Handle) -> Result<Handle> {
    let h = global::with_held(|held| create::dup(held, comm))?;
    with_attrs(comm, h)
}

/// Free communicator `h` after its attributes' deletions (run outside the library's
/// state: they may call MPI).
fn free_with_attrs(h: Handle) -> Result<()> {
    attr::delete_attrs(Holder::comm(h), None)?;
    global::with(|mpi| mpi.comm_free(h))
}

/// `comm`'s duplicate `h` with its attributes copied as [`dup_with_attrs`] says.
fn with_attrs(comm: Handle, h: Handle) -> Result<Handle> {
    if let Err(e) = attr::copy_attrs(Holder::comm(comm), Holder::comm(h)) {
        global::with(|mpi| mpi.comm_free(h))?;
        return Err(e);
    }
    Ok(h)
}

/// A binding that makes a communicator from `$comm` (whose handler reports its
/// errors) as `$make` says (given `held`: other threads' calls come in while the
/// members agree on its context), its handle written to `$newcomm`.
macro_rules! comm_maker {
    ($name:ident, $comm:ident, ($($arg:ident: $ty:ty),*), $newcomm:ident, |$held:ident| $make:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $comm: Handle,
            $($arg: $ty,)*
            $newcomm: *mut Handle,
        ) -> c_int {
            let object = $crate::error::Object::Comm($comm);
            $crate::entry::call_held(&stringify!($name)[1..], object, |$held| {
                let made = $make;
                let free = |h| $held.comm_free(h);
                // SAFETY: the binding's contract.
                unsafe { $crate::comm::api::hand_out(made, $newcomm, free) }
            })
        }
    };
}

pub(super) use comm_maker;

comm_maker!(PMPI_Comm_split, comm, (color: c_int, key: c_int), newcomm,
    |held| create::split(held, comm, color, key));
comm_maker!(PMPI_Comm_split_type, comm, (split_type: c_int, key: c_int, info: Handle), newcomm,
    |held| create::split_type(held, comm, split_type, key, info));
comm_maker!(PMPI_Comm_create, comm, (group: Handle), newcomm, |held| {
    let g = held.group(group)?;
    create::create(held, comm, g)
});
comm_maker!(PMPI_Comm_create_group, comm, (group: Handle, tag: c_int), newcomm, |held| {
    let g = held.group(group)?;
    create::create_group(held, comm, g, tag)
});

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
                self.forget_attrs(Holder::comm(h), None)?;
                self.drop_comm_buffer(h);
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
    // SAFETY: the binding's contract: null or readable.
    let object = unsafe { freed_object(comm, Object::Comm) };
    call_in_steps("MPI_Comm_free", object, || {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(comm, MPI_ERR_ARG, "communicator") }?;
        global::with(|mpi| mpi.check_freeable(h))?;
        free_with_attrs(h)?;
        // SAFETY: checked not null.
        unsafe { comm.write(MPI_COMM_NULL) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_disconnect(comm: *mut Handle) -> c_int {
    // SAFETY: the binding's contract: null or readable.
    let object = unsafe { freed_object(comm, Object::Comm) };
    call_in_steps("MPI_Comm_disconnect", object, || {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(comm, MPI_ERR_ARG, "communicator") }?;
        // Its members meet first: a barrier over it (both groups of an
        // intercommunicator), which lets other threads' calls in meanwhile. (A
        // buffered send or a freed request still under way keeps its peer
        // connected: `disconnect_from`.)
        global::with_held(|held| {
            held.check_freeable(h)?;
            let s = held.build_barrier(h)?;
            held.run_letting_in(s)
        })?;
        let members = global::with(|mpi| mpi.other_jobs_in(h))?;
        free_with_attrs(h)?;
        global::with(|mpi| {
            mpi.disconnect_unconnected(members);
            Ok(())
        })?;
        // SAFETY: checked not null.
        unsafe { comm.write(MPI_COMM_NULL) };
        Ok(())
    })
}

impl Mpi {
    /// The members of communicator `h`'s groups (both of an intercommunicator) that
    /// are processes of other jobs, in this process's numbering.
    fn other_jobs_in(&self, h: Handle) -> Result<Vec<u32>> {
        let c = self.comm(h)?;
        let own = self.world.group.size();
        let remote = c.remote.as_ref().map_or(&[][..], |g| g.ranks());
        Ok(c.group
            .ranks()
            .iter()
            .chain(remote)
            .copied()
            .filter(|&r| r >= own)
            .collect())
    }

    /// After `MPI_Comm_disconnect`: the message layer disconnects from those of
    /// `others` (processes of other jobs) that no communicator left has as members.
    fn disconnect_unconnected(&mut self, mut others: Vec<u32>) {
        if others.is_empty() {
            return;
        }
        for (_, c) in self.comms.iter() {
            let member = |g: &Group, r: u32| g.rank_of(r).is_some();
            others.retain(|&r| {
                !member(&c.group, r) && !c.remote.as_ref().is_some_and(|g| member(g, r))
            });
        }
        self.msg.disconnect_from(&others);
    }
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
        unsafe { crate::error::write_arg(result, r, "result") }
    })
}

/// The bindings `$set` and `$get` of the name of an object that `$object` names
/// (as `MPI_Comm_set_name` and `MPI_Comm_get_name`), found by `mpi.$find` and
/// `mpi.$find_mut`; the null handle `$null`'s name is its own (as MPICH gives it).
macro_rules! object_name_bindings {
    ($set:ident, $get:ident, $object:path, $find:ident, $find_mut:ident, $null:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $set(object: Handle, name: *const c_char) -> c_int {
            $crate::entry::call(&stringify!($set)[1..], $object(object), |mpi| {
                // SAFETY: the binding's contract: a NUL-ended string.
                let name = unsafe { $crate::comm::api::read_object_name(name) }?;
                mpi.$find_mut(object)?.name = name;
                Ok(())
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $get(
            object: Handle,
            name: *mut c_char,
            resultlen: *mut c_int,
        ) -> c_int {
            $crate::entry::call(&stringify!($get)[1..], $object(object), |mpi| {
                let own = match object {
                    $null => stringify!($null).into(),
                    _ => mpi.$find(object)?.name.clone(),
                };
                let max = MPI_MAX_OBJECT_NAME as usize;
                // SAFETY: the binding's contract: room for MPI_MAX_OBJECT_NAME bytes.
                unsafe { $crate::comm::api::write_name(&own, name, resultlen, max) }
            })
        }
    };
}
pub(crate) use object_name_bindings;

object_name_bindings!(
    PMPI_Comm_set_name,
    PMPI_Comm_get_name,
    Object::Comm,
    comm,
    comm_mut,
    MPI_COMM_NULL
);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_get_parent(parent: *mut Handle) -> c_int {
    call("MPI_Comm_get_parent", Object::None, |mpi| {
        let p = mpi.parent;
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(parent, p, "parent") }
    })
}

/// The program's error handlers. They live outside the library's state: a program
/// makes the one it gives `MPI_Session_init` before the library starts (MPI 4.1,
/// 11.2.1), and errors raised outside the state find theirs.
static ERRHANDLERS: Mutex<Table<Errhandler>> = Mutex::new(Table::new(Kind::Errhandler));

fn errhandlers() -> MutexGuard<'static, Table<Errhandler>> {
    ERRHANDLERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The program's error handler `h`, if it is one.
pub fn errhandler(h: Handle) -> Option<Errhandler> {
    errhandlers().get(h).copied()
}

/// `f` of the error handlers (for the conversions to and from Fortran).
pub fn with_errhandlers<R>(f: impl FnOnce(&Table<Errhandler>) -> R) -> R {
    f(&errhandlers())
}

/// An error handler argument.
pub(crate) fn check_errhandler(h: Handle, kind: Kind) -> Result<()> {
    match h {
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_RETURN | MPI_ERRORS_ABORT => Ok(()),
        _ => match errhandler(h) {
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
    // (At any time: the table is not the state's.)
    call_in_steps(name, Object::None, || {
        non_null(function, MPI_ERR_ARG, "function")?;
        non_null(out, MPI_ERR_ARG, "handler")?;
        let h = errhandlers().insert(Errhandler {
            kind,
            function: function as usize,
        })?;
        // SAFETY: checked not null; the caller's contract: writable.
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
        check_errhandler(errhandler, Kind::Comm)?;
        mpi.comm_mut(comm)?.errhandler = errhandler;
        mpi.self_handler_set |= comm == MPI_COMM_SELF;
        Ok(())
    })
}

query_binding!(PMPI_Comm_get_errhandler, comm, Object::Comm(comm), |mpi|
    => errhandler: Handle = mpi.comm(comm)?.errhandler);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Errhandler_free(errhandler: *mut Handle) -> c_int {
    call_in_steps("MPI_Errhandler_free", Object::None, || {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(errhandler, MPI_ERR_ARG, "handler") }?;
        if !matches!(
            h,
            MPI_ERRORS_ARE_FATAL | MPI_ERRORS_RETURN | MPI_ERRORS_ABORT
        ) && self::errhandler(h).is_none()
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
    call_errhandler("MPI_Comm_call_errhandler", Object::Comm(comm), errorcode)
}

/// `MPI_*_call_errhandler` (binding `name`): run `object`'s error handler on
/// `errorcode`. A handle that is no such object (its null handle, but
/// `MPI_FILE_NULL`, whose handler files being opened use) is an error.
pub fn call_errhandler(name: &str, object: Object, errorcode: c_int) -> c_int {
    let known = global::with(|mpi| {
        Ok(match object {
            Object::Comm(c) => mpi.comm(c).err(),
            Object::Win(w) => mpi.win(w).err(),
            Object::File(f) if f != MPI_FILE_NULL => mpi.file(f).err(),
            Object::Session(s) => mpi.session(s).err(),
            _ => None,
        })
    });
    // (A state that cannot be read now leaves the handler to decide.)
    if let Ok(Some(e)) = known {
        return crate::error::raise(name, object, e);
    }
    match crate::global::handler_of(object) {
        crate::error::Handler::Return => MPI_SUCCESS,
        crate::error::Handler::Fatal => {
            let e = Error::new(
                crate::error::class_of(errorcode).unwrap_or(MPI_ERR_UNKNOWN),
                crate::error::string_of(errorcode).unwrap_or_default(),
            );
            crate::error::fatal(name, &e)
        }
        crate::error::Handler::User(f) => {
            // (The call itself succeeded, whatever code the handler leaves.)
            crate::global::call_user_handler(f, object, errorcode);
            MPI_SUCCESS
        }
    }
}
