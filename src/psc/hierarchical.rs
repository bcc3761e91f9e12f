//! The hierarchical-basis transform S of SPEC §2.1 on the unknowns of a unit-square mesh
//! refined `levels` times: S maps hierarchical coefficients to nodal values. S and Sᵀ are
//! applied level by level in O(N) on the structured grid; S is never formed densely (its
//! sparse form is built once for the set-up, Ã = SᵀAS).

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::mesh::{Element, Mesh2d};
use crate::precision::Real;
use crate::sparse::Csr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HierarchicalBasis {
    element: Element,
    /// Cells per direction of the fine mesh.
    n: usize,
    levels: usize,
}

/// Weight of an edge-midpoint parent and of a Q1 cell-midpoint parent.
const EDGE_WEIGHT: f64 = 0.5;
const CELL_WEIGHT: f64 = 0.25;

impl HierarchicalBasis {
    pub fn new(mesh: &Mesh2d) -> Result<Self> {
        let hierarchy = mesh.hierarchy.as_ref().ok_or_else(|| {
            Error::InvalidInput(
                "the hierarchical basis needs a mesh refined from a coarse mesh (mesh.h0)".into(),
            )
        })?;
        Ok(HierarchicalBasis {
            element: mesh.element,
            n: mesh.n,
            levels: hierarchy.levels,
        })
    }

