//! Additive Vanka relaxation (SPEC §4.2): one patch per pressure node (i, j) = its pressure
//! unknown and the velocity unknowns of its (up to) 2×2 elements, lattice nodes
//! 2i−2..2i+2 × 2j−2..2j+2 (51 unknowns inside the domain).
//!
//! Every patch uses the same 51 slots: velocity component c at lattice offset (dI, dJ) is
//! slot 25c + 5(dJ+2) + (dI+2), the pressure slot 50. Slots outside the domain or on the
//! Dirichlet boundary are inactive: their rows and columns of the stored inverse are zero.
//! The update x += Σ V_iᵀ W_i A_i⁻¹ V_i r uses W_i = 1/(number of patches holding the
//! unknown) for velocity (a partition of unity: 9, 6, 6 or 4 patches) and 1 for pressure.
//!
//! Simple form: one inverse per patch. Tuned form: on a uniform mesh a patch matrix depends
//! only on how close the patch is to each side (i ∈ {0, 1, interior, n−1, n} per direction),
//! so 25 distinct inverses are stored and shared; the interior patches, almost all of them,
//! are relaxed together by one GEMM.

use faer::linalg::solvers::DenseSolveCore;
use num_traits::Zero;
use rayon::prelude::*;

use super::lattice::{
    divergence_slot, gradient_slot, lattice_slot, split, split_mut, Grid, StokesOperator,
};
use crate::backend::cpu::{filled, gemm_real, Operand};
use crate::precision::{Real, Stored};

/// Unknowns of a full patch.
pub const PATCH: usize = 51;
const PRESSURE_SLOT: usize = 50;

/// The lattice node and component of velocity slot s of patch (pi, pj), if active.
fn velocity_node(grid: Grid, pi: usize, pj: usize, s: usize) -> Option<(usize, usize, usize)> {
    let (c, w) = (s / 25, s % 25);
    let i = 2 * pi as isize - 2 + (w % 5) as isize;
    let j = 2 * pj as isize - 2 + (w / 5) as isize;
    let m = grid.m() as isize;
    (i > 0 && j > 0 && i < m - 1 && j < m - 1).then_some((c, i as usize, j as usize))
}

/// The patch matrix A_i = V_i A V_iᵀ in the 51 fixed slots (f64, column-major), with 1 on
/// the diagonal of inactive slots so it is invertible; returns it and the active mask.
fn patch_matrix(op: &StokesOperator<f64>, pi: usize, pj: usize) -> (Vec<f64>, [bool; PATCH]) {
    let g = op.grid;
    let mut a = vec![0.0; PATCH * PATCH];
    let mut active = [false; PATCH];
    active[PRESSURE_SLOT] = true;
    for s in 0..PRESSURE_SLOT {
        let Some((c, i, j)) = velocity_node(g, pi, pj, s) else {
            a[s * PATCH + s] = 1.0;
            continue;
        };
        active[s] = true;
        for t in 0..PRESSURE_SLOT {
            if let Some((c2, i2, j2)) = velocity_node(g, pi, pj, t) {
                let slot = lattice_slot(i, j, i2 as isize - i as isize, j2 as isize - j as isize);
                if let (true, Some(slot)) = (c == c2, slot) {
                    a[t * PATCH + s] = op.laplacian.row(i, j)[slot];
                }
            }
        }
        let gslot =
            gradient_slot(i, j, pi, pj).expect("a patch's pressure is in its velocity's window");
        a[PRESSURE_SLOT * PATCH + s] = op.gradient[c].entry(i, j, gslot);
        let dslot =
            divergence_slot(pi, pj, i, j).expect("a patch's velocity is in its pressure's window");
        a[s * PATCH + PRESSURE_SLOT] = op.divergence[c].entry(pi, pj, dslot);
    }
    (a, active)
}

