//! Fixed-size fragment free lists, grown a chunk at a time from a chunk source.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::chunk::{Chunk, ChunkSource};
use crate::error::Error;
use crate::region::round_up;

/// Shape and limits of a [`FreeList`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeListConfig {
    /// Bytes per fragment; rounded up to `frag_align`.
    pub frag_size: usize,
    /// Alignment of every fragment, a power of two (e.g. 64 for cache lines).
    pub frag_align: usize,
    /// Fragments added per growth step.
    pub frags_per_chunk: usize,
    /// Most fragments the list will ever allocate; 0 = unlimited.
    pub max_frags: usize,
}

impl FreeListConfig {
    /// `frag_size`-byte fragments, cache-line (64) aligned, 64 per chunk, unlimited.
    pub fn new(frag_size: usize) -> FreeListConfig {
        FreeListConfig {
            frag_size,
            frag_align: 64,
            frags_per_chunk: 64,
            max_frags: 0,
        }
    }
}

/// Identifies a free list inside its fragments.
static NEXT_LIST_ID: AtomicU32 = AtomicU32::new(1);

/// Per-fragment bookkeeping: its address and the chunk it came from.
#[derive(Clone, Copy)]
struct Slot {
    ptr: NonNull<u8>,
    chunk: u32,
}

type RegisterFn<Reg> = Box<dyn FnMut(*mut u8, usize) -> Result<Reg, Error> + Send>;

/// Fixed-size fragments carved from chunks, in the manner of Open MPI's
/// `opal_free_list_t`.
///
/// Grows by one chunk (`frags_per_chunk` fragments) at a time, up to
/// `max_frags`; [`get`](FreeList::get) and [`put`](FreeList::put) are O(1)
/// (a stack of free indices) and never allocate except when growing. Chunks
/// are kept until the list is dropped. Fragments are numbered 0, 1, 2, ... in
/// allocation order, for transports that pass indices between processes.
///
/// `Reg` is a per-chunk registration made when a chunk is added (e.g. through a
/// registration cache), so each fragment can name the registration covering it.
///
/// A list is used from one thread at a time (`&mut self`); wrap it in a mutex
/// to share it. If the list is dropped while fragments are still out, its
/// chunks and registrations are leaked (with a warning) so those fragments
/// stay valid.
pub struct FreeList<Reg = ()> {
    free: Vec<u32>,
    slots: Vec<Slot>,
    frag_size: usize,
    id: u32,
    frag_align: usize,
    frags_per_chunk: usize,
    max_frags: usize,
    // Registrations are declared (and so dropped) before the chunks they cover.
    regs: Vec<Reg>,
    chunks: Vec<Chunk>,
    source: Box<dyn ChunkSource>,
    register: RegisterFn<Reg>,
}

// SAFETY: the list exclusively owns its chunks (Chunk: Send), its source and
// register closure are Send, and the slot pointers only point into owned chunks.
unsafe impl<Reg: Send> Send for FreeList<Reg> {}

impl FreeList<()> {
    /// A list without registrations.
    pub fn new(
        config: FreeListConfig,
        source: Box<dyn ChunkSource>,
    ) -> Result<FreeList<()>, Error> {
        FreeList::with_registration(config, source, Box::new(|_, _| Ok(())))
    }
}

impl<Reg> FreeList<Reg> {
    /// A list that calls `register(ptr, len)` once for each chunk it adds,
    /// where `ptr..ptr + len` is the span the chunk's fragments occupy, and
    /// keeps the result for [`registration`](FreeList::registration).
    ///
    /// No memory is allocated until the first [`get`](FreeList::get) or
    /// [`reserve`](FreeList::reserve).
    pub fn with_registration(
        config: FreeListConfig,
        source: Box<dyn ChunkSource>,
        register: RegisterFn<Reg>,
    ) -> Result<FreeList<Reg>, Error> {
        let FreeListConfig {
            frag_size,
            frag_align,
            frags_per_chunk,
            max_frags,
        } = config;
        if frag_size == 0 {
            return Err(Error::InvalidConfig("frag_size must be at least 1".into()));
        }
        if !frag_align.is_power_of_two() {
            return Err(Error::InvalidConfig(format!(
                "frag_align must be a power of two, not {frag_align}"
            )));
        }
        if frags_per_chunk == 0 {
            return Err(Error::InvalidConfig(
                "frags_per_chunk must be at least 1".into(),
            ));
        }
        if max_frags > u32::MAX as usize {
            return Err(Error::InvalidConfig(format!(
                "max_frags must fit in a u32 fragment index, not {max_frags}"
            )));
        }
        let frag_size = round_up(frag_size, frag_align)
            .ok_or_else(|| Error::InvalidConfig(format!("frag_size {frag_size} is too large")))?;
        if frag_size.checked_mul(frags_per_chunk).is_none() {
            return Err(Error::InvalidConfig(format!(
                "frags_per_chunk {frags_per_chunk} x frag_size {frag_size} overflows"
            )));
        }
        Ok(FreeList {
            free: Vec::new(),
            slots: Vec::new(),
            frag_size,
            id: NEXT_LIST_ID.fetch_add(1, Ordering::Relaxed),
            frag_align,
            frags_per_chunk,
            max_frags,
            regs: Vec::new(),
            chunks: Vec::new(),
            source,
            register,
        })
    }

