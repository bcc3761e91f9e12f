//! One error type for the whole crate. User mistakes (config, input files, impossible sizes,
//! missing devices) are messages that name the problem; `main` prints them without a
//! backtrace and exits non-zero.

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

    #[error("cannot write {path}: {source}")]
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

    /// A value left the range of a multigrid level's precision (overflow, NaN/Inf, or a
    /// nonzero column flushed to zero).
    #[error("multigrid level {level} of {levels} (0 = coarsest; {precision}, {unknowns} unknowns): {what}")]
    MultigridRange {
        level: usize,
        levels: usize,
        precision: Precision,
        unknowns: usize,
        what: String,
    },

    #[error("backend: {0}")]
    Backend(String),

    #[error("linear solver: {0}")]
    Solver(String),

    #[error("MPI: {0}")]
    Mpi(String),

    #[error("campaign: {0}")]
    Campaign(String),

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

pub type Result<T, E = Error> = std::result::Result<T, E>;
