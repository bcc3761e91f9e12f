//! One error type for the whole crate. User mistakes (config, input files, impossible sizes,
//! missing devices) are messages that name the problem; `main` prints them without a
//! backtrace and exits non-zero.
//!
//! Each solver has its own error type carrying what the solver did before it failed (its
//! Info: iterations, residual history); [`Error::Solve`] wraps it as a [`SolverError`],
//! so this module depends on no solver.

use std::path::PathBuf;

use crate::precision::{Precision, RangeProblem};

/// One problem found in a config: the key it is about and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigProblem {
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

fn list_problems(problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(|p| format!("\n  - {p}"))
        .collect::<String>()
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("config {path}: {count} problem(s):{list}", count = problems.len(), list = list_problems(problems))]
    Config {
        path: String,
        problems: Vec<ConfigProblem>,
    },

    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("cannot write {path}: {}", crate::sys::explain_io(.source, .path))]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("HDF5 file {path}: {message}")]
    Hdf5 { path: PathBuf, message: String },

    #[error("invalid input: {0}")]
    InvalidInput(String),

    #[error("{what}: entry {index} cannot be stored in {precision}: {problem}")]
    PrecisionRange {
        what: String,
        precision: Precision,
        index: usize,
        problem: RangeProblem,
    },

    /// A solver failed; its own error says why and what it did.
    #[error("{0}")]
    Solve(Box<dyn SolverError>),

    #[error("backend: {0}")]
    Backend(String),

    #[error("linear solver: {0}")]
    Solver(String),

    #[error("MPI: {0}")]
    Mpi(String),

    #[error("campaign: {0}")]
    Campaign(String),

    /// Solutions were computed but some column's verified residual missed its tolerance.
    #[error("verification: {0}")]
    Verification(String),

    /// Another rank (rank 0) found the problem and reports it; this rank only exits.
    #[error("stopped by rank 0: {message}")]
    Elsewhere { message: String, exit_code: u8 },
}

impl Error {
    /// Exit code for `main`: 2 for mistakes in what the user gave us, 1 for failures at run time.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config { .. } | Error::InvalidInput(_) => 2,
            Error::Elsewhere { exit_code, .. } => *exit_code,
            _ => 1,
        }
    }
}

impl Error {
    /// The solver's own error inside [`Error::Solve`], when it is an `E`.
    pub fn solver_error<E: SolverError>(&self) -> Option<&E> {
        match self {
            Error::Solve(e) => e.as_error().downcast_ref::<E>(),
            _ => None,
        }
    }

    /// What the failing solver did, when a solver failed.
    pub fn record(&self) -> Option<SolveRecord> {
        match self {
            Error::Solve(e) => Some(e.record()),
            _ => None,
        }
    }
}

/// A solver's own error type.
pub trait SolverError: std::error::Error + Send + Sync + 'static {
    /// What the solver did before failing, for logs and the campaign's failure record.
    fn record(&self) -> SolveRecord;
    fn as_error(&self) -> &(dyn std::error::Error + 'static);
}

/// What a failed solve did, in a form every solver can fill.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SolveRecord {
    pub solver: String,
    /// Iterations (steps, cycles) of each column.
    pub iterations: Vec<usize>,
    /// Residual norms after each iteration (the worst column, or the only one).
    pub residual_history: Vec<f64>,
}

impl std::fmt::Display for SolveRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: iterations per column {:?}, residual history {:?}",
            self.solver, self.iterations, self.residual_history
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
