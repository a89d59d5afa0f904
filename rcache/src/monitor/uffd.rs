//! The userfaultfd file descriptor: opening it (system call, then `/dev/userfaultfd`),
//! the API handshake, registering and unregistering ranges in write-protect mode,
//! reading the kernel's non-cooperative events, and asking whether one is in flight.
//!
//! Ranges are registered with `UFFDIO_REGISTER_MODE_WP` and no page is ever
//! write-protected, so no thread ever faults into the monitor: the registration only
//! makes the kernel report `UFFD_EVENT_UNMAP` (munmap, brk shrink, mmap over it, shmdt,
//! mremap shrink), `UFFD_EVENT_REMOVE` (madvise DONTNEED/FREE/REMOVE) and
//! `UFFD_EVENT_REMAP` (mremap moving it) for the registered pages.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use linux_raw_sys::general as uapi;
use linux_raw_sys::ioctl as uioctl;
use rustix::io::Errno;

use super::Unavailable;

/// Features the monitor cannot work without. (Not `UFFD_FEATURE_WP_HUGETLBFS_SHMEM`:
/// without it shared memory and hugetlbfs cannot be registered, so they are never
/// watched nor kept idle. Their files can lose pages under a mapping, by hole punching
/// or truncation, with no event for it.)
pub(crate) const REQUIRED: u64 = (uapi::UFFD_FEATURE_EVENT_UNMAP
    | uapi::UFFD_FEATURE_EVENT_REMOVE
    | uapi::UFFD_FEATURE_EVENT_REMAP
    | uapi::UFFD_FEATURE_PAGEFAULT_FLAG_WP) as u64;

/// `USERFAULTFD_IOC_NEW` of `/dev/userfaultfd`: `_IO(0xAA, 0x00)`.
const USERFAULTFD_IOC_NEW: libc::c_ulong = (uapi::USERFAULTFD_IOC as libc::c_ulong) << 8;

/// `UFFDIO_WRITEPROTECT_MODE_DONTWAKE` (`1 << 1` in the uapi header, a macro the
/// generated bindings lack): clear write protection without waking fault waiters.
const WRITEPROTECT_MODE_DONTWAKE: u64 = 1 << 1;

/// Size of one `struct uffd_msg`.
pub(crate) const MSG_BYTES: usize = std::mem::size_of::<uapi::uffd_msg>();

/// How the descriptor was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// `userfaultfd(2)` with `UFFD_USER_MODE_ONLY`: what an ordinary user gets while
    /// `vm.unprivileged_userfaultfd` is 0 (the events the monitor uses are not faults,
    /// so the flag costs it nothing).
    SyscallUserModeOnly,
    /// `userfaultfd(2)` without flags beyond `O_CLOEXEC | O_NONBLOCK` (kernels before
    /// 5.11, which do not know `UFFD_USER_MODE_ONLY`).
    Syscall,
    /// `ioctl(USERFAULTFD_IOC_NEW)` on `/dev/userfaultfd` (its file permissions decide).
    Device,
}

/// An event read from the descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// `[start, end)` left the address space or lost its pages.
    Gone { start: usize, end: usize },
    /// `len` bytes moved from `from` to `to` (mremap).
    Moved { from: usize, to: usize, len: usize },
    /// Any other message (a write-protect fault cannot happen: no page is protected).
    Other { event: u8, address: usize },
}

/// An open, API-negotiated userfaultfd.
#[derive(Debug)]
pub(crate) struct Uffd {
    fd: OwnedFd,
    /// The features the kernel granted.
    pub(crate) features: u64,
    pub(crate) opened: Opened,
}

fn open_raw() -> Result<(OwnedFd, Opened), Unavailable> {
    let base = rustix::mm::UserfaultfdFlags::CLOEXEC | rustix::mm::UserfaultfdFlags::NONBLOCK;
    let user_only = rustix::mm::UserfaultfdFlags::from_bits_retain(uapi::UFFD_USER_MODE_ONLY);
    // SAFETY: creating the descriptor has no effect on memory; what it can do is
    // confined to the ioctls below, each of which states its own contract.
    let first = unsafe { rustix::mm::userfaultfd(base | user_only) };
    let syscall_err = match first {
        Ok(fd) => return Ok((fd, Opened::SyscallUserModeOnly)),
        Err(Errno::INVAL) => {
            // A kernel that does not know UFFD_USER_MODE_ONLY.
            // SAFETY: as above.
            match unsafe { rustix::mm::userfaultfd(base) } {
                Ok(fd) => return Ok((fd, Opened::Syscall)),
                Err(e) => e,
            }
        }
        Err(e) => e,
    };
    if syscall_err == Errno::NOSYS {
        return Err(Unavailable::NotInKernel);
    }
    let device = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/userfaultfd")
    {
        Ok(dev) => {
            let flags = (libc::O_CLOEXEC | libc::O_NONBLOCK) as libc::c_ulong
                | uapi::UFFD_USER_MODE_ONLY as libc::c_ulong;
            // SAFETY: USERFAULTFD_IOC_NEW takes its flags by value and returns a new
            // descriptor or -1; `dev` is an open descriptor of /dev/userfaultfd.
            let fd = unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW, flags) };
            if fd >= 0 {
                // SAFETY: the ioctl returned a fresh descriptor that nothing else owns.
                return Ok((unsafe { OwnedFd::from_raw_fd(fd) }, Opened::Device));
            }
            std::io::Error::last_os_error().to_string()
        }
        Err(e) => e.to_string(),
    };
    Err(Unavailable::Refused {
        syscall: std::io::Error::from_raw_os_error(syscall_err.raw_os_error()).to_string(),
        device,
    })
}

