//! CSR matrices on the device and their kernels (PSC's D and Dᵀ, the f64 stiffness matrix
//! of PSC-IR) on column-major blocks.

use super::checks::{check_col_major, check_f64, check_per_column, check_stats};
use super::{unsupported, Block, Data, Device, Stats, Storage};
use crate::error::Result;
use crate::sparse::{Csr, SparseRows};

/// A CSR matrix on the device, its values in a run-time precision.
pub struct CsrMatrix<D: Device> {
    pub nrows: usize,
    pub ncols: usize,
    pub row_ptr: D::Buffer<u64>,
    pub col_idx: D::Buffer<u32>,
    pub values: Data<D>,
}

impl<D: Device> CsrMatrix<D> {
    pub fn upload<S: Storage>(dev: &D, a: &Csr<S>) -> Result<Self> {
        let row_ptr: Vec<u64> = a.row_ptr().iter().map(|&p| p as u64).collect();
        Ok(CsrMatrix {
            nrows: a.nrows(),
            ncols: a.ncols(),
            row_ptr: dev.upload(&row_ptr)?,
            col_idx: dev.upload(a.col_idx())?,
            values: Data::from_stored(dev, a.values())?,
        })
    }

    pub fn nnz(&self) -> usize {
        self.values.len()
    }

    /// Bytes one product reads: values, column indices, row pointers.
    pub fn bytes(&self) -> usize {
        self.values.bytes() + 4 * self.nnz() + 8 * (self.nrows + 1)
    }
}

/// CSR products (PSC's D and Dᵀ, PSC-IR's f64 residual). Statistics are those of the
/// block each kernel writes (before rounding to its storage precision), per column. The
/// methods a solver calls check their arguments (device/checks.rs) and hand them to the
/// backend's `*_unchecked` kernel.
pub trait SparseKernels: Device {
    /// Y = A X for column-major blocks: A's values in storage S, X and Y in S's compute
    /// precision.
    fn csr_spmm(&self, a: &CsrMatrix<Self>, x: &Block<Self>, y: &mut Block<Self>) -> Result<()> {
        let k = x.cols();
        check_col_major("csr_spmm x", x, a.ncols, k)?;
        check_col_major("csr_spmm y", y, a.nrows, k)?;
        let (sp, xp, yp) = (a.values.precision(), x.precision(), y.precision());
        if xp != yp || xp != sp.compute() {
            return Err(unsupported("csr_spmm", &[sp, xp, yp]));
        }
        self.csr_spmm_unchecked(a, x, y)
    }

    /// y = b − A x for column-major blocks: A's values in storage S, x and b in S's
    /// compute precision, y in that or in S itself (rounded once, as the next product's
    /// operand): the product, the subtraction and the rounding in one pass.
    fn csr_subtract(
        &self,
        a: &CsrMatrix<Self>,
        x: &Block<Self>,
        b: &Block<Self>,
        y: &mut Block<Self>,
    ) -> Result<()> {
        let k = x.cols();
        check_col_major("csr_subtract x", x, a.ncols, k)?;
        check_col_major("csr_subtract b", b, a.nrows, k)?;
        check_col_major("csr_subtract y", y, a.nrows, k)?;
        let (sp, xp, bp, yp) = (
            a.values.precision(),
            x.precision(),
            b.precision(),
            y.precision(),
        );
        if xp != sp.compute() || bp != xp || (yp != xp && yp != sp) {
            return Err(unsupported("csr_subtract", &[sp, xp, bp, yp]));
        }
        self.csr_subtract_unchecked(a, x, b, y)
    }

    /// r = b − A x column by column (f64, column-major), with the statistics of r.
    fn csr_residual(
        &self,
        a: &CsrMatrix<Self>,
        b: &Block<Self>,
        x: &Block<Self>,
        r: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let k = b.cols();
        check_col_major("csr_residual b", b, a.nrows, k)?;
        check_col_major("csr_residual x", x, a.nrows, k)?;
        check_col_major("csr_residual r", r, a.nrows, k)?;
        check_stats("csr_residual", stats, k)?;
        let precisions = [
            a.values.precision(),
            b.precision(),
            x.precision(),
            r.precision(),
        ];
        check_f64("csr_residual", &precisions)?;
        self.csr_residual_unchecked(a, b, x, r, stats)
    }

    /// The refinement update x_c += α_c c_c, r_c −= α_c A c_c (A, x, r f64 column-major; c
    /// in any precision). Statistics: Σ r² of the new residual and max |c| of the
    /// correction read.
    fn csr_refine_update(
        &self,
        a: &CsrMatrix<Self>,
        c: &Block<Self>,
        alpha: &[f64],
        x: &mut Block<Self>,
        r: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let k = c.cols();
        check_col_major("csr_refine_update c", c, a.nrows, k)?;
        check_col_major("csr_refine_update x", x, a.nrows, k)?;
        check_col_major("csr_refine_update r", r, a.nrows, k)?;
        check_per_column("csr_refine_update", alpha, k)?;
        check_stats("csr_refine_update", stats, k)?;
        let precisions = [a.values.precision(), x.precision(), r.precision()];
        check_f64("csr_refine_update", &precisions)?;
        self.csr_refine_update_unchecked(a, c, alpha, x, r, stats)
    }

    // The backend's kernels behind the checked methods above, given checked arguments.

    /// [`SparseKernels::csr_spmm`] on checked arguments.
    fn csr_spmm_unchecked(
        &self,
        a: &CsrMatrix<Self>,
        x: &Block<Self>,
        y: &mut Block<Self>,
    ) -> Result<()>;

    /// [`SparseKernels::csr_subtract`] on checked arguments.
    fn csr_subtract_unchecked(
        &self,
        a: &CsrMatrix<Self>,
        x: &Block<Self>,
        b: &Block<Self>,
        y: &mut Block<Self>,
    ) -> Result<()>;

    /// [`SparseKernels::csr_residual`] on checked arguments.
    fn csr_residual_unchecked(
        &self,
        a: &CsrMatrix<Self>,
        b: &Block<Self>,
        x: &Block<Self>,
        r: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()>;

    /// [`SparseKernels::csr_refine_update`] on checked arguments.
    fn csr_refine_update_unchecked(
        &self,
        a: &CsrMatrix<Self>,
        c: &Block<Self>,
        alpha: &[f64],
        x: &mut Block<Self>,
        r: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()>;
}
