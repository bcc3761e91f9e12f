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
    },
    /// A column did not reach the tolerance in the allowed iterations.
    NotConverged {
        column: usize,
        residual: f64,
        tolerance: f64,
        max_iterations: usize,
    },
    /// The f64 residual of the refinement is not finite.
    NotFinite,
    /// Blocks or settings that do not fit the hierarchy.
    InvalidInput(String),
    /// A device failure.
    Other(String),
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
            } => write!(
                f,
                "multigrid level {level} of {levels} (0 = coarsest; {precision}, {unknowns} unknowns): {what}"
            ),
            MgFailure::NotConverged {
                column,
                residual,
                tolerance,
                max_iterations,
            } => write!(
                f,
                "multigrid did not reach ‖r‖₂ ≤ {tolerance:e} in {max_iterations} iterations (right-hand side {column}: ‖r‖₂ = {residual:e})"
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