    /// Takes a free fragment, growing by a chunk if none is free.
    ///
    /// Fails with [`Error::Exhausted`] when `max_frags` are allocated and all
    /// are in use, [`Error::SourceFull`] when a fixed source has no room left
    /// (both [`retryable`](Error::is_retryable): progress and retry), or with
    /// the source's or registration's error.
    #[inline]
    pub fn get(&mut self) -> Result<Frag, Error> {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.grow()?;
                self.free.pop().expect("grow adds at least one fragment")
            }
        };
        let slot = self.slots[index as usize];
        Ok(Frag {
            ptr: slot.ptr,
            len: self.frag_size,
            index,
            list: self.id,
        })
    }

    /// Returns a fragment. O(1), never allocates.
    ///
    /// A fragment from another list is a bug: it trips a debug assertion, and
    /// in release builds it is logged and dropped rather than corrupting this list.
    #[inline]
    pub fn put(&mut self, frag: Frag) {
        debug_assert_eq!(
            frag.list, self.id,
            "fragment returned to a free list it does not belong to"
        );
        if frag.list != self.id {
            tracing::error!(
                frag_list = frag.list,
                list = self.id,
                "fragment returned to the wrong free list; dropped"
            );
            return;
        }
        debug_assert!(self.free.len() < self.slots.len());
        self.free.push(frag.index);
    }

    /// The registration of the chunk covering `frag`.
    ///
    /// # Panics
    ///
    /// If `frag` does not belong to this list.
    pub fn registration(&self, frag: &Frag) -> &Reg {
        assert_eq!(
            frag.list, self.id,
            "registration() asked for a fragment of another free list"
        );
        &self.regs[self.slots[frag.index as usize].chunk as usize]
    }

    /// The registration covering fragment `index`, if it has been allocated.
    pub fn registration_by_index(&self, index: u32) -> Option<&Reg> {
        let slot = self.slots.get(index as usize)?;
        Some(&self.regs[slot.chunk as usize])
    }

    /// Grows until at least `n` fragments are free (or fails as `get` does).
    pub fn reserve(&mut self, n: usize) -> Result<(), Error> {
        while self.free.len() < n {
            self.grow()?;
        }
        Ok(())
    }

    /// Bytes per fragment (the configured size rounded up to `frag_align`).
    pub fn frag_size(&self) -> usize {
        self.frag_size
    }

    /// Alignment of every fragment.
    pub fn frag_align(&self) -> usize {
        self.frag_align
    }

    /// The configured limit (0 = unlimited).
    pub fn max_frags(&self) -> usize {
        self.max_frags
    }

    /// Fragments allocated so far (free or in use).
    pub fn allocated(&self) -> usize {
        self.slots.len()
    }

    /// Fragments free right now.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Fragments handed out and not yet returned.
    pub fn in_use(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Chunks added so far.
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Start of fragment `index`, if allocated (whether free or in use), for
    /// transports that pass indices or offsets between processes.
    pub fn frag_ptr(&self, index: u32) -> Option<*mut u8> {
        self.slots.get(index as usize).map(|s| s.ptr.as_ptr())
    }

    fn limit(&self) -> usize {
        if self.max_frags == 0 {
            u32::MAX as usize
        } else {
            self.max_frags
        }
    }

    #[cold]
    fn grow(&mut self) -> Result<(), Error> {
        let allocated = self.slots.len();
        let limit = self.limit();
        if allocated >= limit {
            return Err(Error::Exhausted { max_frags: limit });
        }
        let mut count = self.frags_per_chunk.min(limit - allocated);
        if let Some(remaining) = self.source.remaining() {
            // Shrink the last chunk to what still fits (padding counted
            // pessimistically); if not even one fits, ask for one anyway so the
            // source reports why.
            let fit = remaining.saturating_sub(self.frag_align - 1) / self.frag_size;
            count = count.min(fit.max(1));
        }
        let bytes = count * self.frag_size; // checked in the constructor
        let chunk = self.source.alloc_chunk_aligned(bytes, self.frag_align)?;
        let base = chunk.as_ptr() as usize;
        let aligned = round_up(base, self.frag_align).ok_or(Error::TooLarge { len: bytes })?;
        if aligned - base + bytes > chunk.len() {
            return Err(Error::InvalidConfig(format!(
                "chunk source returned {} bytes at {base:#x}, but {bytes} bytes aligned to {} were needed",
                chunk.len(),
                self.frag_align
            )));
        }
        let chunk_index = u32::try_from(self.chunks.len()).expect("fewer chunks than fragments");
        // SAFETY: aligned - base <= chunk.len() (checked above), so the pointer
        // stays inside the chunk.
        let first = unsafe { chunk.as_ptr().add(aligned - base) };
        let reg = (self.register)(first, bytes)?;

        self.slots.reserve(count);
        for i in 0..count {
            // SAFETY: i * frag_size < bytes and first + bytes lies inside the chunk.
            let p = unsafe { first.add(i * self.frag_size) };
            self.slots.push(Slot {
                ptr: NonNull::new(p).expect("chunk memory is never at null"),
                chunk: chunk_index,
            });
        }
        // Capacity for every fragment, so put() never reallocates.
        self.free.reserve(self.slots.len() - self.free.len());
        // Lowest index on top of the stack: handed out first.
        self.free
            .extend((allocated..allocated + count).rev().map(|i| i as u32));
        self.chunks.push(chunk);
        self.regs.push(reg);
        tracing::trace!(
            list = self.id,
            count,
            bytes,
            total = self.slots.len(),
            "free list grew"
        );
        Ok(())
    }
}

