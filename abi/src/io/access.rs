//! The bindings of MPI-IO's accesses: each blocking, collective, nonblocking and
//! split-collective form of each way of placing them (an explicit offset, the
//! individual file pointer, rank order at the shared one).

use super::data::{Buffer, Start};
use crate::coll::Inside;
use crate::entry::call_held;
use crate::error::{non_null, Error, Object, Result};
use crate::ffi::*;
use crate::request::Request;

/// Where an access goes: at an offset or the individual file pointer, at the
/// shared one, or in rank order.
#[derive(Clone, Copy)]
enum Place {
    Start(Start),
    Shared,
    Ordered,
}

/// Run access `name` on `fh` (`write`: the direction) at `place`: its status.
///
/// # Safety
///
/// `buf` holds its elements (readable to write, writable to read).
unsafe fn access(
    inside: &mut impl Inside,
    fh: Handle,
    place: Place,
    buf: Buffer,
    write: bool,
) -> Result<Status> {
    // SAFETY: the caller's contract.
    unsafe {
        match place {
            Place::Start(s) => inside.state().file_access(fh, s, buf, write),
            Place::Shared => inside.state().file_shared(fh, buf, write),
            Place::Ordered => super::shared::file_ordered(inside, fh, buf, write),
        }
    }
}

/// A blocking access: its status into `status`.
///
/// # Safety
///
/// As [`access`]; `status` is null or writable.
unsafe fn blocking(
    name: &str,
    fh: Handle,
    place: Place,
    buf: Buffer,
    write: bool,
    status: *mut Status,
) -> c_int {
    call_held(name, Object::File(fh), |mpi| {
        // SAFETY: the caller's contract.
        let s = unsafe { access(mpi, fh, place, buf, write) }?;
        // SAFETY: the caller's contract.
        unsafe { crate::p2p::put_one(status, s) };
        Ok(())
    })
}

/// A nonblocking access, done by the time it returns: a complete request into
/// `request`.
///
/// # Safety
///
/// As [`access`]; `request` is writable.
unsafe fn nonblocking(
    name: &str,
    fh: Handle,
    place: Place,
    buf: Buffer,
    write: bool,
    request: *mut Handle,
) -> c_int {
    call_held(name, Object::File(fh), |mpi| {
        non_null(request, MPI_ERR_ARG, "request")?;
        // SAFETY: the caller's contract.
        let s = unsafe { access(mpi, fh, place, buf, write) }?;
        // SAFETY: the caller's contract.
        unsafe { mpi.hand_out(Request::Done(s), request) }
    })
}

/// The beginning of a split collective access: its count and datatype checked
/// (refused here, as MPICH refuses them), then the access done now, its outcome
/// kept for the end.
///
/// # Safety
///
/// As [`access`].
unsafe fn begin(name: &str, fh: Handle, place: Place, buf: Buffer, write: bool) -> c_int {
    call_held(name, Object::File(fh), |mpi| {
        if mpi.file(fh)?.split.is_some() {
            return Err(Error::new(
                MPI_ERR_OTHER,
                "a split collective is under way on this file: end it first",
            ));
        }
        crate::p2p::check_count(buf.1)?;
        mpi.dtype(buf.2)?;
        // SAFETY: the caller's contract.
        let outcome = unsafe { access(mpi, fh, place, buf, write) };
        let kept = match outcome {
            Ok(s) => (s, None),
            Err(e) => (Status::empty(), Some(e)),
        };
        mpi.file_mut(fh)?.split = Some(kept);
        Ok(())
    })
}

/// The end of a split collective access: the status of its beginning.
///
/// # Safety
///
/// `status` is null or writable.
unsafe fn end(name: &str, fh: Handle, status: *mut Status) -> c_int {
    call_held(name, Object::File(fh), |mpi| {
        let Some((s, e)) = mpi.file_mut(fh)?.split.take() else {
            return Err(Error::new(
                MPI_ERR_OTHER,
                "no split collective was begun on this file",
            ));
        };
        // SAFETY: the caller's contract.
        unsafe { crate::p2p::put_one(status, s) };
        e.map_or(Ok(()), Err)
    })
}

/// A blocking (`blocking`) or nonblocking (`nonblocking`, the last parameter
/// `request`) access binding `$name`, with an offset parameter `$offset` or none
/// (the name first, as the build finds the bindings written by macros).
macro_rules! access_binding {
    ($name:ident, $how:ident, $last:ident: $last_ty:ty, $buf:ty, $write:expr, $place:expr, [$($offset:ident)?]) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fh: Handle, $($offset: Count,)? buf: $buf, count: c_int, datatype: Handle, $last: $last_ty) -> c_int {
            let buf = (buf as *mut c_void, count, datatype);
            // SAFETY: the binding's contract.
            unsafe { $how(&stringify!($name)[1..], fh, $place, buf, $write, $last) }
        }
    };
}

