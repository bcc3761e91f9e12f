//! What a campaign needs from the operators it solves with. The campaign only schedules,
//! checkpoints and writes; `run` builds the operators (mesh, assembly, solver set-up on
//! this rank's device) and hands them over through these traits.

use std::path::PathBuf;

use crate::config::OperatorSpec;
use crate::error::Result;
use crate::fem::{ColumnReport, Exact};

/// The solve of one block of right-hand sides.
pub struct BlockOutcome {
    /// The solutions, column-major (unknowns × nrhs).
    pub u: Vec<f64>,
    /// Refinement steps (PSC-IR) or V-cycles (multigrid) of the slowest column, when the
    /// method iterates.
    pub iterations: Option<usize>,
    /// Floating-point operations counted (PSC only: GEMMs 2mnk, sparse products 2 nnz).
    pub flops: Option<f64>,
}

/// Builds the operators of a campaign on this rank's device.
pub trait Operators: Sync {
    /// The device this rank solves on, as logged and recorded in the performance log.
    fn device(&self) -> String;
    /// Refuses an operator with batches of `nrhs` columns that this machine cannot hold.
    fn check_memory(&self, op: &OperatorSpec, nrhs: usize) -> Result<()>;
    /// The cache file the operator's set-up is read from and written to, if any (ranks
    /// that need the same file take turns).
    fn cache_file(&self, op: &OperatorSpec) -> Option<PathBuf>;
    /// Builds the mesh, assembles the system and sets up the solver.
    fn set_up(&self, op: &OperatorSpec) -> Result<Box<dyn BatchOperator>>;
}

/// A mesh with its assembled system and its solver, set up once and applied to any number
/// of blocks of right-hand sides.
pub trait BatchOperator {
    fn unknowns(&self) -> usize;
    /// Load vectors of the exact solutions' f, column-major (unknowns × len).
    fn loads(&self, exact: &[Exact]) -> Vec<f64>;
    /// Solves the column-major block `rhs` (unknowns × nrhs).
    fn solve(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome>;
    /// The f64 residual and, where known, the L2 errors of every column.
    fn verify(&self, rhs: &[f64], u: &[f64], exact: &[Option<Exact>]) -> Result<Vec<ColumnReport>>;
    /// Solutions on the unknowns, column-major, to nodal values (boundary included).
    fn to_nodal(&self, u: &[f64]) -> Vec<f64>;
}
