//! What a campaign needs from the operators it solves with. The campaign only schedules,
//! checkpoints and writes; `run` builds the operators (mesh, assembly, solver set-up on
//! this rank's device) and hands them over through these traits.

use std::path::PathBuf;

use super::input::InputColumns;
use super::plan::ColumnSource;
use crate::config::OperatorSpec;
use crate::error::Result;
use crate::fem::ColumnReport;
use crate::linalg::BlockOutcome;

/// The error norms a campaign of Poisson operators records per column (the relative L2
/// error against the exact solution first), and those of a Stokes study.
pub const POISSON_ERRORS: [&str; 3] = ["relative_l2_error", "l2_error", "nodal_l2_error"];
pub const STOKES_ERRORS: [&str; 2] = ["velocity_l2_error", "pressure_l2_error"];

/// The verification of a block, per column: what `campaign.h5` keeps as `/columns/<name>`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checks {
    /// ‖b − A x‖₂ / ‖b‖₂ in f64.
    pub relative_residual: Vec<f64>,
    /// The relative residual each column had to reach (`linalg::Tolerance::relative`): a
    /// column above it failed.
    pub tolerance: Vec<f64>,
    /// Error norms against the exact solution (NaN where none is known), by name: one of
    /// [`POISSON_ERRORS`] or [`STOKES_ERRORS`], in that order.
    pub errors: Vec<(&'static str, Vec<f64>)>,
}

impl Checks {
    /// The checks of Poisson columns, each against its tolerance.
    pub fn poisson(reports: &[ColumnReport], tolerance: Vec<f64>) -> Checks {
        let get = |f: fn(&ColumnReport) -> f64| reports.iter().map(f).collect();
        Checks {
            relative_residual: get(|r| r.relative_residual),
            tolerance,
            errors: vec![
                (POISSON_ERRORS[0], get(|r| r.relative_l2_error)),
                (POISSON_ERRORS[1], get(|r| r.l2_error)),
                (POISSON_ERRORS[2], get(|r| r.nodal_l2_error)),
            ],
        }
    }

    pub fn columns(&self) -> usize {
        self.relative_residual.len()
    }

    /// Appends the columns of `more` (the same names).
    pub fn extend(&mut self, more: Checks) {
        if self.errors.is_empty() {
            self.errors = more.errors.iter().map(|(n, _)| (*n, Vec::new())).collect();
        }
        self.relative_residual.extend(more.relative_residual);
        self.tolerance.extend(more.tolerance);
        for ((name, values), (more_name, more_values)) in self.errors.iter_mut().zip(more.errors) {
            debug_assert_eq!(*name, more_name);
            values.extend(more_values);
        }
    }

    /// Whether column c met its tolerance (a NaN residual does not).
    pub fn passed(&self, c: usize) -> bool {
        self.relative_residual[c] <= self.tolerance[c]
    }

    /// The columns that missed their tolerance, in order.
    pub fn failed(&self) -> Vec<usize> {
        (0..self.columns()).filter(|&c| !self.passed(c)).collect()
    }

    /// "column 3: relative residual 2.1e-4 above its tolerance 1e-12", for the columns
    /// `failed` (at most `shown` of them listed) whose positions in the campaign or run
    /// start at `first`.
    pub fn describe_failures(&self, failed: &[usize], first: usize, shown: usize) -> String {
        let mut text: Vec<String> = failed
            .iter()
            .take(shown)
            .map(|&c| {
                format!(
                    "column {}: relative residual {:.3e} above its tolerance {:.1e}",
                    first + c,
                    self.relative_residual[c],
                    self.tolerance[c]
                )
            })
            .collect();
        if failed.len() > shown {
            text.push(format!("{} more", failed.len() - shown));
        }
        text.join("; ")
    }

    /// The largest residual.
    pub fn max_residual(&self) -> f64 {
        self.relative_residual.iter().copied().fold(0.0, f64::max)
    }

    /// The largest finite value of the error `name`, if any column has one.
    pub fn max_error(&self, name: &str) -> Option<f64> {
        self.errors
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.iter().copied().filter(|e| e.is_finite()).reduce(f64::max))
    }
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
    /// [`Operators::set_up`] on `threads` threads, more than the rank's own: the cores of
    /// ranks that wait for this set-up. Where that cannot be done, on the rank's own.
    fn set_up_wide(&self, op: &OperatorSpec, threads: usize) -> Result<Box<dyn BatchOperator>> {
        let _ = threads;
        self.set_up(op)
    }
}

/// A batch's right-hand sides, with the boundary values its nodal solutions take.
pub struct BatchRhs {
    /// Column-major, unknowns × columns.
    pub b: Vec<f64>,
    /// g_D at every node, nodes × columns (None: zero).
    pub dirichlet: Option<Vec<f64>>,
}

/// A mesh with its assembled system and its solver, set up once and applied to any number
/// of blocks of right-hand sides.
pub trait BatchOperator {
    fn unknowns(&self) -> usize;
    /// The right-hand sides of a batch's columns: manufactured ones from their exact
    /// solutions, file ones read from `input`.
    fn rhs(&self, columns: &[ColumnSource], input: Option<&InputColumns>) -> Result<BatchRhs>;
    /// Solves the column-major block `rhs` (unknowns × nrhs).
    fn solve(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome>;
    /// Solutions on the unknowns, column-major, to nodal values (boundary values included).
    fn to_nodal(&self, u: &[f64], rhs: &BatchRhs) -> Vec<f64>;
    /// The f64 residual and, where the exact solution is known, the errors of every
    /// column (`nodal`: its nodal solutions); a column that is not finite is an error.
    fn verify(
        &mut self,
        rhs: &BatchRhs,
        u: &[f64],
        nodal: &[f64],
        columns: &[ColumnSource],
    ) -> Result<Checks>;
}
