//! Collectives as schedules: rounds of sends and receives on the communicator's
//! collective context, each round followed by local work (copies, reductions),
//! driven by progress (as Open MPI's `libnbc` and MPICH's schedules). A blocking
//! collective runs its schedule to the end; a nonblocking one is a request whose
//! schedule advances whenever the library progresses.
//!
//! A schedule keeps its rounds in three flat lists (transfers, local work, where
//! each round starts) and its scratch buffers in one: emptied, it is used again by
//! the next blocking collective, so that building a small one allocates nothing.

use super::scratch::Scratch;
use super::small::{received, told};
use crate::datatype::{pack, Datatype, Prim};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::op::{self, Op};
use rbtl::msg::{self, ReqId, SendMode};
use std::sync::atomic::{AtomicU64, Ordering};

/// The sends and receives that schedules' rounds have started in this process (the
/// tool interface's `coll_schedule_transfers`).
static TRANSFERS_STARTED: AtomicU64 = AtomicU64::new(0);

/// The sends and receives that schedules' rounds have started so far.
pub fn transfers_started() -> u64 {
    TRANSFERS_STARTED.load(Ordering::Relaxed)
}

fn count_started(n: usize) {
    TRANSFERS_STARTED.fetch_add(n as u64, Ordering::Relaxed);
}

/// A place in memory: the user's (an address), or bytes of the schedule's scratch
/// space (from its start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    User(*mut u8),
    Scratch { at: usize },
}

impl Loc {
    /// `n` bytes further on.
    pub fn offset(self, n: usize) -> Loc {
        match self {
            Loc::User(p) => Loc::User(p.wrapping_add(n)),
            Loc::Scratch { at } => Loc::Scratch { at: at + n },
        }
    }
}

/// A transfer, between this process and a job rank.
#[derive(Clone, Copy, Debug)]
pub enum Xfer {
    Send { from: Loc, len: usize, to: u32 },
    Recv { into: Loc, len: usize, from: u32 },
}

/// Local work after a round's transfers.
pub enum Local {
    Copy {
        from: Loc,
        to: Loc,
        len: usize,
    },
    /// `into = from op into` over `count` packed elements of `ty`.
    Reduce {
        op: Op,
        ty: Datatype,
        handle: Handle,
        from: Loc,
        into: Loc,
        count: usize,
    },
    /// `into = from op into` over `n` elements of one basic kind, by a predefined
    /// operation (no type to keep).
    ReduceBasic {
        op: Handle,
        prim: Prim,
        from: Loc,
        into: Loc,
        n: usize,
    },
    /// Unpack `count` elements of `ty` from packed bytes at `from` into user memory.
    Unpack {
        from: Loc,
        ty: Datatype,
        to: *mut u8,
        count: usize,
    },
}

/// The last round of a schedule being built: what is pushed here belongs to it.
pub struct Round<'a> {
    pub xfers: &'a mut Vec<Xfer>,
    pub then: &'a mut Vec<Local>,
}

/// Where a round starts in the lists of transfers and of local work.
#[derive(Clone, Copy)]
struct Start {
    xfer: usize,
    local: usize,
}

/// A collective's schedule.
pub struct Schedule {
    ctx: u32,
    tag: i32,
    /// The communicator of the collective, if it is a communicator's.
    comm: Option<Handle>,
    xfers: Vec<Xfer>,
    locals: Vec<Local>,
    rounds: Vec<Start>,
    scratch: Scratch,
    /// The round under way, and whether its transfers have started.
    at: usize,
    started: bool,
    /// The next local step to run (an index of `locals`).
    local_at: usize,
    /// Whether a program's reduction function stops it (see [`Schedule::pause_at_user_ops`]),
    /// and whether it is stopped at one.
    pause_at_user: bool,
    paused: bool,
    /// The round's transfers under way, with the length each receive expects.
    pending: Vec<(ReqId, Option<usize>)>,
    /// The message layer's count of completions when `pending` was last tested
    /// (`usize::MAX`: test them now).
    seen: usize,
    /// The first failure: the schedule ends once its transfers under way have.
    error: Option<Error>,
    /// A mismatch of this member's arguments and the others' (the lengths of its
    /// own block, of a message): reported once it has run to its end, as the others
    /// wait for its messages, which from then on say so by their length (`told`).
    at_end: Option<Error>,
    outcome: Option<Result<()>>,
}

impl Schedule {
    /// An empty schedule for a collective in context `ctx` with `tag`.
    pub fn new(ctx: u32, tag: i32) -> Schedule {
        Schedule {
            ctx,
            tag,
            comm: None,
            xfers: Vec::new(),
            locals: Vec::new(),
            rounds: Vec::new(),
            scratch: Scratch::default(),
            at: 0,
            started: false,
            local_at: 0,
            pause_at_user: false,
            paused: false,
            pending: Vec::new(),
            seen: usize::MAX,
            error: None,
            at_end: None,
            outcome: None,
        }
    }

