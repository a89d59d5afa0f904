//! The point-to-point bindings: sends in every mode, receives, `Sendrecv`,
//! `Get_count`, `Cancel`.

use super::{check_count, check_recv_tag, check_send_tag, peer, Mode, Peer};
use crate::entry::{call, call_held, call_in_steps};
use crate::error::{non_null, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global::{self, Held};
use crate::request::Request;
use crate::state::Mpi;

impl Held {
    /// A blocking send: straight through the message layer where it may wait there
    /// ([`Mpi::waits_in_layer`]: its own wait is the fastest); else an eager
    /// message that the transport takes at once, or a request waited for here. A
    /// standard send may go by rendezvous where the transport lowered its eager limit
    /// since start-up ([`rbtl::msg::Comm::send_standard_in`]).
    ///
    /// # Safety
    ///
    /// `buf` holds `count` elements of `ty`.
    #[inline(always)]
    pub unsafe fn send(
        &mut self,
        args: (*const c_void, c_int, Handle),
        dest: c_int,
        tag: c_int,
        comm: Handle,
        mode: Mode,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.send_as(args, (dest, tag, comm), mode, false) }
    }

    /// [`Held::send`], eager under the start-up eager limit where `start_up_eager`
    /// (standard mode, contiguous, [`Mpi::waits_in_layer`]): a send that
    /// [`Held::goes_eager`] said one eager message carries leaves without its receiver.
    ///
    /// # Safety
    ///
    /// As [`Held::send`].
    #[inline(always)]
    unsafe fn send_as(
        &mut self,
        (buf, count, ty): (*const c_void, c_int, Handle),
        (dest, tag, comm): (c_int, c_int, Handle),
        mode: Mode,
        start_up_eager: bool,
    ) -> Result<()> {
        if mode == Mode::Standard {
            let c = self.comm(comm)?;
            // (A type that is not one takes the path below, which names the error.)
            let t = self.dtype(ty).ok();
            if let Some(t) = t.filter(|t| t.contiguous && c.remote.is_none()) {
                let ctx = c.ctx;
                let n = check_count(count)?;
                let tag = check_send_tag(tag)?;
                super::check_buffer(buf, n, t)?;
                let Peer::Job(dst) = peer(c, dest, false)? else {
                    return Ok(());
                };
                let len = t
                    .bytes(n)
                    .ok_or_else(|| Error::new(MPI_ERR_COUNT, "count overflows"))?;
                let at = buf.cast::<u8>().wrapping_offset(t.lb);
                // SAFETY: the caller's contract: `len` bytes from the type's start.
                let data = unsafe { rbtl::btl::slice_at(at, len) };
                if self.waits_in_layer() {
                    return Ok(match start_up_eager {
                        true => self.msg.send_in(ctx, data, dst, tag),
                        false => self.msg.send_standard_in(ctx, data, dst, tag),
                    }?);
                }
                if self.msg.try_isend_in(ctx, data, dst, tag)? {
                    return Ok(());
                }
            }
        }
        // SAFETY: the caller's contract; waited for below.
        let r = unsafe { self.isend((buf, count, ty), dest, tag, comm, mode) }?;
        self.wait_local(r).map(|_| ())
    }

    /// A blocking receive (as [`Held::send`]), its status stored at `status` (when
    /// given): a truncated receive still reports what it got (MPI 3.2.5).
    ///
    /// # Safety
    ///
    /// `buf` holds room for `count` elements of `ty`; `status` is null or writable.
    #[inline(always)]
    pub unsafe fn recv(
        &mut self,
        (buf, count, ty): (*mut c_void, c_int, Handle),
        source: c_int,
        tag: c_int,
        comm: Handle,
        status: *mut Status,
    ) -> Result<()> {
        if self.waits_in_layer() {
            let c = self.comm(comm)?;
            let t = self.dtype(ty).ok();
            if let Some(t) = t.filter(|t| t.contiguous && c.remote.is_none()) {
                let ctx = c.ctx;
                let n = check_count(count)?;
                let tag = check_recv_tag(tag)?;
                super::check_buffer(buf, n, t)?;
                let src = match peer(c, source, true)? {
                    Peer::Null => {
                        // SAFETY: the caller's contract.
                        unsafe { crate::p2p::put_one(status, Status::proc_null()) };
                        return Ok(());
                    }
                    Peer::Any => None,
                    Peer::Job(j) => Some(j),
                };
                let len = t
                    .bytes(n)
                    .ok_or_else(|| Error::new(MPI_ERR_COUNT, "count overflows"))?;
                let unit = t.element_unit();
                let at = buf.cast::<u8>().wrapping_offset(t.lb);
                // SAFETY: the caller's contract: room for `len` bytes.
                let data = unsafe { rbtl::btl::slice_at_mut(at, len) };
                let outcome = self.msg.recv_in(ctx, data, src, tag);
                // The common case without a detour: a message received whole (or
                // of whole basic elements).
                match &outcome {
                    Ok(s) if s.len == len || !crate::request::ends_inside(s.len, unit) => {
                        if !status.is_null() {
                            let source = if comm == MPI_COMM_WORLD {
                                s.source as c_int
                            } else {
                                let c = self.comm(comm)?;
                                c.group
                                    .rank_of(s.source)
                                    .map_or(MPI_UNDEFINED, |r| r as c_int)
                            };
                            let mut st = Status::empty();
                            st.source = source;
                            st.tag = s.tag;
                            st.set_bytes(s.len as u64);
                            // SAFETY: checked not null; the caller's contract.
                            unsafe { crate::p2p::put_one(status, st) };
                        }
                        return Ok(());
                    }
                    _ => {}
                }
                let peers = match comm {
                    MPI_COMM_WORLD => None,
                    _ => Some(self.comm(comm)?.group.clone()),
                };
                let mut p = crate::request::P2p {
                    id: 0,
                    comm,
                    peers,
                    staging: None,
                    unit,
                };
                let (s, e) = p.finish(outcome);
                // SAFETY: the caller's contract.
                unsafe { crate::p2p::put_one(status, s) };
                return e.map_or(Ok(()), Err);
            }
        }
        // SAFETY: the caller's contract; waited for below.
        let r = unsafe { self.irecv(buf, count, ty, source, tag, comm) }?;
        let mut h = self.requests.insert(r)?;
        let (s, e) = self.wait(&mut h)?;
        // SAFETY: the caller's contract.
        unsafe { crate::p2p::put_one(status, s) };
        e.map_or(Ok(()), Err)
    }

    /// Wait for a request that never reaches the table: its status.
    pub fn wait_local(&mut self, r: Request) -> Result<Status> {
        let mut h = self.requests.insert(r)?;
        let (status, error) = self.wait(&mut h)?;
        match error {
            Some(e) => Err(e),
            None => Ok(status),
        }
    }
}

