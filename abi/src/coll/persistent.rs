//! Persistent collectives (MPI 4.1, 6.13): `MPI_Allreduce_init` and the others, a
//! collective described once and started again and again (`MPI_Start`). Each start
//! builds the schedule anew from the arguments kept (the buffers' contents are read
//! then, not at the init) and runs it as the nonblocking form would, under a request
//! of its own that the persistent one holds out of the program's sight. Starts are
//! collective: every member starts its persistent collectives in the same order, as
//! the standard asks. The request holds its derived datatypes and its operation, so
//! that the program may free them after the init (MPI 4.1 5.1.9, 6.9.7): they live
//! on, under the same handles, until the request is freed. The types in an array
//! (`MPI_Alltoallw_init`) are not held: each start looks them up.

use super::Schedule;
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
pub struct Owned(Vec<Handle>);

/// An argument of a persistent collective as its starts see it.
pub trait KeepArg: Sized {
    /// The argument itself; a derived datatype (`datatype`, `sendtype`, `recvtype`)
    /// or a program's operation (`op`) is held in `own` ([`Mpi::pin`]). A handle
    /// that names nothing is not: the arguments a member ignores (the send type of
    /// an in-place call) may be anything, and the others are refused at the start.
    fn kept(self, _mpi: &mut Mpi, _name: &str, _own: &mut Owned) -> Self {
        self
    }
}

impl KeepArg for c_int {}
impl<T> KeepArg for *const T {}
impl<T> KeepArg for *mut T {}

impl KeepArg for Handle {
    fn kept(self, mpi: &mut Mpi, name: &str, own: &mut Owned) -> Handle {
        let held = match name {
            "datatype" | "sendtype" | "recvtype" => mpi.types.get(self).is_some(),
            "op" => mpi.ops.get(self).is_some(),
            _ => false,
        };
        if held {
            mpi.pin(self);
            own.0.push(self);
        }
        self
    }
}

impl Mpi {
    /// Hand out a persistent collective on `comm` whose starts run `build`'s
    /// schedules, inactive, into `out`.
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
        if let Err(e) = self.comm(comm) {
            self.free_owned(own);
            return Err(e);
        }
        let r = Request::CollInit(Box::new(CollInit {
            build,
            comm,
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
        for h in own.0 {
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
        let build =
            match self.requests.get(h) {
                Some(Request::CollInit(c)) if c.started.is_none() => c.build.clone(),
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
        let s = build(self)?;
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
