//! Persistent requests: a send or receive described once (`MPI_Send_init`,
//! `MPI_Recv_init`, ...) and started again and again (`MPI_Start`).

use crate::entry::call;
use crate::error::{read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::p2p::Mode;
use crate::request::{P2p, Request};
use crate::state::Mpi;

/// What a persistent request does each time it starts.
#[derive(Clone, Copy)]
pub enum Op {
    Send {
        buf: *const c_void,
        mode: Mode,
        dest: c_int,
    },
    Recv {
        buf: *mut c_void,
        source: c_int,
    },
}

/// A persistent request.
pub struct Persistent {
    op: Op,
    count: c_int,
    ty: Handle,
    tag: c_int,
    comm: Handle,
    /// The operation under way, between `MPI_Start` and its completion.
    pub active: Option<P2p>,
    /// A start whose outcome is known, not yet waited for: it completed at once
    /// (`MPI_PROC_NULL`), or `MPI_Request_get_status` read it. Its status and error.
    pub done: Option<(Status, Option<Error>)>,
}

impl Persistent {
    /// The communicator it runs on.
    pub fn comm(&self) -> Handle {
        self.comm
    }
}

impl Mpi {
    /// Describe a persistent operation (its arguments checked now, as each start
    /// would).
    fn persistent(
        &mut self,
        op: Op,
        count: c_int,
        ty: Handle,
        tag: c_int,
        comm: Handle,
    ) -> Result<Request> {
        super::check_count(count)?;
        let c = self.comm(comm)?;
        match op {
            Op::Send { dest, .. } => {
                super::check_send_tag(tag)?;
                super::peer(c, dest, false)?;
            }
            Op::Recv { source, .. } => {
                super::check_recv_tag(tag)?;
                super::peer(c, source, true)?;
            }
        }
        self.dtype(ty)?;
        Ok(Request::Persistent(Box::new(Persistent {
            op,
            count,
            ty,
            tag,
            comm,
            active: None,
            done: None,
        })))
    }

    /// `MPI_Start`.
    fn start(&mut self, h: Handle) -> Result<()> {
        let Some(Request::Persistent(p)) = self.requests.get(h) else {
            return Err(Error::new(
                MPI_ERR_REQUEST,
                format!("{h:#x} is not a persistent request"),
            ));
        };
        if p.active.is_some() || p.done.is_some() {
            return Err(Error::new(
                MPI_ERR_REQUEST,
                "the persistent request is active: it must complete before it starts again",
            ));
        }
        let (op, count, ty, tag, comm) = (p.op, p.count, p.ty, p.tag, p.comm);
        // SAFETY: the buffer was promised at MPI_*_init for every start, until each
        // completes.
        let r = unsafe {
            match op {
                Op::Send { buf, mode, dest } => {
                    self.isend((buf, count, ty), dest, tag, comm, mode)?
                }
                Op::Recv { buf, source } => self.irecv(buf, count, ty, source, tag, comm)?,
            }
        };
        if let Some(Request::Persistent(p)) = self.requests.get_mut(h) {
            match r {
                Request::P2p(a) => p.active = Some(a),
                // MPI_PROC_NULL: complete at once.
                Request::Done(s) => p.done = Some((s, None)),
                _ => unreachable!("a send or receive"),
            }
        }
        Ok(())
    }
}

macro_rules! send_init {
    ($name:ident, $label:literal, $mode:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
            request: *mut Handle,
        ) -> c_int {
            call($label, Object::Comm(comm), |mpi| {
                let r = mpi.persistent(
                    Op::Send {
                        buf,
                        mode: $mode,
                        dest,
                    },
                    count,
                    datatype,
                    tag,
                    comm,
                )?;
                // SAFETY: `request` is writable (the binding's contract).
                unsafe { mpi.hand_out(r, request) }
            })
        }
    };
}

send_init!(PMPI_Send_init, "MPI_Send_init", Mode::Standard);
send_init!(PMPI_Ssend_init, "MPI_Ssend_init", Mode::Synchronous);
send_init!(PMPI_Rsend_init, "MPI_Rsend_init", Mode::Standard);
send_init!(PMPI_Bsend_init, "MPI_Bsend_init", Mode::Buffered);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Recv_init(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Recv_init", Object::Comm(comm), |mpi| {
        let r = mpi.persistent(Op::Recv { buf, source }, count, datatype, tag, comm)?;
        // SAFETY: `request` is writable (the binding's contract).
        unsafe { mpi.hand_out(r, request) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Start(request: *mut Handle) -> c_int {
    call("MPI_Start", Object::None, |mpi| {
        // SAFETY: null or readable, the binding's contract.
        mpi.start(unsafe { read_arg(request, MPI_ERR_REQUEST, "request") }?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Startall(count: c_int, array_of_requests: *mut Handle) -> c_int {
    call("MPI_Startall", Object::None, |mpi| {
        let n = super::check_count(count)?;
        if n > 0 && array_of_requests.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "the array of requests is null"));
        }
        for i in 0..n {
            // SAFETY: the array holds `count` handles.
            mpi.start(unsafe { *array_of_requests.add(i) })?;
        }
        Ok(())
    })
}
