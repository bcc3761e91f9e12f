//! One configured solve, start to finish: mesh, assembly, solve, verification (f64
//! residual of the nodal system, L2 error against the manufactured solution), HDF5 output.

use std::fmt;
use std::path::PathBuf;
use std::time::Instant;

use crate::backend::{cpu, cuda, Backend};
use crate::comm::Comm;
use crate::config::{MeshKind, Method, RunConfig};
use crate::error::{Error, Result};
use crate::fem::{assemble_poisson, l2_error, nodal_l2_error, Manufactured, PoissonSystem};
use crate::io::{h5, xdmf};
use crate::mesh::{unit_cube, unit_square, unit_square_refined, Mesh};
use crate::reference::CholeskySolver;

/// What a solve produced, for the printed summary.
#[derive(Clone, Debug)]
pub struct JobSummary {
    pub description: String,
    pub backend: String,
    pub unknowns: usize,
    pub nonzeros: usize,
    pub l2_error: f64,
    pub relative_l2_error: f64,
    pub nodal_l2_error: f64,
    pub relative_residual: f64,
    pub seconds: StageSeconds,
    pub output: PathBuf,
    pub xdmf: PathBuf,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct StageSeconds {
    pub mesh: f64,
    pub assembly: f64,
    pub factor: f64,
    pub solve: f64,
    pub verify: f64,
    pub write: f64,
}

impl StageSeconds {
    pub fn total(&self) -> f64 {
        self.mesh + self.assembly + self.factor + self.solve + self.verify + self.write
    }
}

impl fmt::Display for JobSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.seconds;
        writeln!(f, "tensorfem run: {}", self.description)?;
        writeln!(f, "  backend             {}", self.backend)?;
        writeln!(f, "  unknowns            {}", self.unknowns)?;
        writeln!(f, "  nonzeros            {}", self.nonzeros)?;
        writeln!(
            f,
            "  L2 error            {:.6e} (relative {:.6e})",
            self.l2_error, self.relative_l2_error
        )?;
        writeln!(f, "  nodal L2 error      {:.6e}", self.nodal_l2_error)?;
        writeln!(
            f,
            "  relative residual   {:.3e} (f64, ‖b - Ax‖₂ / ‖b‖₂)",
            self.relative_residual
        )?;
        writeln!(
            f,
            "  time [s]            total {:.3}: mesh {:.3}, assembly {:.3}, factor {:.3}, solve {:.3}, verify {:.3}, write {:.3}",
            s.total(),
            s.mesh,
            s.assembly,
            s.factor,
            s.solve,
            s.verify,
            s.write
        )?;
        write!(
            f,
            "  output              {} (ParaView: {})",
            self.output.display(),
            self.xdmf.display()
        )
    }
}

/// Bytes of memory this machine can still give (Linux MemAvailable), if known.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A generous estimate of the bytes a Cholesky solve of this size needs: element
/// matrices, the CSR matrix and its assembly rows, and the sparse factor (nested-dissection
/// fill: about 10 N log2 N entries in 2D, 10 N^{4/3} in 3D).
fn cholesky_bytes(config: &RunConfig) -> f64 {
    let m = &config.mesh;
    let unknowns = m.unknowns() as f64;
    let k = m.element.nodes_per_cell() as f64;
    let assembly =
        m.cells() as f64 * (k * k + k) * 8.0 + unknowns * 27.0 * 40.0 + m.nodes() as f64 * 80.0;
    let factor_entries = if m.dim() == 2 {
        10.0 * unknowns * unknowns.log2().max(1.0)
    } else {
        10.0 * unknowns.powf(4.0 / 3.0)
    };
    assembly + factor_entries * 16.0
}

fn describe(config: &RunConfig) -> String {
    let m = &config.mesh;
    let coarse = m
        .coarse
        .map(|(n0, levels)| format!(", refined {levels}× from h0 = 1/{n0}"))
        .unwrap_or_default();
    format!(
        "{} {} mesh, h = 1/{}{coarse}; u = sin({k}πx)·…; method {} ({})",
        m.element.name(),
        m.kind.name(),
        m.n,
        config.method.name(),
        config.precision,
        k = config.k,
    )
}

/// Runs the configured solve. The single solve runs on rank 0; other ranks have no work
/// and return `None` (campaigns spread work over ranks).
pub fn run(config: &RunConfig, comm: &dyn Comm) -> Result<Option<JobSummary>> {
    let backend = Backend::select(
        config.backend,
        &cuda::probe(),
        config.method.name(),
        config.method.has_cuda(),
        comm.local_rank(),
    )?;
    if !comm.is_root() {
        log::info!("a single solve runs on rank 0; this rank has no work");
        return Ok(None);
    }
    log::info!("backend: {backend}");

    let needed = match config.method {
        Method::Cholesky => cholesky_bytes(config),
    };
    if let Some(available) = available_memory() {
        if needed > available as f64 {
            return Err(Error::InvalidInput(format!(
                "this problem ({} unknowns) needs about {:.1} GiB of memory, but only {:.1} GiB are available; use a smaller mesh.n",
                config.mesh.unknowns(),
                needed / 2f64.powi(30),
                available as f64 / 2f64.powi(30)
            )));
        }
    }

    let manufactured = Manufactured::new(config.k, config.mesh.dim());
    let summary = match config.mesh.kind {
        MeshKind::UnitSquare => {
            let t = Instant::now();
            let mesh = match config.mesh.coarse {
                Some((n0, levels)) => unit_square_refined(n0, levels, config.mesh.element)?,
                None => unit_square(config.mesh.n, config.mesh.element)?,
            };
            solve_and_write(
                config,
                &mesh,
                manufactured,
                t.elapsed().as_secs_f64(),
                &backend,
            )?
        }
        MeshKind::UnitCube => {
            let t = Instant::now();
            let mesh = unit_cube(config.mesh.n)?;
            solve_and_write(
                config,
                &mesh,
                manufactured,
                t.elapsed().as_secs_f64(),
                &backend,
            )?
        }
    };
    Ok(Some(summary))
}

