//! The `sm` transport: processes on one node (Open MPI: `btl/vader`, later `btl/sm`).
//!
//! Each process owns a shared segment (see `segment`) holding one lock-free message
//! ring per possible sender ([`ring`]), one per rank the launcher placed on the node
//! (hydra's and Slurm's `PMI_process_mapping`; every rank of the job where it does
//! not say), each of `btl_sm_ring_bytes` or of its share of `btl_sm_rings_size` where
//! the node's ranks are many, so that a node's memory grows linearly with its ranks.
//! The segment is backed as it is used; one whose node's segments could outgrow the
//! machine's memory when fully used is refused at start. Sends are copied straight into the receiver's
//! ring and polled out of it, with no system call and no lock; messages of up to 104
//! bytes travel inside one slot. Put and get are checked against the target's
//! registration in its key table (which lives in its segment), then take one of two
//! paths (`btl_sm_rdma`):
//!
//! * `copy`: copied through the rings in chunks, pipelined, and checked again by the
//!   target (the copy protocol); like `tcp`, the target must be progressing. This
//!   beats cross-memory attach at every size while the host keeps the two cores near
//!   each other, as Open MPI's vader without CMA beats vader with it; when the host
//!   places them far apart, copying slows down several times and `cma` wins
//!   (measured: see docs/performance.md).
//! * `cma`: single copy by the kernel with `process_vm_writev`/`readv`; no target
//!   progress needed.
//! * `auto` (the default): `copy`, switching per peer to `cma` while copies into the
//!   rings run slow (module [`path`]), and staying with `copy` where the kernel
//!   refuses cross-memory attach (ptrace restrictions).
//!
//! Under `cma` and `auto` each process lets any process of its user attach to it
//! (`prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`, as vader does), which Yama's
//! `ptrace_scope = 1` otherwise allows only to ancestors; and a peer's memory may be
//! named by its address alone (`BtlFlags::UNREGISTERED_REMOTE`, below
//! `Attributes::unregistered_remote_below`: under `auto` measured at start-up, module
//! `by_address`), read or written by the kernel without a key, where both processes
//! may attach to each other.
//!
//! Atomics are applied by the target through the same protocol (as vader emulates
//! them). A peer that dies is noticed through its `/proc` entry while idle (`liveness`: no
//! descriptor per peer), once what it wrote into its ring before it ended is read, and
//! reported through the error callback; its operations complete with an error. A peer
//! that lives but replies to nothing (stopped, hung) keeps `flush` waiting only for
//! `btl_sm_flush_timeout` (as `tcp`'s): flush then returns `PeerTimeout` naming it, its
//! operations still pending. A peer that removes this process (`del_procs`) sets a flag
//! for it in its own segment; seen while idle (once what the peer wrote before is
//! read), before a put, get, atomic or mapping
//! towards that peer, when one of its handles is refused, or when a send finds the
//! peer's ring full, it fails the peer here too (`PeerFailed`), since the peer takes
//! nothing more from it.
//!
//! Segments have no name in any directory (`memfd_create`): peers open them through
//! `/proc/<pid>/fd/<fd>` of their owner (as UCX's posix transport does), which needs
//! the same rights as cross-memory attach's reads (the same user, one pid namespace).
//! A segment lives as long as some process maps it, so processes killed at any moment,
//! even in the middle of start-up, leave nothing behind.
//!
//! The files: `component` (attributes, settings, the component), `module` (the
//! module: sends, receives, progress, the contract's calls), `peer` (a connected peer
//! and its liveness, by `liveness`), `own_segment` (this process's segment and its heap),
//! `copy_protocol` (put, get and atomics as messages through the rings) with `wire`
//! (their format); completions wait for progress in the crate's `Done` queue; below them
//! `segment` (the layout), [`ring`], `heap`, [`path`] (the `auto` choice) and `cma`.

#![warn(missing_docs)]

mod by_address;
mod cma;
mod component;
mod copy_protocol;
#[cfg(test)]
mod fuzz;
mod heap;
mod liveness;
mod module;
mod own_segment;
pub mod path;
mod peer;
pub mod ring;
mod segment;
#[cfg(test)]
mod test_modex;
mod wire;

pub use component::{default_attributes, RdmaPath, Settings, SmComponent};
pub use module::SmModule;