/// W_i D A_i⁻¹ D (column-major, inactive rows and columns zero), in f64, with D = diag(1,
/// …, 1, h): the pressure row and column of A_i⁻¹ grow like 1/h and 1/h², so scaled they
/// are O(1) and fit f16 at any mesh size; the relaxation divides by h on the way in and out.
fn weighted_inverse(op: &StokesOperator<f64>, pi: usize, pj: usize) -> Vec<f64> {
    let h = 1.0 / op.grid.n as f64;
    let d = |slot: usize| if slot == PRESSURE_SLOT { h } else { 1.0 };
    let (a, active) = patch_matrix(op, pi, pj);
    let inverse = faer::Mat::from_fn(PATCH, PATCH, |r, c| a[c * PATCH + r])
        .partial_piv_lu()
        .inverse();
    let mut out = vec![0.0; PATCH * PATCH];
    for c in 0..PATCH {
        for r in 0..PATCH {
            if active[r] && active[c] {
                out[c * PATCH + r] = slot_weight(r) * d(r) * inverse[(r, c)] * d(c);
            }
        }
    }
    out
}

/// Patches holding a lattice index along one direction: 3 (even), 2 (odd).
fn patches_along(index: usize) -> usize {
    3 - (index & 1)
}

/// W for slot s of any patch: 1/(patches holding that velocity unknown), 1 for pressure.
fn slot_weight(s: usize) -> f64 {
    if s == PRESSURE_SLOT {
        return 1.0;
    }
    // Lattice parity of the slot's node equals the parity of its offset (2i is even).
    let w = s % 25;
    1.0 / (patches_along(w % 5) * patches_along(w / 5)) as f64
}

/// The tuned form's class of patch index i along one direction: 0, 1, 2 (interior), 3, 4.
fn side_class(i: usize, n: usize) -> usize {
    match i {
        0 => 0,
        1 => 1,
        _ if i == n => 4,
        _ if i + 1 == n => 3,
        _ => 2,
    }
}

/// Which inverses a Vanka relaxation stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VankaForm {
    /// One inverse per patch.
    Simple,
    /// The 25 distinct inverses of a uniform mesh, shared.
    Tuned,
}

/// Bytes a Vanka relaxation of an n×n mesh needs (to check memory before building it).
pub fn vanka_bytes(n: usize, form: VankaForm, store_bytes: usize, compute_bytes: usize) -> f64 {
    let patches = ((n + 1) * (n + 1)) as f64;
    let (inverses, buffers) = match form {
        VankaForm::Simple => (patches, 1.0),
        VankaForm::Tuned => (25.0, 2.0),
    };
    let p = PATCH as f64;
    inverses * p * p * store_bytes as f64 + patches * (buffers * p * compute_bytes as f64 + 8.0)
}

/// One level's Vanka relaxation.
pub struct Vanka<S: Stored> {
    grid: Grid,
    form: VankaForm,
    /// Simple: one W A⁻¹ per patch column; tuned: one per class (25).
    inverses: Vec<S>,
    /// Buffer column of patch (i, j) (index j(n+1)+i); tuned: interior patches first.
    column_of: Vec<u32>,
    /// The patch of each buffer column (the inverse permutation).
    patch_of_column: Vec<u32>,
    /// Tuned: class of each buffer column.
    class_of_column: Vec<u8>,
    /// Tuned: gathered residuals V_i r, 51 per column.
    gathered: Vec<S::Compute>,
    /// Patch corrections W_i A_i⁻¹ V_i r, 51 per column.
    corrections: Vec<S::Compute>,
    /// Tuned: the interior inverse in the compute precision, for the GEMM.
    interior_inverse: Vec<S::Compute>,
    interior_columns: usize,
    /// 1/h: undoes the pressure scaling D of the stored inverses.
    pressure_scale: S::Compute,
}

