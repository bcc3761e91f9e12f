//! Geometric multigrid for Q1 Poisson on the unit square and cube, with a precision per
//! level, inside f64 iterative refinement (MP-MG, SPEC §3), and the f64 baseline.
//!
//! - [`schedule`]: precision schedules (D_MG, H_MG, DSH_MG, HSD_MG presets), smoothers,
//!   level counts
//! - [`Multigrid`]: set-up (levels by uniform coarsening, matrices rediscretised and stored
//!   in ELLPACK in their level's precision, on any device), the V-cycle ([`VCycle`], a
//!   `LinOp`), refinement (`linalg`'s, around the cycle) and stand-alone solves
//! - [`MgInfo`], [`MgError`]: what a solve did, and why it failed
//!
//! Coarse operators are rediscretised. For Q1 on nested uniform meshes with the bilinear
//! (trilinear) interpolation as prolongation this *is* the Galerkin operator PᵀAP (the
//! coarse space is a subspace of the fine one), so there is nothing to choose between
//! them; `tests/mg.rs` checks the identity.
//!
//! Precision changes happen inside restriction and prolongation (read in one precision,
//! written in the other). f16 levels store f16 and compute in f32 on the CPU.

mod error;
mod level;
mod multigrid;
pub mod schedule;

pub use error::{MgError, MgFailure, MgInfo, Remedy};
pub use multigrid::{
    assemble_level, random_initial_guess, MgParams, Multigrid, StopParams, VCycle,
};
pub use schedule::{check_levels, default_levels, schedule_name, Smoother, Variant};
