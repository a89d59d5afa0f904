//! Writing and reading a status by hand: `MPI_Status_set_elements(_x, _c)` and
//! `MPI_Status_set_cancelled` (for generalized requests and layered libraries), the
//! accessors of MPI 5.0 (`MPI_Status_get/set_source`, `_tag`, `_error`), and
//! `MPI_Get_elements_x`.

use crate::entry::call;
use crate::error::{non_null, Error, Object, Result};
use crate::ffi::*;

/// Run `f` on status argument `status` of binding `name`.
///
/// # Safety
///
/// `status` is null (refused) or points to a status.
unsafe fn on_status(
    name: &str,
    status: *mut Status,
    f: impl FnOnce(&mut Status, &crate::state::Mpi) -> Result<()>,
) -> c_int {
    call(name, Object::None, |mpi| {
        non_null(status, MPI_ERR_ARG, "status")?;
        // SAFETY: checked not null; the caller's contract.
        f(unsafe { &mut *status }, mpi)
    })
}

/// The bytes `count` basic elements of `ty` make: whole elements of the type where
/// `count` is a multiple of its basic elements, else elements of its one basic kind
/// (as `MPI_Get_elements` counts them back).
fn bytes_of(ty: &crate::datatype::Datatype, count: Count) -> Result<u64> {
    let n = u64::try_from(count)
        .map_err(|_| Error::new(MPI_ERR_COUNT, format!("count {count} is negative")))?;
    let per = ty.elements as u64;
    if per == 0 && n == 0 {
        return Ok(0);
    }
    if per > 0 && n % per == 0 {
        return Ok(n / per * ty.size as u64);
    }
    match ty.prim {
        Some(p) if !matches!(p, crate::datatype::Prim::Pair(_)) => Ok(n * p.size() as u64),
        _ => Err(Error::new(
            MPI_ERR_COUNT,
            format!("{count} basic elements do not fill whole elements of this type"),
        )),
    }
}

/// `MPI_Status_set_elements_x` and `_c` (`$name`): `count` (an `MPI_Count`) basic
/// elements.
macro_rules! set_elements {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            status: *mut Status,
            datatype: Handle,
            count: Count,
        ) -> c_int {
            // SAFETY: the binding's contract.
            unsafe {
                on_status(&stringify!($name)[1..], status, |s, mpi| {
                    s.set_bytes(bytes_of(mpi.dtype_any(datatype)?, count)?);
                    Ok(())
                })
            }
        }
    };
}

set_elements!(PMPI_Status_set_elements_x);
set_elements!(PMPI_Status_set_elements_c);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Status_set_elements(
    status: *mut Status,
    datatype: Handle,
    count: c_int,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe {
        on_status("MPI_Status_set_elements", status, |s, mpi| {
            s.set_bytes(bytes_of(mpi.dtype_any(datatype)?, Count::from(count))?);
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Status_set_cancelled(status: *mut Status, flag: c_int) -> c_int {
    // SAFETY: the binding's contract.
    unsafe {
        on_status("MPI_Status_set_cancelled", status, |s, _| {
            s.set_cancelled(flag != 0);
            Ok(())
        })
    }
}

/// The accessors of one field: its getter and setter.
macro_rules! field {
    ($get:ident, $set:ident, $field:ident, $what:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $get(status: *mut Status, $field: *mut c_int) -> c_int {
            // SAFETY: the binding's contract.
            unsafe {
                on_status(&stringify!($get)[1..], status, |s, _| {
                    non_null($field, MPI_ERR_ARG, $what)?;
                    $field.write(s.$field);
                    Ok(())
                })
            }
        }

        #[no_mangle]
        pub unsafe extern "C" fn $set(status: *mut Status, $field: c_int) -> c_int {
            // SAFETY: the binding's contract.
            unsafe {
                on_status(&stringify!($set)[1..], status, |s, _| {
                    s.$field = $field;
                    Ok(())
                })
            }
        }
    };
}

field!(
    PMPI_Status_get_source,
    PMPI_Status_set_source,
    source,
    "source"
);
field!(PMPI_Status_get_tag, PMPI_Status_set_tag, tag, "tag");
field!(PMPI_Status_get_error, PMPI_Status_set_error, error, "error");

#[no_mangle]
pub unsafe extern "C" fn PMPI_Get_elements_x(
    status: *const Status,
    datatype: Handle,
    count: *mut Count,
) -> c_int {
    // SAFETY: the binding's contract, which is the `_c` form's.
    unsafe { crate::p2p::api::PMPI_Get_elements_c(status, datatype, count) }
}
