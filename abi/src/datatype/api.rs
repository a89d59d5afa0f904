//! The datatype bindings: dup, commit and free, `MPI_Pack`/`MPI_Unpack` (the
//! constructors are in `constructors`, the questions a type answers in `query`).

use super::constructors::{envelope, Form};
use super::pack;
use crate::attr::{self, Holder};
use crate::entry::{call, call_in_steps};
use crate::error::{non_null, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::p2p::check_count;
use crate::state::Mpi;
use std::sync::Arc;

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_dup(oldtype: Handle, newtype: *mut Handle) -> c_int {
    call_in_steps("MPI_Type_dup", Object::None, || {
        non_null(newtype, MPI_ERR_ARG, "new type")?;
        let h = global::with(|mpi| {
            let old = mpi.dtype_any(oldtype)?;
            let mut t = old.clone();
            t.made_of = Arc::from(vec![old.clone()]);
            t.predefined = false;
            let e = envelope(Form::Int, MPI_COMBINER_DUP, &[], &[], vec![oldtype]);
            t.envelope = Some(Arc::new(e));
            mpi.types.insert(t)
        })?;
        // The attributes, by their keys' copy functions (outside the state).
        if let Err(e) = attr::copy_attrs(Holder::datatype(oldtype), Holder::datatype(h)) {
            global::with(|mpi| {
                mpi.types.remove(h);
                Ok(())
            })?;
            // SAFETY: checked not null. (As MPICH: the failed duplicate is null.)
            unsafe { newtype.write(MPI_DATATYPE_NULL) };
            return Err(e);
        }
        // SAFETY: checked not null.
        unsafe { newtype.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_commit(datatype: *mut Handle) -> c_int {
    call("MPI_Type_commit", Object::None, |mpi| {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(datatype, MPI_ERR_ARG, "type") }?;
        if let Some(t) = mpi.types.get_mut(h) {
            t.committed = true;
            return Ok(());
        }
        // A predefined type is committed already.
        mpi.dtype_any(h).map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_free(datatype: *mut Handle) -> c_int {
    call_in_steps("MPI_Type_free", Object::None, || {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(datatype, MPI_ERR_ARG, "type") }?;
        global::with(|mpi| match mpi.types.get(h) {
            Some(t) if !t.predefined => Ok(()),
            Some(_) => Err(Error::new(
                MPI_ERR_TYPE,
                "a predefined datatype (a Fortran 90 parameterized one) cannot be freed",
            )),
            None => {
                mpi.dtype_any(h)?;
                Err(Error::new(
                    MPI_ERR_TYPE,
                    "a predefined datatype cannot be freed",
                ))
            }
        })?;
        // Its attributes' deletions (outside the state), then the type.
        attr::delete_attrs(Holder::datatype(h), None)?;
        global::with(|mpi| {
            mpi.release(h);
            Ok(())
        })?;
        // SAFETY: checked not null.
        unsafe { datatype.write(MPI_DATATYPE_NULL) };
        Ok(())
    })
}

/// The bytes `incount` elements of `datatype` (committed) pack into.
fn pack_size(mpi: &Mpi, incount: Count, datatype: Handle) -> Result<usize> {
    let n = usize::try_from(incount)
        .map_err(|_| Error::new(MPI_ERR_COUNT, format!("count {incount} is negative")))?;
    mpi.dtype(datatype)?
        .bytes(n)
        .ok_or_else(|| Error::new(MPI_ERR_COUNT, "count overflows"))
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Pack_size(
    incount: c_int,
    datatype: Handle,
    comm: Handle,
    size: *mut c_int,
) -> c_int {
    call("MPI_Pack_size", Object::Comm(comm), |mpi| {
        mpi.comm(comm)?;
        let s = pack_size(mpi, Count::from(incount), datatype)?;
        let s = c_int::try_from(s).map_err(|_| {
            Error::new(
                MPI_ERR_VALUE_TOO_LARGE,
                "the size exceeds an int: use MPI_Pack_size_c",
            )
        })?;
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(size, s, "size") }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Pack_size_c(
    incount: Count,
    datatype: Handle,
    comm: Handle,
    size: *mut Count,
) -> c_int {
    call("MPI_Pack_size_c", Object::Comm(comm), |mpi| {
        mpi.comm(comm)?;
        let s = pack_size(mpi, incount, datatype)?;
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(size, s as Count, "size") }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Pack(
    inbuf: *const c_void,
    incount: c_int,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: c_int,
    position: *mut c_int,
    comm: Handle,
) -> c_int {
    let elements = (inbuf.cast_mut(), incount, datatype);
    // SAFETY: the binding's contract.
    unsafe {
        through_pack_buffer(
            "MPI_Pack",
            comm,
            elements,
            (outbuf, outsize, position),
            true,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Unpack(
    inbuf: *const c_void,
    insize: c_int,
    position: *mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: Handle,
    comm: Handle,
) -> c_int {
    let packed = (inbuf.cast_mut(), insize, position);
    // SAFETY: the binding's contract.
    unsafe {
        through_pack_buffer(
            "MPI_Unpack",
            comm,
            (outbuf, outcount, datatype),
            packed,
            false,
        )
    }
}

/// Run binding `name` (`MPI_Pack`, `packing`, or `MPI_Unpack`), its errors raised
/// through `comm`'s handler: the `count` elements of `datatype` at `buf` packed into
/// (or unpacked from) the pack buffer `packed` of `size` bytes from `*position`,
/// which moves past them; `MPI_ERR_TRUNCATE` where they do not fit.
///
/// # Safety
///
/// `buf` holds `count` elements of `datatype` (room for them, to unpack); `packed`
/// holds `size` bytes; `position` is null or points to a writable `int`.
unsafe fn through_pack_buffer(
    name: &str,
    comm: Handle,
    (buf, count, datatype): (*mut c_void, c_int, Handle),
    (packed, size, position): (*mut c_void, c_int, *mut c_int),
    packing: bool,
) -> c_int {
    call(name, Object::Comm(comm), |mpi| {
        mpi.comm(comm)?;
        let n = check_count(count)?;
        let t = mpi.dtype(datatype)?;
        if position.is_null() || packed.is_null() {
            return Err(Error::new(
                MPI_ERR_ARG,
                "the position or buffer pointer is null",
            ));
        }
        if size < 0 {
            let which = if packing { "outsize" } else { "insize" };
            return Err(Error::new(
                MPI_ERR_COUNT,
                format!("{which} {size} is negative"),
            ));
        }
        // SAFETY: checked not null; the caller's contract.
        let pos = unsafe { *position };
        let need = t
            .bytes(n)
            .ok_or_else(|| Error::new(MPI_ERR_COUNT, "count overflows"))?;
        let at = usize::try_from(pos)
            .ok()
            .filter(|at| at.checked_add(need).is_some_and(|end| end <= size as usize))
            .ok_or_else(|| {
                let what = if packing {
                    "packed into"
                } else {
                    "unpacked from"
                };
                Error::new(
                    MPI_ERR_TRUNCATE,
                    format!(
                        "{need} bytes cannot be {what} the {size}-byte buffer at position {pos}"
                    ),
                )
            })?;
        // SAFETY: the caller's contract; the room was checked.
        unsafe {
            let bytes = packed.cast::<u8>().add(at);
            if packing {
                let out = rbtl::btl::slice_at_mut(bytes, need);
                pack::pack(t, buf.cast_const().cast(), n, out);
            } else {
                let input = rbtl::btl::slice_at(bytes, need);
                pack::unpack(t, input, buf.cast(), n);
            }
            position.write((at + need) as c_int);
        }
        Ok(())
    })
}
