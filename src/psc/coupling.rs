//! How a PSC apply multiplies by the coupling D = A_EI of the coarse edges with the macro
//! elements' interiors (docs/mathematics.md §3, "Applying D").
//!
//! - [`Coupling::Csr`]: D and Dᵀ as sparse matrices and C⁻¹ twice,
//!   g = D (C⁻¹ b_I) and x_I = C⁻¹ (b_I − Dᵀ x_E).
//! - [`Coupling::Element`]: D restricted to a macro element m of group g is s_∂m ∘ D̂_g on its
//!   boundary unknowns ∂m (s: their E scaling), one dense D̂_g per group. Then
//!   g = Σ_m s_∂m ∘ (D̂_g C_g⁻¹) b_I,m and x_I,m = [C_g⁻¹ | W_g] [b_I,m; −s_∂m ∘ x_∂m] with
//!   W_g = C_g⁻¹ D̂_gᵀ: two GEMMs with one stored operator per group and no sparse D.

use std::collections::{BTreeMap, HashMap};

pub use crate::config::Coupling;
use crate::device::Storage;
use crate::error::Result;
use crate::sparse::Csr;

/// A column of D̂_gᵀ: (local I index, value) in increasing local index.
type Column = Vec<(u32, f64)>;

/// Each group's D̂_g, and where each macro element's boundary unknowns sit in it.
pub(super) struct LocalCoupling {
    /// Per group, the columns of D̂_gᵀ (one per boundary position), the E scaling divided
    /// out.
    pub columns: Vec<Vec<Column>>,
    /// Per macro element in I order: (boundary position, E index) of each of its boundary
    /// unknowns, by position.
    pub members: Vec<Vec<(u32, u32)>>,
    /// Per group, the most boundary unknowns one of its macro elements has.
    pub widest: Vec<usize>,
}

impl LocalCoupling {
    /// From Dᵀ in storage precision S (rows: the I entries, group by group and macro element
    /// by macro element in their representatives' local order). A member's E unknown takes
    /// the group's boundary position whose column it equals (to 4u of S, 1e-12 in f64, and
    /// the flush of S's conversion); a column that matches none opens a new position, so the
    /// factorisation D = s ∘ D̂ holds whatever the mesh (on a uniform one every member fills
    /// the same positions).
    pub fn of<S: Storage>(group_sizes: &[(usize, usize)], scale_e: &[f64], dt: &Csr<S>) -> Self {
        let unit = S::PRECISION.unit_roundoff();
        let tolerance = (4.0 * unit).max(1e-12);
        let flush = unit
            * dt.values()
                .iter()
                .fold(0.0f64, |a, v| a.max(v.to_f64().abs()));
        let mut columns = Vec::with_capacity(group_sizes.len());
        let mut members = Vec::new();
        let mut widest = Vec::with_capacity(group_sizes.len());
        let mut row = 0;
        for &(size, count) in group_sizes {
            let mut group: Vec<Column> = Vec::new();
            let mut by_pattern: HashMap<Vec<u32>, Vec<usize>> = HashMap::new();
            let mut most = 0;
            for _ in 0..count {
                let mut own: BTreeMap<u32, Column> = BTreeMap::new();
                for l in 0..size {
                    let (cols, vals) = dt.row(row + l);
                    for (&e, v) in cols.iter().zip(vals) {
                        own.entry(e)
                            .or_default()
                            .push((l as u32, v.to_f64() / scale_e[e as usize]));
                    }
                }
                row += size;
                let mut taken = vec![false; group.len()];
                let mut boundary = Vec::with_capacity(own.len());
                for (e, column) in own {
                    let slack = flush / scale_e[e as usize];
                    let key = pattern(&column);
                    let found = by_pattern.get(&key).and_then(|candidates| {
                        candidates.iter().copied().find(|&j| {
                            !taken.get(j).copied().unwrap_or(false)
                                && close(&group[j], &column, tolerance, slack)
                        })
                    });
                    let j = found.unwrap_or_else(|| {
                        group.push(column);
                        by_pattern.entry(key).or_default().push(group.len() - 1);
                        group.len() - 1
                    });
                    if taken.len() <= j {
                        taken.resize(j + 1, false);
                    }
                    taken[j] = true;
                    boundary.push((j as u32, e));
                }
                boundary.sort_unstable();
                most = most.max(boundary.len());
                members.push(boundary);
            }
            columns.push(group);
            widest.push(most);
        }
        LocalCoupling {
            columns,
            members,
            widest,
        }
    }

    /// Boundary positions of each group.
    pub fn boundary_sizes(&self) -> Vec<usize> {
        self.columns.iter().map(Vec::len).collect()
    }

