//! Mapping hooks: libc's `mmap`, `mremap`, `shmat` and `brk` count the mappings they
//! make, so that a lookup asks the kernel whether an unmap is in flight only when
//! something was mapped since the last time it asked (see `Monitor::sync`).
//!
//! Why the mappings: a lookup can only hit a stale registration through an unmap in
//! flight if new memory was mapped at the freed address before the unmap's event was
//! read (`probe.rs`). Memory that is mapped anew comes from one of these calls; each
//! bumps [`mapped`] once the kernel has made the mapping. A lookup that follows such a
//! mapping reads the new count, finds it differs from the count of the last check, and
//! asks the kernel; a lookup that reads the count of the last check follows no mapping
//! made since that check, and the check itself waited for every unmap in flight before
//! it. Not counted: mappings made by a system call that does not go through libc's
//! functions (`syscall(2)`, inline `syscall` instructions, a second libc, the dynamic
//! loader's own copy of `mmap`);
//! `docs/memory-monitor.md` says what that leaves.
//!
//! How: as Open MPI's patcher and UCX's ucm ("bistro") do, the entry of each libc
//! function is overwritten with a jump to a replacement that makes the system call
//! itself, so calls from inside libc (`malloc`'s `mmap`, `pthread_create`'s stacks,
//! `sbrk`) are counted too, which interposing the symbols would miss. The jump is five
//! bytes (`jmp rel32` to a trampoline page mapped within reach), written with one
//! aligned 8-byte store so no thread can fetch half of it. A thread stopped right
//! after the first instruction of one of these functions at that instant would resume
//! inside the jump; the patch is made once, when the monitor starts, and checked at
//! once by a mapping that must be counted (under a binary translator the old code may
//! still run). Each lookup checks that the jumps are still in place (another patcher
//! may replace them) and asks the kernel every time once they are not.
//!
//! x86-64 glibc only; elsewhere every lookup asks the kernel.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Mappings made through the hooked functions since the process started.
static MAPPED: AtomicU64 = AtomicU64::new(0);

/// Whether the monitor should install the hooks when it starts.
static WANTED: AtomicBool = AtomicBool::new(true);

/// Asks the monitor to install (or not) the hooks when it starts; no effect once it has.
pub fn set_wanted(wanted: bool) {
    WANTED.store(wanted, Ordering::Relaxed);
}

pub(crate) fn wanted() -> bool {
    WANTED.load(Ordering::Relaxed)
}

/// The count of mappings made through the hooked functions.
#[inline]
pub(crate) fn mapped() -> u64 {
    MAPPED.load(Ordering::SeqCst)
}

fn counted() {
    MAPPED.fetch_add(1, Ordering::SeqCst);
}

/// The installed jumps: each patched word and what it must still hold.
#[derive(Debug)]
pub(crate) struct Installed {
    words: Vec<(usize, u64)>,
}