impl Mpi {
    /// Keep request `r` in the table; its handle written to `out`.
    ///
    /// # Safety
    ///
    /// `out` is valid for a write.
    // Inlined, as `post`, `isend`, `irecv` and `Table::insert` are: a request made
    // in one call and copied into its slot in another was read back with wider loads
    // than the stores that wrote it, which wait for the message's stores into the
    // peer's ring to reach the cache (docs/performance.md, "where a nonblocking
    // send's time went").
    #[inline(always)]
    pub unsafe fn hand_out(&mut self, r: Request, out: *mut Handle) -> Result<()> {
        non_null(out, MPI_ERR_ARG, "request")?;
        let h = self.requests.insert(r)?;
        // SAFETY: the caller's contract.
        unsafe { out.write(h) };
        Ok(())
    }

    /// Cancel `recv`, the receive of a `MPI_Sendrecv`, where its send was refused
    /// (a rank, tag or type in error): waited for unmatched, it could wait for ever.
    /// Cancelled, it completes at once, unless a message matched it already.
    fn cancel_if_refused<T>(&mut self, recv: &Request, send: &Result<T>) {
        if let (Request::P2p(p), Err(_)) = (recv, send) {
            self.msg.cancel(p.id);
        }
    }

    /// Whether a standard send of `count` elements of `ty` to `dest` on `comm` goes
    /// in one eager message on the blocking send's fast path (nothing but messages in
    /// flight, a contiguous type, a process of an intracommunicator).
    fn goes_eager(&self, count: c_int, ty: Handle, dest: c_int, comm: Handle) -> bool {
        let (Ok(c), Ok(t), Ok(n)) = (self.comm(comm), self.dtype(ty), check_count(count)) else {
            return false;
        };
        let Ok(Peer::Job(dst)) = peer(c, dest, false) else {
            return false;
        };
        let fits = |len: usize| self.msg.eager_payload_to(dst).is_some_and(|e| len <= e);
        t.contiguous && c.remote.is_none() && t.bytes(n).is_some_and(fits) && self.waits_in_layer()
    }
}

