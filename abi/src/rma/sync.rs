//! A window's synchronization: fences, passive-target locks and flushes (and the
//! state of its epochs; post/start/complete/wait is in `pscw`, `MPI_Win_lock_all` in
//! `lock_all`).
//!
//! An operation completes at its target when the message layer's put, get or atomic
//! completes (its callback runs once the data is visible there), so every
//! completion call (flush, unlock, fence, complete) waits for the operations counted
//! toward the members it concerns. A passive-target lock is a word in the target's
//! control block changed by atomics: readers add one, a writer sets the top bit when
//! the word is zero (as Open MPI's `osc/rdma`). A writer that finds the lock taken
//! names itself in the word as the next writer, where none is named yet: from then
//! on no other writer or reader takes the lock before it. Without that, a process
//! that unlocks and locks again in a loop could keep a lock from another for ever
//! (where the word's owner serves the other's atomics only in its own calls, as
//! over `tcp`, each of the other's tries may arrive while the lock is held again;
//! MPICH's `linked_list` waits so for a peer's put). A release is started, not waited
//! for (its old value tells nothing): an unlock returns once the epoch's operations
//! have completed, without one more round trip. It is counted with the operations
//! toward its member, so that the next completion toward the member (at the latest,
//! freeing the window) waits for it and reports its failure; a take that reaches
//! the word before the release it follows finds it held and tries again.

use super::{bad_win, Held, Win, ACC_WORD, LOCK_WORD};
use crate::coll::{Inside, KeepOut};
use crate::entry::{call, call_held};
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use rbtl::btl::AtomicOp;
use rbtl::msg::{Atomic, Comm, IdleWait, Pending, Target};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// The writer's bit of a lock word.
pub(super) const EXCLUSIVE: u64 = 1 << 63;
/// The bits of a lock word (below [`EXCLUSIVE`]) that name the writer taking it
/// next: its rank in the window plus one; 0, none. Readers count below them.
pub(super) const NEXT_WRITER: u64 = 0x7fff << NEXT_WRITER_SHIFT;
const NEXT_WRITER_SHIFT: u32 = 48;

/// Which epochs a window has open.
#[derive(Default, Debug)]
pub struct State {
    /// An epoch opened by a fence (until a fence with `MPI_MODE_NOSUCCEED`).
    pub fence: bool,
    /// Passive-target locks held, by member.
    pub locks: BTreeMap<usize, Held>,
    /// `MPI_Win_lock_all` is in force (`Some(true)` under `MPI_MODE_NOCHECK`).
    pub lock_all: Option<bool>,
    /// The access group of a post/start/complete/wait epoch, from start to complete.
    pub access: Option<Vec<usize>>,
    /// The exposure group, from post to wait.
    pub exposure: Option<Vec<usize>>,
}

impl State {
    /// Whether a passive-target epoch is open (a lock, or `lock_all`).
    pub fn passive(&self) -> bool {
        !self.locks.is_empty() || self.lock_all.is_some()
    }

    /// Whether member `r` may be accessed now.
    pub fn may_access(&self, r: usize) -> bool {
        self.fence
            || self.lock_all.is_some()
            || self.locks.contains_key(&r)
            || self.access.as_ref().is_some_and(|g| g.contains(&r))
    }
}

/// An error of synchronization order.
pub(super) fn sync_error(what: &str) -> Error {
    Error::new(MPI_ERR_RMA_SYNC, what.to_string())
}

/// What is done to a word of a control block: the two changes a lock word needs, an
/// addition (wrapping) and setting it to `value` when it is `compare`, or a plain
/// read; each gives the word's previous value.
#[derive(Clone, Copy)]
pub(super) enum WordChange {
    Add(u64),
    Swap { compare: u64, value: u64 },
    Read,
}

/// Do `c` to the word at `offset` of control block `ctrl` (of job rank `job`, the
/// wait counted by `p`), waited for: the word's previous value. Where the block is
/// mapped here, the processor's atomics; else the transport's.
pub(super) fn word_change(
    msg: &mut Comm,
    member: (&Target, u32, &Pending),
    offset: usize,
    c: WordChange,
) -> Result<u64> {
    match Comm::word_here(member.0, offset)? {
        Some(word) => Ok(change_here(word, c)),
        None => change_there(msg, member, offset, c),
    }
}

