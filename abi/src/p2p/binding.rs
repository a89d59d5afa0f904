//! The macros that write the point-to-point bindings which hand out a request: the
//! nonblocking sends and receives (`Mpi::post`, started now) and the persistent ones
//! (`Mpi::persistent`, started by `MPI_Start`). A binding `PMPI_X` reports its errors
//! as `MPI_X`, through the handler of its communicator.

/// A binding `$name($buf, count, datatype, $peer, tag, comm, request)` whose request
/// `Mpi::$make` (`post` or `persistent`) makes from `$op`, the send or receive.
macro_rules! transfer_request {
    ($name:ident, $make:ident, $buf:ident: $buf_ty:ty, $peer:ident, $op:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $buf: $buf_ty,
            count: c_int,
            datatype: Handle,
            $peer: c_int,
            tag: c_int,
            comm: Handle,
            request: *mut Handle,
        ) -> c_int {
            call(&stringify!($name)[1..], Object::Comm(comm), |mpi| {
                // Checked first: no send starts without a request to show for it.
                $crate::error::non_null(request, MPI_ERR_ARG, "request")?;
                // SAFETY: the binding's contract: the buffer holds `count` elements
                // (has room for them) until the request completes (each time, for a
                // persistent one); `request` is writable.
                unsafe {
                    let r = mpi.$make($crate::p2p::persistent::Transfer {
                        op: $op,
                        count,
                        ty: datatype,
                        tag,
                        comm,
                    })?;
                    mpi.hand_out(r, request)
                }
            })
        }
    };
}

/// A send binding (`buf, count, datatype, dest, tag, comm, request`) in mode `$mode`,
/// its request made by `Mpi::$make` (`post` or `persistent`).
macro_rules! send_request {
    ($name:ident, $make:ident, $mode:expr) => {
        transfer_request!(
            $name,
            $make,
            buf: *const c_void,
            dest,
            $crate::p2p::persistent::Op::Send {
                buf,
                mode: $mode,
                dest,
            }
        );
    };
}

/// A receive binding (`buf, count, datatype, source, tag, comm, request`), its
/// request made by `Mpi::$make` (`post` or `persistent`).
macro_rules! recv_request {
    ($name:ident, $make:ident) => {
        transfer_request!(
            $name,
            $make,
            buf: *mut c_void,
            source,
            $crate::p2p::persistent::Op::Recv { buf, source }
        );
    };
}
