//! Probes: `MPI_Probe`/`Iprobe` look at the first matching message without
//! receiving it; `MPI_Mprobe`/`Improbe` take it out of the queue for
//! `MPI_Mrecv`/`Imrecv`, so that no other receive can match it.

use super::{check_count, check_recv_tag, peer, Peer};
use crate::comm::Group;
use crate::entry::{call, call_held};
use crate::error::{non_null, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global::Held;
use crate::p2p::wait::Step;
use crate::request::{P2p, Request};
use crate::state::Mpi;
use rbtl::msg;
use std::sync::Arc;

/// A message taken by a matched probe.
pub struct Message {
    matched: msg::Matched,
    peers: Option<Arc<Group>>,
    comm: Handle,
}

/// What a probe looks for.
struct Probe {
    comm: Handle,
    ctx: u32,
    src: Option<u32>,
    tag: Option<i32>,
    peers: Option<Arc<Group>>,
}

impl Mpi {
    /// What `source`, `tag` on `comm` look for; `None` for `MPI_PROC_NULL`.
    fn probe_of(&self, source: c_int, tag: c_int, comm: Handle) -> Result<Option<Probe>> {
        let tag = check_recv_tag(tag)?;
        let c = self.comm(comm)?;
        let src = match peer(c, source, true)? {
            Peer::Null => return Ok(None),
            Peer::Any => None,
            Peer::Job(j) => Some(j),
        };
        let peers = c
            .remote
            .clone()
            .or_else(|| (comm != MPI_COMM_WORLD).then(|| c.group.clone()));
        Ok(Some(Probe {
            comm,
            ctx: c.ctx,
            src,
            tag,
            peers,
        }))
    }

    /// One look (after a round of progress) for a message `p` matches.
    fn iprobe(&mut self, p: &Probe) -> Result<Option<Status>> {
        if !self.active.is_empty() || !self.detached.is_empty() {
            self.progress();
        }
        let found = self.msg.iprobe_in(p.ctx, p.src, p.tag)?;
        Ok(found.map(|s| status_of(&p.peers, s)))
    }

    /// One look for a message `p` matches, taking it.
    fn improbe(&mut self, p: &Probe) -> Result<Option<(Message, Status)>> {
        if !self.active.is_empty() || !self.detached.is_empty() {
            self.progress();
        }
        let found = self.msg.improbe_in(p.ctx, p.src, p.tag)?;
        Ok(found.map(|(matched, s)| {
            (
                Message {
                    matched,
                    peers: p.peers.clone(),
                    comm: p.comm,
                },
                status_of(&p.peers, s),
            )
        }))
    }
}

impl Held {
    /// Progress until `look` finds the message.
    fn probe_until<T>(
        &mut self,
        p: &Probe,
        mut look: impl FnMut(&mut Mpi, &Probe) -> Result<Option<T>>,
    ) -> Result<T> {
        let mut found = None;
        self.wait_for(|mpi, _| {
            found = look(mpi, p)?;
            Ok(if found.is_some() {
                Step::Done
            } else {
                Step::Pending(None)
            })
        })?;
        Ok(found.expect("set when done"))
    }
}

/// The status a probe reports of message `s`.
fn status_of(peers: &Option<Arc<Group>>, s: msg::Status) -> Status {
    let mut st = Status::empty();
    st.source = match peers {
        None => s.source as c_int,
        Some(g) => g.rank_of(s.source).map_or(MPI_UNDEFINED, |r| r as c_int),
    };
    st.tag = s.tag;
    st.set_bytes(s.len as u64);
    st
}

/// A probe binding `$name` (as `MPI_Iprobe`): its parameters `source`, `tag`,
/// `comm`, then `$out`; `$body` runs on the state `$mpi` once each of `$checked` is
/// checked not null, given the probe `$probe` they ask for (`None`: `MPI_PROC_NULL`).
macro_rules! probe_binding {
    (
        $name:ident($($out:ident: $ty:ty),*),
        non_null($($checked:ident),*),
        |$mpi:ident, $probe:ident| $body:expr
    ) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            source: c_int,
            tag: c_int,
            comm: Handle,
            $($out: *mut $ty),*
        ) -> c_int {
            call_held(&stringify!($name)[1..], Object::Comm(comm), |$mpi| {
                $(non_null($checked, MPI_ERR_ARG, stringify!($checked))?;)*
                let $probe = $mpi.probe_of(source, tag, comm)?;
                $body
            })
        }
    };
}

probe_binding!(PMPI_Iprobe(flag: c_int, status: Status), non_null(flag), |mpi, probe| {
    let found = match probe {
        None => Some(Status::proc_null()),
        Some(p) => mpi.iprobe(&p)?,
    };
    // SAFETY: checked not null; `status` null or writable.
    unsafe { crate::p2p::put_found(flag, status, found) };
    Ok(())
});

probe_binding!(PMPI_Probe(status: Status), non_null(), |mpi, probe| {
    let s = match probe {
        None => Status::proc_null(),
        Some(p) => mpi.probe_until(&p, |mpi, p| mpi.iprobe(p))?,
    };
    // SAFETY: `status` null or writable.
    unsafe { crate::p2p::put_one(status, s) };
    Ok(())
});

