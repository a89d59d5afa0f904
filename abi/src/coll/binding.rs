//! The macros that write the collectives' bindings (blocking, nonblocking,
//! persistent) from the expression that builds each one's schedule. A binding
//! `PMPI_X` reports its errors as `MPI_X`, through the handler of its communicator
//! (every collective's last argument, before a nonblocking or persistent one's info
//! and request).

/// The last of a list of identifiers.
macro_rules! last {
    ($x:ident) => { $x };
    ($x:ident, $($rest:ident),+) => { last!($($rest),+) };
}
pub(crate) use last;

/// A blocking binding: `$build` makes the schedule (given `mpi`), which `$run`
/// ([`super::run_in_state`] or [`super::run_blocking`]) runs to its end.
macro_rules! blocking {
    ($run:ident, $name:ident, ($($arg:ident: $ty:ty),*), |$mpi:ident| $build:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            let object = Object::Comm(last!($($arg),*));
            $run(&stringify!($name)[1..], object, |$mpi| {
                // SAFETY: the binding's contract.
                unsafe { $build }
            })
        }
    };
}

/// A blocking binding with a way without a schedule: `$small` (given `$args`, the
/// arguments as it takes them) does it all where it can, else `$build` makes the
/// schedule ([`super::small_first`]; a program's reductions outside the library's
/// state where `$outside`).
macro_rules! small_first {
    ($name:ident, ($($arg:ident: $ty:ty),*), $small:path, $args:expr, $outside:expr,
     |$mpi:ident| $build:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            let comm = last!($($arg),*);
            // SAFETY: the binding's contract, as the small way and the build ask it.
            unsafe {
                $crate::coll::small_first(
                    (&stringify!($name)[1..], comm),
                    $args,
                    $small,
                    |$mpi| $build,
                    $outside,
                )
            }
        }
    };
}

/// A nonblocking binding: `$build` makes the schedule (given `mpi`), which starts as
/// the request written to `request`.
macro_rules! nonblocking {
    ($name:ident, ($($arg:ident: $ty:ty),*), |$mpi:ident| $build:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty,)* request: *mut Handle) -> c_int {
            let object = Object::Comm(last!($($arg),*));
            call(&stringify!($name)[1..], object, |$mpi| {
                // Checked first: no collective starts without a request to show for it.
                $crate::error::non_null(request, MPI_ERR_ARG, "request")?;
                $mpi.coll_tag = $crate::coll::TagFrom::Nonblocking;
                // SAFETY: the binding's contract: the buffers stay valid until the
                // request completes; `request` is writable. (Some builds are safe.)
                #[allow(unused_unsafe)]
                let s = $mpi.building(|$mpi| unsafe { $build });
                $mpi.coll_tag = $crate::coll::TagFrom::Blocking;
                // SAFETY: as above.
                unsafe { $mpi.start_collective(s?, request) }
            })
        }
    };
}

/// A persistent binding (`MPI_X_init`): a request that keeps the arguments (and
/// holds its datatypes and operation: [`KeepArg`]), from which
/// `$build` makes the schedule (given `mpi`) at each start.
///
/// [`KeepArg`]: crate::coll::persistent::KeepArg
macro_rules! persistent {
    ($name:ident, ($($arg:ident: $ty:ty),*), |$mpi:ident| $build:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $($arg: $ty,)*
            info: Handle,
            request: *mut Handle,
        ) -> c_int {
            let comm = last!($($arg),*);
            call(&stringify!($name)[1..], Object::Comm(comm), |$mpi| {
                crate::info::check(info)?;
                $crate::error::non_null(request, MPI_ERR_ARG, "request")?;
                let mut own = $crate::coll::persistent::Owned::default();
                let at = $crate::coll::persistent::At { call: stringify!($name), comm };
                // SAFETY: the binding's contract: its arguments as the caller gave them.
                $(let $arg = unsafe { $crate::coll::persistent::KeepArg::kept($arg, $mpi, stringify!($arg), at, &mut own) };)*
                // (Not every build is unsafe: the barrier's has no buffers.)
                #[allow(unused_unsafe)]
                let build = move |$mpi: &mut $crate::state::Mpi| {
                    // SAFETY: the binding's contract: the buffers and arrays stay
                    // valid for every start until its request completes.
                    unsafe { $build }
                };
                // SAFETY: `request` is writable (the binding's contract).
                unsafe { $mpi.persistent_collective(comm, std::rc::Rc::new(build), own, request) }
            })
        }
    };
}

/// A collective's blocking binding, run within the library's state, its
/// nonblocking one and its persistent one, all building their schedule as
/// `$build`.
macro_rules! collective {
    ($blocking:ident, $nonblocking:ident, $init:ident, $args:tt, |$mpi:ident| $build:expr) => {
        blocking!(run_in_state, $blocking, $args, |$mpi| $build);
        nonblocking!($nonblocking, $args, |$mpi| $build);
        persistent!($init, $args, |$mpi| $build);
    };
}

/// A collective's blocking binding with a way without a schedule (`$small`, given
/// `$args`; [`small_first!`]), its nonblocking one and its persistent one, all
/// building their schedule as `$build`.
macro_rules! collective_small {
    ($blocking:ident, $nonblocking:ident, $init:ident, ($($arg:ident: $ty:ty),*),
     small($small:path, $args:expr, $outside:expr), |$mpi:ident| $build:expr) => {
        small_first!($blocking, ($($arg: $ty),*), $small, $args, $outside, |$mpi| $build);
        nonblocking!($nonblocking, ($($arg: $ty),*), |$mpi| $build);
        persistent!($init, ($($arg: $ty),*), |$mpi| $build);
    };
}

/// A reduction's blocking binding, its reductions by a program's functions called
/// outside the library's state, its nonblocking one and its persistent one, all
/// building their schedule as `$build`.
macro_rules! reduction {
    ($blocking:ident, $nonblocking:ident, $init:ident, $args:tt, |$mpi:ident| $build:expr) => {
        blocking!(run_blocking, $blocking, $args, |$mpi| $build);
        nonblocking!($nonblocking, $args, |$mpi| $build);
        persistent!($init, $args, |$mpi| $build);
    };
}
