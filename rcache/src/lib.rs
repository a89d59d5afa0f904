//! Memory registration cache for the rbtl byte-transfer layer.
//!
//! Registering memory with a NIC (verbs `ibv_reg_mr`, libfabric `fi_mr_reg`)
//! pins pages and costs a system call plus page-table walks, so transports
//! keep registrations around and reuse them. This crate is that cache: the
//! counterpart of Open MPI's `opal/mca/rcache/grdma` and UCX's
//! `ucs/memory/rcache.c` (`ucs_rcache_t`).
//!
//! * [`Rcache::register`] looks the page-aligned range up; a valid cached
//!   registration that covers it with at least the requested [`Access`] is a
//!   hit and gains a reference. Otherwise the [`Registrar`] is asked for a new
//!   one (a miss).
//! * [`Registration`] is reference counted: [`Clone`] adds a reference and
//!   [`Drop`] releases one. When the last one goes the registration either
//!   stays registered for reuse (`leave_pinned`, Open MPI's `mpi_leave_pinned`) or
//!   is deregistered at once.
//! * [`Rcache::invalidate`] makes every registration overlapping a range
//!   unreachable at once (the memory was freed or remapped); idle ones are
//!   deregistered immediately, in-use ones when their last user lets go.
//!   The [`monitor`] calls it whoever unmaps the memory (userfaultfd events, applied
//!   before each lookup) for caches whose registrar pins pages
//!   ([`Registrar::pins_pages`]); the [`auto`] module can call it from a global
//!   allocator.
//! * Limits on pinned bytes and on the number of registrations are enforced
//!   by evicting idle registrations (second chance, oldest first), and a registrar's
//!   [`RegistrarError::OutOfResources`] triggers evict-one-and-retry
//!   (grdma's `mca_rcache_grdma_evict` loop).
//!
//! # Locking
//!
//! One lock guards the index, the eviction list and the counters (a flag released
//! with a plain store, whose waiters spin, yield, then nap: `lock.rs`). A lookup takes
//! it once; releasing a registration does not, unless it
//! retires it (the last user of an invalidated registration, or any release in a cache
//! that keeps nothing idle): each registration counts its users and whether it is
//! unreachable in one atomic word, and whoever brings it to "unused and unreachable"
//! retires it, exactly once. A hit neither moves the registration on the eviction list
//! nor counts a reference to the cache.
//!
//! The registrar's `register` and `deregister` are called **while that lock is
//! held**: concurrent misses on the same range therefore register once, not
//! twice, at the price of serialising registrar calls of one cache. A
//! registrar must not call back into the same cache (that would deadlock),
//! and memory it frees while called is not seen by [`auto`].
//!
//! # Index cost
//!
//! A hit first looks the first page of the range up in a page map (every page of
//! registrations of up to 16 pages, the first page of longer ones): `O(1)`, and the map
//! leads to the registration's entry, whose first cache line holds all a hit reads and
//! writes. Otherwise
//! valid registrations are kept in a `BTreeMap` keyed by `(base, id)`, plus a
//! multiset of their lengths. A lookup of `[b, e)` scans backwards from `b`
//! only over keys `>= e - max_len` (`max_len` being the longest valid
//! registration), so it costs `O(log n + k)` where `k` is the number of valid
//! registrations starting in `[e - max_len, b]`. For non-overlapping
//! registrations of similar sizes `k` is 1 or 2; one huge registration makes
//! `k` grow with the number of registrations that start inside it.
//! [`Rcache::invalidate`] costs `O(log n + k + m)` with `m` the number of
//! registrations invalidated. A hit and a release cost `O(1)` and leave the eviction
//! list alone (a `slab` of slots with intrusive `prev`/`next` indices); an eviction
//! sweeps past registrations in use or hit since its last pass, each at most twice.
//! [`Rcache::stats`] visits every registration kept for reuse to count the idle ones.
#![warn(missing_docs)]

mod access;
pub mod auto;
mod cache;
mod core;
mod entries;
mod error;
mod fork;
mod index;
mod lock;
mod lru;
pub mod monitor;
mod options;
mod page;
mod registrar;
mod registration;
mod stats;
mod users;

pub use access::{libfabric, Access};
pub use cache::Rcache;
pub use error::Error;
pub use options::Options;
pub use page::page_size;
pub use registrar::{Registrar, RegistrarError};
pub use registration::Registration;
pub use stats::Stats;
