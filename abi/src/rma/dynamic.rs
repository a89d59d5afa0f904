//! Dynamic windows (MPI 4.1, 12.2.4): `MPI_Win_create_dynamic`, `MPI_Win_attach` and
//! `MPI_Win_detach`. A dynamic window starts with no memory; each member attaches
//! regions of its own, and peers reach them by absolute address (`MPI_Get_address`,
//! displacement unit 1).
//!
//! Attaching exposes the region to the transports (and each run of regions attached
//! side by side, whole, so that one access may cross from one to the next), writes
//! down the card that reaches it for every member, and moves the member's attach
//! count, a word of its control block (detaching moves it too). An origin asks a
//! region's owner for its card the first time it reaches an address there (a served
//! request, answered at the owner's next call into the library, as shipped
//! accumulates are), and keeps it while the owner's count stays the same: before
//! each access it reads that word (a load where the control block is mapped here,
//! else a transport atomic) and forgets what it knew of that member when the count
//! moved. Open MPI's `osc/rdma` keeps a region table in each member's memory for the
//! same purpose.

use super::lock_word::{word_change, WordChange};
use super::shipped::{Kind, Ship};
use super::{bad_win, Win, COUNT_WORD};
use crate::datatype::Prim;
use crate::entry::call;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use rbtl::msg::{Exposed, Target};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A region attached to a dynamic window here, or a span of regions attached one
/// after another without a gap (exposed whole, so that one access may cross from
/// one to the next, as MPICH allows).
pub struct Region {
    pub base: usize,
    pub size: usize,
    /// Whether this is a span of regions rather than one the user attached.
    span: bool,
    /// Its registration with the transports (dropped at the detach).
    _exposed: Exposed,
    /// The card of it for each member, by job rank.
    cards: HashMap<u32, Vec<u8>>,
}

/// The regions attached to a dynamic window here, with the spans of adjacent ones:
/// the window's, and the server's that answers peers' questions about them.
pub type Attached = Rc<RefCell<Vec<Region>>>;

/// Whether `[addr, addr + len)` lies inside the region at `base` of `size` bytes.
fn holds(base: usize, size: usize, addr: usize, len: usize) -> bool {
    addr >= base && addr.checked_add(len).is_some_and(|end| end <= base + size)
}

/// The card of the region (or span) of `attached` that holds `[addr, addr + len)`,
/// for job rank `rank`, as the answer to a region request: its base, size, then the
/// card.
pub fn answer(
    attached: &Attached,
    rank: u32,
    addr: usize,
    len: usize,
) -> std::result::Result<Vec<u8>, String> {
    let regions = attached.borrow();
    let r = regions
        .iter()
        .find(|r| holds(r.base, r.size, addr, len))
        .ok_or_else(|| format!("no region attached here holds {len} bytes at {addr:#x}"))?;
    let card = r
        .cards
        .get(&rank)
        .ok_or_else(|| format!("rank {rank} is not a member of the window"))?;
    let mut out = (r.base as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&(r.size as u64).to_le_bytes());
    out.extend_from_slice(card);
    Ok(out)
}

/// Whether `[addr, addr + len)` lies inside a region (or span) of `attached`.
pub fn is_attached(attached: &Attached, addr: usize, len: usize) -> bool {
    attached
        .borrow()
        .iter()
        .any(|r| holds(r.base, r.size, addr, len))
}

/// What an origin knows of a member's regions.
#[derive(Default)]
pub struct Known {
    /// The member's attach count when these were learnt.
    count: u64,
    /// Its regions learnt: base, size, and the target that reaches each.
    regions: Vec<(usize, usize, Target)>,
}

