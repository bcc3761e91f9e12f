//! PSC-IR (SPEC §2.5 with the residual scaling of §3.2): the low-precision M1 solve as the
//! inner solver of f64 iterative refinement on the nodal system, column by column scaled:
//!
//!   r = b − A x (f64);  while ‖r‖₂/‖b‖₂ > tol: α = ‖r‖₂, c = M1(r/α), x += α c, r = b − A x.

use super::{M1Workspace, M1};
use crate::backend::cpu;
use crate::error::{Error, Result};
use crate::precision::{Real, Stored};
use crate::sparse::Csr;

#[derive(Clone, Copy, Debug)]
pub struct RefineParams {
    /// Stop when every column's ‖b − Ax‖₂ / ‖b‖₂ is at most this.
    pub relative_tolerance: f64,
    pub max_iterations: usize,
}

impl Default for RefineParams {
    fn default() -> Self {
        RefineParams {
            relative_tolerance: 1e-12,
            max_iterations: 30,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RefineInfo {
    pub iterations: usize,
    /// Final ‖b − Ax‖₂ / ‖b‖₂ per column.
    pub relative_residuals: Vec<f64>,
    /// Largest relative residual over the columns after each iteration (0: the start).
    pub history: Vec<f64>,
}

/// Buffers for refinement on blocks of `nrhs` columns.
pub struct RefineWorkspace<S: Stored> {
    inner: M1Workspace<S>,
    residual: Vec<f64>,
    low_rhs: Vec<S::Compute>,
    low_correction: Vec<S::Compute>,
}

impl<S: Stored> M1<S> {
    pub fn refine_workspace(&self, nrhs: usize) -> RefineWorkspace<S> {
        let n = self.num_unknowns() * nrhs;
        RefineWorkspace {
            inner: self.workspace(nrhs),
            residual: vec![0.0; n],
            low_rhs: vec![S::Compute::from_f64(0.0); n],
            low_correction: vec![S::Compute::from_f64(0.0); n],
        }
    }

    /// Solves A X = B in f64 accuracy, `a` the nodal stiffness matrix; X holds the initial
    /// guess on entry (zeros are fine).
    pub fn solve_refined(
        &self,
        a: &Csr<f64>,
        b: &[f64],
        x: &mut [f64],
        ws: &mut RefineWorkspace<S>,
        params: RefineParams,
    ) -> Result<RefineInfo> {
        let n = self.num_unknowns();
        let k = b.len() / n;
        assert_eq!(b.len(), x.len(), "PSC-IR: b and x differ in size");
        let b_norms: Vec<f64> = b
            .chunks(n)
            .map(|c| cpu::nrm2(c).max(f64::MIN_POSITIVE))
            .collect();
        let mut history = Vec::new();
        for iteration in 0..=params.max_iterations {
            let mut worst = 0.0f64;
            let mut alphas = vec![0.0; k];
            for c in 0..k {
                let span = c * n..(c + 1) * n;
                cpu::residual(
                    a,
                    &b[span.clone()],
                    &x[span.clone()],
                    &mut ws.residual[span.clone()],
                );
                alphas[c] = cpu::nrm2(&ws.residual[span]);
                worst = worst.max(alphas[c] / b_norms[c]);
            }
            history.push(worst);
            if !worst.is_finite() {
                return Err(Error::Solver(format!(
                    "PSC-IR diverged: residual {worst} after {iteration} iterations"
                )));
            }
            if worst <= params.relative_tolerance {
                let relative_residuals = alphas.iter().zip(&b_norms).map(|(a, b)| a / b).collect();
                return Ok(RefineInfo {
                    iterations: iteration,
                    relative_residuals,
                    history,
                });
            }
            if iteration == params.max_iterations {
                break;
            }
            for ((low, r), &alpha) in ws
                .low_rhs
                .chunks_mut(n)
                .zip(ws.residual.chunks(n))
                .zip(&alphas)
            {
                let inv = if alpha > 0.0 { 1.0 / alpha } else { 0.0 };
                low.iter_mut()
                    .zip(r)
                    .for_each(|(l, &ri)| *l = S::Compute::from_f64(ri * inv));
            }
            self.solve(&ws.low_rhs, &mut ws.low_correction, &mut ws.inner)?;
            for ((xc, correction), &alpha) in x
                .chunks_mut(n)
                .zip(ws.low_correction.chunks(n))
                .zip(&alphas)
            {
                xc.iter_mut()
                    .zip(correction)
                    .for_each(|(xi, &ci)| *xi += alpha * ci.to_f64());
            }
        }
        Err(Error::Solver(format!(
            "PSC-IR did not reach the relative residual {:.1e} in {} iterations (history {:?})",
            params.relative_tolerance, params.max_iterations, history
        )))
    }
}
