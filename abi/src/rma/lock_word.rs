//! Passive-target locks and the accumulate mutex: words in each member's control
//! block changed by atomics, the processor's where the block is mapped here, else
//! the transport's. Readers add one, a writer sets the top bit when the word is zero
//! (as Open MPI's `osc/rdma`). A writer that finds the lock taken names itself in the
//! word as the next writer, where none is named yet: from then on no other writer or
//! reader takes the lock before it. Without that, a process that unlocks and locks
//! again in a loop could keep a lock from another for ever (where the word's owner
//! serves the other's atomics only in its own calls, as over `tcp`, each of the
//! other's tries may arrive while the lock is held again; MPICH's `linked_list` waits
//! so for a peer's put). The accumulate mutex, held for one operation at a time,
//! names no one.

use super::{bad_win, ACC_WORD, LOCK_WORD};
use crate::coll::{Inside, KeepOut};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::state::Mpi;
use rbtl::btl::AtomicOp;
use rbtl::msg::{Atomic, Comm, IdleWait, Pending, Target};
use std::sync::atomic::{AtomicU64, Ordering};

/// The writer's bit of a lock word.
pub(super) const EXCLUSIVE: u64 = 1 << 63;
/// The bits of a lock word (below [`EXCLUSIVE`]) that name the writer taking it
/// next: its rank in the window plus one; 0, none. Readers count below them.
pub(super) const NEXT_WRITER: u64 = 0x7fff << NEXT_WRITER_SHIFT;
const NEXT_WRITER_SHIFT: u32 = 48;

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

/// The name of window rank `rank` as the next writer of the word at `offset`: `None`
/// for the accumulate mutex, and for a rank beyond [`NEXT_WRITER`]'s bits.
fn writer_name(offset: usize, rank: u32) -> Option<u64> {
    let n = u64::from(rank) + 1;
    (offset == LOCK_WORD && n < NEXT_WRITER >> NEXT_WRITER_SHIFT).then_some(n << NEXT_WRITER_SHIFT)
}

/// Take a lock word with `apply`, `exclusive`ly or shared: whether the lock was
/// got. A writer sets [`EXCLUSIVE`] when the word is zero, or holds only its own
/// `name`; failing, it names itself the next writer where no one is named (`named`
/// keeps that from one try to the next). Readers add one; a reader that finds a
/// writer, holding or named, takes its one back.
fn take_word(
    mut apply: impl FnMut(WordChange) -> Result<u64>,
    exclusive: bool,
    name: Option<u64>,
    named: &mut bool,
) -> Result<bool> {
    if exclusive {
        let mine = name.filter(|_| *named).unwrap_or(0);
        let old = apply(WordChange::Swap {
            compare: mine,
            value: EXCLUSIVE,
        })?;
        if old == mine {
            *named = false;
            return Ok(true);
        }
        if let Some(name) = name.filter(|_| !*named && old & NEXT_WRITER == 0) {
            let value = old | name;
            *named = apply(WordChange::Swap {
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
    let mut named = false;
    if inside
        .state()
        .take_lock_word(h, r, offset, exclusive, &mut named)?
    {
        return Ok(());
    }
    let waited = wait_for_word(inside, h, r, offset, exclusive, &mut named);
    if waited.is_err() && named {
        // Given up: the word names this process no longer.
        let _ = inside.state().win_unname(h, r, offset);
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
    named: &mut bool,
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
            .take_lock_word(h, r, offset, exclusive, named)?
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
        named: &mut bool,
    ) -> Result<bool> {
        let Mpi { wins, msg, .. } = self;
        let w = wins.get(h).ok_or_else(|| bad_win(h))?;
        let name = writer_name(offset, w.rank);
        let member = (&w.peers[r].ctrl, w.peers[r].job, &w.waited);
        // The word looked for once: mapped here, the processor's atomics at once.
        match Comm::word_here(member.0, offset)? {
            Some(word) => take_word(|c| Ok(change_here(word, c)), exclusive, name, named),
            None => take_word(
                |c| change_there(msg, member, offset, c),
                exclusive,
                name,
                named,
            ),
        }
    }

    /// Take this process's name as the next writer out of the lock word at `offset`
    /// of member `r`'s control block (where it put it), waited for.
    fn win_unname(&mut self, h: Handle, r: usize, offset: usize) -> Result<()> {
        let Mpi { wins, msg, .. } = self;
        let w = wins.get(h).ok_or_else(|| bad_win(h))?;
        let Some(name) = writer_name(offset, w.rank) else {
            return Ok(());
        };
        let member = (&w.peers[r].ctrl, w.peers[r].job, &w.waited);
        word_change(msg, member, offset, WordChange::Add(name.wrapping_neg()))?;
        Ok(())
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
