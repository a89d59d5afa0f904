//! The runs of contiguous bytes one element of a datatype occupies, in type-map
//! order. Most types keep them as a list; a type of very many runs made of one
//! older type (a vector of a hundred million elements) keeps the older type's runs
//! and the strides that repeat them, as MPICH's dataloops and Open MPI's
//! descriptions do with loops: its description stays as small as its constructor's
//! arguments.

use super::Block;
use std::sync::Arc;

/// The runs of one element: `unit`'s, repeated along each of `levels`, innermost
/// first (`times` copies `stride` bytes apart).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocks {
    unit: Arc<[Block]>,
    levels: Arc<[(usize, isize)]>,
}

impl Blocks {
    /// The runs as listed.
    pub fn flat(runs: Vec<Block>) -> Blocks {
        Blocks {
            unit: Arc::from(runs),
            levels: Arc::from(Vec::new()),
        }
    }

    /// `times` copies of these runs `stride` bytes apart, every one moved on by
    /// `shift` bytes. The caller has checked that the copies' displacements fit
    /// (the type's bounds do).
    pub fn repeated(&self, times: usize, stride: isize, shift: isize) -> Blocks {
        if times == 0 || self.unit.is_empty() {
            return Blocks::flat(Vec::new());
        }
        let unit = self.unit.iter().map(|&(off, len)| (off + shift, len));
        let levels = self.levels.iter().copied().chain([(times, stride)]);
        Blocks {
            unit: unit.collect(),
            levels: levels.collect(),
        }
    }

    /// How many runs (at most `usize::MAX`).
    pub fn len(&self) -> usize {
        (self.levels.iter()).fold(self.unit.len(), |n, &(times, _)| n.saturating_mul(times))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The one run, if there is one only.
    pub fn single(&self) -> Option<Block> {
        match (&self.unit[..], self.len()) {
            ([run], 1) => Some(*run),
            _ => None,
        }
    }

    /// The runs in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            blocks: self,
            next: 0,
            copy: vec![0; self.levels.len()],
            base: 0,
        }
    }

    /// The lowest byte a run starts at and the highest it ends at (`None`: no
    /// runs).
    pub fn bounds(&self) -> Option<(isize, isize)> {
        let lo = self.unit.iter().map(|b| b.0).min()?;
        let hi = self.unit.iter().map(|b| b.0 + b.1 as isize).max()?;
        Some(
            self.levels
                .iter()
                .fold((lo, hi), |(lo, hi), &(times, stride)| {
                    let span = stride * (times as isize - 1);
                    (lo + span.min(0), hi + span.max(0))
                }),
        )
    }
}

/// The runs of a [`Blocks`], in order: (displacement, length).
pub struct Iter<'a> {
    blocks: &'a Blocks,
    /// The unit's run to give next.
    next: usize,
    /// The copy at each level; `None` once past the last.
    copy: Vec<usize>,
    /// The displacement of the current copy of the unit.
    base: isize,
}

impl Iterator for Iter<'_> {
    type Item = Block;

    #[inline]
    fn next(&mut self) -> Option<Block> {
        let unit = &self.blocks.unit;
        if self.next == unit.len() {
            // The next copy: the innermost level that has one left steps on, the
            // levels inside it start again.
            let levels = &self.blocks.levels;
            let mut k = 0;
            loop {
                let (times, stride) = *levels.get(k)?;
                self.copy[k] += 1;
                self.base += stride;
                if self.copy[k] < times {
                    break;
                }
                self.base -= stride * times as isize;
                self.copy[k] = 0;
                k += 1;
            }
            self.next = 0;
        }
        let (off, len) = *unit.get(self.next)?;
        self.next += 1;
        Some((self.base + off, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_runs_come_in_order_along_every_level() {
        let pair = Blocks::flat(vec![(0, 4), (8, 2)]);
        assert_eq!(pair.single(), None);
        let row = pair.repeated(3, 16, 100);
        let grid = row.repeated(2, -1000, 0);
        assert_eq!(grid.len(), 12);
        let all: Vec<Block> = grid.iter().collect();
        let mut expected = Vec::new();
        for j in 0..2 {
            for i in 0..3 {
                let at = 100 + i * 16 - j * 1000;
                expected.extend([(at, 4), (at + 8, 2)]);
            }
        }
        assert_eq!(all, expected);
        assert_eq!(grid.bounds(), Some((100 - 1000, 100 + 32 + 10)));
        assert_eq!(Blocks::flat(vec![(4, 3)]).single(), Some((4, 3)));
        assert_eq!(Blocks::flat(vec![(4, 3)]).repeated(2, 8, 0).single(), None);
        assert!(pair.repeated(0, 16, 0).is_empty());
        assert_eq!(Blocks::flat(Vec::new()).repeated(5, 3, 0).iter().count(), 0);
        assert_eq!(Blocks::flat(Vec::new()).bounds(), None);
    }

    #[test]
    fn a_billion_runs_are_described_in_a_few_bytes() {
        let runs = Blocks::flat(vec![(0, 16)]).repeated(1 << 30, 48, 0);
        assert_eq!(runs.len(), 1 << 30);
        assert_eq!(runs.bounds(), Some((0, 48 * ((1 << 30) - 1) + 16)));
        let first: Vec<Block> = runs.iter().take(3).collect();
        assert_eq!(first, [(0, 16), (48, 16), (96, 16)]);
    }
}
