//! The window bindings: making and freeing windows, their group, attributes, names
//! and error handlers.

use super::{win_create, win_free};
use crate::attr::{self, get_attr_binding, keyval_bindings, AttrKind, Holder};
use crate::comm::api::{create_errhandler, object_name_bindings};
use crate::entry::{call, call_held, call_in_steps, query_binding};
use crate::error::{non_null, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global::{self, Held};
use crate::handles::Kind;
use crate::state::Mpi;

/// A window's size and displacement unit arguments.
fn sizes(size: Aint, disp_unit: c_int) -> Result<(usize, usize)> {
    let size = usize::try_from(size)
        .map_err(|_| Error::new(MPI_ERR_SIZE, format!("window size {size} is negative")))?;
    let unit = usize::try_from(disp_unit)
        .ok()
        .filter(|u| *u > 0)
        .ok_or_else(|| {
            Error::new(
                MPI_ERR_DISP,
                format!("displacement unit {disp_unit} is not positive"),
            )
        })?;
    Ok((size, unit))
}

/// Write a new window's handle.
///
/// # Safety
///
/// `out` is null or writable.
unsafe fn hand_out(h: Handle, out: *mut Handle) -> Result<()> {
    non_null(out, MPI_ERR_ARG, "window")?;
    // SAFETY: checked not null.
    unsafe { out.write(h) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_create(
    base: *mut c_void,
    size: Aint,
    disp_unit: c_int,
    info: Handle,
    comm: Handle,
    win: *mut Handle,
) -> c_int {
    call_held("MPI_Win_create", Object::Comm(comm), |held| {
        crate::info::check(info)?;
        let (size, unit) = sizes(size, disp_unit)?;
        if base.is_null() && size > 0 {
            return Err(Error::new(MPI_ERR_BUFFER, "the window's base is null"));
        }
        let h = win_create(held, Some(base.cast()), size, unit, comm)?;
        // SAFETY: the binding's contract.
        unsafe { hand_out(h, win) }
    })
}

/// A binding `$name` that allocates a window, with `MPI_Win_allocate`'s parameters:
/// [`allocated`], the window made by `$make` given the state `$held` (other threads'
/// calls come in while it waits), the checked size
/// `$size` and displacement unit `$unit`, and the communicator `$comm`.
macro_rules! allocate_binding {
    ($name:ident, |$held:ident, $size:ident, $unit:ident, $comm:ident| $make:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            size: Aint,
            disp_unit: c_int,
            info: Handle,
            $comm: Handle,
            baseptr: *mut c_void,
            win: *mut Handle,
        ) -> c_int {
            let object = $crate::error::Object::Comm($comm);
            $crate::entry::call_held(&stringify!($name)[1..], object, |held| {
                crate::info::check(info)?;
                let make = |$held: &mut $crate::global::Held, $size, $unit| $make;
                // SAFETY: the binding's contract.
                unsafe {
                    $crate::rma::api::allocated(held, (size, disp_unit), (baseptr, win), make)
                }
            })
        }
    };
}
pub(super) use allocate_binding;

allocate_binding!(PMPI_Win_allocate, |held, size, unit, comm| {
    win_create(held, None, size, unit, comm)
});

/// `MPI_Win_allocate` and `MPI_Win_allocate_shared`: the arguments checked, the
/// window made by `make` (given the size and displacement unit), its base and its
/// handle handed out.
///
/// # Safety
///
/// `baseptr` is null or points to a pointer, `win` is null or writable.
pub(super) unsafe fn allocated(
    held: &mut Held,
    (size, disp_unit): (Aint, c_int),
    (baseptr, win): (*mut c_void, *mut Handle),
    make: impl FnOnce(&mut Held, usize, usize) -> Result<Handle>,
) -> Result<()> {
    let (size, unit) = sizes(size, disp_unit)?;
    if baseptr.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "the base pointer's place is null"));
    }
    let h = make(held, size, unit)?;
    let base = held.win(h)?.base;
    // SAFETY: the caller's contract: `baseptr` points to a pointer.
    unsafe {
        baseptr.cast::<*mut u8>().write(base);
        hand_out(h, win)
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_free(win: *mut Handle) -> c_int {
    // SAFETY: the binding's contract: null or readable.
    let object = unsafe { crate::error::freed_object(win, Object::Win) };
    call_in_steps("MPI_Win_free", object, || {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(win, MPI_ERR_ARG, "window") }?;
        global::with(|mpi| {
            let w = mpi.win(h)?;
            if w.sync.passive() || w.sync.access.is_some() || w.sync.exposure.is_some() {
                return Err(Error::new(
                    MPI_ERR_RMA_SYNC,
                    "the window is freed inside an epoch: unlock, complete or wait first",
                ));
            }
            Ok(())
        })?;
        // Its attributes' deletions (outside the state), then the window.
        attr::delete_attrs(Holder::win(h), None)?;
        global::with_held(|held| win_free(held, h))?;
        // SAFETY: checked not null.
        unsafe { win.write(MPI_WIN_NULL) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_get_group(win: Handle, group: *mut Handle) -> c_int {
    call("MPI_Win_get_group", Object::Win(win), |mpi| {
        let g = (*mpi.win(win)?.group).clone();
        // SAFETY: the binding's contract.
        unsafe { mpi.hand_out_group(g, group) }
    })
}

impl Mpi {
    /// The address a predefined window attribute hands out; `None` for another key.
    fn win_attr(&self, win: Handle, key: c_int) -> Result<Option<usize>> {
        let w = self.win(win)?;
        let v = &*w.attr_values;
        Ok(match key {
            // The base is handed out as the value itself.
            MPI_WIN_BASE => Some(w.base as usize),
            MPI_WIN_SIZE => Some(&v.0 as *const Aint as usize),
            MPI_WIN_DISP_UNIT => Some(&v.1 as *const c_int as usize),
            MPI_WIN_CREATE_FLAVOR => Some(&v.2 as *const c_int as usize),
            MPI_WIN_MODEL => Some(&v.3 as *const c_int as usize),
            _ => None,
        })
    }
}

get_attr_binding!(PMPI_Win_get_attr, Object::Win, |mpi, win, win_keyval| {
    match mpi.win_attr(win, win_keyval)? {
        Some(v) => Some(v),
        None => mpi.attr(Holder::win(win), win_keyval)?,
    }
});

keyval_bindings!(
    PMPI_Win_create_keyval,
    PMPI_Win_free_keyval,
    PMPI_Win_set_attr,
    PMPI_Win_delete_attr,
    AttrKind::Win,
    Object::Win,
    Holder::win
);

object_name_bindings!(
    PMPI_Win_set_name,
    PMPI_Win_get_name,
    Object::Win,
    win,
    win_mut,
    MPI_WIN_NULL
);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_call_errhandler(win: Handle, errorcode: c_int) -> c_int {
    crate::comm::api::call_errhandler("MPI_Win_call_errhandler", Object::Win(win), errorcode)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_create_errhandler(
    win_errhandler_fn: *mut c_void,
    errhandler: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract: `errhandler` is writable.
    unsafe {
        create_errhandler(
            "MPI_Win_create_errhandler",
            win_errhandler_fn,
            errhandler,
            Kind::Win,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_set_errhandler(win: Handle, errhandler: Handle) -> c_int {
    call("MPI_Win_set_errhandler", Object::Win(win), |mpi| {
        crate::comm::api::check_errhandler(errhandler, Kind::Win)?;
        mpi.win_mut(win)?.errhandler = errhandler;
        Ok(())
    })
}

query_binding!(PMPI_Win_get_errhandler, win, Object::Win(win), |mpi|
    => errhandler: Handle = mpi.win(win)?.errhandler);
