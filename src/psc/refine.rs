//! PSC-IR (SPEC §2.5 with the residual scaling of §3.2): a low-precision PSC solve (M1, M2
//! or M3) as the inner solver of f64 iterative refinement on the nodal system (the
//! refinement of `linalg`, with the f64 stiffness matrix on the device), column by column
//! scaled:
//!
//!   r = b − A x (f64);  while ‖r‖₂/‖b‖₂ > tol: α = ‖r‖₂, c = PSC(r/α), x += α c, r −= α A c.

use super::error::{PscError, PscFailure};
use super::PscOperator;
use crate::device::{Block, CsrMatrix, Layout, PscDevice};
use crate::error::Result;
use crate::linalg::{RefineFailure, RefineInfo, RefineParams as Refine, Refinement};
use crate::precision::Precision;
use crate::sparse::Csr;

#[derive(Clone, Copy, Debug)]
pub struct RefineParams {
    /// Stop a column when ‖b − Ax‖₂ ≤ max(rtol·‖b‖₂, atol).
    pub rtol: f64,
    pub atol: f64,
    pub max_iterations: usize,
}

impl Default for RefineParams {
    fn default() -> Self {
        RefineParams {
            rtol: 1e-12,
            atol: 0.0,
            max_iterations: 30,
        }
    }
}

/// A PSC method inside f64 refinement, with every buffer for blocks of `nrhs` columns.
pub struct PscIr<D: PscDevice> {
    dev: D,
    refinement: Refinement<D, PscOperator<D>>,
    stiffness: CsrMatrix<D>,
    /// Column-major f64 blocks of the slice-based API.
    host: Option<(Block<D>, Block<D>)>,
}

impl<D: PscDevice> PscIr<D> {
    /// `stiffness` is the nodal f64 stiffness matrix the residuals are computed with.
    pub fn new(
        dev: &D,
        operator: PscOperator<D>,
        stiffness: &Csr<f64>,
        nrhs: usize,
        max_iterations: usize,
    ) -> Result<Self> {
        Ok(PscIr {
            refinement: Refinement::new(dev, operator, nrhs, max_iterations)?,
            stiffness: CsrMatrix::upload(dev, stiffness)?,
            host: None,
            dev: dev.clone(),
        })
    }

    /// The PSC operator, given back.
    pub fn into_operator(self) -> PscOperator<D> {
        self.refinement.into_inner()
    }

    pub fn operator(&self) -> &PscOperator<D> {
        self.refinement.inner()
    }

    pub fn operator_mut(&mut self) -> &mut PscOperator<D> {
        self.refinement.inner_mut()
    }

    pub fn nrhs(&self) -> usize {
        self.refinement.nrhs()
    }

    /// Solves A X = B for column-major f64 blocks on the device; X holds the initial guess
    /// on entry (zeros are fine). Allocates nothing.
    pub fn solve_blocks(
        &mut self,
        b: &Block<D>,
        x: &mut Block<D>,
        params: RefineParams,
    ) -> std::result::Result<&RefineInfo, PscError> {
        let precision = self.operator().precision();
        let refine = Refine {
            rtol: params.rtol,
            atol: params.atol,
            max_iterations: params.max_iterations,
            residual_scaling: true,
        };
        self.refinement
            .solve(&self.stiffness, b, x, refine)
            .map_err(|e| {
                let message = e.to_string();
                let failure = match e.failure {
                    RefineFailure::Inner(inner) => match inner.solver_error::<PscError>() {
                        Some(psc) => psc.failure.clone(),
                        None => PscFailure::Other(inner.to_string()),
                    },
                    RefineFailure::NotFinite => PscFailure::Diverged {
                        residual: worst(&e.info),
                        iterations: e.info.steps(),
                    },
                    RefineFailure::NotConverged { .. } => PscFailure::NotConverged {
                        rtol: params.rtol,
                        atol: params.atol,
                        max_iterations: params.max_iterations,
                    },
                    _ => PscFailure::Other(format!("PSC-IR in {precision}: {message}")),
                };
                PscError {
                    failure,
                    info: e.info,
                }
            })
    }

    /// Solves A X = B for column-major host blocks (N × nrhs); X holds the initial guess.
    pub fn solve(
        &mut self,
        b: &[f64],
        x: &mut [f64],
        params: RefineParams,
    ) -> std::result::Result<RefineInfo, PscError> {
        let (n, k) = (self.operator().num_unknowns(), self.nrhs());
        if b.len() != n * k || x.len() != n * k {
            return Err(PscError::other(format!(
                "PSC-IR: blocks of {} and {} values for {n} unknowns × {k} right-hand sides",
                b.len(),
                x.len()
            )));
        }
        if self.host.is_none() {
            let block = || Block::zeros(&self.dev, n, k, Precision::F64, Layout::ColMajor);
            self.host = Some((block()?, block()?));
        }
        let (mut bb, mut xb) = self.host.take().expect("just set");
        bb.data.write_f64(&self.dev, b)?;
        xb.data.write_f64(&self.dev, x)?;
        let result = self.solve_blocks(&bb, &mut xb, params).cloned();
        let written = xb.to_f64(&self.dev).map(|v| x.copy_from_slice(&v));
        self.host = Some((bb, xb));
        let info = result?;
        written?;
        Ok(info)
    }
}

/// The largest relative residual after the last step.
fn worst(info: &RefineInfo) -> f64 {
    (0..info.nrhs())
        .map(|c| info.relative_residual(c))
        .fold(0.0, f64::max)
}
