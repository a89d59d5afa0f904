//! Collectives on a communicator, built as schedules of point-to-point rounds
//! ([`schedule`]), with the algorithm chosen by message size and process count (as
//! Open MPI's `tuned` and MPICH's collectives choose): [`basic`] moves data,
//! [`reduce`] combines it; [`inter`] has those of intercommunicators. Blocking calls
//! run their schedule to the end; nonblocking ones hand it out as a request. A small
//! all-reduction runs without one ([`small`]). Aliased buffers are refused first
//! ([`aliased`]).

#[macro_use]
mod binding;
pub(crate) use binding::last;
pub mod aliased;
pub mod allreduce;
pub mod api;
pub mod args;
pub mod basic;
pub mod build;
pub mod inter;
pub mod neighbor;
pub mod persistent;
pub mod placement;
pub mod reduce;
pub mod schedule;
pub mod scratch;
pub mod small;
pub mod small_blocks;
pub mod small_reduce;

pub use inter::Sides;
pub use schedule::{transfers_started, Loc, Local, Schedule, Xfer};

use crate::comm::Group;
use crate::entry::call_in_steps;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::request::Request;
use crate::state::Mpi;
use rbtl::msg::IdleWait;
use std::sync::Arc;

/// Where a blocking collective's schedule is.
pub enum Run {
    Ended(Result<()>),
    /// Stopped before a program's reduction function.
    Stopped(Box<Schedule>),
}

/// What an algorithm knows of its communicator: this process's rank, the size, and
/// the job rank of every member.
pub struct Members {
    pub rank: u32,
    pub size: u32,
    group: Arc<Group>,
}

impl Members {
    /// The members of `group`, this process being `rank`.
    pub fn of(group: Arc<Group>, rank: u32) -> Members {
        Members {
            rank,
            size: group.size(),
            group,
        }
    }

    /// The job rank of member `r`.
    #[inline]
    pub fn job(&self, r: u32) -> u32 {
        self.group.job_rank(r).expect("a member's rank")
    }
}

/// Where a collective's tag comes from: the next of its communicator's blocking
/// collectives, or of its nonblocking and persistent ones (a sequence of their own,
/// so that a program that orders the two kinds differently on its members, which
/// MPI forbids but MPICH's and Open MPI's tags let pass, still matches each), or a
/// persistent collective's own, while one of its starts builds it.
#[derive(Clone, Copy, Default)]
pub enum TagFrom {
    #[default]
    Blocking,
    Nonblocking,
    Given(i32),
}

impl Mpi {
    /// A schedule for the next collective on intracommunicator `comm`, and its members.
    pub fn collective(&mut self, comm: Handle) -> Result<(Box<Schedule>, Members)> {
        let (s, m, remote) = self.next_collective(comm, false)?;
        debug_assert!(remote.is_none());
        Ok((s, m))
    }

    /// For an intercommunicator, a schedule for its next collective and its two
    /// groups; `None` for an intracommunicator.
    pub fn inter_collective(&mut self, comm: Handle) -> Result<Option<(Box<Schedule>, Sides)>> {
        if self.comm(comm)?.remote.is_none() {
            return Ok(None);
        }
        let (s, local, remote) = self.next_collective(comm, true)?;
        let remote = remote.expect("an intercommunicator");
        Ok(Some((s, Sides { local, remote })))
    }

    /// A schedule for the next collective on `comm` (an intercommunicator refused
    /// unless `inter`), this process's group, and the other group of an
    /// intercommunicator.
    fn next_collective(
        &mut self,
        comm: Handle,
        inter: bool,
    ) -> Result<(Box<Schedule>, Members, Option<Arc<Group>>)> {
        let from = std::mem::take(&mut self.coll_tag);
        let c = self.comm_mut(comm)?;
        if c.remote.is_some() && !inter {
            return Err(Error::new(
                MPI_ERR_COMM,
                "scans and neighbourhood collectives are not defined on intercommunicators",
            ));
        }
        let (tag, taken) = match from {
            TagFrom::Given(tag) => (tag, None),
            TagFrom::Blocking => (c.next_coll_tag(true), Some((comm, true))),
            TagFrom::Nonblocking => (c.next_coll_tag(false), Some((comm, false))),
        };
        let members = Members::of(c.group.clone(), c.rank);
        let remote = c.remote.clone();
        let (ctx, spare) = (c.coll_ctx(), self.spare_schedule.take());
        let mut s = match spare {
            Some(mut spare) => {
                spare.reuse(ctx, tag);
                spare
            }
            None => Box::new(Schedule::new(ctx, tag)),
        };
        s.set_comm(comm);
        self.tag_taken = taken;
        Ok((s, members, remote))
    }