fn api(fd: RawFd, features: u64) -> Result<uapi::uffdio_api, Errno> {
    let mut api = uapi::uffdio_api {
        api: uapi::UFFD_API as u64,
        features,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes one `struct uffdio_api`, which `api` is.
    unsafe { uffd_ioctl(fd, uioctl::UFFDIO_API, &mut api) }?;
    Ok(api)
}

/// `ioctl(fd, request, arg)` for the userfaultfd ioctls, which pass one struct by
/// pointer and answer 0 or -1 with errno; the errno on failure.
///
/// # Safety
///
/// `arg` is the struct `request` reads (and writes), and what the ioctl does to the
/// process's memory is sound for the caller.
unsafe fn uffd_ioctl<T>(fd: RawFd, request: u32, arg: &mut T) -> Result<(), Errno> {
    // SAFETY: the caller's promise; `arg` lives across the call.
    let rc = unsafe { libc::ioctl(fd, request as libc::c_ulong, std::ptr::from_mut(arg)) };
    if rc < 0 {
        return Err(last_errno());
    }
    Ok(())
}

impl Uffd {
    /// Opens a descriptor with every required feature (and the optional ones the
    /// kernel has). The API handshake may be made once per descriptor, so a first one
    /// only asks the kernel what it offers.
    pub(crate) fn open() -> Result<Uffd, Unavailable> {
        let (probe, _) = open_raw()?;
        let offered = api(probe.as_raw_fd(), 0)
            .map_err(|e| Unavailable::Api(format!("UFFDIO_API: {e}")))?
            .features;
        drop(probe);
        let missing = REQUIRED & !offered;
        if missing != 0 {
            return Err(Unavailable::MissingFeatures {
                missing: feature_names(missing),
            });
        }
        let (fd, opened) = open_raw()?;
        let granted = api(fd.as_raw_fd(), REQUIRED)
            .map_err(|e| Unavailable::Api(format!("UFFDIO_API with the events: {e}")))?;
        let needed = (1u64 << uapi::_UFFDIO_REGISTER) | (1u64 << uapi::_UFFDIO_UNREGISTER);
        if granted.ioctls & needed != needed {
            return Err(Unavailable::Api(format!(
                "UFFDIO_API offers ioctls {:#x}, without register/unregister",
                granted.ioctls
            )));
        }
        Ok(Uffd {
            fd,
            features: granted.features,
            opened,
        })
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Registers the page-aligned `[start, start+len)` in write-protect mode.
    pub(crate) fn register(&self, start: usize, len: usize) -> Result<(), Errno> {
        self.register_wp(start, len).map(|_| ())
    }

    /// [`register`](Self::register), answering the ioctls the kernel offers on the range.
    fn register_wp(&self, start: usize, len: usize) -> Result<u64, Errno> {
        let mut reg = uapi::uffdio_register {
            range: uapi::uffdio_range {
                start: start as u64,
                len: len as u64,
            },
            mode: uapi::UFFDIO_REGISTER_MODE_WP as u64,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes one `struct uffdio_register`. In WP
        // mode with no page write-protected it changes no memory access: it only asks
        // for the events of this descriptor's features on the range.
        unsafe { uffd_ioctl(self.raw(), uioctl::UFFDIO_REGISTER, &mut reg) }?;
        Ok(reg.ioctls)
    }

    /// Registers the page-aligned `[start, start+len)` in write-protect mode and checks
    /// that `UFFDIO_WRITEPROTECT` works on it (the probe page of `super::probe`).
    pub(crate) fn register_probe(&self, start: usize, len: usize) -> Result<(), String> {
        let ioctls = self
            .register_wp(start, len)
            .map_err(|e| format!("UFFDIO_REGISTER of the probe page: {e}"))?;
        if ioctls & (1u64 << uapi::_UFFDIO_WRITEPROTECT) == 0 {
            return Err(format!(
                "UFFDIO_WRITEPROTECT is not offered on write-protect ranges (ioctls {ioctls:#x})"
            ));
        }
        match self.changing(start, len) {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("UFFDIO_WRITEPROTECT on the probe page: {e}")),
        }
    }

    /// `UFFDIO_WRITEPROTECT` clearing write protection on `[start, start+len)`: Ok(true)
    /// for EAGAIN, which the kernel answers while an unmap, remap or remove of
    /// registered memory is in flight (see `super::probe`), Ok(false) when it did
    /// its work, the error otherwise. On pages that were never write-protected it
    /// changes nothing.
    pub(crate) fn changing(&self, start: usize, len: usize) -> Result<bool, Errno> {
        let mut wp = uapi::uffdio_writeprotect {
            range: uapi::uffdio_range {
                start: start as u64,
                len: len as u64,
            },
            mode: WRITEPROTECT_MODE_DONTWAKE,
        };
        // SAFETY: UFFDIO_WRITEPROTECT reads one `struct uffdio_writeprotect`; clearing
        // write protection on pages that have none changes no memory access.
        match unsafe { uffd_ioctl(self.raw(), uioctl::UFFDIO_WRITEPROTECT, &mut wp) } {
            Ok(()) => Ok(false),
            Err(Errno::AGAIN) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Unregisters the page-aligned `[start, start+len)` (parts not registered with
    /// this descriptor, or no longer mapped, are left alone by the kernel).
    pub(crate) fn unregister(&self, start: usize, len: usize) -> Result<(), Errno> {
        let mut range = uapi::uffdio_range {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: UFFDIO_UNREGISTER reads one `struct uffdio_range`; it only stops the
        // events for the range.
        unsafe { uffd_ioctl(self.raw(), uioctl::UFFDIO_UNREGISTER, &mut range) }
    }

    /// Waits until events are pending (or a signal interrupts the wait).
    pub(crate) fn wait(&self) -> Result<(), Errno> {
        self.wait_for(-1).map(drop)
    }

    /// Waits up to `timeout_ms` (-1: no limit) for events; whether some are pending.
    pub(crate) fn wait_for(&self, timeout_ms: i32) -> Result<bool, Errno> {
        let mut fds = [rustix::event::PollFd::new(
            &self.fd,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, timeout_ms) {
            Ok(n) => Ok(n > 0),
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads pending messages into `buf` without blocking; returns how many bytes
    /// (a multiple of [`MSG_BYTES`]), 0 when none is pending. Reading an event is what
    /// lets the thread that caused it go on.
    pub(crate) fn read(&self, buf: &mut [u8]) -> Result<usize, Errno> {
        match rustix::io::read(self.fd.as_fd(), buf) {
            Ok(n) => Ok(n),
            Err(Errno::AGAIN) | Err(Errno::INTR) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Makes the descriptor refer to `/dev/null` instead, in place: the userfaultfd is
    /// released (every registration dropped, every waiting thread woken) while the
    /// number stays valid for concurrent callers, whose ioctls now fail.
    pub(crate) fn release_in_place(&self) {
        // SAFETY: open with a constant path and flags; the result is checked.
        let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if null < 0 {
            return;
        }
        // SAFETY: both are descriptors of this process; dup3 replaces ours atomically.
        unsafe {
            libc::dup3(null, self.raw(), libc::O_CLOEXEC);
            libc::close(null);
        }
    }
}

fn last_errno() -> Errno {
    Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// Decodes one message of [`MSG_BYTES`] bytes.
pub(crate) fn decode(bytes: &[u8]) -> Event {
    debug_assert_eq!(bytes.len(), MSG_BYTES);
    // SAFETY: `bytes` holds MSG_BYTES bytes written by the kernel as a `uffd_msg`
    // (plain integers, valid for any bit pattern); read_unaligned copes with the
    // byte buffer's alignment.
    let msg: uapi::uffd_msg = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    let event = msg.event;
    // SAFETY (each union read below): the kernel fills the member that `event` names,
    // and every member is plain integers.
    match u32::from(event) {
        uapi::UFFD_EVENT_UNMAP | uapi::UFFD_EVENT_REMOVE => {
            // SAFETY: see above.
            let r = unsafe { msg.arg.remove };
            Event::Gone {
                start: r.start as usize,
                end: r.end as usize,
            }
        }
        uapi::UFFD_EVENT_REMAP => {
            // SAFETY: see above.
            let r = unsafe { msg.arg.remap };
            Event::Moved {
                from: r.from as usize,
                to: r.to as usize,
                len: r.len as usize,
            }
        }
        _ => {
            // SAFETY: see above (a page fault message; for others the address is unused).
            let p = unsafe { msg.arg.pagefault };
            Event::Other {
                event,
                address: p.address as usize,
            }
        }
    }
}

/// Names of the feature bits in `bits`, for messages.
pub(crate) fn feature_names(bits: u64) -> String {
    const NAMES: [(u32, &str); 5] = [
        (uapi::UFFD_FEATURE_EVENT_UNMAP, "UFFD_FEATURE_EVENT_UNMAP"),
        (uapi::UFFD_FEATURE_EVENT_REMOVE, "UFFD_FEATURE_EVENT_REMOVE"),
        (uapi::UFFD_FEATURE_EVENT_REMAP, "UFFD_FEATURE_EVENT_REMAP"),
        (
            uapi::UFFD_FEATURE_PAGEFAULT_FLAG_WP,
            "UFFD_FEATURE_PAGEFAULT_FLAG_WP",
        ),
        (
            uapi::UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
            "UFFD_FEATURE_WP_HUGETLBFS_SHMEM",
        ),
    ];
    let names: Vec<&str> = NAMES
        .iter()
        .filter(|(b, _)| bits & u64::from(*b) != 0)
        .map(|(_, n)| *n)
        .collect();
    names.join(" | ")
}
