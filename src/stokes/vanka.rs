//! Additive Vanka relaxation (docs/mathematics.md §7): one patch per pressure node (i, j) =
//! its pressure unknown and the velocity unknowns of its (up to) 2×2 elements, lattice
//! nodes 2i−2..2i+2 × 2j−2..2j+2 (51 unknowns inside the domain).
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
use half::f16;
use rayon::prelude::*;

use super::lattice::{divergence_slot, gradient_slot, lattice_slot, Grid, StokesHostMatrices};
use crate::device::stokes::{patch_node as velocity_node, VankaMaps, VankaRelax, PATCH};
use crate::device::{Block, Data, StokesDevice, Storage};
use crate::error::Result;
use crate::linalg::Cost;
use crate::precision::{Precision, Stored};

/// The pressure slot of a patch.
const PRESSURE_SLOT: usize = 50;

/// The patch matrix A_i = V_i A V_iᵀ in the 51 fixed slots (f64, column-major), with 1 on
/// the diagonal of inactive slots so it is invertible; returns it and the active mask.
fn patch_matrix(op: &StokesHostMatrices, pi: usize, pj: usize) -> (Vec<f64>, [bool; PATCH]) {
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
fn weighted_inverse(op: &StokesHostMatrices, pi: usize, pj: usize) -> Vec<f64> {
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
    let inverses = match form {
        VankaForm::Simple => patches,
        VankaForm::Tuned => 25.0,
    };
    let p = PATCH as f64;
    inverses * p * p * store_bytes as f64 + patches * (2.0 * p * compute_bytes as f64 + 12.0)
}

/// Every patch's W A⁻¹ in storage S, straight into its column (no f64 copy of all of them).
fn simple_inverses<S: Storage>(op: &StokesHostMatrices, patch_of_column: &[u32]) -> Vec<S> {
    let np = op.grid.np();
    let mut stored = vec![S::default(); patch_of_column.len() * PATCH * PATCH];
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
    stored
}

/// One level's Vanka relaxation.
pub struct Vanka<D: StokesDevice> {
    grid: Grid,
    form: VankaForm,
    /// Simple: one W A⁻¹ per patch column; tuned: one per class (25); in storage precision.
    inverses: Data<D>,
    maps: VankaMaps<D>,
    /// Gathered residuals V_i r and patch corrections W_i A_i⁻¹ V_i r, 51 per column, in the
    /// compute precision (empty where the device fuses the relaxation).
    gathered: Data<D>,
    corrections: Data<D>,
    /// Tuned: the interior inverse in the compute precision, for the GEMM.
    interior_inverse: Data<D>,
    interior_columns: usize,
    /// 1/h: undoes the pressure scaling D of the stored inverses.
    pressure_scale: f64,
}

impl<D: StokesDevice> Vanka<D> {
    pub fn new(
        dev: &D,
        op: &StokesHostMatrices,
        form: VankaForm,
        precision: Precision,
    ) -> Result<Self> {
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
        let compute = precision.compute();
        let (inverses, inverse_of_column, interior_columns, interior_inverse) = match form {
            VankaForm::Simple => {
                let inverses = match precision {
                    Precision::F16 => {
                        Data::from_owned(dev, simple_inverses::<f16>(op, &patch_of_column))?
                    }
                    Precision::F32 | Precision::Tf32 => {
                        Data::from_owned(dev, simple_inverses::<f32>(op, &patch_of_column))?
                    }
                    Precision::F64 => {
                        Data::from_owned(dev, simple_inverses::<f64>(op, &patch_of_column))?
                    }
                };
                let identity: Vec<u32> = (0..patches as u32).collect();
                (inverses, identity, 0, Data::zeros(dev, 0, compute)?)
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
                let class_of_column: Vec<u32> = patch_of_column
                    .iter()
                    .map(|&k| {
                        let (i, j) = (k as usize % np, k as usize / np);
                        (side_class(j, n) * 5 + side_class(i, n)) as u32
                    })
                    .collect();
                let interior_class = 2 * 5 + 2;
                // The interior inverse as stored (rounded to the storage precision), then
                // widened to the compute precision for the GEMM.
                let interior_inverse: Vec<f64> = flat
                    [interior_class * PATCH * PATCH..(interior_class + 1) * PATCH * PATCH]
                    .iter()
                    .map(|&v| round_to(precision, v))
                    .collect();
                let interior_columns = (0..np).filter(|&i| interior(i)).count().pow(2);
                (
                    Data::from_f64(dev, &flat, precision)?,
                    class_of_column,
                    interior_columns,
                    Data::from_f64(dev, &interior_inverse, compute)?,
                )
            }
        };
        // A device that fuses the relaxation keeps the patches' values in its own scratch.
        let staged = if dev.vanka_relax_is_fused(interior_columns > 0) {
            0
        } else {
            patches * PATCH
        };
        Ok(Vanka {
            grid: g,
            form,
            inverses,
            maps: VankaMaps {
                column_of: dev.upload(&column_of)?,
                patch_of_column: dev.upload(&patch_of_column)?,
                inverse_of_column: dev.upload(&inverse_of_column)?,
            },
            gathered: Data::zeros(dev, staged, compute)?,
            corrections: Data::zeros(dev, staged, compute)?,
            interior_inverse,
            interior_columns,
            pressure_scale: n as f64,
        })
    }

    pub fn form(&self) -> VankaForm {
        self.form
    }

    pub fn bytes(&self) -> usize {
        self.inverses.bytes()
            + self.gathered.bytes()
            + self.corrections.bytes()
            + self.interior_inverse.bytes()
            + 12 * (self.grid.np() * self.grid.np())
    }

    /// What one `relax` costs: a 51×51 product per patch; every stored inverse read once,
    /// the gathered residuals and corrections written and read (where they are buffers, not
    /// a fused relaxation's scratch), r read, x updated.
    pub fn relax_cost(&self) -> Cost {
        let patches = (self.grid.np() * self.grid.np()) as f64;
        let flow = self.grid.flow_len() * self.gathered.precision().bytes();
        Cost {
            flops: 2.0 * (PATCH * PATCH) as f64 * patches,
            bytes: (self.inverses.bytes()
                + self.interior_inverse.bytes()
                + 2 * (self.gathered.bytes() + self.corrections.bytes())
                + 3 * flow) as f64,
        }
    }

    /// x += ω Σ V_iᵀ W_i A_i⁻¹ V_i r on flat [ux | uy | p] vectors.
    pub fn relax(&mut self, dev: &D, r: &Block<D>, x: &mut Block<D>, omega: f64) -> Result<()> {
        let relax = VankaRelax {
            grid: self.grid,
            maps: &self.maps,
            inverses: &self.inverses,
            interior_inverse: &self.interior_inverse,
            interior_columns: self.interior_columns,
            pressure_scale: self.pressure_scale,
            omega,
        };
        dev.vanka_relax(relax, r, &mut self.gathered, &mut self.corrections, x)
    }
}

/// v rounded to `precision` (and back to f64).
fn round_to(precision: Precision, v: f64) -> f64 {
    match precision {
        Precision::F16 => <f16 as Stored>::from_f64(v).to_f64(),
        Precision::F32 | Precision::Tf32 => v as f32 as f64,
        Precision::F64 => v,
    }
}
