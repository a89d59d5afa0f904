//! One-sided communication: windows (`MPI_Win_create`, `MPI_Win_allocate`), their
//! operations ([`ops`]) and synchronization ([`sync`], the lock words in [`lock_word`]).
//!
//! A window's memory is exposed to every member through the message layer's
//! one-sided blocks (`rbtl::msg::{Exposed, Target}`): memory that `MPI_Win_allocate`
//! takes from a transport's shared heap is mapped by the members on the node (a put
//! is a store, an atomic a processor atomic, as Open MPI's `osc/sm`); other memory
//! and other members are reached through the transports' put, get and atomics (as
//! `osc/rdma`). Beside it each member exposes a control block of two words: the
//! passive-target lock (readers counted, a writer's bit) and the mutex of the
//! accumulates that no single atomic performs.
//!
//! A window has a communicator of its own (a duplicate of the one it was made on),
//! for its fences, post/start/complete/wait tokens, and the exchange of every
//! member's memory at creation.

pub mod api;
pub mod atomics;
pub mod crossing;
pub mod direct;
pub mod dynamic;
pub mod element_atomics;
pub mod lock_all;
pub mod lock_word;
pub mod ops;
pub mod pscw;
pub mod requests;
pub mod shared;
pub mod shipped;
pub mod sync;

use crate::coll::{run_here, Inside};
use crate::comm::create::dup_bare;
use crate::comm::Group;
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::state::Mpi;
use rbtl::msg::{Exposed, Pending, SharedRegion, Target};
use std::sync::Arc;

/// Bytes of a member's control block.
const CONTROL: usize = 64;
/// Offsets of its words: the passive-target lock, the accumulate mutex, a dynamic
/// window's attach count.
const LOCK_WORD: usize = 0;
const ACC_WORD: usize = 8;
const COUNT_WORD: usize = 16;

/// Where a window's memory lives.
enum Memory {
    /// The caller's (`MPI_Win_create`).
    User,
    /// A transport's shared heap.
    Shared(SharedRegion),
    /// This process's own pages.
    Private(rbtl::mpool::Region),
    /// A segment of a shared window's own, beyond the transport's heap: made by the
    /// first member, mapped by every member ([`shared`]).
    Segment(rbtl::mpool::SharedRegion),
}

/// A member's memory and control block, as this process reaches them.
pub struct Peer {
    pub mem: Target,
    pub ctrl: Target,
    pub disp_unit: usize,
    /// Its job rank.
    pub job: u32,
}

/// The passive-target lock this process holds on a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// `MPI_LOCK_EXCLUSIVE` (else `MPI_LOCK_SHARED`), as the caller asked, whether
    /// taken or asserted.
    pub exclusive: bool,
    /// Whether the member's lock word was taken: not under `MPI_MODE_NOCHECK`.
    pub taken: bool,
}

/// A window.
pub struct Win {
    /// The window's own communicator.
    pub comm: Handle,
    pub group: Arc<Group>,
    pub rank: u32,
    pub base: *mut u8,
    pub size: usize,
    pub disp_unit: usize,
    pub flavor: c_int,
    memory: Memory,
    control: Memory,
    /// Registrations of the memory and the control block (dropped before them).
    exposed: Option<(Exposed, Exposed)>,
    /// Every member, by rank in the window's group.
    pub peers: Vec<Peer>,
    /// Operations under way to each member.
    pub pending: Vec<Pending>,
    /// Operations each waited for before the call that starts it returns: lock-word
    /// changes and accumulates.
    pub waited: Pending,
    pub sync: sync::State,
    /// Work to finish when a member's operations complete: gets through a staging
    /// buffer to unpack, staged origin data to release.
    pub staged: Vec<ops::Staged>,
    pub name: String,
    pub errhandler: Handle,
    /// Values of the predefined attributes (their addresses are handed out).
    attr_values: Box<(Aint, c_int, c_int, c_int)>,
    /// A dynamic window's regions attached here.
    attached: Option<dynamic::Attached>,
    /// A dynamic window's regions of each member, as far as this process knows them.
    known: Vec<dynamic::Known>,
}

impl Win {
    /// This process's control block.
    fn control_ptr(&self) -> *mut u8 {
        self.control.ptr()
    }

    /// The member `rank` of the window's group.
    pub fn peer(&self, rank: c_int) -> Result<usize> {
        usize::try_from(rank)
            .ok()
            .filter(|r| *r < self.peers.len())
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_RANK,
                    format!(
                        "rank {rank} is not in the window's group of {}",
                        self.peers.len()
                    ),
                )
            })
    }
}

impl Mpi {
    /// The window `h`.
    pub fn win(&self, h: Handle) -> Result<&Win> {
        self.wins.get(h).ok_or_else(|| bad_win(h))
    }

    /// The window `h`, writable.
    pub fn win_mut(&mut self, h: Handle) -> Result<&mut Win> {
        self.wins.get_mut(h).ok_or_else(|| bad_win(h))
    }