/// The six bindings of one way of accessing in one direction: blocking, collective,
/// their nonblocking forms, and the split collective's beginning and end.
/// `$offset` names the offset parameter of the explicit-offset forms. (The names
/// come first, as the build finds the bindings written by macros.)
macro_rules! accesses {
    ($blocking:ident, $all:ident, $i:ident, $iall:ident, $begin:ident, $end:ident,
     $buf:ty, $write:expr, $place:expr, [$($offset:ident)?]) => {
        access_binding!($blocking, blocking, status: *mut Status, $buf, $write, $place, [$($offset)?]);
        access_binding!($all, blocking, status: *mut Status, $buf, $write, $place, [$($offset)?]);
        access_binding!($i, nonblocking, request: *mut Handle, $buf, $write, $place, [$($offset)?]);
        access_binding!($iall, nonblocking, request: *mut Handle, $buf, $write, $place, [$($offset)?]);
        #[no_mangle]
        pub unsafe extern "C" fn $begin(fh: Handle, $($offset: Count,)? buf: $buf, count: c_int, datatype: Handle) -> c_int {
            // SAFETY: the binding's contract.
            unsafe { begin(&stringify!($begin)[1..], fh, $place, (buf as *mut c_void, count, datatype), $write) }
        }
        #[no_mangle]
        pub unsafe extern "C" fn $end(fh: Handle, _buf: $buf, status: *mut Status) -> c_int {
            // SAFETY: the binding's contract.
            unsafe { end(&stringify!($end)[1..], fh, status) }
        }
    };
}

accesses!(
    PMPI_File_read_at,
    PMPI_File_read_at_all,
    PMPI_File_iread_at,
    PMPI_File_iread_at_all,
    PMPI_File_read_at_all_begin,
    PMPI_File_read_at_all_end,
    *mut c_void,
    false,
    Place::Start(Start::At(offset)),
    [offset]
);
accesses!(
    PMPI_File_write_at,
    PMPI_File_write_at_all,
    PMPI_File_iwrite_at,
    PMPI_File_iwrite_at_all,
    PMPI_File_write_at_all_begin,
    PMPI_File_write_at_all_end,
    *const c_void,
    true,
    Place::Start(Start::At(offset)),
    [offset]
);
accesses!(
    PMPI_File_read,
    PMPI_File_read_all,
    PMPI_File_iread,
    PMPI_File_iread_all,
    PMPI_File_read_all_begin,
    PMPI_File_read_all_end,
    *mut c_void,
    false,
    Place::Start(Start::Pointer),
    []
);
accesses!(
    PMPI_File_write,
    PMPI_File_write_all,
    PMPI_File_iwrite,
    PMPI_File_iwrite_all,
    PMPI_File_write_all_begin,
    PMPI_File_write_all_end,
    *const c_void,
    true,
    Place::Start(Start::Pointer),
    []
);

access_binding!(PMPI_File_read_ordered, blocking, status: *mut Status,
    *mut c_void, false, Place::Ordered, []);
access_binding!(PMPI_File_write_ordered, blocking, status: *mut Status,
    *const c_void, true, Place::Ordered, []);

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_read_ordered_begin(
    fh: Handle,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe {
        begin(
            "MPI_File_read_ordered_begin",
            fh,
            Place::Ordered,
            (buf, count, datatype),
            false,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_write_ordered_begin(
    fh: Handle,
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe {
        begin(
            "MPI_File_write_ordered_begin",
            fh,
            Place::Ordered,
            (buf.cast_mut(), count, datatype),
            true,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_read_ordered_end(
    fh: Handle,
    _buf: *mut c_void,
    status: *mut Status,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe { end("MPI_File_read_ordered_end", fh, status) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_write_ordered_end(
    fh: Handle,
    _buf: *const c_void,
    status: *mut Status,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe { end("MPI_File_write_ordered_end", fh, status) }
}

access_binding!(PMPI_File_read_shared, blocking, status: *mut Status,
    *mut c_void, false, Place::Shared, []);
access_binding!(PMPI_File_write_shared, blocking, status: *mut Status,
    *const c_void, true, Place::Shared, []);
access_binding!(PMPI_File_iread_shared, nonblocking, request: *mut Handle,
    *mut c_void, false, Place::Shared, []);
access_binding!(PMPI_File_iwrite_shared, nonblocking, request: *mut Handle,
    *const c_void, true, Place::Shared, []);
