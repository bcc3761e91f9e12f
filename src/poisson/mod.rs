//! Poisson problems set up once and solved many times: what the driver, a campaign and
//! any embedding program use. A [`PoissonSolver`] is a mesh, its stiffness matrix and the
//! configured solver (PSC, multigrid or the sparse Cholesky, each behind its own
//! `set_up`) on a rank's backend; it solves blocks of right-hand sides of any magnitude
//! and makes every column meet the tolerance contract (docs/mathematics.md §6).
//! [`AnyPoissonSolver`] is one of them for any mesh a config describes, with the loads
//! of manufactured solutions or of a file and the checks of every column.
//!
//! - [`solver`]: [`PoissonSolver`], the solve and its verification
//! - [`set_up`]: where a method meets a device; the memory a problem needs

mod set_up;
mod solver;

pub use set_up::check_memory;
pub use solver::PoissonSolver;

use crate::config::SolverSpec;
use crate::device::Backend;
use crate::error::Result;
use crate::fem::{BoundaryProblem, ColumnReport, Exact};
use crate::linalg::{BlockOutcome, TimedStage};
use crate::mesh::{self, MeshSpec};

/// A [`PoissonSolver`] on the unit square or cube with u = 0 on the boundary, or on a 2D
/// mesh with boundary data (refined domains, `[boundary]`).
pub enum AnyPoissonSolver {
    Square(PoissonSolver<2>),
    Cube(PoissonSolver<3>),
    Conditioned(PoissonSolver<2>, Box<BoundaryProblem>),
}

/// Runs `$body` with `$solver` bound to the [`PoissonSolver`] inside an
/// [`AnyPoissonSolver`].
macro_rules! with_solver_impl {
    ($any:expr, $solver:ident => $body:expr) => {
        match $any {
            $crate::poisson::AnyPoissonSolver::Square($solver)
            | $crate::poisson::AnyPoissonSolver::Conditioned($solver, _) => $body,
            $crate::poisson::AnyPoissonSolver::Cube($solver) => $body,
        }
    };
}
pub(crate) use with_solver_impl as with_solver;

/// Right-hand sides, column-major (unknowns × columns), with the Dirichlet values of each
/// column at every node (nodes × columns) where the problem has Dirichlet data.
pub type Loads = (Vec<f64>, Option<Vec<f64>>);

impl AnyPoissonSolver {
    /// Builds the mesh `mesh` describes, assembles it and sets up `solver` on `backend`.
    pub fn new(backend: &Backend, mesh: &MeshSpec, solver: &SolverSpec) -> Result<Self> {
        let conditioned = mesh.domain.is_some() || mesh.boundary.is_some();
        Ok(match mesh::build(mesh)? {
            mesh::AnyMesh::Square(m) if conditioned => {
                let boundary = BoundaryProblem::new(&m, mesh.boundary.as_ref())?;
                let op = PoissonSolver::new(backend, m, mesh, solver, true)?;
                AnyPoissonSolver::Conditioned(op, Box::new(boundary))
            }
            mesh::AnyMesh::Square(m) => {
                AnyPoissonSolver::Square(PoissonSolver::new(backend, m, mesh, solver, false)?)
            }
            mesh::AnyMesh::Cube(m) => {
                AnyPoissonSolver::Cube(PoissonSolver::new(backend, m, mesh, solver, false)?)
            }
        })
    }

    pub fn dim(&self) -> usize {
        match self {
            AnyPoissonSolver::Square(_) | AnyPoissonSolver::Conditioned(..) => 2,
            AnyPoissonSolver::Cube(_) => 3,
        }
    }

    pub fn unknowns(&self) -> usize {
        with_solver!(self, s => s.unknowns())
    }

    pub fn nonzeros(&self) -> usize {
        with_solver!(self, s => s.matrix.nnz())
    }

    pub fn assembly_seconds(&self) -> f64 {
        with_solver!(self, s => s.assembly_seconds)
    }

    pub fn setup_seconds(&self) -> f64 {
        with_solver!(self, s => s.setup_seconds)
    }

    pub fn setup_note(&self) -> Option<String> {
        with_solver!(self, s => s.setup_note.clone())
    }

    /// The loads of the manufactured solutions `exact` (with their Dirichlet values where
    /// the problem has boundary data).
    pub fn manufactured_loads(&self, exact: &[Exact]) -> Result<Loads> {
        match self {
            AnyPoissonSolver::Conditioned(s, boundary) => {
                let (b, g) = boundary.manufactured(&s.mesh, &s.dofs, exact)?;
                Ok((b, Some(g)))
            }
            _ => Ok((with_solver!(self, s => s.loads(exact)), None)),
        }
    }

