//! The datatype bindings: constructors, commit and free, `MPI_Pack`/`MPI_Unpack`
//! (the questions a type answers are in `query`).

use super::build::resized;
use super::{pack, Datatype, Envelope, Layout};
use crate::attr::{self, Holder};
use crate::entry::{call, call_in_steps};
use crate::error::{array, non_null, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::p2p::check_count;
use crate::state::Mpi;
use std::sync::Arc;

/// The `count` block lengths and displacements of an indexed or struct type's
/// arguments.
///
/// # Safety
///
/// Each array holds `count` items.
unsafe fn blocks<'a, D>(
    count: c_int,
    lengths: *const c_int,
    displs: *const D,
) -> Result<(&'a [c_int], &'a [D])> {
    let n = check_count(count)?;
    // SAFETY: the caller's contract.
    unsafe { Ok((array(lengths, n)?, array(displs, n)?)) }
}

impl Mpi {
    /// The types of `envelope`, as they are now (see [`Datatype::made_of`]).
    fn made_of(&self, envelope: &Envelope) -> Result<Arc<[Datatype]>> {
        let types = envelope
            .types
            .iter()
            .map(|&h| self.dtype_any(h).cloned())
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::from(types))
    }

    /// Make a type from `parts` of older ones (by handle) and keep it.
    fn make(
        &mut self,
        parts: &[(isize, Handle, usize)],
        padded: bool,
        envelope: Envelope,
        out: *mut Handle,
    ) -> Result<()> {
        non_null(out, MPI_ERR_ARG, "new type")?;
        let mut olds = Vec::with_capacity(parts.len());
        for &(_, h, _) in parts {
            olds.push(self.dtype_any(h)?);
        }
        let mut l = Layout::new();
        for (&(disp, _, count), old) in parts.iter().zip(&olds) {
            l.push(disp, old, count);
        }
        let made_of = self.made_of(&envelope)?;
        let mut t = l.finish(padded, envelope)?;
        t.made_of = made_of;
        let h = self.types.insert(t)?;
        // SAFETY: checked not null; the binding's contract.
        unsafe { out.write(h) };
        Ok(())
    }
}

fn env(combiner: c_int, ints: Vec<c_int>, addresses: Vec<Aint>, types: Vec<Handle>) -> Envelope {
    Envelope {
        combiner,
        ints,
        addresses,
        types,
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_contiguous(
    count: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_contiguous", Object::None, |mpi| {
        let n = check_count(count)?;
        mpi.make(
            &[(0, oldtype, n)],
            false,
            env(MPI_COMBINER_CONTIGUOUS, vec![count], vec![], vec![oldtype]),
            newtype,
        )
    })
}

/// `count` blocks of `blocklength` elements, `stride` apart (`bytes`: in bytes, else
/// in extents of `oldtype`).
fn vector(
    mpi: &mut Mpi,
    count: c_int,
    blocklength: c_int,
    (stride, bytes): (isize, bool),
    oldtype: Handle,
    envelope: Envelope,
    out: *mut Handle,
) -> Result<()> {
    let (n, b) = (check_count(count)?, check_count(blocklength)?);
    let old = mpi.dtype_any(oldtype)?;
    let extent = old.extent();
    let overflow = || {
        Error::new(
            MPI_ERR_COUNT,
            "the datatype's size overflows the address space",
        )
    };
    let step = if bytes {
        stride
    } else {
        stride.checked_mul(extent).ok_or_else(overflow)?
    };
    // Blocks one after the other are one block of copies, however many.
    if b as isize * extent == step {
        let all = n.checked_mul(b).ok_or_else(overflow)?;
        return mpi.make(&[(0, oldtype, all)], false, envelope, out);
    }
    // Else each block is a run of its own at least (refused before it takes room).
    if n > super::build::MAX_BLOCKS && old.size > 0 && b > 0 {
        return Err(super::build::too_many_runs());
    }
    let parts = (0..n as isize)
        .map(|i| Ok((i.checked_mul(step).ok_or_else(overflow)?, oldtype, b)))
        .collect::<Result<Vec<_>>>()?;
    mpi.make(&parts, false, envelope, out)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_vector", Object::None, |mpi| {
        let e = env(
            MPI_COMBINER_VECTOR,
            vec![count, blocklength, stride],
            vec![],
            vec![oldtype],
        );
        vector(
            mpi,
            count,
            blocklength,
            (stride as isize, false),
            oldtype,
            e,
            newtype,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_hvector(
    count: c_int,
    blocklength: c_int,
    stride: Aint,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_hvector", Object::None, |mpi| {
        let e = env(
            MPI_COMBINER_HVECTOR,
            vec![count, blocklength],
            vec![stride],
            vec![oldtype],
        );
        vector(mpi, count, blocklength, (stride, true), oldtype, e, newtype)
    })
}

