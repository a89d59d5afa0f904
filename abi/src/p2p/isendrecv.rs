//! `MPI_Isendrecv` and `MPI_Isendrecv_replace` (MPI 4.1 §3.10): the send leaves
//! from a copy of its data, taken at once, as a standard-mode send may be buffered,
//! and runs to its end driven by progress, as a buffered send does; the request
//! handed out is the receive's, which the library posts first. So the request
//! completes once the message has come in, the send's data being the library's
//! from the start.

use super::bsend::Room;
use super::Mode;
use crate::entry::call;
use crate::error::{non_null, Error, Object, Result};
use crate::ffi::*;
use crate::request::{Request, Staging};
use crate::state::Mpi;

impl Mpi {
    /// A packed copy of `count` elements of `ty` at `buf`.
    ///
    /// # Safety
    ///
    /// `buf` holds `count` elements of `ty`.
    pub unsafe fn packed_copy(
        &self,
        (buf, count, ty): (*const c_void, c_int, Handle),
    ) -> Result<Vec<u8>> {
        let n = super::check_count(count)?;
        let t = self.dtype(ty)?;
        let len = t
            .bytes(n)
            .ok_or_else(|| Error::new(MPI_ERR_COUNT, "count overflows"))?;
        let mut copy = vec![0u8; len];
        // SAFETY: the caller's contract.
        unsafe { crate::datatype::pack::pack(t, buf.cast(), n, &mut copy) };
        Ok(copy)
    }

    /// Send `copy` to `dest` of `comm` with `tag`, nobody waiting for it: progress
    /// drives it to its end, then drops it, giving back the `held` room of a
    /// buffer.
    pub fn send_detached(
        &mut self,
        copy: Vec<u8>,
        dest: c_int,
        tag: c_int,
        comm: Handle,
        held: Room,
    ) -> Result<()> {
        let len = c_int::try_from(copy.len())
            .map_err(|_| Error::new(MPI_ERR_COUNT, "the message is over 2 GiB"))?;
        // SAFETY: the copy moves into the request, which keeps it until completion.
        let r = unsafe {
            self.isend(
                (copy.as_ptr().cast(), len, MPI_BYTE),
                dest,
                tag,
                comm,
                Mode::Standard,
            )
        }?;
        let r = match r {
            Request::P2p(mut p) => {
                p.staging = Some(Box::new(Staging::Send(copy)));
                Request::P2p(p)
            }
            done => done,
        };
        self.detached.push((r, held));
        Ok(())
    }

    /// Copy `send`, post receive `recv`, then send the copy: the receive's request,
    /// handed out into `request`. The send is copied before the receive is posted
    /// (both may be one buffer, `MPI_Isendrecv_replace`), and its arguments are
    /// checked first, so that a refused call posts nothing (a posted receive could
    /// take a later message); a send that still cannot start cancels the receive.
    ///
    /// # Safety
    ///
    /// `send` holds its elements now; `recv` holds its elements until the request
    /// completes; `request` is writable.
    unsafe fn sendrecv_copy(
        &mut self,
        send: (*const c_void, c_int, Handle),
        (dest, sendtag): (c_int, c_int),
        (buf, count, ty): (*mut c_void, c_int, Handle),
        (source, recvtag, comm): (c_int, c_int, Handle),
        request: *mut Handle,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        let copy = unsafe { self.packed_copy(send) }?;
        non_null(request, MPI_ERR_ARG, "request")?;
        super::check_send_tag(sendtag)?;
        self.reach(
            (copy.as_ptr().cast(), copy.len(), MPI_BYTE),
            dest,
            false,
            comm,
        )?;
        // SAFETY: the caller's contract.
        let r = unsafe { self.irecv(buf, count, ty, source, recvtag, comm) }?;
        if let Err(e) = self.send_detached(copy, dest, sendtag, comm, Room::default()) {
            if let Request::P2p(p) = &r {
                self.msg.cancel(p.id);
            }
            self.detached.push((r, Room::default()));
            return Err(e);
        }
        // SAFETY: the caller's contract.
        unsafe { self.hand_out(r, request) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Isendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Isendrecv", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract.
        unsafe {
            mpi.sendrecv_copy(
                (sendbuf, sendcount, sendtype),
                (dest, sendtag),
                (recvbuf, recvcount, recvtype),
                (source, recvtag, comm),
                request,
            )
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Isendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Isendrecv_replace", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract: the buffer is read now (the copy), then
        // received into.
        unsafe {
            mpi.sendrecv_copy(
                (buf.cast_const(), count, datatype),
                (dest, sendtag),
                (buf, count, datatype),
                (source, recvtag, comm),
                request,
            )
        }
    })
}
