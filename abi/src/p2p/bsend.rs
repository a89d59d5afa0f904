//! Buffered sends and their buffers: the message is copied out of the user's buffer
//! at once and sent from the copy, within the room of a buffer the user attached:
//! the communicator's (`MPI_Comm_attach_buffer`, MPI 4.1) if it has one, else that
//! of the session it derives from (`MPI_Session_attach_buffer`), else the process's
//! (`MPI_Buffer_attach`). `MPI_BUFFER_AUTOMATIC` attaches a buffer without a limit.
//! Detaching hands a buffer back once every buffered send that took room in it has
//! left; flushing (`MPI_Buffer_flush`, `MPI_Comm_flush_buffer`,
//! `MPI_Session_flush_buffer` and their nonblocking forms) waits for the same
//! without detaching. The copy is the library's own: an attached buffer is room
//! counted, never written. Each message takes its packed bytes and `OVERHEAD` of
//! that room.

use crate::entry::{call, call_held};
use crate::error::{non_null, Error, Object, Result};
use crate::ffi::*;
use crate::global::Held;
use crate::p2p::wait::Step;
use crate::request::Request;
use crate::state::Mpi;
use std::collections::HashMap;

/// The room a buffered message takes besides its packed bytes: what MPICH's take.
/// A program sizes its buffer with the header's `MPI_BSEND_OVERHEAD` per message,
/// which the standard ABI sets above every implementation's (512); programs that
/// count the room their implementation really takes (MPICH's tests, among others)
/// find as much here.
const OVERHEAD: usize = 96;

/// An attached buffer.
#[derive(Clone, Copy)]
enum Attached {
    At {
        addr: usize,
        size: usize,
    },
    /// `MPI_BUFFER_AUTOMATIC`: room without a limit.
    Automatic,
}

/// A buffer for buffered sends, and how much of it the sends in flight take.
#[derive(Default)]
struct Buffer {
    attached: Option<Attached>,
    used: usize,
}

/// Whose buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Owner {
    #[default]
    Process,
    Comm(Handle),
    Session(Handle),
}

impl Owner {
    /// Check that the communicator or session is live.
    fn check(self, mpi: &Mpi) -> Result<()> {
        match self {
            Owner::Process => Ok(()),
            Owner::Comm(c) => mpi.comm(c).map(|_| ()),
            Owner::Session(s) => mpi.session(s).map(|_| ()),
        }
    }

    /// The communicator whose error handler a request flushing it raises errors
    /// through, if any.
    pub fn comm(self) -> Option<Handle> {
        match self {
            Owner::Comm(c) => Some(c),
            _ => None,
        }
    }
}

/// The process's buffer, the communicators' and the sessions' (by handle), and the
/// number of the next buffered send.
#[derive(Default)]
pub struct Buffers {
    process: Buffer,
    comms: HashMap<Handle, Buffer>,
    sessions: HashMap<Handle, Buffer>,
    serial: u64,
}

/// The room a request nobody waits for takes in a buffer (none: `bytes` 0).
#[derive(Clone, Copy, Default)]
pub struct Room {
    bytes: usize,
    /// Whose buffer it is in.
    owner: Owner,
    /// Which buffered send it is, in order.
    serial: u64,
}

impl Buffers {
    fn of(&mut self, owner: Owner) -> Option<&mut Buffer> {
        match owner {
            Owner::Process => Some(&mut self.process),
            Owner::Comm(c) => self.comms.get_mut(&c),
            Owner::Session(s) => self.sessions.get_mut(&s),
        }
    }

    /// Whether `owner` has a buffer attached.
    fn attached(&mut self, owner: Owner) -> bool {
        self.of(owner).is_some_and(|b| b.attached.is_some())
    }

    /// Give back the room of a request that completed (to a buffer that may have
    /// been detached and another attached since, under `MPI_THREAD_MULTIPLE`, or
    /// whose communicator's handle went to another: never below nothing).
    pub fn release(&mut self, room: Room) {
        if room.bytes > 0 {
            if let Some(b) = self.of(room.owner) {
                b.used = b.used.saturating_sub(room.bytes);
            }
        }
    }
}

/// Whether every buffered send before number `upto` that took room in `owner`'s
/// buffer has left the requests nobody waits for (`detached`); else one of them,
/// for a wait to look at.
pub fn flushed(
    detached: &[(Request, Room)],
    owner: Owner,
    upto: u64,
) -> (bool, Option<rbtl::msg::ReqId>) {
    let mut left = detached
        .iter()
        .filter(|(_, room)| room.bytes > 0 && room.owner == owner && room.serial < upto);
    match left.next() {
        None => (true, None),
        Some((r, _)) => (false, crate::request::pending_id(r)),
    }
}

