//! This process's own segment: created at start with no name in any directory, so
//! that it never outlives the processes that map it (a crash at any moment leaves
//! nothing behind), and its heap shared out for windows.

use super::heap::Heap;
use super::segment::{self, Layout};
use rbtl_btl::{Error, Modex, ModuleId, Result, SharedMem};
use rbtl_mpool::SharedRegion;
use std::sync::Arc;

/// This process's slot (its place among the ranks the launcher put on this node,
/// which ring of every peer's segment it writes) and how many there are; the rank and
/// the job's size where the launcher does not say (`rbtlrun`, whose ranks all share
/// the node, and a job of one).
pub(super) fn slot_of(modex: &dyn Modex) -> (usize, usize) {
    let rank = modex.rank();
    modex
        .local_ranks()
        .and_then(|here| Some((here.iter().position(|&r| r == rank)?, here.len())))
        .unwrap_or((rank as usize, modex.size() as usize))
}

/// Refuse a `layout` whose segments, one per rank of the node, would take more than
/// the machine's memory if every page were used. (They are backed as used: most runs
/// use a fraction; but a run that did use them all would meet the out-of-memory killer
/// without a word.)
pub(super) fn fits_the_machine(layout: &Layout) -> Result<()> {
    let Some(total) = memory_total() else {
        return Ok(());
    };
    let each = layout.bytes();
    let all = each.saturating_mul(layout.nranks);
    if all <= total {
        return Ok(());
    }
    let mib = |b: usize| b >> 20;
    Err(Error::NotAvailable(format!(
        "the sm segments of this node's {} ranks could take {} MiB when fully used ({} MiB each: \
         rings of {} KiB per sender, a heap of {} MiB), more than this machine's {} MiB: lower \
         btl_sm_heap_size or btl_sm_rings_size, or run fewer ranks per node",
        layout.nranks,
        mib(all),
        mib(each),
        layout.ring.data_bytes >> 10,
        mib(layout.heap_bytes),
        mib(total)
    )))
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), if readable.
fn memory_total() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

pub(super) struct OwnSegment {
    region: Arc<SharedRegion>,
    layout: Layout,
    /// What of the segment's heap is handed out.
    heap: Heap,
}

impl OwnSegment {
    /// Create the segment of rank `rank`, of `layout`: unnamed (peers open it through
    /// `/proc/<pid>/fd/<fd>`, see [`SharedRegion::create_unnamed`]), its pages backed
    /// as they are first touched.
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

    /// Tell the peer of slot `slot` (through its flag in this segment, which it maps)
    /// that this process removed it.
    pub fn mark_removed(&self, slot: usize) {
        if slot < self.layout.nranks {
            // SAFETY: our segment, of our layout, mapped for as long as `self`; the
            // slot is within the layout.
            unsafe { segment::RemovedFlag::new(self.region.as_ptr(), &self.layout, slot) }.set();
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
