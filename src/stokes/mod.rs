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
//!
//! Solves run on any device: the stencils, transfers and Vanka's gather/scatter are the
//! device's Stokes kernels; every preconditioner is a `LinOp` between f64 vectors.

pub mod assembly;
pub mod block;
mod cost;
pub mod lattice;
pub mod multigrid;
pub mod transfer;
pub mod vanka;

use std::cell::RefCell;
use std::time::Instant;

pub use assembly::{l2_errors, StokesProblem};
pub use lattice::Grid;
pub use multigrid::{MonolithicMg, Relaxation, SchurParams};
pub use vanka::VankaForm;

use crate::device::clock::{StageMarks, StageTime};
use crate::device::stokes::StokesMatrices;
use crate::device::{Block, Device, Layout, StokesDevice};
use crate::error::{Error, Result, SolveRecord, SolverError};
use crate::linalg::{
    fgmres, BlockKind, Cost, FgmresError, FgmresFailure, FgmresInfo, FgmresParams, FgmresWorkspace,
    LinOp, Staged,
};
use crate::numeric::nrm2;
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
    /// The solve's time by stage (operator, preconditioner, Krylov: the orthogonalisation
    /// and updates), from device marks; empty unless asked for.
    pub stage_seconds: Vec<StageTime>,
    /// Bytes the preconditioner holds.
    pub preconditioner_bytes: usize,
}

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

/// A generous estimate of the bytes a solve needs: the f64 problem (about 175 stored
/// coefficients per cell, and four flow vectors on the host) and [`device_bytes`].
pub fn estimated_bytes(spec: &StokesSpec) -> f64 {
    let flow = Grid { n: spec.n }.flow_len() as f64;
    flow * 8.0 * 4.0 + device_bytes(spec)
}

/// A generous estimate of the bytes a solve keeps on its device: the f64 operator, the
/// FGMRES basis (2·restart + 4 vectors), and the preconditioner's levels (4/3 of the
/// finest) in its storage precision, plus Vanka's inverses and buffers.
pub fn device_bytes(spec: &StokesSpec) -> f64 {
    let g = Grid { n: spec.n };
    let cells = (spec.n * spec.n) as f64;
    let store = spec.precision.bytes() as f64;
    let compute = spec.precision.compute().bytes() as f64;
    let flow = g.flow_len() as f64;
    let operator = cells * 175.0 * 8.0;
    let krylov = (2 * spec.fgmres.restart + 4) as f64 * flow * 8.0;
    let levels = 4.0 / 3.0;
    let mut precond = levels * (cells * 175.0 * (store + 8.0) + flow * 5.0 * compute);
    if let Preconditioner::Multigrid(Relaxation::Vanka { form, .. }) = spec.preconditioner {
        precond += levels * vanka::vanka_bytes(spec.n, form, store as usize, compute as usize);
    }
    operator + krylov + precond
}

/// The advice when a spec does not fit: simple Vanka's inverses are most of its memory.
fn memory_hint(spec: &StokesSpec) -> &'static str {
    match spec.preconditioner {
        Preconditioner::Multigrid(Relaxation::Vanka {
            form: VankaForm::Simple,
            ..
        }) => "; simple Vanka stores one 51×51 inverse per pressure node: use vanka-tuned (25 shared inverses) or precision f16",
        _ => "",
    }
}

/// Refuses a solve whose device part does not fit the device's free memory (a GPU; the
/// CPU's memory is the host's, which [`check_memory`] checks).
pub fn check_device_memory<D: Device>(dev: &D, spec: &StokesSpec) -> Result<()> {
    let Some(free) = dev.free_memory()? else {
        return Ok(());
    };
    let needed = device_bytes(spec);
    if needed > free as f64 {
        return Err(Error::InvalidInput(format!(
            "Stokes n = {} with {} ({}) needs about {:.1} GiB on {}, but only {:.1} GiB are free; use a smaller n{}",
            spec.n,
            spec.preconditioner.name(),
            spec.precision,
            needed / 1073741824.0,
            dev.name(),
            free as f64 / 1073741824.0,
            memory_hint(spec)
        )));
    }
    Ok(())
}

