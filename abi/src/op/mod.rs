//! Reduction operations: the predefined ones on every basic kind they apply to, and
//! the user's (`MPI_Op_create`).

pub mod api;
#[cfg(target_arch = "x86_64")]
mod extended;
mod kernels;
mod quad;

use crate::datatype::{pack, Datatype, Prim};
use crate::error::{Error, Result};
use crate::ffi::*;
use std::cell::RefCell;

/// A user's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserOp {
    /// `MPI_User_function` (or `MPI_User_function_c` when `large`).
    pub function: usize,
    pub commute: bool,
    pub large: bool,
}

/// An operation, as a reduction applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A predefined one, by its handle (`MPI_SUM`, ...).
    Predefined(Handle),
    User(UserOp),
}

impl Op {
    /// Whether the order of the operands does not matter.
    pub fn commutative(&self) -> bool {
        match self {
            Op::Predefined(_) => true,
            Op::User(u) => u.commute,
        }
    }
}

/// Whether `h` is a predefined operation.
pub fn is_predefined(h: Handle) -> bool {
    matches!(
        h,
        MPI_SUM
            | MPI_MIN
            | MPI_MAX
            | MPI_PROD
            | MPI_BAND
            | MPI_BOR
            | MPI_BXOR
            | MPI_LAND
            | MPI_LOR
            | MPI_LXOR
            | MPI_MINLOC
            | MPI_MAXLOC
            | MPI_REPLACE
            | MPI_NO_OP
    )
}

/// The name of a predefined operation.
pub fn name(h: Handle) -> &'static str {
    match h {
        MPI_SUM => "MPI_SUM",
        MPI_MIN => "MPI_MIN",
        MPI_MAX => "MPI_MAX",
        MPI_PROD => "MPI_PROD",
        MPI_BAND => "MPI_BAND",
        MPI_BOR => "MPI_BOR",
        MPI_BXOR => "MPI_BXOR",
        MPI_LAND => "MPI_LAND",
        MPI_LOR => "MPI_LOR",
        MPI_LXOR => "MPI_LXOR",
        MPI_MINLOC => "MPI_MINLOC",
        MPI_MAXLOC => "MPI_MAXLOC",
        MPI_REPLACE => "MPI_REPLACE",
        MPI_NO_OP => "MPI_NO_OP",
        _ => "a user operation",
    }
}

/// Check that predefined `op` applies to `ty` (before any data moves).
pub fn check(op: Op, ty: &Datatype) -> Result<()> {
    let Op::Predefined(h) = op else {
        return Ok(());
    };
    match ty.prim {
        Some(p) if kernels::supports(h, p) => Ok(()),
        Some(p) => Err(Error::new(
            MPI_ERR_OP,
            format!("{} does not apply to {} ({})", name(h), type_name(ty), kernels::why_not(h, p)),
        )),
        None if ty.size == 0 => Ok(()),
        None => Err(Error::new(
            MPI_ERR_OP,
            format!("{} applies to a datatype whose elements are all of one predefined type; {} mixes several", name(h), type_name(ty)),
        )),
    }
}

fn type_name(ty: &Datatype) -> String {
    if ty.name.is_empty() {
        "this derived datatype".into()
    } else {
        ty.name.to_string()
    }
}

/// `inout[i] = input[i] op inout[i]` for `n` elements of basic kind `p`, by
/// predefined operation `h`.
///
/// # Safety
///
/// `input` and `inout` hold `n` elements of `p` each and do not overlap.
pub unsafe fn reduce_basic(
    h: Handle,
    p: Prim,
    input: *const u8,
    inout: *mut u8,
    n: usize,
) -> Result<()> {
    // SAFETY: the caller's contract.
    unsafe { kernels::apply(h, p, input, inout, n) }
}