fn solve_and_write<const D: usize>(
    config: &RunConfig,
    mesh: &Mesh<D>,
    manufactured: Manufactured,
    mesh_seconds: f64,
    backend: &Backend,
) -> Result<JobSummary> {
    let mut seconds = StageSeconds {
        mesh: mesh_seconds,
        ..Default::default()
    };

    let t = Instant::now();
    let PoissonSystem { matrix, rhs, dofs } = assemble_poisson(mesh, |x| manufactured.f(x))?;
    seconds.assembly = t.elapsed().as_secs_f64();
    log::info!(
        "assembled {} unknowns, {} nonzeros in {:.3} s",
        dofs.len(),
        matrix.nnz(),
        seconds.assembly
    );

    let t = Instant::now();
    let solver = match config.method {
        Method::Cholesky => CholeskySolver::factor(&matrix)?,
    };
    seconds.factor = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let u = solver.solve(&rhs);
    seconds.solve = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let mut residual = vec![0.0; rhs.len()];
    cpu::residual(&matrix, &rhs, &u, &mut residual);
    let relative_residual = cpu::nrm2(&residual) / cpu::nrm2(&rhs);
    let exact = |x: &[f64]| manufactured.u(x);
    let l2 = l2_error(mesh, &dofs, &u, exact);
    let nodal = nodal_l2_error(mesh, &dofs, &u, exact);
    seconds.verify = t.elapsed().as_secs_f64();
    if !relative_residual.is_finite() || !l2.is_finite() {
        return Err(Error::Solver(format!(
            "the solution is not finite (relative residual {relative_residual}, L2 error {l2})"
        )));
    }

    let t = Instant::now();
    let writer = h5::H5Writer::create(&config.output)?;
    let root = writer.root();
    h5::write_provenance(root, Some(&config.source))?;
    let mesh_group = root.create_group("mesh").map_err(|e| Error::Hdf5 {
        path: config.output.clone(),
        message: format!("creating group mesh: {e}"),
    })?;
    h5::write_mesh(&mesh_group, mesh)?;
    let solution = root.create_group("solution").map_err(|e| Error::Hdf5 {
        path: config.output.clone(),
        message: format!("creating group solution: {e}"),
    })?;
    h5::write_vector(&solution, "u", &dofs.to_nodal(&u))?;
    let exact_nodal: Vec<f64> = mesh.coords.iter().map(|x| exact(x)).collect();
    h5::write_vector(&solution, "exact", &exact_nodal)?;
    h5::write_vector(&solution, "node_of_unknown", &dofs.node_of_dof)?;
    h5::write_scalar_attr(&solution, "k", config.k)?;
    h5::write_str_attr(&solution, "method", config.method.name())?;
    h5::write_str_attr(&solution, "precision", config.precision.name())?;
    h5::write_str_attr(&solution, "backend", &backend.to_string())?;
    h5::write_scalar_attr(&solution, "l2_error", l2)?;
    h5::write_scalar_attr(&solution, "relative_l2_error", l2 / manufactured.l2_norm())?;
    h5::write_scalar_attr(&solution, "nodal_l2_error", nodal)?;
    h5::write_scalar_attr(&solution, "relative_residual", relative_residual)?;
    h5::write_scalar_attr(&solution, "unknowns", dofs.len() as u64)?;
    h5::write_scalar_attr(&solution, "nonzeros", matrix.nnz() as u64)?;
    for (name, value) in [
        ("mesh_seconds", seconds.mesh),
        ("assembly_seconds", seconds.assembly),
        ("factor_seconds", seconds.factor),
        ("solve_seconds", seconds.solve),
        ("verify_seconds", seconds.verify),
    ] {
        h5::write_scalar_attr(&solution, name, value)?;
    }
    drop(mesh_group);
    drop(solution);
    let output = writer.commit()?;
    let xdmf = xdmf::write_sidecar(
        &output,
        mesh.element,
        mesh.num_nodes(),
        mesh.num_cells(),
        &[
            xdmf::NodalField {
                name: "u",
                dataset: "/solution/u",
            },
            xdmf::NodalField {
                name: "exact",
                dataset: "/solution/exact",
            },
        ],
    )?;
    seconds.write = t.elapsed().as_secs_f64();

    Ok(JobSummary {
        description: describe(config),
        backend: backend.to_string(),
        unknowns: dofs.len(),
        nonzeros: matrix.nnz(),
        l2_error: l2,
        relative_l2_error: l2 / manufactured.l2_norm(),
        nodal_l2_error: nodal,
        relative_residual,
        seconds,
        output,
        xdmf,
    })
}