/// Hand a matched message out as a handle.
///
/// # Safety
///
/// `message` and `status` are writable (`status` may be null).
unsafe fn hand_out_message(
    mpi: &mut Mpi,
    found: Option<(Message, Status)>,
    message: *mut Handle,
    status: *mut Status,
) -> Result<()> {
    let (h, s) = match found {
        None => (MPI_MESSAGE_NO_PROC, Status::proc_null()),
        Some((m, s)) => (mpi.messages.insert(m)?, s),
    };
    // SAFETY: the caller's contract.
    unsafe {
        message.write(h);
        crate::p2p::put_one(status, s);
    }
    Ok(())
}

probe_binding!(
    PMPI_Mprobe(message: Handle, status: Status),
    non_null(message),
    |mpi, probe| {
        let found = match probe {
            None => None,
            Some(p) => Some(mpi.probe_until(&p, |mpi, p| mpi.improbe(p))?),
        };
        // SAFETY: checked; the binding's contract.
        unsafe { hand_out_message(mpi, found, message, status) }
    }
);

probe_binding!(
    PMPI_Improbe(flag: c_int, message: Handle, status: Status),
    non_null(message, flag),
    |mpi, probe| {
        let found = match probe {
            None => Some(None),
            Some(p) => mpi.improbe(&p)?.map(Some),
        };
        // SAFETY: checked not null.
        unsafe { flag.write(c_int::from(found.is_some())) };
        match found {
            // SAFETY: checked; the binding's contract.
            Some(found) => unsafe { hand_out_message(mpi, found, message, status) },
            None => Ok(()),
        }
    }
);

impl Mpi {
    /// Start receiving the matched message `*message` (which becomes
    /// `MPI_MESSAGE_NULL`).
    ///
    /// # Safety
    ///
    /// `buf` has room for `count` elements of `ty` until the request completes.
    unsafe fn imrecv(
        &mut self,
        buf: *mut c_void,
        count: c_int,
        ty: Handle,
        message: *mut Handle,
    ) -> Result<Request> {
        // SAFETY: null or readable, the binding's contract.
        let h = unsafe { read_arg(message, MPI_ERR_ARG, "message") }?;
        let n = check_count(count)?;
        let shape = self.dtype(ty)?.shape();
        let len = shape.bytes(n)?;
        if h == MPI_MESSAGE_NO_PROC {
            // SAFETY: the caller's contract.
            unsafe { message.write(MPI_MESSAGE_NULL) };
            return Ok(Request::Done(Status::proc_null()));
        }
        let m = self.messages.remove(h).ok_or_else(|| {
            Error::new(MPI_ERR_REQUEST, format!("{h:#x} is not a message from MPI_Mprobe or MPI_Improbe (or it was received already)"))
        })?;
        // SAFETY: the caller's contract.
        unsafe { message.write(MPI_MESSAGE_NULL) };
        let unit = shape.unit();
        let (at, staging) = match shape {
            crate::datatype::Shape::Contiguous { lb, .. } => {
                (buf.cast::<u8>().wrapping_offset(lb), None)
            }
            crate::datatype::Shape::Typed(t) => {
                let mut staging = vec![0u8; len];
                // The heap buffer stays put as the vector moves into the request.
                let at = staging.as_mut_ptr();
                let u = crate::request::Unpack {
                    staging,
                    base: buf.cast(),
                    count: n,
                    ty: *t,
                };
                (at, Some(Box::new(crate::request::Staging::Unpack(u))))
            }
        };
        // SAFETY: the caller's contract, or the staging buffer the request keeps.
        let id = unsafe { self.msg.imrecv(m.matched, at, len) };
        Ok(Request::P2p(P2p {
            id,
            comm: m.comm,
            peers: m.peers,
            staging,
            unit,
        }))
    }
}

/// Whose error handler the errors of receiving `message` go to: its communicator's
/// (MPI 4.1 §9.3), `MPI_COMM_SELF`'s for no message.
///
/// # Safety
///
/// `message` is null or readable.
unsafe fn message_object(message: *const Handle) -> Object {
    if message.is_null() {
        return Object::None;
    }
    // SAFETY: the caller's contract.
    let h = unsafe { message.read() };
    let comm = crate::global::with(|mpi| Ok(mpi.messages.get(h).map(|m| m.comm)));
    comm.ok().flatten().map_or(Object::None, Object::Comm)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Mrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    message: *mut Handle,
    status: *mut Status,
) -> c_int {
    // SAFETY: the binding's contract: null or readable.
    let object = unsafe { message_object(message) };
    call_held("MPI_Mrecv", object, |mpi| {
        // SAFETY: the binding's contract; waited for below.
        let r = unsafe { mpi.imrecv(buf, count, datatype, message) }?;
        let mut h = mpi.requests.insert(r)?;
        let (s, e) = mpi.wait(&mut h)?;
        // SAFETY: `status` null or writable.
        unsafe { crate::p2p::put_one(status, s) };
        e.map_or(Ok(()), Err)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Imrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    message: *mut Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract: null or readable.
    let object = unsafe { message_object(message) };
    call("MPI_Imrecv", object, |mpi| {
        // Checked first: the message stays unreceived.
        non_null(request, MPI_ERR_ARG, "request")?;
        // SAFETY: the binding's contract.
        unsafe {
            let r = mpi.imrecv(buf, count, datatype, message)?;
            mpi.hand_out(r, request)
        }
    })
}