    /// Group `g`'s [C_g⁻¹ | W_g] with W_g = C_g⁻¹ D̂_gᵀ (`slots` × (`slots` +
    /// `boundary_slots`), column-major, zero in the padding), and with `schur` also
    /// Z_g = D̂_g W_g (`boundary_slots`², M3's D C⁻¹ Dᵀ), from C_g⁻¹ in S (`size`²
    /// column-major, unpadded); products in f64, rounded once to S.
    pub fn operators<S: Storage>(
        &self,
        g: usize,
        c_inv: &[S],
        (size, slots, boundary_slots): (usize, usize, usize),
        schur: bool,
    ) -> Result<(Vec<S>, Vec<S>)> {
        let columns = &self.columns[g];
        let b = columns.len();
        let mut w = vec![0.0f64; size * b];
        for (j, column) in columns.iter().enumerate() {
            let out = &mut w[j * size..(j + 1) * size];
            for &(l, v) in column {
                let c = &c_inv[l as usize * size..(l as usize + 1) * size];
                for (o, c) in out.iter_mut().zip(c) {
                    *o += v * c.to_f64();
                }
            }
        }
        let w_stored: Vec<S> = super::operator::convert_values("C⁻¹D̂ᵀ", &w)?;
        let mut m = vec![S::default(); slots * (slots + boundary_slots)];
        for l in 0..size {
            m[l * slots..l * slots + size].copy_from_slice(&c_inv[l * size..(l + 1) * size]);
        }
        for j in 0..b {
            let at = (slots + j) * slots;
            m[at..at + size].copy_from_slice(&w_stored[j * size..(j + 1) * size]);
        }
        if !schur {
            return Ok((m, Vec::new()));
        }
        let mut z = vec![0.0f64; boundary_slots * boundary_slots];
        for j in 0..b {
            let w_j = &w[j * size..(j + 1) * size];
            for (i, column) in columns.iter().enumerate() {
                z[i + j * boundary_slots] = column.iter().map(|&(l, v)| v * w_j[l as usize]).sum();
            }
        }
        Ok((m, super::operator::convert_values("D̂C⁻¹D̂ᵀ", &z)?))
    }

    /// The gather x ↦ s_∂m ∘ x_∂m of every macro element (rows: the `rows` I slots, the
    /// boundary of the k-th macro element at row `boundary_row(k)` on; one entry per
    /// boundary unknown, its E scaling).
    pub fn gather<S: Storage>(
        &self,
        rows: usize,
        ne: usize,
        scale_e: &[f64],
        boundary_row: impl Fn(usize) -> usize,
    ) -> Result<Csr<S>> {
        let mut row_ptr = vec![0usize; rows + 1];
        let mut col_idx = Vec::new();
        let mut scales = Vec::new();
        let mut next = 0;
        for (k, boundary) in self.members.iter().enumerate() {
            let first = boundary_row(k);
            for &(j, e) in boundary {
                let r = first + j as usize;
                row_ptr[next + 1..=r].fill(col_idx.len());
                col_idx.push(e);
                scales.push(scale_e[e as usize]);
                row_ptr[r + 1] = col_idx.len();
                next = r + 1;
            }
        }
        row_ptr[next + 1..].fill(col_idx.len());
        Csr::new(
            rows,
            ne,
            row_ptr,
            col_idx,
            super::operator::convert_values("E scaling", &scales)?,
        )
    }
}

/// The rows of a column's entries that are not small against its largest (the lookup key
/// of a match: entries near S's flush level may be stored in one member and not another).
fn pattern(column: &Column) -> Vec<u32> {
    let largest = column.iter().fold(0.0f64, |a, e| a.max(e.1.abs()));
    column
        .iter()
        .filter(|e| e.1.abs() > 1e-3 * largest)
        .map(|e| e.0)
        .collect()
}

