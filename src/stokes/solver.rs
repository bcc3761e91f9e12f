//! A Stokes problem set up once and solved many times ([`StokesSolver`]): its memory
//! checked before anything is allocated, the manufactured problem assembled, the system and
//! the preconditioner built on a device, FGMRES from zero for each right-hand side, and the
//! check of every solution by its f64 residual and L2 errors.

use std::cell::RefCell;
use std::time::Instant;

use super::{
    l2_errors, multigrid, preconditioner, remove_pressure_mean, vanka, Grid, Preconditioner,
    Relaxation, StokesProblem, StokesSpec, StokesSystem, VankaForm,
};
use crate::device::clock::{StageMarks, StageTime};
use crate::device::{Block, Device, Layout, StokesDevice};
use crate::error::{Error, Result, SolveRecord, SolverError};
use crate::linalg::{
    fgmres, BlockOutcome, FgmresError, FgmresFailure, FgmresInfo, FgmresWorkspace, LinOp, Staged,
    Tolerance,
};
use crate::numeric::nrm2;
use crate::precision::Precision;

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
    pub fn tolerance(&self) -> Tolerance {
        Tolerance {
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

    /// Solves the column-major block `rhs` (flow_len × nrhs) column by column (FGMRES on
    /// Stokes is single-column), on the device's own thread: the solutions and the most
    /// FGMRES iterations of a column.
    pub fn solve_block(&mut self, rhs: &[f64]) -> Result<BlockOutcome> {
        let (dev, len) = (self.dev.clone(), self.grid().flow_len());
        let mut u = Vec::with_capacity(rhs.len());
        let mut iterations = 0;
        for b in rhs.chunks_exact(len) {
            let (flow, info) = dev.run(|| self.solve(b))?;
            iterations = iterations.max(info.iterations);
            u.extend(flow);
        }
        Ok(BlockOutcome {
            u,
            iterations: Some(iterations),
            inner_iterations: None,
            flops: None,
        })
    }

    /// The check of solution `flow` (column `c`) of the right-hand side `rhs`: its f64
    /// relative residual ([`StokesSolver::relative_residual`]) and its velocity and
    /// pressure L2 errors against the manufactured solution; a value that is not finite
    /// is an error.
    pub fn check(&mut self, c: usize, rhs: &[f64], flow: &[f64]) -> Result<[f64; 3]> {
        let (dev, grid) = (self.dev.clone(), self.grid());
        let residual = dev.run(|| self.relative_residual(rhs, flow))?;
        let (velocity, pressure) = dev.run(|| l2_errors(grid, flow));
        if ![residual, velocity, pressure].iter().all(|v| v.is_finite()) {
            return Err(Error::Solver(format!(
                "the Stokes solution of column {c} is not finite (relative residual {residual}, velocity L2 error {velocity}, pressure L2 error {pressure})"
            )));
        }
        Ok([residual, velocity, pressure])
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
