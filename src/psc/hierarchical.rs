//! The hierarchical-basis transform S of docs/mathematics.md §3 on the unknowns of a
//! refined mesh: S maps hierarchical coefficients to nodal values. Solves apply S and Sᵀ
//! level by level in O(N) (the device's `hierarchical_transform`): on the unit square's
//! grid directly, on any other refined mesh through the sparse rows of each level's parent
//! matrix N_k. S is never formed densely (its sparse form is built once for the set-up, Ã =
//! SᵀAS).

use std::sync::Arc;

use crate::device::psc::{
    CellParents, GridTransform, HierarchicalTransform, LevelTransform, RowUpdate,
};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::fem::Dofs;
use crate::mesh::{Element, Mesh2d, Parents};
use crate::precision::Precision;
use crate::sparse::Csr;

/// Weight of an edge-midpoint parent and of a Q1 cell-midpoint parent.
const EDGE_WEIGHT: f64 = 0.5;
const CELL_WEIGHT: f64 = 0.25;

#[derive(Clone, Debug, PartialEq)]
pub enum HierarchicalBasis {
    /// The unit square's structured mesh with Dirichlet conditions on the whole boundary,
    /// unknowns lexicographic.
    Grid(GridBasis),
    /// Any refined mesh: N_k level by level.
    Levels(Arc<Levels>),
}

impl HierarchicalBasis {
    pub fn new(mesh: &Mesh2d) -> Result<Self> {
        let hierarchy = mesh.hierarchy.as_ref().ok_or_else(|| {
            Error::InvalidInput(
                "the hierarchical basis needs a mesh refined from a coarse mesh (mesh.h0)".into(),
            )
        })?;
        // The grid transform leaves out the whole boundary: only for Dirichlet everywhere.
        let dirichlet_everywhere = mesh.num_interior() == (mesh.n - 1) * (mesh.n - 1);
        Ok(match hierarchy.n0 {
            Some(_) if dirichlet_everywhere => HierarchicalBasis::Grid(GridBasis {
                element: mesh.element,
                n: mesh.n,
                levels: hierarchy.levels,
            }),
            _ => HierarchicalBasis::Levels(Arc::new(Levels::from_mesh(mesh)?)),
        })
    }

    /// Unknowns.
    pub fn len(&self) -> usize {
        match self {
            HierarchicalBasis::Grid(g) => (g.n - 1) * (g.n - 1),
            HierarchicalBasis::Levels(l) => l.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The level-by-level transform on a device, in the compute precision of the solve.
    pub fn transform<D: Device>(
        &self,
        dev: &D,
        precision: Precision,
    ) -> Result<HierarchicalTransform<D>> {
        Ok(match self {
            HierarchicalBasis::Grid(g) => HierarchicalTransform::Grid(GridTransform {
                n: g.n,
                levels: g.levels,
                cell_parents: match g.element {
                    Element::P1 => CellParents::Diagonal,
                    _ => CellParents::Corners,
                },
            }),
            HierarchicalBasis::Levels(l) => HierarchicalTransform::Levels(LevelTransform {
                len: l.len,
                forward: l
                    .forward
                    .iter()
                    .map(|level| level.upload(dev, precision))
                    .collect::<Result<_>>()?,
                transpose: l
                    .transpose
                    .iter()
                    .map(|level| level.upload(dev, precision))
                    .collect::<Result<_>>()?,
            }),
        })
    }

    /// S as a sparse matrix: row i holds the hierarchical coefficients whose basis
    /// functions are nonzero at node i (itself and its ancestors).
    pub fn matrix(&self) -> Csr<f64> {
        match self {
            HierarchicalBasis::Grid(g) => g.matrix(),
            HierarchicalBasis::Levels(l) => l.matrix(),
        }
    }
}

/// S on the unit square's grid of n cells per direction refined `levels` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridBasis {
    element: Element,
    /// Cells per direction of the fine mesh.
    n: usize,
    levels: usize,
}

impl GridBasis {
    fn len(&self) -> usize {
        (self.n - 1) * (self.n - 1)
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
                rows[d] = merge_sorted(row);
            });
        }
        csr_from_rows(self.len(), rows)
    }
}

/// S = (I + N_L) ··· (I + N_1) as sparse rows: N_k holds, for every unknown new on level
/// k, its parents' unknowns and weights (Dirichlet parents left out).
#[derive(Clone, Debug, PartialEq)]
pub struct Levels {
    len: usize,
    forward: Vec<LevelRows>,
    transpose: Vec<LevelRows>,
}

/// Sparse rows of one level's N_k (or N_kᵀ): row `rows[r]` holds
/// `cols[row_ptr[r]..row_ptr[r+1]]` with `weights`.
#[derive(Clone, Debug, Default, PartialEq)]
struct LevelRows {
    rows: Vec<u32>,
    row_ptr: Vec<u32>,
    cols: Vec<u32>,
    weights: Vec<f64>,
}

