//! The layout of an `sm` process's shared segment: a header, a flag per slot (set
//! once this process removed that slot's rank, for it to see), the registration key
//! table, one message ring per possible sender (a slot: a place among the node's
//! ranks), and a heap for memory the process shares on purpose (windows).

use super::ring::RingLayout;
use rbtl_btl::transport_kit::keytable;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"RBTLSM04");
const HEADER_BYTES: usize = 4096;

/// The header at the start of a segment.
#[repr(C)]
pub struct Header {
    magic: AtomicU64,
    module_id: AtomicU64,
    nranks: AtomicU32,
}

/// Sizes that decide the layout; peers must agree on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Slots: the node's ranks, or the job's where the launcher does not say which
    /// are on the node (one ring per possible sender).
    pub nranks: usize,
    /// Each ring's shape.
    pub ring: RingLayout,
    /// Entries in the key table.
    pub registrations: usize,
    /// Bytes of the heap.
    pub heap_bytes: usize,
}

fn page(n: usize) -> usize {
    n.next_multiple_of(4096)
}

impl Layout {
    /// Offset of the flag of slot `slot`: set once the segment's owner removed its
    /// rank.
    pub fn removed_offset(&self, slot: usize) -> usize {
        HEADER_BYTES + slot
    }

    /// Offset of the key table.
    pub fn table_offset(&self) -> usize {
        HEADER_BYTES + page(self.nranks)
    }

    /// Offset of the ring that carries messages from slot `sender`.
    pub fn ring_offset(&self, sender: usize) -> usize {
        self.table_offset()
            + page(keytable::table_bytes(self.registrations))
            + sender * page(self.ring.bytes())
    }

    /// Offset of the heap.
    pub fn heap_offset(&self) -> usize {
        self.ring_offset(self.nranks)
    }

    /// Total bytes of a segment.
    pub fn bytes(&self) -> usize {
        self.heap_offset() + page(self.heap_bytes)
    }

    /// [`Layout::bytes`], or `None` when it overflows (sizes from parameters): every
    /// offset of a layout for which this is `Some` is computed without overflow.
    pub fn checked_bytes(&self) -> Option<usize> {
        let ring = self.ring.checked_bytes()?.checked_next_multiple_of(4096)?;
        HEADER_BYTES
            .checked_add(self.nranks.checked_next_multiple_of(4096)?)?
            .checked_add(
                keytable::table_bytes_checked(self.registrations)?
                    .checked_next_multiple_of(4096)?,
            )?
            .checked_add(ring.checked_mul(self.nranks)?)?
            .checked_add(self.heap_bytes.checked_next_multiple_of(4096)?)
    }

    /// The layout as published in the modex.
    pub fn encode(&self) -> [u64; 4] {
        [
            self.nranks as u64,
            (self.ring.nslots as u64) << 32 | self.registrations as u64,
            self.ring.data_bytes as u64,
            self.heap_bytes as u64,
        ]
    }

    /// The layout from the modex.
    pub fn decode(w: [u64; 4]) -> Layout {
        Layout {
            nranks: w[0] as usize,
            ring: RingLayout {
                nslots: (w[1] >> 32) as usize,
                data_bytes: w[2] as usize,
            },
            registrations: (w[1] & 0xffff_ffff) as usize,
            heap_bytes: w[3] as usize,
        }
    }
}

/// The flag, in a segment mapped here, that says its owner removed one rank: the
/// owner sets it in `del_procs`, the rank reads it in the segment it maps.
pub struct RemovedFlag(NonNull<AtomicU8>);

// SAFETY: the flag is only accessed through an atomic, in a segment that its holder
// keeps mapped.
unsafe impl Send for RemovedFlag {}

impl RemovedFlag {
    /// The flag of rank `rank` in the segment of `layout` mapped at `base`.
    ///
    /// # Safety
    ///
    /// `base` is a mapped segment of `layout`, `rank < layout.nranks`, and the segment
    /// stays mapped while the flag is used.
    pub unsafe fn new(base: *mut u8, layout: &Layout, rank: usize) -> RemovedFlag {
        // SAFETY: forwarded contract: the offset lies inside the segment's flags, and a
        // mapped segment's addresses are not null.
        RemovedFlag(unsafe { NonNull::new_unchecked(base.add(layout.removed_offset(rank)).cast()) })
    }

    /// Whether the segment's owner has removed the rank.
    pub fn is_set(&self) -> bool {
        // SAFETY: inside a segment mapped for as long as `self` (see `new`).
        unsafe { self.0.as_ref() }.load(Ordering::Acquire) != 0
    }

    /// The owner removed the rank.
    pub fn set(&self) {
        // SAFETY: as in `is_set`.
        unsafe { self.0.as_ref() }.store(1, Ordering::Release);
    }
}

/// The header of the segment mapped at `base`.
///
/// # Safety
///
/// `base` points to a mapped segment of at least 4096 bytes that outlives the reference.
pub unsafe fn header<'a>(base: *mut u8) -> &'a Header {
    // SAFETY: forwarded contract; the header is only accessed through atomics.
    unsafe { &*base.cast::<Header>() }
}

impl Header {
    /// Stamp a fresh segment.
    pub fn init(&self, module_id: u64, nranks: usize) {
        self.module_id.store(module_id, Ordering::Relaxed);
        self.nranks.store(nranks as u32, Ordering::Relaxed);
        self.magic.store(MAGIC, Ordering::Release);
    }

    /// Whether this is a segment of module `module_id`.
    pub fn is_of(&self, module_id: u64) -> bool {
        self.magic.load(Ordering::Acquire) == MAGIC
            && self.module_id.load(Ordering::Relaxed) == module_id
    }
}