    /// Build a collective with `build`. Where the build fails (bad arguments, on
    /// this member alone perhaps, as a root's), the tag it took from the
    /// communicator is given back: the member's next collective there meets the
    /// others' next, as a program that goes on after a refused call expects.
    pub fn building<T>(&mut self, build: impl FnOnce(&mut Mpi) -> Result<T>) -> Result<T> {
        self.tag_taken = None;
        let built = build(self);
        if let (Err(_), Some((comm, blocking))) = (&built, self.tag_taken.take()) {
            if let Ok(c) = self.comm_mut(comm) {
                c.give_back_coll_tag(blocking);
            }
        }
        built
    }

    /// Run schedule `s` until it ends, or stops before a program's reduction
    /// function or (with `MPI_THREAD_MULTIPLE`) for other threads waiting to
    /// enter. An ended schedule is kept for the next collective. `idle` counts the
    /// wait's idle rounds from one call to the next.
    pub fn drive(&mut self, mut s: Box<Schedule>, idle: &mut IdleWait) -> Run {
        // Without a nonblocking collective to advance meanwhile, on the blocking
        // calls' fast paths where it can.
        let direct = match self.waits_in_layer() {
            // SAFETY: the blocking call that built `s` keeps its buffers until now.
            true => unsafe { s.run_by_blocking_calls(&mut self.msg) },
            false => None,
        };
        match direct.or_else(|| self.drive_here(&mut s, idle)) {
            Some(outcome) => {
                self.spare_schedule = Some(s);
                Run::Ended(outcome)
            }
            None => Run::Stopped(s),
        }
    }

    /// Run schedule `s` until it ends (its outcome) or stops (`None`).
    fn drive_here(&mut self, s: &mut Schedule, idle: &mut IdleWait) -> Option<Result<()>> {
        loop {
            // SAFETY: the blocking call that built `s` keeps its buffers until now.
            let moved = unsafe { s.advance(&mut self.msg) };
            if let Some(outcome) = s.outcome() {
                return Some(outcome);
            }
            if s.is_paused() {
                return None;
            }
            if moved || self.progress() > 0 {
                idle.busy();
            } else if idle.idle() {
                if let Some(id) = s.pending_id() {
                    self.msg.look_at(id, idle);
                }
            }
            if global::others_waiting() {
                return None;
            }
        }
    }

    /// Hand schedule `s` out as a request (a nonblocking collective), started.
    ///
    /// # Safety
    ///
    /// The buffers it names stay valid until the request completes; `out` is
    /// writable.
    pub unsafe fn start_collective(
        &mut self,
        mut s: Box<Schedule>,
        out: *mut Handle,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { s.advance(&mut self.msg) };
        let done = s.is_done();
        // SAFETY: the caller's contract.
        unsafe { self.hand_out(Request::Coll(s), out) }?;
        if !done {
            // SAFETY: `out` was just written.
            self.active.push(unsafe { *out });
        }
        Ok(())
    }
}

/// A value the library's own blocking collectives move (`allgather_here`,
/// `bcast_in`), with its type.
pub trait Basic: Copy + Default {
    const TYPE: Handle;
}

impl Basic for i32 {
    const TYPE: Handle = MPI_INT;
}

impl Basic for u64 {
    const TYPE: Handle = MPI_UINT64_T;
}

impl Basic for u8 {
    const TYPE: Handle = MPI_BYTE;
}

/// Gather `mine` (as many values on every member) from every member of
/// intracommunicator `comm`, in rank order (of an intercommunicator: from every
/// member of the other group), run in `inside`.
pub(crate) fn allgather_here<T: Basic>(
    inside: &mut impl Inside,
    comm: Handle,
    mine: &[T],
) -> Result<Vec<T>> {
    let mpi = inside.state();
    let n = mpi.comm(comm)?.peers().size() as usize;
    let mut all = vec![T::default(); n * mine.len()];
    // SAFETY: both buffers live until the collective, run here, ends.
    let s = unsafe {
        mpi.build_allgather(
            (mine.as_ptr().cast(), mine.len() as c_int, T::TYPE),
            all.as_mut_ptr().cast(),
            (mine.len() as c_int, std::ptr::null(), std::ptr::null()),
            T::TYPE,
            comm,
        )
    }?;
    run_here(inside, s)?;
    Ok(all)
}

