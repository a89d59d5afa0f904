//! This process's own segment: created at start (after removing stale segments of
//! crashed owners), unlinked as soon as every local peer has mapped it, so that a crash
//! leaves nothing behind, and its heap shared out for windows.

use super::heap::Heap;
use super::segment::{self, Layout};
use crate::{Error, ModuleId, Result, SharedMem};
use rbtl_mpool::SharedRegion;
use std::path::Path;
use std::sync::Arc;

pub(super) struct OwnSegment {
    region: Arc<SharedRegion>,
    layout: Layout,
    /// Peers connected to us, each of which maps the segment.
    attach_expected: u32,
    /// What of the segment's heap is handed out.
    heap: Heap,
}

impl OwnSegment {
    /// Create the segment of rank `rank`, of `layout`, in `dir`.
    pub fn create(dir: &Path, rank: u32, layout: Layout) -> Result<OwnSegment> {
        match rbtl_mpool::cleanup_stale_in(dir) {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!(?removed, "removed stale segments")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(%e, "could not look for stale segments"),
        }
        let region = Arc::new(SharedRegion::create_in(
            dir,
            &format!("sm.{rank}"),
            layout.bytes(),
        )?);
        Ok(OwnSegment {
            region,
            layout,
            attach_expected: 0,
            heap: Heap::new(layout.heap_bytes),
        })
    }

    /// Stamp the segment's header as that of module `id`.
    pub fn stamp(&self, id: ModuleId) {
        // SAFETY: the segment is ours, mapped and at least one page long.
        unsafe { segment::header(self.region.as_ptr()) }.init(id.0, self.layout.nranks);
    }

    pub fn region(&self) -> &Arc<SharedRegion> {
        &self.region
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// One more peer has connected, and so maps the segment.
    pub fn add_attacher(&mut self) {
        self.attach_expected += 1;
    }

    /// Whether the segment still has a name that connected peers have yet to map.
    pub fn awaits_attach(&self) -> bool {
        self.attach_expected > 0 && !self.region.is_unlinked()
    }

    /// Unlink the segment once every connected peer has mapped it.
    pub fn unlink_when_attached(&self) {
        // SAFETY: our own mapped segment.
        let header = unsafe { segment::header(self.region.as_ptr()) };
        if header.attached.load(std::sync::atomic::Ordering::Acquire) >= self.attach_expected {
            if let Err(e) = self.region.unlink() {
                tracing::warn!(%e, "could not unlink the sm segment");
            }
        }
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