impl Mpi {
    /// A buffered send ([`super::Mode::Buffered`]): copy, then send from the copy (a
    /// request that is complete).
    ///
    /// # Safety
    ///
    /// `buf` holds `count` elements of `ty`.
    pub unsafe fn bsend(
        &mut self,
        (buf, count, ty): (*const c_void, c_int, Handle),
        dest: c_int,
        tag: c_int,
        comm: Handle,
    ) -> Result<Request> {
        // SAFETY: the caller's contract.
        let copy = unsafe { self.packed_copy((buf, count, ty)) }?;
        let len = copy.len();
        let session = self.comm(comm)?.group.session().map(Owner::Session);
        let owner = [Some(Owner::Comm(comm)), session]
            .into_iter()
            .flatten()
            .find(|&o| self.bsend.attached(o))
            .unwrap_or(Owner::Process);
        let b = self.bsend.of(owner).expect("the process's, or one found");
        let need = len + OVERHEAD;
        match b.attached {
            None => {
                return Err(Error::new(
                    MPI_ERR_BUFFER,
                    "no buffer is attached for buffered sends: call MPI_Buffer_attach, MPI_Comm_attach_buffer or MPI_Session_attach_buffer first",
                ))
            }
            Some(Attached::At { size, .. }) if b.used + need > size => {
                return Err(Error::new(
                    MPI_ERR_BUFFER,
                    format!("the attached buffer of {size} bytes has {} free, and this send needs {need} (its {len} bytes and {OVERHEAD} of the library's)", size.saturating_sub(b.used)),
                ))
            }
            Some(_) => {}
        }
        let room = Room {
            bytes: need,
            owner,
            serial: self.bsend.serial,
        };
        self.send_detached(copy, dest, tag, comm, room)?;
        self.bsend.serial += 1;
        if let Some(b) = self.bsend.of(owner) {
            b.used += need;
        }
        Ok(Request::Done(Status::empty()))
    }

    /// The number the next buffered send gets.
    pub fn next_bsend(&self) -> u64 {
        self.bsend.serial
    }

    /// Attach `buffer` of `size` bytes to `owner`.
    fn attach(&mut self, owner: Owner, buffer: *mut c_void, size: c_int) -> Result<()> {
        let attached = if buffer as usize == MPI_BUFFER_AUTOMATIC {
            Attached::Automatic
        } else {
            let size = usize::try_from(size)
                .map_err(|_| Error::new(MPI_ERR_ARG, format!("size {size} is negative")))?;
            Attached::At {
                addr: buffer as usize,
                size,
            }
        };
        owner.check(self)?;
        let b = match owner {
            Owner::Process => &mut self.bsend.process,
            Owner::Comm(c) => self.bsend.comms.entry(c).or_default(),
            Owner::Session(s) => self.bsend.sessions.entry(s).or_default(),
        };
        if b.attached.is_some() {
            return Err(Error::new(
                MPI_ERR_BUFFER,
                "a buffer is attached already: detach it first",
            ));
        }
        b.attached = Some(attached);
        Ok(())
    }

    /// Forget communicator `c`'s buffer (the communicator is freed): its sends in
    /// flight give their room back to nobody.
    pub fn drop_comm_buffer(&mut self, c: Handle) {
        self.bsend.comms.remove(&c);
    }

    /// Forget session `s`'s buffer (the session is finalized), as
    /// [`drop_comm_buffer`](Self::drop_comm_buffer).
    pub fn drop_session_buffer(&mut self, s: Handle) {
        self.bsend.sessions.remove(&s);
    }
}

impl Held {
    /// Wait until every buffered send made so far in `owner`'s buffer has left.
    fn flush(&mut self, owner: Owner) -> Result<()> {
        owner.check(self)?;
        let upto = self.next_bsend();
        self.wait_for(|mpi, look| {
            let (done, pending) = flushed(&mpi.detached, owner, upto);
            Ok(match done {
                true => Step::Done,
                false => Step::Pending(pending.filter(|_| look)),
            })
        })
    }

    /// Detach `owner`'s buffer once its buffered sends have left: its address (or
    /// `MPI_BUFFER_AUTOMATIC`) and size (0 for an automatic one).
    fn detach(&mut self, owner: Owner) -> Result<(usize, usize)> {
        owner.check(self)?;
        let attached = self.bsend.of(owner).and_then(|b| b.attached);
        let Some(attached) = attached else {
            return Err(Error::new(MPI_ERR_BUFFER, "no buffer is attached"));
        };
        self.flush(owner)?;
        if let Some(b) = self.bsend.of(owner) {
            b.attached = None;
        }
        Ok(match attached {
            Attached::At { addr, size } => (addr, size),
            Attached::Automatic => (MPI_BUFFER_AUTOMATIC, 0),
        })
    }
}

