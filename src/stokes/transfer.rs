//! Grid transfer of flow vectors between an n/2 and an n mesh: FE interpolation of Q2
//! (each velocity component on the lattice) and Q1 (pressure), and restriction as its
//! transpose (the 1D taps and their tensor products are the device's `stokes_transfer`).

use crate::device::stokes::{Grid, Transfer};
use crate::device::{Block, StokesKernels};
use crate::error::Result;

/// fine += P coarse for a flat [ux | uy | p] vector of the coarse grid `coarse_grid`.
pub fn prolong_flow<D: StokesKernels>(
    dev: &D,
    coarse: &Block<D>,
    fine: &mut Block<D>,
    coarse_grid: Grid,
) -> Result<()> {
    let nc = coarse_grid.n;
    let (c, f) = (coarse_grid.parts(), Grid { n: 2 * nc }.parts());
    for (part, kind) in [
        Transfer::Q2Prolong,
        Transfer::Q2Prolong,
        Transfer::Q1Prolong,
    ]
    .into_iter()
    .enumerate()
    {
        dev.stokes_transfer(
            kind,
            nc,
            coarse.data.slice(c[part].clone()),
            fine.data.slice_mut(f[part].clone()),
        )?;
    }
    Ok(())
}

/// coarse = Pᵀ fine for flat [ux | uy | p] vectors.
pub fn restrict_flow<D: StokesKernels>(
    dev: &D,
    fine: &Block<D>,
    coarse: &mut Block<D>,
    coarse_grid: Grid,
) -> Result<()> {
    let nc = coarse_grid.n;
    let (c, f) = (coarse_grid.parts(), Grid { n: 2 * nc }.parts());
    for (part, kind) in [
        Transfer::Q2Restrict,
        Transfer::Q2Restrict,
        Transfer::Q1Restrict,
    ]
    .into_iter()
    .enumerate()
    {
        dev.stokes_transfer(
            kind,
            nc,
            fine.data.slice(f[part].clone()),
            coarse.data.slice_mut(c[part].clone()),
        )?;
    }
    Ok(())
}
