//! Q2-Q1 Stokes on the uniform unit-square mesh (SPEC §1 and §4): structured stencil
//! storage, FGMRES in f64, preconditioned by monolithic multigrid (Vanka, Braess-Sarazin,
//! Schur-Uzawa relaxation) or the block-triangular preconditioner, each in f64, f32, or
//! f32 arithmetic on f16 storage.
//!
//! - [`lattice`]: storage and stencil kernels for L, B, Bᵀ, M
//! - [`assembly`]: element matrices, the manufactured problem, L2 errors
//! - [`transfer`]: FE interpolation and restriction
//! - [`vanka`], [`multigrid`]: the monolithic V(1,1) cycle and its relaxations
//! - [`block`]: the block-triangular preconditioner

pub mod assembly;
pub mod block;
pub mod lattice;
pub mod multigrid;
pub mod transfer;
pub mod vanka;

use std::time::Instant;

use half::f16;

pub use assembly::{l2_errors, StokesProblem};
pub use lattice::Grid;
pub use multigrid::{Relaxation, SchurParams};
pub use vanka::VankaForm;

use crate::error::{Error, Result};
use crate::krylov::{fgmres, FgmresInfo, FgmresParams, FgmresWorkspace};
use crate::precision::{Precision, Stored};

/// Tuned defaults (docs/performance.md, "Stokes: tuning"): Braess-Sarazin with L ≈ t·D.
pub const BRAESS_SARAZIN_DEFAULT: SchurParams = SchurParams {
    t: 1.1,
    omega: 1.0,
    jacobi_steps: 3,
    jacobi_weight: 1.0,
};

/// Schur-Uzawa as published (SPEC §4.2): t = 1, Jacobi weight 0.4; one Jacobi step
/// (more steps make it worse here: docs/performance.md, "Stokes: tuning").
pub const SCHUR_UZAWA_DEFAULT: SchurParams = SchurParams {
    t: 1.0,
    omega: 1.0,
    jacobi_steps: 1,
    jacobi_weight: 0.4,
};

/// Damping of the additive Vanka update (with partition-of-unity weights W_i), tuned.
pub const VANKA_OMEGA_DEFAULT: f64 = 0.8;

/// A preconditioner for FGMRES.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Preconditioner {
    /// Monolithic multigrid V(1,1) with this relaxation.
    Multigrid(Relaxation),
    /// Block-triangular with multigrid on M and L.
    BlockTriangular,
}

impl Preconditioner {
    /// The names `bench stokes --precond` and the config accept.
    pub const NAMES: &'static str =
        "vanka, vanka-tuned, braess-sarazin, schur-uzawa, block-triangular";

    /// The preconditioner of a name, with default parameters.
    pub fn by_name(name: &str) -> std::result::Result<Self, String> {
        Ok(match name {
            "vanka" => Preconditioner::Multigrid(Relaxation::Vanka {
                form: VankaForm::Simple,
                omega: VANKA_OMEGA_DEFAULT,
            }),
            "vanka-tuned" => Preconditioner::Multigrid(Relaxation::Vanka {
                form: VankaForm::Tuned,
                omega: VANKA_OMEGA_DEFAULT,
            }),
            "braess-sarazin" => {
                Preconditioner::Multigrid(Relaxation::BraessSarazin(BRAESS_SARAZIN_DEFAULT))
            }
            "schur-uzawa" => Preconditioner::Multigrid(Relaxation::SchurUzawa(SCHUR_UZAWA_DEFAULT)),
            "block-triangular" => Preconditioner::BlockTriangular,
            other => {
                return Err(format!(
                    "unknown preconditioner '{other}' (allowed: {})",
                    Preconditioner::NAMES
                ))
            }
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Preconditioner::Multigrid(Relaxation::Vanka {
                form: VankaForm::Simple,
                ..
            }) => "vanka",
            Preconditioner::Multigrid(Relaxation::Vanka {
                form: VankaForm::Tuned,
                ..
            }) => "vanka-tuned",
            Preconditioner::Multigrid(Relaxation::BraessSarazin(_)) => "braess-sarazin",
            Preconditioner::Multigrid(Relaxation::SchurUzawa(_)) => "schur-uzawa",
            Preconditioner::BlockTriangular => "block-triangular",
        }
    }
}

/// Everything a Stokes solve needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StokesSpec {
    /// Cells per direction.
    pub n: usize,
    pub preconditioner: Preconditioner,
    /// Storage precision of the preconditioner (f16: f32 arithmetic).
    pub precision: Precision,
    pub fgmres: FgmresParams,
}