/// `inout[i] = input[i] op inout[i]` for `count` elements of `ty` (`ty_handle` is
/// what a user's function is told), both in packed form.
///
/// # Safety
///
/// `input` and `inout` hold `count` packed elements of `ty` each and do not overlap.
pub unsafe fn reduce(
    op: Op,
    ty: &Datatype,
    ty_handle: Handle,
    input: *const u8,
    inout: *mut u8,
    count: usize,
) -> Result<()> {
    if count == 0 || ty.size == 0 {
        return Ok(());
    }
    match op {
        Op::Predefined(h) => {
            let p = ty
                .prim
                .ok_or_else(|| Error::new(MPI_ERR_OP, "a mixed datatype"))?;
            let n = count * ty.size / p.size();
            // SAFETY: the caller's contract: `n` packed elements of `p` each.
            unsafe { kernels::apply(h, p, input, inout, n) }
        }
        Op::User(u) if ty.contiguous => {
            // SAFETY: packed elements of a contiguous type are its elements in memory.
            unsafe { call_user(u, input, inout, count, (ty_handle, ty)) }
        }
        Op::User(u) => {
            // The user's function sees elements as they lie in memory: unpack both,
            // apply, pack the result back.
            let span = (ty.extent() as usize)
                .checked_mul(count)
                .ok_or_else(|| Error::new(MPI_ERR_COUNT, "overflow"))?;
            let (mut a, mut b) = (vec![0u8; span], vec![0u8; span]);
            let base = |v: &mut Vec<u8>| v.as_mut_ptr().wrapping_offset(-ty.lb);
            let len = count * ty.size;
            // SAFETY: each buffer holds `count` extents starting at the type's lower
            // bound; the packed inputs hold `len` bytes (the caller's contract).
            unsafe {
                pack::unpack(ty, rbtl::btl::slice_at(input, len), base(&mut a), count);
                pack::unpack(ty, rbtl::btl::slice_at(inout, len), base(&mut b), count);
                call_user(u, base(&mut a), base(&mut b), count, (ty_handle, ty))?;
                pack::pack(ty, base(&mut b), count, rbtl::btl::slice_at_mut(inout, len));
            }
            Ok(())
        }
    }
}

thread_local! {
    /// The datatype (and its handle) that the program's function running on this
    /// thread was given.
    static GIVEN: RefCell<Option<(Handle, Datatype)>> = const { RefCell::new(None) };
}

/// Datatype `h`, if a program's function running on this thread was given it (a
/// reduction function, a data representation's functions): such a function may ask
/// the type's size and bounds (as functions that serve several types do) even where
/// it runs inside the library (in the call that progresses a nonblocking
/// collective, in a file access), whose other MPI calls are refused.
pub fn given_type(h: Handle) -> Option<Datatype> {
    GIVEN.with(|g| {
        g.borrow()
            .as_ref()
            .filter(|(k, _)| *k == h)
            .map(|(_, t)| t.clone())
    })
}

/// Run `f`, a call of a program's function given datatype `ty` (handle `handle`),
/// the type noted for [`given_type`] meanwhile.
pub fn with_given_type<R>(handle: Handle, ty: &Datatype, f: impl FnOnce() -> R) -> R {
    let before = GIVEN.with(|g| g.replace(Some((handle, ty.clone()))));
    let out = f();
    GIVEN.with(|g| *g.borrow_mut() = before);
    out
}

/// Call a user's function on `count` elements of `ty` (whose handle is given to
/// it), the type noted for [`given_type`] meanwhile.
///
/// # Safety
///
/// `input` and `inout` hold `count` elements as the function expects.
unsafe fn call_user(
    u: UserOp,
    input: *const u8,
    inout: *mut u8,
    count: usize,
    (handle, ty): (Handle, &Datatype),
) -> Result<()> {
    // SAFETY: the caller's contract.
    with_given_type(handle, ty, || unsafe {
        apply_user(u, input, inout, count, handle)
    })
}

/// Call a user's function on `count` elements of the type `ty` names.
///
/// # Safety
///
/// As [`call_user`].
unsafe fn apply_user(
    u: UserOp,
    input: *const u8,
    inout: *mut u8,
    count: usize,
    ty: Handle,
) -> Result<()> {
    let mut ty = ty;
    if u.large {
        type F = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut Count, *mut Handle);
        // SAFETY: MPI_Op_create_c's caller gave a function of this type.
        let f: F = unsafe { std::mem::transmute::<usize, F>(u.function) };
        let mut n = count as Count;
        // SAFETY: the caller's contract.
        unsafe { f(input as *mut c_void, inout.cast(), &mut n, &mut ty) };
        return Ok(());
    }
    type F = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Handle);
    // SAFETY: MPI_Op_create's caller gave a function of this type.
    let f: F = unsafe { std::mem::transmute::<usize, F>(u.function) };
    let mut n = c_int::try_from(count).map_err(|_| {
        Error::new(MPI_ERR_COUNT, format!("{count} elements are more than a user function of MPI_Op_create takes (an int): use MPI_Op_create_c"))
    })?;
    // SAFETY: the caller's contract.
    unsafe { f(input as *mut c_void, inout.cast(), &mut n, &mut ty) };
    Ok(())
}

/// Whether `op` is allowed for `prim` (for one-sided accumulates, which also take
/// `MPI_REPLACE` and `MPI_NO_OP`).
pub fn supports(h: Handle, p: Prim) -> bool {
    kernels::supports(h, p)
}
