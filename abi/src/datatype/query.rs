//! The questions a datatype answers: sizes and bounds, names, its envelope and
//! contents, the elements a message of it holds; and addresses.

use super::Datatype;
use crate::comm::api::{read_object_name, write_name};
use crate::entry::{call, query_binding};
use crate::error::{Error, Object};
use crate::ffi::*;
use std::ptr::null_mut;

/// A binding `$name` that asks datatype `datatype` its size or bounds: each answer
/// `$value` (of the type `$t`) stored at its out-parameter `$out`, which must not
/// be null (`MPI_ERR_ARG`). A program's reduction function asking about the type
/// it was given is answered without entering the library ([`crate::op::given_type`]).
macro_rules! type_query {
    ($name:ident, |$t:ident| => $($out:ident: $ty:ty = $value:expr),+ $(,)?) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(datatype: Handle, $($out: *mut $ty),+) -> c_int {
            let answer = |$t: &Datatype| {
                $(
                    let value: $ty = $value;
                    // SAFETY: the binding's contract: writable (checked not null).
                    unsafe { $out.write(value) };
                )+
            };
            if let Some(t) = crate::op::given_type(datatype) {
                if true $(&& !$out.is_null())+ {
                    answer(&t);
                    return MPI_SUCCESS;
                }
            }
            call(&stringify!($name)[1..], Object::None, |mpi| {
                let t = mpi.dtype_any(datatype)?;
                $($crate::error::non_null($out, MPI_ERR_ARG, stringify!($out))?;)+
                answer(t);
                Ok(())
            })
        }
    };
}

type_query!(PMPI_Type_size, |t|
    => size: c_int = c_int::try_from(t.size).unwrap_or(MPI_UNDEFINED));
type_query!(PMPI_Type_size_c, |t| => size: Count = t.size as Count);
type_query!(PMPI_Type_get_extent, |t| => lb: Aint = t.lb, extent: Aint = t.extent());
type_query!(PMPI_Type_get_true_extent, |t|
    => true_lb: Aint = t.true_lb, true_extent: Aint = t.true_ub - t.true_lb);
// The `_x` forms of MPI-3 (`MPI_Count` results), as the `_c` ones of MPI-4.
type_query!(PMPI_Type_size_x, |t| => size: Count = t.size as Count);
type_query!(PMPI_Type_get_extent_x, |t|
    => lb: Count = t.lb as Count, extent: Count = t.extent() as Count);
