//! Persistent requests: a send or receive described once (`MPI_Send_init`,
//! `MPI_Recv_init`, ...) and started again and again (`MPI_Start`); partitioned
//! ones too ([`super::partitioned`]).

use crate::entry::call;
use crate::error::{read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::p2p::partitioned::Partitioned;
use crate::p2p::Mode;
use crate::request::{P2p, Request};
use crate::state::Mpi;

/// A send's or receive's direction, buffer and peer.
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

/// A send or receive as its binding gives it (`count` elements of `ty`, `tag`, on
/// `comm`): posted at once ([`Mpi::post`]) or kept by a persistent request, to
/// post at each start.
#[derive(Clone, Copy)]
pub struct Transfer {
    pub op: Op,
    pub count: c_int,
    pub ty: Handle,
    pub tag: c_int,
    pub comm: Handle,
}

/// A persistent request.
pub struct Persistent {
    transfer: Transfer,
    /// The operation under way, between `MPI_Start` and its completion.
    pub active: Option<P2p>,
    /// A start whose outcome is known, not yet waited for: it completed at once
    /// (`MPI_PROC_NULL`), or `MPI_Request_get_status` read it. Its status and error.
    pub done: Option<(Status, Option<Error>)>,
    /// What a partitioned request has besides.
    pub partitioned: Option<Box<Partitioned>>,
}

impl Persistent {
    /// A persistent request for `transfer` (`partitioned` if it is).
    pub fn new(transfer: Transfer, partitioned: Option<Box<Partitioned>>) -> Persistent {
        Persistent {
            transfer,
            active: None,
            done: None,
            partitioned,
        }
    }

    /// The communicator it runs on.
    pub fn comm(&self) -> Handle {
        self.transfer.comm
    }

    /// What it moves.
    pub fn transfer(&self) -> Transfer {
        self.transfer
    }

    /// A started partitioned send whose message waits for partitions: running.
    pub fn unposted(&self) -> bool {
        self.partitioned.as_ref().is_some_and(|p| p.unposted())
    }

    /// The outcome of the operation under way, which completed as `out` (a
    /// partitioned receive's status shows the program's tag, not its message's).
    pub fn finish_active(
        &mut self,
        out: rbtl::msg::Result<rbtl::msg::Status>,
    ) -> (Status, Option<Error>) {
        let mut a = self.active.take().expect("active");
        let (mut status, error) = a.finish(out);
        if self.partitioned.is_some() && status.tag != MPI_ANY_TAG {
            status.tag = self.transfer.tag;
        }
        (status, error)
    }

    /// Note the request its start posted.
    pub fn started(&mut self, r: Request) {
        match r {
            Request::P2p(a) => self.active = Some(a),
            // MPI_PROC_NULL: complete at once.
            Request::Done(s) => self.done = Some((s, None)),
            _ => unreachable!("a send or receive"),
        }
    }
}

impl Mpi {
    /// The datatype a persistent request keeps for its starts: a derived `ty` as a
    /// handle of the request's own (the program may free its handle meanwhile,
    /// MPI 4.1 5.1.9), freed with the request ([`Mpi::free_persistent`]).
    pub fn keep_type(&mut self, ty: Handle) -> Result<Handle> {
        self.dtype(ty)?;
        match self.types.get(ty) {
            None => Ok(ty),
            Some(t) => {
                let t = t.clone();
                self.types.insert(t)
            }
        }
    }

    /// Forget persistent request `p`'s own datatype handle.
    pub fn free_persistent(&mut self, p: &Persistent) {
        self.types.remove(p.transfer.ty);
    }

    /// Describe a persistent operation (its arguments checked now, as each start
    /// would).
    fn persistent(&mut self, mut transfer: Transfer) -> Result<Request> {
        super::check_count(transfer.count)?;
        let c = self.comm(transfer.comm)?;
        match transfer.op {
            Op::Send { dest, .. } => {
                super::check_send_tag(transfer.tag)?;
                super::peer(c, dest, false)?;
            }
            Op::Recv { source, .. } => {
                super::check_recv_tag(transfer.tag)?;
                super::peer(c, source, true)?;
            }
        }
        transfer.ty = self.keep_type(transfer.ty)?;
        Ok(Request::Persistent(Box::new(Persistent::new(
            transfer, None,
        ))))
    }

    /// Start `transfer`: its request (`MPI_PROC_NULL`'s done).
    ///
    /// # Safety
    ///
    /// The buffer holds the elements (has room for them) until the request completes.
    #[inline(always)]
    pub unsafe fn post(&mut self, transfer: Transfer) -> Result<Request> {
        let Transfer {
            op,
            count,
            ty,
            tag,
            comm,
        } = transfer;
        // SAFETY: the caller's contract.
        unsafe {
            match op {
                Op::Send { buf, mode, dest } => self.isend((buf, count, ty), dest, tag, comm, mode),
                Op::Recv { buf, source } => self.irecv(buf, count, ty, source, tag, comm),
            }
        }
    }

    /// `MPI_Start`.
    fn start(&mut self, h: Handle) -> Result<()> {
        if let Some(Request::CollInit(_)) = self.requests.get(h) {
            return self.start_collective_init(h);
        }
        let Some(Request::Persistent(p)) = self.requests.get(h) else {
            return Err(Error::new(
                MPI_ERR_REQUEST,
                format!("{h:#x} is not a persistent request"),
            ));
        };
        if p.active.is_some() || p.done.is_some() || p.unposted() {
            return Err(Error::new(
                MPI_ERR_REQUEST,
                "the persistent request is active: it must complete before it starts again",
            ));
        }
        let transfer = p.transfer;
        let wire_tag = p.partitioned.as_ref().map(|x| x.wire_tag);
        if let Some(Request::Persistent(p)) = self.requests.get_mut(h) {
            if let Some(x) = p.partitioned.as_mut() {
                // A partitioned send's message leaves with its last partition.
                if x.start_send() {
                    return Ok(());
                }
            }
        }
        // SAFETY: the buffer was promised at MPI_*_init for every start, until each
        // completes.
        let r = unsafe {
            match wire_tag {
                Some(tag) => self.post_partitioned(transfer, tag),
                None => self.post(transfer),
            }
        }?;
        if let Some(Request::Persistent(p)) = self.requests.get_mut(h) {
            p.started(r);
        }
        Ok(())
    }
}

send_request!(PMPI_Send_init, persistent, Mode::Standard);
send_request!(PMPI_Ssend_init, persistent, Mode::Synchronous);
send_request!(PMPI_Rsend_init, persistent, Mode::Standard);
send_request!(PMPI_Bsend_init, persistent, Mode::Buffered);
recv_request!(PMPI_Recv_init, persistent);

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