/// Blocks of `lengths[i]` elements at `displs[i]` (in bytes when `bytes`).
fn indexed(
    mpi: &mut Mpi,
    lengths: &[c_int],
    displs: &[isize],
    bytes: bool,
    oldtype: Handle,
    envelope: Envelope,
    out: *mut Handle,
) -> Result<()> {
    let step = if bytes {
        1
    } else {
        mpi.dtype_any(oldtype)?.extent()
    };
    let mut parts = Vec::with_capacity(lengths.len());
    for (&len, &d) in lengths.iter().zip(displs) {
        parts.push((d * step, oldtype, check_count(len)?));
    }
    mpi.make(&parts, false, envelope, out)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_indexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_indexed", Object::None, |mpi| {
        // SAFETY: the binding's contract: `count` of each.
        let (l, d) = unsafe { blocks(count, array_of_blocklengths, array_of_displacements) }?;
        let e = env(
            MPI_COMBINER_INDEXED,
            [&[count], l, d].concat(),
            vec![],
            vec![oldtype],
        );
        let d: Vec<isize> = d.iter().map(|&x| x as isize).collect();
        indexed(mpi, l, &d, false, oldtype, e, newtype)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_hindexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const Aint,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_hindexed", Object::None, |mpi| {
        // SAFETY: the binding's contract: `count` of each.
        let (l, d) = unsafe { blocks(count, array_of_blocklengths, array_of_displacements) }?;
        let e = env(
            MPI_COMBINER_HINDEXED,
            [&[count], l].concat(),
            d.to_vec(),
            vec![oldtype],
        );
        indexed(mpi, l, d, true, oldtype, e, newtype)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_indexed_block(
    count: c_int,
    blocklength: c_int,
    array_of_displacements: *const c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_indexed_block", Object::None, |mpi| {
        let n = check_count(count)?;
        // SAFETY: the binding's contract.
        let d = unsafe { array(array_of_displacements, n) }?;
        let ints = [&[count, blocklength], d].concat();
        let e = env(MPI_COMBINER_INDEXED_BLOCK, ints, vec![], vec![oldtype]);
        let d: Vec<isize> = d.iter().map(|&x| x as isize).collect();
        indexed(mpi, &vec![blocklength; n], &d, false, oldtype, e, newtype)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_hindexed_block(
    count: c_int,
    blocklength: c_int,
    array_of_displacements: *const Aint,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_hindexed_block", Object::None, |mpi| {
        let n = check_count(count)?;
        // SAFETY: the binding's contract.
        let d = unsafe { array(array_of_displacements, n) }?;
        let ints = vec![count, blocklength];
        let e = env(MPI_COMBINER_HINDEXED_BLOCK, ints, d.to_vec(), vec![oldtype]);
        indexed(mpi, &vec![blocklength; n], d, true, oldtype, e, newtype)
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
    call("MPI_Type_create_struct", Object::None, |mpi| {
        // SAFETY: the binding's contract: `count` of each.
        let (l, d, t) = unsafe {
            let (l, d) = blocks(count, array_of_blocklengths, array_of_displacements)?;
            (l, d, array(array_of_types, l.len())?)
        };
        let parts = (l.iter().zip(d).zip(t))
            .map(|((&l, &d), &t)| Ok((d, t, check_count(l)?)))
            .collect::<Result<Vec<_>>>()?;
        let e = env(
            MPI_COMBINER_STRUCT,
            [&[count], l].concat(),
            d.to_vec(),
            t.to_vec(),
        );
        mpi.make(&parts, true, e, newtype)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_resized(
    oldtype: Handle,
    lb: Aint,
    extent: Aint,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_resized", Object::None, |mpi| {
        non_null(newtype, MPI_ERR_ARG, "new type")?;
        let e = env(
            MPI_COMBINER_RESIZED,
            vec![],
            vec![lb, extent],
            vec![oldtype],
        );
        let made_of = mpi.made_of(&e)?;
        let mut t = resized(mpi.dtype_any(oldtype)?, lb, extent, e);
        t.made_of = made_of;
        let h = mpi.types.insert(t)?;
        // SAFETY: checked not null.
        unsafe { newtype.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_dup(oldtype: Handle, newtype: *mut Handle) -> c_int {
    call_in_steps("MPI_Type_dup", Object::None, || {
        non_null(newtype, MPI_ERR_ARG, "new type")?;
        let h = global::with(|mpi| {
            let old = mpi.dtype_any(oldtype)?;
            let mut t = old.clone();
            t.made_of = Arc::from(vec![old.clone()]);
            t.predefined = false;
            t.envelope = Some(Arc::new(env(
                MPI_COMBINER_DUP,
                vec![],
                vec![],
                vec![oldtype],
            )));
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

/// The bytes `incount` elements of `datatype` pack into.
fn pack_size(mpi: &Mpi, incount: Count, datatype: Handle) -> Result<usize> {
    let n = usize::try_from(incount)
        .map_err(|_| Error::new(MPI_ERR_COUNT, format!("count {incount} is negative")))?;
    mpi.dtype_any(datatype)?
        .bytes(n)
        .ok_or_else(|| Error::new(MPI_ERR_COUNT, "count overflows"))
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Pack_size(
    incount: c_int,
    datatype: Handle,
    _comm: Handle,
    size: *mut c_int,
) -> c_int {
    call("MPI_Pack_size", Object::None, |mpi| {
        let s = pack_size(mpi, Count::from(incount), datatype)?;
        let s = c_int::try_from(s).map_err(|_| {
            Error::new(
                MPI_ERR_VALUE_TOO_LARGE,
                "the size exceeds an int: use MPI_Pack_size_c",
            )
        })?;
        // SAFETY: null or writable.
        unsafe { put(size, s) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Pack_size_c(
    incount: Count,
    datatype: Handle,
    _comm: Handle,
    size: *mut Count,
) -> c_int {
    call("MPI_Pack_size_c", Object::None, |mpi| {
        let s = pack_size(mpi, incount, datatype)?;
        // SAFETY: null or writable.
        unsafe { put(size, s as Count) };
        Ok(())
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
        let n = check_count(count)?;
        let t = mpi.dtype(datatype)?;
        if position.is_null() || packed.is_null() {
            return Err(Error::new(
                MPI_ERR_ARG,
                "the position or buffer pointer is null",
            ));
        }
        // SAFETY: checked not null; the caller's contract.
        let pos = unsafe { *position };
        let need = t
            .bytes(n)
            .ok_or_else(|| Error::new(MPI_ERR_COUNT, "count overflows"))?;
        let at = usize::try_from(pos)
            .ok()
            .filter(|at| {
                at.checked_add(need)
                    .is_some_and(|end| end <= size.max(0) as usize)
            })
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
