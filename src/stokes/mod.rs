//! Q2-Q1 Stokes on the uniform unit-square mesh (docs/mathematics.md §1 and §7): structured stencil
//! storage, FGMRES in f64, preconditioned by monolithic multigrid (Vanka, Braess-Sarazin,
//! Schur-Uzawa relaxation) or the block-triangular preconditioner, each in f64, f32, or
//! f32 arithmetic on f16 storage.
//!
//! - [`lattice`]: the structured storage of L, B, Bᵀ, M as assembled (host, f64)
//! - [`assembly`]: element matrices, the manufactured problem, L2 errors
//! - [`transfer`]: FE interpolation and restriction of flow vectors
//! - [`vanka`], [`multigrid`]: the monolithic V(1,1) cycle and its relaxations
//! - [`block`]: the block-triangular preconditioner
//! - [`solver`]: the problem set up once and solved many times, its memory, its errors
//!
//! Solves run on any device: the stencils, transfers and Vanka's gather/scatter are the
//! device's Stokes kernels; every preconditioner is a `LinOp` between f64 vectors.

pub mod assembly;
pub mod block;
mod cost;
pub mod lattice;
pub mod multigrid;
mod solver;
pub mod transfer;
pub mod vanka;

pub use assembly::{l2_errors, StokesProblem};
pub use lattice::Grid;
pub use multigrid::{MonolithicMg, Relaxation, SchurParams};
pub use solver::{
    check_device_memory, check_memory, device_bytes, estimated_bytes, solve, solve_timing_stages,
    StokesError, StokesSolution, StokesSolver,
};
pub use vanka::VankaForm;

use crate::device::stokes::StokesMatrices;
use crate::device::{Block, Layout, StokesDevice};
use crate::error::{Error, Result};
use crate::linalg::{BlockKind, Cost, FgmresParams, LinOp};
use crate::precision::Precision;

/// Tuned defaults (docs/performance.md, "Stokes: tuning"): Braess-Sarazin with L ≈ t·D.
pub const BRAESS_SARAZIN_DEFAULT: SchurParams = SchurParams {
    t: 1.1,
    omega: 1.0,
    jacobi_steps: 3,
    jacobi_weight: 1.0,
};

/// Schur-Uzawa as published (docs/mathematics.md §7): t = 1, Jacobi weight 0.4; one Jacobi step
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
    pub const NAMES: [&'static str; 5] = [
        "vanka",
        "vanka-tuned",
        "braess-sarazin",
        "schur-uzawa",
        "block-triangular",
    ];

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
                    Preconditioner::NAMES.join(", ")
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
    rtol: 1e-8,
    atol: 0.0,
    max_iterations: 300,
};

/// The Stokes operator [[L, Bᵀ], [B, 0]] in f64 on the device: the operator FGMRES solves
/// with.
pub struct StokesSystem<D: StokesDevice> {
    dev: D,
    matrices: StokesMatrices<D>,
}

impl<D: StokesDevice> StokesSystem<D> {
    pub fn new(dev: &D, operator: &lattice::StokesHostMatrices) -> Result<Self> {
        Ok(StokesSystem {
            dev: dev.clone(),
            matrices: operator.upload(dev, Precision::F64)?,
        })
    }

    pub fn bytes(&self) -> usize {
        self.matrices.bytes()
    }
}

impl<D: StokesDevice> LinOp<D> for StokesSystem<D> {
    fn size(&self) -> usize {
        self.matrices.grid.flow_len()
    }

    fn input(&self) -> BlockKind {
        BlockKind {
            precision: Precision::F64,
            layout: Layout::ColMajor,
        }
    }

    fn output(&self) -> BlockKind {
        self.input()
    }

    fn prepare(&mut self, _nrhs: usize) -> Result<()> {
        Ok(())
    }

    fn apply(&mut self, x: &Block<D>, y: &mut Block<D>) -> Result<()> {
        self.dev.stokes_apply(&self.matrices, x, None, y)
    }

    fn cost(&self, nrhs: usize) -> Cost {
        cost::stokes_apply(&self.matrices, false, Precision::F64) * nrhs as f64
    }
}

/// The preconditioner of a spec, set up on the device in its precision.
pub fn preconditioner<D: StokesDevice>(
    dev: &D,
    spec: &StokesSpec,
) -> Result<(Box<dyn LinOp<D> + Send>, usize)> {
    Ok(match spec.preconditioner {
        Preconditioner::Multigrid(relaxation) => {
            let mg = multigrid::MonolithicMg::new(dev, spec.n, relaxation, spec.precision)?;
            let bytes = mg.bytes();
            (Box::new(mg), bytes)
        }
        Preconditioner::BlockTriangular => {
            let bt = block::BlockTriangular::new(dev, spec.n, spec.precision)?;
            let bytes = bt.bytes();
            (Box::new(bt), bytes)
        }
    })
}

/// The pressure part of a flow vector shifted to mean zero (the discrete null space of the
/// Stokes operator is the constant pressure).
pub fn remove_pressure_mean<D: StokesDevice>(dev: &D, grid: Grid, v: &mut Block<D>) -> Result<()> {
    let [_, _, pressure] = grid.parts();
    let mean = dev.sum(v.data.slice(pressure.clone()))? / grid.pressure_len() as f64;
    dev.shift(v.data.slice_mut(pressure), -mean)
}

/// Stokes preconditioners apply to one vector at a time (FGMRES on Stokes is
/// single-column): any other width is refused at `prepare`.
fn one_vector(nrhs: usize) -> Result<()> {
    if nrhs == 1 {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!(
            "the Stokes preconditioner applies to one vector at a time, not {nrhs}"
        )))
    }
}
