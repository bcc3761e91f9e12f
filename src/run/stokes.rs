//! `method = "stokes"`: the single run (solve the manufactured problem on rank 0, report,
//! write the HDF5 file; layout in `io::schema`, docs/hdf5.md) and the operator a Stokes
//! study's campaign solves with ([`StokesStudyOperator`]).

use std::fmt;
use std::path::PathBuf;

use super::backend::Backend;
use crate::campaign::{BatchOperator, BatchRhs, Checks, ColumnSource, InputColumns, STOKES_ERRORS};
use crate::comm::Comm;
use crate::config::RunConfig;
use crate::device::cuda::Cuda;
use crate::device::{Cpu, Device, StokesDevice};
use crate::error::{Error, Result};
use crate::io::schema;
use crate::linalg::BlockOutcome;
use crate::stokes::{l2_errors, solve, StokesSolution, StokesSolver, StokesSpec};

/// What a Stokes run prints.
pub struct StokesSummary {
    pub spec: StokesSpec,
    pub solution: StokesSolution,
    pub output: PathBuf,
}

impl fmt::Display for StokesSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (spec, s) = (&self.spec, &self.solution);
        let cells = (spec.n * spec.n) as f64;
        writeln!(
            f,
            "Stokes Q2-Q1 on the unit square, {n}×{n} cells ({} unknowns)",
            s.grid.unknowns(),
            n = spec.n
        )?;
        writeln!(
            f,
            "  FGMRES({})     preconditioner {} in {}: {} iterations, relative residual {:.3e} (rtol {:.1e}, atol {:.1e})",
            spec.fgmres.restart,
            spec.preconditioner.name(),
            spec.precision,
            s.info.iterations,
            s.info.relative_residual,
            spec.fgmres.rtol,
            spec.fgmres.atol
        )?;
        writeln!(
            f,
            "  errors         velocity L2 {:.4e}   pressure L2 {:.4e}",
            s.velocity_l2_error, s.pressure_l2_error
        )?;
        writeln!(
            f,
            "  seconds        assembly {:.3}   set-up {:.3}   solve {:.3} ({:.3} ms per iteration, {:.5} ms per element)",
            s.assembly_seconds,
            s.setup_seconds,
            s.solve_seconds,
            s.solve_seconds * 1e3 / s.info.iterations.max(1) as f64,
            s.solve_seconds * 1e3 / cells
        )?;
        write!(f, "  output         {}", self.output.display())
    }
}

/// Runs the configured Stokes solve on rank 0's backend (other ranks have no work) and
/// writes it.
pub fn run(
    config: &RunConfig,
    spec: &StokesSpec,
    backend: &Backend,
    comm: &dyn Comm,
) -> Result<Option<StokesSummary>> {
    if !comm.is_root() {
        log::info!("a Stokes run executes on rank 0; this rank has no work");
        return Ok(None);
    }
    let solution = match backend {
        Backend::Cpu { .. } => {
            let dev = Cpu::new();
            dev.run(|| solve(&dev, spec))?
        }
        Backend::Cuda(info) => solve(&Cuda::shared(info)?, spec)?,
    };
    let output = schema::write_stokes(config, spec, &solution)?;
    Ok(Some(StokesSummary {
        spec: *spec,
        solution,
        output,
    }))
}

/// A Stokes study's operator in a campaign: the manufactured problem set up once on the
/// rank's device; each column is solved by FGMRES from zero, then checked by the f64
/// residual of the stored solution and its velocity and pressure L2 errors.
pub struct StokesStudyOperator<D: StokesDevice> {
    dev: D,
    solver: StokesSolver<D>,
}

impl<D: StokesDevice> StokesStudyOperator<D> {
    pub fn new(dev: &D, spec: &StokesSpec) -> Result<Self> {
        let solver = dev.run(|| StokesSolver::new(dev, spec))?;
        Ok(StokesStudyOperator {
            dev: dev.clone(),
            solver,
        })
    }
}

/// The Stokes operator of `spec` on `backend`.
pub fn operator(backend: &Backend, spec: &StokesSpec) -> Result<Box<dyn BatchOperator>> {
    Ok(match backend {
        Backend::Cpu { .. } => Box::new(StokesStudyOperator::new(&Cpu::new(), spec)?),
        Backend::Cuda(info) => Box::new(StokesStudyOperator::new(&Cuda::shared(info)?, spec)?),
    })
}

impl<D: StokesDevice> BatchOperator for StokesStudyOperator<D> {
    fn unknowns(&self) -> usize {
        self.solver.grid().flow_len()
    }

    fn rhs(&self, columns: &[ColumnSource], _: Option<&InputColumns>) -> Result<BatchRhs> {
        assert!(
            columns.iter().all(|c| *c == ColumnSource::Stokes),
            "a Stokes operator solves the manufactured Stokes problem"
        );
        Ok(BatchRhs {
            b: self.solver.manufactured_rhs().repeat(columns.len()),
            dirichlet: None,
        })
    }

    fn solve(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome> {
        let (dev, solver) = (&self.dev, &mut self.solver);
        let len = solver.grid().flow_len();
        let mut u = Vec::with_capacity(len * nrhs);
        let mut iterations = 0;
        for b in rhs.chunks_exact(len) {
            let (flow, info) = dev.run(|| solver.solve(b))?;
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

    fn verify(
        &mut self,
        rhs: &BatchRhs,
        u: &[f64],
        _: &[f64],
        _: &[ColumnSource],
    ) -> Result<Checks> {
        let rhs = &rhs.b;
        let tolerance = self.solver.tolerance();
        let (dev, solver) = (&self.dev, &mut self.solver);
        let (grid, len) = (solver.grid(), solver.grid().flow_len());
        let mut checks = Checks {
            relative_residual: Vec::new(),
            tolerance: Vec::new(),
            errors: STOKES_ERRORS
                .iter()
                .map(|&name| (name, Vec::new()))
                .collect(),
        };
        for (c, (b, flow)) in rhs.chunks_exact(len).zip(u.chunks_exact(len)).enumerate() {
            let residual = dev.run(|| solver.relative_residual(b, flow))?;
            let (velocity, pressure) = dev.run(|| l2_errors(grid, flow));
            if ![residual, velocity, pressure].iter().all(|v| v.is_finite()) {
                return Err(Error::Solver(format!(
                    "the Stokes solution of column {c} is not finite (relative residual {residual}, velocity L2 error {velocity}, pressure L2 error {pressure})"
                )));
            }
            checks.relative_residual.push(residual);
            checks
                .tolerance
                .push(tolerance.relative(crate::numeric::nrm2(b)));
            checks.errors[0].1.push(velocity);
            checks.errors[1].1.push(pressure);
        }
        Ok(checks)
    }

    fn to_nodal(&self, u: &[f64], _: &BatchRhs) -> Vec<f64> {
        u.to_vec()
    }
}
