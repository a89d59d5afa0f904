//! The best assignment of rows to columns of a table of weights, and which one among
//! equally good ones: what [`pairing`](crate::pairing) pairs interfaces by.
//!
//! A weight of 0 means the row and the column cannot be paired. [`best`] pairs each row
//! with at most one column and each column with at most one row so that the sum of
//! the weights is the greatest; among the assignments with that sum it returns the
//! first in reading order: row 0's partner as early a column as possible (a column
//! before none), then row 1's, and so on. The answer is a function of the table
//! alone, so two processes given one table get one answer.
//!
//! How: the table becomes a square one of `rows + columns` sides, where "row `r`
//! unpaired" and "column `c` unpaired" are columns and rows of their own, so that every
//! assignment of the table is a perfect matching of the square (of the same weight).
//! The Hungarian method (Kuhn and Munkres, in its `O(n^3)` form with potentials) finds
//! a best one together with potentials `u`, `v` such that `u[i] + v[j] <= cost[i][j]`
//! everywhere; the best matchings are then exactly the perfect matchings on the pairs
//! where this is an equality (tight pairs). Rows then take, in order, the first column
//! they can keep: a tight pair of row `r` and column `c` belongs to some perfect
//! matching of the tight pairs left iff `c` reaches the column `r` holds now along a
//! path that alternates tight pairs and pairs of the current matching (an alternating
//! cycle through `r`); one search per row finds every such `c`, and the cycle is
//! turned so that `r` holds its choice. `O((rows + columns)^3)` in all, without a cap
//! on the number of interfaces.
//!
//! Written here rather than taken from a crate: `pathfinding`'s `kuhn_munkres` (the
//! usual one) returns the assignment and its weight but not the potentials, which the
//! choice among equal assignments needs; and that crate (with its dependencies) for
//! about a hundred lines was not worth it.

/// What a pair the weights forbid costs: more than any sum of allowed costs.
const FORBIDDEN: i64 = 1 << 40;

/// For each row of `weights` (rows of equal length), the column it is paired with:
/// the assignment of the greatest total weight, the first in reading order among
/// equal ones (see the module doc). Pairs of weight 0 are never made.
///
/// # Panics
///
/// When the rows are not all of one length (a bug of the caller). The arithmetic is
/// sized for what [`pairing`](crate::pairing) builds: at most 255 rows and 255
/// columns, weights at most 256.
pub fn best(weights: &[Vec<u32>]) -> Vec<Option<usize>> {
    let rows = weights.len();
    let cols = weights.first().map_or(0, Vec::len);
    assert!(
        weights.iter().all(|w| w.len() == cols),
        "a table of weights has rows of one length"
    );
    let square = Square::new(weights, rows, cols);
    let (mut col_of, u, v) = square.hungarian();
    let n = rows + cols;
    let tight = |i: usize, j: usize| {
        let c = square.cost(i, j);
        c != FORBIDDEN && u[i] + v[j] == c
    };
    let mut row_of = vec![0; n];
    for (i, &j) in col_of.iter().enumerate() {
        row_of[j] = i;
    }
    let mut fixed_row = vec![false; n];
    let mut fixed_col = vec![false; n];
    // `next[y] = x`: the row holding column `y` can take column `x` instead (the search
    // for the current row found it so).
    let mut next = vec![usize::MAX; n];
    let mut reached = vec![false; n];
    let mut queue = Vec::with_capacity(n);
    for r in 0..rows {
        let held = col_of[r];
        reached.iter_mut().for_each(|x| *x = false);
        reached[held] = true;
        queue.clear();
        queue.push(held);
        while let Some(x) = queue.pop() {
            for i in (0..n).filter(|&i| !fixed_row[i] && col_of[i] != x && tight(i, x)) {
                let y = col_of[i];
                if !reached[y] {
                    reached[y] = true;
                    next[y] = x;
                    queue.push(y);
                }
            }
        }
        // The real columns in order, then "unpaired" (the only other column row `r`
        // may hold); `held` is always among them.
        let choice = (0..cols)
            .chain([cols + r])
            .find(|&c| !fixed_col[c] && reached[c] && tight(r, c))
            .unwrap_or(held);
        let (mut taker, mut x) = (r, choice);
        loop {
            let old = row_of[x];
            col_of[taker] = x;
            row_of[x] = taker;
            if x == held {
                break;
            }
            (taker, x) = (old, next[x]);
        }
        fixed_row[r] = true;
        fixed_col[choice] = true;
    }
    col_of[..rows]
        .iter()
        .map(|&c| (c < cols).then_some(c))
        .collect()
}

/// The square problem, its costs (the weights, negated) in a table of `n` by `n`: rows
/// `0..rows` are the table's, rows `rows..` stand for "column `c` unpaired"; columns
/// `0..cols` are the table's, columns `cols..` stand for "row `r` unpaired".
struct Square {
    n: usize,
    costs: Vec<i64>,
}

impl Square {
    fn new(weights: &[Vec<u32>], rows: usize, cols: usize) -> Square {
        let n = rows + cols;
        let mut costs = vec![FORBIDDEN; n * n];
        for (i, row) in weights.iter().enumerate() {
            for (j, &w) in row.iter().enumerate().filter(|(_, &w)| w > 0) {
                costs[i * n + j] = -i64::from(w);
            }
            costs[i * n + cols + i] = 0;
        }
        for c in 0..cols {
            let i = rows + c;
            costs[i * n + c] = 0;
            costs[i * n + cols..(i + 1) * n].fill(0);
        }
        Square { n, costs }
    }

    /// The cost of matching row `i` with column `j`.
    fn cost(&self, i: usize, j: usize) -> i64 {
        self.costs[i * self.n + j]
    }

