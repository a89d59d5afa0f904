//! The bindings of MPI-IO but the accesses ([`super::access`]): opening and
//! closing, the file as a whole, views, pointers and error handlers.

use super::shared::set_shared;
use crate::coll::{allgather_here, Inside};
use crate::comm::api::read_str;
use crate::entry::{call, call_held, query_binding};
use crate::error::{non_null, read_arg, write_arg, Error, Object, Result};
use crate::ffi::*;
use crate::handles::Kind;

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_open(
    comm: Handle,
    filename: *const c_char,
    amode: c_int,
    info: Handle,
    fh: *mut Handle,
) -> c_int {
    call_held("MPI_File_open", Object::File(MPI_FILE_NULL), |mpi| {
        non_null(fh, MPI_ERR_ARG, "fh")?;
        // SAFETY: the binding's contract.
        let path = unsafe { read_str(filename) }?;
        let hints = mpi.info(info)?;
        let h = super::file_open(mpi, comm, path.into(), amode, hints)?;
        // SAFETY: checked not null.
        unsafe { fh.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_close(fh: *mut Handle) -> c_int {
    // SAFETY: null or readable, the binding's contract.
    let h = unsafe { read_arg(fh, MPI_ERR_FILE, "file") }.unwrap_or(MPI_FILE_NULL);
    call_held("MPI_File_close", Object::File(h), |mpi| {
        super::file_close(mpi, h)?;
        // SAFETY: read above, so not null.
        unsafe { fh.write(MPI_FILE_NULL) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_delete(filename: *const c_char, info: Handle) -> c_int {
    call("MPI_File_delete", Object::File(MPI_FILE_NULL), |_| {
        crate::info::check(info)?;
        // SAFETY: the binding's contract.
        let path = unsafe { read_str(filename) }?;
        std::fs::remove_file(&path).map_err(|e| super::io_error(&format!("deleting {path}"), e))
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_set_size(fh: Handle, size: Count) -> c_int {
    call_held("MPI_File_set_size", Object::File(fh), |mpi| {
        let size = non_negative(size, "size")?;
        super::file_change(mpi, fh, |f| {
            f.fd.set_len(size)
                .map_err(|e| super::io_error("setting the file's size", e))
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_preallocate(fh: Handle, size: Count) -> c_int {
    call_held("MPI_File_preallocate", Object::File(fh), |mpi| {
        let size = non_negative(size, "size")?;
        super::file_change(mpi, fh, |f| {
            if f.size()? >= size {
                return Ok(());
            }
            f.fd.set_len(size)
                .map_err(|e| super::io_error("growing the file", e))
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_sync(fh: Handle) -> c_int {
    call_held("MPI_File_sync", Object::File(fh), |mpi| {
        let f = mpi.file(fh)?;
        f.fd.sync_all()
            .map_err(|e| super::io_error("syncing the file", e))?;
        let comm = f.comm;
        super::barrier_over(mpi, comm)
    })
}

query_binding!(PMPI_File_get_size, fh, Object::File(fh), |mpi|
    => size: Count = mpi.file(fh)?.size()? as Count);
query_binding!(PMPI_File_get_amode, fh, Object::File(fh), |mpi|
    => amode: c_int = mpi.file(fh)?.amode);
query_binding!(PMPI_File_get_atomicity, fh, Object::File(fh), |mpi|
    => flag: c_int = c_int::from(mpi.file(fh)?.atomic));
query_binding!(PMPI_File_get_position, fh, Object::File(fh), |mpi|
    => offset: Count = mpi.file(fh)?.pointer as Count);
query_binding!(PMPI_File_get_position_shared, fh, Object::File(fh), |mpi|
    => offset: Count = mpi.shared_mut(fh)?.get()? as Count);

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_get_errhandler(file: Handle, errhandler: *mut Handle) -> c_int {
    call("MPI_File_get_errhandler", Object::File(file), |mpi| {
        if file != MPI_FILE_NULL {
            mpi.file(file)?;
        }
        // SAFETY: the binding's contract: null or writable.
        unsafe { write_arg(errhandler, super::errhandler_of(mpi, file), "errhandler") }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_get_group(fh: Handle, group: *mut Handle) -> c_int {
    call("MPI_File_get_group", Object::File(fh), |mpi| {
        let g = (**mpi.comm(mpi.file(fh)?.comm)?.peers()).clone();
        // SAFETY: the binding's contract.
        unsafe { mpi.hand_out_group(g, group) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_get_info(fh: Handle, info_used: *mut Handle) -> c_int {
    call("MPI_File_get_info", Object::File(fh), |mpi| {
        let i = mpi.file(fh)?.info.clone();
        // SAFETY: the binding's contract.
        unsafe { crate::info::hand_out(i, info_used) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_set_info(fh: Handle, info: Handle) -> c_int {
    call("MPI_File_set_info", Object::File(fh), |mpi| {
        let i = mpi.info(info)?;
        mpi.file_mut(fh)?.info = i;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_set_atomicity(fh: Handle, flag: c_int) -> c_int {
    call_held("MPI_File_set_atomicity", Object::File(fh), |mpi| {
        let comm = mpi.file(fh)?.comm;
        same_on_every_member(mpi, comm, u64::from(flag != 0), "the atomicity")?;
        mpi.file_mut(fh)?.atomic = flag != 0;
        Ok(())
    })
}

/// Whether two runs of one element of `t` share a byte.
fn overlaps(t: &crate::datatype::Datatype) -> bool {
    let mut runs: Vec<_> = t.blocks.iter().collect();
    runs.sort_unstable();
    runs.windows(2).any(|w| w[1].0 < w[0].0 + w[0].1 as isize)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_set_view(
    fh: Handle,
    disp: Count,
    etype: Handle,
    filetype: Handle,
    datarep: *const c_char,
    info: Handle,
) -> c_int {
    call_held("MPI_File_set_view", Object::File(fh), |mpi| {
        crate::info::check(info)?;
        // SAFETY: the binding's contract.
        let datarep = mpi.rep_named(&unsafe { read_str(datarep) }?)?;
        let disp = match disp {
            // Where the shared pointer is, in a file opened for sequential access
            // (MPI 4.1 §14.3): every member sees the same.
            MPI_DISPLACEMENT_CURRENT => {
                if mpi.file(fh)?.amode & MPI_MODE_SEQUENTIAL == 0 {
                    return Err(Error::new(
                        MPI_ERR_ARG,
                        "MPI_DISPLACEMENT_CURRENT is the displacement of files opened with MPI_MODE_SEQUENTIAL only",
                    ));
                }
                let at = mpi.shared_mut(fh)?.get()?;
                let v = &mpi.file(fh)?.view;
                v.segments(at * v.etype_size(), 1)[0].0
            }
            _ => non_negative(disp, "the displacement")?,
        };
        let (e, t) = (mpi.dtype(etype)?.clone(), mpi.dtype(filetype)?.clone());
        mpi.check_layout(datarep, (etype, &e), "etype")?;
        mpi.check_layout(datarep, (filetype, &t), "filetype")?;
        if e.size == 0 || t.size % e.size != 0 || t.extent() <= 0 {
            return Err(Error::new(
                MPI_ERR_TYPE,
                "the filetype is not made of whole etypes (or is empty)",
            ));
        }
        // Its displacements are non-negative and never go back; in a file opened for
        // writing, neither type overlaps itself, nor copies of the filetype one
        // another (MPI 4.1 §14.3; the class is ROMIO's).
        let mut at = 0;
        for (off, _) in t.blocks.iter() {
            if off < at {
                return Err(Error::new(
                    MPI_ERR_IO,
                    "the filetype's displacements must be non-negative and non-decreasing",
                ));
            }
            at = off;
        }
        let writable = mpi.file(fh)?.amode & (MPI_MODE_WRONLY | MPI_MODE_RDWR) != 0;
        let tiles_overlap = t.true_ub - t.true_lb > t.extent();
        if writable && (tiles_overlap || overlaps(&t) || overlaps(&e)) {
            return Err(Error::new(
                MPI_ERR_IO,
                "the etype or filetype overlaps itself, in a file opened for writing",
            ));
        }
        let comm = mpi.file(fh)?.comm;
        same_on_every_member(mpi, comm, e.size as u64, "the etype's size")?;
        let f = mpi.file_mut(fh)?;
        f.view = super::view::View {
            disp,
            etype: (etype, e),
            filetype: (filetype, t),
            datarep,
        };
        f.pointer = 0;
        set_shared(mpi, fh, |_| Ok(0))
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_get_view(
    fh: Handle,
    disp: *mut Count,
    etype: *mut Handle,
    filetype: *mut Handle,
    datarep: *mut c_char,
) -> c_int {
    call("MPI_File_get_view", Object::File(fh), |mpi| {
        let v = mpi.file(fh)?.view.clone();
        let name = mpi.rep_name(v.datarep).to_owned();
        for (p, what) in [
            (disp.cast::<u8>(), "disp"),
            (etype.cast(), "etype"),
            (filetype.cast(), "filetype"),
            (datarep.cast(), "datarep"),
        ] {
            non_null(p, MPI_ERR_ARG, what)?;
        }
        // A derived type goes out as a new handle, which the caller frees.
        let mut handle = |(h, t): (Handle, crate::datatype::Datatype)| match t.predefined {
            true => Ok(h),
            false => mpi.types.insert(t),
        };
        let (e, t) = (handle(v.etype)?, handle(v.filetype)?);
        // SAFETY: the binding's contract: writable (checked not null); `datarep`
        // holds MPI_MAX_DATAREP_STRING bytes.
        unsafe {
            disp.write(v.disp as Count);
            etype.write(e);
            filetype.write(t);
            let name = name.to_bytes_with_nul();
            std::ptr::copy_nonoverlapping(name.as_ptr().cast(), datarep, name.len());
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_get_type_extent(
    fh: Handle,
    datatype: Handle,
    extent: *mut Aint,
) -> c_int {
    call("MPI_File_get_type_extent", Object::File(fh), |mpi| {
        let rep = mpi.file(fh)?.view.datarep;
        let t = mpi.dtype_any(datatype)?;
        mpi.check_layout(rep, (datatype, t), "datatype")?;
        let x = t.extent();
        // SAFETY: the binding's contract: null or writable.
        unsafe { write_arg(extent, x, "extent") }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_get_byte_offset(
    fh: Handle,
    offset: Count,
    disp: *mut Count,
) -> c_int {
    call("MPI_File_get_byte_offset", Object::File(fh), |mpi| {
        let offset = non_negative(offset, "the offset")?;
        let v = &mpi.file(fh)?.view;
        let at = v.segments(offset * v.etype_size(), 1)[0].0;
        // SAFETY: the binding's contract: null or writable.
        unsafe { write_arg(disp, at as Count, "disp") }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_seek(fh: Handle, offset: Count, whence: c_int) -> c_int {
    call("MPI_File_seek", Object::File(fh), |mpi| {
        let at = mpi.seek_target(fh, offset, whence, false)?;
        mpi.file_mut(fh)?.pointer = at;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_seek_shared(fh: Handle, offset: Count, whence: c_int) -> c_int {
    call_held("MPI_File_seek_shared", Object::File(fh), |mpi| {
        let comm = mpi.file(fh)?.comm;
        same_on_every_member(mpi, comm, offset as u64, "the offset")?;
        same_on_every_member(mpi, comm, whence as u64, "whence")?;
        set_shared(mpi, fh, |mpi| mpi.seek_target(fh, offset, whence, true))
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_create_errhandler(
    file_errhandler_fn: *mut c_void,
    errhandler: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract: `errhandler` is writable.
    unsafe {
        crate::comm::api::create_errhandler(
            "MPI_File_create_errhandler",
            file_errhandler_fn,
            errhandler,
            Kind::File,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_set_errhandler(file: Handle, errhandler: Handle) -> c_int {
    call("MPI_File_set_errhandler", Object::File(file), |mpi| {
        crate::comm::api::check_errhandler(errhandler, Kind::File)?;
        match file {
            MPI_FILE_NULL => mpi.file_null_errhandler = errhandler,
            _ => mpi.file_mut(file)?.errhandler = errhandler,
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_File_call_errhandler(fh: Handle, errorcode: c_int) -> c_int {
    crate::comm::api::call_errhandler("MPI_File_call_errhandler", Object::File(fh), errorcode)
}

/// A size or offset argument, which must not be negative.
fn non_negative(v: Count, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| Error::new(MPI_ERR_ARG, format!("{what} {v} is negative")))
}

/// Check that every member of `comm` passed the same `value` (`what`), as a
/// collective call requires: `MPI_ERR_NOT_SAME` on every member when one differs.
fn same_on_every_member(
    inside: &mut impl Inside,
    comm: Handle,
    value: u64,
    what: &str,
) -> Result<()> {
    let all = allgather_here(inside, comm, &[value])?;
    if all.iter().any(|v| *v != value) {
        return Err(Error::new(
            MPI_ERR_NOT_SAME,
            format!("{what} differs between the file's members"),
        ));
    }
    Ok(())
}