/// FGMRES defaults: restart 30, relative residual 1e-8.
pub const FGMRES_DEFAULT: FgmresParams = FgmresParams {
    restart: 30,
    tolerance: 1e-8,
    max_iterations: 300,
};

/// A solved Stokes problem.
pub struct StokesSolution {
    pub grid: Grid,
    /// [ux | uy | p]: velocity with its boundary values, pressure with integral mean zero.
    pub flow: Vec<f64>,
    pub info: FgmresInfo,
    pub velocity_l2_error: f64,
    pub pressure_l2_error: f64,
    pub assembly_seconds: f64,
    pub setup_seconds: f64,
    pub solve_seconds: f64,
    /// Bytes the preconditioner holds.
    pub preconditioner_bytes: usize,
}

/// A preconditioner behind one interface, whatever its precision.
trait Precondition {
    fn apply(&mut self, r: &[f64], z: &mut [f64]);
    fn bytes(&self) -> usize;
}

impl<S: Stored> Precondition for multigrid::MonolithicMg<S> {
    fn apply(&mut self, r: &[f64], z: &mut [f64]) {
        multigrid::MonolithicMg::apply(self, r, z)
    }
    fn bytes(&self) -> usize {
        multigrid::MonolithicMg::bytes(self)
    }
}

impl<S: Stored> Precondition for block::BlockTriangular<S> {
    fn apply(&mut self, r: &[f64], z: &mut [f64]) {
        block::BlockTriangular::apply(self, r, z)
    }
    fn bytes(&self) -> usize {
        block::BlockTriangular::bytes(self)
    }
}

fn build<S: Stored>(spec: &StokesSpec) -> Result<Box<dyn Precondition>> {
    Ok(match spec.preconditioner {
        Preconditioner::Multigrid(relaxation) => {
            Box::new(multigrid::MonolithicMg::<S>::new(spec.n, relaxation)?)
        }
        Preconditioner::BlockTriangular => Box::new(block::BlockTriangular::<S>::new(spec.n)?),
    })
}

/// A generous estimate of the bytes a solve needs: the f64 problem (about 175 stored
/// coefficients per cell), the FGMRES basis (2·restart + 4 vectors), and the
/// preconditioner's levels (4/3 of the finest) in its storage precision, plus Vanka's
/// inverses and buffers.
pub fn estimated_bytes(spec: &StokesSpec) -> f64 {
    let g = Grid { n: spec.n };
    let cells = (spec.n * spec.n) as f64;
    let store = spec.precision.bytes() as f64;
    let compute = if spec.precision == Precision::F64 {
        8.0
    } else {
        4.0
    };
    let flow = g.flow_len() as f64;
    let problem = cells * 175.0 * 8.0 + flow * 8.0 * 4.0;
    let krylov = (2 * spec.fgmres.restart + 4) as f64 * flow * 8.0;
    let levels = 4.0 / 3.0;
    let mut precond = levels * (cells * 175.0 * (store + 8.0) + flow * 5.0 * compute);
    if let Preconditioner::Multigrid(Relaxation::Vanka { form, .. }) = spec.preconditioner {
        precond += levels * vanka::vanka_bytes(spec.n, form, store as usize, compute as usize);
    }
    problem + krylov + precond
}

/// Refuses a solve this machine's memory cannot hold, naming what to change.
pub fn check_memory(spec: &StokesSpec) -> Result<()> {
    let Some(available) = crate::sys::available_memory() else {
        return Ok(());
    };
    let needed = estimated_bytes(spec);
    if needed > available as f64 {
        let hint = match spec.preconditioner {
            Preconditioner::Multigrid(Relaxation::Vanka {
                form: VankaForm::Simple,
                ..
            }) => "; simple Vanka stores one 51×51 inverse per pressure node: use vanka-tuned (25 shared inverses) or precision f16",
            _ => "",
        };
        return Err(Error::InvalidInput(format!(
            "Stokes n = {} with {} ({}) needs about {:.1} GiB of memory, but only {:.1} GiB are available; use a smaller n{hint}",
            spec.n,
            spec.preconditioner.name(),
            spec.precision,
            needed / 1073741824.0,
            available as f64 / 1073741824.0
        )));
    }
    Ok(())
}

