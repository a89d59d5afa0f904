//! How a binding runs: on the library's state, its error raised through the error
//! handler of the object it concerns.

use crate::error::{raise, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::state::Mpi;

/// Run binding `name` as `f` on the state: `MPI_SUCCESS`, or the code of its error
/// (raised through `object`'s error handler).
#[inline(always)]
pub fn call(name: &str, object: Object, f: impl FnOnce(&mut Mpi) -> Result<()>) -> c_int {
    match global::with(f) {
        Ok(()) => MPI_SUCCESS,
        Err(e) => raise(name, object, e),
    }
}

/// Run binding `name` as `f`, which enters the state itself, in steps (between
/// them it runs a program's callbacks, which may call MPI): `MPI_SUCCESS`, or the
/// code of its error, raised as [`call`] does.
pub fn call_in_steps(name: &str, object: Object, f: impl FnOnce() -> Result<()>) -> c_int {
    match f() {
        Ok(()) => MPI_SUCCESS,
        Err(e) => raise(name, object, e),
    }
}
