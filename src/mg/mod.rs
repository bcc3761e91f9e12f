//! Geometric multigrid for Poisson, with a precision per level, inside f64 iterative
//! refinement (MP-MG, docs/mathematics.md §4), and the f64 baseline.
//!
//! - [`schedule`]: precision schedules (D_MG, H_MG, DSH_MG, HSD_MG presets), smoothers
//!   (damped Jacobi, point and block Chebyshev), level counts
//! - `blocks`: the aggregates of strongly coupled unknowns and the block-diagonal inverse
//!   B⁻¹ block Chebyshev smoothing multiplies the residual by
//! - [`Multigrid`]: set-up (the levels' matrices stored in ELLPACK in their level's
//!   precision, on any device), the V-cycle ([`VCycle`], a `LinOp`), refinement
//!   (`linalg`'s, around the cycle, optionally accelerated by flexible CG:
//!   [`Multigrid::set_krylov`]) and stand-alone solves
//! - [`hierarchy`]: the levels of a refined mesh (prolongations from its refinement
//!   hierarchy, [`Multigrid::on_mesh`], pure Neumann problems on every node)
//! - [`MultigridSolver`]: all of it set up once for a mesh and solving blocks of
//!   right-hand sides many times, as the driver uses it
//! - [`MgInfo`], [`MgError`]: what a solve did, and why it failed
//!
//! Two kinds of hierarchy. The Q1 unit square and cube with u = 0 coarsen uniformly
//! ([`Multigrid::new`]): bilinear (trilinear) grid transfers and rediscretised coarse
//! operators, which for nested uniform Q1 meshes *are* the Galerkin operators PᵀAP
//! (`tests/mg.rs` checks the identity). Every other mesh coarsens along its refinement
//! hierarchy ([`Multigrid::galerkin`]): P from the hierarchy's parents, stored as a sparse
//! matrix with its transpose, and Galerkin coarse operators.
//!
//! Precision changes happen inside restriction and prolongation (read in one precision,
//! written in the other). f16 levels store f16 and compute in f32 on the CPU.

mod blocks;
mod error;
pub mod hierarchy;
mod level;
mod multigrid;
pub mod schedule;
mod solver;

pub use error::{MgError, MgFailure, MgInfo, Remedy};
pub use hierarchy::PinnedEmbedding;
pub use level::without_roundoff;
pub use multigrid::{
    assemble_level, galerkin_product, random_initial_guess, MgParams, MgSolve, Multigrid,
    NullSpace, StopParams, VCycle,
};
pub use schedule::{
    check_levels, default_levels, schedule_name, Smoother, SmootherKind, Variant, CHEBYSHEV_RATIO,
};
pub use solver::{estimated_bytes, CycleColumns, MgSolveSettings, MultigridSolver};