    /// A window made on `wcomm`, or, having failed, `wcomm` freed.
    fn win_made(&mut self, made: Result<Handle>, wcomm: Handle) -> Result<Handle> {
        if made.is_err() {
            if let Ok(c) = self.comm(wcomm) {
                self.exposures.borrow_mut().remove(&c.ctx);
            }
            let _ = self.comm_free(wcomm);
        }
        made
    }

    /// `len` bytes for a window: from a transport's shared heap where one has room,
    /// else pages of this process.
    fn take_memory(&mut self, len: usize) -> Result<Memory> {
        if let Some(r) = self.msg.alloc_shared(len.max(1))? {
            return Ok(Memory::Shared(r));
        }
        let r = rbtl::mpool::Region::anonymous(len.max(1)).map_err(|e| {
            Error::new(MPI_ERR_NO_MEM, format!("window memory of {len} bytes: {e}"))
        })?;
        Ok(Memory::Private(r))
    }
}

/// Make a window over `comm` (collective): `base`/`size` the caller's memory
/// (`None`: allocate `size` bytes); its handle. Its waits run in `inside` (from a
/// binding, other threads' calls come in meanwhile).
pub fn win_create(
    inside: &mut impl Inside,
    base: Option<*mut u8>,
    size: usize,
    disp_unit: usize,
    comm: Handle,
) -> Result<Handle> {
    let wcomm = dup_bare(inside, comm)?;
    let made = match base {
        Some(b) => win_make(
            inside,
            (Memory::User, b, MPI_WIN_FLAVOR_CREATE),
            size,
            disp_unit,
            wcomm,
        ),
        None => match inside.state().take_memory(size) {
            Ok(m) => {
                let p = m.ptr();
                win_make(
                    inside,
                    (m, p, MPI_WIN_FLAVOR_ALLOCATE),
                    size,
                    disp_unit,
                    wcomm,
                )
            }
            Err(e) => Err(e),
        },
    };
    inside.state().win_made(made, wcomm)
}

/// Make a dynamic window over `comm` (collective), with no memory yet.
pub fn win_create_dynamic(inside: &mut impl Inside, comm: Handle) -> Result<Handle> {
    let wcomm = dup_bare(inside, comm)?;
    let made = win_make(
        inside,
        (Memory::User, std::ptr::null_mut(), MPI_WIN_FLAVOR_DYNAMIC),
        0,
        1,
        wcomm,
    );
    inside.state().win_made(made, wcomm)
}

/// Make a window of `size` bytes at `base` (held as `memory`, of `flavor`) on
/// its own communicator `wcomm` (collective).
fn win_make(
    inside: &mut impl Inside,
    (memory, base, flavor): (Memory, *mut u8, c_int),
    size: usize,
    disp_unit: usize,
    wcomm: Handle,
) -> Result<Handle> {
    let mpi = inside.state();
    let c = mpi.comm(wcomm)?;
    let (group, rank) = (c.group.clone(), c.rank);
    let control = mpi.take_memory(CONTROL)?;
    let control_ptr = control.ptr();
    // SAFETY: the control block is CONTROL bytes of ours; nobody reaches it yet.
    unsafe { std::ptr::write_bytes(control_ptr, 0, CONTROL) };
    let attached = (flavor == MPI_WIN_FLAVOR_DYNAMIC).then(dynamic::Attached::default);
    // Before any member learns of the window: accumulates shipped here find it.
    let ctx = mpi.comm(wcomm)?.ctx;
    shipped::expose(
        &mpi.exposures,
        ctx,
        (base, size),
        control_ptr,
        attached.clone(),
    );
    // A dynamic window has no memory of its own: an empty view of the control
    // block stands for it.
    let mem_at = if attached.is_some() {
        control_ptr
    } else {
        base
    };
    // SAFETY: both live in the window, whose Drop drops the registrations first.
    let exposed = unsafe {
        (
            mpi.msg.expose(mem_at as usize, size)?,
            mpi.msg.expose(control_ptr as usize, CONTROL)?,
        )
    };
    // Every member's cards for every other: (memory, control, displacement unit).
    let n = group.size() as usize;
    let mut mine = vec![0u8; n * CARD];
    for (i, block) in mine.chunks_mut(CARD).enumerate() {
        let j = group.job_rank(i as u32).expect("a member");
        let card = encode(&[
            &mpi.msg.card(&exposed.0, j)?,
            &mpi.msg.card(&exposed.1, j)?,
            &(disp_unit as u64).to_le_bytes(),
        ]);
        block[..card.len()].copy_from_slice(&card);
    }
    let mut theirs = vec![0u8; n * CARD];
    let null = std::ptr::null();
    // SAFETY: both buffers live until the collective, run here, ends.
    let s = unsafe {
        mpi.build_alltoall(
            (
                mine.as_ptr().cast(),
                (CARD as c_int, null, null),
                &[MPI_BYTE],
            ),
            (
                theirs.as_mut_ptr().cast(),
                (CARD as c_int, null, null),
                &[MPI_BYTE],
            ),
            wcomm,
            false,
        )
    }?;
    run_here(inside, s)?;
    let mpi = inside.state();
    let mut peers = Vec::with_capacity(n);
    for (i, block) in theirs.chunks(CARD).enumerate() {
        let j = group.job_rank(i as u32).expect("a member");
        let parts = decode(block).ok_or_else(|| {
            Error::new(
                MPI_ERR_OTHER,
                format!("rank {i}'s window description is malformed"),
            )
        })?;
        let [mem, ctrl, unit] = parts[..] else {
            return Err(Error::new(
                MPI_ERR_OTHER,
                format!("rank {i}'s window description has {} parts", parts.len()),
            ));
        };
        peers.push(Peer {
            mem: mpi.msg.target(j, mem)?,
            ctrl: mpi.msg.target(j, ctrl)?,
            disp_unit: u64::from_le_bytes(
                unit.try_into()
                    .map_err(|_| Error::new(MPI_ERR_OTHER, "a malformed displacement unit"))?,
            ) as usize,
            job: j,
        });
    }
    let win = Win {
        comm: wcomm,
        group,
        rank,
        base,
        size,
        disp_unit,
        flavor,
        memory,
        control,
        exposed: Some(exposed),
        pending: vec![Pending::default(); n],
        waited: Pending::default(),
        peers,
        sync: sync::State::default(),
        staged: Vec::new(),
        name: String::new(),
        errhandler: MPI_ERRORS_ARE_FATAL,
        attr_values: Box::new((size as Aint, disp_unit as c_int, flavor, MPI_WIN_UNIFIED)),
        attached,
        known: (0..n).map(|_| dynamic::Known::default()).collect(),
    };
    mpi.wins.insert(win)
}

