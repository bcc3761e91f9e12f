//! Sparse matrix storage, generic over the storage precision (f64, f32, f16): CSR for
//! assembly and the reference solvers, ELLPACK for bandwidth-bound kernels (fixed row
//! width, slot-major, so consecutive rows are consecutive in memory: what GPUs coalesce).
//! The kernels that apply them live in `backend::cpu`.

mod csr;
mod ell;

pub use csr::{spgemm, Csr};
pub use ell::{Ell, EllLayout};

use crate::precision::Stored;

/// Row access shared by the storage formats, so every kernel is written once.
pub trait SparseRows<S: Stored>: Sync {
    fn nrows(&self) -> usize;
    fn ncols(&self) -> usize;
    /// Calls `f(column, value)` for every stored entry of row `r`, in storage order.
    fn for_each_in_row(&self, r: usize, f: impl FnMut(usize, S));
}
