//! Reference counts over page ranges: how many live registrations cover each page, so
//! that a per-range kernel setting (a userfaultfd registration, `MADV_DONTFORK`) is set
//! when the first registration covers a page and cleared when the last one goes, while
//! registrations overlap freely.

use std::collections::BTreeMap;

/// Disjoint segments `start -> (end, count)`, each with a count of at least 1;
/// neighbouring segments of equal count are merged.
#[derive(Debug, Default)]
pub(crate) struct PageCounts {
    segments: BTreeMap<usize, (usize, u32)>,
}

impl PageCounts {
    pub(crate) const fn new() -> Self {
        PageCounts {
            segments: BTreeMap::new(),
        }
    }

    /// Number of disjoint segments (for tests).
    #[cfg(test)]
    pub(crate) fn segments(&self) -> usize {
        self.segments.len()
    }

    /// Whether any page of `[start, end)` is counted.
    pub(crate) fn any(&self, start: usize, end: usize) -> bool {
        if let Some((_, &(e, _))) = self.segments.range(..start).next_back() {
            if e > start {
                return true;
            }
        }
        self.segments.range(start..end).next().is_some()
    }

    /// The parts of `[start, end)` that no segment covers.
    pub(crate) fn uncovered(&self, start: usize, end: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut cur = start;
        if let Some((_, &(e, _))) = self.segments.range(..start).next_back() {
            cur = cur.max(e.min(end));
        }
        for (&s, &(e, _)) in self.segments.range(start..end) {
            if s > cur {
                out.push((cur, s));
            }
            cur = cur.max(e.min(end));
        }
        if cur < end {
            out.push((cur, end));
        }
        out
    }

    /// Splits the segment containing `x` (strictly inside) in two at `x`.
    fn split_at(&mut self, x: usize) {
        if let Some((&s, &(e, c))) = self.segments.range(..x).next_back() {
            if e > x {
                self.segments.insert(s, (x, c));
                self.segments.insert(x, (e, c));
            }
        }
    }

    /// Merges the segment ending at `x` with the one starting there if their counts match.
    fn merge_at(&mut self, x: usize) {
        let Some((&s, &(e, c))) = self.segments.range(..x).next_back() else {
            return;
        };
        if e != x {
            return;
        }
        if let Some(&(e2, c2)) = self.segments.get(&x) {
            if c2 == c {
                self.segments.remove(&x);
                self.segments.insert(s, (e2, c));
            }
        }
    }

    /// Counts `[start, end)` once more; returns the ranges that were not counted before.
    pub(crate) fn add(&mut self, start: usize, end: usize) -> Vec<(usize, usize)> {
        if start >= end {
            return Vec::new();
        }
        let fresh = self.uncovered(start, end);
        self.split_at(start);
        self.split_at(end);
        let keys: Vec<usize> = self.segments.range(start..end).map(|(&s, _)| s).collect();
        for s in keys {
            if let Some(seg) = self.segments.get_mut(&s) {
                seg.1 += 1;
            }
        }
        for &(s, e) in &fresh {
            self.segments.insert(s, (e, 1));
        }
        let mut bounds: Vec<usize> = fresh.iter().flat_map(|&(s, e)| [s, e]).collect();
        bounds.extend([start, end]);
        for x in bounds {
            self.merge_at(x);
        }
        fresh
    }

    /// Counts `[start, end)` once less; returns the ranges no longer counted at all.
    /// Parts that were not counted are ignored.
    pub(crate) fn remove(&mut self, start: usize, end: usize) -> Vec<(usize, usize)> {
        if start >= end {
            return Vec::new();
        }
        self.split_at(start);
        self.split_at(end);
        let keys: Vec<usize> = self.segments.range(start..end).map(|(&s, _)| s).collect();
        let mut gone: Vec<(usize, usize)> = Vec::new();
        for s in keys {
            let Some(seg) = self.segments.get_mut(&s) else {
                continue;
            };
            seg.1 -= 1;
            if seg.1 == 0 {
                let e = seg.0;
                self.segments.remove(&s);
                match gone.last_mut() {
                    Some(last) if last.1 == s => last.1 = e,
                    _ => gone.push((s, e)),
                }
            }
        }
        self.merge_at(start);
        self.merge_at(end);
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::PageCounts;

    #[test]
    fn overlapping_ranges_are_set_once_and_cleared_once() {
        let mut p = PageCounts::new();
        assert_eq!(p.add(10, 20), vec![(10, 20)]);
        assert_eq!(p.add(15, 30), vec![(20, 30)]);
        assert_eq!(p.add(0, 40), vec![(0, 10), (30, 40)]);
        assert!(p.any(35, 36));
        assert_eq!(p.remove(10, 20), vec![]);
        assert_eq!(p.remove(0, 40), vec![(0, 15), (30, 40)]);
        assert_eq!(p.remove(15, 30), vec![(15, 30)]);
        assert_eq!(p.segments(), 0);
        assert!(!p.any(0, 100));
    }

    #[test]
    fn segments_merge_back() {
        let mut p = PageCounts::new();
        p.add(0, 100);
        for i in 0..10 {
            p.add(i * 10, i * 10 + 5);
        }
        for i in 0..10 {
            assert!(p.remove(i * 10, i * 10 + 5).is_empty());
        }
        assert_eq!(p.segments(), 1);
        assert_eq!(p.uncovered(0, 200), vec![(100, 200)]);
        assert_eq!(p.remove(0, 100), vec![(0, 100)]);
    }

    #[test]
    fn removing_what_was_never_counted_changes_nothing() {
        let mut p = PageCounts::new();
        p.add(10, 20);
        assert_eq!(p.remove(30, 40), vec![]);
        assert_eq!(p.remove(0, 15), vec![(10, 15)]);
        assert_eq!(p.uncovered(0, 30), vec![(0, 15), (20, 30)]);
    }
}