impl<S: Stored> Vanka<S> {
    pub fn new(op: &StokesOperator<f64>, form: VankaForm) -> Self {
        let g = op.grid;
        let (n, np) = (g.n, g.np());
        let patches = np * np;
        let interior = |i: usize| side_class(i, n) == 2;
        // Interior patches first (row by row), then the rest.
        let mut column_of = vec![0u32; patches];
        let mut next = 0u32;
        for pass in [true, false] {
            for j in 0..np {
                for i in 0..np {
                    if (interior(i) && interior(j)) == pass {
                        column_of[j * np + i] = next;
                        next += 1;
                    }
                }
            }
        }
        let mut patch_of_column = vec![0u32; patches];
        for (k, &c) in column_of.iter().enumerate() {
            patch_of_column[c as usize] = k as u32;
        }
        let interior_columns = (0..np).filter(|&i| interior(i)).count().pow(2);
        let mut class_of_column = vec![0u8; patches];
        for j in 0..np {
            for i in 0..np {
                class_of_column[column_of[j * np + i] as usize] =
                    (side_class(j, n) * 5 + side_class(i, n)) as u8;
            }
        }
        let to_store = |v: Vec<f64>| v.into_iter().map(S::from_f64).collect::<Vec<S>>();
        let (inverses, interior_inverse) = match form {
            VankaForm::Simple => {
                // Each inverse goes straight into its column, in the storage precision (no
                // f64 copy of all of them).
                let mut stored = vec![S::default(); patches * PATCH * PATCH];
                stored
                    .par_chunks_mut(PATCH * PATCH)
                    .zip(patch_of_column.par_iter())
                    .for_each(|(out, &k)| {
                        let k = k as usize;
                        let inverse = weighted_inverse(op, k % np, k / np);
                        out.iter_mut()
                            .zip(inverse)
                            .for_each(|(o, v)| *o = S::from_f64(v));
                    });
                (stored, Vec::new())
            }
            VankaForm::Tuned => {
                // A representative patch per class: indices 0, 1, 2, n−1, n.
                let representative = |class: usize| [0, 1, 2, n - 1, n][class];
                let mut flat = Vec::with_capacity(25 * PATCH * PATCH);
                for cj in 0..5 {
                    for ci in 0..5 {
                        let (i, j) = (representative(ci), representative(cj));
                        if side_class(i, n) == ci && side_class(j, n) == cj {
                            flat.extend(weighted_inverse(op, i, j));
                        } else {
                            // A class this (coarse) mesh does not have.
                            flat.extend(std::iter::repeat_n(0.0, PATCH * PATCH));
                        }
                    }
                }
                let stored = to_store(flat);
                let interior_class = 2 * 5 + 2;
                let interior_inverse = stored
                    [interior_class * PATCH * PATCH..(interior_class + 1) * PATCH * PATCH]
                    .iter()
                    .map(|v| v.to_compute())
                    .collect();
                (stored, interior_inverse)
            }
        };
        let zero = S::Compute::zero();
        Vanka {
            grid: g,
            form,
            inverses,
            column_of,
            patch_of_column,
            class_of_column,
            gathered: if form == VankaForm::Tuned {
                filled(patches * PATCH, zero)
            } else {
                Vec::new()
            },
            corrections: filled(patches * PATCH, zero),
            interior_inverse,
            interior_columns,
            pressure_scale: S::Compute::from_f64(n as f64),
        }
    }

    pub fn bytes(&self) -> usize {
        self.inverses.len() * std::mem::size_of::<S>()
            + (self.gathered.len() + self.corrections.len() + self.interior_inverse.len())
                * std::mem::size_of::<S::Compute>()
            + self.column_of.len() * 9
    }

    /// x += ω Σ V_iᵀ W_i A_i⁻¹ V_i r on flat [ux | uy | p] vectors.
    pub fn relax(&mut self, r: &[S::Compute], x: &mut [S::Compute], omega: S::Compute) {
        let g = self.grid;
        let np = g.np();
        let patch_of_column = &self.patch_of_column;
        let scale = self.pressure_scale;
        match self.form {
            VankaForm::Simple => {
                let inverses = &self.inverses;
                self.corrections
                    .par_chunks_mut(PATCH)
                    .zip(patch_of_column.par_iter())
                    .enumerate()
                    .for_each(|(col, (out, &k))| {
                        let k = k as usize;
                        let mut v = [S::Compute::zero(); PATCH];
                        gather(g, r, k % np, k / np, scale, &mut v);
                        let inv = &inverses[col * PATCH * PATCH..(col + 1) * PATCH * PATCH];
                        matvec(inv, &v, out);
                    });
            }
            VankaForm::Tuned => {
                let gathered = &mut self.gathered;
                gathered
                    .par_chunks_mut(PATCH)
                    .zip(patch_of_column.par_iter())
                    .for_each(|(out, &k)| {
                        let k = k as usize;
                        let v: &mut [S::Compute; PATCH] =
                            out.try_into().expect("a column holds one patch");
                        v.fill(S::Compute::zero());
                        gather(g, r, k % np, k / np, scale, v);
                    });
                // The interior patches share one inverse: one GEMM relaxes all of them.
                let ic = self.interior_columns;
                let (inner, outer) = self.corrections.split_at_mut(ic * PATCH);
                gemm_real(
                    PATCH,
                    ic,
                    PATCH,
                    inner,
                    PATCH,
                    Operand::col_major(&self.interior_inverse, PATCH),
                    Operand::col_major(&gathered[..ic * PATCH], PATCH),
                );
                let inverses = &self.inverses;
                let classes = &self.class_of_column[ic..];
                outer
                    .par_chunks_mut(PATCH)
                    .zip(gathered[ic * PATCH..].par_chunks(PATCH))
                    .zip(classes.par_iter())
                    .for_each(|((out, v), &class)| {
                        let class = class as usize;
                        let inv = &inverses[class * PATCH * PATCH..(class + 1) * PATCH * PATCH];
                        matvec(inv, v, out);
                    });
            }
        }
        self.scatter(x, omega);
    }