/// Do `c` to a word mapped here.
#[inline(always)]
fn change_here(word: &AtomicU64, c: WordChange) -> u64 {
    match c {
        WordChange::Add(by) => word.fetch_add(by, Ordering::AcqRel),
        WordChange::Swap { compare, value } => word
            .compare_exchange(compare, value, Ordering::AcqRel, Ordering::Acquire)
            .unwrap_or_else(|old| old),
        WordChange::Read => word.load(Ordering::Acquire),
    }
}

/// Do `c` to a word through the transport (a read is an addition of 0), waited for.
fn change_there(
    msg: &mut Comm,
    (ctrl, job, p): (&Target, u32, &Pending),
    offset: usize,
    c: WordChange,
) -> Result<u64> {
    let atomic = match c {
        WordChange::Add(by) => Atomic::Op(AtomicOp::Add, by),
        WordChange::Swap { compare, value } => Atomic::CompareSwap { compare, value },
        WordChange::Read => Atomic::Op(AtomicOp::Add, 0),
    };
    let mut old = [0u8; 8];
    // SAFETY: `old` lives until the operation is waited for, just below.
    unsafe { msg.atomic_on(ctrl, offset, atomic, false, old.as_mut_ptr(), p) }?;
    msg.complete(p, Some(job))?;
    Ok(u64::from_ne_bytes(old))
}

/// How one process tries for a lock word: its name as the next writer (`None` where
/// it has none: the accumulate mutex, or a rank beyond [`NEXT_WRITER`]'s bits), and
/// whether the word names it now.
#[derive(Clone, Copy, Default)]
pub(super) struct Turn {
    pub name: Option<u64>,
    pub named: bool,
}

impl Turn {
    /// The turn of window rank `rank` at the lock word (`named`: false).
    pub fn of(rank: u32) -> Turn {
        let n = u64::from(rank) + 1;
        Turn {
            name: (n < NEXT_WRITER >> NEXT_WRITER_SHIFT).then_some(n << NEXT_WRITER_SHIFT),
            named: false,
        }
    }
}

/// Take a lock word with `apply`, `exclusive`ly or shared: whether the lock was
/// got. A writer sets [`EXCLUSIVE`] when the word is zero, or holds only its own
/// name; failing, it names itself the next writer where no one is named (`turn`
/// keeps that from one try to the next). Readers add one; a reader that finds a
/// writer, holding or named, takes its one back.
fn take_word(
    mut apply: impl FnMut(WordChange) -> Result<u64>,
    exclusive: bool,
    turn: &mut Turn,
) -> Result<bool> {
    if exclusive {
        let mine = turn.name.filter(|_| turn.named).unwrap_or(0);
        let old = apply(WordChange::Swap {
            compare: mine,
            value: EXCLUSIVE,
        })?;
        if old == mine {
            turn.named = false;
            return Ok(true);
        }
        if let Some(name) = turn.name.filter(|_| !turn.named && old & NEXT_WRITER == 0) {
            let value = old | name;
            turn.named = apply(WordChange::Swap {
                compare: old,
                value,
            })? == old;
        }
        return Ok(false);
    }
    if apply(WordChange::Add(1))? & (EXCLUSIVE | NEXT_WRITER) == 0 {
        return Ok(true);
    }
    apply(WordChange::Add(given_back(false)))?;
    Ok(false)
}

/// What a release adds to a lock word: the writer's bit back, or a reader's one.
fn given_back(exclusive: bool) -> u64 {
    match exclusive {
        true => EXCLUSIVE.wrapping_neg(),
        false => u64::MAX,
    }
}

/// Complete every operation toward member `r` of window `h`, then the work that
/// waited for them. In a [`crate::global::Held`], other threads' calls come in
/// between the rounds of the wait.
pub fn complete_toward(inside: &mut impl Inside, h: Handle, r: usize) -> Result<()> {
    let w = inside.state().win(h)?;
    // Nothing under way toward it, nor failed (a flush after operations done at once,
    // on memory mapped here): one round of progress, as below.
    if w.pending[r].is_settled() && w.staged.is_empty() {
        inside.state().progress();
        return Ok(());
    }
    wait_toward(inside, h, r)
}