impl Mpi {
    /// The region of member `r` of dynamic window `h` that holds `[addr, addr +
    /// len)`: the target that reaches it (its address is the region's base).
    pub fn region_of(&mut self, h: Handle, r: usize, addr: usize, len: usize) -> Result<Target> {
        let count = self.attach_count(h, r)?;
        let w = self.wins.get_mut(h).ok_or_else(|| bad_win(h))?;
        let known = &mut w.known[r];
        if known.count != count {
            known.regions.clear();
            known.count = count;
        }
        if let Some((.., t)) = known
            .regions
            .iter()
            .find(|(base, size, _)| holds(*base, *size, addr, len))
        {
            return Ok(t.clone());
        }
        let job = w.peers[r].job;
        let s = Ship {
            kind: Kind::Region,
            prim: Prim::Byte,
            op: 0,
            alone: false,
        };
        let answer = self.ask(h, r, &s, addr, len)?;
        let (base, rest) = answer.split_at_checked(8).ok_or_else(|| malformed(job))?;
        let (size, card) = rest.split_at_checked(8).ok_or_else(|| malformed(job))?;
        let base = u64::from_le_bytes(base.try_into().expect("8 bytes")) as usize;
        let size = u64::from_le_bytes(size.try_into().expect("8 bytes")) as usize;
        let t = self.msg.target(job, card)?;
        if !holds(base, size, addr, len) || t.addr() != base as u64 || t.len() != size {
            return Err(malformed(job));
        }
        let w = self.wins.get_mut(h).ok_or_else(|| bad_win(h))?;
        w.known[r].regions.push((base, size, t.clone()));
        Ok(t)
    }

    /// Member `r`'s attach count, read now.
    fn attach_count(&mut self, h: Handle, r: usize) -> Result<u64> {
        let Mpi { wins, msg, .. } = self;
        let w = wins.get(h).ok_or_else(|| bad_win(h))?;
        let member = (&w.peers[r].ctrl, w.peers[r].job, &w.waited);
        word_change(msg, member, COUNT_WORD, WordChange::Read)
    }

    /// Dynamic window `h`'s regions attached here and this process's control block;
    /// `MPI_ERR_RMA_FLAVOR` on another window, for call `name`.
    fn attached(&self, h: Handle, name: &str) -> Result<(Attached, *mut u8)> {
        let w = self.win(h)?;
        match &w.attached {
            Some(a) => Ok((a.clone(), w.control_ptr())),
            None => Err(Error::new(
                MPI_ERR_RMA_FLAVOR,
                format!("{name} takes a window made by MPI_Win_create_dynamic"),
            )),
        }
    }

    /// Attach `size` bytes at `base` to dynamic window `h`.
    ///
    /// # Safety
    ///
    /// The memory stays mapped until it is detached or the window freed.
    unsafe fn win_attach(&mut self, h: Handle, base: usize, size: usize) -> Result<()> {
        let (attached, control) = self.attached(h, "MPI_Win_attach")?;
        let members: Vec<u32> = self.win(h)?.peers.iter().map(|p| p.job).collect();
        let end = base.checked_add(size).ok_or_else(|| {
            Error::new(
                MPI_ERR_SIZE,
                format!("{size} bytes at {base:#x} pass the end of the address space"),
            )
        })?;
        if attached
            .borrow()
            .iter()
            .any(|r| !r.span && base < r.base + r.size && r.base < end)
        {
            return Err(Error::new(
                MPI_ERR_RMA_ATTACH,
                format!("{size} bytes at {base:#x} overlap a region attached already"),
            ));
        }
        // SAFETY: the caller's contract.
        let exposed = unsafe { self.msg.expose(base, size) }?;
        let mut cards = HashMap::with_capacity(members.len());
        for &j in &members {
            cards.insert(j, self.msg.card(&exposed, j)?);
        }
        attached.borrow_mut().push(Region {
            base,
            size,
            span: false,
            _exposed: exposed,
            cards,
        });
        if let Err(e) = self.respan(&attached, &members) {
            // Not attached after all: the spans as they were (whose memory is
            // registered already, the cause being this one's).
            let mut regions = attached.borrow_mut();
            if let Some(i) = regions
                .iter()
                .rposition(|r| !r.span && (r.base, r.size) == (base, size))
            {
                regions.remove(i);
            }
            drop(regions);
            let _ = self.respan(&attached, &members);
            return Err(e);
        }
        bump(control);
        Ok(())
    }

