//! Memory for the rbtl byte-transfer layer: memory regions and fragment free lists.
//!
//! * [`Region`]: private anonymous mappings, with normal pages, `MAP_HUGETLB`
//!   huge pages ([`Region::huge`], which reports a fallback rather than hiding
//!   it) or transparent huge pages.
//! * [`SharedRegion`]: named segments under `/dev/shm` (or `$RBTL_SHM_DIR`)
//!   that peers map by name; [`cleanup_stale`] removes those left by crashed
//!   processes.
//! * [`FreeList`]: fixed-size, aligned fragments carved from chunks supplied by
//!   a [`ChunkSource`] ([`AnonymousSource`], or [`CarveSource`] to keep every
//!   fragment inside one shared segment), with O(1) get and put and optional
//!   per-chunk registrations.
//!
//! Linux only: segment cleanup reads `/proc/<pid>/stat`.

#![warn(missing_docs)]

#[macro_use]
mod byte_span;
mod chunk;
mod chunk_sources;
mod error;
mod free_list;
mod region;
mod shared;

pub use chunk::{Chunk, ChunkSource};
pub use chunk_sources::{AnonymousSource, CarveSource, PageKind};
pub use error::Error;
pub use free_list::{Frag, FreeList, FreeListConfig};
pub use region::{
    default_huge_page_size, system_page_size, HugeOutcome, Mapping, Region, THP_ALIGN,
};
pub use shared::{
    cleanup_stale, cleanup_stale_in, own_start_time, parse_segment_name, shm_dir, SharedRegion,
    DEFAULT_SHM_DIR, MAX_TAG_LEN, SEGMENT_PREFIX, SHM_DIR_ENV,
};
