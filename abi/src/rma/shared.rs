//! Shared-memory windows (`MPI_Win_allocate_shared`) and `MPI_Win_shared_query`.
//!
//! The members' memory is one allocation from the shared heap of the window's first
//! member, contiguous across ranks as the standard has it by default: member i's
//! part starts where member i-1's ends, in every member's mapping of it. Every
//! member maps the allocation; each exposes its own part as in any window (for its
//! control block and the accumulates shipped to it) and reaches every part with
//! loads and stores. An allocation the heap cannot hold (or that no transport's heap
//! serves, as over `tcp` alone) is a segment of the window's own (`memfd_create`),
//! which the other members open through the first member's `/proc/<pid>/fd` (as
//! `sm` opens its peers' segments; Open MPI's `osc/sm` makes a segment per window).
//! Where the memory cannot be made or mapped by every member (a member on another
//! node), every member fails alike with `MPI_ERR_RMA_SHARED`.
//!
//! `MPI_Win_shared_query` answers for any window: a member's memory where this
//! process maps it (a window allocated on one node), else size 0 and no address.

use super::api::allocate_binding;
use super::{win_make, Memory};
use crate::coll::{allgather_here, run_here, Inside};
use crate::comm::create::dup_bare;
use crate::entry::call;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use rbtl::mpool::SharedRegion;
use rbtl::msg::{Exposed, Target};
use std::ptr::{null, null_mut};

/// Bytes of the first member's description of the allocation for each member.
const CARD: usize = 1024;
/// Bytes of it after the card: whether the allocation is a segment of its own, then
/// the first member's pid and the segment's descriptor there.
const OPENED: usize = 9;

/// `MPI_Win_allocate_shared` (collective over `comm`): the window, whose base is this
/// member's part of the memory. Its waits run in `inside`.
pub fn win_allocate_shared(
    inside: &mut impl Inside,
    size: usize,
    disp_unit: usize,
    comm: Handle,
) -> Result<Handle> {
    let wcomm = dup_bare(inside, comm)?;
    let made = shared_make(inside, size, disp_unit, wcomm);
    inside.state().win_made(made, wcomm)
}

fn shared_make(
    inside: &mut impl Inside,
    size: usize,
    disp_unit: usize,
    wcomm: Handle,
) -> Result<Handle> {
    let (all, starts, total) = shared_layout(inside, size, wcomm)?;
    let rank = inside.state().comm(wcomm)?.rank as usize;
    let (memory, whole) = shared_memory(inside, total, wcomm)?;
    let part = whole
        .slice(starts[rank], size)
        .expect("inside the allocation");
    let base = part.direct_range(0, 0).expect("a mapped target");
    let flavor = MPI_WIN_FLAVOR_SHARED;
    let h = win_make(inside, (memory, base, flavor), size, disp_unit, wcomm)?;
    // Every part with loads and stores, through this process's mapping.
    let w = inside.state().win_mut(h)?;
    for (i, p) in w.peers.iter_mut().enumerate() {
        p.mem = whole
            .slice(starts[i], all[i])
            .expect("inside the allocation");
    }
    Ok(h)
}

/// Every member's size, where each part starts, and their sum (collective).
fn shared_layout(
    inside: &mut impl Inside,
    size: usize,
    wcomm: Handle,
) -> Result<(Vec<usize>, Vec<usize>, usize)> {
    let mine = [size as u64];
    let all = allgather_here(inside, wcomm, &mine)?;
    let overflow = || Error::new(MPI_ERR_SIZE, "the members' sizes overflow");
    let all = all
        .into_iter()
        .map(|len| usize::try_from(len).map_err(|_| overflow()))
        .collect::<Result<Vec<usize>>>()?;
    let mut starts = Vec::with_capacity(all.len());
    let mut total = 0usize;
    for &len in &all {
        starts.push(total);
        total = total.checked_add(len).ok_or_else(overflow)?;
    }
    Ok((all, starts, total))
}

