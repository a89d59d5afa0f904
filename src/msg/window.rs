//! One-sided windows: memory each rank exposes, reached by put and get.
//!
//! Where a transport can share memory ([`Module::alloc_shared`](rbtl_btl::Module), the
//! `sm` segment's heap), the window lives there and peers on the node map it: a put is
//! a store and a get a load, checked once against the registration when the window is
//! made (Open MPI: `osc/sm`). Other peers are reached through the transports' put and
//! get (Open MPI: `osc/rdma` over the BTLs).

use super::liveness::{IdleWait, Needs};
use super::{Comm, Error, Result};
use rbtl_btl::{Access, MemHandle, Remote, Transfer};
use rbtl_mpool::Region;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Operations at or below this size go through a registered staging buffer; larger
/// ones register the caller's buffer (a registration-cache hit when reused).
const STAGING: usize = 64 << 10;

/// Where a window's memory lives.
enum Memory {
    Private(Region),
    /// From the heap of module `module` of the communicator.
    Shared {
        mem: rbtl_btl::SharedMem,
        module: usize,
    },
}

impl Memory {
    fn ptr(&self) -> *mut u8 {
        match self {
            Memory::Private(r) => r.as_ptr(),
            Memory::Shared { mem, .. } => mem.ptr,
        }
    }

    fn len(&self) -> usize {
        match self {
            Memory::Private(r) => r.len(),
            Memory::Shared { mem, .. } => mem.len,
        }
    }
}

/// Memory exposed to every rank, and what is needed to reach theirs.
pub struct Window {
    /// The communicator whose modules reach the peers (direct mappings live in them).
    comm: u64,
    /// This rank in it.
    rank: u32,
    mem: Memory,
    staging: Region,
    /// Per module: registrations of `mem` and `staging`.
    handles: Vec<(MemHandle, MemHandle)>,
    /// Per rank: address, length and handle of its window (from the module that routes
    /// to it), and a direct mapping of it where there is one.
    peers: Vec<super::onesided::Target>,
    /// What the completion callbacks of its puts and gets report.
    signal: Arc<Signal>,
}

/// Completions of a window's operations, counted, and the first failure among them.
#[derive(Default)]
struct Signal {
    done: AtomicUsize,
    failed: AtomicBool,
    error: Mutex<Option<rbtl_btl::Error>>,
}

impl Window {
    /// Allocate `len` bytes on every rank (a collective call) and exchange handles.
    pub fn allocate(comm: &mut Comm, len: usize) -> Result<Window> {
        let len = len.max(1);
        let mut shared = None;
        for (module, m) in comm.modules.iter_mut().enumerate() {
            if let Some(mem) = m.alloc_shared(len)? {
                shared = Some(Memory::Shared { mem, module });
                break;
            }
        }
        let mem = match shared {
            Some(s) => s,
            None => Memory::Private(Region::anonymous(len).map_err(rbtl_btl::Error::from)?),
        };
        let staging = Region::anonymous(STAGING).map_err(rbtl_btl::Error::from)?;
        let mut handles = Vec::new();
        for m in comm.modules.iter_mut() {
            // Every access the transport grants (atomic access only where it has
            // atomics).
            let all = m.attributes().registrable(Access::all());
            // SAFETY: both regions live in the window, whose Drop releases the handles
            // before the regions are unmapped.
            let h = unsafe { m.register_mem(None, mem.ptr() as usize, mem.len(), all) }?;
            // SAFETY: as above.
            let s = unsafe { m.register_mem(None, staging.as_ptr() as usize, STAGING, all) }?;
            handles.push((h, s));
        }
        // Exchange the card (address, length, handle of the module that routes the
        // pair) of each pair; each peer's window mapped where it lies in shared memory.
        let mut cards = Vec::with_capacity(comm.size as usize);
        for r in 0..comm.size {
            let (mi, _) = comm.route(r)?;
            let (at, len) = (mem.ptr() as u64, mem.len() as u64);
            cards.push(super::onesided::card_of(at, len, handles[mi].0.remote()));
        }
        let got = comm.alltoall(&cards)?;
        let mut peers = Vec::with_capacity(comm.size as usize);
        for (r, card) in got.into_iter().enumerate() {
            peers.push(comm.target(r as u32, &card)?);
        }
        Ok(Window {
            comm: comm.id(),
            rank: comm.rank,
            mem,
            staging,
            handles,
            peers,
            signal: Arc::default(),
        })
    }

