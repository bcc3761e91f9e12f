//! What one application of a Stokes operator or preconditioner costs, for performance
//! reports: two flops per stored coefficient applied and per vector entry updated; bytes:
//! each stored coefficient once and each vector read or written once per kernel (what an
//! ideal cache would move). Estimates from the stored sizes, not counters.

use crate::device::stokes::{CoarseSolve, Grid, LatticeRows, PressureRows, StokesMatrices};
use crate::device::Device;
use crate::linalg::Cost;
use crate::precision::Precision;

/// A product with stored coefficients (`bytes` of them in `storage`) that reads and writes
/// `vector_entries` entries of `compute` vectors.
fn product(bytes: usize, storage: Precision, vector_entries: usize, compute: Precision) -> Cost {
    Cost {
        flops: 2.0 * (bytes / storage.bytes()) as f64,
        bytes: (bytes + vector_entries * compute.bytes()) as f64,
    }
}

/// A pointwise pass (axpby, scaled product, copy) over `len` entries touching `vectors`
/// vectors.
pub(super) fn pointwise(len: usize, vectors: usize, compute: Precision) -> Cost {
    Cost {
        flops: 2.0 * len as f64,
        bytes: (len * vectors * compute.bytes()) as f64,
    }
}

fn lattice<D: Device>(rows: &LatticeRows<D>, vector_entries: usize, compute: Precision) -> Cost {
    product(
        rows.bytes(),
        rows.sets[0].precision(),
        vector_entries,
        compute,
    )
}

fn pressure<D: Device>(rows: &PressureRows<D>, vector_entries: usize, compute: Precision) -> Cost {
    product(
        rows.bytes(),
        rows.coefficients.precision(),
        vector_entries,
        compute,
    )
}

/// Only the bytes of `entries` vector entries (a fill, a copy without arithmetic).
pub(super) fn vectors(entries: usize, compute: Precision) -> Cost {
    Cost {
        flops: 0.0,
        bytes: (entries * compute.bytes()) as f64,
    }
}

fn sum(costs: impl Iterator<Item = Cost>) -> Cost {
    costs.fold(Cost::default(), |a, b| a + b)
}

/// y = A x with the whole Stokes operator (L on both components, Bᵀ, B), or r = b − A x
/// with `residual` (one more vector read).
pub(super) fn stokes_apply<D: Device>(
    op: &StokesMatrices<D>,
    residual: bool,
    compute: Precision,
) -> Cost {
    let flow_vectors = if residual { 3 } else { 2 };
    lattice(&op.laplacian, 0, compute) * 2.0
        + sum(op.gradient.iter().map(|r| lattice(r, 0, compute)))
        + sum(op.divergence.iter().map(|r| pressure(r, 0, compute)))
        + vectors(flow_vectors * op.grid.flow_len(), compute)
}

/// y = L x on one velocity component.
pub(super) fn laplacian<D: Device>(op: &StokesMatrices<D>, compute: Precision) -> Cost {
    lattice(&op.laplacian, 2 * op.grid.lattice_len(), compute)
}

/// Bᵀ p into both velocity components.
pub(super) fn gradient<D: Device>(op: &StokesMatrices<D>, compute: Precision) -> Cost {
    let g = op.grid;
    sum(op.gradient.iter().map(|r| lattice(r, 0, compute)))
        + vectors(g.pressure_len() + 2 * g.lattice_len(), compute)
}

/// B u from both velocity components.
pub(super) fn divergence<D: Device>(op: &StokesMatrices<D>, compute: Precision) -> Cost {
    let g = op.grid;
    sum(op.divergence.iter().map(|r| pressure(r, 0, compute)))
        + vectors(g.pressure_len() + 2 * g.lattice_len(), compute)
}

/// y = S x with a pressure stencil (the mass matrix, the Schur stencil).
pub(super) fn pressure_stencil<D: Device>(rows: &PressureRows<D>, compute: Precision) -> Cost {
    pressure(rows, 2 * rows.grid.pressure_len(), compute)
}

/// One grid transfer of one scalar field between the fine grid `fine` and its coarse grid:
/// tensor-product interpolation, three weights per direction for Q2 and two for Q1, in two
/// passes.
pub(super) fn transfer(fine: Grid, q2: bool, compute: Precision) -> Cost {
    let coarse = Grid { n: fine.n / 2 };
    let (fine_len, coarse_len, weights) = if q2 {
        (fine.lattice_len(), coarse.lattice_len(), 3)
    } else {
        (fine.pressure_len(), coarse.pressure_len(), 2)
    };
    Cost {
        flops: (2 * 2 * weights * fine_len) as f64,
        bytes: ((fine_len + coarse_len) * compute.bytes()) as f64,
    }
}

/// Both velocity components and the pressure of a flow vector.
pub(super) fn flow_transfer(fine: Grid, compute: Precision) -> Cost {
    transfer(fine, true, compute) * 2.0 + transfer(fine, false, compute)
}

/// The dense f64 coarsest solve.
pub(super) fn coarse_solve<D: Device>(coarse: &CoarseSolve<D>, compute: Precision) -> Cost {
    let size = coarse.size as f64;
    Cost {
        flops: 2.0 * size * size,
        bytes: size * size * 8.0 + (2 * coarse.unknowns * compute.bytes()) as f64,
    }
}
