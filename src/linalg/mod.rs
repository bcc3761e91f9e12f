//! Linear algebra over any device: the operator interface ([`LinOp`]), one iterative
//! refinement shared by PSC-IR and mixed-precision multigrid, block CG, FGMRES; and, on the
//! host, Lanczos for the set-up's condition numbers and the in-place dense SPD inverse.

mod cg;
mod dense;
mod fgmres;
mod lanczos;
mod linop;
mod refine;

pub use cg::{BlockCg, CgInfo, CgParams};
pub use dense::{mirror_lower, spd_inverse_in_place, NotPositiveDefinite};
pub use fgmres::{fgmres, FgmresError, FgmresFailure, FgmresInfo, FgmresParams, FgmresWorkspace};
pub use lanczos::{extreme_eigenvalues, LanczosInfo, LanczosParams};
pub use linop::{block_of, BlockKind, Cost, LinOp, Staged};
/// The stopping rule every iterative method shares (config keys solver.rtol, solver.atol):
/// a column is done when ‖b − Ax‖₂ ≤ max(atol, rtol·‖b‖₂). Returns that threshold.
pub fn stopping_threshold(rtol: f64, atol: f64, b_norm: f64) -> f64 {
    atol.max(rtol * b_norm)
}

pub use refine::{RefineError, RefineFailure, RefineInfo, RefineParams, Refinement, Residual};
