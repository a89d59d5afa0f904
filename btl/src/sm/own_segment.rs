//! This process's own segment: created at start with no name in any directory, so
//! that it never outlives the processes that map it (a crash at any moment leaves
//! nothing behind), and its heap shared out for windows.

use super::heap::Heap;
use super::segment::{self, Layout};
use crate::{Error, ModuleId, Result, SharedMem};
use rbtl_mpool::SharedRegion;
use std::sync::Arc;

pub(super) struct OwnSegment {
    region: Arc<SharedRegion>,
    layout: Layout,
    /// What of the segment's heap is handed out.
    heap: Heap,
}

impl OwnSegment {
    /// Create the segment of rank `rank`, of `layout`: unnamed (peers open it through
    /// `/proc/<pid>/fd/<fd>`, see [`SharedRegion::create_unnamed`]).
    pub fn create(rank: u32, layout: Layout) -> Result<OwnSegment> {
        let region = Arc::new(SharedRegion::create_unnamed(
            &format!("sm.{rank}"),
            layout.bytes(),
        )?);
        Ok(OwnSegment {
            region,
            layout,
            heap: Heap::new(layout.heap_bytes),
        })
    }

    /// Stamp the segment's header as that of module `id`.
    pub fn stamp(&self, id: ModuleId) {
        // SAFETY: the segment is ours, mapped and at least one page long.
        unsafe { segment::header(self.region.as_ptr()) }.init(id.0, self.layout.nranks);
    }

    /// Tell rank `rank` (through its flag in this segment, which it maps) that this
    /// process removed it.
    pub fn mark_removed(&self, rank: u32) {
        if (rank as usize) < self.layout.nranks {
            // SAFETY: our segment, of our layout, mapped for as long as `self`; the
            // rank is within the layout.
            unsafe { segment::RemovedFlag::new(self.region.as_ptr(), &self.layout, rank as usize) }
                .set();
        }
    }

    pub fn region(&self) -> &Arc<SharedRegion> {
        &self.region
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// `len` bytes of the heap, or `None` when it cannot hold them.
    pub fn alloc_shared(&mut self, len: usize) -> Option<SharedMem> {
        let Some(start) = self.heap.alloc(len) else {
            tracing::info!(
                len,
                free = self.heap.largest_free(),
                "sm heap cannot hold it: raise btl_sm_heap_size"
            );
            return None;
        };
        // SAFETY: [heap_offset + start, + len) lies inside our segment's heap.
        let ptr = unsafe { self.region.as_ptr().add(self.layout.heap_offset() + start) };
        Some(SharedMem { ptr, len })
    }

    /// Give back memory of [`OwnSegment::alloc_shared`].
    pub fn free_shared(&mut self, mem: SharedMem) -> Result<()> {
        let unknown = || Error::UnknownSharedMemory {
            addr: mem.ptr as usize,
            len: mem.len,
        };
        let heap = self.region.as_ptr() as usize + self.layout.heap_offset();
        let start = (mem.ptr as usize).checked_sub(heap).ok_or_else(unknown)?;
        if !self.heap.free(start, mem.len) {
            return Err(unknown());
        }
        Ok(())
    }
}
