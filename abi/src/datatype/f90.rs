//! The Fortran 90 parameterized types (MPI 4.1 19.1.9): `MPI_Type_create_f90_real`,
//! `_complex` and `_integer` give the smallest of the fixed-size Fortran types whose
//! precision and range (decimal digits, as Fortran's `SELECTED_REAL_KIND` and
//! `SELECTED_INT_KIND` count them) are at least those asked for. The type is
//! predefined (it cannot be freed), of the same layout as that fixed-size type, and
//! says how it was asked for: its envelope has the combiner `MPI_COMBINER_F90_REAL`
//! (`_COMPLEX`, `_INTEGER`) with the arguments. Asking again with the same arguments
//! gives the same handle.

use super::Envelope;
use crate::entry::call;
use crate::error::{non_null, Error, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::sync::Arc;

/// The real kinds: precision, range, the real type and the complex type of two.
const REALS: [(c_int, c_int, Handle, Handle); 3] = [
    (6, 37, MPI_REAL4, MPI_COMPLEX8),
    (15, 307, MPI_REAL8, MPI_COMPLEX16),
    (33, 4931, MPI_REAL16, MPI_COMPLEX32),
];

/// The integer kinds: range, type.
const INTEGERS: [(c_int, Handle); 5] = [
    (2, MPI_INTEGER1),
    (4, MPI_INTEGER2),
    (9, MPI_INTEGER4),
    (18, MPI_INTEGER8),
    (38, MPI_INTEGER16),
];

/// An argument: `MPI_UNDEFINED` (not asked for) as 0, or one that is not negative.
fn digits(value: c_int, what: &str) -> Result<c_int> {
    match value {
        MPI_UNDEFINED => Ok(0),
        v if v >= 0 => Ok(v),
        v => Err(Error::new(
            MPI_ERR_ARG,
            format!("the {what} {v} is negative (and not MPI_UNDEFINED)"),
        )),
    }
}

/// The fixed-size type of a real (or complex, if `complex`) of precision `p` and
/// range `r`.
fn real_kind(p: c_int, r: c_int, complex: bool) -> Result<Handle> {
    if p == MPI_UNDEFINED && r == MPI_UNDEFINED {
        return Err(Error::new(
            MPI_ERR_ARG,
            "neither the precision nor the range is given",
        ));
    }
    let (want_p, want_r) = (digits(p, "precision")?, digits(r, "range")?);
    REALS
        .iter()
        .find(|&&(kp, kr, ..)| kp >= want_p && kr >= want_r)
        .map(|&(_, _, real, cplx)| if complex { cplx } else { real })
        .ok_or_else(|| {
            Error::new(
                MPI_ERR_ARG,
                format!(
                    "no real type has a precision of {want_p} and a range of {want_r} digits (at most 33 and 4931)"
                ),
            )
        })
}

/// The fixed-size type of an integer of range `r` (which must be given).
fn integer_kind(r: c_int) -> Result<Handle> {
    if r == MPI_UNDEFINED {
        return Err(Error::new(MPI_ERR_ARG, "the range is not given"));
    }
    let want = digits(r, "range")?;
    INTEGERS
        .iter()
        .find(|&&(kr, _)| kr >= want)
        .map(|&(_, h)| h)
        .ok_or_else(|| {
            Error::new(
                MPI_ERR_ARG,
                format!("no integer type has a range of {want} digits (at most 38)"),
            )
        })
}

impl Mpi {
    /// The parameterized type of `combiner` with arguments `ints`, of the layout of
    /// the fixed-size type `fixed`: the one made before, or a new one.
    fn f90_type(&mut self, combiner: c_int, ints: Vec<c_int>, fixed: Handle) -> Result<Handle> {
        let envelope = Envelope {
            combiner,
            ints,
            addresses: vec![],
            counts: Vec::new(),
            types: vec![],
        };
        let made = self
            .types
            .iter()
            .find(|(_, t)| t.predefined && t.envelope.as_deref() == Some(&envelope));
        if let Some((h, _)) = made {
            return Ok(h);
        }
        let mut t = self.dtype_any(fixed)?.clone();
        t.envelope = Some(Arc::new(envelope));
        t.committed = true;
        self.types.insert(t)
    }
}

/// Run binding `name`: the type `make` chooses, written to `newtype`.
///
/// # Safety
///
/// `newtype` is null or writable.
unsafe fn f90_binding(
    name: &str,
    newtype: *mut Handle,
    make: impl FnOnce(&mut Mpi) -> Result<Handle>,
) -> c_int {
    call(name, crate::error::Object::None, |mpi| {
        non_null(newtype, MPI_ERR_ARG, "new type")?;
        let h = make(mpi)?;
        // SAFETY: checked not null.
        unsafe { newtype.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_f90_real(
    p: c_int,
    r: c_int,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe {
        f90_binding("MPI_Type_create_f90_real", newtype, |mpi| {
            let fixed = real_kind(p, r, false)?;
            mpi.f90_type(MPI_COMBINER_F90_REAL, vec![p, r], fixed)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_f90_complex(
    p: c_int,
    r: c_int,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe {
        f90_binding("MPI_Type_create_f90_complex", newtype, |mpi| {
            let fixed = real_kind(p, r, true)?;
            mpi.f90_type(MPI_COMBINER_F90_COMPLEX, vec![p, r], fixed)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_f90_integer(r: c_int, newtype: *mut Handle) -> c_int {
    // SAFETY: the binding's contract.
    unsafe {
        f90_binding("MPI_Type_create_f90_integer", newtype, |mpi| {
            let fixed = integer_kind(r)?;
            mpi.f90_type(MPI_COMBINER_F90_INTEGER, vec![r], fixed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_kind_that_holds_what_is_asked_is_chosen() {
        assert_eq!(real_kind(6, MPI_UNDEFINED, false).unwrap(), MPI_REAL4);
        assert_eq!(real_kind(7, MPI_UNDEFINED, false).unwrap(), MPI_REAL8);
        assert_eq!(real_kind(MPI_UNDEFINED, 38, true).unwrap(), MPI_COMPLEX16);
        assert_eq!(real_kind(15, 308, false).unwrap(), MPI_REAL16);
        assert_eq!(real_kind(34, 1, false).unwrap_err().class, MPI_ERR_ARG);
        assert_eq!(
            real_kind(MPI_UNDEFINED, MPI_UNDEFINED, false)
                .unwrap_err()
                .class,
            MPI_ERR_ARG
        );
        assert_eq!(real_kind(-2, 3, false).unwrap_err().class, MPI_ERR_ARG);
        assert_eq!(integer_kind(MPI_UNDEFINED).unwrap_err().class, MPI_ERR_ARG);
        assert_eq!(integer_kind(0).unwrap(), MPI_INTEGER1);
        assert_eq!(integer_kind(9).unwrap(), MPI_INTEGER4);
        assert_eq!(integer_kind(10).unwrap(), MPI_INTEGER8);
        assert_eq!(integer_kind(39).unwrap_err().class, MPI_ERR_ARG);
    }
}
