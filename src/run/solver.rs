//! The operator/solver dispatch: a mesh's assembled system with the configured solver (its
//! own `set_up`, on this rank's device: `set_up_solver`), applied to blocks of right-hand
//! sides with the tolerance contract of every column; memory estimates; and the campaign's
//! operators built from it. [`super::backend`] decides which device a run gets.

use std::path::PathBuf;
use std::time::Instant;

use super::backend::Backend;
use crate::campaign::{BatchOperator, BatchRhs, Checks, ColumnSource, InputColumns, Operators};
use crate::config::{Method, OperatorSpec, SolverSpec};
use crate::device::cuda::Cuda;
use crate::device::{Cpu, MultigridDevice, PscDevice};
use crate::error::{Error, Result};
use crate::fem::{
    assemble_stiffness, relative_residuals, verify, BoundaryProblem, ColumnReport, Dofs, Exact,
    ModeBasis,
};
use crate::linalg::{magnitude, BlockOutcome, BlockSolver, Scope, Tolerance};
use crate::mesh::{self, Mesh, MeshSpec};
use crate::mg::{MgParams, MgSolveSettings, MultigridSolver, StopParams};
use crate::psc::PscSolver;
use crate::reference::CholeskySolver;
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
        Method::Cholesky => CholeskySolver::estimated_bytes(m.unknowns(), m.dim()),
        Method::Mg => crate::mg::estimated_bytes(m.unknowns(), m.dim(), nrhs),
        method @ (Method::PscM1 | Method::PscM2 | Method::PscM3) => {
            let solve_on_host = matches!(backend, Backend::Cpu { .. });
            crate::psc::configured_bytes(m, method, nrhs, solve_on_host)
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
                let (c, e) = crate::psc::class_counts(mesh.element, mesh.n, n0);
                format!(", |C| = {c}, |E| = {e}")
            }
            _ => String::new(),
        };
        return Err(Error::InvalidInput(format!(
            "this problem ({} unknowns × {nrhs} right-hand sides, method {}{classes}) needs about {:.1} GiB of memory, but only {:.1} GiB are available; use a smaller mesh.n or fewer right-hand sides at once{}",
            mesh.unknowns(),
            solver.method.name(),
            needed / 2f64.powi(30),
            available as f64 / 2f64.powi(30),
            match solver.method {
                Method::PscM3 => " or a larger mesh.h0",
                Method::PscM1 | Method::PscM2 => " or a larger mesh.h0, or method psc-m3 (no dense |E|×|E| operator)",
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
    };
    (levels, settings)
}

/// The one place a method meets a device: the configured solver set up on this rank's
/// backend (Backend::select has already refused a method without a CUDA implementation),
/// for `mesh` (`conditioned`: a refined domain or boundary conditions).
fn set_up_solver<const DIM: usize>(
    backend: &Backend,
    matrix: &Csr<f64>,
    mesh: &Mesh<DIM>,
    conditioned: bool,
    mesh_spec: &MeshSpec,
    solver_spec: &SolverSpec,
) -> Result<(Box<dyn BlockSolver>, Option<String>)> {
    match (solver_spec.method, backend) {
        (Method::Cholesky, _) => Ok((Box::new(CholeskySolver::factor(matrix)?), None)),
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
fn set_up_psc<const DIM: usize>(
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

/// What `f` returns, with the seconds it took.
fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let t = Instant::now();
    let value = f()?;
    Ok((value, t.elapsed().as_secs_f64()))
}

/// A mesh with its assembled stiffness matrix and the configured solver on the device `D`,
/// set up once and applied to any number of blocks of right-hand sides.
pub struct PoissonSystem<const DIM: usize> {
    pub mesh: Mesh<DIM>,
    pub matrix: Csr<f64>,
    pub dofs: Dofs,
    /// The manufactured solutions' modes met so far, for block loads and L2 errors.
    modes: ModeBasis<DIM>,
    solver: Box<dyn BlockSolver>,
    /// What every column's verified residual must meet.
    pub tolerance: Tolerance,
    /// The method iterates to its tolerance (its columns get correction steps).
    iterative: bool,
    /// The verification's residuals of the last solve.
    checked: Option<Checked>,
    /// How the set-up was obtained (cache loaded/built), when there is one worth saying.
    pub setup_note: Option<String>,
    pub assembly_seconds: f64,
    pub setup_seconds: f64,
}

impl<const DIM: usize> PoissonSystem<DIM> {
    /// Assembles the stiffness matrix of `mesh` and sets up the solver on `backend`
    /// (`conditioned`: the mesh is a refined domain or has boundary conditions).
    pub fn new(
        backend: &Backend,
        mesh: Mesh<DIM>,
        mesh_spec: &MeshSpec,
        solver_spec: &SolverSpec,
        conditioned: bool,
    ) -> Result<Self> {
        let assemble = || timed(|| assemble_stiffness(&mesh));
        let (((matrix, dofs), assembly_seconds), ((solver, setup_note), setup_seconds)) =
            if solver_spec.method.is_psc() && matches!(backend, Backend::Cpu { .. }) {
                // The PSC set-up (mostly reading the operator cache) does not need the
                // matrix: on the CPU the two run side by side. (A CUDA set-up stays on
                // this thread, which holds the device's context.)
                let set_up =
                    || timed(|| set_up_psc(backend, mesh_spec, solver_spec, &mesh, conditioned));
                let (solver, sys) = rayon::join(set_up, assemble);
                (sys?, solver?)
            } else {
                let ((matrix, dofs), seconds) = assemble()?;
                let set_up = timed(|| {
                    set_up_solver(backend, &matrix, &mesh, conditioned, mesh_spec, solver_spec)
                })?;
                (((matrix, dofs), seconds), set_up)
            };
        log::info!(
            "assembled {} unknowns, {} nonzeros in {assembly_seconds:.3} s",
            dofs.len(),
            matrix.nnz(),
        );
        Ok(PoissonSystem {
            mesh,
            matrix,
            dofs,
            modes: ModeBasis::new(),
            solver,
            tolerance: solver_spec.tolerance,
            iterative: solver_spec.method == Method::Mg
                || (solver_spec.method.is_psc() && solver_spec.refine),
            checked: None,
            setup_note,
            assembly_seconds,
            setup_seconds,
        })
    }

    pub fn unknowns(&self) -> usize {
        self.dofs.len()
    }

    /// Load vectors of the exact solutions' f, column-major (unknowns × len): a sum of the
    /// modes' load vectors, each integrated once per operator.
    pub fn loads(&self, exact: &[Exact]) -> Vec<f64> {
        self.modes.loads(&self.mesh, &self.dofs, exact)
    }

    /// Solves the column-major block `rhs` (unknowns × nrhs) and makes every column of an
    /// iterative method meet its tolerance by the verification's own residual
    /// ([`relative_residuals`]): the solver stops on a residual it updates step by step or
    /// computes in another order, which near the tolerance can differ from the check's; a
    /// column the check puts above it gets up to [`CORRECTIONS`] steps x += A⁻¹(b − A x)
    /// with the check's residual. What the check found is kept for [`PoissonSystem::verify`].
    pub fn solve(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome> {
        let mut outcome = self.solve_by_magnitude(rhs, nrhs)?;
        let n = self.dofs.len();
        let tolerances: Vec<f64> = rhs
            .chunks(n.max(1))
            .map(|b| self.tolerance.relative(crate::numeric::nrm2(b)))
            .collect();
        for step in 0..=CORRECTIONS {
            let residuals = relative_residuals(&self.matrix, rhs, &outcome.u, nrhs);
            let failing: Vec<usize> = (0..nrhs)
                .filter(|&c| residuals[c].is_finite() && residuals[c] > tolerances[c])
                .collect();
            if failing.is_empty() || !self.iterative || step == CORRECTIONS {
                self.checked = Some(Checked::of(rhs, &outcome.u, residuals));
                break;
            }
            log::info!(
                "{} column(s) above their tolerance by the verification's residual (worst {:.3e}, tolerance {:.1e}): correction step {}",
                failing.len(),
                failing.iter().map(|&c| residuals[c]).fold(0.0, f64::max),
                tolerances[failing[0]],
                step + 1
            );
            let mut r = Vec::with_capacity(failing.len() * n);
            let mut au = vec![0.0; n];
            for &c in &failing {
                crate::sparse::spmv(&self.matrix, &outcome.u[c * n..(c + 1) * n], &mut au);
                r.extend(rhs[c * n..(c + 1) * n].iter().zip(&au).map(|(b, a)| b - a));
            }
            let correction = self.solve_by_magnitude(&r, failing.len())?;
            for (k, &c) in failing.iter().enumerate() {
                let d = &correction.u[k * n..(k + 1) * n];
                outcome.u[c * n..(c + 1) * n]
                    .iter_mut()
                    .zip(d)
                    .for_each(|(x, d)| *x += d);
            }
            outcome.add_correction(&correction);
        }
        Ok(outcome)
    }

    /// [`PoissonSystem::solve`]'s solve: as given where every column has an ordinary magnitude,
    /// else in groups scaled by powers of two (`linalg::magnitude`); a column that cannot be
    /// solved in f64 is refused by name.
    fn solve_by_magnitude(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome> {
        let n = self.dofs.len();
        let groups = magnitude::groups(rhs, n, nrhs)?;
        if magnitude::as_given(&groups, nrhs) {
            let columns: Vec<usize> = (0..nrhs).collect();
            return self
                .solver
                .solve(&self.matrix, rhs, &Scope::unscaled(&columns));
        }
        let mut all = BlockOutcome::empty(0);
        all.u = vec![0.0; rhs.len()];
        for group in &groups {
            if group.exponent != 0 {
                log::info!(
                    "right-hand side(s) {:?} solved multiplied by 2^{} (their magnitudes lie outside [2^-{w}, 2^{w}]; exact in binary arithmetic)",
                    group.columns,
                    group.exponent,
                    w = magnitude::WINDOW
                );
            }
            let b = magnitude::gather(group, rhs, n);
            let scope = Scope {
                columns: &group.columns,
                factor: group.factor(),
            };
            let mut outcome = self.solver.solve(&self.matrix, &b, &scope)?;
            magnitude::scatter(group, &outcome.u, &mut all.u, n)?;
            outcome.u = Vec::new();
            all.merge(outcome);
        }
        Ok(all)
    }

    /// The f64 residual of every column and, where its exact solution is known, the L2
    /// errors; a column that is not finite is an error.
    pub fn verify(
        &self,
        rhs: &[f64],
        u: &[f64],
        exact: &[Option<Exact>],
    ) -> Result<Vec<ColumnReport>> {
        let residuals = self.residuals(rhs, u, exact.len());
        verify(&self.mesh, &self.dofs, &self.modes, u, exact, &residuals)
    }

    /// The verified residual of every column of the blocks `rhs` and `u`
    /// ([`relative_residuals`]): what the last solve's check computed when these are its
    /// blocks, else computed now.
    pub fn residuals(&self, rhs: &[f64], u: &[f64], nrhs: usize) -> Vec<f64> {
        match self.checked.as_ref().filter(|c| c.is_of(rhs, u)) {
            Some(checked) => checked.residuals.clone(),
            None => relative_residuals(&self.matrix, rhs, u, nrhs),
        }
    }
}

/// Correction steps a solve takes at most where the verification puts a column above its
/// tolerance (each one solve of the columns' residuals).
const CORRECTIONS: usize = 2;

/// The verification's residuals of a solve, with hashes of the blocks they belong to.
struct Checked {
    rhs: u64,
    u: u64,
    residuals: Vec<f64>,
}

impl Checked {
    fn hash(v: &[f64]) -> u64 {
        xxhash_rust::xxh3::xxh3_64(bytemuck::cast_slice(v))
    }

    fn of(rhs: &[f64], u: &[f64], residuals: Vec<f64>) -> Self {
        Checked {
            rhs: Self::hash(rhs),
            u: Self::hash(u),
            residuals,
        }
    }

    fn is_of(&self, rhs: &[f64], u: &[f64]) -> bool {
        self.rhs == Self::hash(rhs) && self.u == Self::hash(u)
    }
}

/// A [`PoissonSystem`] on the unit square or cube with u = 0 on the boundary, or on a 2D mesh
/// with boundary data (refined domains, `[boundary]`).
pub enum AnyPoissonSystem {
    Square(PoissonSystem<2>),
    Cube(PoissonSystem<3>),
    Conditioned(PoissonSystem<2>, Box<BoundaryProblem>),
}

impl AnyPoissonSystem {
    pub fn new(backend: &Backend, mesh: &MeshSpec, solver: &SolverSpec) -> Result<Self> {
        let conditioned = mesh.domain.is_some() || mesh.boundary.is_some();
        Ok(match mesh::build(mesh)? {
            mesh::AnyMesh::Square(m) if conditioned => {
                let boundary = BoundaryProblem::new(&m, mesh.boundary.as_ref())?;
                let op = PoissonSystem::new(backend, m, mesh, solver, true)?;
                AnyPoissonSystem::Conditioned(op, Box::new(boundary))
            }
            mesh::AnyMesh::Square(m) => {
                AnyPoissonSystem::Square(PoissonSystem::new(backend, m, mesh, solver, false)?)
            }
            mesh::AnyMesh::Cube(m) => {
                AnyPoissonSystem::Cube(PoissonSystem::new(backend, m, mesh, solver, false)?)
            }
        })
    }

    fn dim(&self) -> usize {
        match self {
            AnyPoissonSystem::Square(_) | AnyPoissonSystem::Conditioned(..) => 2,
            AnyPoissonSystem::Cube(_) => 3,
        }
    }

    pub fn assembly_seconds(&self) -> f64 {
        with_operator!(self, op => op.assembly_seconds)
    }

    pub fn setup_seconds(&self) -> f64 {
        with_operator!(self, op => op.setup_seconds)
    }

    pub fn setup_note(&self) -> Option<String> {
        with_operator!(self, op => op.setup_note.clone())
    }

    pub fn nonzeros(&self) -> usize {
        with_operator!(self, op => op.matrix.nnz())
    }

    /// The exact solutions of manufactured columns at every node, nodes × columns (shifted
    /// to mean zero as the solutions are, for a pure Neumann problem).
    pub fn exact_nodal(&self, columns: &[ColumnSource]) -> Vec<f64> {
        let dim = self.dim();
        let exact = columns
            .iter()
            .map(|c| c.exact(dim).expect("manufactured columns"));
        match self {
            AnyPoissonSystem::Conditioned(op, boundary) => exact
                .flat_map(|e| boundary.exact_nodal(&op.mesh, &e))
                .collect(),
            _ => with_operator!(self, op => exact
                .flat_map(|e| op.mesh.coords.iter().map(move |x| e.u(x)).collect::<Vec<_>>())
                .collect()),
        }
    }

    /// The relative residual each column of the block `b` must reach (docs/mathematics.md
    /// §6); where the absolute part decides, says so once.
    pub fn tolerances(&self, b: &[f64]) -> Vec<f64> {
        let tolerance = with_operator!(self, op => op.tolerance);
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

    /// The checks of every column (see [`BatchOperator::verify`]), one report each.
    pub fn reports(
        &self,
        rhs: &BatchRhs,
        u: &[f64],
        nodal: &[f64],
        columns: &[ColumnSource],
    ) -> Result<Vec<ColumnReport>> {
        let dim = self.dim();
        let exact: Vec<Option<Exact>> = columns.iter().map(|c| c.exact(dim)).collect();
        match self {
            AnyPoissonSystem::Conditioned(op, boundary) => {
                let residuals = op.residuals(&rhs.b, u, exact.len());
                boundary.verify(&op.mesh, nodal, &exact, &residuals)
            }
            _ => with_operator!(self, op => op.verify(&rhs.b, u, &exact)),
        }
    }
}

/// Runs `$body` with `$op` bound to the [`PoissonSystem`] inside an [`AnyPoissonSystem`].
macro_rules! with_operator_impl {
    ($any:expr, $op:ident => $body:expr) => {
        match $any {
            AnyPoissonSystem::Square($op) | AnyPoissonSystem::Conditioned($op, _) => $body,
            AnyPoissonSystem::Cube($op) => $body,
        }
    };
}
pub(super) use with_operator_impl as with_operator;

impl BatchOperator for AnyPoissonSystem {
    fn unknowns(&self) -> usize {
        with_operator!(self, op => op.unknowns())
    }

    fn rhs(&self, columns: &[ColumnSource], input: Option<&InputColumns>) -> Result<BatchRhs> {
        let dim = self.dim();
        let nrhs = columns.len();
        let read = |input: &InputColumns| match columns[0] {
            ColumnSource::Input { index } => Ok((
                input.read(index..index + nrhs)?,
                input.read_dirichlet(index..index + nrhs)?,
            )),
            other => Err(Error::Campaign(format!(
                "column {other:?} is not a column of the right-hand-side file"
            ))),
        };
        let exact = || -> Vec<Exact> {
            columns
                .iter()
                .map(|c| c.exact(dim).expect("manufactured columns"))
                .collect()
        };
        match (self, input) {
            (AnyPoissonSystem::Conditioned(op, boundary), Some(input)) => {
                let (rows, dirichlet) = read(input)?;
                let (b, g) =
                    boundary.file_loads(&op.mesh, &op.dofs, &rows, nrhs, dirichlet.as_deref())?;
                Ok(BatchRhs {
                    b,
                    dirichlet: Some(g),
                })
            }
            (AnyPoissonSystem::Conditioned(op, boundary), None) => {
                let (b, g) = boundary.manufactured(&op.mesh, &op.dofs, &exact())?;
                Ok(BatchRhs {
                    b,
                    dirichlet: Some(g),
                })
            }
            (_, Some(input)) => Ok(BatchRhs {
                b: read(input)?.0,
                dirichlet: None,
            }),
            (_, None) => Ok(BatchRhs {
                b: with_operator!(self, op => op.loads(&exact())),
                dirichlet: None,
            }),
        }
    }

    fn solve(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome> {
        with_operator!(self, op => op.solve(rhs, nrhs))
    }

    fn to_nodal(&self, u: &[f64], rhs: &BatchRhs) -> Vec<f64> {
        match (self, &rhs.dirichlet) {
            (AnyPoissonSystem::Conditioned(op, boundary), Some(g)) => {
                boundary.nodal(&op.dofs, u, g)
            }
            _ => with_operator!(self, op => op.dofs.to_nodal_block(u)),
        }
    }

    fn verify(
        &mut self,
        rhs: &BatchRhs,
        u: &[f64],
        nodal: &[f64],
        columns: &[ColumnSource],
    ) -> Result<Checks> {
        let reports = self.reports(rhs, u, nodal, columns)?;
        Ok(Checks::poisson(&reports, self.tolerances(&rhs.b)))
    }
}

/// The operators of a campaign on this rank's backend.
pub struct CampaignOperators {
    pub backend: Backend,
}

impl Operators for CampaignOperators {
    fn device(&self) -> String {
        self.backend.to_string()
    }

    fn check_memory(&self, op: &OperatorSpec, nrhs: usize) -> Result<()> {
        match &op.stokes {
            Some(spec) => crate::stokes::check_memory(spec),
            None => check_memory(&op.mesh, &op.solver, nrhs, &self.backend),
        }
    }

    fn cache_file(&self, op: &OperatorSpec) -> Option<PathBuf> {
        crate::psc::operator_cache_file(&op.mesh, &op.solver)
    }

    fn set_up_wide(&self, op: &OperatorSpec, threads: usize) -> Result<Box<dyn BatchOperator>> {
        // CPU only: a CUDA set-up keeps the thread it was made on.
        if op.stokes.is_some() || !matches!(self.backend, Backend::Cpu { .. }) {
            return self.set_up(op);
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| {
                Error::Backend(format!("a pool of {threads} threads for the set-up: {e}"))
            })?;
        let operator =
            pool.install(|| AnyPoissonSystem::new(&self.backend, &op.mesh, &op.solver))?;
        Ok(Box::new(operator))
    }

    fn set_up(&self, op: &OperatorSpec) -> Result<Box<dyn BatchOperator>> {
        if let Some(spec) = &op.stokes {
            return super::stokes::operator(&self.backend, spec);
        }
        Ok(Box::new(AnyPoissonSystem::new(
            &self.backend,
            &op.mesh,
            &op.solver,
        )?))
    }
}