/// The members' `total` bytes (collective): the first member allocates them (from a
/// transport's shared heap; alone, any memory of its own will do) and describes
/// them to each member, which maps them. What this member holds of them (the first
/// member the allocation, others nothing), and the whole as mapped here;
/// `MPI_ERR_RMA_SHARED` on every member unless every member maps it.
fn shared_memory(
    inside: &mut impl Inside,
    total: usize,
    wcomm: Handle,
) -> Result<(Memory, Target)> {
    let mpi = inside.state();
    let c = mpi.comm(wcomm)?;
    let (n, rank) = (c.group.size() as usize, c.rank);
    let first = c.group.job_rank(0).expect("a member");
    // A segment of its own only where every member runs on the first one's node.
    let group = c.group.clone();
    let one_node = |mpi: &Mpi| {
        (0..n as u32).all(|i| {
            group
                .job_rank(i)
                .is_some_and(|j| mpi.msg.same_node(first, j))
        })
    };
    let memory = match (rank, n) {
        (0, 1) => Some(mpi.take_memory(total)?),
        (0, _) => match mpi.msg.alloc_shared(total.max(1))? {
            Some(r) => Some(Memory::Shared(r)),
            None if one_node(mpi) => SharedRegion::create_unnamed("win", total.max(1))
                .ok()
                .map(Memory::Segment),
            None => None,
        },
        _ => None,
    };
    // An empty description says the allocation could not be made or described.
    let mut cards = vec![0u8; if rank == 0 { n * CARD } else { 0 }];
    let exposed = match &memory {
        Some(m) => {
            let opened = match m {
                Memory::Segment(r) => r.fd().map(|fd| (std::process::id(), fd)),
                _ => None,
            };
            mpi.describe(m.ptr(), total.max(1), wcomm, (&mut cards, opened))
        }
        None => None,
    };
    let mut got = vec![0u8; CARD];
    // SAFETY: both buffers live until the collective, run here, ends.
    let s = unsafe {
        mpi.build_scatter(
            cards.as_ptr().cast(),
            (CARD as c_int, null(), null()),
            MPI_BYTE,
            (got.as_mut_ptr().cast(), CARD as c_int, MPI_BYTE),
            0,
            wcomm,
        )
    }?;
    run_here(inside, s)?;
    let mpi = inside.state();
    let (whole, mapped) = match mpi.shared_target(first, &got, total, rank == 0) {
        Some((t, mapped)) => (Some(t), mapped),
        None => (None, None),
    };
    let ok = i32::from(whole.is_some());
    let mut all_ok = 0i32;
    // SAFETY: both live until the collective, run here, ends.
    let s = unsafe {
        mpi.build_allreduce(
            (&ok as *const i32).cast(),
            (&mut all_ok as *mut i32).cast(),
            1,
            MPI_INT,
            MPI_MIN,
            wcomm,
        )
    }?;
    run_here(inside, s)?;
    // Mapped by every member (or given up): the description has served.
    drop(exposed);
    match (whole, all_ok) {
        (Some(whole), 1) => Ok((
            memory
                .or(mapped.map(Memory::Segment))
                .unwrap_or(Memory::User),
            whole,
        )),
        _ => {
            if let Some(Memory::Shared(r)) = memory {
                inside.state().msg.free_shared(r)?;
            }
            Err(Error::new(
                MPI_ERR_RMA_SHARED,
                "the window's memory cannot be shared by every member: they must all \
                 be on one node and able to open each other's memory (/proc/<pid>/fd, \
                 as for cross-memory attach)",
            ))
        }
    }
}

