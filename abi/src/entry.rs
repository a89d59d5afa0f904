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
