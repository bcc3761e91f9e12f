//! The one place a Poisson method meets a device: the configured solver set up on a rank's
//! backend, and the memory a run needs, refused before anything is allocated when this
//! machine cannot hold it.

use crate::config::{Method, SolverSpec};
use crate::device::cuda::Cuda;
use crate::device::{Backend, Cpu, MultigridDevice, PscDevice};
use crate::error::{Error, Result};
use crate::linalg::{BlockSolver, SparseCholesky};
use crate::mesh::{Mesh, MeshSpec};
use crate::mg::{MgParams, MgSolveSettings, MultigridSolver, StopParams};
use crate::psc::PscSolver;
use crate::sparse::Csr;

/// A generous estimate of the bytes a run needs: assembly, the block of right-hand sides
/// and solutions, and the solver (each solver's own estimate).
fn estimated_bytes(m: &MeshSpec, solver: &SolverSpec, nrhs: usize, backend: &Backend) -> f64 {
    let unknowns = m.unknowns() as f64;
    let k = m.element.nodes_per_cell() as f64;
    let assembly =
        m.cells() as f64 * (k * k + k) * 8.0 + unknowns * 27.0 * 40.0 + m.nodes() as f64 * 80.0;
    let block = nrhs as f64 * (unknowns * 8.0 * 6.0 + m.nodes() as f64 * 8.0 * 2.0);
    let solver = match solver.method {
        // A Stokes run sizes itself (stokes::check_memory); it has no Poisson operator.
        Method::Stokes => 0.0,
        Method::Cholesky => SparseCholesky::estimated_bytes(m.unknowns(), m.dim()),
        Method::Mg => crate::mg::estimated_bytes(m.unknowns(), m.dim(), nrhs),
        method @ (Method::PscM1 | Method::PscM2 | Method::PscM3) => {
            let solve_on_host = matches!(backend, Backend::Cpu { .. });
            crate::psc::configured_bytes(m, (method, solver.coupling), nrhs, solve_on_host)
        }
    };
    assembly + block + solver
}

/// Refuses a problem this machine's memory cannot hold, naming what to change.
pub fn check_memory(
    mesh: &MeshSpec,
    solver: &SolverSpec,
    nrhs: usize,
    backend: &Backend,
) -> Result<()> {
    let Some(available) = crate::sys::available_memory() else {
        return Ok(());
    };
    let needed = estimated_bytes(mesh, solver, nrhs, backend);
    if needed > available as f64 {
        let classes = match (solver.method.is_psc(), mesh.coarse) {
            (true, Some((n0, _))) => {
                let (c, e) = crate::psc::class_sizes(mesh, solver.coupling).map_or_else(
                    || crate::psc::class_counts(mesh.element, mesh.n, n0),
                    |(c, e, _)| (c, e),
                );
                format!(", |C| = {c}, |E| = {e}")
            }
            _ => String::new(),
        };
        return Err(Error::InvalidInput(format!(
            "this problem ({} unknowns × {nrhs} right-hand sides, method {}{classes}) needs about {:.1} GiB of memory, but only {:.1} GiB are available; use {} or fewer right-hand sides at once{}",
            mesh.unknowns(),
            solver.method.name(),
            needed / 2f64.powi(30),
            available as f64 / 2f64.powi(30),
            if mesh.domain.is_some() {
                "fewer mesh.levels"
            } else {
                "a smaller mesh.n"
            },
            match (solver.method, mesh.domain.is_some()) {
                (Method::PscM3, false) => " or a larger mesh.h0",
                (Method::PscM1 | Method::PscM2, false) => " or a larger mesh.h0, or method psc-m3 (no dense |E|×|E| operator)",
                (Method::PscM3, true) => " or another mesh.coarse_levels",
                (Method::PscM1 | Method::PscM2, true) => " or another mesh.coarse_levels (`tensorfem psc-info` lists |E| for each on the flow around a square), or method psc-m3 (no dense |E|×|E| operator)",
                _ => "",
            }
        )));
    }
    Ok(())
}

