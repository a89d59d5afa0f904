//! How a binding runs: on the library's state, its error raised through the error
//! handler of the object it concerns.

use crate::error::{non_null, raise, Object, Result};
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

/// Run blocking binding `name` as `f` on the state held so that other threads'
/// calls may go in while it waits ([`global::Held`]), as [`call`] otherwise.
#[inline(always)]
pub fn call_held(
    name: &str,
    object: Object,
    f: impl FnOnce(&mut global::Held) -> Result<()>,
) -> c_int {
    match global::with_held(f) {
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

/// Run binding `name` that makes an object of the program's `function` (an error
/// handler, an operation): `function` and `out` checked not null (`what`: the
/// object, as the error names it), then `make` given the function's address; the
/// new object's handle written to `out`.
///
/// # Safety
///
/// `out` is null or writable.
pub unsafe fn make_from_function(
    name: &str,
    function: *mut c_void,
    (out, what): (*mut Handle, &str),
    make: impl FnOnce(&mut Mpi, usize) -> Result<Handle>,
) -> c_int {
    call(name, Object::None, |mpi| {
        non_null(function, MPI_ERR_ARG, "function")?;
        non_null(out, MPI_ERR_ARG, what)?;
        let h = make(mpi, function as usize)?;
        // SAFETY: checked not null.
        unsafe { out.write(h) };
        Ok(())
    })
}

/// A binding `$name` that asks about the object `$object` (a handle; its errors are
/// raised through `$handler`'s error handler): after the bindings `let $first` (given
/// `$mpi`), each answer `$value` is stored at its out-parameter `$out` (as
/// `MPI_Comm_size`); a null out-parameter is an error (`MPI_ERR_ARG`) naming it.
macro_rules! query_binding {
    (
        $name:ident, $object:ident, $handler:expr,
        |$mpi:ident| $({ $(let $first:pat = $init:expr;)* })?
        => $($out:ident: $ty:ty = $value:expr),+ $(,)?
    ) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($object: Handle, $($out: *mut $ty),+) -> c_int {
            $crate::entry::call(&stringify!($name)[1..], $handler, |$mpi| {
                $($crate::error::non_null($out, $crate::ffi::MPI_ERR_ARG, stringify!($out))?;)+
                $($(let $first = $init;)*)?
                $(
                    let value: $ty = $value;
                    // SAFETY: the binding's contract: writable (checked not null).
                    unsafe { $out.write(value) };
                )+
                Ok(())
            })
        }
    };
}
pub(crate) use query_binding;
