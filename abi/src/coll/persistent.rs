//! Persistent collectives (MPI 4.1, 6.13): `MPI_Allreduce_init` and the others, a
//! collective described once and started again and again (`MPI_Start`). Each start
//! builds the schedule anew from the arguments kept (the buffers' contents are read
//! then, not at the init) and runs it as the nonblocking form would, under a request
//! of its own that the persistent one holds out of the program's sight. Starts are
//! collective: every member starts its persistent collectives in the same order, as
//! the standard asks. The request holds its derived datatypes and its operation, so
//! that the program may free them after the init (MPI 4.1 5.1.9, 6.9.7): they live
//! on, under the same handles, until the request is freed; so do the types of an
//! array (`MPI_Alltoallw_init`), which each start reads again (the program keeps
//! the arrays as they were).

use super::{Schedule, TagFrom};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::request::{Outcome, Request};
use crate::state::Mpi;
use std::rc::Rc;

/// What makes one start's schedule.
pub type Build = Rc<dyn Fn(&mut Mpi) -> Result<Box<Schedule>>>;

/// A persistent collective's request.
pub struct CollInit {
    build: Build,
    /// The communicator it runs on.
    pub comm: Handle,
    /// The tag of every start's messages, taken from the communicator's collectives
    /// at the init: the inits come in the same order on every member, the starts
    /// may not (MPI 4.1, 6.13).
    tag: i32,
    /// The request of the start under way, until a completion call completes it.
    pub started: Option<Handle>,
    /// Arrays the starts read that the library made (a large-count binding's
    /// narrowed counts): they live as long as the request.
    pub kept: Vec<Vec<c_int>>,
    /// The handles of its own, freed with it.
    pub own: Owned,
}

/// The datatype and operation handles a persistent collective holds.
#[derive(Default)]
pub struct Owned {
    handles: Vec<Handle>,
    /// Its send side is ignored (`MPI_IN_PLACE`): the send types are not read.
    send_ignored: bool,
}

/// The call whose argument is kept: the binding's name and its communicator.
#[derive(Clone, Copy)]
pub struct At<'a> {
    pub call: &'a str,
    pub comm: Handle,
}

/// An argument of a persistent collective as its starts see it.
pub trait KeepArg: Sized {
    /// The argument itself (named `name`, of call `at`); a derived datatype
    /// (`datatype`, `sendtype`, `recvtype`, each of the arrays `sendtypes` and
    /// `recvtypes`) or a program's operation (`op`) is held in `own`
    /// ([`Mpi::pin`]). A handle that names nothing is not: the arguments a member
    /// ignores (the send type of an in-place call) may be anything, and the others
    /// are refused at the start.
    ///
    /// # Safety
    ///
    /// The argument is the binding's, as its caller gave it: an array of datatypes
    /// holds one per peer (per neighbour) unless it is null or ignored.
    unsafe fn kept(self, _mpi: &mut Mpi, _name: &str, _at: At, _own: &mut Owned) -> Self {
        self
    }
}

impl KeepArg for c_int {}
impl KeepArg for *const c_int {}
impl KeepArg for *const Aint {}
impl KeepArg for *mut c_void {}

impl KeepArg for *const c_void {
    unsafe fn kept(self, _mpi: &mut Mpi, name: &str, _at: At, own: &mut Owned) -> Self {
        if name == "sendbuf" && super::args::in_place(self) {
            own.send_ignored = true;
        }
        self
    }
}

impl KeepArg for Handle {
    unsafe fn kept(self, mpi: &mut Mpi, name: &str, _at: At, own: &mut Owned) -> Handle {
        let held = match name {
            "datatype" | "sendtype" | "recvtype" => mpi.types.get(self).is_some(),
            "op" => mpi.ops.get(self).is_some(),
            _ => false,
        };
        if held {
            mpi.pin(self);
            own.handles.push(self);
        }
        self
    }
}

impl KeepArg for *const Handle {
    /// An array of datatypes: one per peer (`MPI_Alltoallw_init`), per destination
    /// or source (`MPI_Neighbor_alltoallw_init`). Not read when null, nor the send
    /// types of an in-place call (its `sendbuf` comes before); a communicator
    /// without the topology asked for holds nothing (the start refuses it).
    unsafe fn kept(self, mpi: &mut Mpi, name: &str, at: At, own: &mut Owned) -> Self {
        let sending = match name {
            _ if self.is_null() => return self,
            "sendtypes" if !own.send_ignored => true,
            "recvtypes" => false,
            _ => return self,
        };
        let n = match at.call.contains("Neighbor") {
            true => match mpi.neighbours(at.comm) {
                Ok(n) if sending => n.destinations.len(),
                Ok(n) => n.sources.len(),
                Err(_) => return self,
            },
            false => match mpi.comm(at.comm) {
                Ok(c) => c.peers().size() as usize,
                Err(_) => return self,
            },
        };
        // SAFETY: the caller's contract: the array holds a type per peer (per
        // neighbour).
        for &t in unsafe { rbtl::btl::slice_at(self, n) } {
            // SAFETY: a handle has no contract.
            unsafe { t.kept(mpi, "datatype", at, own) };
        }
        self
    }
}