    /// A perfect matching of least cost (the column of each row) and potentials `u`
    /// (rows) and `v` (columns) with `u[i] + v[j] <= cost(i, j)`, equal on the matching.
    fn hungarian(&self) -> (Vec<usize>, Vec<i64>, Vec<i64>) {
        let n = self.n;
        // 1-based as in the usual statement: row and column 0 are a sentinel.
        let mut u = vec![0i64; n + 1];
        let mut v = vec![0i64; n + 1];
        let mut row_of = vec![0usize; n + 1];
        let mut way = vec![0usize; n + 1];
        for i in 1..=n {
            row_of[0] = i;
            let mut j0 = 0;
            let mut least = vec![i64::MAX; n + 1];
            let mut used = vec![false; n + 1];
            loop {
                used[j0] = true;
                let i0 = row_of[j0];
                let (mut delta, mut j1) = (i64::MAX, 0);
                for j in (1..=n).filter(|&j| !used[j]) {
                    let reduced = self.cost(i0 - 1, j - 1) - u[i0] - v[j];
                    if reduced < least[j] {
                        least[j] = reduced;
                        way[j] = j0;
                    }
                    if least[j] < delta {
                        delta = least[j];
                        j1 = j;
                    }
                }
                for j in 0..=n {
                    if used[j] {
                        u[row_of[j]] += delta;
                        v[j] -= delta;
                    } else {
                        least[j] -= delta;
                    }
                }
                j0 = j1;
                if row_of[j0] == 0 {
                    break;
                }
            }
            while j0 != 0 {
                let j1 = way[j0];
                row_of[j0] = row_of[j1];
                j0 = j1;
            }
        }
        let mut col_of = vec![0; n];
        for j in 1..=n {
            col_of[row_of[j] - 1] = j - 1;
        }
        (col_of, u[1..].to_vec(), v[1..].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every assignment, rows in order, each trying the columns in order and then
    /// none; the first of the greatest weight.
    fn exhaustive(weights: &[Vec<u32>]) -> Vec<Option<usize>> {
        fn visit(
            weights: &[Vec<u32>],
            r: usize,
            used: &mut Vec<bool>,
            now: &mut Vec<Option<usize>>,
            sum: u64,
            best: &mut Option<(u64, Vec<Option<usize>>)>,
        ) {
            if r == weights.len() {
                if best.as_ref().is_none_or(|(most, _)| sum > *most) {
                    *best = Some((sum, now.clone()));
                }
                return;
            }
            for c in 0..used.len() {
                if !used[c] && weights[r][c] > 0 {
                    used[c] = true;
                    now.push(Some(c));
                    visit(
                        weights,
                        r + 1,
                        used,
                        now,
                        sum + u64::from(weights[r][c]),
                        best,
                    );
                    now.pop();
                    used[c] = false;
                }
            }
            now.push(None);
            visit(weights, r + 1, used, now, sum, best);
            now.pop();
        }
        let cols = weights.first().map_or(0, Vec::len);
        let mut best = None;
        visit(
            weights,
            0,
            &mut vec![false; cols],
            &mut Vec::new(),
            0,
            &mut best,
        );
        best.map(|(_, assignment)| assignment).unwrap_or_default()
    }

    #[test]
    fn small_tables() {
        assert_eq!(best(&[]), vec![]);
        assert_eq!(best(&[vec![]]), vec![None]);
        assert_eq!(best(&[vec![0, 0]]), vec![None]);
        // Row 0 could take either; taking column 0 would leave row 1 without one.
        assert_eq!(best(&[vec![1, 1], vec![1, 0]]), vec![Some(1), Some(0)]);
        // Equal sums: the first in reading order.
        assert_eq!(best(&[vec![1, 1], vec![1, 1]]), vec![Some(0), Some(1)]);
        // A heavier pair beats two light ones.
        assert_eq!(best(&[vec![5, 1], vec![1, 0]]), vec![Some(0), None]);
        assert_eq!(best(&[vec![3, 2], vec![2, 0]]), vec![Some(1), Some(0)]);
        // 2 either way: the first in reading order again.
        assert_eq!(best(&[vec![2, 1], vec![1, 0]]), vec![Some(0), None]);
    }

    #[test]
    fn large_tables_end() {
        // Every pair allowed, all equal: the diagonal.
        let weights = vec![vec![1; 100]; 100];
        let got = best(&weights);
        assert_eq!(got, (0..100).map(Some).collect::<Vec<_>>());
        // The largest `pairing` builds: 255 interfaces a side.
        // Mostly forbidden pairs (the largest costs) and the heaviest weights: row `r`
        // reaches column `r` at 1 and column `r + 1` at 256; every row but the last
        // takes the heavier one, and the last is left without.
        let weights: Vec<Vec<u32>> = (0..255)
            .map(|r| {
                (0..255)
                    .map(|c| match c {
                        _ if c == r => 1,
                        _ if c == r + 1 => 256,
                        _ => 0,
                    })
                    .collect()
            })
            .collect();
        let got = best(&weights);
        assert_eq!(got[..254], (1..255).map(Some).collect::<Vec<_>>());
        assert_eq!(got[254], None);
    }

    fn tables() -> impl Strategy<Value = Vec<Vec<u32>>> {
        (0usize..6, 0usize..6).prop_flat_map(|(r, c)| {
            proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just(0u32), Just(1), Just(7), 0u32..9], c),
                r,
            )
        })
    }

    proptest! {
        // The same answer as trying every assignment, tie-breaks included.
        #[test]
        fn as_every_assignment_tried(weights in tables()) {
            prop_assert_eq!(best(&weights), exhaustive(&weights));
        }
    }
}
