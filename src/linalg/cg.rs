//! Conjugate gradients on a block of right-hand sides: one Krylov iteration for all
//! columns, with per-column scalars (a column stops when it converges or breaks down).
//! Vectors are stored in the block's precision and combined in its compute precision; the
//! dot products are f64.

use crate::device::{Block, Layout, Scratch, VectorKernels};
use crate::error::Result;
use crate::precision::Precision;

/// When CG stops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CgParams {
    /// ‖r_c‖₂ to reach: absolute, or relative to ‖b_c‖₂ with `relative`. Never below
    /// 10·u·‖b_c‖₂ (u the unit roundoff of the block's precision: what it can attain).
    pub tolerance: f64,
    pub relative: bool,
    pub max_iterations: usize,
}

/// What a CG solve did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CgInfo {
    pub iterations: usize,
    /// Every column reached its tolerance (or broke down with p·Ap ≤ 0, which SPD
    /// operators reach only at rounding level).
    pub converged: bool,
}

/// Block CG with its vectors and per-column scalars, allocated once.
pub struct BlockCg<D: VectorKernels> {
    r: Block<D>,
    p: Block<D>,
    q: Block<D>,
    scratch: Scratch<D>,
    rr: Vec<f64>,
    rr_new: Vec<f64>,
    pq: Vec<f64>,
    alpha: Vec<f64>,
    minus_alpha: Vec<f64>,
    beta: Vec<f64>,
    ones: Vec<f64>,
    targets: Vec<f64>,
    active: Vec<bool>,
}

impl<D: VectorKernels> BlockCg<D> {
    pub fn new(
        dev: &D,
        rows: usize,
        nrhs: usize,
        precision: Precision,
        layout: Layout,
    ) -> Result<Self> {
        let block = || Block::zeros(dev, rows, nrhs, precision, layout);
        Ok(BlockCg {
            r: block()?,
            p: block()?,
            q: block()?,
            scratch: Scratch::new(dev)?,
            rr: vec![0.0; nrhs],
            rr_new: vec![0.0; nrhs],
            pq: vec![0.0; nrhs],
            alpha: vec![0.0; nrhs],
            minus_alpha: vec![0.0; nrhs],
            beta: vec![0.0; nrhs],
            ones: vec![1.0; nrhs],
            targets: vec![0.0; nrhs],
            active: vec![false; nrhs],
        })
    }

    /// Solves A x = b from x = 0; `apply(p, q)` computes q = A p.
    pub fn solve(
        &mut self,
        dev: &D,
        mut apply: impl FnMut(&Block<D>, &mut Block<D>) -> Result<()>,
        b: &Block<D>,
        x: &mut Block<D>,
        params: CgParams,
    ) -> Result<CgInfo> {
        let u = b.precision().unit_roundoff();
        dev.fill(x.view_mut(), 0.0)?;
        dev.copy(b.view(), self.r.view_mut())?;
        dev.copy(b.view(), self.p.view_mut())?;
        dev.column_dots(b, b, &mut self.rr, &mut self.scratch)?;
        for ((t, a), &bb) in self.targets.iter_mut().zip(&mut self.active).zip(&self.rr) {
            let b_norm = bb.sqrt();
            let wanted = if params.relative {
                params.tolerance * b_norm
            } else {
                params.tolerance
            };
            *t = wanted.max(10.0 * u * b_norm);
            *a = b_norm > *t;
        }
        let mut info = CgInfo::default();
        while info.iterations < params.max_iterations && self.active.iter().any(|&a| a) {
            apply(&self.p, &mut self.q)?;
            dev.column_dots(&self.p, &self.q, &mut self.pq, &mut self.scratch)?;
            for c in 0..self.active.len() {
                let pq = self.pq[c];
                self.active[c] &= pq > 0.0 && pq.is_finite();
                self.alpha[c] = if self.active[c] { self.rr[c] / pq } else { 0.0 };
                self.minus_alpha[c] = -self.alpha[c];
            }
            dev.column_axpby(&self.alpha, &self.p, &self.ones, x)?;
            dev.column_axpby(&self.minus_alpha, &self.q, &self.ones, &mut self.r)?;
            dev.column_dots(&self.r, &self.r, &mut self.rr_new, &mut self.scratch)?;
            for c in 0..self.active.len() {
                self.beta[c] = if self.active[c] {
                    self.rr_new[c] / self.rr[c]
                } else {
                    0.0
                };
            }
            dev.column_axpby(&self.ones, &self.r, &self.beta, &mut self.p)?;
            for c in 0..self.active.len() {
                self.active[c] &= self.rr_new[c].sqrt() > self.targets[c];
            }
            std::mem::swap(&mut self.rr, &mut self.rr_new);
            info.iterations += 1;
        }
        info.converged = !self.active.iter().any(|&a| a);
        Ok(info)
    }
}