type_query!(PMPI_Type_get_true_extent_x, |t|
    => true_lb: Count = t.true_lb as Count, true_extent: Count = (t.true_ub - t.true_lb) as Count);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_get_name(
    datatype: Handle,
    type_name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    call("MPI_Type_get_name", Object::None, |mpi| {
        // (MPI_DATATYPE_NULL's name is its own, as MPICH gives it.)
        let name = match datatype {
            MPI_DATATYPE_NULL => "MPI_DATATYPE_NULL".into(),
            _ => mpi.dtype_any(datatype)?.name.clone(),
        };
        // SAFETY: the binding's contract: room for MPI_MAX_OBJECT_NAME bytes.
        unsafe { write_name(&name, type_name, resultlen, MPI_MAX_OBJECT_NAME as usize) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_set_name(datatype: Handle, type_name: *const c_char) -> c_int {
    call("MPI_Type_set_name", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        let name = unsafe { read_object_name(type_name) }?;
        // A predefined type's name may change too (as MPICH and Open MPI allow): in
        // this process's table of them.
        mpi.dtype_any_mut(datatype)?.name = name.into();
        Ok(())
    })
}

/// What `MPI_Type_get_envelope_c` says of `datatype`: how many integers, addresses,
/// large counts and datatypes made it, and its combiner.
fn envelope(
    mpi: &crate::state::Mpi,
    datatype: Handle,
) -> crate::error::Result<([usize; 4], c_int)> {
    Ok(match &mpi.dtype_any(datatype)?.envelope {
        None => ([0; 4], MPI_COMBINER_NAMED),
        Some(e) => (
            [
                e.ints.len(),
                e.addresses.len(),
                e.counts.len(),
                e.types.len(),
            ],
            e.combiner,
        ),
    })
}

/// Whether `binding`, an `int` form, may tell what made a type of `large` large
/// counts: not when a large-count constructor made it (MPI 4.1 §5.1.13).
fn int_form_answers(large: usize, binding: &str) -> crate::error::Result<()> {
    match large {
        0 => Ok(()),
        _ => Err(Error::new(
            MPI_ERR_TYPE,
            format!("the datatype was made by a large-count constructor: ask {binding}_c"),
        )),
    }
}

query_binding!(PMPI_Type_get_envelope, datatype, Object::None, |mpi| {
    let ([ni, na, nl, nd], c) = envelope(mpi, datatype)?;
    let () = int_form_answers(nl, "MPI_Type_get_envelope")?;
} => num_integers: c_int = ni as c_int,
    num_addresses: c_int = na as c_int,
    num_datatypes: c_int = nd as c_int,
    combiner: c_int = c);

query_binding!(PMPI_Type_get_envelope_c, datatype, Object::None, |mpi| {
    let ([ni, na, nl, nd], c) = envelope(mpi, datatype)?;
} => num_integers: Count = ni as Count,
    num_addresses: Count = na as Count,
    num_large_counts: Count = nl as Count,
    num_datatypes: Count = nd as Count,
    combiner: c_int = c);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_get_contents(
    datatype: Handle,
    max_integers: c_int,
    max_addresses: c_int,
    max_datatypes: c_int,
    array_of_integers: *mut c_int,
    array_of_addresses: *mut Aint,
    array_of_datatypes: *mut Handle,
) -> c_int {
    call("MPI_Type_get_contents", Object::None, |mpi| {
        let max = [max_integers, max_addresses, 0, max_datatypes].map(Count::from);
        int_form_answers(envelope(mpi, datatype)?.0[2], "MPI_Type_get_contents")?;
        let arrays = (
            array_of_integers,
            array_of_addresses,
            null_mut(),
            array_of_datatypes,
        );
        // SAFETY: the binding's contract.
        unsafe { contents(mpi, datatype, max, arrays) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_get_contents_c(
    datatype: Handle,
    max_integers: Count,
    max_addresses: Count,
    max_large_counts: Count,
    max_datatypes: Count,
    array_of_integers: *mut c_int,
    array_of_addresses: *mut Aint,
    array_of_large_counts: *mut Count,
    array_of_datatypes: *mut Handle,
) -> c_int {
    call("MPI_Type_get_contents_c", Object::None, |mpi| {
        let max = [max_integers, max_addresses, max_large_counts, max_datatypes];
        let arrays = (
            array_of_integers,
            array_of_addresses,
            array_of_large_counts,
            array_of_datatypes,
        );
        // SAFETY: the binding's contract.
        unsafe { contents(mpi, datatype, max, arrays) }
    })
}

/// What made `datatype`, into the arrays of integers, addresses and datatypes, whose
/// room is `max` (integers, addresses, large counts, datatypes).
///
/// # Safety
///
/// Each array holds its `max` items.
unsafe fn contents(
    mpi: &mut crate::state::Mpi,
    datatype: Handle,
    max: [Count; 4],
    (array_of_integers, array_of_addresses, array_of_large_counts, array_of_datatypes): (
        *mut c_int,
        *mut Aint,
        *mut Count,
        *mut Handle,
    ),
) -> crate::error::Result<()> {
    let t = mpi.dtype_any(datatype)?;
    let Some(e) = t.envelope.clone() else {
        return Err(Error::new(
            MPI_ERR_TYPE,
            "a predefined datatype has no contents",
        ));
    };
    let made_of = t.made_of.clone();
    let need = [
        e.ints.len(),
        e.addresses.len(),
        e.counts.len(),
        e.types.len(),
    ];
    if max
        .iter()
        .zip(need)
        .any(|(&m, n)| usize::try_from(m).map_or(true, |m| m < n))
    {
        return Err(Error::new(
            MPI_ERR_ARG,
            "the arrays are smaller than MPI_Type_get_envelope says",
        ));
    }
    // A derived type among the contents is handed out as a new handle, which the
    // caller frees (MPI 5.1.13); a predefined one as itself.
    let mut types = Vec::with_capacity(e.types.len());
    for (&h, old) in e.types.iter().zip(made_of.iter()) {
        types.push(if old.predefined {
            h
        } else {
            mpi.types.insert(old.clone())?
        });
    }
    /// Copy `from` into the array `to` (which may be null when `from` is empty).
    ///
    /// # Safety
    ///
    /// `to` holds `from.len()` items.
    unsafe fn copy<T: Copy>(from: &[T], to: *mut T) {
        if !from.is_empty() {
            // SAFETY: the caller's contract.
            unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), to, from.len()) };
        }
    }
    // SAFETY: the arrays hold at least the envelope's counts (checked).
    unsafe {
        copy(&e.ints, array_of_integers);
        copy(&e.addresses, array_of_addresses);
        copy(&e.counts, array_of_large_counts);
        copy(&types, array_of_datatypes);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Get_address(location: *const c_void, address: *mut Aint) -> c_int {
    // SAFETY: null or writable.
    let r = unsafe { crate::error::write_arg(address, location as Aint, "address") };
    match r {
        Ok(()) => MPI_SUCCESS,
        Err(e) => crate::error::raise("MPI_Get_address", crate::error::Object::None, e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Aint_add(base: Aint, disp: Aint) -> Aint {
    base.wrapping_add(disp)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Aint_diff(addr1: Aint, addr2: Aint) -> Aint {
    addr1.wrapping_sub(addr2)
}

/// The predefined pair type of a value type and an index type, for
/// `MPI_MINLOC`/`MPI_MAXLOC` (MPI 4.1, 6.9.4): `MPI_DATATYPE_NULL` where the
/// standard names none.
fn value_index(value: Handle, index: Handle) -> Handle {
    match (value, index) {
        (MPI_FLOAT, MPI_INT) => MPI_FLOAT_INT,
        (MPI_DOUBLE, MPI_INT) => MPI_DOUBLE_INT,
        (MPI_LONG, MPI_INT) => MPI_LONG_INT,
        (MPI_INT, MPI_INT) => MPI_2INT,
        (MPI_SHORT, MPI_INT) => MPI_SHORT_INT,
        (MPI_LONG_DOUBLE, MPI_INT) => MPI_LONG_DOUBLE_INT,
        (MPI_REAL, MPI_REAL) => MPI_2REAL,
        (MPI_DOUBLE_PRECISION, MPI_DOUBLE_PRECISION) => MPI_2DOUBLE_PRECISION,
        (MPI_INTEGER, MPI_INTEGER) => MPI_2INTEGER,
        _ => MPI_DATATYPE_NULL,
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_get_value_index(
    value_type: Handle,
    index_type: Handle,
    pair_type: *mut Handle,
) -> c_int {
    call("MPI_Type_get_value_index", Object::None, |mpi| {
        mpi.dtype_any(value_type)?;
        mpi.dtype_any(index_type)?;
        // SAFETY: null or writable.
        unsafe {
            crate::error::write_arg(pair_type, value_index(value_type, index_type), "pair type")
        }
    })
}

/// The Fortran type of `size` bytes of type class `class` (`MPI_Type_match_size`).
fn matching_size(class: c_int, size: c_int) -> Option<Handle> {
    Some(match (class, size) {
        (MPI_TYPECLASS_INTEGER, 1) => MPI_INTEGER1,
        (MPI_TYPECLASS_INTEGER, 2) => MPI_INTEGER2,
        (MPI_TYPECLASS_INTEGER, 4) => MPI_INTEGER4,
        (MPI_TYPECLASS_INTEGER, 8) => MPI_INTEGER8,
        (MPI_TYPECLASS_INTEGER, 16) => MPI_INTEGER16,
        (MPI_TYPECLASS_REAL, 2) => MPI_REAL2,
        (MPI_TYPECLASS_REAL, 4) => MPI_REAL4,
        (MPI_TYPECLASS_REAL, 8) => MPI_REAL8,
        (MPI_TYPECLASS_REAL, 16) => MPI_REAL16,
        (MPI_TYPECLASS_COMPLEX, 4) => MPI_COMPLEX4,
        (MPI_TYPECLASS_COMPLEX, 8) => MPI_COMPLEX8,
        (MPI_TYPECLASS_COMPLEX, 16) => MPI_COMPLEX16,
        (MPI_TYPECLASS_COMPLEX, 32) => MPI_COMPLEX32,
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_match_size(
    typeclass: c_int,
    size: c_int,
    datatype: *mut Handle,
) -> c_int {
    call("MPI_Type_match_size", Object::None, |_| {
        let t = matching_size(typeclass, size).ok_or_else(|| {
            Error::new(
                MPI_ERR_ARG,
                format!("no predefined type of class {typeclass} has {size} bytes"),
            )
        })?;
        // SAFETY: null or writable.
        unsafe { crate::error::write_arg(datatype, t, "datatype") }
    })
}

/// Basic elements in `bytes` of packed `ty` (`MPI_Get_elements`): `None` when they
/// do not end on a basic element.
pub fn elements_in(ty: &Datatype, bytes: u64) -> Option<u64> {
    if ty.size == 0 {
        return (bytes == 0).then_some(0);
    }
    let whole = bytes / ty.size as u64;
    let rest = bytes % ty.size as u64;
    let per = ty.elements as u64;
    match ty.prim {
        Some(p) if rest % p.size() as u64 == 0 => {
            let sub = rest / p.size() as u64
                * if matches!(p, super::Prim::Pair(_)) {
                    2
                } else {
                    1
                };
            Some(whole * per + sub)
        }
        Some(_) => None,
        // A type of several kinds: its signature says where the rest ends.
        None => {
            let part = ty.sig.elements_within(usize::try_from(rest).ok()?)?;
            whole.checked_mul(per)?.checked_add(part as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::elements_in;
    use crate::datatype::predefined;
    use crate::ffi::*;

    #[test]
    fn elements_of_partial_messages() {
        let all = predefined::all();
        let int = all[MPI_INT - predefined::FIRST].as_ref().unwrap();
        assert_eq!(elements_in(int, 12), Some(3));
        assert_eq!(elements_in(int, 13), None);
        let pair = all[MPI_2INT - predefined::FIRST].as_ref().unwrap();
        assert_eq!(elements_in(pair, 16), Some(4));
    }
}
