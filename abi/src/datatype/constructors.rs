//! The type constructors of MPI 4.1 §5.1.2 (contiguous, vector, hvector, indexed,
//! hindexed, indexed_block, hindexed_block, struct, resized), each in its `int` form
//! and its large-count form (`MPI_Type_vector_c`, ...), which takes counts and
//! displacements of any size. Their envelopes say which made them (§5.1.13): the
//! `int` form keeps its counts as integers and its byte displacements as
//! addresses; the large-count form keeps all of them as large counts.

use super::build::resized;
use super::{Datatype, Envelope, Layout};
use crate::entry::call;
use crate::error::{array, Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::sync::Arc;

/// Which binding made a type: how its envelope keeps its counts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    Int,
    Large,
}

/// The envelope of a type that `form` made of `types` from `counts` (integers in
/// the `int` form, which read each from an `int`) and byte displacements
/// `addresses` (after the counts, in the large-count form).
pub(super) fn envelope(
    form: Form,
    combiner: c_int,
    counts: &[Count],
    addresses: &[Aint],
    types: Vec<Handle>,
) -> Envelope {
    match form {
        Form::Int => Envelope {
            combiner,
            ints: counts.iter().map(|&c| c as c_int).collect(),
            addresses: addresses.to_vec(),
            counts: Vec::new(),
            types,
        },
        Form::Large => Envelope {
            combiner,
            ints: Vec::new(),
            addresses: Vec::new(),
            counts: counts
                .iter()
                .copied()
                .chain(addresses.iter().map(|&a| a as Count))
                .collect(),
            types,
        },
    }
}

/// A count of elements or blocks, argument `what`.
fn count_of(count: Count, what: impl std::fmt::Display) -> Result<usize> {
    usize::try_from(count)
        .map_err(|_| Error::new(MPI_ERR_COUNT, format!("{what} is {count}: it is negative")))
}

/// A displacement or stride.
fn displacement(d: Count) -> Result<isize> {
    isize::try_from(d).map_err(|_| {
        Error::new(
            MPI_ERR_ARG,
            format!("{d} is beyond this machine's addresses"),
        )
    })
}

/// A count or displacement as a binding gives it: `int`, `MPI_Aint` or `MPI_Count`.
pub(super) trait Wide: Copy {
    fn wide(self) -> Count;
}

impl Wide for c_int {
    fn wide(self) -> Count {
        self.into()
    }
}

impl Wide for Aint {
    fn wide(self) -> Count {
        self as Count
    }
}

impl Wide for Count {
    fn wide(self) -> Count {
        self
    }
}

/// `n` counts of an `int` or a large-count binding.
///
/// # Safety
///
/// `p` holds `n` items.
pub(super) unsafe fn counts<T: Wide>(p: *const T, n: usize) -> Result<Vec<Count>> {
    // SAFETY: the caller's contract.
    Ok(unsafe { array(p, n) }?.iter().map(|&c| c.wide()).collect())
}

impl Mpi {
    /// The types of `envelope`, as they are now (see [`Datatype::made_of`]).
    pub(super) fn made_of(&self, envelope: &Envelope) -> Result<Arc<[Datatype]>> {
        let types = envelope
            .types
            .iter()
            .map(|&h| self.dtype_any(h).cloned())
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::from(types))
    }

    /// Make a type from `parts` of older ones (by handle: displacement, type,
    /// count) and keep it.
    fn make(
        &mut self,
        parts: &[(isize, Handle, usize)],
        padded: bool,
        envelope: Envelope,
        out: *mut Handle,
    ) -> Result<()> {
        let mut olds = Vec::with_capacity(parts.len());
        for &(_, h, _) in parts {
            olds.push(self.dtype_any(h)?);
        }
        let mut l = Layout::new();
        for (&(disp, _, count), old) in parts.iter().zip(&olds) {
            l.push(disp, old, count);
        }
        let t = l.finish(padded, envelope)?;
        self.keep_new_type(t, out)
    }

    /// Keep new type `t`, made of the types of its envelope, in `out`.
    fn keep_new_type(&mut self, mut t: Datatype, out: *mut Handle) -> Result<()> {
        crate::error::non_null(out, MPI_ERR_ARG, "new type")?;
        if let Some(e) = t.envelope.clone() {
            t.made_of = self.made_of(&e)?;
        }
        let h = self.types.insert(t)?;
        // SAFETY: checked not null; the binding's contract.
        unsafe { out.write(h) };
        Ok(())
    }
}

