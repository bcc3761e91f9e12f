//! `method = "stokes"`: the single run (solve the manufactured problem on rank 0, report,
//! write the HDF5 file; layout in `io::schema`, docs/hdf5.md) and the operator a Stokes
//! study's campaign solves with ([`operator`]).

use std::fmt;
use std::path::PathBuf;

use crate::campaign::{BatchOperator, BatchRhs, Checks, ColumnSource, InputColumns, STOKES_ERRORS};
use crate::comm::Comm;
use crate::config::RunConfig;
use crate::device::cuda::Cuda;
use crate::device::{Backend, Cpu, Device, StokesDevice};
use crate::error::Result;
use crate::io::schema;
use crate::linalg::BlockOutcome;
use crate::stokes::{solve, StokesSolution, StokesSolver, StokesSpec};

/// What a Stokes run prints.
pub struct StokesSummary {
    pub spec: StokesSpec,
    /// The device it ran on (`Device::name`).
    pub device: String,
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
        writeln!(f, "  backend        {}", self.device)?;
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
    let (solution, device) = match backend {
        Backend::Cpu { .. } => {
            let dev = Cpu::new();
            (dev.run(|| solve(&dev, spec))?, dev.name())
        }
        Backend::Cuda(info) => {
            let dev = Cuda::shared(info)?;
            (solve(&dev, spec)?, dev.name())
        }
    };
    let output = schema::write_stokes(config, spec, &solution)?;
    Ok(Some(StokesSummary {
        spec: *spec,
        device,
        solution,
        output,
    }))
}

/// The Stokes operator of a study in a campaign: the manufactured problem set up once on
/// the rank's device ([`StokesSolver`]); each column is solved by FGMRES from zero, then
/// checked by the f64 residual of the stored solution and its velocity and pressure L2
/// errors.
pub fn operator(backend: &Backend, spec: &StokesSpec) -> Result<Box<dyn BatchOperator>> {
    fn set_up<D: StokesDevice>(dev: &D, spec: &StokesSpec) -> Result<Box<dyn BatchOperator>> {
        Ok(Box::new(dev.run(|| StokesSolver::new(dev, spec))?))
    }
    match backend {
        Backend::Cpu { .. } => set_up(&Cpu::new(), spec),
        Backend::Cuda(info) => set_up(&Cuda::shared(info)?, spec),
    }
}

impl<D: StokesDevice> BatchOperator for StokesSolver<D> {
    fn unknowns(&self) -> usize {
        self.grid().flow_len()
    }

    fn rhs(&self, columns: &[ColumnSource], _: Option<&InputColumns>) -> Result<BatchRhs> {
        assert!(
            columns.iter().all(|c| *c == ColumnSource::Stokes),
            "a Stokes operator solves the manufactured Stokes problem"
        );
        Ok(BatchRhs {
            b: self.manufactured_rhs().repeat(columns.len()),
            dirichlet: None,
        })
    }

    fn solve(&mut self, rhs: &[f64], _nrhs: usize) -> Result<BlockOutcome> {
        self.solve_block(rhs)
    }

    fn verify(
        &mut self,
        rhs: &BatchRhs,
        u: &[f64],
        _: &[f64],
        _: &[ColumnSource],
    ) -> Result<Checks> {
        let (tolerance, len) = (self.tolerance(), self.grid().flow_len());
        let mut checks = Checks {
            relative_residual: Vec::new(),
            tolerance: Vec::new(),
            errors: STOKES_ERRORS
                .iter()
                .map(|&name| (name, Vec::new()))
                .collect(),
        };
        for (c, (b, flow)) in rhs.b.chunks_exact(len).zip(u.chunks_exact(len)).enumerate() {
            let [residual, velocity, pressure] = self.check(c, b, flow)?;
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