    /// Unknowns: (n - 1)².
    pub fn len(&self) -> usize {
        (self.n - 1) * (self.n - 1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Unknown index of interior node (i, j); None on the boundary.
    #[inline]
    fn dof(&self, i: usize, j: usize) -> Option<usize> {
        (i > 0 && j > 0 && i < self.n && j < self.n).then(|| (i - 1) + (j - 1) * (self.n - 1))
    }

    /// The parents of the level-k node (i, j) (spacing s = 2^(levels-k)) with their weights;
    /// Dirichlet parents are left out (they contribute nothing).
    fn parents(&self, i: usize, j: usize, s: usize, out: &mut Vec<(usize, f64)>) {
        out.clear();
        let (odd_i, odd_j) = ((i / s) % 2 == 1, (j / s) % 2 == 1);
        let mut push = |a: usize, b: usize, w: f64| {
            if let Some(d) = self.dof(a, b) {
                out.push((d, w));
            }
        };
        match (odd_i, odd_j) {
            (true, false) => {
                push(i - s, j, EDGE_WEIGHT);
                push(i + s, j, EDGE_WEIGHT);
            }
            (false, true) => {
                push(i, j - s, EDGE_WEIGHT);
                push(i, j + s, EDGE_WEIGHT);
            }
            (true, true) if self.element == Element::P1 => {
                push(i - s, j - s, EDGE_WEIGHT);
                push(i + s, j + s, EDGE_WEIGHT);
            }
            (true, true) => {
                push(i - s, j - s, CELL_WEIGHT);
                push(i + s, j - s, CELL_WEIGHT);
                push(i - s, j + s, CELL_WEIGHT);
                push(i + s, j + s, CELL_WEIGHT);
            }
            (false, false) => unreachable!("({i}, {j}) is not new on the level of spacing {s}"),
        }
    }

    /// Calls `f(i, j)` for the interior nodes new on the level of spacing `s`.
    fn for_each_new_node(&self, s: usize, mut f: impl FnMut(usize, usize)) {
        for j in (s..self.n).step_by(s) {
            for i in (s..self.n).step_by(s) {
                if (i / s) % 2 == 1 || (j / s) % 2 == 1 {
                    f(i, j);
                }
            }
        }
    }

    /// Value of the unknown at grid point (i, j), zero on the boundary.
    #[inline]
    fn at<T: Real>(&self, x: &[T], i: usize, j: usize) -> T {
        match self.dof(i, j) {
            Some(d) => x[d],
            None => T::zero(),
        }
    }

    /// Adds `v` to the unknown at (i, j) unless it is a Dirichlet node.
    #[inline]
    fn add<T: Real>(&self, x: &mut [T], i: usize, j: usize, v: T) {
        if let Some(d) = self.dof(i, j) {
            x[d] = x[d] + v;
        }
    }

    /// x ← S x, one column: level by level, each new node adds the weighted values of its
    /// parents. New nodes of level k (spacing s) are the horizontal edge midpoints (i odd,
    /// j even multiples of s), the vertical ones (i even, j odd) and the cell midpoints
    /// (both odd; parents: Q1 the 4 corners, P1 the ends of the "/" diagonal).
    fn apply_column<T: Real>(&self, x: &mut [T]) {
        let (n, half, quarter) = (self.n, T::from_f64(EDGE_WEIGHT), T::from_f64(CELL_WEIGHT));
        for k in 1..=self.levels {
            let s = 1 << (self.levels - k);
            let s2 = 2 * s;
            for j in (s2..n).step_by(s2) {
                for i in (s..n).step_by(s2) {
                    let v = half * (self.at(x, i - s, j) + self.at(x, i + s, j));
                    self.add(x, i, j, v);
                }
            }
            for j in (s..n).step_by(s2) {
                for i in (s2..n).step_by(s2) {
                    let v = half * (self.at(x, i, j - s) + self.at(x, i, j + s));
                    self.add(x, i, j, v);
                }
                for i in (s..n).step_by(s2) {
                    let v = match self.element {
                        Element::P1 => half * (self.at(x, i - s, j - s) + self.at(x, i + s, j + s)),
                        _ => {
                            quarter
                                * (self.at(x, i - s, j - s)
                                    + self.at(x, i + s, j - s)
                                    + self.at(x, i - s, j + s)
                                    + self.at(x, i + s, j + s))
                        }
                    };
                    self.add(x, i, j, v);
                }
            }
        }
    }

    /// y ← Sᵀ y, one column: levels in reverse, each new node adds its weighted value to
    /// its parents.
    fn apply_transpose_column<T: Real>(&self, y: &mut [T]) {
        let (n, half, quarter) = (self.n, T::from_f64(EDGE_WEIGHT), T::from_f64(CELL_WEIGHT));
        for k in (1..=self.levels).rev() {
            let s = 1 << (self.levels - k);
            let s2 = 2 * s;
            for j in (s2..n).step_by(s2) {
                for i in (s..n).step_by(s2) {
                    let v = half * self.at(y, i, j);
                    self.add(y, i - s, j, v);
                    self.add(y, i + s, j, v);
                }
            }
            for j in (s..n).step_by(s2) {
                for i in (s2..n).step_by(s2) {
                    let v = half * self.at(y, i, j);
                    self.add(y, i, j - s, v);
                    self.add(y, i, j + s, v);
                }
                for i in (s..n).step_by(s2) {
                    if self.element == Element::P1 {
                        let v = half * self.at(y, i, j);
                        self.add(y, i - s, j - s, v);
                        self.add(y, i + s, j + s, v);
                    } else {
                        let v = quarter * self.at(y, i, j);
                        self.add(y, i - s, j - s, v);
                        self.add(y, i + s, j - s, v);
                        self.add(y, i - s, j + s, v);
                        self.add(y, i + s, j + s, v);
                    }
                }
            }
        }
    }

    /// X ← S X for a column-major block (columns of length [`len`](Self::len)), in parallel
    /// over columns.
    pub fn apply<T: Real>(&self, x: &mut [T]) {
        assert_eq!(
            x.len() % self.len().max(1),
            0,
            "block length is not a multiple of the unknowns"
        );
        x.par_chunks_mut(self.len())
            .for_each(|col| self.apply_column(col));
    }

    /// Y ← Sᵀ Y for a column-major block.
    pub fn apply_transpose<T: Real>(&self, y: &mut [T]) {
        assert_eq!(
            y.len() % self.len().max(1),
            0,
            "block length is not a multiple of the unknowns"
        );
        y.par_chunks_mut(self.len())
            .for_each(|col| self.apply_transpose_column(col));
    }

    /// S as a sparse matrix: row i holds the hierarchical coefficients whose basis
    /// functions are nonzero at node i (itself and its ancestors).
    pub fn matrix(&self) -> Csr<f64> {
        let mut rows: Vec<Vec<(u32, f64)>> = vec![Vec::new(); self.len()];
        // Level-0 interior nodes: identity rows.
        let coarse = 1 << self.levels;
        for j in (coarse..self.n).step_by(coarse) {
            for i in (coarse..self.n).step_by(coarse) {
                let d = self.dof(i, j).expect("interior node");
                rows[d] = vec![(d as u32, 1.0)];
            }
        }
        let mut parents = Vec::with_capacity(4);
        for k in 1..=self.levels {
            let s = 1 << (self.levels - k);
            self.for_each_new_node(s, |i, j| {
                self.parents(i, j, s, &mut parents);
                let d = self.dof(i, j).expect("interior node");
                let mut row: Vec<(u32, f64)> = vec![(d as u32, 1.0)];
                for &(p, w) in &parents {
                    row.extend(rows[p].iter().map(|&(c, v)| (c, w * v)));
                }
                row.sort_by_key(|e| e.0);
                let mut merged: Vec<(u32, f64)> = Vec::with_capacity(row.len());
                for (c, v) in row {
                    match merged.last_mut() {
                        Some(last) if last.0 == c => last.1 += v,
                        _ => merged.push((c, v)),
                    }
                }
                rows[d] = merged;
            });
        }
        let mut row_ptr = vec![0];
        let (mut cols, mut vals) = (Vec::new(), Vec::new());
        for row in rows {
            for (c, v) in row {
                cols.push(c);
                vals.push(v);
            }
            row_ptr.push(cols.len());
        }
        Csr::new(self.len(), self.len(), row_ptr, cols, vals).expect("rows are sorted and in range")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu;
    use crate::mesh::unit_square_refined;

    /// The level-by-level transforms agree with the sparse matrix and its transpose.
    #[test]
    fn transforms_match_the_matrix() {
        for element in [Element::Q1, Element::P1] {
            let mesh = unit_square_refined(3, 3, element).unwrap();
            let hb = HierarchicalBasis::new(&mesh).unwrap();
            let s = hb.matrix();
            let n = hb.len();
            let x: Vec<f64> = (0..2 * n)
                .map(|i| ((i * 7919) % 113) as f64 / 50.0 - 1.0)
                .collect();
            let mut y = x.clone();
            hb.apply(&mut y);
            let mut z = x.clone();
            hb.apply_transpose(&mut z);
            let st = s.transpose();
            for c in 0..2 {
                let (xc, mut sx, mut stx) = (&x[c * n..(c + 1) * n], vec![0.0; n], vec![0.0; n]);
                cpu::spmv(&s, xc, &mut sx);
                cpu::spmv(&st, xc, &mut stx);
                for i in 0..n {
                    assert!((sx[i] - y[c * n + i]).abs() < 1e-13);
                    assert!((stx[i] - z[c * n + i]).abs() < 1e-13);
                }
            }
        }
    }

    /// S interpolates: a function linear on the coarse mesh has hierarchical coefficients
    /// that vanish on every finer level, so S of its coarse values reproduces it.
    #[test]
    fn coarse_linear_functions_are_interpolated() {
        let mesh = unit_square_refined(2, 3, Element::P1).unwrap();
        let hb = HierarchicalBasis::new(&mesh).unwrap();
        let h = mesh.hierarchy.as_ref().unwrap();
        // The coarse hat function of the centre node (0.5, 0.5), as HB coefficients.
        let mut x = vec![0.0; hb.len()];
        let mut expected = vec![0.0; hb.len()];
        let n = mesh.n;
        for node in 0..mesh.num_nodes() {
            let (i, j) = (node % (n + 1), node / (n + 1));
            let Some(d) = hb.dof(i, j) else { continue };
            let [px, py] = mesh.coords[node];
            if h.level[node] == 0 {
                x[d] = f64::from(i == n / 2 && j == n / 2);
            }
            // The P1 hat of (1/2, 1/2) on the coarse mesh with the "/" diagonal.
            let (u, v) = (px - 0.5, py - 0.5);
            expected[d] = if u * v >= 0.0 {
                (1.0 - 2.0 * u.abs().max(v.abs())).max(0.0)
            } else {
                (1.0 - 2.0 * (u - v).abs()).max(0.0)
            };
        }
        hb.apply(&mut x);
        for d in 0..hb.len() {
            assert!(
                (x[d] - expected[d]).abs() < 1e-14,
                "unknown {d}: {} vs {}",
                x[d],
                expected[d]
            );
        }
    }
}
