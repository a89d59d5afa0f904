//! A long-term pin on user pages, the kind a device registration holds: the pages
//! become fixed buffers of an io_uring, which takes them with `pin_user_pages` and
//! `FOLL_LONGTERM`, the pin `ibv_reg_mr` takes too.
//!
//! While pinned, the pages stay where the pin found them: the kernel does not migrate
//! or compact them, a `fork` copies them for the child instead of sharing them
//! copy-on-write (the parent keeps its pages), and their frames are not handed to
//! other memory. So the frame at a pinned address differs from the pinned one exactly
//! when the memory under the address was replaced (unmapped, remapped, dropped).
//! Without the pin the frames also change under memory that never left (copy-on-write
//! after a fork elsewhere in the process, migration), and a freed frame often comes
//! back at the same address.

use std::io;
use std::mem::size_of;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use rustix::io_uring::{
    io_uring_params, io_uring_register, io_uring_rsrc_register, io_uring_rsrc_update2,
    io_uring_setup, IoringRegisterOp, IoringRsrcFlags,
};

/// Slots in the ring's buffer table, the most pins held at once: the kernel's limit
/// (`IORING_MAX_REG_BUFFERS`).
const SLOTS: u32 = 1 << 14;

/// A table of pins: one io_uring whose sparse buffer table holds one pinned range per
/// slot. Dropping it releases every pin.
pub struct Pins {
    ring: OwnedFd,
    free: Mutex<Vec<u32>>,
}

impl Pins {
    /// An io_uring with an empty buffer table of [`SLOTS`] slots.
    pub fn new() -> io::Result<Pins> {
        let mut params = io_uring_params::default();
        let ring = io_uring_setup(1, &mut params)?;
        let table = io_uring_rsrc_register {
            nr: SLOTS,
            flags: IoringRsrcFlags::REGISTER_SPARSE,
            ..Default::default()
        };
        // SAFETY: IORING_REGISTER_BUFFERS2 reads one `struct io_uring_rsrc_register`,
        // whose size is passed; a sparse table points at no user memory.
        unsafe {
            io_uring_register(
                &ring,
                IoringRegisterOp::RegisterBuffers2,
                (&table as *const io_uring_rsrc_register).cast(),
                size_of::<io_uring_rsrc_register>() as u32,
            )
        }?;
        Ok(Pins {
            ring,
            free: Mutex::new((0..SLOTS).rev().collect()),
        })
    }

    /// Pins the pages of `[base, base+len)` (mapped and writable); returns the slot
    /// that [`Pins::unpin`] takes. ENOSPC when every slot is taken; ENOMEM past the
    /// locked-memory limit of a user without CAP_IPC_LOCK.
    pub fn pin(&self, base: usize, len: usize) -> io::Result<u32> {
        let slot = self
            .free
            .lock()
            .unwrap()
            .pop()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSPC))?;
        match self.set(slot, base, len) {
            Ok(()) => Ok(slot),
            Err(e) => {
                self.free.lock().unwrap().push(slot);
                Err(e)
            }
        }
    }

    /// Releases the pin of `slot`.
    pub fn unpin(&self, slot: u32) {
        self.set(slot, 0, 0).expect("io_uring: empty a buffer slot");
        self.free.lock().unwrap().push(slot);
    }

    /// Makes `slot` hold `[base, base+len)`, or nothing for a null base; the range it
    /// held before is unpinned.
    fn set(&self, slot: u32, base: usize, len: usize) -> io::Result<()> {
        let iov = libc::iovec {
            iov_base: base as *mut libc::c_void,
            iov_len: len,
        };
        let update = io_uring_rsrc_update2 {
            offset: slot,
            data: &iov as *const libc::iovec as u64,
            nr: 1,
            ..Default::default()
        };
        // SAFETY: IORING_REGISTER_BUFFERS_UPDATE reads one `struct io_uring_rsrc_update2`
        // (size passed) and the one iovec it points at, both alive across the call; the
        // kernel pins the pages the iovec names and changes no memory.
        unsafe {
            io_uring_register(
                &self.ring,
                IoringRegisterOp::RegisterBuffersUpdate,
                (&update as *const io_uring_rsrc_update2).cast(),
                size_of::<io_uring_rsrc_update2>() as u32,
            )
        }?;
        Ok(())
    }
}