/// Gather `mine` from every member of intracommunicator `comm`, in rank order,
/// member `i` giving `counts[i]` values (as every member knows), run in `inside`.
pub(crate) fn allgatherv_here<T: Basic>(
    inside: &mut impl Inside,
    comm: Handle,
    mine: &[T],
    counts: &[c_int],
) -> Result<Vec<T>> {
    let mut displs = Vec::with_capacity(counts.len());
    let mut total: c_int = 0;
    for &c in counts {
        displs.push(total);
        total = total
            .checked_add(c)
            .ok_or_else(|| Error::new(MPI_ERR_COUNT, "more than 2^31 values in all"))?;
    }
    let mut all = vec![T::default(); total as usize];
    // SAFETY: the buffers and both arrays live until the collective, run here, ends.
    let s = unsafe {
        inside.state().build_allgather(
            (mine.as_ptr().cast(), mine.len() as c_int, T::TYPE),
            all.as_mut_ptr().cast(),
            (0, counts.as_ptr(), displs.as_ptr()),
            T::TYPE,
            comm,
        )
    }?;
    run_here(inside, s)?;
    Ok(all)
}

/// Broadcast `v` from `root` over `comm`, run in `inside`.
pub(crate) fn bcast_in<T: Basic>(
    inside: &mut impl Inside,
    v: &mut [T],
    root: c_int,
    comm: Handle,
) -> Result<()> {
    // SAFETY: `v` lives until the broadcast, run here, ends.
    let s = unsafe {
        inside
            .state()
            .build_bcast(v.as_mut_ptr().cast(), v.len() as c_int, T::TYPE, root, comm)
    }?;
    run_here(inside, s)
}

/// Broadcast over `comm` from its member `root` what the root's `part` (`Some` at
/// the root only) gave: `told`, whose first value is the part's outcome (set here
/// at the root: `MPI_SUCCESS` or its error's class), then what else the root tells.
/// The root's error there; elsewhere one of its class, saying that `failed`.
pub(crate) fn bcast_outcome(
    inside: &mut impl Inside,
    part: Option<Result<()>>,
    told: &mut [c_int],
    (root, comm): (c_int, Handle),
    failed: &str,
) -> Result<()> {
    let mut own = None;
    if let Some(Err(e)) = part {
        told[0] = e.class;
        own = Some(e);
    }
    bcast_in(inside, told, root, comm)?;
    if let Some(e) = own {
        return Err(e);
    }
    if told[0] != MPI_SUCCESS {
        return Err(Error::new(
            told[0],
            format!("{failed} (its error says why)"),
        ));
    }
    Ok(())
}

/// Advance every nonblocking collective in flight (and `MPI_Comm_idup`'s
/// agreements): how much happened.
pub fn progress_active(mpi: &mut Mpi) -> usize {
    let Mpi {
        requests,
        msg,
        active,
        ..
    } = mpi;
    let mut n = 0;
    let mut agreements = Vec::new();
    for h in active.iter() {
        match requests.get_mut(*h) {
            // SAFETY: a nonblocking collective's caller keeps its buffers until the
            // request completes.
            Some(Request::Coll(s)) => n += usize::from(unsafe { s.advance(msg) }),
            Some(Request::Dup(_)) => agreements.push(*h),
            _ => {}
        }
    }
    for h in agreements {
        n += usize::from(mpi.advance_idup(h));
    }
    let Mpi {
        requests, active, ..
    } = mpi;
    active.retain(|h| match requests.get(*h) {
        Some(Request::Coll(s)) => !s.is_done(),
        Some(Request::Dup(a)) => !a.is_done(),
        _ => false,
    });
    n
}

impl global::Held {
    /// Run schedule `s` to its end (a blocking collective), here, letting other
    /// threads' calls in while it waits (with `MPI_THREAD_MULTIPLE`).
    pub fn run_letting_in(&mut self, s: Box<Schedule>) -> Result<()> {
        run_here(self, s)
    }
}

/// The state a blocking wait runs in: a [`global::Held`] (other threads' calls
/// come in between its rounds), or a [`KeepOut`] (they wait until it ends).
/// The state itself is neither, so that a blocking call's `Held`, given where a
/// `&mut Mpi` is asked for, cannot silently keep the others out.
pub trait Inside {
    fn state(&mut self) -> &mut Mpi;
    /// Between two rounds.
    fn turn(&mut self) {}
}

