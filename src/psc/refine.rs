//! PSC-IR (docs/mathematics.md §3, item 5; the loop and its scaling as in §4): a
//! low-precision PSC solve (M1, M2 or M3) as the inner solver of f64 iterative refinement
//! on the nodal system (the refinement of `linalg`, with the f64 stiffness matrix on the
//! device), column by column scaled:
//!
//!   r = b − A x (f64);  while ‖r‖₂/‖b‖₂ > tol: α = ‖r‖₂, c = PSC(r/α), x += α c, r −= α A c.

use super::error::{PscError, PscFailure};
use super::PscOperator;
use crate::device::{Block, CsrMatrix, Layout, PscDevice};
use crate::error::Result;
use crate::linalg::{
    RefineFailure, RefineInfo, RefineParams as Refine, Refinement, RefinementClock, TimedStage,
};
use crate::precision::Precision;
use crate::sparse::Csr;

#[derive(Clone, Copy, Debug)]
pub struct PscIrParams {
    /// Stop a column when ‖b − Ax‖₂ ≤ max(rtol·‖b‖₂, atol).
    pub rtol: f64,
    pub atol: f64,
    pub max_iterations: usize,
}

impl Default for PscIrParams {
    fn default() -> Self {
        PscIrParams {
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

    /// Times the refinement's own stages between the applies ([`Refinement::time_stages`]).
    pub fn time_stages(&mut self, on: bool) {
        self.refinement.time_stages(on);
    }

    /// The stage clock, to hand over to a PSC-IR of another width ([`Refinement::take_clock`]).
    pub fn take_clock(&mut self) -> RefinementClock<D> {
        self.refinement.take_clock()
    }

    /// Times on with a handed-over clock ([`Refinement::resume_clock`]).
    pub fn resume_clock(&mut self, clock: RefinementClock<D>) {
        self.refinement.resume_clock(clock);
    }

    /// The refinement's stages since the last call ([`Refinement::take_stages`]).
    pub fn take_stages(&mut self) -> Result<Vec<TimedStage>> {
        self.refinement.take_stages()
    }

    /// Solves A X = B for column-major f64 blocks on the device; X holds the initial guess
    /// on entry (zeros are fine). Allocates nothing.
    pub fn solve_blocks(
        &mut self,
        b: &Block<D>,
        x: &mut Block<D>,
        params: PscIrParams,
    ) -> std::result::Result<&RefineInfo, PscError> {
        self.solve_blocks_from(b, x, params, false)
    }

    /// [`PscIr::solve_blocks`] from X = 0, whatever X holds on entry: the first residual is
    /// B itself ([`Refinement::solve_from_zero`]).
    pub fn solve_blocks_from_zero(
        &mut self,
        b: &Block<D>,
        x: &mut Block<D>,
        params: PscIrParams,
    ) -> std::result::Result<&RefineInfo, PscError> {
        self.solve_blocks_from(b, x, params, true)
    }

    fn solve_blocks_from(
        &mut self,
        b: &Block<D>,
        x: &mut Block<D>,
        params: PscIrParams,
        from_zero: bool,
    ) -> std::result::Result<&RefineInfo, PscError> {
        let precision = self.operator().precision();
        let refine = Refine {
            rtol: params.rtol,
            atol: params.atol,
            max_iterations: params.max_iterations,
            residual_scaling: true,
        };
        let solved = if from_zero {
            self.refinement
                .solve_from_zero(&self.stiffness, b, x, refine)
        } else {
            self.refinement.solve(&self.stiffness, b, x, refine)
        };
        solved.map_err(|e| {
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
        params: PscIrParams,
    ) -> std::result::Result<RefineInfo, PscError> {
        let (info, solution) = self.solve_host(b, Some(x), params)?;
        x.copy_from_slice(&solution);
        Ok(info)
    }

    /// Solves A X = B for a column-major host block B (N × nrhs) from X = 0, and returns
    /// X. The zeros are written on the device by the refinement: fresh zeroed host memory
    /// read before it is written costs two page faults per page (a zero-page mapping, then
    /// a copy on write).
    pub fn solve_from_zero(
        &mut self,
        b: &[f64],
        params: PscIrParams,
    ) -> std::result::Result<(RefineInfo, Vec<f64>), PscError> {
        self.solve_host(b, None, params)
    }

    /// [`PscIr::solve_blocks`] on host blocks, from `x0` (zeros when None).
    fn solve_host(
        &mut self,
        b: &[f64],
        x0: Option<&[f64]>,
        params: PscIrParams,
    ) -> std::result::Result<(RefineInfo, Vec<f64>), PscError> {
        let (n, k) = (self.operator().num_unknowns(), self.nrhs());
        let x_len = x0.map_or(n * k, <[f64]>::len);
        if b.len() != n * k || x_len != n * k {
            return Err(PscError::other(format!(
                "PSC-IR: blocks of {} and {x_len} values for {n} unknowns × {k} right-hand sides",
                b.len(),
            )));
        }
        if self.host.is_none() {
            let block = || Block::zeros(&self.dev, n, k, Precision::F64, Layout::ColMajor);
            self.host = Some((block()?, block()?));
        }
        let (mut bb, mut xb) = self.host.take().expect("just set");
        let solved = bb
            .data
            .write_f64(&self.dev, b)
            .and_then(|()| match x0 {
                Some(x) => xb.data.write_f64(&self.dev, x),
                None => Ok(()),
            })
            .map_err(PscError::from)
            .and_then(|()| match x0 {
                Some(_) => self.solve_blocks(&bb, &mut xb, params).cloned(),
                None => self.solve_blocks_from_zero(&bb, &mut xb, params).cloned(),
            })
            .and_then(|info| Ok((info, xb.to_f64(&self.dev)?)));
        self.host = Some((bb, xb));
        solved
    }
}

/// The largest relative residual after the last step.
fn worst(info: &RefineInfo) -> f64 {
    (0..info.nrhs())
        .map(|c| info.relative_residual(c))
        .fold(0.0, f64::max)
}
