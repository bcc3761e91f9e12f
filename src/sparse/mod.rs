//! Sparse matrix storage on the host, generic over the storage precision (f64, f32, f16):
//! CSR for assembly and the reference solvers, ELLPACK for bandwidth-bound kernels (fixed
//! row width, slot-major or row-major), and their host products ([`products`]), which the
//! set-up, the verification of solutions and the CPU device's kernels share; orderings
//! that narrow a matrix's band ([`ordering`]).

mod csr;
mod ell;
pub mod ordering;
pub mod products;

pub use csr::{spgemm, Csr, CsrView};
pub use ell::{Ell, EllLayout, SlicedColumns, LISTED, SLICE};
pub use ordering::Ordering;
pub use products::{residual, spmv, spmv_block, spmv_block_map, spmv_block_sums};

use crate::precision::Stored;

/// Row access shared by the storage formats, so every kernel is written once.
pub trait SparseRows<S: Stored>: Sync {
    fn nrows(&self) -> usize;
    fn ncols(&self) -> usize;
    /// Calls `f(column, value)` for every stored entry of row `r`, in storage order.
    fn for_each_in_row(&self, r: usize, f: impl FnMut(usize, S));
}

/// Formats that store each row's entries contiguously (CSR): kernels that loop over a row
/// several times read the slices directly.
pub trait RowSlices<S: Stored>: SparseRows<S> {
    /// Every entry's column and value, row after row in storage order.
    fn entries(&self) -> (&[u32], &[S]);
    /// Where row `r`'s entries lie in [`RowSlices::entries`].
    fn row_span(&self, r: usize) -> std::ops::Range<usize>;
}
