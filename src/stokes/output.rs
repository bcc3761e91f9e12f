//! The `method = "stokes"` run: solve the manufactured problem, report, and write HDF5.
//!
//! File layout (docs/hdf5.md): root attributes with the run's settings and results;
//! `/mesh/lattice_coordinates` (the 2n+1 Q2 node coordinates per direction) and
//! `/mesh/pressure_coordinates` (n+1 Q1 ones); `/velocity/x`, `/velocity/y` as
//! [2n+1, 2n+1] arrays indexed [J][I] (node (I h/2, J h/2)), boundary values included;
//! `/pressure` as [n+1, n+1] indexed [j][i], integral mean zero; `/fgmres/history`, the
//! relative residual estimate per iteration; `/config`, the config echo.

use std::fmt;
use std::path::PathBuf;

use super::{solve, StokesSolution, StokesSpec};
use crate::comm::Comm;
use crate::config::RunConfig;
use crate::error::{Error, Result};
use crate::io::h5;

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
            "  FGMRES({})     preconditioner {} in {}: {} iterations, relative residual {:.3e} (tolerance {:.1e})",
            spec.fgmres.restart,
            spec.preconditioner.name(),
            spec.precision,
            s.info.iterations,
            s.info.relative_residual,
            spec.fgmres.tolerance
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
    let solution = solve(spec)?;
    let output = write(config, spec, &solution)?;
    Ok(Some(StokesSummary {
        spec: *spec,
        solution,
        output,
    }))
}

/// Writes the solution file (atomically: a temporary file renamed at the end).
pub fn write(config: &RunConfig, spec: &StokesSpec, s: &StokesSolution) -> Result<PathBuf> {
    let path = &config.output;
    let writer = h5::H5Writer::create(path)?;
    let root = writer.root();
    let err = |what: &'static str| {
        move |e: hdf5::Error| Error::Hdf5 {
            path: path.clone(),
            message: format!("{what}: {e}"),
        }
    };
    h5::write_provenance(root, Some(&config.source))?;
    let g = s.grid;
    let (m, np, h) = (g.m(), g.np(), 1.0 / g.n as f64);
    h5::write_str_attr(root, "problem", "stokes-q2q1")?;
    h5::write_str_attr(root, "preconditioner", spec.preconditioner.name())?;
    h5::write_str_attr(root, "precision", spec.precision.name())?;
    for (name, value) in [
        ("n", g.n as f64),
        ("h", h),
        ("iterations", s.info.iterations as f64),
        ("restart", spec.fgmres.restart as f64),
        ("tolerance", spec.fgmres.tolerance),
        ("relative_residual", s.info.relative_residual),
        ("velocity_l2_error", s.velocity_l2_error),
        ("pressure_l2_error", s.pressure_l2_error),
        ("assembly_seconds", s.assembly_seconds),
        ("setup_seconds", s.setup_seconds),
        ("solve_seconds", s.solve_seconds),
    ] {
        h5::write_scalar_attr(root, name, value)?;
    }
    let mesh = root
        .create_group("mesh")
        .map_err(err("creating group mesh"))?;
    let lattice: Vec<f64> = (0..m).map(|i| i as f64 * h / 2.0).collect();
    let pressure_nodes: Vec<f64> = (0..np).map(|i| i as f64 * h).collect();
    h5::write_vector(&mesh, "lattice_coordinates", &lattice)?;
    h5::write_vector(&mesh, "pressure_coordinates", &pressure_nodes)?;
    let (ux, uy, p) = super::lattice::split(&s.flow, g);
    let velocity = root
        .create_group("velocity")
        .map_err(err("creating group velocity"))?;
    h5::write_dense(&velocity, "x", m, m, ux)?;
    h5::write_dense(&velocity, "y", m, m, uy)?;
    h5::write_dense(root, "pressure", np, np, p)?;
    let fgmres = root
        .create_group("fgmres")
        .map_err(err("creating group fgmres"))?;
    h5::write_vector(&fgmres, "history", &s.info.history)?;
    writer.commit()
}
