//! The type constructors with arrays of blocks (MPI 4.1 §5.1.2): indexed,
//! hindexed, indexed_block, hindexed_block and struct, each in its `int` and its
//! large-count form, with envelopes as [`super::constructors`] keeps them.

use super::constructors::{count_of, counts, displacement, envelope, Form, Wide};
use crate::entry::call;
use crate::error::{array, Error, Object};
use crate::ffi::*;

/// What an indexed constructor was given: `count` blocks of `lengths[i]` elements
/// (one `length` for all, in the `_block` forms) at `displs[i]`, in extents of the
/// old type or (`bytes`) in bytes.
struct Indexed<L, D> {
    count: Count,
    lengths: Lengths<L>,
    displs: *const D,
    bytes: bool,
}

/// The block lengths of an indexed constructor: each its own, or one for all.
enum Lengths<L> {
    Each(*const L),
    One(Count),
}

/// An indexed constructor's binding `name` in `form` (the combiner follows from
/// the arguments' kinds).
///
/// # Safety
///
/// Each array holds `count` items.
unsafe fn indexed<L: Wide, D: Wide>(
    (name, form): (&str, Form),
    args: Indexed<L, D>,
    oldtype: Handle,
    out: *mut Handle,
) -> c_int {
    call(name, Object::None, |mpi| {
        let n = count_of(args.count, "count")?;
        // SAFETY: the caller's contract: `count` of each.
        let displs = unsafe { counts(args.displs, n) }?;
        let (combiner, mut ints, lengths) = match args.lengths {
            Lengths::Each(p) => {
                // SAFETY: as above.
                let l = unsafe { counts(p, n) }?;
                let c = [MPI_COMBINER_INDEXED, MPI_COMBINER_HINDEXED][args.bytes as usize];
                (c, [&[args.count][..], &l].concat(), l)
            }
            Lengths::One(b) => {
                let c =
                    [MPI_COMBINER_INDEXED_BLOCK, MPI_COMBINER_HINDEXED_BLOCK][args.bytes as usize];
                (c, vec![args.count, b], vec![b; n])
            }
        };
        let e = if args.bytes {
            let addresses: Vec<Aint> = displs.iter().map(|&d| d as Aint).collect();
            envelope(form, combiner, &ints, &addresses, vec![oldtype])
        } else {
            ints.extend(&displs);
            envelope(form, combiner, &ints, &[], vec![oldtype])
        };
        let step = if args.bytes {
            1
        } else {
            mpi.dtype_any(oldtype)?.extent()
        };
        let too_far = || Error::new(MPI_ERR_COUNT, "a displacement overflows the address space");
        let mut parts = Vec::with_capacity(n);
        for (i, (&len, &d)) in lengths.iter().zip(&displs).enumerate() {
            let at = displacement(d)?.checked_mul(step).ok_or_else(too_far)?;
            let what = match args.lengths {
                Lengths::Each(_) => format!("array_of_blocklengths[{i}]"),
                Lengths::One(_) => "blocklength".to_string(),
            };
            parts.push((at, oldtype, count_of(len, what)?));
        }
        mpi.make(&parts, false, e, out)
    })
}

/// The binding `$name` of an indexed constructor in `$form`: its count of type
/// `$count`, its block lengths (`$lengths`: one array of `$l`, or one `$l` for all)
/// and its displacements (an array of `$d`; `$bytes`: in bytes).
macro_rules! indexed_binding {
    ($name:ident, $form:expr, $bytes:expr, $count:ty,
     $lengths:ident: $lty:ty => $how:ident, $l:ty, $d:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            count: $count,
            $lengths: $lty,
            array_of_displacements: *const $d,
            oldtype: Handle,
            newtype: *mut Handle,
        ) -> c_int {
            let args = Indexed::<$l, $d> {
                count: count.into(),
                lengths: Lengths::$how($lengths.into()),
                displs: array_of_displacements,
                bytes: $bytes,
            };
            let name = (&stringify!($name)[1..], $form);
            // SAFETY: the binding's contract: `count` of each array.
            unsafe { indexed(name, args, oldtype, newtype) }
        }
    };
}

indexed_binding!(PMPI_Type_indexed, Form::Int, false, c_int,
    array_of_blocklengths: *const c_int => Each, c_int, c_int);
indexed_binding!(PMPI_Type_indexed_c, Form::Large, false, Count,
    array_of_blocklengths: *const Count => Each, Count, Count);
indexed_binding!(PMPI_Type_create_hindexed, Form::Int, true, c_int,
    array_of_blocklengths: *const c_int => Each, c_int, Aint);
indexed_binding!(PMPI_Type_create_hindexed_c, Form::Large, true, Count,
    array_of_blocklengths: *const Count => Each, Count, Count);
indexed_binding!(PMPI_Type_create_indexed_block, Form::Int, false, c_int,
    blocklength: c_int => One, c_int, c_int);
indexed_binding!(PMPI_Type_create_indexed_block_c, Form::Large, false, Count,
    blocklength: Count => One, Count, Count);
indexed_binding!(PMPI_Type_create_hindexed_block, Form::Int, true, c_int,
    blocklength: c_int => One, c_int, Aint);
indexed_binding!(PMPI_Type_create_hindexed_block_c, Form::Large, true, Count,
    blocklength: Count => One, Count, Count);

/// `MPI_Type_create_struct` in `form`.
///
/// # Safety
///
/// Each array holds `count` items.
unsafe fn structure<L: Wide, D: Wide>(
    (name, form): (&str, Form),
    count: Count,
    (lengths, displs, types): (*const L, *const D, *const Handle),
    out: *mut Handle,
) -> c_int {
    call(name, Object::None, |mpi| {
        let n = count_of(count, "count")?;
        // SAFETY: the caller's contract: `count` of each.
        let (l, d, t) = unsafe { (counts(lengths, n)?, counts(displs, n)?, array(types, n)?) };
        let mut parts = Vec::with_capacity(n);
        for (i, ((&l, &d), &t)) in l.iter().zip(&d).zip(t).enumerate() {
            let what = format_args!("array_of_blocklengths[{i}]");
            parts.push((displacement(d)?, t, count_of(l, what)?));
        }
        let addresses: Vec<Aint> = d.iter().map(|&d| d as Aint).collect();
        let e = envelope(
            form,
            MPI_COMBINER_STRUCT,
            &[&[count][..], &l].concat(),
            &addresses,
            t.to_vec(),
        );
        mpi.make(&parts, true, e, out)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_struct(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const Aint,
    array_of_types: *const Handle,
    newtype: *mut Handle,
) -> c_int {
    let arrays = (
        array_of_blocklengths,
        array_of_displacements,
        array_of_types,
    );
    // SAFETY: the binding's contract: `count` of each.
    unsafe {
        structure(
            ("MPI_Type_create_struct", Form::Int),
            count.into(),
            arrays,
            newtype,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_struct_c(
    count: Count,
    array_of_blocklengths: *const Count,
    array_of_displacements: *const Count,
    array_of_types: *const Handle,
    newtype: *mut Handle,
) -> c_int {
    let arrays = (
        array_of_blocklengths,
        array_of_displacements,
        array_of_types,
    );
    // SAFETY: the binding's contract: `count` of each.
    unsafe {
        structure(
            ("MPI_Type_create_struct_c", Form::Large),
            count,
            arrays,
            newtype,
        )
    }
}
