//! The chunk sources: a fresh anonymous region per chunk, or consecutive pieces of
//! one mapping.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::chunk::{Chunk, ChunkSource};
use crate::error::Error;
use crate::region::{round_up, system_page_size, Mapping, Region};

/// Kind of pages an [`AnonymousSource`] maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageKind {
    /// Normal pages ([`Region::anonymous`]).
    #[default]
    Normal,
    /// `MAP_HUGETLB` with reported fallback ([`Region::huge`]). Each chunk is
    /// rounded up to whole huge pages.
    Huge,
    /// 2 MiB-aligned with `MADV_HUGEPAGE` ([`Region::transparent_huge`]).
    TransparentHuge,
}

/// A [`ChunkSource`] that maps a fresh private anonymous [`Region`] per chunk.
#[derive(Debug, Default)]
pub struct AnonymousSource {
    pages: PageKind,
    fell_back: usize,
}

impl AnonymousSource {
    /// Chunks of normal pages.
    pub fn new() -> AnonymousSource {
        AnonymousSource::default()
    }

    /// Chunks of the given page kind.
    pub fn with_pages(pages: PageKind) -> AnonymousSource {
        AnonymousSource {
            pages,
            fell_back: 0,
        }
    }

    /// How many [`PageKind::Huge`] chunks fell back to normal pages so far
    /// (each fallback is also logged by [`Region::huge`]).
    pub fn huge_fallbacks(&self) -> usize {
        self.fell_back
    }
}

impl ChunkSource for AnonymousSource {
    fn alloc_chunk(&mut self, len: usize) -> Result<Chunk, Error> {
        let region = match self.pages {
            PageKind::Normal => Region::anonymous(len)?,
            PageKind::Huge => {
                let (region, outcome) = Region::huge(len)?;
                if !outcome.is_huge() {
                    self.fell_back += 1;
                }
                region
            }
            PageKind::TransparentHuge => Region::transparent_huge(len)?.0,
        };
        Ok(Chunk::from_region(region))
    }

    fn alloc_chunk_aligned(&mut self, len: usize, align: usize) -> Result<Chunk, Error> {
        // Regions start on a page boundary at least.
        if align <= system_page_size() {
            self.alloc_chunk(len)
        } else {
            let padded = len.checked_add(align - 1).ok_or(Error::TooLarge { len })?;
            self.alloc_chunk(padded)
        }
    }
}

/// A [`ChunkSource`] that hands out consecutive pieces of one pre-created
/// mapping (a [`SharedRegion`](crate::SharedRegion) or a [`Region`]) until it
/// is full, then answers [`Error::SourceFull`]. Space is never reclaimed.
///
/// A shared-memory transport uses it to keep all its fragments inside its
/// shared segment, so it can tell peers offsets from the segment's start.
pub struct CarveSource {
    mem: Arc<dyn Mapping>,
    start: usize,
    end: usize,
    next: usize,
}

impl CarveSource {
    /// Carves from the whole mapping.
    pub fn new<M: Mapping>(mem: Arc<M>) -> CarveSource {
        let len = mem.mapped_len();
        CarveSource {
            mem,
            start: 0,
            end: len,
            next: 0,
        }
    }

    /// Carves only from `offset..offset + len` of the mapping, e.g. to keep a
    /// control header at the start of a shared segment.
    pub fn with_range<M: Mapping>(
        mem: Arc<M>,
        offset: usize,
        len: usize,
    ) -> Result<CarveSource, Error> {
        let total = mem.mapped_len();
        match offset.checked_add(len) {
            Some(end) if end <= total => Ok(CarveSource {
                mem,
                start: offset,
                end,
                next: offset,
            }),
            _ => Err(Error::InvalidConfig(format!(
                "carve range {offset}+{len} does not fit in a mapping of {total} bytes"
            ))),
        }
    }

    /// Bytes the source can hand out in total.
    pub fn capacity(&self) -> usize {
        self.end - self.start
    }

    /// Bytes handed out so far (including alignment padding).
    pub fn used(&self) -> usize {
        self.next - self.start
    }

    /// Start of the underlying mapping (offsets are relative to this).
    pub fn base_ptr(&self) -> *mut u8 {
        self.mem.base_ptr()
    }

    fn carve(&mut self, pad: usize, len: usize) -> Result<Chunk, Error> {
        let remaining = self.end - self.next;
        let requested = pad.checked_add(len).ok_or(Error::TooLarge { len })?;
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        if requested > remaining {
            return Err(Error::SourceFull {
                requested,
                remaining,
                capacity: self.capacity(),
            });
        }
        let offset = self.next + pad;
        self.next += requested;
        // SAFETY: offset + len <= end <= mapped_len, so the pointer stays
        // inside the mapping.
        let raw = unsafe { self.mem.base_ptr().add(offset) };
        let ptr = NonNull::new(raw).expect("mapping is never at null");
        // SAFETY: the piece lies within the mapping, which the cloned Arc keeps
        // alive and in place (Mapping contract; mapped memory is initialized);
        // `next` only moves forward, so no piece is handed out twice.
        Ok(unsafe { Chunk::from_raw(ptr, len, Box::new(Arc::clone(&self.mem))) })
    }
}

impl ChunkSource for CarveSource {
    fn alloc_chunk(&mut self, len: usize) -> Result<Chunk, Error> {
        self.carve(0, len)
    }

    fn alloc_chunk_aligned(&mut self, len: usize, align: usize) -> Result<Chunk, Error> {
        let addr = self.mem.base_ptr() as usize + self.next;
        let aligned = round_up(addr, align.max(1)).ok_or(Error::TooLarge { len })?;
        self.carve(aligned - addr, len)
    }

    fn remaining(&self) -> Option<usize> {
        Some(self.end - self.next)
    }
}

impl fmt::Debug for CarveSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CarveSource")
            .field("base", &self.mem.base_ptr())
            .field("start", &self.start)
            .field("end", &self.end)
            .field("next", &self.next)
            .finish()
    }
}
