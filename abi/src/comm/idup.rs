//! `MPI_Comm_idup`: a duplicate whose context the members agree on without
//! blocking.
//!
//! The duplicate is made at the call (group, attributes, error handler), on a
//! context it may not use yet; the request completes once the members have agreed
//! on a block of its own. The agreement is that of the blocking creations
//! ([`super::context`]), its rounds run as nonblocking all-gathers that progress
//! drives (as MPICH's nonblocking context-id allocation runs its mask rounds):
//! each member proposes the first context above every block it has taken, takes
//! the largest proposal unless a block taken here since its proposal overlaps it,
//! and the members confirm; if one could not, all propose again from a number of
//! blocks moved up at random. Other creations may come between (the program's own,
//! whatever its thread level), so there are always the two rounds, and any
//! agreement under way here makes the blocking ones take two as well.
//!
//! On an intercommunicator an all-gather brings the other group's values only: a
//! round is then two all-gathers, the second of each member's own value combined
//! with the first's (so both groups end with every member's).
//!
//! Every round runs on the parent's collective context with one tag drawn from its
//! nonblocking collectives at the call: the rounds follow one another between the
//! same members, which receive each round's messages in order.

use super::context::{none_left, random_below, NONE_LEFT, OVERLAPPED, TAKEN};
use super::CONTEXTS_PER_COMM;
use crate::coll::{Schedule, TagFrom};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::request::Request;
use crate::state::Mpi;

/// A nonblocking duplicate's agreement on its context.
pub struct Agreement {
    /// The duplicate, made at the call.
    pub made: Handle,
    /// Its parent, whose error handler reports the request's error.
    pub parent: Handle,
    tag: i32,
    /// All-gathers per round: 2 on an intercommunicator.
    steps: u8,
    step: u8,
    round: Round,
    tries: u64,
    /// This member's value in the all-gather under way, and every member's (of the
    /// other group, on an intercommunicator).
    mine: Box<i32>,
    all: Vec<i32>,
    schedule: Option<Box<Schedule>>,
    /// Free the duplicate once agreed (its call failed after the agreement began).
    orphan: bool,
    pub outcome: Option<Result<()>>,
}

#[derive(Clone, Copy)]
enum Round {
    /// Proposals: the largest wins.
    Propose,
    /// What each member said of block `ctx`: the least wins.
    Confirm { ctx: u32 },
}

impl Mpi {
    /// `MPI_Comm_idup` of `parent`: the duplicate, and its request, its agreement
    /// started.
    pub fn comm_idup(&mut self, parent: Handle) -> Result<(Handle, Handle)> {
        let p = self.comm_mut(parent)?;
        let tag = p.next_coll_tag(false);
        let mut d = super::Communicator::new(p.ctx, p.group.clone(), p.rank, "");
        d.remote = p.remote.clone();
        d.errhandler = p.errhandler;
        d.topo = p.topo.clone();
        let steps = if d.remote.is_some() { 2 } else { 1 };
        let made = self.comms.insert(d)?;
        let proposal = self.contexts_above();
        let mut a = Agreement::new(made, parent, tag, steps);
        if let Err(e) = a.start(self, proposal as i32) {
            self.comms.remove(made);
            return Err(e);
        }
        self.contexts.agreeing += 1;
        let h = self.requests.insert(Request::Dup(a))?;
        self.active.push(h);
        Ok((made, h))
    }

    /// Advance the agreement of request `h`: whether anything happened.
    pub fn advance_idup(&mut self, h: Handle) -> bool {
        let Some(slot @ Request::Dup(_)) = self.requests.get_mut(h) else {
            return false;
        };
        // (Out of the table while it advances, which needs the whole state; a
        // completed request holds its place meanwhile.)
        let Request::Dup(mut a) = std::mem::replace(slot, Request::Done(Status::empty())) else {
            unreachable!("matched above");
        };
        let moved = a.advance(self);
        if let Some(slot) = self.requests.get_mut(h) {
            *slot = Request::Dup(a);
        }
        moved
    }

    /// The duplicate of a failed `MPI_Comm_idup` whose agreement went on: freed
    /// once agreed.
    pub fn orphan_idup(&mut self, h: Handle) {
        if let Some(Request::Dup(a)) = self.requests.get_mut(h) {
            a.orphan = true;
        }
    }
}

