//! Whether an unmap, remap or remove of watched memory is in flight.
//!
//! The kernel frees an unmapped (or moved) range *before* it reports the event: the
//! unmapping thread drops the address space's lock, then queues the event and waits
//! for it to be read. Meanwhile another thread can map new memory at the same
//! address and look it up, and nothing the monitor thread has read says so yet: a
//! hit on the old registration would hand out the pages that left.
//!
//! The kernel counts each such change of registered memory from its start (made
//! under the address space's write lock, so before any new mapping can take the
//! range) until its event has been read (`mmap_changing` of the userfaultfd), and
//! answers `UFFDIO_WRITEPROTECT` with EAGAIN while the count is not zero. The monitor
//! asks on a page of its own before each lookup: once none is in flight, every change
//! that began before has been read, which the monitor thread marked in its round
//! counter before reading, so the sync that follows applies it.
//!
//! The kernel reads the count before it looks at the range, so a call with a length of
//! 0 (refused as invalid when nothing is in flight) answers without taking the address
//! space's lock or walking page tables. Whether this kernel does so is checked once,
//! on a real unmap held in flight, with the full call (on a registered page) as the
//! fallback. Kernels older than the 2021 change that made it a counter ("userfaultfd:
//! change mmap_changing to atomic") keep a flag, which the first of two overlapping
//! changes clears when its event is read: there the check can miss the second while
//! it is in flight.

use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};

use super::uffd::{Uffd, MSG_BYTES};
use super::Unavailable;
use crate::page_size;

/// How long the check at start waits for the kernel to report its unmap.
const CALIBRATION: Duration = Duration::from_secs(5);

/// The question asked before each lookup.
#[derive(Debug)]
pub(crate) struct Probe {
    /// A page of the monitor's own, mapped without access and registered for the
    /// whole life of the process.
    page: usize,
    /// Ask with a length of 0: the kernel answers EAGAIN or EINVAL before taking any
    /// lock (checked at start).
    early: bool,
}

/// Maps one page of private anonymous memory with `prot`.
fn map_page(prot: ProtFlags) -> Result<usize, Unavailable> {
    // SAFETY: a fresh private anonymous mapping placed where nothing is mapped; no
    // reference into it is ever made.
    unsafe {
        rustix::mm::mmap_anonymous(std::ptr::null_mut(), page_size(), prot, MapFlags::PRIVATE)
    }
    .map(|p| p as usize)
    .map_err(|e| Unavailable::Api(format!("mapping a page for the in-flight check: {e}")))
}

fn unmap_page(page: usize) {
    // SAFETY: `page` was mapped by `map_page` and nothing refers into it.
    let _ = unsafe { rustix::mm::munmap(page as *mut libc::c_void, page_size()) };
}

impl Probe {
    /// Maps and registers the probe page, and checks on a real unmap held in flight
    /// that the kernel reports it, and whether the call of length 0 does. Runs before
    /// the monitor thread starts: the event of that unmap is read here.
    pub(crate) fn new(uffd: &Uffd) -> Result<Probe, Unavailable> {
        let ps = page_size();
        let page = map_page(ProtFlags::empty())?;
        if let Err(why) = uffd.register_probe(page, ps) {
            unmap_page(page);
            return Err(Unavailable::Api(why));
        }
        let early = match Self::calibrate(uffd, page) {
            Ok(early) => early,
            Err(e) => {
                unmap_page(page);
                return Err(e);
            }
        };
        tracing::debug!(early, "rcache: in-flight check ready");
        Ok(Probe { page, early })
    }

    /// Unmaps a registered page from another thread, which then waits for its event,
    /// and asks both ways while it waits.
    fn calibrate(uffd: &Uffd, page: usize) -> Result<bool, Unavailable> {
        let ps = page_size();
        let target = map_page(ProtFlags::READ | ProtFlags::WRITE)?;
        if let Err(e) = uffd.register(target, ps) {
            unmap_page(target);
            return Err(Unavailable::Api(format!(
                "UFFDIO_REGISTER of a page for the in-flight check: {e}"
            )));
        }
        let unmapper = std::thread::Builder::new()
            .name("rbtl-uffd-check".into())
            .spawn(move || unmap_page(target))
            .map_err(|e| Unavailable::Thread(e.to_string()))?;
        let deadline = Instant::now() + CALIBRATION;
        let mut reported = false;
        while !reported && Instant::now() < deadline {
            reported = uffd
                .wait_for(100)
                .map_err(|e| Unavailable::Api(format!("poll: {e}")))?;
        }
        if !reported {
            // The unmapping thread goes on once the descriptor is closed.
            return Err(Unavailable::Api(format!(
                "an unmap of a registered page was not reported within {CALIBRATION:?}"
            )));
        }
        // The event is queued: the unmap is in flight until it is read.
        let full = uffd.changing(page, ps);
        let early = uffd.changing(page, 0);
        let mut buf = [0u8; MSG_BYTES * 4];
        while uffd
            .read(&mut buf)
            .map_err(|e| Unavailable::Api(format!("reading the check's event: {e}")))?
            > 0
        {}
        let _ = unmapper.join();
        match full {
            Ok(true) => {}
            other => {
                return Err(Unavailable::Api(format!(
                    "the kernel does not report an unmap in flight (UFFDIO_WRITEPROTECT \
                     answered {other:?} during one), so a lookup could hit memory that \
                     left"
                )))
            }
        }
        Ok(matches!(early, Ok(true)))
    }

    /// Whether an unmap, remap or remove of registered memory is in flight.
    pub(crate) fn in_flight(&self, uffd: &Uffd) -> Result<bool, Errno> {
        if self.early {
            match uffd.changing(self.page, 0) {
                Err(Errno::INVAL) => Ok(false),
                other => other,
            }
        } else {
            uffd.changing(self.page, page_size())
        }
    }
}
