//! Krylov methods, backend-free: they see operators only through closures.

mod fgmres;
mod lanczos;

pub use fgmres::{fgmres, FgmresInfo, FgmresParams, FgmresWorkspace};
pub use lanczos::{extreme_eigenvalues, LanczosInfo, LanczosParams};
