//! One-sided windows: memory each rank exposes, reached by put and get through the
//! transports' RDMA (Open MPI: `osc/rdma` over the BTLs).

use super::{Comm, Error, Result};
use rbtl_btl::{Access, MemHandle, Order, RemoteHandle};
use rbtl_mpool::Region;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Operations at or below this size go through a registered staging buffer; larger
/// ones register the caller's buffer (a registration-cache hit when reused).
const STAGING: usize = 64 << 10;

/// Memory exposed to every rank, and what is needed to reach theirs.
pub struct Window {
    mem: Region,
    staging: Region,
    /// Per module: registrations of `mem` and `staging`.
    handles: Vec<(MemHandle, MemHandle)>,
    /// Per rank: address and handle of its window (from the module that routes to it).
    peers: Vec<(u64, RemoteHandle)>,
    done: Arc<AtomicUsize>,
}

impl Window {
    /// Allocate `len` bytes on every rank (a collective call) and exchange handles.
    pub fn allocate(comm: &mut Comm, len: usize) -> Result<Window> {
        let mem = Region::anonymous(len.max(1)).map_err(rbtl_btl::Error::from)?;
        let staging = Region::anonymous(STAGING).map_err(rbtl_btl::Error::from)?;
        let mut handles = Vec::new();
        for m in comm.modules.iter_mut() {
            // SAFETY: both regions live in the window, whose Drop releases the handles
            // before the regions are unmapped.
            let h =
                unsafe { m.register_mem(None, mem.as_ptr() as usize, mem.len(), Access::all()) }?;
            // SAFETY: as above.
            let s =
                unsafe { m.register_mem(None, staging.as_ptr() as usize, STAGING, Access::all()) }?;
            handles.push((h, s));
        }
        // Exchange (address, handle) of the module that routes each pair.
        let mut peers = Vec::with_capacity(comm.size as usize);
        let mut blobs = Vec::with_capacity(comm.size as usize);
        for r in 0..comm.size {
            let (mi, _) = comm.route(r)?;
            let mut b = (mem.as_ptr() as u64).to_le_bytes().to_vec();
            b.extend_from_slice(handles[mi].0.remote().as_bytes());
            blobs.push(b);
        }
        let got = comm.alltoall(&blobs)?;
        for (r, b) in got.into_iter().enumerate() {
            if b.len() < 8 {
                return Err(Error::Btl(rbtl_btl::Error::Modex(format!(
                    "window handle of rank {r} is {} bytes",
                    b.len()
                ))));
            }
            let addr = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
            peers.push((addr, RemoteHandle::from_bytes(&b[8..])?));
        }
        Ok(Window {
            mem,
            staging,
            handles,
            peers,
            done: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// This rank's window memory.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.as_ptr()
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// Copy of bytes of this rank's window (peers may write it at any time; read after
    /// a synchronisation such as a barrier).
    pub fn read_local(&self, offset: usize, out: &mut [u8]) {
        assert!(offset + out.len() <= self.mem.len(), "read past the window");
        // SAFETY: inside our mapping; raw copy, as peers write it behind our back.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.mem.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
    }

    /// Write `data` into `target`'s window at `offset`; returns once it is visible there.
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

    fn rdma(
        &mut self,
        comm: &mut Comm,
        target: u32,
        offset: usize,
        buf: *mut u8,
        len: usize,
        put: bool,
    ) -> Result<()> {
        let (mi, ep) = comm.route(target)?;
        let (raddr, rh) = self.peers[target as usize];
        let remote = raddr + offset as u64;
        let staged = len <= STAGING;
        let own;
        let (local, handle) = if staged {
            if put {
                // SAFETY: `buf` is the caller's slice of `len` bytes; staging holds STAGING.
                unsafe { std::ptr::copy_nonoverlapping(buf, self.staging.as_ptr(), len) };
            }
            (self.staging.as_ptr() as usize, &self.handles[mi].1)
        } else {
            let m = comm.modules[mi].as_mut();
            // SAFETY: the caller's buffer is borrowed for this whole call, which waits
            // for completion before dropping the handle.
            own = unsafe {
                m.register_mem(
                    Some(ep),
                    buf as usize,
                    len,
                    Access::LOCAL_READ | Access::LOCAL_WRITE,
                )
            }?;
            (buf as usize, &own)
        };
        let before = self.done.load(Ordering::Acquire);
        let done = self.done.clone();
        let status = Arc::new(std::sync::Mutex::new(None));
        let st = status.clone();
        let cb: rbtl_btl::RdmaCallback = Box::new(move |_, c| {
            *st.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.status);
            done.fetch_add(1, Ordering::Release);
        });
        let m = comm.modules[mi].as_mut();
        if put {
            m.put(ep, local, remote, handle, &rh, len, 0, Order::ANY, cb)?;
        } else {
            m.get(ep, local, remote, handle, &rh, len, 0, Order::ANY, cb)?;
        }
        while self.done.load(Ordering::Acquire) == before {
            comm.progress();
        }
        let outcome = status.lock().unwrap_or_else(|e| e.into_inner()).take();
        outcome.unwrap_or(Ok(()))?;
        if staged && !put {
            // SAFETY: the get landed in staging; `buf` is the caller's `len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(self.staging.as_ptr(), buf, len) };
        }
        Ok(())
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // Registrations go before the memory they describe.
        self.handles.clear();
    }
}