/// The check of a detach's places for the buffer's address and size, before the
/// buffer is detached (`MPI_ERR_ARG` where either is null).
fn places_for_back(buffer_addr: *mut c_void, size: *mut c_int) -> Result<()> {
    non_null(buffer_addr, MPI_ERR_ARG, "buffer address")?;
    non_null(size, MPI_ERR_ARG, "size")
}

/// Hand a detached buffer back: its address and size.
///
/// # Safety
///
/// `buffer_addr` points to a pointer, `size` to an int (checked by
/// [`places_for_back`]).
unsafe fn hand_back(buffer_addr: *mut c_void, size: *mut c_int, (addr, len): (usize, usize)) {
    // SAFETY: the caller's contract.
    unsafe {
        buffer_addr.cast::<usize>().write(addr);
        size.write(len as c_int);
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    call("MPI_Buffer_attach", Object::None, |mpi| {
        mpi.attach(Owner::Process, buffer, size)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_attach_buffer(
    comm: Handle,
    buffer: *mut c_void,
    size: c_int,
) -> c_int {
    call("MPI_Comm_attach_buffer", Object::Comm(comm), |mpi| {
        mpi.attach(Owner::Comm(comm), buffer, size)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    call_held("MPI_Buffer_detach", Object::None, |mpi| {
        places_for_back(buffer_addr, size)?;
        let back = mpi.detach(Owner::Process)?;
        // SAFETY: the binding's contract.
        unsafe { hand_back(buffer_addr, size, back) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_detach_buffer(
    comm: Handle,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> c_int {
    call_held("MPI_Comm_detach_buffer", Object::Comm(comm), |mpi| {
        places_for_back(buffer_addr, size)?;
        let back = mpi.detach(Owner::Comm(comm))?;
        // SAFETY: the binding's contract.
        unsafe { hand_back(buffer_addr, size, back) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Buffer_flush() -> c_int {
    call_held("MPI_Buffer_flush", Object::None, |mpi| {
        mpi.flush(Owner::Process)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_flush_buffer(comm: Handle) -> c_int {
    call_held("MPI_Comm_flush_buffer", Object::Comm(comm), |mpi| {
        mpi.flush(Owner::Comm(comm))
    })
}

/// A request that completes when the buffered sends made so far in `owner`'s
/// buffer have left.
///
/// # Safety
///
/// `request` is null or writable.
unsafe fn iflush(mpi: &mut Mpi, owner: Owner, request: *mut Handle) -> Result<()> {
    owner.check(mpi)?;
    let upto = mpi.next_bsend();
    // SAFETY: the caller's contract.
    unsafe { mpi.hand_out(Request::Flush { owner, upto }, request) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Buffer_iflush(request: *mut Handle) -> c_int {
    // SAFETY: the binding's contract.
    call("MPI_Buffer_iflush", Object::None, |mpi| unsafe {
        iflush(mpi, Owner::Process, request)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_iflush_buffer(comm: Handle, request: *mut Handle) -> c_int {
    // SAFETY: the binding's contract.
    call("MPI_Comm_iflush_buffer", Object::Comm(comm), |mpi| unsafe {
        iflush(mpi, Owner::Comm(comm), request)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_attach_buffer(
    session: Handle,
    buffer: *mut c_void,
    size: c_int,
) -> c_int {
    call(
        "MPI_Session_attach_buffer",
        Object::Session(session),
        |mpi| mpi.attach(Owner::Session(session), buffer, size),
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_detach_buffer(
    session: Handle,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> c_int {
    call_held(
        "MPI_Session_detach_buffer",
        Object::Session(session),
        |mpi| {
            places_for_back(buffer_addr, size)?;
            let back = mpi.detach(Owner::Session(session))?;
            // SAFETY: the binding's contract.
            unsafe { hand_back(buffer_addr, size, back) };
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_flush_buffer(session: Handle) -> c_int {
    call_held(
        "MPI_Session_flush_buffer",
        Object::Session(session),
        |mpi| mpi.flush(Owner::Session(session)),
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_iflush_buffer(
    session: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    call(
        "MPI_Session_iflush_buffer",
        Object::Session(session),
        |mpi| unsafe { iflush(mpi, Owner::Session(session), request) },
    )
}
