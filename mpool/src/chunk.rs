//! Chunks: spans of memory a free list carves into fragments, and the trait of what
//! supplies them.

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;

use crate::error::Error;
use crate::region::Region;

/// A span of memory handed to a free list, together with whatever keeps it
/// mapped (a [`Region`], an `Arc` of a shared segment, ...).
pub struct Chunk {
    ptr: NonNull<u8>,
    len: usize,
    _owner: Box<dyn Any + Send + Sync>,
}

// SAFETY: a Chunk is the exclusive handle to its span (see `from_raw`), and
// its owner is Send + Sync, so moving it to another thread is sound.
unsafe impl Send for Chunk {}

impl Chunk {
    /// Wraps `len` bytes at `ptr`, kept alive by `owner`.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must be initialized memory, valid for reads and writes
    /// for as long as `owner` lives, must not move while `owner` lives, and
    /// must not be handed out to anyone else (by the owner or another chunk)
    /// while the chunk exists.
    pub unsafe fn from_raw(
        ptr: NonNull<u8>,
        len: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Chunk {
        Chunk {
            ptr,
            len,
            _owner: owner,
        }
    }

    /// A chunk covering a whole [`Region`], which it keeps mapped.
    pub fn from_region(region: Region) -> Chunk {
        let ptr = NonNull::new(region.as_ptr()).expect("a region is never at null");
        let len = region.len();
        // SAFETY: the region's memory is mapped (zero-filled, so initialized)
        // for as long as the region, which the chunk now owns exclusively.
        unsafe { Chunk::from_raw(ptr, len, Box::new(region)) }
    }
}

byte_span!(Chunk, "chunk");

impl fmt::Debug for Chunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Where a free list gets its memory, a chunk at a time.
pub trait ChunkSource: Send {
    /// Returns a chunk of at least `len` bytes.
    fn alloc_chunk(&mut self, len: usize) -> Result<Chunk, Error>;

    /// Returns a chunk holding `len` bytes starting at its first
    /// `align`-aligned address (`align` is a power of two).
    ///
    /// The default asks [`alloc_chunk`](ChunkSource::alloc_chunk) for
    /// `len + align - 1` bytes; sources that can align for free override it.
    fn alloc_chunk_aligned(&mut self, len: usize, align: usize) -> Result<Chunk, Error> {
        let padded = len
            .checked_add(align.saturating_sub(1))
            .ok_or(Error::TooLarge { len })?;
        self.alloc_chunk(padded)
    }

    /// Bytes still available, for sources of fixed size; `None` when unbounded.
    /// A free list uses it to shrink its last chunk to what fits.
    fn remaining(&self) -> Option<usize> {
        None
    }
}
