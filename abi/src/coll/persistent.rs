//! Persistent collectives (MPI 4.1, 6.13): `MPI_Allreduce_init` and the others, a
//! collective described once and started again and again (`MPI_Start`). Each start
//! builds the schedule anew from the arguments kept (the buffers' contents are read
//! then, not at the init) and runs it as the nonblocking form would, under a request
//! of its own that the persistent one holds out of the program's sight. Starts are
//! collective: every member starts its persistent collectives in the same order, as
//! the standard asks.

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
        out: *mut Handle,
    ) -> Result<()> {
        self.comm(comm)?;
        let r = Request::CollInit(Box::new(CollInit {
            build,
            comm,
            started: None,
            kept: Vec::new(),
        }));
        // SAFETY: the caller's contract.
        unsafe { self.hand_out(r, out) }
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
