//! A schedule's scratch space: the buffers its rounds receive into and combine in,
//! one allocation for a collective's every buffer, kept (up to a bound) for the
//! collectives that use the schedule next.

use std::ops::Range;

/// Scratch space is kept in units of this type: its alignment (16) is every basic
/// type's that a reduction reads in place.
type Unit = u128;
const UNIT: usize = std::mem::size_of::<Unit>();
/// Scratch space a schedule used again keeps at most.
const KEPT: usize = 1 << 20;

/// The space, initialized from one collective to the next: its first `used` units
/// are the present collective's.
#[derive(Default)]
pub struct Scratch {
    units: Vec<Unit>,
    used: usize,
}

impl Scratch {
    /// Empty it for a new collective, keeping its storage unless it grew past `KEPT`
    /// bytes.
    pub fn reuse(&mut self) {
        self.used = 0;
        if self.units.len() * UNIT > KEPT {
            self.units = Vec::new();
        }
    }

    /// A buffer of `len` bytes, zeroed: its offset.
    pub fn zeroed(&mut self, len: usize) -> usize {
        let units = self.room(len);
        let at = units.start * UNIT;
        self.units[units].fill(0);
        at
    }

    /// A buffer of `len` bytes that the schedule fills whole (by a receive or a copy)
    /// before anything reads it: its offset. Its bytes are left as an earlier
    /// collective left them: zeroing them would cost a pass over every byte, as much
    /// as a copy.
    pub fn to_fill(&mut self, len: usize) -> usize {
        self.room(len).start * UNIT
    }

    /// The next `len` bytes, in units; the space grows (zeroed) where it is short.
    fn room(&mut self, len: usize) -> Range<usize> {
        let start = self.used;
        self.used += len.div_ceil(UNIT);
        if self.units.len() < self.used {
            self.units.resize(self.used, 0);
        }
        start..self.used
    }

    /// Its start, until the next buffer is made.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.units.as_mut_ptr().cast()
    }
}
