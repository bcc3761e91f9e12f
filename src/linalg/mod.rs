//! Linear algebra over any device: the operator interface ([`LinOp`]), the solver
//! interface the driver uses ([`BlockSolver`]: set up once, solve blocks of right-hand
//! sides many times, in chunks where the device is too small), one iterative refinement
//! shared by PSC-IR and mixed-precision multigrid, the V-cycle every multigrid runs, block
//! CG, FGMRES; and, on the host, the `cholesky` method's sparse Cholesky
//! ([`SparseCholesky`]), Lanczos for the set-up's condition numbers and the in-place dense
//! SPD inverse.

mod cg;
mod cholesky;
mod cycle;
mod dense;
mod fgmres;
mod lanczos;
mod linop;
pub mod magnitude;
mod refine;
mod solver;

pub use cg::{BlockCg, CgInfo, CgParams};
pub use cholesky::SparseCholesky;
pub use cycle::{v_cycle, CycleLevels};
pub use dense::{
    mirror_lower, spd_inverse_in_place, spd_inverse_in_place_reporting, NotPositiveDefinite,
};
pub use fgmres::{fgmres, FgmresError, FgmresFailure, FgmresInfo, FgmresParams, FgmresWorkspace};
pub use lanczos::{extreme_eigenvalues, LanczosInfo, LanczosParams};
pub use linop::{block_of, BlockKind, Cost, LinOp, Staged};
pub use solver::{
    solve_in_chunks, BlockOutcome, BlockSolver, ColumnPlan, Footprint, Scope, TimedStage,
};
/// The stopping rule every iterative method shares (config keys solver.rtol, solver.atol):
/// a column is done when ‖b − Ax‖₂ ≤ max(atol, rtol·‖b‖₂). Returns that threshold.
pub fn stopping_threshold(rtol: f64, atol: f64, b_norm: f64) -> f64 {
    atol.max(rtol * b_norm)
}

/// The tolerance a column's verified f64 residual must meet (docs/mathematics.md §6): the
/// stopping rule of an iterative method, the accuracy check of a direct one. A column that
/// misses it is a failure, never a result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Tolerance {
    /// The relative residual ‖b − Ax‖₂/‖b‖₂ a column with ‖b‖₂ = `b_norm` must reach:
    /// max(rtol, atol/‖b‖₂) (for b = 0, where the residual is reported absolute: atol).
    pub fn relative(&self, b_norm: f64) -> f64 {
        if b_norm > 0.0 {
            self.rtol.max(self.atol / b_norm)
        } else {
            self.atol
        }
    }

    /// Whether the absolute part decides for a column with ‖b‖₂ = `b_norm`.
    pub fn absolute_decides(&self, b_norm: f64) -> bool {
        self.atol > self.rtol * b_norm
    }
}

pub use refine::{
    RefineError, RefineFailure, RefineInfo, RefineParams, Refinement, RefinementClock, Residual,
    NARROW_SHARE,
};
