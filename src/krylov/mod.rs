//! Krylov methods, backend-free: they see operators only through closures.

mod lanczos;

pub use lanczos::{extreme_eigenvalues, LanczosInfo, LanczosParams};