    /// The loads of `nrhs` columns read from a file: `rows` as stored (the unknowns' loads,
    /// or with boundary data the load nodes' values) and the stored Dirichlet values.
    pub fn file_loads(
        &self,
        rows: Vec<f64>,
        nrhs: usize,
        dirichlet: Option<&[f64]>,
    ) -> Result<Loads> {
        match self {
            AnyPoissonSolver::Conditioned(s, boundary) => {
                let (b, g) = boundary.file_loads(&s.mesh, &s.dofs, &rows, nrhs, dirichlet)?;
                Ok((b, Some(g)))
            }
            _ => Ok((rows, None)),
        }
    }

    /// Solves the column-major block `b` (unknowns × nrhs): [`PoissonSolver::solve`].
    pub fn solve(&mut self, b: &[f64], nrhs: usize) -> Result<BlockOutcome> {
        with_solver!(self, s => s.solve(b, nrhs))
    }

    /// [`PoissonSolver::time_stages`].
    pub fn time_stages(&mut self, on: bool) {
        with_solver!(self, s => s.time_stages(on))
    }

    /// [`PoissonSolver::take_stages`].
    pub fn take_stages(&mut self) -> Result<Vec<TimedStage>> {
        with_solver!(self, s => s.take_stages())
    }

    /// The solutions `u` at every node (nodes × columns), with the Dirichlet values
    /// `dirichlet` of each column where the problem has boundary data.
    pub fn to_nodal(&self, u: &[f64], dirichlet: Option<&[f64]>) -> Vec<f64> {
        match (self, dirichlet) {
            (AnyPoissonSolver::Conditioned(s, boundary), Some(g)) => boundary.nodal(&s.dofs, u, g),
            _ => with_solver!(self, s => s.dofs.to_nodal_block(u)),
        }
    }

    /// The exact solutions `exact` at every node, nodes × columns (shifted to mean zero as
    /// the solutions are, for a pure Neumann problem).
    pub fn exact_nodal(&self, exact: &[Exact]) -> Vec<f64> {
        match self {
            AnyPoissonSolver::Conditioned(s, boundary) => exact
                .iter()
                .flat_map(|e| boundary.exact_nodal(&s.mesh, e))
                .collect(),
            _ => with_solver!(self, s => exact
                .iter()
                .flat_map(|e| s.mesh.coords.iter().map(move |x| e.u(x)).collect::<Vec<_>>())
                .collect()),
        }
    }

    /// The relative residual each column of the block `b` must reach (docs/mathematics.md
    /// §6); where the absolute part decides, says so once.
    pub fn tolerances(&self, b: &[f64]) -> Vec<f64> {
        let tolerance = with_solver!(self, s => s.tolerance);
        let n = self.unknowns();
        let norms: Vec<f64> = b.chunks(n.max(1)).map(crate::numeric::nrm2).collect();
        if let Some(c) = norms.iter().position(|&b| tolerance.absolute_decides(b)) {
            log::info!(
                "atol = {:e} decides for right-hand side {c} and {} other(s): it is above rtol·‖b‖₂ = {:e} (the column must reach a relative residual of {:e}, not rtol = {:e})",
                tolerance.atol,
                norms.iter().filter(|&&b| tolerance.absolute_decides(b)).count() - 1,
                tolerance.rtol * norms[c],
                tolerance.relative(norms[c]),
                tolerance.rtol
            );
        }
        norms.iter().map(|&b| tolerance.relative(b)).collect()
    }

    /// The checks of every column of the solved block `u` of `b` (`nodal`: the solutions at
    /// every node): its f64 residual and, where its exact solution is known, its L2 errors;
    /// a column that is not finite is an error.
    pub fn reports(
        &self,
        b: &[f64],
        u: &[f64],
        nodal: &[f64],
        exact: &[Option<Exact>],
    ) -> Result<Vec<ColumnReport>> {
        match self {
            AnyPoissonSolver::Conditioned(s, boundary) => {
                let residuals = s.residuals(b, u, exact.len());
                boundary.verify(&s.mesh, nodal, exact, &residuals)
            }
            _ => with_solver!(self, s => s.verify(b, u, exact)),
        }
    }
}
