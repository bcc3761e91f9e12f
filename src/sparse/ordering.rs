//! Orderings of a matrix's unknowns that keep its band narrow: reverse Cuthill–McKee on the
//! pattern of a symmetric matrix, and the ordering a coarse level inherits from a fine one
//! through a prolongation. Refined meshes number their nodes by coarse entity (vertices,
//! then edges, then cells), which puts neighbours far apart; row-chunked kernels read a
//! band of their input per chunk and need neighbours close.
//!
//! A hand-written breadth-first search: none of the project's dependencies offers RCM
//! (sprs does, with ndarray behind it, for one function).

use std::collections::VecDeque;

use super::{Csr, SparseRows};
use crate::error::{Error, Result};

/// A permutation of n unknowns: `old_of_new[k]` is the unknown at position k, and
/// `new_of_old` its inverse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ordering {
    pub old_of_new: Vec<u32>,
    pub new_of_old: Vec<u32>,
}

impl Ordering {
    fn from_old_of_new(old_of_new: Vec<u32>) -> Self {
        let mut new_of_old = vec![0; old_of_new.len()];
        for (new, &old) in old_of_new.iter().enumerate() {
            new_of_old[old as usize] = new as u32;
        }
        Ordering {
            old_of_new,
            new_of_old,
        }
    }

    pub fn len(&self) -> usize {
        self.old_of_new.len()
    }

    pub fn is_empty(&self) -> bool {
        self.old_of_new.is_empty()
    }

    /// Reverse Cuthill–McKee on the pattern of the square, structurally symmetric `a`:
    /// breadth-first from a pseudo-peripheral unknown of each connected component,
    /// neighbours by increasing degree, the whole order reversed.
    pub fn reverse_cuthill_mckee(a: &Csr<f64>) -> Self {
        let n = a.nrows();
        let degree = |i: usize| a.row(i).0.len();
        let mut visited = vec![false; n];
        let mut order: Vec<u32> = Vec::with_capacity(n);
        let mut by_degree: Vec<usize> = (0..n).collect();
        by_degree.sort_by_key(|&i| (degree(i), i));
        for &seed in &by_degree {
            if visited[seed] {
                continue;
            }
            let start = pseudo_peripheral(a, seed);
            visited[start] = true;
            let first = order.len();
            order.push(start as u32);
            let mut next = first;
            while next < order.len() {
                let node = order[next] as usize;
                next += 1;
                let mut neighbours: Vec<usize> = a
                    .row(node)
                    .0
                    .iter()
                    .map(|&c| c as usize)
                    .filter(|&c| !visited[c])
                    .collect();
                neighbours.sort_by_key(|&c| (degree(c), c));
                for c in neighbours {
                    visited[c] = true;
                    order.push(c as u32);
                }
            }
        }
        order.reverse();
        Ordering::from_old_of_new(order)
    }

    /// The ordering of a coarse level that follows `fine`'s through the prolongation `p`
    /// (fine × coarse): coarse unknowns by the first fine position they interpolate to,
    /// so that coarse neighbours stay as close as their fine images.
    pub fn following(p: &Csr<f64>, fine: &Ordering) -> Result<Self> {
        if p.nrows() != fine.len() {
            return Err(Error::InvalidInput(format!(
                "an ordering of {} unknowns for a prolongation with {} rows",
                fine.len(),
                p.nrows()
            )));
        }
        let mut first = vec![u32::MAX; p.ncols()];
        for (row, &position) in fine.new_of_old.iter().enumerate() {
            for &c in p.row(row).0 {
                first[c as usize] = first[c as usize].min(position);
            }
        }
        let mut old_of_new: Vec<u32> = (0..p.ncols() as u32).collect();
        old_of_new.sort_by_key(|&c| (first[c as usize], c));
        Ok(Ordering::from_old_of_new(old_of_new))
    }
}

/// The end of a longest breadth-first path from `seed` in its component, lengthened while
/// that helps (George and Liu): a start whose levels are many and narrow.
fn pseudo_peripheral(a: &Csr<f64>, seed: usize) -> usize {
    let mut start = seed;
    let mut eccentricity = 0;
    // A few rounds suffice in practice; each is a breadth-first search of the component.
    for _ in 0..8 {
        let (depth, last_level) = levels_from(a, start);
        if depth <= eccentricity && eccentricity > 0 {
            break;
        }
        eccentricity = depth;
        let candidate = last_level
            .into_iter()
            .min_by_key(|&i| (a.row(i).0.len(), i))
            .unwrap_or(start);
        if candidate == start {
            break;
        }
        start = candidate;
    }
    start
}

