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
/// the machine's memory (`total`, [`memory_total`]) if every page were used. (They are
/// backed as used: most runs use a fraction; but a run that did use them all would meet
/// the out-of-memory killer without a word.)
pub(super) fn fits_the_machine(layout: &Layout, total: Option<usize>) -> Result<()> {
    let Some(total) = total else {
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

/// Least and most heap that `btl_sm_heap_size = 0` gives a process.
pub(super) const AUTO_HEAP_MIN: usize = 32 << 20;
pub(super) const AUTO_HEAP_MAX: usize = 1 << 30;

/// The heap of each of this node's `slots` ranks under `btl_sm_heap_size = 0`: the
/// ranks' heaps together a quarter of the machine's memory (`total`,
/// [`memory_total`]), each between [`AUTO_HEAP_MIN`] and [`AUTO_HEAP_MAX`], whole MiB.
/// (Every rank of the node computes the same, as their layouts must agree.)
pub(super) fn auto_heap(total: Option<usize>, slots: usize) -> usize {
    let share = total.map_or(AUTO_HEAP_MIN, |t| t / 4 / slots.max(1));
    (share & !((1 << 20) - 1)).clamp(AUTO_HEAP_MIN, AUTO_HEAP_MAX)
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), if readable.
pub(super) fn memory_total() -> Option<usize> {
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

    /// Give back memory of [`OwnSegment::alloc_shared`], and its pages to the system
    /// (the segment's file gets a hole there: read again, they are zeros).
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
        let pages = mem.len.next_multiple_of(4096);
        // SAFETY: the range was a live allocation (the heap just said so): whole pages
        // of our segment's heap, mapped shared and writable; nothing of ours refers to
        // it any more (peers map it, and read zeros if they still look).
        let rc = unsafe { libc::madvise(mem.ptr.cast(), pages, libc::MADV_REMOVE) };
        if rc != 0 {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                pages,
                "sm: the pages of freed shared memory stay backed"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{auto_heap, OwnSegment, AUTO_HEAP_MAX, AUTO_HEAP_MIN};
    use crate::ring::RingLayout;
    use crate::segment::Layout;

    /// Under `btl_sm_heap_size = 0` the node's heaps together take a quarter of the
    /// machine's memory, each within its bounds, in whole MiB.
    #[test]
    fn the_automatic_heap_is_a_share_of_a_quarter_of_the_machine() {
        const GIB: usize = 1 << 30;
        assert_eq!(auto_heap(Some(23 * GIB), 2), AUTO_HEAP_MAX);
        assert_eq!(auto_heap(Some(23 * GIB), 64), 92 << 20);
        assert_eq!(auto_heap(Some(23 * GIB + 12345), 64), 92 << 20);
        assert_eq!(auto_heap(Some(GIB), 64), AUTO_HEAP_MIN);
        assert_eq!(auto_heap(None, 2), AUTO_HEAP_MIN);
        assert_eq!(auto_heap(Some(23 * GIB), 0), AUTO_HEAP_MAX);
    }

    /// Bytes of the segment's file backed by memory.
    fn backed(own: &OwnSegment) -> usize {
        let fd = own
            .region()
            .fd()
            .expect("an unnamed segment has its descriptor");
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: the segment holds the descriptor open for as long as `own` lives;
        // `st` has room for the answer.
        let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
        assert_eq!(rc, 0, "fstat of the segment");
        // SAFETY: fstat succeeded: it filled `st`.
        unsafe { st.assume_init() }.st_blocks as usize * 512
    }

    /// Freed shared memory goes back to the system at once: a window of a large heap
    /// does not keep its pages once freed; what is handed out again reads zeros.
    #[test]
    fn freed_shared_memory_gives_its_pages_back() {
        let layout = Layout {
            nranks: 1,
            ring: RingLayout {
                nslots: 2,
                data_bytes: 4096,
            },
            registrations: 1,
            heap_bytes: 8 << 20,
        };
        let mut own = OwnSegment::create(0, layout).unwrap();
        let at_start = backed(&own);
        let mem = own.alloc_shared(4 << 20).unwrap();
        // SAFETY: the allocation is `mem.len` bytes of our mapped segment.
        unsafe { std::ptr::write_bytes(mem.ptr, 7, mem.len) };
        assert!(
            backed(&own) >= at_start + (4 << 20),
            "written pages are backed"
        );
        own.free_shared(mem).unwrap();
        assert!(
            backed(&own) < at_start + (64 << 10),
            "{} bytes still backed after the free (at start {at_start})",
            backed(&own)
        );
        let again = own.alloc_shared(4 << 20).unwrap();
        assert_eq!(again.ptr, mem.ptr, "first fit hands out the same range");
        // SAFETY: as above.
        let bytes = unsafe { std::slice::from_raw_parts(again.ptr, again.len) };
        assert!(bytes.iter().all(|&b| b == 0));
    }
}
