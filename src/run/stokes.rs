//! The `method = "stokes"` run: solve the manufactured problem on rank 0, report, and
//! write the HDF5 file (layout in `io::schema`, docs/hdf5.md).

use std::fmt;
use std::path::PathBuf;

use crate::comm::Comm;
use crate::config::RunConfig;
use crate::device::{Cpu, Device};
use crate::error::Result;
use crate::io::schema;
use crate::stokes::{solve, StokesSolution, StokesSpec};

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

/// Runs the configured Stokes solve on rank 0 (other ranks have no work) and writes it.
pub fn run(
    config: &RunConfig,
    spec: &StokesSpec,
    comm: &dyn Comm,
) -> Result<Option<StokesSummary>> {
    if !comm.is_root() {
        log::info!("a Stokes run executes on rank 0; this rank has no work");
        return Ok(None);
    }
    let dev = Cpu::new();
    let solution = dev.run(|| solve(&dev, spec))?;
    let output = schema::write_stokes(config, spec, &solution)?;
    Ok(Some(StokesSummary {
        spec: *spec,
        solution,
        output,
    }))
}