impl Agreement {
    /// The agreement on `made`'s context, not started.
    fn new(made: Handle, parent: Handle, tag: i32, steps: u8) -> Box<Agreement> {
        Box::new(Agreement {
            made,
            parent,
            tag,
            steps,
            step: 0,
            round: Round::Propose,
            tries: 0,
            mine: Box::new(0),
            all: Vec::new(),
            schedule: None,
            orphan: false,
            outcome: None,
        })
    }

    /// Whether it has ended.
    pub fn is_done(&self) -> bool {
        self.outcome.is_some()
    }

    /// The all-gather under way.
    pub fn schedule(&self) -> Option<&Schedule> {
        self.schedule.as_deref()
    }

    /// Start an all-gather of `value` over the duplicate (on the parent's
    /// collective context, with the agreement's tag).
    fn start(&mut self, mpi: &mut Mpi, value: i32) -> Result<()> {
        *self.mine = value;
        let n = mpi.comm(self.made)?.peers().size() as usize;
        self.all = vec![0; n];
        mpi.coll_tag = TagFrom::Given(self.tag);
        // SAFETY: `mine` and `all` are the agreement's own, on the heap, and neither
        // moves nor is dropped while the schedule runs (it goes first).
        let built = unsafe {
            mpi.build_allgather(
                (std::ptr::from_ref(&*self.mine).cast(), 1, MPI_INT),
                self.all.as_mut_ptr().cast(),
                (1, std::ptr::null(), std::ptr::null()),
                MPI_INT,
                self.made,
            )
        };
        // (The build takes the tag, unless it failed before: then no other
        // collective may.)
        mpi.coll_tag = TagFrom::default();
        let mut s = built?;
        // SAFETY: as above.
        unsafe { s.advance(&mut mpi.msg) };
        self.schedule = Some(s);
        Ok(())
    }

    /// Advance the all-gather under way, and the agreement once it ends: whether
    /// anything happened.
    pub fn advance(&mut self, mpi: &mut Mpi) -> bool {
        let Some(s) = self.schedule.as_mut() else {
            return false;
        };
        // SAFETY: the buffers are the agreement's own (see `start`).
        let moved = unsafe { s.advance(&mut mpi.msg) };
        let Some(outcome) = s.outcome() else {
            return moved;
        };
        self.schedule = None;
        let next = outcome.and_then(|()| self.after_gather(mpi));
        if let Err(e) = next {
            self.end(mpi, Err(e));
        }
        true
    }

    /// The all-gather under way has ended: the next, or the end.
    fn after_gather(&mut self, mpi: &mut Mpi) -> Result<()> {
        let own = *self.mine;
        let all = self.all.iter().copied().chain([own]);
        let v = match self.round {
            Round::Propose => all.max(),
            Round::Confirm { .. } => all.min(),
        }
        .unwrap_or(own);
        self.step += 1;
        if self.step < self.steps {
            return self.start(mpi, v);
        }
        self.step = 0;
        match self.round {
            Round::Propose => {
                let ctx = v as u32;
                let c = &mut mpi.contexts;
                let said = if c.overlaps(ctx) {
                    OVERLAPPED
                } else {
                    c.take(ctx).map_or(NONE_LEFT, |()| TAKEN)
                };
                self.round = Round::Confirm { ctx };
                self.start(mpi, said)
            }
            Round::Confirm { ctx } if v == TAKEN => {
                if let Ok(d) = mpi.comm_mut(self.made) {
                    d.ctx = ctx;
                }
                self.end(mpi, Ok(()));
                Ok(())
            }
            Round::Confirm { .. } if v == NONE_LEFT => Err(none_left()),
            Round::Confirm { .. } => {
                self.tries += 1;
                let moved = CONTEXTS_PER_COMM * random_below(8, self.tries);
                let proposal = mpi.contexts_above().saturating_add(moved);
                self.round = Round::Propose;
                self.start(mpi, proposal as i32)
            }
        }
    }

    fn end(&mut self, mpi: &mut Mpi, outcome: Result<()>) {
        let c = &mut mpi.contexts;
        c.agreeing -= 1;
        if c.agreeing == 0 {
            c.taken_meanwhile.clear();
        }
        if outcome.is_err() || self.orphan {
            // (Not usable: no context of its own.)
            let _ = mpi.comm_free(self.made);
        }
        self.outcome = Some(outcome.map_err(|e| {
            Error::new(
                e.class,
                format!(
                    "the members could not agree on the duplicate's context: {}",
                    e.message
                ),
            )
        }));
    }
}
