//! CSR kernels on column-major blocks, and the [`SparseKernels`] entry points.

use rayon::prelude::*;

use super::vector::{partials, reduce};
use super::{buffer, buffer_mut, by_precision, Compute, Cpu};
use crate::device::{Block, CsrMatrix, SparseKernels, Stats, Storage};
use crate::error::Result;
use crate::numeric;
use crate::precision::Stored;
use crate::sparse::{self, CsrView};

fn view<'a, S: Storage>(a: &'a CsrMatrix<Cpu>, kernel: &str) -> Result<CsrView<'a, S>> {
    Ok(CsrView {
        ncols: a.ncols,
        row_ptr: &a.row_ptr,
        col_idx: &a.col_idx,
        values: buffer::<S>(&a.values, kernel)?,
    })
}

/// Σ r² per column and chunk (chunks fixed by the row count), then max |c| of column c
/// over the rows of each chunk, into the statistics.
fn update<X: Storage>(
    a: &CsrView<'_, f64>,
    c: &[X],
    alpha: &[f64],
    rows: usize,
    x: &mut [f64],
    r: &mut [f64],
    stats: &mut Stats<Cpu>,
) {
    use crate::sparse::SparseRows;
    let nrhs = alpha.len();
    let chunk = numeric::reduction_chunk(rows).max(1);
    let per_column = rows.div_ceil(chunk).max(1);
    let len = Stats::<Cpu>::len_for(nrhs);
    let part = partials(stats, per_column * nrhs);
    for col in 0..nrhs {
        let (alpha, cc) = (alpha[col], &c[col * rows..(col + 1) * rows]);
        let span = col * rows..(col + 1) * rows;
        x[span.clone()]
            .par_chunks_mut(chunk)
            .zip(r[span].par_chunks_mut(chunk))
            .zip(part[col * per_column * len..(col + 1) * per_column * len].par_chunks_mut(len))
            .enumerate()
            .for_each(|(q, ((xq, rq), p))| {
                let (mut sumsq, mut max) = (0.0f64, 0.0f64);
                for (i, (xi, ri)) in xq.iter_mut().zip(rq.iter_mut()).enumerate() {
                    let row = q * chunk + i;
                    let mut ac = 0.0;
                    a.for_each_in_row(row, |j, v| ac += v * cc[j].to_f64());
                    let ci = cc[row].to_f64();
                    *xi += alpha * ci;
                    *ri -= alpha * ac;
                    sumsq += *ri * *ri;
                    max = max.max(ci.abs());
                }
                p[col] = sumsq;
                p[nrhs + col] = max;
                p[2 * nrhs] = f64::from(sumsq.is_nan());
            });
    }
    reduce(stats);
}

impl SparseKernels for Cpu {
    fn csr_spmm_unchecked(
        &self,
        a: &CsrMatrix<Self>,
        x: &Block<Self>,
        y: &mut Block<Self>,
    ) -> Result<()> {
        let k = x.cols();
        by_precision!(a.values.precision(), S => {
            let m = view::<S>(a, "csr_spmm")?;
            let xs = buffer::<Compute<S>>(&x.data, "csr_spmm")?;
            let ys = buffer_mut::<Compute<S>>(&mut y.data, "csr_spmm")?;
            sparse::spmv_block(
                &m,
                faer::MatRef::from_column_major_slice(xs, a.ncols, k),
                faer::MatMut::from_column_major_slice_mut(ys, a.nrows, k),
            );
        });
        Ok(())
    }

    fn csr_subtract_unchecked(
        &self,
        a: &CsrMatrix<Self>,
        x: &Block<Self>,
        b: &Block<Self>,
        y: &mut Block<Self>,
    ) -> Result<()> {
        let (k, n) = (x.cols(), a.nrows);
        by_precision!(a.values.precision(), S => {
            let m = view::<S>(a, "csr_subtract")?;
            let xs = buffer::<Compute<S>>(&x.data, "csr_subtract")?;
            let bs = buffer::<Compute<S>>(&b.data, "csr_subtract")?;
            let x = faer::MatRef::from_column_major_slice(xs, a.ncols, k);
            // b's piece of column c from row r0, beside the products of the same rows.
            let b_of = |c: usize, r0: usize, len: usize| &bs[c * n + r0..c * n + r0 + len];
            if y.precision() != S::PRECISION.compute() {
                let ys = buffer_mut::<S>(&mut y.data, "csr_subtract")?;
                let y = faer::MatMut::from_column_major_slice_mut(ys, n, k);
                sparse::spmv_block_map(&m, x, y, |c, r0, products, y| {
                    let b = b_of(c, r0, y.len());
                    for ((yi, &bi), &p) in y.iter_mut().zip(b).zip(products) {
                        *yi = S::from_compute(bi - p);
                    }
                });
            } else {
                let ys = buffer_mut::<Compute<S>>(&mut y.data, "csr_subtract")?;
                let y = faer::MatMut::from_column_major_slice_mut(ys, n, k);
                sparse::spmv_block_map(&m, x, y, |c, r0, products, y| {
                    let b = b_of(c, r0, y.len());
                    for ((yi, &bi), &p) in y.iter_mut().zip(b).zip(products) {
                        *yi = bi - p;
                    }
                });
            }
        });
        Ok(())
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
        let m = view::<f64>(a, "csr_residual")?;
        let n = a.nrows;
        let (bs, xs) = (
            buffer::<f64>(&b.data, "csr_residual")?,
            buffer::<f64>(&x.data, "csr_residual")?,
        );
        let rs = buffer_mut::<f64>(&mut r.data, "csr_residual")?;
        for c in 0..k {
            let span = c * n..(c + 1) * n;
            sparse::residual(&m, &bs[span.clone()], &xs[span.clone()], &mut rs[span]);
        }
        self.column_stats_f64(r, stats)
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
        let m = view::<f64>(a, "csr_refine_update")?;
        let xs = buffer_mut::<f64>(&mut x.data, "csr_refine_update")?;
        let rs = buffer_mut::<f64>(&mut r.data, "csr_refine_update")?;
        by_precision!(c.precision(), X => update::<X>(&m, buffer::<X>(&c.data, "csr_refine_update")?, alpha, a.nrows, xs, rs, stats));
        Ok(())
    }
}

impl Cpu {
    /// Statistics of an f64 column-major block.
    fn column_stats_f64(&self, r: &Block<Cpu>, stats: &mut Stats<Cpu>) -> Result<()> {
        crate::device::VectorKernels::column_stats(self, r, stats)
    }
}