macro_rules! blocking_send {
    ($name:ident, $label:literal, $mode:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
        ) -> c_int {
            // SAFETY: the binding's contract: `buf` holds `count` elements.
            call_held($label, Object::Comm(comm), |mpi| unsafe {
                mpi.send((buf, count, datatype), dest, tag, comm, $mode)
            })
        }
    };
}

blocking_send!(PMPI_Send, "MPI_Send", Mode::Standard);
blocking_send!(PMPI_Ssend, "MPI_Ssend", Mode::Synchronous);
blocking_send!(PMPI_Rsend, "MPI_Rsend", Mode::Standard);
blocking_send!(PMPI_Bsend, "MPI_Bsend", Mode::Buffered);

send_request!(PMPI_Isend, post, Mode::Standard);
send_request!(PMPI_Issend, post, Mode::Synchronous);
send_request!(PMPI_Irsend, post, Mode::Standard);
send_request!(PMPI_Ibsend, post, Mode::Buffered);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut Status,
) -> c_int {
    call_held("MPI_Recv", Object::Comm(comm), |mpi| {
        // SAFETY: the binding's contract: room for `count` elements at `buf`;
        // `status` null (ignored) or writable.
        unsafe { mpi.recv((buf, count, datatype), source, tag, comm, status) }
    })
}