impl LevelRows {
    /// Rows from (row, column, weight) entries in any order.
    fn from_entries(mut entries: Vec<(u32, u32, f64)>) -> Self {
        entries.sort_unstable_by_key(|e| (e.0, e.1));
        let mut level = LevelRows {
            row_ptr: vec![0],
            ..LevelRows::default()
        };
        for (row, col, weight) in entries {
            if level.rows.last() != Some(&row) {
                if !level.rows.is_empty() {
                    level.row_ptr.push(level.cols.len() as u32);
                }
                level.rows.push(row);
            }
            level.cols.push(col);
            level.weights.push(weight);
        }
        if !level.rows.is_empty() {
            level.row_ptr.push(level.cols.len() as u32);
        }
        level
    }

    fn upload<D: Device>(&self, dev: &D, precision: Precision) -> Result<RowUpdate<D>> {
        RowUpdate::upload(
            dev,
            &self.rows,
            &self.row_ptr,
            &self.cols,
            &self.weights,
            precision,
        )
    }
}

impl Levels {
    fn from_mesh(mesh: &Mesh2d) -> Result<Self> {
        let hierarchy = mesh.hierarchy.as_ref().expect("checked by the caller");
        let dofs = Dofs::from_boundary(&mesh.on_boundary);
        let mut forward = vec![Vec::new(); hierarchy.levels];
        for (node, &dof) in dofs.dof_of_node.iter().enumerate() {
            let (parents, weight): (&[u32], f64) = match &hierarchy.parents[node] {
                Parents::None => continue,
                Parents::Edge(p) => (p, EDGE_WEIGHT),
                Parents::Cell(p) => (p, CELL_WEIGHT),
            };
            if dof == Dofs::NONE {
                continue;
            }
            let level = hierarchy.level[node] as usize;
            if level == 0 || level > hierarchy.levels {
                return Err(Error::InvalidInput(format!(
                    "mesh hierarchy: node {node} has parents but is on level {level}"
                )));
            }
            for &p in parents {
                let parent = dofs.dof_of_node[p as usize];
                if parent != Dofs::NONE {
                    forward[level - 1].push((dof, parent, weight));
                }
            }
        }
        let transpose = forward
            .iter()
            .map(|level| {
                LevelRows::from_entries(level.iter().map(|&(c, p, w)| (p, c, w)).collect())
            })
            .collect();
        Ok(Levels {
            len: dofs.len(),
            forward: forward.into_iter().map(LevelRows::from_entries).collect(),
            transpose,
        })
    }

    /// S as a sparse matrix: the row of a new unknown is its own unit entry plus its
    /// parents' rows, weighted.
    fn matrix(&self) -> Csr<f64> {
        let mut rows: Vec<Vec<(u32, f64)>> = (0..self.len as u32).map(|d| vec![(d, 1.0)]).collect();
        for level in &self.forward {
            for (r, &row) in level.rows.iter().enumerate() {
                let (start, end) = (level.row_ptr[r] as usize, level.row_ptr[r + 1] as usize);
                let mut merged: Vec<(u32, f64)> = vec![(row, 1.0)];
                for p in start..end {
                    let w = level.weights[p];
                    merged.extend(
                        rows[level.cols[p] as usize]
                            .iter()
                            .map(|&(c, v)| (c, w * v)),
                    );
                }
                rows[row as usize] = merge_sorted(merged);
            }
        }
        csr_from_rows(self.len, rows)
    }
}

/// Sorts entries by column and adds duplicates.
fn merge_sorted(mut row: Vec<(u32, f64)>) -> Vec<(u32, f64)> {
    row.sort_by_key(|e| e.0);
    let mut merged: Vec<(u32, f64)> = Vec::with_capacity(row.len());
    for (c, v) in row {
        match merged.last_mut() {
            Some(last) if last.0 == c => last.1 += v,
            _ => merged.push((c, v)),
        }
    }
    merged
}

fn csr_from_rows(n: usize, rows: Vec<Vec<(u32, f64)>>) -> Csr<f64> {
    let mut row_ptr = vec![0];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for row in rows {
        for (c, v) in row {
            cols.push(c);
            vals.push(v);
        }
        row_ptr.push(cols.len());
    }
    Csr::new(n, n, row_ptr, cols, vals).expect("rows are sorted and in range")
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
        let HierarchicalBasis::Grid(grid) = &hb else {
            panic!("the unit square has a grid")
        };
        let h = mesh.hierarchy.as_ref().unwrap();
        // The coarse hat function of the centre node (0.5, 0.5), as HB coefficients.
        let mut x = vec![0.0; hb.len()];
        let mut expected = vec![0.0; hb.len()];
        let n = mesh.n;
        for node in 0..mesh.num_nodes() {
            let (i, j) = (node % (n + 1), node / (n + 1));
            let Some(d) = grid.dof(i, j) else { continue };
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

    /// The sparse rows built from the mesh's parent lists give the same S as the grid.
    #[test]
    fn level_rows_match_the_grid() {
        for element in [Element::Q1, Element::P1] {
            let mesh = unit_square_refined(3, 3, element).unwrap();
            let grid = HierarchicalBasis::new(&mesh).unwrap().matrix();
            let levels = Levels::from_mesh(&mesh).unwrap().matrix();
            assert_eq!(grid.row_ptr(), levels.row_ptr(), "{element:?}");
            assert_eq!(grid.col_idx(), levels.col_idx());
            assert_eq!(grid.values(), levels.values());
        }
    }
}
