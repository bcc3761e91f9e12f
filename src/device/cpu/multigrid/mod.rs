//! The [`MultigridKernels`] entry points: the ELLPACK sweeps of a level ([`ell`]) and the
//! grid transfers between levels ([`transfer`]).

mod ell;
mod transfer;

use super::Cpu;
use crate::device::multigrid::Direction;
use crate::device::{Block, EllMatrix, FlagLog, LevelTransfer, MultigridKernels, RowOp, Stats};
use crate::error::Result;
use crate::sparse::EllLayout;

impl MultigridKernels for Cpu {
    fn ell_layout(&self) -> EllLayout {
        EllLayout::Sliced
    }

    fn ell_sweep_unchecked(
        &self,
        a: &EllMatrix<Self>,
        op: RowOp,
        x: &Block<Self>,
        b: Option<&Block<Self>>,
        out: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        ell::ell_sweep(a, op, x, b, out, stats)
    }

    fn ell_jacobi_from_zero_unchecked(
        &self,
        a: &EllMatrix<Self>,
        omega: f64,
        b: &Block<Self>,
        out: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        ell::ell_jacobi_from_zero(a, omega, b, out, stats)
    }

    fn ell_refine_update_unchecked(
        &self,
        a: &EllMatrix<Self>,
        c: &Block<Self>,
        alpha: &[f64],
        x: &mut Block<Self>,
        r: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        ell::ell_refine_update(a, c, alpha, x, r, stats)
    }

    fn restrict_unchecked(
        &self,
        transfer: &LevelTransfer<Self>,
        fine: &Block<Self>,
        coarse: &mut Block<Self>,
        scale: &[f64],
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        transfer::transfer_block(Direction::Restrict, transfer, fine, coarse, scale, stats)
    }

    fn log_flushed_column_unchecked(
        &self,
        fine: &Stats<Self>,
        coarse: &Stats<Self>,
        half_tiny: f64,
        log: &mut FlagLog<Self>,
    ) -> Result<()> {
        let (slot, cols) = (log.next_slot("log_flushed_column", 2)?, fine.nrhs());
        let (fine_max, coarse_max) = (&fine.host[cols..2 * cols], &coarse.host[cols..2 * cols]);
        let flushed = (0..cols).find(|&c| fine_max[c] > 0.0 && coarse_max[c] < half_tiny);
        log.flags[slot] = flushed.map_or(0.0, |c| (c + 1) as f64);
        log.flags[slot + 1] = flushed.map_or(0.0, |c| coarse_max[c]);
        log.len += 2;
        Ok(())
    }

    fn prolongate_add_unchecked(
        &self,
        transfer: &LevelTransfer<Self>,
        coarse: &Block<Self>,
        fine: &mut Block<Self>,
        scale: &[f64],
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        transfer::transfer_block(
            Direction::ProlongateAdd,
            transfer,
            coarse,
            fine,
            scale,
            stats,
        )
    }
}
