//! A new communicator's context: a block of context numbers ([`CONTEXTS_PER_COMM`])
//! that no member uses, so that its traffic never meets another communicator's.
//!
//! Each process keeps the first context above every block it has taken. The members
//! agree on the largest of theirs (an all-gather, which also carries a split's
//! colours and keys; for an intercommunicator, each group's, traded between the
//! groups) and each takes that block. Context numbers are never reused.
//!
//! With `MPI_THREAD_MULTIPLE` an agreement lets other threads' calls in while it
//! waits: two threads may each make a communicator from a different parent, in
//! different orders on different processes, and neither could finish if each kept
//! the other out. Another creation may then take, in this process, the block this
//! one is agreeing on; so the agreement has a second round. Each member takes the
//! block only if no block taken here meanwhile overlaps it, and says whether it
//! could: if every member could, the block is the communicator's; else every member
//! tries again from a proposal moved up by a random number of blocks, so that two
//! creations that met in opposite orders on two processes part (MPICH's context-id
//! mask protocol settles the same race with a mask and a priority to the lowest
//! context). A block taken in a failed try stays unused. Without
//! `MPI_THREAD_MULTIPLE` at any member, and with no nonblocking duplicate's
//! agreement under way at any ([`super::idup`]), nothing comes between and one
//! round does.

use super::intercomm::exchange;
use super::{Group, CONTEXTS_PER_COMM};
use crate::coll::{allgather_here, bcast_outcome, Inside};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::collections::BTreeSet;
use std::hash::BuildHasher;
use std::sync::Arc;

/// The context blocks of this process.
pub struct Contexts {
    /// The first context above every block taken.
    next: u32,
    /// Agreements under way that let other calls come between: of other threads,
    /// or nonblocking ([`super::idup`]).
    pub(super) agreeing: u32,
    /// The first contexts of the blocks taken while one was.
    pub(super) taken_meanwhile: BTreeSet<u32>,
}

impl Contexts {
    /// The blocks below `next` are taken (the predefined communicators').
    pub fn new(next: u32) -> Contexts {
        Contexts {
            next,
            agreeing: 0,
            taken_meanwhile: BTreeSet::new(),
        }
    }

    /// Take the block from `ctx`; refused when it would reach the bit of
    /// partitioned messages' contexts (after some 31 million communicators and
    /// windows).
    pub(super) fn take(&mut self, ctx: u32) -> Result<()> {
        let end = ctx
            .checked_add(CONTEXTS_PER_COMM)
            .filter(|&e| e <= crate::p2p::partitioned::PARTITIONED)
            .ok_or_else(none_left)?;
        self.next = self.next.max(end);
        if self.agreeing > 0 {
            self.taken_meanwhile.insert(ctx);
        }
        Ok(())
    }

    /// Whether a block taken while an agreement was under way overlaps the one from
    /// `ctx`. (A block taken before is below every proposal since.)
    pub(super) fn overlaps(&self, ctx: u32) -> bool {
        let from = ctx.saturating_sub(CONTEXTS_PER_COMM - 1);
        let to = ctx.saturating_add(CONTEXTS_PER_COMM);
        self.taken_meanwhile.range(from..to).next().is_some()
    }
}

impl Mpi {
    /// The first context of a fresh block above every one this process has taken;
    /// the caller agrees on the value with the other members.
    pub fn contexts_above(&self) -> u32 {
        self.contexts.next
    }

    /// Note that the block of contexts from `ctx` is in use (refused when none is
    /// left).
    pub fn use_contexts(&mut self, ctx: u32) -> Result<()> {
        self.contexts.take(ctx)
    }
}

/// Whom a context is agreed among.
pub enum Among<'a> {
    /// The members of an intracommunicator, over its collective context.
    Comm(Handle),
    /// The members of `group` (this process its member `me`), over context `ctx`
    /// with `tag`.
    Group {
        ctx: u32,
        group: &'a Arc<Group>,
        me: u32,
        tag: i32,
    },
    /// The members of both groups of intercommunicator `inter`: each group gathers
    /// its own among `local`, then the groups trade over `inter`.
    Both { inter: Handle, local: &'a Among<'a> },
    /// The members of both groups of an intercommunicator being made
    /// (`MPI_Intercomm_create`): each group gathers its own over intracommunicator
    /// `local`, whose member `leader` trades that with the other group's leader
    /// (`across`, at the leader only: the context, tag and job rank to trade with)
    /// and tells its group what the other's `theirs` members gave.
    Leaders {
        local: Handle,
        leader: c_int,
        across: Option<(u32, i32, u32)>,
        theirs: usize,
    },
}

