//! Handle conversion to and from Fortran integers (`MPI_*_c2f`, `MPI_*_f2c`): a
//! predefined handle is its value, a library object its table index above a mark
//! (see `handles`). The library has no Fortran bindings; C libraries use these to
//! store handles as integers.

use crate::ffi::*;
use crate::global;
use crate::handles::Table;
use crate::state::Mpi;

/// Convert with the table `pick` chooses; a value the library cannot reach (no
/// state, a busy library) passes through unchanged.
fn with_table<T, R>(
    pick: impl FnOnce(&Mpi) -> Option<&Table<T>>,
    f: impl FnOnce(&Table<T>) -> R,
    fallback: R,
) -> R {
    global::with(|mpi| Ok(pick(mpi).map(f)))
        .ok()
        .flatten()
        .unwrap_or(fallback)
}

macro_rules! to_fortran {
    ($name:ident, $table:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(h: Handle) -> c_int {
            with_table(|m| Some(&m.$table), |t| t.to_fortran(h), h as c_int)
        }
    };
}

macro_rules! from_fortran {
    ($name:ident, $table:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(f: c_int) -> Handle {
            with_table(
                |m| Some(&m.$table),
                |t| t.from_fortran(f),
                f as u32 as Handle,
            )
        }
    };
}

/// `$c2f` and `$f2c` of objects that live outside the library's state, in a table
/// `$with` lends (reachable at any time).
macro_rules! outside_state {
    ($c2f:ident, $f2c:ident, $with:path) => {
        #[no_mangle]
        pub unsafe extern "C" fn $c2f(h: Handle) -> c_int {
            $with(|t| t.to_fortran(h))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $f2c(f: c_int) -> Handle {
            $with(|t| t.from_fortran(f))
        }
    };
}

to_fortran!(PMPI_Comm_c2f, comms);
from_fortran!(PMPI_Comm_f2c, comms);
outside_state!(
    PMPI_Errhandler_c2f,
    PMPI_Errhandler_f2c,
    crate::comm::api::with_errhandlers
);

to_fortran!(PMPI_Type_c2f, types);
from_fortran!(PMPI_Type_f2c, types);
to_fortran!(PMPI_Group_c2f, groups);
from_fortran!(PMPI_Group_f2c, groups);
outside_state!(PMPI_Info_c2f, PMPI_Info_f2c, crate::info::with_infos);

to_fortran!(PMPI_Message_c2f, messages);
from_fortran!(PMPI_Message_f2c, messages);
to_fortran!(PMPI_Op_c2f, ops);
from_fortran!(PMPI_Op_f2c, ops);
to_fortran!(PMPI_Request_c2f, requests);
from_fortran!(PMPI_Request_f2c, requests);
to_fortran!(PMPI_Win_c2f, wins);
from_fortran!(PMPI_Win_f2c, wins);
to_fortran!(PMPI_File_c2f, files);
from_fortran!(PMPI_File_f2c, files);

to_fortran!(PMPI_Session_c2f, sessions);
from_fortran!(PMPI_Session_f2c, sessions);

/// The conversions of statuses between C and Fortran (`MPI_Status_c2f`, ...): in
/// the standard ABI the three have one layout, `MPI_F_STATUS_SIZE` integers
/// (`MPI_SOURCE`, `MPI_TAG`, `MPI_ERROR`, then the library's own), so each copies
/// them (as `memmove`: a program may convert a status in place, as C lets it
/// assign a value onto itself).
macro_rules! status_copy {
    ($name:ident, $from:ty => $to:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(from: *const $from, to: *mut $to) -> c_int {
            if from.is_null() || to.is_null() {
                let e = crate::error::Error::new(MPI_ERR_ARG, "a status argument is null");
                return crate::error::raise(&stringify!($name)[1..], crate::error::Object::None, e);
            }
            // SAFETY: the binding's contract: each points to a status, of
            // MPI_F_STATUS_SIZE integers in every form (the same one, or two).
            unsafe {
                std::ptr::copy(
                    from.cast::<c_int>(),
                    to.cast::<c_int>(),
                    MPI_F_STATUS_SIZE as usize,
                )
            };
            MPI_SUCCESS
        }
    };
}

status_copy!(PMPI_Status_c2f, Status => c_int);
status_copy!(PMPI_Status_f2c, c_int => Status);
status_copy!(PMPI_Status_c2f08, Status => Status);
status_copy!(PMPI_Status_f082c, Status => Status);
status_copy!(PMPI_Status_f2f08, c_int => Status);
status_copy!(PMPI_Status_f082f, Status => c_int);