impl Mpi {
    /// Expose `len` bytes at `at` and write into `cards` each member's description of
    /// them (its length, u16, then the bytes; then 1, the pid and the descriptor that
    /// `opened` gives of a segment of their own, else 0): the exposure, kept until
    /// every member has mapped them; `None`, the cards left empty, where that cannot
    /// be done.
    fn describe(
        &mut self,
        at: *mut u8,
        len: usize,
        wcomm: Handle,
        (cards, opened): (&mut [u8], Option<(u32, i32)>),
    ) -> Option<Exposed> {
        // SAFETY: the memory stays allocated while the exposure lives (the caller
        // drops it before freeing the memory).
        let exposed = unsafe { self.msg.expose(at as usize, len) }.ok()?;
        let group = self.comm(wcomm).ok()?.group.clone();
        for (i, block) in cards.chunks_mut(CARD).enumerate() {
            let card = self.msg.card(&exposed, group.job_rank(i as u32)?).ok()?;
            if card.len() + 2 + OPENED > CARD {
                block.fill(0);
                return None;
            }
            block[..2].copy_from_slice(&(card.len() as u16).to_le_bytes());
            block[2..2 + card.len()].copy_from_slice(&card);
            let tail = &mut block[2 + card.len()..2 + card.len() + OPENED];
            if let Some((pid, fd)) = opened {
                tail[0] = 1;
                tail[1..5].copy_from_slice(&pid.to_le_bytes());
                tail[5..9].copy_from_slice(&fd.to_le_bytes());
            }
        }
        Some(exposed)
    }

    /// The first member's allocation of `total` bytes from its description `block`,
    /// mapped here (`owner`: this is the first member), with the mapping of its
    /// segment this process opened for it, if it is one; `None` where it is missing,
    /// malformed or not mapped.
    fn shared_target(
        &mut self,
        first: u32,
        block: &[u8],
        total: usize,
        owner: bool,
    ) -> Option<(Target, Option<SharedRegion>)> {
        let len = u16::from_le_bytes([block[0], block[1]]) as usize;
        let card = block.get(2..2 + len).filter(|c| !c.is_empty())?;
        let tail = block.get(2 + len..2 + len + OPENED)?;
        if tail[0] == 1 && !owner {
            let pid = u32::from_le_bytes(tail[1..5].try_into().expect("4 bytes"));
            let fd = i32::from_le_bytes(tail[5..9].try_into().expect("4 bytes"));
            let segment = SharedRegion::open_of_process(pid, fd)
                .ok()
                .filter(|s| s.len() >= total)?;
            // SAFETY: the segment is the memory the card describes (its first
            // member's mapping of it), all of it; the window keeps the mapping as
            // long as the target.
            let t = unsafe { self.msg.target_mapped(first, card, segment.as_ptr()) }.ok()?;
            return (t.len() >= total).then_some((t, Some(segment)));
        }
        let t = self.msg.target(first, card).ok()?;
        (t.is_direct() && t.len() >= total).then_some((t, None))
    }

    /// `MPI_Win_shared_query`: member `rank`'s size, displacement unit and address
    /// here (`MPI_PROC_NULL`: the first member with memory); size 0 and null where
    /// it has none (as MPICH gives it) or this process does not map it.
    fn shared_query(&self, win: Handle, rank: c_int) -> Result<(usize, usize, *mut u8)> {
        let w = self.win(win)?;
        let r = if rank == MPI_PROC_NULL {
            match w.peers.iter().position(|p| !p.mem.is_empty()) {
                Some(r) => r,
                None => return Ok((0, 0, null_mut())),
            }
        } else {
            w.peer(rank)?
        };
        let p = &w.peers[r];
        Ok(match p.mem.direct_range(0, 0) {
            Some(at) if !p.mem.is_empty() => (p.mem.len(), p.disp_unit, at),
            _ => (0, p.disp_unit, null_mut()),
        })
    }
}

allocate_binding!(PMPI_Win_allocate_shared, |held, size, unit, comm| {
    win_allocate_shared(held, size, unit, comm)
});

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_shared_query(
    win: Handle,
    rank: c_int,
    size: *mut Aint,
    disp_unit: *mut c_int,
    baseptr: *mut c_void,
) -> c_int {
    call("MPI_Win_shared_query", Object::Win(win), |mpi| {
        if size.is_null() || disp_unit.is_null() || baseptr.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "an output argument is null"));
        }
        let (len, unit, at) = mpi.shared_query(win, rank)?;
        // SAFETY: checked not null; the binding's contract: writable, `baseptr` a
        // pointer's place.
        unsafe {
            size.write(len as Aint);
            disp_unit.write(unit as c_int);
            baseptr.cast::<*mut u8>().write(at);
        }
        Ok(())
    })
}