impl Among<'_> {
    /// Every member's `mine`, in rank order (of two groups: this process's group
    /// first).
    fn gather(&self, inside: &mut impl Inside, mine: &[i32]) -> Result<Vec<i32>> {
        match *self {
            Among::Comm(comm) => allgather_here(inside, comm, mine),
            Among::Group {
                ctx,
                group,
                me,
                tag,
            } => super::create::allgather_among(inside, (ctx, tag), group, me, mine),
            Among::Both { inter, local } => {
                let mut all = local.gather(inside, mine)?;
                all.extend(allgather_here(inside, inter, mine)?);
                Ok(all)
            }
            Among::Leaders {
                local,
                leader,
                across,
                theirs,
            } => {
                let mut all = allgather_here(inside, local, mine)?;
                // The leader's outcome (an error class), then the other group's.
                let mut told = vec![MPI_SUCCESS; 1 + theirs * mine.len()];
                let part = across.map(|with| exchange(inside, with, &all, &mut told[1..]));
                let failed = "the local leader could not trade with the other group";
                bcast_outcome(inside, part, &mut told, (leader, local), failed)?;
                all.extend_from_slice(&told[1..]);
                Ok(all)
            }
        }
    }
}

/// What a member says in the second round.
pub(super) const TAKEN: i32 = 1;
pub(super) const OVERLAPPED: i32 = 0;
pub(super) const NONE_LEFT: i32 = -1;

/// Agree on a context block among `among` (other threads' calls let in meanwhile
/// when `inside` allows), gathering `extra` ints of every member too: the block's
/// first context, taken here, and what was gathered (each member's `extra` in
/// rank order).
pub fn agree_context(
    inside: &mut impl Inside,
    among: &Among,
    extra: &[i32],
) -> Result<(u32, Vec<Vec<i32>>)> {
    inside.state().contexts.agreeing += 1;
    let agreed = agree(inside, among, extra);
    let c = &mut inside.state().contexts;
    c.agreeing -= 1;
    if c.agreeing == 0 {
        c.taken_meanwhile.clear();
    }
    agreed
}

fn agree(inside: &mut impl Inside, among: &Among, extra: &[i32]) -> Result<(u32, Vec<Vec<i32>>)> {
    // Whether another call may take a block here while this one agrees: another
    // thread's, or progress of a nonblocking duplicate's agreement under way.
    let multiple = {
        let mpi = inside.state();
        mpi.thread_level == MPI_THREAD_MULTIPLE || mpi.contexts.agreeing > 1
    };
    let mut tries = 0u64;
    loop {
        let moved = if tries == 0 {
            0
        } else {
            CONTEXTS_PER_COMM * random_below(8, tries)
        };
        let proposal = inside.state().contexts.next.saturating_add(moved);
        let mut mine = vec![proposal as i32, multiple.into()];
        mine.extend_from_slice(extra);
        let all = among.gather(inside, &mine)?;
        let per = mine.len();
        let ctx = all.chunks(per).map(|c| c[0] as u32).max().unwrap_or(0);
        let extras = all.chunks(per).map(|c| c[2..].to_vec()).collect();
        let c = &mut inside.state().contexts;
        if all.chunks(per).all(|c| c[1] == 0) {
            // Nothing came between at any member.
            c.take(ctx)?;
            return Ok((ctx, extras));
        }
        let said = if c.overlaps(ctx) {
            OVERLAPPED
        } else if c.take(ctx).is_ok() {
            TAKEN
        } else {
            NONE_LEFT
        };
        let all_said = among.gather(inside, &[said])?;
        if all_said.iter().all(|&s| s == TAKEN) {
            return Ok((ctx, extras));
        }
        if all_said.contains(&NONE_LEFT) {
            return Err(none_left());
        }
        tries += 1;
        inside.turn();
    }
}

/// The error of a job whose context numbers are all taken.
pub(super) fn none_left() -> Error {
    Error::new(
        MPI_ERR_INTERN,
        "no context number is left for a new communicator in this job",
    )
}

/// A number below `n`, different from process to process and try to try.
pub(super) fn random_below(n: u32, tries: u64) -> u32 {
    // (`RandomState` draws its keys from the system once per thread, then steps
    // them: enough to part two processes.)
    (std::collections::hash_map::RandomState::new().hash_one(tries) % u64::from(n)) as u32
}
