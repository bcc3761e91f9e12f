//! What a multigrid solve reports: its Info, and its error (with the Info of what it did).

use std::fmt;

use crate::error::{Error, SolveRecord, SolverError};
use crate::precision::Precision;

/// What a solve did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MgInfo {
    /// Refinement steps (V-cycles) each column needed.
    pub iterations: Vec<usize>,
    /// ‖r‖₂ of every column before each step and at the end (the refinement's recursively
    /// updated residual; the stand-alone cycle's true residual).
    pub history: Vec<Vec<f64>>,
    /// Bytes the kernels moved (stored matrices and vectors, each read or written once per
    /// kernel).
    pub bytes: f64,
}

impl MgInfo {
    pub fn max_iterations(&self) -> usize {
        self.iterations.iter().copied().max().unwrap_or(0)
    }
}

/// How a multigrid solve failed.
#[derive(Clone, Debug, PartialEq)]
pub enum MgFailure {
    /// A value left the range of a level's precision (overflow, NaN/Inf, or a nonzero
    /// column flushed to zero).
    Range {
        level: usize,
        levels: usize,
        precision: Precision,
        unknowns: usize,
        what: String,
        remedy: Remedy,
    },
    /// A column did not reach ‖r‖₂ ≤ `target` = max(rtol·‖b‖₂, atol) in the allowed
    /// iterations.
    NotConverged {
        column: usize,
        residual: f64,
        target: f64,
        max_iterations: usize,
    },
    /// The f64 residual of the refinement is not finite.
    NotFinite,
    /// Blocks or settings that do not fit the hierarchy.
    InvalidInput(String),
    /// A device failure.
    Other(String),
}

/// What a user can do about a value out of a level's range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Remedy {
    /// Nothing at solve time (a matrix entry that does not fit).
    None,
    /// A residual or iterate out of range: residual scaling (when `scaling_on` is known to be
    /// off) or a wider precision on the level.
    Scaling { scaling_on: Option<bool> },
}

impl Remedy {
    fn advice(self, precision: Precision) -> &'static str {
        match self {
            _ if precision == Precision::F64 => "",
            Remedy::None => "",
            Remedy::Scaling { scaling_on: None } => {
                "; turn on solver.residual_scaling if it is off, or use a wider precision on this level (solver.schedule)"
            }
            Remedy::Scaling { scaling_on: Some(false) } => {
                "; set solver.residual_scaling = true (each column's residual is scaled to magnitude ≤ 1 before it enters a low precision), or use a wider precision on this level (solver.schedule)"
            }
            Remedy::Scaling { scaling_on: Some(true) } => {
                "; residual scaling is already on, so the values on this level leave the range by themselves: use a wider precision on this level (solver.schedule, or a variant such as DSH_MG that keeps the finest levels wider)"
            }
        }
    }
}

/// A failed multigrid solve: why, and what it did.
#[derive(Clone, Debug, PartialEq)]
pub struct MgError {
    pub failure: MgFailure,
    pub info: MgInfo,
}

impl MgError {
    pub fn new(failure: MgFailure) -> Self {
        MgError {
            failure,
            info: MgInfo::default(),
        }
    }

    /// The error of a solve that ran with residual scaling `on` (its advice says so).
    pub fn with_scaling(mut self, on: bool) -> Self {
        if let MgFailure::Range {
            remedy: remedy @ Remedy::Scaling { .. },
            ..
        } = &mut self.failure
        {
            *remedy = Remedy::Scaling {
                scaling_on: Some(on),
            };
        }
        self
    }
}

impl fmt::Display for MgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            MgFailure::Range {
                level,
                levels,
                precision,
                unknowns,
                what,
                remedy,
            } => write!(
                f,
                "multigrid level {level} of {levels} (0 = coarsest; {precision}, {unknowns} unknowns): {what}{}",
                remedy.advice(*precision)
            ),
            MgFailure::NotConverged {
                column,
                residual,
                target,
                max_iterations,
            } => write!(
                f,
                "multigrid did not reach ‖r‖₂ ≤ max(rtol·‖b‖₂, atol) = {target:e} in {max_iterations} iterations (right-hand side {column}: ‖r‖₂ = {residual:e})"
            ),
            MgFailure::NotFinite => {
                write!(f, "multigrid refinement: the f64 residual is not finite")
            }
            MgFailure::InvalidInput(what) | MgFailure::Other(what) => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for MgError {}

impl SolverError for MgError {
    fn record(&self) -> SolveRecord {
        SolveRecord {
            solver: "multigrid".into(),
            iterations: self.info.iterations.clone(),
            residual_history: self
                .info
                .history
                .iter()
                .map(|step| step.iter().copied().fold(0.0, f64::max))
                .collect(),
        }
    }

    fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        self
    }
}

impl From<MgError> for Error {
    fn from(e: MgError) -> Self {
        match e.failure {
            MgFailure::InvalidInput(what) => Error::InvalidInput(what),
            _ => Error::Solve(Box::new(e)),
        }
    }
}

impl From<Error> for MgError {
    /// A device or input failure met inside a solve (a multigrid error travels back as
    /// itself).
    fn from(e: Error) -> Self {
        if let Some(mg) = e.solver_error::<MgError>() {
            return mg.clone();
        }
        match e {
            Error::InvalidInput(what) => MgError::new(MgFailure::InvalidInput(what)),
            e => MgError::new(MgFailure::Other(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The advice for a value out of range follows the residual-scaling setting.
    #[test]
    fn range_advice_names_what_is_left_to_try() {
        let error = |precision| {
            MgError::new(MgFailure::Range {
                level: 3,
                levels: 4,
                precision,
                unknowns: 961,
                what: "the smoothed iterate exceeds the largest f16 value".into(),
                remedy: Remedy::Scaling { scaling_on: None },
            })
        };
        let off = error(Precision::F16).with_scaling(false).to_string();
        assert!(off.contains("set solver.residual_scaling = true"), "{off}");
        let on = error(Precision::F16).with_scaling(true).to_string();
        assert!(
            on.contains("residual scaling is already on")
                && !on.contains("set solver.residual_scaling")
                && on.contains("wider precision"),
            "{on}"
        );
        let f64 = error(Precision::F64).with_scaling(true).to_string();
        assert!(f64.ends_with("f16 value"), "{f64}");
    }
}