impl<Reg> Drop for FreeList<Reg> {
    fn drop(&mut self) {
        let out = self.in_use();
        if out > 0 {
            tracing::warn!(
                list = self.id,
                in_use = out,
                "free list dropped with fragments still in use; leaking its chunks so they stay valid"
            );
            std::mem::forget(std::mem::take(&mut self.regs));
            std::mem::forget(std::mem::take(&mut self.chunks));
        }
    }
}

impl<Reg> fmt::Debug for FreeList<Reg> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FreeList")
            .field("id", &self.id)
            .field("frag_size", &self.frag_size)
            .field("frag_align", &self.frag_align)
            .field("frags_per_chunk", &self.frags_per_chunk)
            .field("max_frags", &self.max_frags)
            .field("allocated", &self.allocated())
            .field("available", &self.available())
            .field("chunks", &self.chunks.len())
            .finish_non_exhaustive()
    }
}

/// A fragment handed out by a [`FreeList`]. Not `Clone`: holding it is the
/// right to use its bytes until it is [`put`](FreeList::put) back.
///
/// It starts at the list's `frag_align` and is
/// [`frag_size`](FreeList::frag_size) bytes long (never empty). For fragments in
/// shared memory, the transport's protocol must keep peers from writing them while
/// a borrow of [`as_slice`](Frag::as_slice) lives.
///
/// Dropping a fragment instead of returning it leaks it from its list.
#[derive(Debug)]
pub struct Frag {
    ptr: NonNull<u8>,
    len: usize,
    index: u32,
    list: u32,
}

// SAFETY: a Frag is the unique handle to its bytes (the list hands each index
// out once until it is put back, and Frag is not Clone); the memory outlives it
// (the list leaks its chunks if dropped while fragments are out).
unsafe impl Send for Frag {}
// SAFETY: `&Frag` only gives shared (`&[u8]`) or raw access.
unsafe impl Sync for Frag {}

byte_span!(Frag, "fragment", slices);

impl Frag {
    /// The fragment's index in its list (see [`FreeList::frag_ptr`]).
    pub fn index(&self) -> u32 {
        self.index
    }
}
