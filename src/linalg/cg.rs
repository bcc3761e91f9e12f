//! Conjugate gradients on a block of right-hand sides: one Krylov iteration for all
//! columns, with per-column scalars (a column stops when it converges or breaks down).
//! Vectors are stored in the block's precision and combined in its compute precision; the
//! dot products are f64.

use crate::device::cg::{self, CgStep};
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

/// Block CG with its vectors and per-column scalars, allocated once. The scalars stay on
/// the device ([`crate::device::cg`]): an iteration reads nothing back, and the host asks
/// for the columns' flags only to decide when to stop.
pub struct BlockCg<D: VectorKernels> {
    r: Block<D>,
    p: Block<D>,
    q: Block<D>,
    scratch: Scratch<D>,
    /// α, 1, −α, β, r·r, the new r·r, p·Ap, the targets and the active flags per column,
    /// then the iterations counted.
    scalars: D::Buffer<f64>,
    /// The active flags and the count, read back.
    flags: Vec<f64>,
    nrhs: usize,
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
            scalars: dev.zeros(cg::buffer_len(nrhs))?,
            flags: vec![0.0; nrhs + 1],
            nrhs,
        })
    }

    /// Reads the active flags and the count: whether any column still iterates, and the
    /// iterations counted.
    fn read_flags(&mut self, dev: &D) -> Result<(bool, usize)> {
        dev.read(&self.scalars, cg::ACTIVE * self.nrhs, &mut self.flags)?;
        let (active, count) = self.flags.split_at(self.nrhs);
        Ok((active.iter().any(|&a| a != 0.0), count[0] as usize))
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
        let k = self.nrhs;
        let at = |slot: usize| slot * k;
        dev.fill(x.view_mut(), 0.0)?;
        dev.copy(b.view(), self.r.view_mut())?;
        dev.copy(b.view(), self.p.view_mut())?;
        dev.column_dots_to(b, b, &mut self.scalars, at(cg::RR), &mut self.scratch)?;
        let start = CgStep::Start {
            tolerance: params.tolerance,
            relative: params.relative,
            unit_roundoff: b.precision().unit_roundoff(),
        };
        dev.cg_scalars(start, &mut self.scalars, k)?;
        // Iterations after every column stopped change nothing (α = β = 0 keep x and r),
        // so the flags are read only every few iterations where a read waits for the device.
        for iteration in 0..params.max_iterations {
            if cg::check_before(dev, iteration) && !self.read_flags(dev)?.0 {
                break;
            }
            apply(&self.p, &mut self.q)?;
            dev.column_dots_to(
                &self.p,
                &self.q,
                &mut self.scalars,
                at(cg::PQ),
                &mut self.scratch,
            )?;
            dev.cg_scalars(CgStep::Alpha, &mut self.scalars, k)?;
            dev.column_axpby_from(&self.scalars, at(cg::ALPHA), &self.p, at(cg::ONES), x)?;
            dev.column_axpby_from(
                &self.scalars,
                at(cg::MINUS_ALPHA),
                &self.q,
                at(cg::ONES),
                &mut self.r,
            )?;
            dev.column_dots_to(
                &self.r,
                &self.r,
                &mut self.scalars,
                at(cg::RR_NEW),
                &mut self.scratch,
            )?;
            dev.cg_scalars(CgStep::Beta, &mut self.scalars, k)?;
            dev.column_axpby_from(
                &self.scalars,
                at(cg::ONES),
                &self.r,
                at(cg::BETA),
                &mut self.p,
            )?;
        }
        let (active, iterations) = self.read_flags(dev)?;
        Ok(CgInfo {
            iterations,
            converged: !active,
        })
    }
}
