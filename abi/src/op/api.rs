//! The bindings of operations: `MPI_Op_create`, `MPI_Op_free`, `MPI_Op_commutative`,
//! `MPI_Reduce_local`.

use super::{Op, UserOp};
use crate::entry::{call, call_in_steps, make_from_function, query_binding};
use crate::error::{bad_handle, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::state::Mpi;

impl Mpi {
    /// The operation `h`.
    pub fn op(&self, h: Handle) -> Result<Op> {
        if super::is_predefined(h) {
            return Ok(Op::Predefined(h));
        }
        match self.ops.get(h) {
            Some(u) => Ok(Op::User(*u)),
            None => Err(bad_handle(
                h,
                (MPI_OP_NULL, "MPI_OP_NULL"),
                MPI_ERR_OP,
                "an operation",
            )),
        }
    }
}

/// `MPI_Op_create` (`large`: `MPI_Op_create_c`).
///
/// # Safety
///
/// `op` is null or writable.
unsafe fn create(
    name: &str,
    function: *mut c_void,
    commute: c_int,
    op: *mut Handle,
    large: bool,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        make_from_function(name, function, (op, "op"), |mpi, function| {
            mpi.ops.insert(UserOp {
                function,
                commute: commute != 0,
                large,
            })
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Op_create(
    user_fn: *mut c_void,
    commute: c_int,
    op: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe { create("MPI_Op_create", user_fn, commute, op, false) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Op_create_c(
    user_fn: *mut c_void,
    commute: c_int,
    op: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe { create("MPI_Op_create_c", user_fn, commute, op, true) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Op_free(op: *mut Handle) -> c_int {
    call("MPI_Op_free", Object::None, |mpi| {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(op, MPI_ERR_ARG, "op") }?;
        if super::is_predefined(h) {
            return Err(Error::new(
                MPI_ERR_OP,
                format!("{} is predefined: it cannot be freed", super::name(h)),
            ));
        }
        if mpi.ops.get(h).is_none() {
            return Err(Error::new(
                MPI_ERR_OP,
                format!("{h:#x} is not an operation"),
            ));
        }
        mpi.release(h);
        // SAFETY: checked not null.
        unsafe { op.write(MPI_OP_NULL) };
        Ok(())
    })
}

query_binding!(PMPI_Op_commutative, op, Object::None, |mpi|
    => commute: c_int = c_int::from(mpi.op(op)?.commutative()));

#[no_mangle]
pub unsafe extern "C" fn PMPI_Reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
) -> c_int {
    call_in_steps("MPI_Reduce_local", Object::None, || {
        let (n, o, t) = global::with(|mpi| {
            let n = crate::p2p::check_count(count)?;
            let o = mpi.op(op)?;
            let t = mpi.dtype(datatype)?.clone();
            super::check(o, &t)?;
            // (MPI_IN_PLACE is no buffer here: MPI 4.1 §6.9.7.)
            for (p, which) in [(inbuf, "inbuf"), (inoutbuf.cast_const(), "inoutbuf")] {
                if crate::coll::args::in_place(p) || (p.is_null() && n > 0 && t.size > 0) {
                    let what = if p.is_null() { "null" } else { "MPI_IN_PLACE" };
                    return Err(Error::new(MPI_ERR_BUFFER, format!("{which} is {what}")));
                }
            }
            if inbuf == inoutbuf.cast_const() && n > 0 && t.size > 0 {
                return Err(Error::new(
                    MPI_ERR_BUFFER,
                    "inbuf and inoutbuf are one buffer (MPI forbids aliased arguments)",
                ));
            }
            Ok((n, o, t))
        })?;
        // Outside the library's state: a program's function may call MPI.
        let len = t
            .bytes(n)
            .ok_or_else(|| Error::new(MPI_ERR_COUNT, "count overflows"))?;
        if t.contiguous {
            let (input, inout) = (
                inbuf.cast::<u8>().wrapping_offset(t.lb),
                inoutbuf.cast::<u8>().wrapping_offset(t.lb),
            );
            // SAFETY: the binding's contract: both buffers hold `count` elements,
            // which lie packed from the type's lower bound (a contiguous type): no
            // copies.
            return unsafe { super::reduce(o, &t, datatype, input, inout, n) };
        }
        let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
        // SAFETY: the binding's contract: both buffers hold `count` elements.
        unsafe {
            crate::datatype::pack::pack(&t, inbuf.cast(), n, &mut a);
            crate::datatype::pack::pack(&t, inoutbuf.cast(), n, &mut b);
            super::reduce(o, &t, datatype, a.as_ptr(), b.as_mut_ptr(), n)?;
            crate::datatype::pack::unpack(&t, &b, inoutbuf.cast(), n);
        }
        Ok(())
    })
}