/// `MPI_Type_contiguous` in `form`.
fn contiguous(name: &str, form: Form, count: Count, oldtype: Handle, out: *mut Handle) -> c_int {
    call(name, Object::None, |mpi| {
        let e = envelope(form, MPI_COMBINER_CONTIGUOUS, &[count], &[], vec![oldtype]);
        mpi.make(&[(0, oldtype, count_of(count, "count")?)], false, e, out)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_contiguous(
    count: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    contiguous(
        "MPI_Type_contiguous",
        Form::Int,
        count.into(),
        oldtype,
        newtype,
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_contiguous_c(
    count: Count,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    contiguous(
        "MPI_Type_contiguous_c",
        Form::Large,
        count,
        oldtype,
        newtype,
    )
}

/// `count` blocks of `blocklength` elements, `stride` apart (`bytes`: in bytes, else
/// in extents of `oldtype`), made by `name` in `form`.
fn vector(
    (name, form): (&str, Form),
    count: Count,
    blocklength: Count,
    (stride, bytes): (Count, bool),
    oldtype: Handle,
    out: *mut Handle,
) -> c_int {
    call(name, Object::None, |mpi| {
        let e = match bytes {
            false => envelope(
                form,
                MPI_COMBINER_VECTOR,
                &[count, blocklength, stride],
                &[],
                vec![oldtype],
            ),
            true => envelope(
                form,
                MPI_COMBINER_HVECTOR,
                &[count, blocklength],
                &[stride as Aint],
                vec![oldtype],
            ),
        };
        let (n, b) = (
            count_of(count, "count")?,
            count_of(blocklength, "blocklength")?,
        );
        let old = mpi.dtype_any(oldtype)?;
        let extent = old.extent();
        let overflow = || {
            Error::new(
                MPI_ERR_COUNT,
                "the datatype's size overflows the address space",
            )
        };
        let stride = displacement(stride)?;
        let step = if bytes {
            stride
        } else {
            stride.checked_mul(extent).ok_or_else(overflow)?
        };
        // Blocks one after the other are one block of copies, however many; no
        // blocks, or empty ones, make an empty type.
        if n == 0 || b == 0 {
            return mpi.make(&[(0, oldtype, 0)], false, e, out);
        }
        if isize::try_from(b).ok().and_then(|b| b.checked_mul(extent)) == Some(step) {
            let all = n.checked_mul(b).ok_or_else(overflow)?;
            return mpi.make(&[(0, oldtype, all)], false, e, out);
        }
        // Else `n` copies of a block, `step` bytes apart.
        let mut one = Layout::new();
        one.push(0, old, b);
        let block = one.finish(false, e.clone())?;
        let mut l = Layout::new();
        l.push_strided(0, &block, n, step);
        let t = l.finish(false, e)?;
        mpi.keep_new_type(t, out)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let name = ("MPI_Type_vector", Form::Int);
    vector(
        name,
        count.into(),
        blocklength.into(),
        (stride.into(), false),
        oldtype,
        newtype,
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_vector_c(
    count: Count,
    blocklength: Count,
    stride: Count,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    vector(
        ("MPI_Type_vector_c", Form::Large),
        count,
        blocklength,
        (stride, false),
        oldtype,
        newtype,
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_hvector(
    count: c_int,
    blocklength: c_int,
    stride: Aint,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let name = ("MPI_Type_create_hvector", Form::Int);
    vector(
        name,
        count.into(),
        blocklength.into(),
        (stride as Count, true),
        oldtype,
        newtype,
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_hvector_c(
    count: Count,
    blocklength: Count,
    stride: Count,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let name = ("MPI_Type_create_hvector_c", Form::Large);
    vector(name, count, blocklength, (stride, true), oldtype, newtype)
}

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

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_indexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let args = Indexed {
        count: count.into(),
        lengths: Lengths::Each(array_of_blocklengths),
        displs: array_of_displacements,
        bytes: false,
    };
    // SAFETY: the binding's contract: `count` of each.
    unsafe { indexed(("MPI_Type_indexed", Form::Int), args, oldtype, newtype) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_indexed_c(
    count: Count,
    array_of_blocklengths: *const Count,
    array_of_displacements: *const Count,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let args = Indexed {
        count,
        lengths: Lengths::Each(array_of_blocklengths),
        displs: array_of_displacements,
        bytes: false,
    };
    // SAFETY: the binding's contract: `count` of each.
    unsafe { indexed(("MPI_Type_indexed_c", Form::Large), args, oldtype, newtype) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_hindexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const Aint,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let args = Indexed {
        count: count.into(),
        lengths: Lengths::Each(array_of_blocklengths),
        displs: array_of_displacements,
        bytes: true,
    };
    // SAFETY: the binding's contract: `count` of each.
    unsafe {
        indexed(
            ("MPI_Type_create_hindexed", Form::Int),
            args,
            oldtype,
            newtype,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_hindexed_c(
    count: Count,
    array_of_blocklengths: *const Count,
    array_of_displacements: *const Count,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let args = Indexed {
        count,
        lengths: Lengths::Each(array_of_blocklengths),
        displs: array_of_displacements,
        bytes: true,
    };
    // SAFETY: the binding's contract: `count` of each.
    unsafe {
        indexed(
            ("MPI_Type_create_hindexed_c", Form::Large),
            args,
            oldtype,
            newtype,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_indexed_block(
    count: c_int,
    blocklength: c_int,
    array_of_displacements: *const c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let args = Indexed::<c_int, _> {
        count: count.into(),
        lengths: Lengths::One(blocklength.into()),
        displs: array_of_displacements,
        bytes: false,
    };
    // SAFETY: the binding's contract: `count` displacements.
    unsafe {
        indexed(
            ("MPI_Type_create_indexed_block", Form::Int),
            args,
            oldtype,
            newtype,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_indexed_block_c(
    count: Count,
    blocklength: Count,
    array_of_displacements: *const Count,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let args = Indexed::<Count, _> {
        count,
        lengths: Lengths::One(blocklength),
        displs: array_of_displacements,
        bytes: false,
    };
    // SAFETY: the binding's contract: `count` displacements.
    unsafe {
        indexed(
            ("MPI_Type_create_indexed_block_c", Form::Large),
            args,
            oldtype,
            newtype,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_hindexed_block(
    count: c_int,
    blocklength: c_int,
    array_of_displacements: *const Aint,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let args = Indexed::<c_int, _> {
        count: count.into(),
        lengths: Lengths::One(blocklength.into()),
        displs: array_of_displacements,
        bytes: true,
    };
    // SAFETY: the binding's contract: `count` displacements.
    unsafe {
        indexed(
            ("MPI_Type_create_hindexed_block", Form::Int),
            args,
            oldtype,
            newtype,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_hindexed_block_c(
    count: Count,
    blocklength: Count,
    array_of_displacements: *const Count,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    let args = Indexed::<Count, _> {
        count,
        lengths: Lengths::One(blocklength),
        displs: array_of_displacements,
        bytes: true,
    };
    // SAFETY: the binding's contract: `count` displacements.
    unsafe {
        indexed(
            ("MPI_Type_create_hindexed_block_c", Form::Large),
            args,
            oldtype,
            newtype,
        )
    }
}

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

/// `MPI_Type_create_resized` in `form`.
fn resize(
    name: &str,
    form: Form,
    oldtype: Handle,
    (lb, extent): (Count, Count),
    out: *mut Handle,
) -> c_int {
    call(name, Object::None, |mpi| {
        let e = envelope(
            form,
            MPI_COMBINER_RESIZED,
            &[],
            &[lb as Aint, extent as Aint],
            vec![oldtype],
        );
        let t = resized(
            mpi.dtype_any(oldtype)?,
            displacement(lb)?,
            displacement(extent)?,
            e,
        );
        mpi.keep_new_type(t, out)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_resized(
    oldtype: Handle,
    lb: Aint,
    extent: Aint,
    newtype: *mut Handle,
) -> c_int {
    resize(
        "MPI_Type_create_resized",
        Form::Int,
        oldtype,
        (lb as Count, extent as Count),
        newtype,
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_resized_c(
    oldtype: Handle,
    lb: Count,
    extent: Count,
    newtype: *mut Handle,
) -> c_int {
    resize(
        "MPI_Type_create_resized_c",
        Form::Large,
        oldtype,
        (lb, extent),
        newtype,
    )
}