    /// Make the spans of `attached` those of its runs of adjacent regions: one for
    /// each run of two or more (`members` get cards of it), none elsewhere.
    fn respan(&mut self, attached: &Attached, members: &[u32]) -> Result<()> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        {
            let mut regions = attached.borrow_mut();
            let mut parts: Vec<(usize, usize)> = regions
                .iter()
                .filter(|r| !r.span && r.size > 0)
                .map(|r| (r.base, r.base + r.size))
                .collect();
            parts.sort_unstable();
            for (lo, hi) in parts {
                match runs.last_mut() {
                    Some(run) if run.1 == lo => run.1 = hi,
                    _ => runs.push((lo, hi)),
                }
            }
            // Each run of one region needs none; a span still a run stays.
            runs.retain(|&(lo, hi)| {
                !regions
                    .iter()
                    .any(|r| !r.span && (r.base, r.base + r.size) == (lo, hi))
            });
            regions.retain(|r| !r.span || runs.contains(&(r.base, r.base + r.size)));
            runs.retain(|&(lo, hi)| {
                !regions
                    .iter()
                    .any(|r| r.span && (r.base, r.base + r.size) == (lo, hi))
            });
        }
        for (lo, hi) in runs {
            // SAFETY: every byte of the run lies in a region attached, which the
            // user keeps mapped until detached; the detach drops the span first.
            let exposed = unsafe { self.msg.expose(lo, hi - lo) }?;
            let mut cards = HashMap::with_capacity(members.len());
            for &j in members {
                cards.insert(j, self.msg.card(&exposed, j)?);
            }
            attached.borrow_mut().push(Region {
                base: lo,
                size: hi - lo,
                span: true,
                _exposed: exposed,
                cards,
            });
        }
        Ok(())
    }

    /// Detach the region at `base` from dynamic window `h`.
    fn win_detach(&mut self, h: Handle, base: usize) -> Result<()> {
        let (attached, control) = self.attached(h, "MPI_Win_detach")?;
        let members: Vec<u32> = self.win(h)?.peers.iter().map(|p| p.job).collect();
        {
            let mut regions = attached.borrow_mut();
            let i = regions
                .iter()
                .position(|r| !r.span && r.base == base)
                .ok_or_else(|| {
                    Error::new(
                        MPI_ERR_RMA_ATTACH,
                        format!("no region is attached at {base:#x}"),
                    )
                })?;
            bump(control);
            regions.remove(i);
        }
        self.respan(&attached, &members)
    }
}

/// Move the attach count in control block `control` (this process's own).
fn bump(control: *mut u8) {
    // SAFETY: the count is an aligned word of the control block, which lives as
    // long as the window and is reached only atomically.
    unsafe { AtomicU64::from_ptr(control.add(COUNT_WORD).cast()) }.fetch_add(1, Ordering::AcqRel);
}

fn malformed(job: u32) -> Error {
    Error::new(
        MPI_ERR_INTERN,
        format!("rank {job} answered a question about its regions with a malformed card"),
    )
}

impl Win {
    /// Whether this is a dynamic window.
    pub fn is_dynamic(&self) -> bool {
        self.attached.is_some()
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_create_dynamic(
    info: Handle,
    comm: Handle,
    win: *mut Handle,
) -> c_int {
    crate::entry::call_held("MPI_Win_create_dynamic", Object::Comm(comm), |held| {
        crate::info::check(info)?;
        crate::error::non_null(win, MPI_ERR_ARG, "window")?;
        let h = super::win_create_dynamic(held, comm)?;
        // SAFETY: checked not null.
        unsafe { win.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_attach(win: Handle, base: *mut c_void, size: Aint) -> c_int {
    call("MPI_Win_attach", Object::Win(win), |mpi| {
        let size = usize::try_from(size)
            .map_err(|_| Error::new(MPI_ERR_SIZE, format!("region size {size} is negative")))?;
        if base.is_null() && size > 0 {
            return Err(Error::new(MPI_ERR_BUFFER, "the region's base is null"));
        }
        // SAFETY: the binding's contract: the memory stays until detached.
        unsafe { mpi.win_attach(win, base as usize, size) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_detach(win: Handle, base: *const c_void) -> c_int {
    call("MPI_Win_detach", Object::Win(win), |mpi| {
        mpi.win_detach(win, base as usize)
    })
}