impl Installed {
    /// Whether every jump is still in place.
    #[inline]
    pub(crate) fn intact(&self) -> bool {
        self.words.iter().all(|&(at, word)| {
            // SAFETY: `at` is an aligned word of libc's code, mapped for the life of
            // the process (libc is never unloaded); the read is atomic as the write was.
            unsafe { (*(at as *const AtomicU64)).load(Ordering::Relaxed) == word }
        })
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
pub(crate) use patch::install;

#[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
pub(crate) fn install() -> Result<Installed, String> {
    Err("mapping hooks are made for x86-64 glibc only".into())
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
mod patch {
    use std::ffi::{c_int, c_long, c_void, CStr};
    use std::ptr;
    use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

    use libc::{off_t, size_t};

    use super::{counted, Installed};

    /// glibc's `__curbrk`, which `sbrk` reads: `brk`'s replacement keeps it.
    static CURBRK: AtomicPtr<*mut c_void> = AtomicPtr::new(ptr::null_mut());

    /// `MREMAP_DONTUNMAP` (Linux 5.7), which also passes a new address.
    const MREMAP_DONTUNMAP: c_int = 4;

    unsafe extern "C" fn mmap_hook(
        addr: *mut c_void,
        len: size_t,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: off_t,
    ) -> *mut c_void {
        // SAFETY: the caller's arguments, passed on to the kernel as libc's `mmap`
        // passes them (each widened to a `long`, as `syscall` reads them); `syscall`
        // sets errno on failure.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mmap,
                addr,
                len,
                c_long::from(prot),
                c_long::from(flags),
                c_long::from(fd),
                off,
            )
        };
        if r != -1 {
            counted();
        }
        r as *mut c_void
    }

    unsafe extern "C" fn mremap_hook(
        old: *mut c_void,
        old_len: size_t,
        new_len: size_t,
        flags: c_int,
        new_addr: *mut c_void,
    ) -> *mut c_void {
        // The fifth (variadic) argument is read only with MREMAP_FIXED or
        // MREMAP_DONTUNMAP, as libc does.
        let new_addr = if flags & (libc::MREMAP_FIXED | MREMAP_DONTUNMAP) != 0 {
            new_addr
        } else {
            ptr::null_mut()
        };
        // SAFETY: as in `mmap_hook`.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mremap,
                old,
                old_len,
                new_len,
                c_long::from(flags),
                new_addr,
            )
        };
        if r != -1 {
            counted();
        }
        r as *mut c_void
    }

    unsafe extern "C" fn shmat_hook(id: c_int, addr: *const c_void, flags: c_int) -> *mut c_void {
        // SAFETY: as in `mmap_hook`.
        let r =
            unsafe { libc::syscall(libc::SYS_shmat, c_long::from(id), addr, c_long::from(flags)) };
        if r != -1 {
            counted();
        }
        r as *mut c_void
    }

    unsafe extern "C" fn brk_hook(addr: *mut c_void) -> c_int {
        // SAFETY: the kernel's brk answers the current break, never an error number.
        let now = unsafe { libc::syscall(libc::SYS_brk, addr) } as *mut c_void;
        // SAFETY: CURBRK was set to libc's `__curbrk` before this hook was installed;
        // libc's own `brk` writes it the same way.
        unsafe { *CURBRK.load(Ordering::Relaxed) = now };
        if (now as usize) < (addr as usize) {
            // SAFETY: errno of the calling thread.
            unsafe { *libc::__errno_location() = libc::ENOMEM };
            return -1;
        }
        counted();
        0
    }

    /// The functions replaced, with their replacements.
    fn targets() -> [(&'static CStr, usize); 4] {
        [
            (c"mmap", mmap_hook as *const () as usize),
            (c"mremap", mremap_hook as *const () as usize),
            (c"shmat", shmat_hook as *const () as usize),
            (c"brk", brk_hook as *const () as usize),
        ]
    }

    /// Bytes of one trampoline slot: `movabs r11, imm64; jmp r11`, padded.
    const SLOT: usize = 16;
    /// How far (in bytes) a `jmp rel32` reaches, with a margin.
    const REACH: i64 = (1 << 31) - (1 << 24);

    fn page() -> usize {
        crate::page_size()
    }

    /// libc's own definition of `name` (not an interposed one).
    fn libc_symbol(libc: *mut c_void, name: &CStr) -> Result<usize, String> {
        // SAFETY: `libc` is a handle dlopen gave; `name` is a C string.
        let f = unsafe { libc::dlsym(libc, name.as_ptr()) };
        if f.is_null() {
            return Err(format!("libc has no {name:?}"));
        }
        Ok(f as usize)
    }

    /// A read-write page within `REACH` of every address in `[lo, hi]`.
    fn page_near(lo: usize, hi: usize) -> Result<usize, String> {
        let step = 2 << 20;
        let base = lo & !(step - 1);
        for k in 1..512usize {
            for candidate in [base.checked_sub(k * step), base.checked_add(k * step)] {
                let Some(at) = candidate else { continue };
                let (far_lo, far_hi) = (hi as i64 - at as i64, at as i64 - lo as i64);
                if far_lo.abs() > REACH || far_hi.abs() > REACH {
                    continue;
                }
                // SAFETY: a fresh private mapping where nothing is mapped
                // (MAP_FIXED_NOREPLACE refuses otherwise).
                let p = unsafe {
                    libc::mmap(
                        at as *mut c_void,
                        page(),
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                        -1,
                        0,
                    )
                };
                if p == libc::MAP_FAILED {
                    continue;
                }
                if p as usize == at {
                    return Ok(at);
                }
                // A kernel without MAP_FIXED_NOREPLACE took it as a hint.
                // SAFETY: the mapping just made, referred to by nothing.
                unsafe { libc::munmap(p, page()) };
            }
        }
        Err("no free page within 2 GiB of libc's code for the trampolines".into())
    }

    fn protect(at: usize, len: usize, prot: c_int) -> Result<(), String> {
        let start = at & !(page() - 1);
        // SAFETY: changes the protection of pages of libc's code or of the trampoline
        // page; every protection asked keeps them executable where they were.
        let rc = unsafe { libc::mprotect(start as *mut c_void, at + len - start, prot) };
        if rc != 0 {
            return Err(format!("mprotect: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Replaces the entries of libc's `mmap`, `mremap`, `shmat` and `brk`.
    pub(crate) fn install() -> Result<Installed, String> {
        // SAFETY: RTLD_NOLOAD only looks up the libc already loaded.
        let libc_handle =
            unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if libc_handle.is_null() {
            return Err("libc.so.6 is not loaded (a static or non-glibc program)".into());
        }
        let curbrk = libc_symbol(libc_handle, c"__curbrk")?;
        let mut found = Vec::new();
        for (name, hook) in targets() {
            let f = libc_symbol(libc_handle, name)?;
            if f % 8 > 3 {
                return Err(format!(
                    "libc's {name:?} at {f:#x}: its entry is not aligned"
                ));
            }
            // SAFETY: the first byte of a function of libc's code.
            if unsafe { ptr::read_volatile(f as *const u8) } == 0xE9 {
                return Err(format!(
                    "libc's {name:?} already starts with a jump (patched)"
                ));
            }
            found.push((f, hook));
        }
        let lo = found.iter().map(|t| t.0).min().unwrap_or(0);
        let hi = found.iter().map(|t| t.0).max().unwrap_or(0);
        let tramp = page_near(lo, hi)?;
        for (i, &(_, hook)) in found.iter().enumerate() {
            let mut slot = [0xCCu8; SLOT];
            slot[..2].copy_from_slice(&[0x49, 0xBB]);
            slot[2..10].copy_from_slice(&(hook as u64).to_le_bytes());
            slot[10..13].copy_from_slice(&[0x41, 0xFF, 0xE3]);
            // SAFETY: slot `i` of the trampoline page, mapped read-write above.
            unsafe { ptr::copy_nonoverlapping(slot.as_ptr(), (tramp + i * SLOT) as *mut u8, SLOT) };
        }
        protect(tramp, page(), libc::PROT_READ | libc::PROT_EXEC)?;
        CURBRK.store(curbrk as *mut *mut c_void, Ordering::Relaxed);
        let mut words = Vec::new();
        for (i, &(f, _)) in found.iter().enumerate() {
            let rel = (tramp + i * SLOT) as i64 - (f + 5) as i64;
            let rel = i32::try_from(rel).map_err(|_| "trampoline out of reach".to_string())?;
            let at = f & !7;
            let shift = (f - at) * 8;
            let mut jump = [0u8; 8];
            jump[0] = 0xE9;
            jump[1..5].copy_from_slice(&rel.to_le_bytes());
            let jump = u64::from_le_bytes(jump);
            let mask = 0xFF_FFFF_FFFFu64 << shift;
            protect(at, 8, libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC)?;
            // SAFETY: an aligned word of libc's code, now writable; one atomic store
            // replaces the five entry bytes and keeps the other three.
            let word = unsafe {
                let cell = &*(at as *const AtomicU64);
                let old = cell.load(Ordering::SeqCst);
                let new = (old & !mask) | (jump << shift);
                cell.store(new, Ordering::SeqCst);
                new
            };
            protect(at, 8, libc::PROT_READ | libc::PROT_EXEC)?;
            words.push((at, word));
        }
        check_counted()?;
        Ok(Installed { words })
    }

    /// Maps a page through libc's `mmap` and checks that the replacement counted it
    /// (under a binary translator such as valgrind the old code may still run).
    fn check_counted() -> Result<(), String> {
        let before = super::mapped();
        // SAFETY: a fresh private mapping without access, unmapped at once.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                page(),
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "mapping a page through the hooked mmap: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: the page just mapped, referred to by nothing.
        unsafe { libc::munmap(p, page()) };
        if super::mapped() == before {
            return Err("libc's mmap was patched but its replacement does not run".into());
        }
        Ok(())
    }
}