    /// End the window on every rank (a collective call, as `MPI_Win_free`). Once all
    /// ranks have called it nobody reaches this rank's memory any more, and memory from
    /// a transport's shared heap goes back to it for later windows. A window dropped
    /// without `free` keeps that memory until the transport ends: peers may still be
    /// using it. (Likewise when `allocate` fails after taking it.)
    pub fn free(mut self, comm: &mut Comm) -> Result<()> {
        if comm.id() != self.comm {
            return Err(Error::WrongComm);
        }
        comm.barrier()?;
        // Registrations go before the memory they describe.
        self.handles.clear();
        if let Memory::Shared { mem, module } = self.mem {
            comm.modules[module].free_shared(mem)?;
        }
        Ok(())
    }

    /// This rank's window memory.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.ptr()
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }

    /// Whether `target`'s window is reached with plain loads and stores.
    pub fn is_direct(&self, target: u32) -> bool {
        self.peers
            .get(target as usize)
            .is_some_and(|p| p.direct.is_some())
    }

    /// Copy `out.len()` bytes of this rank's window at `offset` into `out` (peers may
    /// write it at any time; read after a synchronisation such as a barrier).
    /// [`Error::OutOfWindow`] when the range does not lie inside the window.
    pub fn read_local(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_inside(self.rank, offset, out.len(), self.mem.len())?;
        // SAFETY: `[offset, offset + out.len())` lies inside our mapping (checked just
        // now, without overflow); raw copy, as peers write it behind our back.
        unsafe { rbtl_btl::copy_bytes(self.mem.ptr().add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Write `data` into `target`'s window at `offset`; returns once it is visible there.
    #[inline]
    pub fn put(&mut self, comm: &mut Comm, target: u32, offset: usize, data: &[u8]) -> Result<()> {
        self.rdma(
            comm,
            target,
            offset,
            data.as_ptr() as *mut u8,
            data.len(),
            true,
        )
    }

    /// Read `out.len()` bytes of `target`'s window at `offset`.
    #[inline]
    pub fn get(
        &mut self,
        comm: &mut Comm,
        target: u32,
        offset: usize,
        out: &mut [u8],
    ) -> Result<()> {
        self.rdma(comm, target, offset, out.as_mut_ptr(), out.len(), false)
    }

    /// Every put and get has completed (they complete before returning, so this only
    /// drives progress; kept for the MPI-like shape `put ... flush`).
    pub fn flush(&mut self, comm: &mut Comm) -> Result<()> {
        comm.progress();
        Ok(())
    }

    #[inline(always)]
    fn rdma(
        &mut self,
        comm: &mut Comm,
        target: u32,
        offset: usize,
        buf: *mut u8,
        len: usize,
        put: bool,
    ) -> Result<()> {
        if comm.id() != self.comm {
            return Err(Error::WrongComm);
        }
        let (mi, ep) = comm.route(target)?;
        let peer = &self.peers[target as usize];
        check_inside(target, offset, len, peer.len)?;
        // (No overflow: `allocate` checked that the window's end, `addr + len`, does
        // not overflow, and `offset` is at most its length.)
        let remote = peer.addr + offset as u64;
        if let Some(base) = peer.direct {
            // SAFETY: the range lies inside the target's window (checked above, without
            // overflow), which `map_remote` mapped here for the window's life; the
            // caller's buffer holds `len` bytes.
            unsafe { super::onesided::copy_mapped(base.add(offset), buf, len, put) };
            return Ok(());
        }
        let rh = &peer.handle;
        let staged = len <= STAGING;
        let own;
        let (local, handle) = if staged {
            if put {
                // SAFETY: `buf` is the caller's slice of `len` bytes; staging holds STAGING.
                unsafe { rbtl_btl::copy_bytes(buf, self.staging.as_ptr(), len) };
            }
            (self.staging.as_ptr() as usize, Some(&self.handles[mi].1))
        } else {
            let m = comm.modules[mi].as_mut();
            // SAFETY: the caller's buffer is borrowed for this whole call, which waits
            // for completion before dropping the handle (if any).
            own = unsafe {
                super::pieces::register_local(
                    m,
                    ep,
                    (buf as usize, len),
                    Access::LOCAL_READ | Access::LOCAL_WRITE,
                )
            }?;
            (buf as usize, own.as_ref())
        };
        let before = self.signal.done.load(Ordering::Acquire);
        let signal = self.signal.clone();
        let cb: rbtl_btl::RdmaCallback = Box::new(move |_, c| {
            if let Err(e) = c.status {
                *signal.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                signal.failed.store(true, Ordering::Release);
            }
            signal.done.fetch_add(1, Ordering::Release);
        });
        let m = comm.modules[mi].as_mut();
        // SAFETY: without a handle, the caller's buffer (as above).
        let local_side = unsafe { super::pieces::local_side(local, handle) };
        let whole = Transfer::new(ep, local_side, Remote::new(remote, rh), len);
        // In pieces within the transport's limit, completing as one.
        super::pieces::transfer_in_pieces(m, &whole, put, cb)?;
        // The transport completes the operation, with an error if the target fails or
        // is given up for its silence (then the timeout is what the caller sees).
        let mut idle = IdleWait::new();
        let mut timed_out = None;
        while self.signal.done.load(Ordering::Acquire) == before {
            if comm.progress() > 0 {
                idle.busy();
            } else if idle.idle() && timed_out.is_none() {
                timed_out = comm.look_for(Needs::Rank(target), &mut idle);
            }
        }
        if self.signal.failed.swap(false, Ordering::Acquire) {
            let error = self
                .signal
                .error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(e) = timed_out {
                return Err(e);
            }
            if let Some(e) = error {
                return Err(e.into());
            }
        }
        if let Some(e) = timed_out {
            return Err(e);
        }
        if staged && !put {
            // SAFETY: the get landed in staging; `buf` is the caller's `len` bytes.
            unsafe { rbtl_btl::copy_bytes(self.staging.as_ptr(), buf, len) };
        }
        Ok(())
    }
}

/// [`Error::OutOfWindow`] unless `[offset, offset + len)` lies inside a window of
/// `window` bytes (of rank `rank`); checked without overflow.
fn check_inside(rank: u32, offset: usize, len: usize, window: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= window => Ok(()),
        _ => Err(Error::OutOfWindow {
            rank,
            offset,
            len,
            window,
        }),
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // Registrations go before the memory they describe.
        self.handles.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::Window;
    use crate::msg::{Comm, Error};

    #[test]
    fn accesses_past_the_window_or_the_address_space_are_refused() {
        const LEN: usize = 4096;
        let mut comm = Comm::init(&[("btl", "self")]).unwrap();
        let mut win = Window::allocate(&mut comm, LEN).unwrap();
        let mut out = [0u8; 16];
        // Offsets whose sum with the length wraps around (to 0, to 15), lands just past
        // the window, or starts past it.
        let offsets = [
            0usize.wrapping_sub(16),
            usize::MAX,
            usize::MAX - 15,
            usize::MAX / 2,
            LEN - 15,
            LEN + 1,
        ];
        for offset in offsets {
            let outside = |r: Result<(), Error>| matches!(r, Err(Error::OutOfWindow { rank: 0, offset: o, len: 16, window: LEN }) if o == offset);
            assert!(
                outside(win.read_local(offset, &mut out)),
                "read at {offset:#x}"
            );
            assert!(
                outside(win.put(&mut comm, 0, offset, &out)),
                "put at {offset:#x}"
            );
            assert!(
                outside(win.get(&mut comm, 0, offset, &mut out)),
                "get at {offset:#x}"
            );
        }
        // The last bytes of the window are inside.
        win.put(&mut comm, 0, LEN - 16, &[7; 16]).unwrap();
        win.read_local(LEN - 16, &mut out).unwrap();
        assert_eq!(out, [7; 16]);
        win.get(&mut comm, 0, LEN - 16, &mut out).unwrap();
        assert_eq!(out, [7; 16]);
        win.free(&mut comm).unwrap();
    }
}