    /// x += ω Σ_i V_iᵀ (corrections of patch i): each unknown sums the patches holding it.
    fn scatter(&self, x: &mut [S::Compute], omega: S::Compute) {
        let g = self.grid;
        let (m, np) = (g.m(), g.np());
        let corrections = &self.corrections;
        let column_of = &self.column_of;
        let (xx, xy, xp) = split_mut(x, g);
        xx.par_chunks_mut(m)
            .zip(xy.par_chunks_mut(m))
            .enumerate()
            .for_each(|(j, (rx, ry))| {
                if j == 0 || j + 1 == m {
                    return;
                }
                for i in 1..m - 1 {
                    let (mut sx, mut sy) = (S::Compute::zero(), S::Compute::zero());
                    // Patches (pi, pj) with |I − 2pi| ≤ 2 and |J − 2pj| ≤ 2.
                    for pj in (j.saturating_sub(2)).div_ceil(2)..=((j + 2) / 2).min(np - 1) {
                        for pi in (i.saturating_sub(2)).div_ceil(2)..=((i + 2) / 2).min(np - 1) {
                            let col = column_of[pj * np + pi] as usize;
                            let w = (j + 2 - 2 * pj) * 5 + (i + 2 - 2 * pi);
                            sx = sx + corrections[col * PATCH + w];
                            sy = sy + corrections[col * PATCH + 25 + w];
                        }
                    }
                    rx[i] = rx[i] + omega * sx;
                    ry[i] = ry[i] + omega * sy;
                }
            });
        xp.par_chunks_mut(np).enumerate().for_each(|(pj, row)| {
            for (pi, v) in row.iter_mut().enumerate() {
                let col = column_of[pj * np + pi] as usize;
                *v = *v + omega * self.pressure_scale * corrections[col * PATCH + PRESSURE_SLOT];
            }
        });
    }
}

/// D⁻¹ V_i r: the residual in the 51 slots of patch (pi, pj), zero in inactive slots, its
/// pressure times `pressure_scale` = 1/h.
fn gather<T: Real>(g: Grid, r: &[T], pi: usize, pj: usize, pressure_scale: T, v: &mut [T; PATCH]) {
    let m = g.m();
    let (rx, ry, rp) = split(r, g);
    v[PRESSURE_SLOT] = pressure_scale * rp[pj * g.np() + pi];
    if pi >= 2 && pj >= 2 && pi + 2 <= g.n && pj + 2 <= g.n {
        // Interior patch: every slot active, five contiguous runs per component.
        for dj in 0..5 {
            let start = (2 * pj - 2 + dj) * m + 2 * pi - 2;
            v[5 * dj..5 * dj + 5].copy_from_slice(&rx[start..start + 5]);
            v[25 + 5 * dj..25 + 5 * dj + 5].copy_from_slice(&ry[start..start + 5]);
        }
        return;
    }
    for s in 0..25 {
        if let Some((_, i, j)) = velocity_node(g, pi, pj, s) {
            v[s] = rx[j * m + i];
            v[25 + s] = ry[j * m + i];
        }
    }
}

/// out = A v for a column-major 51×51 A stored in S.
fn matvec<S: Stored>(a: &[S], v: &[S::Compute], out: &mut [S::Compute]) {
    out.iter_mut().for_each(|o| *o = S::Compute::zero());
    for (c, &vc) in v.iter().enumerate() {
        if vc == S::Compute::zero() {
            continue;
        }
        let column = &a[c * PATCH..(c + 1) * PATCH];
        for (o, &acr) in out.iter_mut().zip(column) {
            *o = *o + acr.to_compute() * vc;
        }
    }
}