recv_request!(PMPI_Irecv, post);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Sendrecv(
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
    status: *mut Status,
) -> c_int {
    call_held("MPI_Sendrecv", Object::Comm(comm), |mpi| {
        // A send that one eager message carries leaves without its receiver (waiting
        // for room at most, which the receiver's progress makes): it goes first, then
        // the blocking receive, both on their fast paths. Otherwise the receive is
        // posted before the send, which may need the peer to receive.
        let eager = mpi.goes_eager(sendcount, sendtype, dest, comm);
        // SAFETY: the binding's contract: both buffers hold their counts (the receive
        // is waited for before returning); `status` is null or writable.
        unsafe {
            let r = match eager {
                true => None,
                false => Some(mpi.irecv(recvbuf, recvcount, recvtype, source, recvtag, comm)?),
            };
            let sent = mpi.send_as(
                (sendbuf, sendcount, sendtype),
                (dest, sendtag, comm),
                Mode::Standard,
                eager,
            );
            let Some(r) = r else {
                sent?;
                return mpi.recv(
                    (recvbuf, recvcount, recvtype),
                    source,
                    recvtag,
                    comm,
                    status,
                );
            };
            mpi.cancel_if_refused(&r, &sent);
            let mut rh = mpi.requests.insert(r)?;
            let (st, e) = mpi.wait(&mut rh)?;
            sent?;
            crate::p2p::put_one(status, st);
            e.map_or(Ok(()), Err)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut Status,
) -> c_int {
    call_held("MPI_Sendrecv_replace", Object::Comm(comm), |mpi| {
        let n = check_count(count)?;
        let t = mpi.dtype(datatype)?.clone();
        let len = t
            .bytes(n)
            .ok_or_else(|| Error::new(MPI_ERR_COUNT, "count overflows"))?;
        let mut packed = vec![0u8; len];
        // SAFETY: the binding's contract: `buf` holds `count` elements.
        unsafe { crate::datatype::pack::pack(&t, buf.cast(), n, &mut packed) };
        // SAFETY: `packed` outlives both requests, waited for below.
        let (r, s) = unsafe {
            let r = mpi.irecv(buf, count, datatype, source, recvtag, comm)?;
            let s = mpi.isend(
                (packed.as_ptr().cast(), len as c_int, MPI_BYTE),
                dest,
                sendtag,
                comm,
                Mode::Standard,
            );
            (r, s)
        };
        mpi.cancel_if_refused(&r, &s);
        let mut rh = mpi.requests.insert(r)?;
        let sent = s.and_then(|s| mpi.wait_local(s));
        let (st, e) = mpi.wait(&mut rh)?;
        sent?;
        // SAFETY: `status` is null or writable.
        unsafe { crate::p2p::put_one(status, st) };
        e.map_or(Ok(()), Err)
    })
}

/// Whole elements of a type of `size` bytes in `bytes`, if they are whole.
fn count_of(bytes: u64, size: usize) -> Option<u64> {
    match size {
        0 if bytes == 0 => Some(0),
        0 => None,
        s if bytes % s as u64 == 0 => Some(bytes / s as u64),
        _ => None,
    }
}

/// A binding `$name` that counts, in a status, the elements of a datatype
/// (`MPI_Get_count`, `MPI_Get_elements`: `$count` given the type and the bytes),
/// writing a `$ty` (an `int`, or an `MPI_Count` for the `_c` forms): `MPI_UNDEFINED`
/// where they are not whole or do not fit. `$lookup` finds the datatype: committed
/// or not for `MPI_Get_count` (as MPICH takes it), committed for the elements.
macro_rules! count_binding {
    ($name:ident, $ty:ty, $lookup:ident, |$t:ident, $bytes:ident| $count:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            status: *const Status,
            datatype: Handle,
            count: *mut $ty,
        ) -> c_int {
            call(&stringify!($name)[1..], Object::None, |mpi| {
                non_null(status, MPI_ERR_ARG, "status")?;
                non_null(count, MPI_ERR_ARG, "count")?;
                let $t = mpi.$lookup(datatype)?;
                // SAFETY: checked not null; the binding's contract.
                let $bytes = unsafe { (*status).bytes() };
                let n: Option<u64> = $count;
                let n = n.and_then(|n| <$ty>::try_from(n).ok());
                // SAFETY: checked not null; the binding's contract.
                unsafe { count.write(n.unwrap_or(MPI_UNDEFINED as $ty)) };
                Ok(())
            })
        }
    };
}

count_binding!(PMPI_Get_count, c_int, dtype_any, |t, bytes| {
    count_of(bytes, t.size)
});
count_binding!(PMPI_Get_count_c, Count, dtype_any, |t, bytes| {
    count_of(bytes, t.size)
});
count_binding!(PMPI_Get_elements, c_int, dtype, |t, bytes| {
    crate::datatype::query::elements_in(t, bytes)
});
count_binding!(PMPI_Get_elements_c, Count, dtype, |t, bytes| {
    crate::datatype::query::elements_in(t, bytes)
});

#[no_mangle]
pub unsafe extern "C" fn PMPI_Cancel(request: *mut Handle) -> c_int {
    call_in_steps("MPI_Cancel", Object::None, || {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(request, MPI_ERR_REQUEST, "request") }?;
        let generalized = global::with(|mpi| {
            // A receive not matched yet completes as cancelled. A rendezvous or
            // synchronous send asks its receiver to drop the message, and completes
            // as cancelled if no receive had matched it. Anything else (an eager
            // send, complete already, or a matched receive) completes as it would
            // have: cancelling it is allowed to fail (MPI 3.8.4), and
            // `MPI_Test_cancelled` then says false.
            let message = match mpi.requests.get(h) {
                Some(Request::P2p(p)) => Some(p.id),
                Some(Request::Persistent(p)) => p.active.as_ref().map(|a| a.id),
                // The program's operation: its cancel function decides.
                Some(Request::Generalized(g)) => return Ok(Some((g.callbacks, g.completed))),
                Some(_) => None,
                None => {
                    return Err(Error::new(
                        MPI_ERR_REQUEST,
                        format!("{h:#x} is not a request"),
                    ))
                }
            };
            if let Some(id) = message {
                if !mpi.msg.cancel(id) {
                    mpi.msg.cancel_send(id);
                }
            }
            Ok(None)
        })?;
        match generalized {
            // SAFETY: outside the state.
            Some((c, complete)) => unsafe { c.cancel(complete) },
            None => Ok(()),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Test_cancelled(status: *const Status, flag: *mut c_int) -> c_int {
    call("MPI_Test_cancelled", Object::None, |_| {
        non_null(status, MPI_ERR_ARG, "status")?;
        non_null(flag, MPI_ERR_ARG, "flag")?;
        // SAFETY: checked not null.
        unsafe { flag.write(c_int::from((*status).cancelled())) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::count_of;

    #[test]
    fn counts_of_bytes() {
        assert_eq!(count_of(12, 4), Some(3));
        assert_eq!(count_of(13, 4), None);
        assert_eq!(count_of(0, 0), Some(0));
        assert_eq!(count_of(1, 0), None);
        assert_eq!(count_of(3 << 31, 1), Some(3 << 31));
    }
}