/// Refuses a solve this machine's memory cannot hold, naming what to change.
pub fn check_memory(spec: &StokesSpec) -> Result<()> {
    let Some(available) = crate::sys::available_memory() else {
        return Ok(());
    };
    let needed = estimated_bytes(spec);
    if needed > available as f64 {
        let hint = memory_hint(spec);
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

/// A Stokes problem set up once on a device: the manufactured problem assembled, the
/// system and the preconditioner, FGMRES's workspace. It solves any right-hand side of the
/// assembled form ([f_x | f_y | g], zero on boundary velocity rows) with the manufactured
/// problem's boundary values: a single run solves once, a campaign's operator per batch.
pub struct StokesSolver<D: StokesDevice> {
    dev: D,
    spec: StokesSpec,
    problem: StokesProblem,
    system: StokesSystem<D>,
    precond: Box<dyn LinOp<D> + Send>,
    work: FgmresWorkspace<D>,
    /// Marks of the solves' stages since they were last taken, when timed.
    stage_marks: Option<RefCell<StageMarks<D>>>,
    pub preconditioner_bytes: usize,
    pub assembly_seconds: f64,
    pub setup_seconds: f64,
}

impl<D: StokesDevice> StokesSolver<D> {
    /// Checks the mesh and the memory, assembles, and sets the solver up on `dev`.
    pub fn new(dev: &D, spec: &StokesSpec) -> Result<Self> {
        multigrid::mesh_hierarchy(spec.n)?;
        check_memory(spec)?;
        check_device_memory(dev, spec)?;
        let t = Instant::now();
        let problem = StokesProblem::manufactured(spec.n);
        let assembly_seconds = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let (precond, preconditioner_bytes) = preconditioner(dev, spec)?;
        let grid = problem.operator.grid;
        let system = StokesSystem::new(dev, &problem.operator)?;
        let work = FgmresWorkspace::new(
            dev,
            grid.flow_len(),
            spec.fgmres.restart,
            spec.fgmres.max_iterations,
        )?;
        Ok(StokesSolver {
            dev: dev.clone(),
            spec: *spec,
            problem,
            system,
            precond,
            work,
            stage_marks: None,
            preconditioner_bytes,
            assembly_seconds,
            setup_seconds: t.elapsed().as_secs_f64(),
        })
    }

    pub fn grid(&self) -> Grid {
        self.problem.operator.grid
    }

    /// FGMRES's stopping rule: what a solution's verified residual must meet.
    pub fn tolerance(&self) -> crate::linalg::Tolerance {
        crate::linalg::Tolerance {
            rtol: self.spec.fgmres.rtol,
            atol: self.spec.fgmres.atol,
        }
    }

    /// The manufactured problem's right-hand side.
    pub fn manufactured_rhs(&self) -> &[f64] {
        &self.problem.rhs
    }

    /// Solves with FGMRES from zero; returns the full solution (velocity with its boundary
    /// values, pressure of integral mean zero) and FGMRES's record.
    /// Loads of extreme magnitude are solved multiplied by a power of two
    /// (`linalg::magnitude`).
    pub fn solve(&mut self, rhs: &[f64]) -> Result<(Vec<f64>, FgmresInfo)> {
        let (dev, grid) = (&self.dev, self.grid());
        let group = crate::linalg::magnitude::groups(rhs, grid.flow_len(), 1)?.remove(0);
        let scaled;
        let rhs = if group.exponent == 0 {
            rhs
        } else {
            scaled = crate::linalg::magnitude::gather(&group, rhs, grid.flow_len());
            &scaled
        };
        let b = Block::from_f64(
            dev,
            rhs,
            grid.flow_len(),
            1,
            Precision::F64,
            Layout::ColMajor,
        )?;
        let mut x = Block::vector(dev, grid.flow_len(), Precision::F64)?;
        let project = |v: &mut Block<D>| remove_pressure_mean(dev, grid, v);
        let (mut params, work) = (self.spec.fgmres, &mut self.work);
        params.atol *= group.factor();
        let result = match &self.stage_marks {
            None => fgmres(
                params,
                &b,
                &mut x,
                work,
                &mut self.system,
                &mut *self.precond,
                project,
            ),
            Some(marks) => {
                marks.borrow_mut().begin(dev)?;
                let result = fgmres(
                    params,
                    &b,
                    &mut x,
                    work,
                    &mut Staged {
                        inner: &mut self.system,
                        dev,
                        marks,
                        stage: "operator",
                        between: "Krylov",
                    },
                    &mut Staged {
                        inner: &mut *self.precond,
                        dev,
                        marks,
                        stage: "preconditioner",
                        between: "Krylov",
                    },
                    project,
                );
                marks.borrow_mut().end(dev, "Krylov")?;
                result
            }
        };
        let info = match result {
            Ok(info) => info.clone(),
            Err(e) => return Err(StokesError::from_fgmres(&self.spec, e).into()),
        };
        let mut flow = x.to_f64(dev)?;
        if group.exponent != 0 {
            let scaled = std::mem::take(&mut flow);
            flow = vec![0.0; scaled.len()];
            crate::linalg::magnitude::scatter(&group, &scaled, &mut flow, grid.flow_len())?;
        }
        flow.iter_mut()
            .zip(&self.problem.boundary)
            .for_each(|(x, b)| *x += b);
        shift_pressure_mean(grid, &mut flow);
        Ok((flow, info))
    }

    /// Times the stages of the following solves (or stops timing them).
    pub fn time_stages(&mut self, on: bool) {
        self.stage_marks = on.then(RefCell::default);
    }

    /// The seconds per stage of the solves since the last call (empty when not timed).
    pub fn take_stage_seconds(&mut self) -> Result<Vec<StageTime>> {
        match &mut self.stage_marks {
            Some(marks) => marks.get_mut().take(&self.dev),
            None => Ok(Vec::new()),
        }
    }

    /// ‖b − A x‖₂ / ‖b‖₂ in f64 (‖b − A x‖₂ when b = 0) of a full solution `flow`, its
    /// boundary values taken off: the check of what is stored, independent of FGMRES.
    pub fn relative_residual(&mut self, rhs: &[f64], flow: &[f64]) -> Result<f64> {
        let len = self.grid().flow_len();
        let x: Vec<f64> = flow
            .iter()
            .zip(&self.problem.boundary)
            .map(|(f, b)| f - b)
            .collect();
        let x = Block::from_f64(&self.dev, &x, len, 1, Precision::F64, Layout::ColMajor)?;
        let mut ax = Block::vector(&self.dev, len, Precision::F64)?;
        self.system.apply(&x, &mut ax)?;
        let residual: Vec<f64> = rhs
            .iter()
            .zip(ax.to_f64(&self.dev)?)
            .map(|(b, ax)| b - ax)
            .collect();
        let b_norm = nrm2(rhs);
        Ok(if b_norm > 0.0 {
            nrm2(&residual) / b_norm
        } else {
            nrm2(&residual)
        })
    }
}

/// Assembles the manufactured problem, builds the preconditioner on `dev`, solves with
/// FGMRES from zero, and measures the errors.
pub fn solve<D: StokesDevice>(dev: &D, spec: &StokesSpec) -> Result<StokesSolution> {
    solve_timing_stages(dev, spec, false)
}

/// [`solve`], with the solve's stage times when `stages` (for `bench stokes`).
pub fn solve_timing_stages<D: StokesDevice>(
    dev: &D,
    spec: &StokesSpec,
    stages: bool,
) -> Result<StokesSolution> {
    let mut solver = StokesSolver::new(dev, spec)?;
    solver.time_stages(stages);
    let rhs = solver.manufactured_rhs().to_vec();
    let t = Instant::now();
    let (flow, info) = solver.solve(&rhs)?;
    let solve_seconds = t.elapsed().as_secs_f64();
    let stage_seconds = solver.take_stage_seconds()?;
    let grid = solver.grid();
    let (velocity_l2_error, pressure_l2_error) = l2_errors(grid, &flow);
    Ok(StokesSolution {
        grid,
        flow,
        info,
        velocity_l2_error,
        pressure_l2_error,
        assembly_seconds: solver.assembly_seconds,
        setup_seconds: solver.setup_seconds,
        solve_seconds,
        stage_seconds,
        preconditioner_bytes: solver.preconditioner_bytes,
    })
}

/// How a Stokes solve failed: FGMRES's error, in terms of the preconditioner.
#[derive(Debug)]
pub struct StokesError {
    pub message: String,
    pub info: FgmresInfo,
}

impl StokesError {
    fn from_fgmres(spec: &StokesSpec, e: FgmresError) -> Self {
        let message = match &e.failure {
            FgmresFailure::NotFinite => format!(
                "FGMRES with {} ({}) produced non-finite values after {} iterations: the preconditioner overflowed its precision; use precision f32 or f64",
                spec.preconditioner.name(),
                spec.precision,
                e.info.iterations
            ),
            FgmresFailure::NotConverged => format!(
                "FGMRES with {} ({}) did not reach ‖b − Ax‖₂ ≤ max(rtol·‖b‖₂, atol) with rtol = {:.1e}, atol = {:.1e} in {} iterations (reached the relative residual {:.3e})",
                spec.preconditioner.name(),
                spec.precision,
                spec.fgmres.rtol,
                spec.fgmres.atol,
                e.info.iterations,
                e.info.relative_residual
            ),
            FgmresFailure::Operator(inner) => format!(
                "FGMRES with {} ({}): {inner}",
                spec.preconditioner.name(),
                spec.precision
            ),
        };
        StokesError {
            message,
            info: e.info,
        }
    }
}

impl std::fmt::Display for StokesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StokesError {}

impl SolverError for StokesError {
    fn record(&self) -> SolveRecord {
        SolveRecord {
            solver: "stokes fgmres".into(),
            iterations: vec![self.info.iterations],
            residual_history: self.info.history.clone(),
        }
    }

    fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        self
    }
}

impl From<StokesError> for Error {
    fn from(e: StokesError) -> Self {
        Error::Solve(Box::new(e))
    }
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