/// Assembles the manufactured problem, builds the preconditioner, solves with FGMRES from
/// zero, and measures the errors.
pub fn solve(spec: &StokesSpec) -> Result<StokesSolution> {
    multigrid::mesh_hierarchy(spec.n)?;
    check_memory(spec)?;
    let t = Instant::now();
    let problem = StokesProblem::manufactured(spec.n);
    let assembly_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut precond = match spec.precision {
        Precision::F64 => build::<f64>(spec)?,
        Precision::F32 => build::<f32>(spec)?,
        Precision::F16 => build::<f16>(spec)?,
    };
    let grid = problem.operator.grid;
    let mut work = FgmresWorkspace::new(grid.flow_len(), spec.fgmres.restart);
    let setup_seconds = t.elapsed().as_secs_f64();
    let pressure_start = 2 * grid.lattice_len();
    let t = Instant::now();
    let mut x = vec![0.0; grid.flow_len()];
    let info = fgmres(
        spec.fgmres,
        &problem.rhs,
        &mut x,
        &mut work,
        |v, out| problem.operator.apply(v, out),
        |r, z| precond.apply(r, z),
        |v| lattice::remove_mean(&mut v[pressure_start..]),
    );
    let solve_seconds = t.elapsed().as_secs_f64();
    if !info.relative_residual.is_finite() {
        return Err(Error::Solver(format!(
            "FGMRES with {} ({}) produced non-finite values after {} iterations: the preconditioner overflowed its precision; use precision f32 or f64",
            spec.preconditioner.name(),
            spec.precision,
            info.iterations
        )));
    }
    if !info.converged {
        return Err(Error::Solver(format!(
            "FGMRES with {} ({}) did not reach the relative residual {:.1e} in {} iterations (reached {:.3e})",
            spec.preconditioner.name(),
            spec.precision,
            spec.fgmres.tolerance,
            info.iterations,
            info.relative_residual
        )));
    }
    x.iter_mut()
        .zip(&problem.boundary)
        .for_each(|(x, b)| *x += b);
    let (velocity_l2_error, pressure_l2_error) = l2_errors(grid, &x);
    shift_pressure_mean(grid, &mut x);
    Ok(StokesSolution {
        grid,
        flow: x,
        info,
        velocity_l2_error,
        pressure_l2_error,
        assembly_seconds,
        setup_seconds,
        solve_seconds,
        preconditioner_bytes: precond.bytes(),
    })
}

