//! The ranges of one registration: held inline (a handle is a value that moves around,
//! and its ranges allocate nothing), and where they stand in a remote handle's bytes.

use crate::MAX_RANGES;
use std::fmt;
use std::ops::Deref;

/// One to [`MAX_RANGES`] ranges, in order; it reads as a slice of them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct InlineRanges<T> {
    /// The ranges, then defaults.
    items: [T; MAX_RANGES],
    count: u8,
}

impl<T: Copy + Default> InlineRanges<T> {
    /// A copy of `ranges`, of which there must be 1 to [`MAX_RANGES`] (the maker of a
    /// registration checks that first; this panics otherwise).
    pub fn new(ranges: &[T]) -> Self {
        InlineRanges::from_fn(ranges.len(), |i| ranges[i])
    }

    /// `count` ranges (1 to [`MAX_RANGES`], as [`InlineRanges::new`]), range `i` being
    /// `range(i)`: for reading them from a handle's bytes.
    pub fn from_fn(count: usize, range: impl FnMut(usize) -> T) -> Self {
        assert!(
            (1..=MAX_RANGES).contains(&count),
            "a registration of {count} ranges"
        );
        let mut items = [T::default(); MAX_RANGES];
        for (item, r) in items.iter_mut().zip((0..count).map(range)) {
            *item = r;
        }
        InlineRanges {
            items,
            count: count as u8,
        }
    }
}

impl<T> Deref for InlineRanges<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.items[..usize::from(self.count)]
    }
}

impl<T: fmt::Debug> fmt::Debug for InlineRanges<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Where the ranges stand in the bytes of a remote handle: range 0 inside its head,
/// each further range after the head, one every `stride` bytes.
#[derive(Clone, Copy, Debug)]
pub struct RangeLayout {
    /// Bytes of the head: the handle of a one-range registration.
    pub head: usize,
    /// Where range 0 stands in the head.
    pub first: usize,
    /// Bytes each further range adds.
    pub stride: usize,
}

impl RangeLayout {
    /// Bytes of the handle of `ranges` ranges (at least 1).
    pub const fn handle_len(&self, ranges: usize) -> usize {
        self.head + self.stride * (ranges - 1)
    }

    /// Where range `i` starts.
    pub const fn range_at(&self, i: usize) -> usize {
        match i {
            0 => self.first,
            _ => self.handle_len(i),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_what_it_was_given_and_nothing_more() {
        let all: Vec<u64> = (1..=MAX_RANGES as u64).collect();
        for n in 1..=MAX_RANGES {
            let r = InlineRanges::new(&all[..n]);
            assert_eq!(&r[..], &all[..n]);
            assert_eq!(r, InlineRanges::from_fn(n, |i| all[i]));
            assert_eq!(format!("{r:?}"), format!("{:?}", &all[..n]));
        }
    }

    #[test]
    fn ranges_follow_the_head() {
        let layout = RangeLayout {
            head: 40,
            first: 8,
            stride: 24,
        };
        assert_eq!(layout.handle_len(1), 40);
        assert_eq!(layout.handle_len(3), 88);
        assert_eq!(layout.range_at(0), 8);
        assert_eq!(layout.range_at(1), 40);
        assert_eq!(layout.range_at(2), 64);
    }

    #[test]
    #[should_panic(expected = "a registration of 0 ranges")]
    fn refuses_no_range() {
        InlineRanges::<u64>::new(&[]);
    }

    #[test]
    #[should_panic(expected = "a registration of")]
    fn refuses_more_than_it_holds() {
        InlineRanges::from_fn(MAX_RANGES + 1, |_| 0u64);
    }
}