/// The number of breadth-first levels from `start` and the nodes of the last one.
fn levels_from(a: &Csr<f64>, start: usize) -> (usize, Vec<usize>) {
    let mut level = vec![usize::MAX; a.nrows()];
    level[start] = 0;
    let mut queue = VecDeque::from([start]);
    let mut deepest = 0;
    while let Some(node) = queue.pop_front() {
        deepest = deepest.max(level[node]);
        for &c in a.row(node).0 {
            let c = c as usize;
            if level[c] == usize::MAX {
                level[c] = level[node] + 1;
                queue.push_back(c);
            }
        }
    }
    let last = (0..a.nrows()).filter(|&i| level[i] == deepest).collect();
    (deepest, last)
}

/// The matrix with rows in `rows`' order and columns in `cols`' order:
/// B[r, c] = A[rows.old_of_new[r], cols.old_of_new[c]].
pub fn permute(a: &Csr<f64>, rows: &Ordering, cols: &Ordering) -> Result<Csr<f64>> {
    if rows.len() != a.nrows() || cols.len() != a.ncols() {
        return Err(Error::InvalidInput(format!(
            "orderings of {} rows and {} columns for a {}×{} matrix",
            rows.len(),
            cols.len(),
            a.nrows(),
            a.ncols()
        )));
    }
    let (mut row_ptr, mut col_idx, mut values) = (
        Vec::with_capacity(a.nrows() + 1),
        Vec::with_capacity(a.nnz()),
        Vec::with_capacity(a.nnz()),
    );
    row_ptr.push(0);
    let mut entries: Vec<(u32, f64)> = Vec::new();
    for &old in &rows.old_of_new {
        let (c, v) = a.row(old as usize);
        entries.clear();
        entries.extend(
            c.iter()
                .map(|&c| cols.new_of_old[c as usize])
                .zip(v.iter().copied()),
        );
        entries.sort_unstable_by_key(|e| e.0);
        for &(c, v) in &entries {
            col_idx.push(c);
            values.push(v);
        }
        row_ptr.push(col_idx.len());
    }
    Csr::new(a.nrows(), a.ncols(), row_ptr, col_idx, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path 0 − 1 − … − (n−1) numbered by a stride, so neighbours lie far apart.
    fn scrambled_path(n: usize, stride: usize) -> Csr<f64> {
        let label = |i: usize| (i * stride) % n;
        let mut rows: Vec<Vec<(u32, f64)>> = vec![Vec::new(); n];
        for i in 0..n {
            rows[label(i)].push((label(i) as u32, 2.0));
            if i + 1 < n {
                rows[label(i)].push((label(i + 1) as u32, -1.0));
                rows[label(i + 1)].push((label(i) as u32, -1.0));
            }
        }
        let (mut row_ptr, mut col_idx, mut values) = (vec![0], Vec::new(), Vec::new());
        for mut row in rows {
            row.sort_by_key(|e| e.0);
            for (c, v) in row {
                col_idx.push(c);
                values.push(v);
            }
            row_ptr.push(col_idx.len());
        }
        Csr::new(n, n, row_ptr, col_idx, values).unwrap()
    }

    fn bandwidth(a: &Csr<f64>) -> usize {
        (0..a.nrows())
            .flat_map(|r| a.row(r).0.iter().map(move |&c| (c as usize).abs_diff(r)))
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn rcm_narrows_a_scrambled_path_to_bandwidth_one() {
        let a = scrambled_path(101, 37);
        assert!(bandwidth(&a) > 50);
        let order = Ordering::reverse_cuthill_mckee(&a);
        let b = permute(&a, &order, &order).unwrap();
        assert_eq!(bandwidth(&b), 1);
        // A permutation: the same entries, moved.
        for r in 0..a.nrows() {
            for (&c, &v) in a.row(r).0.iter().zip(a.row(r).1) {
                let (nr, nc) = (order.new_of_old[r], order.new_of_old[c as usize]);
                assert_eq!(b.get(nr as usize, nc as usize), Some(v));
            }
        }
    }

    #[test]
    fn coarse_orderings_follow_the_fine_one() {
        // Fine unknowns 0..4 in reverse order; coarse unknown 0 interpolates to fine 3 and
        // 4, coarse 1 to fine 0 and 1: coarse 0 comes first.
        let p = Csr::new(
            5,
            2,
            vec![0, 1, 2, 2, 3, 4],
            vec![1, 1, 0, 0],
            vec![1.0, 0.5, 0.5, 1.0],
        )
        .unwrap();
        let fine = Ordering::from_old_of_new(vec![4, 3, 2, 1, 0]);
        let coarse = Ordering::following(&p, &fine).unwrap();
        assert_eq!(coarse.old_of_new, [0, 1]);
        let same = Ordering::from_old_of_new(vec![0, 1, 2, 3, 4]);
        assert_eq!(Ordering::following(&p, &same).unwrap().old_of_new, [1, 0]);
    }
}
