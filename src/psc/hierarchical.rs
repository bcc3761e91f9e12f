//! The hierarchical-basis transform S of SPEC §2.1 on the unknowns of a unit-square mesh
//! refined `levels` times: S maps hierarchical coefficients to nodal values. Solves apply S
//! and Sᵀ level by level in O(N) on the structured grid (the device's
//! `hierarchical_transform`); S is never formed densely (its sparse form is built once for
//! the set-up, Ã = SᵀAS).

use crate::device::psc::{CellParents, HierarchicalTransform};
use crate::error::{Error, Result};
use crate::mesh::{Element, Mesh2d};
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

    /// The level-by-level transform the device applies (S and Sᵀ in O(N)).
    pub fn transform(&self) -> HierarchicalTransform {
        HierarchicalTransform {
            n: self.n,
            levels: self.levels,
            cell_parents: match self.element {
                Element::P1 => CellParents::Diagonal,
                _ => CellParents::Corners,
            },
        }
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
    use crate::mesh::unit_square_refined;

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
        let mut sx = vec![0.0; hb.len()];
        crate::sparse::spmv(&hb.matrix(), &x, &mut sx);
        let x = sx;
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