/// [`complete_toward`] where operations may be under way, or may have failed.
#[inline(never)]
fn wait_toward(inside: &mut impl Inside, h: Handle, r: usize) -> Result<()> {
    let mut idle = IdleWait::new();
    let Mpi { wins, msg, .. } = inside.state();
    let w = wins.get(h).ok_or_else(|| bad_win(h))?;
    let (pending, job) = (&w.pending[r], w.peers[r].job);
    let done = match msg.complete_round(pending, Some(job), &mut idle) {
        Some(done) => {
            // Nothing was under way: still one round of progress, so that a program
            // that only flushes (polling its own memory, say) answers what other
            // processes need of it (MPI 4.1, 12.7: every call progresses).
            inside.state().progress();
            done
        }
        // Waited for on a count of its own: the window may go meanwhile.
        None => {
            let pending = pending.clone();
            loop {
                inside.turn();
                let round = inside
                    .state()
                    .msg
                    .complete_round(&pending, Some(job), &mut idle);
                if let Some(done) = round {
                    break done;
                }
            }
        }
    };
    let mpi = inside.state();
    if !mpi.win(h)?.staged.is_empty() {
        mpi.finish_staged(h, Some(r))?;
    }
    Ok(done?)
}

/// Complete every operation of window `h`, as [`complete_toward`] each member.
pub fn complete_all(inside: &mut impl Inside, h: Handle) -> Result<()> {
    let n = inside.state().win(h)?.peers.len();
    let mut first = Ok(());
    for r in 0..n {
        if let Err(e) = complete_toward(inside, h, r) {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

/// Tries of a lock word that another holds, each after a progress round, before a
/// wait steps aside between two tries.
const TRIES_BEFORE_STEPPING_ASIDE: u64 = 64;
/// How long a wait for a lock word steps aside between two tries, once it does, on a
/// node whose ranks outnumber their processors. There the holder may need this
/// processor to finish, and a yield does not always give it up: the kernel's
/// autogroups make each session a scheduling group, and a yield hands the processor
/// to another task of the caller's group at once, to one of another group seldom
/// (Slurm's tasks of a node share a session, hydra's each have one). A sleep leaves it
/// to the node's other ranks, whatever their session (measured: docs/performance.md,
/// 2026-12-04). Elsewhere a wait yields: the holder runs on a processor of its own.
const PAUSE_WHEN_OVERSUBSCRIBED: std::time::Duration = std::time::Duration::from_micros(20);

/// Take the lock word at `offset` of member `r`'s control block of window `h`:
/// exclusively (a writer), or shared (a reader); retried while another holds it (in
/// a [`crate::global::Held`], other threads' calls come in between the tries: the
/// holder may wait for one of them).
pub fn acquire(
    inside: &mut impl Inside,
    h: Handle,
    r: usize,
    offset: usize,
    exclusive: bool,
) -> Result<()> {
    let mut turn = match offset {
        LOCK_WORD => Turn::of(inside.state().win(h)?.rank),
        _ => Turn::default(),
    };
    if inside
        .state()
        .take_lock_word(h, r, offset, exclusive, &mut turn)?
    {
        return Ok(());
    }
    let waited = wait_for_word(inside, h, r, offset, exclusive, &mut turn);
    if waited.is_err() && turn.named {
        // Given up: the word names this process no longer.
        let name = turn.name.unwrap_or(0);
        let _ = inside
            .state()
            .win_word_add(h, r, offset, name.wrapping_neg());
    }
    waited
}

/// [`acquire`]'s tries after the first failed.
fn wait_for_word(
    inside: &mut impl Inside,
    h: Handle,
    r: usize,
    offset: usize,
    exclusive: bool,
    turn: &mut Turn,
) -> Result<()> {
    let mut tries = 0u64;
    // A holder that never releases (it died, or stopped, or waits on this process) is
    // given up on once the message layer's peer timeout has passed since the first
    // failed take, and its probes of the other ranks find one silent, or every one
    // waiting as well (a holder computing is waited for).
    let mut idle = IdleWait::since(std::time::Instant::now());
    let oversubscribed = inside.state().msg.node_oversubscribed();
    loop {
        // The holder may need this process's progress to finish.
        inside.state().progress();
        inside.turn();
        tries += 1;
        if tries > TRIES_BEFORE_STEPPING_ASIDE {
            if oversubscribed {
                std::thread::sleep(PAUSE_WHEN_OVERSUBSCRIBED);
            } else {
                std::thread::yield_now();
            }
            // (Without a timeout the look only records the wait.)
            if tries % 1024 == 0 {
                if let Some(e) = inside.state().msg.look_for_anyone(&mut idle) {
                    let why = match e {
                        rbtl::msg::Error::AnySourceTimeout { live, waited } => format!(
                            "for {} s (msg_peer_timeout), and of ranks {live:?} one did not answer probes (the holder may be gone or stopped) or every one waits as well (the holder may wait on this process)",
                            waited.as_secs()
                        ),
                        e => e.to_string(),
                    };
                    return Err(Error::new(
                        MPI_ERR_RMA_SYNC,
                        format!("the lock of window member {r} was not released {why}"),
                    ));
                }
            }
        }
        if inside
            .state()
            .take_lock_word(h, r, offset, exclusive, turn)?
        {
            return Ok(());
        }
    }
}

impl Mpi {
    /// Release what [`acquire`] took: started (done at once where the word is
    /// mapped here), counted with the operations toward member `r`, not waited for.
    pub fn win_release(
        &mut self,
        h: Handle,
        r: usize,
        offset: usize,
        exclusive: bool,
    ) -> Result<()> {
        let Mpi { wins, msg, .. } = self;
        let w = wins.get(h).ok_or_else(|| bad_win(h))?;
        let add = Atomic::Op(AtomicOp::Add, given_back(exclusive));
        let (ctrl, pending) = (&w.peers[r].ctrl, &w.pending[r]);
        // SAFETY: no result is asked for.
        unsafe { msg.atomic_on(ctrl, offset, add, false, std::ptr::null_mut(), pending) }?;
        Ok(())
    }

    /// One try to take the lock word at `offset` of member `r`'s control block,
    /// waited for: whether it got the lock.
    fn take_lock_word(
        &mut self,
        h: Handle,
        r: usize,
        offset: usize,
        exclusive: bool,
        turn: &mut Turn,
    ) -> Result<bool> {
        let Mpi { wins, msg, .. } = self;
        let w = wins.get(h).ok_or_else(|| bad_win(h))?;
        let member = (&w.peers[r].ctrl, w.peers[r].job, &w.waited);
        // The word looked for once: mapped here, the processor's atomics at once.
        match Comm::word_here(member.0, offset)? {
            Some(word) => take_word(|c| Ok(change_here(word, c)), exclusive, turn),
            None => take_word(|c| change_there(msg, member, offset, c), exclusive, turn),
        }
    }

    /// Add `by` to the word at `offset` of member `r`'s control block, waited for.
    fn win_word_add(&mut self, h: Handle, r: usize, offset: usize, by: u64) -> Result<u64> {
        let Mpi { wins, msg, .. } = self;
        let w = wins.get(h).ok_or_else(|| bad_win(h))?;
        let member = (&w.peers[r].ctrl, w.peers[r].job, &w.waited);
        word_change(msg, member, offset, WordChange::Add(by))
    }

    /// Run `f` holding member `r`'s accumulate mutex.
    pub fn win_exclusive<T>(
        &mut self,
        h: Handle,
        r: usize,
        f: impl FnOnce(&mut Mpi) -> Result<T>,
    ) -> Result<T> {
        acquire(&mut KeepOut(self), h, r, ACC_WORD, true)?;
        let out = f(self);
        let released = self.win_release(h, r, ACC_WORD, true);
        let out = out?;
        released?;
        Ok(out)
    }
}

/// The assertions of `MPI_Win_fence`.
pub(super) const FENCE_MODES: &[(c_int, &str)] = &[
    (MPI_MODE_NOSTORE, "MPI_MODE_NOSTORE"),
    (MPI_MODE_NOPUT, "MPI_MODE_NOPUT"),
    (MPI_MODE_NOPRECEDE, "MPI_MODE_NOPRECEDE"),
    (MPI_MODE_NOSUCCEED, "MPI_MODE_NOSUCCEED"),
];
/// The assertions of `MPI_Win_post`.
pub(super) const POST_MODES: &[(c_int, &str)] = &[
    (MPI_MODE_NOCHECK, "MPI_MODE_NOCHECK"),
    (MPI_MODE_NOSTORE, "MPI_MODE_NOSTORE"),
    (MPI_MODE_NOPUT, "MPI_MODE_NOPUT"),
];
/// The assertion of `MPI_Win_start`, `MPI_Win_lock` and `MPI_Win_lock_all`.
pub(super) const NOCHECK: &[(c_int, &str)] = &[(MPI_MODE_NOCHECK, "MPI_MODE_NOCHECK")];

/// `assert` of a synchronization call `call` of window `win`: only bits of the
/// `modes` it takes, else `MPI_ERR_ASSERT` (as Open MPI refuses it, and MPICH but
/// for `MPI_Win_post`), once the window is known to be one (a good assertion
/// leaves the window to the call's own look-up).
pub(super) fn check_assert(
    mpi: &Mpi,
    win: Handle,
    assert: c_int,
    (call, modes): (&str, &[(c_int, &str)]),
) -> Result<()> {
    let allowed = modes.iter().fold(0, |all, &(bit, _)| all | bit);
    if assert & !allowed == 0 {
        return Ok(());
    }
    mpi.win(win)?;
    let names: Vec<&str> = modes.iter().map(|&(_, name)| name).collect();
    Err(Error::new(
        MPI_ERR_ASSERT,
        format!(
            "assertion {assert:#x} holds bits other than those {call} takes ({})",
            names.join(", ")
        ),
    ))
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_fence(assert: c_int, win: Handle) -> c_int {
    call_held("MPI_Win_fence", Object::Win(win), |mpi| {
        check_assert(mpi, win, assert, ("MPI_Win_fence", FENCE_MODES))?;
        let w = mpi.win(win)?;
        if w.sync.passive() || w.sync.access.is_some() || w.sync.exposure.is_some() {
            return Err(sync_error("a fence inside a lock or post/start epoch"));
        }
        let comm = w.comm;
        // (Other threads' calls come in while the operations and the barrier wait.)
        complete_all(mpi, win)?;
        let s = mpi.build_barrier(comm)?;
        mpi.run_letting_in(s)?;
        mpi.win_mut(win)?.sync.fence = assert & MPI_MODE_NOSUCCEED == 0;
        Ok(())
    })
}

impl State {
    /// Whether member `r` may be locked now, else the error that says why not. (A
    /// fence without `MPI_MODE_NOSUCCEED` starts an epoch only if operations
    /// follow it (MPI 4.1, 12.5.1): a lock may follow it, which ends it.)
    fn may_lock(&self, r: usize) -> Result<()> {
        if self.locks.contains_key(&r) || self.lock_all.is_some() {
            return Err(sync_error(
                "the target is locked already, or a lock_all epoch is open",
            ));
        }
        self.outside_start()
    }

    /// Whether no access epoch of `MPI_Win_start` is open, in which no
    /// passive-target epoch may begin (MPI 4.1, 12.5).
    fn outside_start(&self) -> Result<()> {
        match self.access {
            Some(_) => Err(sync_error(
                "a lock inside an access epoch of MPI_Win_start (complete it first)",
            )),
            None => Ok(()),
        }
    }

    /// Whether `MPI_Win_lock_all` may be called now, else the error that says why
    /// not (after a fence, as [`State::may_lock`]).
    pub(super) fn may_lock_all(&self) -> Result<()> {
        if self.passive() {
            return Err(sync_error("a lock or lock_all epoch is open already"));
        }
        self.outside_start()
    }
}

// The lock calls let other threads' calls in while they wait for a lock word (its
// holder may wait for one of them), and while operations complete: the epoch is
// looked at again once the wait is over, as another thread may have opened or
// closed it meanwhile (which the standard makes erroneous: it is refused).
// `MPI_PROC_NULL` is a target they do nothing to (as MPICH has it).

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_lock(
    lock_type: c_int,
    rank: c_int,
    assert: c_int,
    win: Handle,
) -> c_int {
    call_held("MPI_Win_lock", Object::Win(win), |mpi| {
        check_assert(mpi, win, assert, ("MPI_Win_lock", NOCHECK))?;
        if mpi.to_proc_null(win, rank)? {
            return Ok(());
        }
        let w = mpi.win(win)?;
        let r = w.peer(rank)?;
        w.sync.may_lock(r)?;
        let held = match lock_type {
            _ if assert & MPI_MODE_NOCHECK != 0 => Held::NoCheck,
            MPI_LOCK_EXCLUSIVE => Held::Exclusive,
            MPI_LOCK_SHARED => Held::Shared,
            t => {
                return Err(Error::new(
                    MPI_ERR_LOCKTYPE,
                    format!("lock type {t} is neither MPI_LOCK_SHARED nor MPI_LOCK_EXCLUSIVE"),
                ))
            }
        };
        let exclusive = held == Held::Exclusive;
        if held != Held::NoCheck {
            acquire(mpi, win, r, LOCK_WORD, exclusive)?;
        }
        let sync = &mut mpi.win_mut(win)?.sync;
        if let Err(e) = sync.may_lock(r) {
            if held != Held::NoCheck {
                mpi.win_release(win, r, LOCK_WORD, exclusive)?;
            }
            return Err(e);
        }
        sync.locks.insert(r, held);
        sync.fence = false;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_unlock(rank: c_int, win: Handle) -> c_int {
    call_held("MPI_Win_unlock", Object::Win(win), |mpi| {
        if mpi.to_proc_null(win, rank)? {
            return Ok(());
        }
        let r = mpi.win(win)?.peer(rank)?;
        if !mpi.win(win)?.sync.locks.contains_key(&r) {
            return Err(sync_error("the target is not locked"));
        }
        let done = complete_toward(mpi, win, r);
        let Some(held) = mpi.win_mut(win)?.sync.locks.remove(&r) else {
            return Err(sync_error("another thread unlocked the target meanwhile"));
        };
        if held != Held::NoCheck {
            mpi.win_release(win, r, LOCK_WORD, held == Held::Exclusive)?;
        }
        done
    })
}

/// The flushes: `rank` one member, `None` every member (local completion is
/// remote completion here).
fn flush(name: &str, rank: Option<c_int>, win: Handle) -> c_int {
    call_held(name, Object::Win(win), |mpi| {
        let w = mpi.win(win)?;
        if rank == Some(MPI_PROC_NULL) {
            return Ok(());
        }
        if !w.sync.passive() {
            return Err(sync_error("a flush outside a passive-target (lock) epoch"));
        }
        match rank {
            Some(rank) => {
                let r = w.peer(rank)?;
                complete_toward(mpi, win, r)
            }
            None => complete_all(mpi, win),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_flush(rank: c_int, win: Handle) -> c_int {
    flush("MPI_Win_flush", Some(rank), win)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_flush_local(rank: c_int, win: Handle) -> c_int {
    flush("MPI_Win_flush_local", Some(rank), win)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_flush_all(win: Handle) -> c_int {
    flush("MPI_Win_flush_all", None, win)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_flush_local_all(win: Handle) -> c_int {
    flush("MPI_Win_flush_local_all", None, win)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_sync(win: Handle) -> c_int {
    call("MPI_Win_sync", Object::Win(win), |mpi| {
        mpi.win(win)?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    })
}

impl Win {
    /// Whether member `r` may be accessed now, else the error that says why not.
    pub fn check_access(&self, r: usize) -> Result<()> {
        if self.sync.may_access(r) {
            Ok(())
        } else {
            Err(sync_error("no access epoch to this target is open: call MPI_Win_fence, MPI_Win_lock(_all) or MPI_Win_start first"))
        }
    }
}
