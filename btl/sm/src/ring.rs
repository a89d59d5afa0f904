// Whole on purpose (over 600 lines): one data structure, whose two ends must agree on
// the slot format and the order of publication (best read side by side).
//! A single-producer single-consumer message ring in shared memory: the `sm`
//! transport's path for sends. One ring per (sender, receiver) pair lives in the
//! receiver's segment; the sender writes, the receiver polls.
//!
//! Layout: a control block written only by the consumer (its slot and data tails, each
//! on its own cache line), then `nslots` 128-byte slots, then a data area.
//! A slot is published by storing its sequence number (absolute index + 1) last, with
//! release ordering; the consumer polls the sequence of the next slot it expects, so
//! stale slots of earlier laps are never mistaken for new ones. Messages of one
//! segment and at most [`INLINE_MAX`] bytes travel inside their slot;
//! larger ones, and any with several segments, go to the data area at a 64-byte
//! aligned position the slot names, never wrapping around its end.
//! No locks, no system calls: the producer reads the consumer's tails only when its
//! cached copies say the ring is full. (Except once per end: the first record that uses
//! the data area maps all of it into the process.)

use rbtl_btl::copy_bytes;
use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Bytes of a slot: two cache lines, so that a message of up to [`INLINE_MAX`] bytes
/// (an MPI envelope and 64 bytes of data) travels inside it; small ones touch only the
/// first line.
pub const SLOT_BYTES: usize = 128;
/// Most bytes carried inside a slot.
pub const INLINE_MAX: usize = SLOT_BYTES - 24;
const CTRL_BYTES: usize = 128;
/// Record kinds: the whole message in the slot; the whole message (and its segment
/// table) in the data area; a small head (a protocol header) in the slot and the body
/// in the data area, page-aligned when large, so that copying it in and out runs at
/// full speed whatever the user buffers' alignment.
const DATA: u8 = 0;
const INLINE: u8 = 1;
const SPLIT: u8 = 2;
/// Smallest body worth a split record.
const SPLIT_MIN: usize = 256;
/// Bodies of at least this many bytes start on a page boundary.
const PAGE: usize = 4096;

const LINE: usize = 64;

/// Map every page of the data area (`len` bytes at `at`, page-aligned) into this
/// process, writable, without touching their contents. The area is used in turn from
/// start to end: left to fault in as records first reach each page, the first lap
/// costs a fault per page, which showed in the latency of small messages (measured:
/// see docs/performance.md).
#[cold]
#[inline(never)]
fn map_in(at: *mut u8, len: usize) {
    // SAFETY: the data area is mapped (`Raw::new`'s contract); MADV_POPULATE_WRITE only
    // faults pages in, it leaves their contents alone.
    let rc = unsafe { libc::madvise(at.cast(), len, libc::MADV_POPULATE_WRITE) };
    if rc != 0 {
        // Before Linux 5.14: reading a byte maps a shared page too.
        for off in (0..len).step_by(PAGE) {
            // SAFETY: inside the mapped area, read atomically (the other end may be
            // writing it); the value is not used.
            unsafe { (*at.add(off).cast::<AtomicU8>()).load(Ordering::Relaxed) };
        }
    }
}

#[repr(C, align(128))]
struct Slot {
    seq: AtomicU64,
    len: u32,
    tag: u8,
    nseg: u8,
    /// [`INLINE`], [`DATA`] or [`SPLIT`].
    kind: u8,
    /// For [`SPLIT`]: bytes of the head kept in the slot.
    head_len: u8,
    data_pos: u64,
    bytes: [u8; INLINE_MAX],
}

const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_BYTES);

#[repr(C)]
struct Ctrl {
    slot_tail: AtomicU64,
    _a: [u8; LINE - 8],
    data_tail: AtomicU64,
    _b: [u8; LINE - 8],
}

const _: () = assert!(std::mem::size_of::<Ctrl>() == CTRL_BYTES);

