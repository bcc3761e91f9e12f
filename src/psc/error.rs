//! Why a PSC solve failed, with the record of its refinement.

use std::fmt;

use crate::error::{Error, SolveRecord, SolverError};
use crate::linalg::RefineInfo;
use crate::precision::Precision;

use super::PscMethod;

/// How a PSC solve failed.
#[derive(Clone, Debug, PartialEq)]
pub enum PscFailure {
    /// The method's solution of a column is not finite (an overflow in a low precision).
    NotFinite {
        method: PscMethod,
        precision: Precision,
        column: usize,
    },
    /// M3's CG did not reach its tolerance.
    CgNotConverged {
        precision: Precision,
        rtol: f64,
        max_iterations: usize,
    },
    /// PSC-IR's residual became NaN or infinite.
    Diverged { residual: f64, iterations: usize },
    /// PSC-IR did not reach ‖b − Ax‖₂ ≤ max(rtol·‖b‖₂, atol).
    NotConverged {
        rtol: f64,
        atol: f64,
        max_iterations: usize,
    },
    /// A device or input failure.
    Other(String),
}

/// A failed PSC solve: why, and what PSC-IR did (empty for a method alone).
#[derive(Clone, Debug, PartialEq)]
pub struct PscError {
    pub failure: PscFailure,
    /// Boxed: the record is large and errors travel by value.
    pub info: Box<RefineInfo>,
}

impl PscError {
    pub(super) fn not_finite(method: PscMethod, precision: Precision, column: usize) -> Self {
        PscError {
            failure: PscFailure::NotFinite {
                method,
                precision,
                column,
            },
            info: Box::default(),
        }
    }

    pub(super) fn cg_not_converged(precision: Precision, rtol: f64, max_iterations: usize) -> Self {
        PscError {
            failure: PscFailure::CgNotConverged {
                precision,
                rtol,
                max_iterations,
            },
            info: Box::default(),
        }
    }

    pub(super) fn other(what: String) -> Self {
        PscError {
            failure: PscFailure::Other(what),
            info: Box::default(),
        }
    }

    /// The worst relative residual after each step.
    fn history(&self) -> Vec<f64> {
        let info = &self.info;
        (0..info.recorded())
            .map(|s| {
                info.step(s)
                    .iter()
                    .zip(&info.b_norms)
                    .map(|(r, b)| if *b > 0.0 { r / b } else { *r })
                    .fold(0.0, f64::max)
            })
            .collect()
    }
}

impl fmt::Display for PscError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            PscFailure::NotFinite {
                method,
                precision,
                column,
            } => write!(
                f,
                "{method} in {precision}: the solution of right-hand side {column} is not finite (overflow in {precision} arithmetic)"
            ),
            PscFailure::CgNotConverged {
                precision,
                rtol,
                max_iterations,
            } => write!(
                f,
                "PSC-M3 in {precision}: CG did not reach ‖r‖₂ ≤ {rtol:.1e}·‖r₀‖₂ on the C/E system in {max_iterations} iterations (use refine = true, a larger solver.cg_rtol, or f64)"
            ),
            PscFailure::Diverged {
                residual,
                iterations,
            } => write!(
                f,
                "PSC-IR diverged: residual {residual} after {iterations} iterations"
            ),
            PscFailure::NotConverged {
                rtol,
                atol,
                max_iterations,
            } => write!(
                f,
                "PSC-IR did not reach ‖b − Ax‖₂ ≤ max(rtol·‖b‖₂, atol) with rtol = {rtol:.1e}, atol = {atol:.1e} in {max_iterations} iterations (history {:?})",
                self.history()
            ),
            PscFailure::Other(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for PscError {}

impl SolverError for PscError {
    fn record(&self) -> SolveRecord {
        SolveRecord {
            solver: "psc".into(),
            iterations: self.info.iterations.clone(),
            residual_history: self.history(),
        }
    }

    fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        self
    }
}

impl From<PscError> for Error {
    fn from(e: PscError) -> Self {
        Error::Solve(Box::new(e))
    }
}

impl From<Error> for PscError {
    fn from(e: Error) -> Self {
        match e.solver_error::<PscError>() {
            Some(p) => p.clone(),
            None => PscError::other(e.to_string()),
        }
    }
}