/// Whether two columns agree entry by entry to `tolerance` of the first's largest entry
/// plus `slack` (a missing entry is 0).
fn close(a: &Column, b: &Column, tolerance: f64, slack: f64) -> bool {
    let largest = a.iter().fold(0.0f64, |m, e| m.max(e.1.abs()));
    let bound = tolerance * largest + slack;
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let (va, vb) = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                i += 1;
                j += 1;
                (x.1, y.1)
            }
            (Some(x), Some(y)) if x.0 < y.0 => {
                i += 1;
                (x.1, 0.0)
            }
            (Some(x), None) => {
                i += 1;
                (x.1, 0.0)
            }
            (_, Some(y)) => {
                j += 1;
                (0.0, y.1)
            }
            (None, None) => unreachable!(),
        };
        if (va - vb).abs() > bound {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every macro element's E unknowns fill its group's boundary positions, which are
    /// no more than one macro element's edge nodes: 4(m − 1) on the unit square's squares
    /// (m = 8), at most 3(m − 1) on the flow around a square's triangles (m = 4, three
    /// groups; on right triangles some couplings cancel), the same in f64 and after f16
    /// rounding.
    #[test]
    fn boundary_positions_are_one_macro_elements_edge_nodes() {
        use crate::mesh::{refine, unit_square_refined, CoarseMesh, Element};
        use crate::psc::{PscHost, PscMethod, PscSetup};
        let square = unit_square_refined(4, 3, Element::Q1).unwrap();
        let flow = refine(&CoarseMesh::flow_around_square(), 2).unwrap();
        for (mesh, sides, m, all) in [(square, 4, 8, true), (flow, 3, 4, false)] {
            let setup = PscSetup::on_mesh(mesh, PscMethod::M3).unwrap();
            let groups = setup.groups.len();
            let h64 = PscHost::<f64>::new(&setup).unwrap();
            let h16 = PscHost::<half::f16>::new(&setup).unwrap();
            let l64 = LocalCoupling::of(&h64.parts.group_sizes, &h64.parts.scale_e, &h64.dt);
            let l16 = LocalCoupling::of(&h16.parts.group_sizes, &h16.parts.scale_e, &h16.dt);
            let sizes = l64.boundary_sizes();
            assert_eq!(sizes.len(), groups);
            assert!(
                sizes
                    .iter()
                    .all(|&b| b <= sides * (m - 1) && (b == sides * (m - 1) || !all)),
                "{sizes:?}"
            );
            assert_eq!(l16.boundary_sizes(), sizes);
            // Some macro element of each group fills all of its positions.
            assert_eq!(l64.widest, sizes);
            for local in [l64, l16] {
                // Each E unknown lies on the edges of one or two macro elements (and couples
                // with neither where the couplings cancel).
                let mut on = vec![0; h64.parts.e_dofs.len()];
                for &(_, e) in local.members.iter().flatten() {
                    on[e as usize] += 1;
                }
                assert!(on.iter().all(|&k| k <= 2), "{on:?}");
            }
        }
    }

    #[test]
    fn couplings_parse_by_name() {
        for c in Coupling::ALL {
            assert_eq!(c.name().parse::<Coupling>().unwrap(), c);
        }
        let err = "dense".parse::<Coupling>().unwrap_err();
        assert!(
            err.contains("\"dense\"") && err.contains("csr, element"),
            "{err}"
        );
    }

    /// Two macro elements of one group (2 interior unknowns each) on three E unknowns: the
    /// second's columns match the first's after its E scaling is divided out, the third
    /// E unknown (only the second's) opens a position, and the gather puts each boundary
    /// unknown at its position's row with its scale.
    #[test]
    fn members_share_positions_of_equal_columns() {
        let scale_e = [1.0, 2.0, 0.5];
        // Dᵀ rows: member 0 (local 0, 1), member 1 (local 0, 1).
        let dt = Csr::new(
            4,
            3,
            vec![0, 1, 2, 4, 5],
            vec![0, 0, 1, 2, 1],
            vec![-0.5, -0.25, -1.0, 0.3, -0.5],
        )
        .unwrap();
        let local = LocalCoupling::of::<f64>(&[(2, 2)], &scale_e, &dt);
        // Member 0: E0 = [−0.5, −0.25]; member 1: E1/2 = [−0.5, −0.25] (same position),
        // E2/0.5 = [0.6, 0] (new).
        assert_eq!(local.columns[0].len(), 2);
        assert_eq!(local.members, vec![vec![(0, 0)], vec![(0, 1), (1, 2)]]);
        assert_eq!(local.widest, vec![2]);
        let gather: Csr<f64> = local.gather(8, 3, &scale_e, |k| 4 * k + 2).unwrap();
        assert_eq!(gather.get(2, 0), Some(1.0));
        assert_eq!(gather.get(6, 1), Some(2.0));
        assert_eq!(gather.get(7, 2), Some(0.5));
        assert_eq!(gather.nnz(), 3);
        // [C⁻¹ | W] with C⁻¹ = diag(2, 4): W = C⁻¹ D̂ᵀ.
        let c_inv = [2.0, 0.0, 0.0, 4.0];
        let (m, z) = local.operators::<f64>(0, &c_inv, (2, 2, 2), true).unwrap();
        assert_eq!(m, vec![2.0, 0.0, 0.0, 4.0, -1.0, -1.0, 1.2, 0.0]);
        // Z = D̂ W: [[0.5+0.25, −0.6], [−0.6, 0.72]].
        let expected = [0.75, -0.6, -0.6, 0.72];
        assert!(
            z.iter().zip(expected).all(|(a, b)| (a - b).abs() < 1e-15),
            "{z:?}"
        );
    }
}