/// Ask the cache for the line at `p` (a hint; nothing on other architectures).
#[inline(always)]
fn prefetch(p: *const Slot) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ask for the line at `p` in a state that allows writing it (a hint, on processors
/// that have `prefetchw`). Taking a line away from a core that polls it costs a round
/// trip between the cores; asked for early, that trip overlaps the work done before
/// the write.
#[inline(always)]
fn prefetch_for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetchw` (present, see `has_prefetchw`) is a hint: it never faults,
    // whatever the address, and changes no register, flag or memory.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Whether this processor has `prefetchw` (CPUID leaf 8000_0001h, ECX bit 8).
fn has_prefetchw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // Leaf 8000_0000h gives the highest extended leaf: 8000_0001h is only asked for
        // where it exists.
        __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The shape of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingLayout {
    /// Number of slots, a power of two (an index is reduced by a mask, not a
    /// division: the poll loop computes one per look).
    pub nslots: usize,
    /// Bytes of the data area, a power of two of at least 64 (a position is reduced
    /// by a mask, not a division: small records pay for it twice on their way).
    pub data_bytes: usize,
}

impl RingLayout {
    /// Bytes the ring occupies.
    pub const fn bytes(&self) -> usize {
        self.data_offset() + self.data_bytes
    }

    /// Where the data area starts (page-aligned, as the ring itself is).
    const fn data_offset(&self) -> usize {
        (CTRL_BYTES + self.nslots * SLOT_BYTES).next_multiple_of(PAGE)
    }

    /// [`RingLayout::bytes`], or `None` when it overflows (sizes from parameters).
    pub fn checked_bytes(&self) -> Option<usize> {
        let slots = self
            .nslots
            .checked_mul(SLOT_BYTES)?
            .checked_add(CTRL_BYTES)?;
        slots
            .checked_next_multiple_of(PAGE)?
            .checked_add(self.data_bytes)
    }

    /// Largest message (with `nseg` segments) that fits the data area.
    pub const fn max_message(&self, nseg: usize) -> usize {
        self.data_bytes - seg_table_bytes(nseg)
    }
}

const fn seg_table_bytes(nseg: usize) -> usize {
    if nseg > 1 {
        nseg * 4
    } else {
        0
    }
}

const fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Raw pointers into one ring.
struct Raw {
    ctrl: *const Ctrl,
    slots: *mut Slot,
    data: *mut u8,
    layout: RingLayout,
    /// Whether this end has mapped the data area in yet.
    data_mapped: Cell<bool>,
}

impl Raw {
    /// # Safety
    /// `base` is page-aligned and points to `layout.bytes()` bytes of ring memory
    /// that stays mapped while the returned value is used.
    unsafe fn new(base: *mut u8, layout: RingLayout) -> Raw {
        debug_assert!(layout.data_bytes.is_power_of_two() && layout.data_bytes >= LINE);
        Raw {
            ctrl: base.cast::<Ctrl>(),
            // SAFETY: inside the ring memory per the contract.
            slots: unsafe { base.add(CTRL_BYTES) }.cast::<Slot>(),
            // SAFETY: as above.
            data: unsafe { base.add(layout.data_offset()) },
            layout,
            data_mapped: Cell::new(false),
        }
    }

    /// Map the data area in, the first time this end uses it.
    #[inline]
    fn map_data_once(&self) {
        if !self.data_mapped.replace(true) {
            map_in(self.data, self.layout.data_bytes);
        }
    }

    /// Where absolute data position `pos` lies in the data area.
    #[inline(always)]
    fn offset(&self, pos: u64) -> usize {
        (pos & (self.layout.data_bytes as u64 - 1)) as usize
    }

    fn slot(&self, index: u64) -> *mut Slot {
        debug_assert!(self.layout.nslots.is_power_of_two());
        // SAFETY: the index is reduced modulo nslots (a power of two), so the slot lies
        // inside the ring.
        unsafe {
            self.slots
                .add((index & (self.layout.nslots as u64 - 1)) as usize)
        }
    }

    fn ctrl(&self) -> &Ctrl {
        // SAFETY: the control block is inside the mapped ring and only accessed
        // through atomics.
        unsafe { &*self.ctrl }
    }
}

/// The sender's end.
pub struct Producer {
    raw: Raw,
    head: u64,
    data_head: u64,
    slot_tail: u64,
    data_tail: u64,
    /// Whether [`Producer::prepare_next`] can ask for lines ahead of writes.
    prefetch_write: bool,
}

// SAFETY: a Producer is the only writer of its ring's slots and data; the memory is
// kept mapped by the owner of the Producer (the module holds the segment).
unsafe impl Send for Producer {}

impl Producer {
    /// The producer of the (zeroed, or never used by another producer) ring at `base`.
    ///
    /// # Safety
    ///
    /// As for the ring memory in general: `base` page-aligned, `layout.bytes()` bytes,
    /// mapped while the producer lives; at most one producer per ring.
    pub unsafe fn new(base: *mut u8, layout: RingLayout) -> Producer {
        Producer {
            // SAFETY: forwarded contract.
            raw: unsafe { Raw::new(base, layout) },
            head: 0,
            data_head: 0,
            slot_tail: 0,
            data_tail: 0,
            prefetch_write: has_prefetchw(),
        }
    }

    /// Whether the consumer has taken everything published so far.
    pub fn is_drained(&mut self) -> bool {
        self.slot_tail = self.raw.ctrl().slot_tail.load(Ordering::Acquire);
        self.slot_tail == self.head
    }

    /// Start taking the lines of the next slot for writing: called when a reply to the
    /// consumer is likely soon (the consumer polls the first line, so writing it costs a
    /// round trip to take it away). Both lines: a message of more than 40 bytes reaches
    /// the second, which would otherwise be taken only at the write, while the consumer
    /// takes the first back.
    #[inline(always)]
    pub fn prepare_next(&self) {
        if self.prefetch_write {
            let slot = self.raw.slot(self.head).cast::<u8>();
            prefetch_for_write(slot);
            prefetch_for_write(slot.wrapping_add(LINE));
        }
    }

    /// Reserve `need` bytes of the data area starting at a multiple of `align` (a power
    /// of two), never across its end; the absolute position and the address. `None`
    /// when the consumer still holds the room.
    fn reserve(&mut self, need: u64, align: u64) -> Option<(u64, *mut u8)> {
        debug_assert!(align.is_power_of_two());
        let size = self.raw.layout.data_bytes as u64;
        self.raw.map_data_once();
        assert!(
            need <= size,
            "record of {need} bytes exceeds the ring's data area"
        );
        let off = self.raw.offset(self.data_head) as u64;
        let aligned = (off + align - 1) & !(align - 1);
        let skip = if aligned + need > size {
            size - off
        } else {
            aligned - off
        };
        // Room unless the record would reach data the consumer still holds; an empty
        // area takes any record (skipped bytes are never read).
        let head = self.data_head;
        let fits = |tail: u64| tail == head || head + skip + need - tail <= size;
        if !fits(self.data_tail) {
            self.data_tail = self.raw.ctrl().data_tail.load(Ordering::Acquire);
            if !fits(self.data_tail) {
                return None;
            }
        }
        let pos = head + skip;
        self.data_head = pos + need;
        // SAFETY: [offset(pos), + need) lies inside the data area (no wrap, by the
        // skip) and was released by the consumer (checked above).
        Some((pos, unsafe { self.raw.data.add(self.raw.offset(pos)) }))
    }

    /// Publish `head` then `body`, together at most [`INLINE_MAX`] bytes, as one
    /// segment inside a slot: the path of every small message. False when the ring
    /// is full.
    #[inline]
    pub fn push_small(&mut self, tag: u8, head: &[u8], body: &[u8]) -> bool {
        let len = head.len() + body.len();
        debug_assert!(len <= INLINE_MAX);
        if self.head - self.slot_tail >= self.raw.layout.nslots as u64 {
            self.slot_tail = self.raw.ctrl().slot_tail.load(Ordering::Acquire);
            if self.head - self.slot_tail >= self.raw.layout.nslots as u64 {
                return false;
            }
        }
        let slot = self.raw.slot(self.head);
        // SAFETY: `slot` is inside the ring and released by the consumer (checked
        // above); we are its only writer. The two copies fill at most INLINE_MAX
        // bytes of its room (asserted by the caller); the sources are live slices
        // outside the ring. The header fields are published by the release store.
        unsafe {
            let in_slot = ptr::addr_of_mut!((*slot).bytes).cast::<u8>();
            copy_bytes(head.as_ptr(), in_slot, head.len());
            copy_bytes(body.as_ptr(), in_slot.add(head.len()), body.len());
            ptr::addr_of_mut!((*slot).len).write(len as u32);
            ptr::addr_of_mut!((*slot).tag).write(tag);
            ptr::addr_of_mut!((*slot).nseg).write(1);
            ptr::addr_of_mut!((*slot).kind).write(INLINE);
            (*slot).seq.store(self.head + 1, Ordering::Release);
        }
        self.head += 1;
        true
    }

    /// Publish a message of `parts` (gathered in order) under `tag`, cut into segments
    /// of `seg_lens` (one segment when empty). Returns false, having written nothing,
    /// when the ring is full. Two parts, a small head and a larger body, arrive as two
    /// segments (the body page-aligned when large); otherwise as cut.
    pub fn push(&mut self, tag: u8, parts: &[&[u8]], seg_lens: &[usize]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let nseg = seg_lens.len().max(1);
        let layout = self.raw.layout;
        if self.head - self.slot_tail >= layout.nslots as u64 {
            self.slot_tail = self.raw.ctrl().slot_tail.load(Ordering::Acquire);
            if self.head - self.slot_tail >= layout.nslots as u64 {
                return false;
            }
        }
        let slot = self.raw.slot(self.head);
        // SAFETY: `slot` is inside the ring and released by the consumer (checked
        // above); we are its only writer.
        let in_slot = unsafe { ptr::addr_of_mut!((*slot).bytes) }.cast::<u8>();
        let split = seg_lens.is_empty()
            && parts.len() == 2
            && parts[0].len() <= INLINE_MAX
            && parts[1].len() >= SPLIT_MIN;
        let (kind, head_len, data_pos) = if nseg == 1 && len <= INLINE_MAX {
            let mut off = 0;
            for p in parts {
                // SAFETY: the parts add up to at most INLINE_MAX bytes, the slot's room;
                // the sources are live slices outside the ring.
                unsafe { copy_bytes(p.as_ptr(), in_slot.add(off), p.len()) };
                off += p.len();
            }
            (INLINE, 0, 0)
        } else if split {
            let (head, body) = (parts[0], parts[1]);
            let align = if body.len() >= PAGE { PAGE } else { LINE } as u64;
            let Some((pos, at)) = self.reserve(round_up(body.len(), LINE) as u64, align) else {
                return false;
            };
            // SAFETY: the head fits the slot, the body its reservation; sources are
            // live slices outside the ring.
            unsafe {
                copy_bytes(head.as_ptr(), in_slot, head.len());
                copy_bytes(body.as_ptr(), at, body.len());
            }
            (SPLIT, head.len() as u8, pos)
        } else {
            let table = seg_table_bytes(nseg);
            let Some((pos, at)) = self.reserve(round_up(table + len, LINE) as u64, LINE as u64)
            else {
                return false;
            };
            if nseg > 1 {
                for (i, &l) in seg_lens.iter().enumerate() {
                    // SAFETY: the segment table is the first `table` bytes at `at`.
                    unsafe { at.add(i * 4).cast::<u32>().write_unaligned(l as u32) };
                }
            }
            let mut off = table;
            for p in parts {
                // SAFETY: the reservation holds the table and `len` bytes; sources are
                // live slices outside the ring.
                unsafe { copy_bytes(p.as_ptr(), at.add(off), p.len()) };
                off += p.len();
            }
            (DATA, 0, pos)
        };
        // SAFETY: header fields of our released slot; published by the release store.
        unsafe {
            ptr::addr_of_mut!((*slot).len).write(len as u32);
            ptr::addr_of_mut!((*slot).tag).write(tag);
            ptr::addr_of_mut!((*slot).nseg).write(nseg as u8);
            ptr::addr_of_mut!((*slot).kind).write(kind);
            ptr::addr_of_mut!((*slot).head_len).write(head_len);
            ptr::addr_of_mut!((*slot).data_pos).write(data_pos);
            (*slot).seq.store(self.head + 1, Ordering::Release);
        }
        self.head += 1;
        true
    }
}

/// A received message, valid until [`Consumer::release`].
pub struct Record {
    /// The tag it was sent with.
    pub tag: u8,
    nseg: usize,
    /// Start and length of the payload (of the body, for a split record).
    data: *const u8,
    len: usize,
    /// The segment lengths (u32 each) when there are several.
    table: *const u8,
    /// The head kept in the slot, for a split record.
    head: Option<(*const u8, usize)>,
    data_end: Option<u64>,
}

impl Record {
    /// A record of no bytes in one segment (standing for a malformed one) whose slot's
    /// bytes are at `in_slot`.
    #[cold]
    #[inline(never)]
    fn empty(tag: u8, in_slot: *const u8, data_end: Option<u64>) -> Record {
        Record {
            tag,
            nseg: 1,
            data: in_slot,
            len: 0,
            table: ptr::null(),
            head: None,
            data_end,
        }
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.nseg
    }

    /// The whole payload as one slice, for a record of one segment.
    ///
    /// # Safety
    ///
    /// Use it only before the record is released: after that the producer may
    /// overwrite the memory.
    pub unsafe fn payload<'a>(&self) -> &'a [u8] {
        debug_assert_eq!(self.nseg, 1);
        // SAFETY: (data, len) lies inside the ring's published, unreleased record.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }

    /// The segments as slices, into `out`; their number.
    ///
    /// # Safety
    ///
    /// As [`Record::payload`].
    pub unsafe fn segments(&self, out: &mut [&[u8]; rbtl_btl::MAX_SEGMENTS]) -> usize {
        // SAFETY: (data, len) and the head lie inside the ring's published, unreleased
        // record (forwarded contract).
        let body = unsafe { std::slice::from_raw_parts(self.data, self.len) };
        if let Some((head, head_len)) = self.head {
            // SAFETY: as above.
            out[0] = unsafe { std::slice::from_raw_parts(head, head_len) };
            out[1] = body;
            return 2;
        }
        if self.nseg == 1 {
            out[0] = body;
            return 1;
        }
        let mut rest = body;
        for (i, o) in out.iter_mut().enumerate().take(self.nseg) {
            // SAFETY: the table holds `nseg` u32 lengths, written before publication.
            let l = (unsafe { self.table.add(i * 4).cast::<u32>().read_unaligned() } as usize)
                .min(rest.len());
            let (seg, tail) = rest.split_at(l);
            *o = seg;
            rest = tail;
        }
        self.nseg
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.len + self.head.map_or(0, |h| h.1)
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The receiver's end.
pub struct Consumer {
    raw: Raw,
    next: u64,
}

// SAFETY: the consumer is the only reader of published records and the only writer of
// the control block; the module that owns it keeps the memory mapped.
unsafe impl Send for Consumer {}

impl Consumer {
    /// The consumer of the zeroed ring at `base`.
    ///
    /// # Safety
    ///
    /// As [`Producer::new`]; at most one consumer per ring.
    pub unsafe fn new(base: *mut u8, layout: RingLayout) -> Consumer {
        Consumer {
            // SAFETY: forwarded contract.
            raw: unsafe { Raw::new(base, layout) },
            next: 0,
        }
    }

    /// Whether a message was published that is not read yet.
    pub fn has_unread(&self) -> bool {
        let slot = self.raw.slot(self.next);
        // SAFETY: `slot` is inside the ring; `seq` is only accessed atomically.
        unsafe { (*slot).seq.load(Ordering::Acquire) == self.next + 1 }
    }

    /// The next message, if one was published.
    #[inline]
    pub fn peek(&self) -> Option<Record> {
        let slot = self.raw.slot(self.next);
        // SAFETY: `slot` is inside the ring; `seq` is only accessed atomically.
        if unsafe { (*slot).seq.load(Ordering::Acquire) } != self.next + 1 {
            return None;
        }
        prefetch(self.raw.slot(self.next + 2));
        prefetch(self.raw.slot(self.next + 3));
        // SAFETY: the acquire load above makes the producer's writes of this slot
        // (and of its data) visible; they do not change until we release it.
        unsafe {
            let len = ptr::addr_of!((*slot).len).read() as usize;
            let tag = ptr::addr_of!((*slot).tag).read();
            let nseg =
                usize::from(ptr::addr_of!((*slot).nseg).read()).clamp(1, rbtl_btl::MAX_SEGMENTS);
            let in_slot = ptr::addr_of!((*slot).bytes).cast::<u8>();
            let kind = ptr::addr_of!((*slot).kind).read();
            if kind == INLINE {
                return Some(Record {
                    tag,
                    nseg: 1,
                    data: in_slot,
                    len: len.min(INLINE_MAX),
                    table: ptr::null(),
                    head: None,
                    data_end: None,
                });
            }
            let size = self.raw.layout.data_bytes as u64;
            self.raw.map_data_once();
            let pos = ptr::addr_of!((*slot).data_pos).read();
            let (head, table, body) = if kind == SPLIT {
                let head_len = usize::from(ptr::addr_of!((*slot).head_len).read())
                    .min(INLINE_MAX)
                    .min(len);
                (Some((in_slot, head_len)), 0, len - head_len)
            } else {
                (None, seg_table_bytes(nseg), len)
            };
            let need = round_up(table + body, LINE) as u64;
            // (Wrapping: `pos` is the peer's word. The tail only misleads that peer.)
            let data_end = Some(pos.wrapping_add(need));
            // A record never crosses the end of the data area; a peer that says
            // otherwise gets an empty record rather than a read out of bounds (of its
            // body or of its segment table).
            if self.raw.offset(pos) + table + body > size as usize {
                return Some(Record::empty(tag, in_slot, data_end));
            }
            let at = self.raw.data.add(self.raw.offset(pos)).cast_const();
            Some(Record {
                tag,
                nseg: if head.is_some() { 2 } else { nseg },
                data: at.add(table),
                len: body,
                table: at,
                head,
                data_end,
            })
        }
    }

    /// Hand the record's slot and data back to the producer.
    #[inline]
    pub fn release(&mut self, record: Record) {
        self.next += 1;
        let ctrl = self.raw.ctrl();
        if let Some(end) = record.data_end {
            ctrl.data_tail.store(end, Ordering::Release);
        }
        ctrl.slot_tail.store(self.next, Ordering::Release);
    }
}

#[cfg(test)]
mod tests;