    /// Empty it for a new collective in context `ctx` with `tag`, keeping the
    /// storage of the last one (its scratch space bounded).
    pub fn reuse(&mut self, ctx: u32, tag: i32) {
        self.xfers.clear();
        self.locals.clear();
        self.rounds.clear();
        self.scratch.reuse();
        self.pending.clear();
        self.seen = usize::MAX;
        (self.ctx, self.tag, self.comm) = (ctx, tag, None);
        (self.at, self.started, self.local_at) = (0, false, 0);
        (self.pause_at_user, self.paused) = (false, false);
        (self.error, self.outcome, self.at_end) = (None, None, None);
    }

    /// This member's own block: `sent` bytes of its send side copied into room for
    /// `room` bytes of its receive side (the fewer of the two). Where they differ,
    /// its counts or types do: the collective runs to its end, then fails.
    pub fn own_block(&mut self, sent: usize, room: usize) {
        if sent != room && self.at_end.is_none() {
            self.at_end = Some(Error::new(
                MPI_ERR_TRUNCATE,
                format!("this member's own block is {sent} bytes sent and {room} received: its send and receive counts or types differ"),
            ));
        }
    }

    /// The outcome of a schedule that ran to its end.
    fn ended(&mut self) -> Result<()> {
        self.at_end.take().map_or(Ok(()), Err)
    }

    /// Note that it is a collective of communicator `comm`.
    pub fn set_comm(&mut self, comm: Handle) {
        self.comm = Some(comm);
    }

    /// The communicator of the collective, if noted.
    pub fn comm(&self) -> Option<Handle> {
        self.comm
    }

    /// A scratch buffer of `len` bytes, zeroed: its place.
    pub fn scratch(&mut self, len: usize) -> Loc {
        Loc::Scratch {
            at: self.scratch.zeroed(len),
        }
    }

    /// A scratch buffer of `len` bytes that the schedule fills whole before anything
    /// reads it ([`Scratch::to_fill`]): its place.
    pub fn scratch_to_fill(&mut self, len: usize) -> Loc {
        Loc::Scratch {
            at: self.scratch.to_fill(len),
        }
    }

