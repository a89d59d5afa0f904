//! The type constructors of MPI 4.1 §5.1.2 (contiguous, vector, hvector, resized
//! here; those with arrays of blocks in [`super::indexed`]), each in its `int` form
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
pub(super) fn count_of(count: Count, what: impl std::fmt::Display) -> Result<usize> {
    usize::try_from(count)
        .map_err(|_| Error::new(MPI_ERR_COUNT, format!("{what} is {count}: it is negative")))
}

/// A displacement or stride.
pub(super) fn displacement(d: Count) -> Result<isize> {
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
    pub(super) fn make(
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
