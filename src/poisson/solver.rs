//! A Poisson problem set up once and solved many times: the mesh, its stiffness matrix,
//! the configured solver (its own `set_up`, [`super::set_up`]), and the tolerance
//! contract every column must meet, checked by an f64 residual independent of the solver.

use std::time::Instant;

use rayon::prelude::*;

use super::set_up::{set_up_psc, set_up_solver};
use crate::config::{Method, SolverSpec};
use crate::device::Backend;
use crate::error::Result;
use crate::fem::{
    assemble_stiffness, relative_residuals, verify, ColumnReport, Dofs, Exact, ModeBasis,
};
use crate::linalg::{magnitude, BlockOutcome, BlockSolver, Scope, TimedStage, Tolerance};
use crate::mesh::{Mesh, MeshSpec};
use crate::sparse::Csr;

/// What `f` returns, with the seconds it took.
fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let t = Instant::now();
    let value = f()?;
    Ok((value, t.elapsed().as_secs_f64()))
}

/// A mesh with its assembled stiffness matrix and the configured solver on a rank's
/// backend, set up once and applied to any number of blocks of right-hand sides; every
/// solved column is checked against the tolerance contract (docs/mathematics.md §6).
pub struct PoissonSolver<const DIM: usize> {
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

impl<const DIM: usize> PoissonSolver<DIM> {
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
        Ok(PoissonSolver {
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
    /// with the check's residual. What the check found is kept for [`PoissonSolver::verify`].
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

    /// [`PoissonSolver::solve`]'s solve: as given where every column has an ordinary magnitude,
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

    /// Times the stages of the solver's later solves, or stops ([`BlockSolver::time_stages`]).
    pub fn time_stages(&mut self, on: bool) {
        self.solver.time_stages(on);
    }

    /// The solver's stages since the last call ([`BlockSolver::take_stages`]): the
    /// verification and magnitude handling around them are in none.
    pub fn take_stages(&mut self) -> Result<Vec<TimedStage>> {
        self.solver.take_stages()
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

/// Values hashed as one piece by [`Checked::hash`] (1 MiB).
const HASH_PIECE: usize = 1 << 17;

/// The verification's residuals of a solve, with hashes of the blocks they belong to.
struct Checked {
    rhs: u64,
    u: u64,
    residuals: Vec<f64>,
}

impl Checked {
    /// The hash of the hashes of `v`'s pieces of `HASH_PIECE` values, the pieces hashed in
    /// parallel (a block of 1024 columns at h = 1/512 is 2 GB: four such hashes per batch
    /// took longer than the device's solve on one thread).
    fn hash(v: &[f64]) -> u64 {
        let pieces: Vec<u64> = v
            .par_chunks(HASH_PIECE)
            .map(|piece| xxhash_rust::xxh3::xxh3_64(bytemuck::cast_slice(piece)))
            .collect();
        xxhash_rust::xxh3::xxh3_64(bytemuck::cast_slice(&pieces))
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