/// Shifts the pressure so its integral over the unit square is zero (∫ p_h = Σ p_i ∫ ψ_i,
/// with ∫ ψ_i = h²·(1, ½, ¼) at interior, edge and corner nodes).
fn shift_pressure_mean(grid: Grid, flow: &mut [f64]) {
    let (np, h) = (grid.np(), 1.0 / grid.n as f64);
    let p = &mut flow[2 * grid.lattice_len()..];
    let weight = |i: usize| if i == 0 || i + 1 == np { 0.5 } else { 1.0 };
    let mean: f64 = p
        .iter()
        .enumerate()
        .map(|(k, v)| v * weight(k % np) * weight(k / np) * h * h)
        .sum();
    p.iter_mut().for_each(|v| *v -= mean);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stokes::assembly::ElementMatrices;
    use faer::linalg::solvers::Solve;

    /// The global matrix assembled densely, element by element, from the element matrices,
    /// with Dirichlet rows and columns dropped and the system bordered by the constant
    /// pressure (an independent path to the stencil storage and kernels).
    fn dense_reference(n: usize) -> (faer::Mat<f64>, Vec<usize>) {
        let g = Grid { n };
        let (m, len) = (g.m(), g.lattice_len());
        let mut index = vec![usize::MAX; g.flow_len()];
        let mut positions = Vec::new();
        for c in 0..2 {
            for j in 1..m - 1 {
                for i in 1..m - 1 {
                    index[c * len + j * m + i] = positions.len();
                    positions.push(c * len + j * m + i);
                }
            }
        }
        for k in 0..g.pressure_len() {
            index[2 * len + k] = positions.len();
            positions.push(2 * len + k);
        }
        let size = positions.len() + 1;
        let mut a = faer::Mat::<f64>::zeros(size, size);
        let e = ElementMatrices::new(1.0 / n as f64);
        for ey in 0..n {
            for ex in 0..n {
                let v = |c: usize, l: usize| index[c * len + (2 * ey + l / 3) * m + 2 * ex + l % 3];
                let p = |q: usize| index[2 * len + (ey + q / 2) * g.np() + ex + q % 2];
                for c in 0..2 {
                    for r in 0..9 {
                        for s in 0..9 {
                            if v(c, r) != usize::MAX && v(c, s) != usize::MAX {
                                a[(v(c, r), v(c, s))] += e.stiffness[r][s];
                            }
                        }
                        for q in 0..4 {
                            if v(c, r) != usize::MAX {
                                a[(v(c, r), p(q))] += e.divergence[c][q][r];
                                a[(p(q), v(c, r))] += e.divergence[c][q][r];
                            }
                        }
                    }
                }
            }
        }
        for k in 0..g.pressure_len() {
            let r = index[2 * len + k];
            a[(r, size - 1)] = 1.0;
            a[(size - 1, r)] = 1.0;
        }
        (a, positions)
    }

    #[test]
    fn stencil_operator_equals_the_dense_assembly() {
        for n in [2, 4, 6] {
            let problem = StokesProblem::manufactured(n);
            let (a, positions) = dense_reference(n);
            let g = problem.operator.grid;
            let x: Vec<f64> = (0..g.flow_len())
                .map(|k| {
                    if positions.contains(&k) {
                        ((k * 37) % 23) as f64 - 11.0
                    } else {
                        0.0
                    }
                })
                .collect();
            let mut y = vec![0.0; g.flow_len()];
            problem.operator.apply(&x, &mut y);
            for (r, &pr) in positions.iter().enumerate() {
                let want: f64 = positions
                    .iter()
                    .enumerate()
                    .map(|(c, &pc)| a[(r, c)] * x[pc])
                    .sum();
                assert!(
                    (y[pr] - want).abs() < 1e-12,
                    "n {n} row {r}: {} vs {want}",
                    y[pr]
                );
            }
        }
    }

    /// FGMRES with each preconditioner reproduces the dense LU solution.
    #[test]
    fn every_preconditioner_matches_the_dense_solve() {
        let n = 8;
        let problem = StokesProblem::manufactured(n);
        let (a, positions) = dense_reference(n);
        let size = positions.len() + 1;
        let mut b = faer::Mat::<f64>::zeros(size, 1);
        for (r, &p) in positions.iter().enumerate() {
            b[(r, 0)] = problem.rhs[p];
        }
        let reference = a.partial_piv_lu().solve(&b);
        for name in [
            "vanka",
            "vanka-tuned",
            "braess-sarazin",
            "schur-uzawa",
            "block-triangular",
        ] {
            let spec = StokesSpec {
                n,
                preconditioner: Preconditioner::by_name(name).unwrap(),
                precision: Precision::F64,
                fgmres: FgmresParams {
                    restart: 30,
                    tolerance: 1e-13,
                    max_iterations: 500,
                },
            };
            let s = solve(&spec).unwrap();
            let g = s.grid;
            // Compare velocity (with boundary values removed) and pressure up to a constant.
            let p0 =
                s.flow[2 * g.lattice_len()] - reference[(positions.len() - g.pressure_len(), 0)];
            for (r, &p) in positions.iter().enumerate() {
                let got = if p >= 2 * g.lattice_len() {
                    s.flow[p] - p0
                } else {
                    s.flow[p]
                };
                assert!(
                    (got - reference[(r, 0)]).abs() < 1e-9,
                    "{name}: unknown {r}: {got} vs {}",
                    reference[(r, 0)]
                );
            }
        }
    }
}
