//! `MPI_Alloc_mem` and `MPI_Free_mem` (MPI 4.1 §9.2): memory from the system's
//! allocator, aligned to a cache line, each block remembered by its address, so that
//! freeing anything else is an error (`MPI_ERR_BASE`), never undefined behaviour.
//! The info hints are read and ignored (this library places no memory specially).

use crate::entry::call;
use crate::error::{non_null, Error, Object};
use crate::ffi::*;
use std::alloc::Layout;

/// The alignment of every block: a cache line.
const ALIGN: usize = 64;

#[no_mangle]
pub unsafe extern "C" fn PMPI_Alloc_mem(size: Aint, info: Handle, baseptr: *mut c_void) -> c_int {
    call("MPI_Alloc_mem", Object::None, |mpi| {
        non_null(baseptr, MPI_ERR_ARG, "baseptr")?;
        mpi.info(info)?;
        let size = usize::try_from(size)
            .map_err(|_| Error::new(MPI_ERR_SIZE, format!("size {size} is negative")))?;
        let layout = Layout::from_size_align(size.max(1), ALIGN)
            .map_err(|_| Error::new(MPI_ERR_NO_MEM, format!("{size} bytes is too large")))?;
        // SAFETY: the layout's size is not 0.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(Error::new(
                MPI_ERR_NO_MEM,
                format!("the system has no {size} bytes to give"),
            ));
        }
        mpi.allocated.insert(p as usize, layout);
        // SAFETY: the binding's contract: `baseptr` points to a pointer.
        unsafe { baseptr.cast::<*mut u8>().write(p) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Free_mem(base: *mut c_void) -> c_int {
    call("MPI_Free_mem", Object::None, |mpi| {
        let layout = mpi.allocated.remove(&(base as usize)).ok_or_else(|| {
            Error::new(
                MPI_ERR_BASE,
                format!("{base:p} is not memory from MPI_Alloc_mem (or it was freed already)"),
            )
        })?;
        // SAFETY: allocated by MPI_Alloc_mem with this layout, and not freed since.
        unsafe { std::alloc::dealloc(base.cast(), layout) };
        Ok(())
    })
}