/// `MPI_Win_free` (collective): every operation completes, every member is past
/// its last access (a barrier), then the memory goes.
pub fn win_free(inside: &mut impl Inside, h: Handle) -> Result<()> {
    sync::complete_all(inside, h)?;
    let mpi = inside.state();
    let comm = mpi.win(h)?.comm;
    let s = mpi.build_barrier(comm)?;
    run_here(inside, s)?;
    let mpi = inside.state();
    let mut w = mpi.wins.remove(h).ok_or_else(|| bad_win(h))?;
    if let Ok(c) = mpi.comm(comm) {
        mpi.exposures.borrow_mut().remove(&c.ctx);
    }
    w.exposed = None;
    for m in [
        std::mem::replace(&mut w.memory, Memory::User),
        std::mem::replace(&mut w.control, Memory::User),
    ] {
        if let Memory::Shared(r) = m {
            mpi.msg.free_shared(r)?;
        }
    }
    mpi.comm_free(comm)
}

impl Memory {
    fn ptr(&self) -> *mut u8 {
        match self {
            Memory::User => std::ptr::null_mut(),
            Memory::Shared(r) => r.ptr(),
            Memory::Private(r) => r.as_ptr(),
            Memory::Segment(r) => r.as_ptr(),
        }
    }
}

impl Drop for Win {
    fn drop(&mut self) {
        // Registrations go before the memory they describe; memory of a transport's
        // heap not given back stays with the transport (peers may still map it).
        self.exposed = None;
    }
}

/// Bytes of one member's description for another.
const CARD: usize = 1024;

/// Parts, each preceded by its length (u16).
fn encode(parts: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in parts {
        v.extend_from_slice(&(p.len() as u16).to_le_bytes());
        v.extend_from_slice(p);
    }
    v
}

/// The parts of [`encode`]; `None` if malformed. (A zero length ends the list.)
fn decode(mut b: &[u8]) -> Option<Vec<&[u8]>> {
    let mut parts = Vec::new();
    while b.len() >= 2 {
        let n = u16::from_le_bytes([b[0], b[1]]) as usize;
        if n == 0 {
            break;
        }
        let p = b.get(2..2 + n)?;
        parts.push(p);
        b = &b[2 + n..];
    }
    Some(parts)
}

#[cold]
pub(super) fn bad_win(h: Handle) -> Error {
    let null = (MPI_WIN_NULL, "MPI_WIN_NULL");
    crate::error::bad_handle(h, null, MPI_ERR_WIN, "a window")
}

/// The error handler of window `w`; an error on a handle that is no window goes to
/// the world's (as one on a handle that is no communicator).
pub fn errhandler_of(mpi: &Mpi, w: Handle) -> Handle {
    mpi.win(w).map_or(mpi.world.errhandler, |w| w.errhandler)
}

#[cfg(test)]
mod tests {
    use super::{decode, encode};

    #[test]
    fn cards_round_trip() {
        let e = encode(&[b"abc", b"", b"de"]);
        assert_eq!(decode(&e).unwrap(), vec![&b"abc"[..]]);
        let e = encode(&[b"abc", b"de"]);
        let mut block = e.clone();
        block.resize(64, 0);
        assert_eq!(decode(&block).unwrap(), vec![&b"abc"[..], &b"de"[..]]);
        assert!(decode(&[9, 0, 1]).is_none(), "a part longer than the block");
    }
}