/// The levels and the solve settings of multigrid as configured.
fn multigrid_settings(solver: &SolverSpec) -> (MgParams, MgSolveSettings) {
    let spec = solver.mg.as_ref().expect("validated: mg has its settings");
    let levels = MgParams {
        schedule: spec.schedule.clone(),
        smoother: spec.smoother,
        base_tolerance: 1e-4,
        residual_scaling: spec.residual_scaling,
        storage: spec.storage,
    };
    let settings = MgSolveSettings {
        refine: solver.refine,
        krylov: spec.krylov,
        stop: StopParams {
            rtol: solver.rtol,
            atol: solver.atol,
            max_iterations: solver.max_iterations,
        },
        seed: spec.seed,
        cycle_columns: spec.cycle_columns,
    };
    (levels, settings)
}

/// The one place a method meets a device: the configured solver set up on this rank's
/// backend (Backend::select has already refused a method without a CUDA implementation),
/// for `mesh` (`conditioned`: a refined domain or boundary conditions).
pub(super) fn set_up_solver<const DIM: usize>(
    backend: &Backend,
    matrix: &Csr<f64>,
    mesh: &Mesh<DIM>,
    conditioned: bool,
    mesh_spec: &MeshSpec,
    solver_spec: &SolverSpec,
) -> Result<(Box<dyn BlockSolver>, Option<String>)> {
    match (solver_spec.method, backend) {
        (Method::Cholesky, _) => Ok((Box::new(SparseCholesky::factor(matrix)?), None)),
        (Method::Mg, _) => {
            fn boxed<D: MultigridDevice>(
                (solver, note): (MultigridSolver<D>, String),
            ) -> (Box<dyn BlockSolver>, Option<String>) {
                (Box::new(solver), Some(note))
            }
            let general = mesh.planar().filter(|_| conditioned);
            let (levels, settings) = multigrid_settings(solver_spec);
            match backend {
                Backend::Cpu { .. } => {
                    let dev = Cpu::new();
                    MultigridSolver::set_up(&dev, matrix, mesh_spec, general, levels, settings)
                        .map(boxed)
                }
                Backend::Cuda(info) => {
                    let dev = Cuda::shared(info)?;
                    MultigridSolver::set_up(&dev, matrix, mesh_spec, general, levels, settings)
                        .map(boxed)
                }
            }
        }
        (Method::PscM1 | Method::PscM2 | Method::PscM3, _) => {
            set_up_psc(backend, mesh_spec, solver_spec, mesh, conditioned)
        }
        (Method::Stokes, _) => Err(Error::InvalidInput(
            "method stokes solves the Stokes system (stokes::solve), not a Poisson operator".into(),
        )),
    }
}

/// The configured PSC method on this rank's backend: its set-up comes from the mesh (and
/// the operator cache), not from the assembled matrix.
pub(super) fn set_up_psc<const DIM: usize>(
    backend: &Backend,
    mesh_spec: &MeshSpec,
    solver_spec: &SolverSpec,
    mesh: &Mesh<DIM>,
    conditioned: bool,
) -> Result<(Box<dyn BlockSolver>, Option<String>)> {
    fn boxed<D: PscDevice>(
        (solver, note): (PscSolver<D>, String),
    ) -> (Box<dyn BlockSolver>, Option<String>) {
        (Box::new(solver), Some(note))
    }
    let mesh = mesh
        .planar()
        .expect("validated: the psc methods solve 2D problems");
    match backend {
        Backend::Cpu { .. } => {
            PscSolver::set_up(&Cpu::new(), mesh_spec, solver_spec, mesh, conditioned).map(boxed)
        }
        Backend::Cuda(info) => {
            let dev = Cuda::shared(info)?;
            PscSolver::set_up(&dev, mesh_spec, solver_spec, mesh, conditioned).map(boxed)
        }
    }
}