    /// A new round, to fill.
    pub fn round(&mut self) -> Round<'_> {
        self.rounds.push(Start {
            xfer: self.xfers.len(),
            local: self.locals.len(),
        });
        Round {
            xfers: &mut self.xfers,
            then: &mut self.locals,
        }
    }

    /// The transfers and the local work of round `i`.
    fn bounds(&self, i: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let start = self.rounds[i];
        let (xfer_end, local_end) = match self.rounds.get(i + 1) {
            Some(next) => (next.xfer, next.local),
            None => (self.xfers.len(), self.locals.len()),
        };
        (start.xfer..xfer_end, start.local..local_end)
    }

    /// Stop before each reduction by a program's function, so that its caller can
    /// run it ([`Schedule::run_user_op`]) outside the library's state: the
    /// function may call MPI (all but communication, as the standard allows).
    pub fn pause_at_user_ops(&mut self) {
        self.pause_at_user = true;
    }

    /// Whether it is stopped before a program's reduction function.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Run the reduction it is stopped at, and go on; a failure ends it.
    ///
    /// # Safety
    ///
    /// As [`Schedule::advance`].
    pub unsafe fn run_user_op(&mut self) {
        if !std::mem::take(&mut self.paused) {
            return;
        }
        let scratch = self.scratch.as_mut_ptr();
        // SAFETY: the caller's contract.
        let done = unsafe { run_local(&self.locals[self.local_at], scratch) };
        self.local_at += 1;
        if let Err(e) = done {
            self.outcome = Some(Err(e));
        }
    }

    /// Whether it has ended.
    pub fn is_done(&self) -> bool {
        self.outcome.is_some()
    }

    /// How it ended, once it has (taken once).
    pub fn outcome(&mut self) -> Option<Result<()>> {
        self.outcome.take()
    }

    /// A message-layer request it waits for.
    pub fn pending_id(&self) -> Option<ReqId> {
        self.pending.first().map(|&(id, _)| id)
    }

    /// The address of place `l`, until the next scratch buffer is made.
    pub fn ptr(&mut self, l: Loc) -> *mut u8 {
        address(self.scratch.as_mut_ptr(), l)
    }

    /// Advance as far as it can without waiting: whether anything happened.
    ///
    /// # Safety
    ///
    /// The user memory its places name is valid as the collective's caller promised,
    /// until it ends.
    pub unsafe fn advance(&mut self, m: &mut msg::Comm) -> bool {
        if self.outcome.is_some() || self.paused {
            return false;
        }
        let mut moved = false;
        loop {
            // The round's transfers, tested when something may have completed.
            let completions = m.completions();
            if completions == self.seen && !self.pending.is_empty() {
                return moved;
            }
            self.seen = completions;
            let mut i = 0;
            while i < self.pending.len() {
                let (id, expected) = self.pending[i];
                match m.test(id) {
                    None => i += 1,
                    Some(r) => {
                        self.pending.swap_remove(i);
                        moved = true;
                        let outcome = match (r, expected) {
                            (Err(msg::Error::Cancelled), _) | (Ok(_), None) => Ok(0),
                            (r, Some(len)) => received(r, len, "collective", &mut self.at_end),
                            (Err(e), None) => Err(e.into()),
                        };
                        if let Err(e) = outcome {
                            self.fail(m, e);
                        }
                    }
                }
            }
            if !self.pending.is_empty() {
                return moved;
            }
            if let Some(e) = self.error.take() {
                self.outcome = Some(Err(e));
                return true;
            }
            if self.started {
                // SAFETY: the caller's contract.
                match unsafe { self.run_locals() } {
                    Err(e) => {
                        self.outcome = Some(Err(e));
                        return true;
                    }
                    Ok(false) => return true,
                    Ok(true) => {}
                }
                self.at += 1;
                self.started = false;
            }
            if self.at == self.rounds.len() {
                self.outcome = Some(self.ended());
                self.locals.clear();
                return true;
            }
            // SAFETY: the caller's contract.
            let started = unsafe { self.start_round(m) };
            self.started = true;
            moved = true;
            if let Err(e) = started {
                // What started runs out first (its buffers are ours).
                self.fail(m, e);
            }
        }
    }

    /// Run it to the end on the message layer's blocking calls (the fast paths of
    /// `MPI_Send` and `MPI_Recv`): in each round its sends, then its receives one by
    /// one, then its local work. Only when every send goes in one message, so that no
    /// send waits for its receiver, and no program's function is among its
    /// reductions; `None`, untouched, otherwise. The caller makes sure that nothing
    /// else needs the library's progress meanwhile (no nonblocking collective in
    /// flight).
    ///
    /// # Safety
    ///
    /// As [`Schedule::advance`].
    pub unsafe fn run_by_blocking_calls(&mut self, m: &mut msg::Comm) -> Option<Result<()>> {
        let sends_fit = self.xfers.iter().all(|x| match *x {
            Xfer::Send { len, to, .. } => m.eager_payload_to(to).is_some_and(|e| len <= e),
            Xfer::Recv { .. } => true,
        });
        let user_ops = self.locals.iter().any(|l| {
            matches!(
                l,
                Local::Reduce {
                    op: Op::User(_),
                    ..
                }
            )
        });
        if !sends_fit || user_ops || self.at != 0 || self.started {
            return None;
        }
        // SAFETY: the caller's contract.
        let outcome = unsafe { self.run_rounds_blocking(m) }.and_then(|()| self.ended());
        self.locals.clear();
        Some(outcome)
    }

    /// The rounds of [`Schedule::run_by_blocking_calls`].
    ///
    /// # Safety
    ///
    /// As [`Schedule::advance`].
    unsafe fn run_rounds_blocking(&mut self, m: &mut msg::Comm) -> Result<()> {
        let (ctx, tag) = (self.ctx, self.tag);
        for round in 0..self.rounds.len() {
            let (xfers, _) = self.bounds(round);
            count_started(xfers.len());
            for i in xfers.clone() {
                if let Xfer::Send { from, len, to } = self.xfers[i] {
                    let (p, len) = told(self.ptr(from), len, self.at_end.is_some());
                    let data: &[u8] = match len {
                        0 => &[],
                        // SAFETY: the place holds `len` bytes (the caller's contract,
                        // or a scratch buffer of ours, or `told`'s byte).
                        _ => unsafe { rbtl::btl::slice_at(p, len) },
                    };
                    m.send_in(ctx, data, to, tag)?;
                }
            }
            for i in xfers {
                if let Xfer::Recv { into, len, from } = self.xfers[i] {
                    let data: &mut [u8] = match len {
                        0 => &mut [],
                        // SAFETY: as above, room for `len` bytes.
                        _ => unsafe { rbtl::btl::slice_at_mut(self.ptr(into), len) },
                    };
                    let r = m.recv_in(ctx, data, Some(from), Some(tag));
                    received(r, len, "collective", &mut self.at_end)?;
                }
            }
            self.at = round;
            // SAFETY: the caller's contract; no reduction in it pauses.
            unsafe { self.run_locals() }?;
        }
        self.at = self.rounds.len();
        Ok(())
    }

    /// Start the transfers of the current round.
    ///
    /// # Safety
    ///
    /// As [`Schedule::advance`].
    unsafe fn start_round(&mut self, m: &mut msg::Comm) -> Result<()> {
        let (xfers, _) = self.bounds(self.at);
        count_started(xfers.len());
        let (ctx, tag) = (self.ctx, self.tag);
        // Some may complete at once, which the count of completions does not show.
        self.seen = usize::MAX;
        // Of several sends at once, each receiver reads its message alone.
        let sends = xfers
            .clone()
            .filter(|&i| matches!(self.xfers[i], Xfer::Send { .. }));
        let several = sends.count() > 1;
        for i in xfers {
            let (id, expected) = match self.xfers[i] {
                Xfer::Send { from, len, to } => {
                    let (p, len) = told(self.ptr(from), len, self.at_end.is_some());
                    // SAFETY: the place holds `len` bytes until the round ends (the
                    // caller's contract, or a scratch buffer of ours, or `told`'s).
                    let id = unsafe {
                        match several {
                            true => m.isend_unsplit_in(ctx, p, len, to, tag),
                            false => m.isend_in(ctx, p, len, to, tag, SendMode::Standard),
                        }
                    }?;
                    (id, None)
                }
                Xfer::Recv { into, len, from } => {
                    let p = self.ptr(into);
                    // SAFETY: as above.
                    (
                        unsafe { m.irecv_in(ctx, p, len, Some(from), Some(tag)) }?,
                        Some(len),
                    )
                }
            };
            self.pending.push((id, expected));
        }
        Ok(())
    }

    /// Run the current round's local work (from where it stopped): whether all
    /// of it ran, or it stopped before a program's reduction function.
    ///
    /// # Safety
    ///
    /// As [`Schedule::advance`].
    unsafe fn run_locals(&mut self) -> Result<bool> {
        let (_, locals) = self.bounds(self.at);
        let scratch = self.scratch.as_mut_ptr();
        for i in self.local_at.max(locals.start)..locals.end {
            let l = &self.locals[i];
            if self.pause_at_user
                && matches!(
                    l,
                    Local::Reduce {
                        op: Op::User(_),
                        ..
                    }
                )
            {
                (self.local_at, self.paused) = (i, true);
                return Ok(false);
            }
            // SAFETY: the caller's contract.
            unsafe { run_local(l, scratch) }?;
        }
        self.local_at = locals.end;
        Ok(true)
    }

    /// Fail with `e` (the first failure is kept): receives still posted are
    /// withdrawn; what is under way runs out before the schedule ends, as its
    /// buffers are the schedule's.
    fn fail(&mut self, m: &mut msg::Comm, e: Error) {
        self.error.get_or_insert(e);
        for &(id, _) in &self.pending {
            m.cancel(id);
        }
    }
}

