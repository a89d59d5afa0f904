//! The registration cache never hands out a registration of memory that left the
//! address space, whoever made it leave: C `free`, `munmap`, `mremap`, `madvise`,
//! `shmdt`, a shrinking `brk`, `mmap(MAP_FIXED)` over it, or (for shared memory) its
//! file's hole punching or truncation. Real memory through libc,
//! a registrar that pins the pages as a device does and records their physical
//! frames, and the process's memory monitor (userfaultfd) as the only source of
//! invalidations.
//!
//! Run as root (frame numbers in /proc/self/pagemap, and the roles that drop to an
//! ordinary user).

mod cases;
mod fork;
mod hooks;
mod in_flight;
mod memory;
mod pin;
mod roles;
mod shared;
mod stress;
