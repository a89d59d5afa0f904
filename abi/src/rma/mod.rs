//! One-sided communication (windows).

use crate::ffi::*;
use crate::state::Mpi;

/// The error handler of window `w`.
pub fn errhandler_of(_mpi: &Mpi, _w: Handle) -> Handle {
    MPI_ERRORS_ARE_FATAL
}

/// A window.
pub struct Win;
