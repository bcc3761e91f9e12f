//! SparseKernels on CUDA (kernels/sparse.cu): CSR products on column-major blocks, the f64
//! residual and the refinement update with their statistics.

use super::device::Cuda;
use super::launch::{self, Arg, REDUCE_CHUNK};
use crate::device::{kernel_name, Block, CsrMatrix, Layout, SparseKernels, Stats};
use crate::error::{Error, Result};
use crate::precision::Precision;
use cudarc::driver::LaunchConfig;

impl Cuda {
    /// The matrix's three arrays as kernel arguments: rows, row pointers, column indices,
    /// values; the kernels index rows in 32 bits.
    fn csr_args(&self, a: &CsrMatrix<Cuda>) -> Result<[Arg; 4]> {
        if a.nrows > u32::MAX as usize {
            return Err(Error::Backend(format!(
                "CSR products: {} rows exceed the kernels' 32-bit row indices",
                a.nrows
            )));
        }
        Ok([
            Arg::U64(a.nrows as u64),
            self.ptr(&a.row_ptr, 0),
            self.ptr(&a.col_idx, 0),
            self.data_ptr(&a.values, 0),
        ])
    }

    /// A thread per (row, group of [`launch::CSR_COLUMNS`] columns), block (q, g) for rows
    /// q·THREADS… of group g.
    fn per_row_and_column_group(a: &CsrMatrix<Cuda>, k: usize) -> LaunchConfig {
        launch::per_item_and_column(a.nrows as u64, (k as u32).div_ceil(launch::CSR_COLUMNS))
    }
}

impl SparseKernels for Cuda {
    fn csr_spmm_unchecked(
        &self,
        a: &CsrMatrix<Self>,
        x: &Block<Self>,
        y: &mut Block<Self>,
    ) -> Result<()> {
        let k = x.cols();
        let (sp, xp) = (a.values.precision(), x.precision());
        if a.nrows == 0 || k == 0 {
            return Ok(());
        }
        let [rows, row_ptr, col_idx, values] = self.csr_args(a)?;
        self.launch(
            &kernel_name("csr_spmm", &[sp, xp]),
            Self::per_row_and_column_group(a, k),
            &[
                rows,
                row_ptr,
                col_idx,
                values,
                self.data_ptr(&x.data, 0),
                Arg::U64(a.ncols as u64),
                self.data_ptr(&y.data, 0),
                Arg::U32(k as u32),
            ],
        )
    }

    fn csr_subtract_unchecked(
        &self,
        a: &CsrMatrix<Self>,
        x: &Block<Self>,
        b: &Block<Self>,
        y: &mut Block<Self>,
    ) -> Result<()> {
        let k = x.cols();
        let (sp, xp, yp) = (a.values.precision(), x.precision(), y.precision());
        if a.nrows == 0 || k == 0 {
            return Ok(());
        }
        let [rows, row_ptr, col_idx, values] = self.csr_args(a)?;
        self.launch(
            &kernel_name("csr_subtract", &[sp, xp, yp]),
            Self::per_row_and_column_group(a, k),
            &[
                rows,
                row_ptr,
                col_idx,
                values,
                self.data_ptr(&x.data, 0),
                Arg::U64(a.ncols as u64),
                self.data_ptr(&b.data, 0),
                self.data_ptr(&y.data, 0),
                Arg::U32(k as u32),
            ],
        )
    }

    fn csr_residual_unchecked(
        &self,
        a: &CsrMatrix<Self>,
        b: &Block<Self>,
        x: &Block<Self>,
        r: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let k = b.cols();
        let [rows, row_ptr, col_idx, values] = self.csr_args(a)?;
        if a.nrows > 0 && k > 0 {
            self.launch(
                "csr_residual_f64",
                Self::per_row_and_column_group(a, k),
                &[
                    rows,
                    row_ptr,
                    col_idx,
                    values,
                    self.data_ptr(&b.data, 0),
                    self.data_ptr(&x.data, 0),
                    self.data_ptr(&r.data, 0),
                    Arg::U32(k as u32),
                ],
            )?;
        }
        let r_ptr = self.data_ptr(&r.data, 0);
        self.record_stats(r_ptr, Precision::F64, a.nrows, k, Layout::ColMajor, stats)
    }

    fn csr_refine_update_unchecked(
        &self,
        a: &CsrMatrix<Self>,
        c: &Block<Self>,
        alpha: &[f64],
        x: &mut Block<Self>,
        r: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let k = c.cols();
        let [rows, row_ptr, col_idx, values] = self.csr_args(a)?;
        let cp = c.precision();
        if a.nrows > 0 && k > 0 {
            self.with_params(alpha, |alpha| {
                self.launch(
                    &kernel_name("csr_refine_update", &[cp]),
                    Self::per_row_and_column_group(a, k),
                    &[
                        rows,
                        row_ptr,
                        col_idx,
                        values,
                        self.data_ptr(&c.data, 0),
                        alpha,
                        self.data_ptr(&x.data, 0),
                        self.data_ptr(&r.data, 0),
                        Arg::U32(k as u32),
                    ],
                )
            })?;
        }
        // Σ r² of the new residual and max |c| of the correction: two sets of chunk
        // triples, reduced together.
        let (n, chunks) = (a.nrows, launch::chunks(a.nrows as u64));
        let front = Stats::<Cuda>::len_for(k);
        let per_block = 3 * k * chunks as usize;
        super::device::grow(self, &mut stats.partials, front + 2 * per_block)?;
        let (r_triples, c_triples) = (
            self.ptr(&stats.partials, front),
            self.ptr(&stats.partials, front + per_block),
        );
        for (block, precision, triples) in [
            (self.data_ptr(&r.data, 0), Precision::F64, r_triples),
            (self.data_ptr(&c.data, 0), cp, c_triples),
        ] {
            self.launch(
                &kernel_name("column_stats", &[precision]),
                launch::per_chunk_and_group(n as u64, k as u32, false),
                &[
                    block,
                    Arg::U64(n as u64),
                    Arg::U32(k as u32),
                    Arg::U32(0),
                    Arg::U64(REDUCE_CHUNK),
                    Arg::U32(chunks),
                    Arg::F64(precision.max()),
                    triples,
                ],
            )?;
        }
        self.reduce_stats(r_triples, c_triples, k, chunks, stats)
    }
}