/// Run local step `l`, the scratch space starting at `scratch`.
///
/// # Safety
///
/// As [`Schedule::advance`]; `scratch` is the schedule's scratch space.
unsafe fn run_local(l: &Local, scratch: *mut u8) -> Result<()> {
    let ptr = |l: Loc| address(scratch, l);
    match *l {
        Local::Copy { from, to, len } => {
            let (f, t) = (ptr(from), ptr(to));
            // SAFETY: both places hold `len` bytes; they may overlap only when equal
            // (an in-place step), which `move_bytes` allows.
            unsafe { rbtl::btl::move_bytes(f, t, len) };
        }
        Local::Reduce {
            op,
            ref ty,
            handle,
            from,
            into,
            count,
        } => {
            let (f, t) = (ptr(from), ptr(into));
            // SAFETY: both places hold `count` packed elements; they never overlap
            // (the builders keep them apart).
            unsafe { op::reduce(op, ty, handle, f, t, count) }?;
        }
        Local::ReduceBasic {
            op,
            prim,
            from,
            into,
            n,
        } => {
            let (f, t) = (ptr(from), ptr(into));
            // SAFETY: both places hold `n` elements of `prim`, apart (as above).
            unsafe { op::reduce_basic(op, prim, f, t, n) }?;
        }
        Local::Unpack {
            from,
            ref ty,
            to,
            count,
        } => {
            let f = ptr(from);
            let len = ty.size * count;
            // SAFETY: the place holds the packed elements; `to` the user's memory
            // for them.
            unsafe { pack::unpack(ty, rbtl::btl::slice_at(f, len), to, count) };
        }
    }
    Ok(())
}

/// The address of place `l`, the scratch space starting at `scratch`.
fn address(scratch: *mut u8, l: Loc) -> *mut u8 {
    match l {
        Loc::User(p) => p,
        Loc::Scratch { at } => scratch.wrapping_add(at),
    }
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedule")
            .field("ctx", &self.ctx)
            .field("tag", &self.tag)
            .field("round", &self.at)
            .field("of", &self.rounds.len())
            .finish()
    }
}