/// The state of a wait that keeps other threads' calls out until it ends, in a
/// call that entered without a [`global::Held`]: an accumulate under a window's
/// mutex, a request-based access that completes the earlier ones first, a
/// spawned child's start within `MPI_Init`.
pub struct KeepOut<'a>(pub &'a mut Mpi);

impl Inside for KeepOut<'_> {
    fn state(&mut self) -> &mut Mpi {
        self.0
    }
}

impl Inside for global::Held {
    fn state(&mut self) -> &mut Mpi {
        self
    }
    fn turn(&mut self) {
        self.let_others_in();
    }
}

/// Run schedule `s` to its end in `inside`, a program's reduction functions in it.
pub(crate) fn run_here(inside: &mut impl Inside, s: Box<Schedule>) -> Result<()> {
    let mut idle = IdleWait::new();
    let mut run = inside.state().drive(s, &mut idle);
    loop {
        match run {
            Run::Ended(outcome) => return outcome,
            Run::Stopped(mut s) => {
                // SAFETY: the blocking call that built `s` keeps its buffers until
                // now.
                unsafe { s.run_user_op() };
                inside.turn();
                run = inside.state().drive(s, &mut idle);
            }
        }
    }
}

/// Binding `name`'s blocking collective, built by `build` and run to its end within
/// the library's state (its reductions, if any, are the library's own).
pub fn run_in_state(
    name: &str,
    object: Object,
    build: impl FnOnce(&mut Mpi) -> Result<Box<Schedule>>,
) -> c_int {
    run_steps(name, object, |mpi| build(mpi).map(Some), false)
}

/// Binding `name`'s blocking collective, built by `build` and run to its end, its
/// reductions by a program's functions called outside the library's state (they
/// may call MPI, all but communication, as the standard allows).
pub fn run_blocking(
    name: &str,
    object: Object,
    build: impl FnOnce(&mut Mpi) -> Result<Box<Schedule>>,
) -> c_int {
    run_steps(name, object, |mpi| build(mpi).map(Some), true)
}

/// A blocking collective (`name`, on `comm`) with a way without a schedule:
/// `small` does it all where it can, else it runs by the schedule `build` makes
/// (its reductions by a program's functions outside the library's state where
/// `user_ops_outside`, as [`run_blocking`]; else within it, as [`run_in_state`]).
///
/// # Safety
///
/// `args` are as `small` asks them (the binding's contract).
pub(crate) unsafe fn small_first<A: Copy>(
    (name, comm): (&str, Handle),
    args: A,
    small: unsafe fn(&mut Mpi, A) -> Option<Result<()>>,
    build: impl FnOnce(&mut Mpi) -> Result<Box<Schedule>>,
    user_ops_outside: bool,
) -> c_int {
    run_steps(
        name,
        Object::Comm(comm),
        |mpi| {
            // SAFETY: the caller's contract.
            if let Some(done) = unsafe { small(mpi, args) } {
                return done.map(|()| None);
            }
            build(mpi).map(Some)
        },
        user_ops_outside,
    )
}

/// Binding `name`'s blocking collective: `build` makes its schedule (or does it
/// all, `None`), run to its end in steps, between which the library's state is
/// left: to run a program's reduction functions (`user_ops_outside`), and to let
/// other threads' calls in (`MPI_THREAD_MULTIPLE`).
pub(crate) fn run_steps(
    name: &str,
    object: Object,
    build: impl FnOnce(&mut Mpi) -> Result<Option<Box<Schedule>>>,
    user_ops_outside: bool,
) -> c_int {
    call_in_steps(name, object, || {
        let mut idle = IdleWait::new();
        let mut run = global::with(|mpi| {
            let Some(mut s) = mpi.building(build)? else {
                return Ok(Run::Ended(Ok(())));
            };
            if user_ops_outside {
                s.pause_at_user_ops();
            }
            Ok(mpi.drive(s, &mut idle))
        })?;
        loop {
            match run {
                Run::Ended(outcome) => return outcome,
                Run::Stopped(mut s) => {
                    // SAFETY: this blocking call's caller keeps its buffers until
                    // it returns.
                    unsafe { s.run_user_op() };
                    global::yield_to_waiting();
                    run = global::with(|mpi| Ok(mpi.drive(s, &mut idle)))?;
                }
            }
        }
    })
}