impl Mpi {
    /// Hand out a persistent collective on `comm` whose starts run `build`'s
    /// schedules, inactive, into `out`. Its arguments are checked now, as MPICH
    /// checks them at the init: a schedule is built and dropped (building moves no
    /// data into the program's buffers; each start builds its own).
    ///
    /// # Safety
    ///
    /// `out` is writable.
    pub unsafe fn persistent_collective(
        &mut self,
        comm: Handle,
        build: Build,
        own: Owned,
        out: *mut Handle,
    ) -> Result<()> {
        let tag = match self.comm_mut(comm) {
            Ok(c) => c.next_coll_tag(false),
            Err(e) => {
                self.free_owned(own);
                return Err(e);
            }
        };
        self.coll_tag = TagFrom::Given(tag);
        let checked = build(self).map(drop);
        self.coll_tag = TagFrom::Blocking;
        if let Err(e) = checked {
            if let Ok(c) = self.comm_mut(comm) {
                c.give_back_coll_tag(false);
            }
            self.free_owned(own);
            return Err(e);
        }
        let r = Request::CollInit(Box::new(CollInit {
            build,
            comm,
            tag,
            started: None,
            kept: Vec::new(),
            own,
        }));
        // SAFETY: the caller's contract.
        unsafe { self.hand_out(r, out) }
    }

    /// Let go of the handles a persistent collective held (its request is freed,
    /// or never made).
    pub fn free_owned(&mut self, own: Owned) {
        for h in own.handles {
            self.unpin(h);
        }
    }

    /// Hold datatype or operation `h` for a persistent collective: freed by the
    /// program meanwhile ([`release`](Self::release)), it lives on until the last
    /// request holding it is freed, under the same handle (the one a program's
    /// reduction function is given).
    pub fn pin(&mut self, h: Handle) {
        self.pinned.entry(h).or_default().0 += 1;
    }

    fn unpin(&mut self, h: Handle) {
        let Some((count, released)) = self.pinned.get_mut(&h) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            let released = *released;
            self.pinned.remove(&h);
            if released {
                self.types.remove(h);
                self.ops.remove(h);
            }
        }
    }

    /// The program frees datatype or operation `h`: gone now, or when the last
    /// persistent collective holding it is freed.
    pub fn release(&mut self, h: Handle) {
        match self.pinned.get_mut(&h) {
            Some((_, released)) => *released = true,
            None => {
                self.types.remove(h);
                self.ops.remove(h);
            }
        }
    }

    /// Keep `arrays`, which the starts of persistent collective `h` read, as long as
    /// its request.
    pub fn keep_with_collective(&mut self, h: Handle, arrays: Vec<Vec<c_int>>) -> Result<()> {
        match self.requests.get_mut(h) {
            Some(Request::CollInit(c)) => {
                c.kept.extend(arrays);
                Ok(())
            }
            _ => Err(Error::new(
                MPI_ERR_INTERN,
                format!("{h:#x} is not the persistent collective just made"),
            )),
        }
    }

    /// `MPI_Start` of persistent collective `h`: its schedule built and started.
    pub fn start_collective_init(&mut self, h: Handle) -> Result<()> {
        let (build, tag) =
            match self.requests.get(h) {
                Some(Request::CollInit(c)) if c.started.is_none() => (c.build.clone(), c.tag),
                Some(Request::CollInit(_)) => return Err(Error::new(
                    MPI_ERR_REQUEST,
                    "the persistent collective is active: it must complete before it starts again",
                )),
                _ => {
                    return Err(Error::new(
                        MPI_ERR_REQUEST,
                        format!("{h:#x} is not a persistent collective"),
                    ))
                }
            };
        self.coll_tag = TagFrom::Given(tag);
        let s = build(self);
        self.coll_tag = TagFrom::Blocking;
        let s = s?;
        let mut inner = MPI_REQUEST_NULL;
        // SAFETY: the buffers were promised at the init for every start, until each
        // completes; `inner` is writable.
        unsafe { self.start_collective(s, &mut inner) }?;
        if let Some(Request::CollInit(c)) = self.requests.get_mut(h) {
            c.started = Some(inner);
        }
        Ok(())
    }

    /// Look once at persistent collective `h` on `comm` (without progress), whose
    /// start under way is `started`: complete, and inactive again, when that start
    /// is.
    pub fn look_collective_init(
        &mut self,
        h: Handle,
        started: Option<Handle>,
        comm: Option<Handle>,
    ) -> Result<Outcome> {
        let Some(inner) = started else {
            return Ok(Outcome::inactive(comm));
        };
        match self.look(inner)? {
            Outcome::Pending => Ok(Outcome::Pending),
            Outcome::Complete { status, error, .. } => {
                if let Some(Request::CollInit(c)) = self.requests.get_mut(h) {
                    c.started = None;
                }
                Ok(Outcome::Complete {
                    status,
                    error,
                    keep: true,
                    comm,
                })
            }
        }
    }

    /// Whether persistent collective `c`'s start under way, if any, is done.
    pub fn collective_init_done(&self, c: &CollInit) -> bool {
        c.started
            .is_none_or(|inner| match self.requests.get(inner) {
                Some(Request::Coll(s)) => s.is_done(),
                _ => true,
            })
    }
}
