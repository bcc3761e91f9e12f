//! CSR kernels on column-major blocks, and the [`SparseKernels`] entry points.

use rayon::prelude::*;

use super::vector::{partials, record_stats, reduce};
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

/// x += α c, r −= α A c for every column: the product over groups of columns, so each
/// row of A is read once per group ([`sparse::spmv_block_map`], r written there), then per
/// column and chunk (chunks fixed by the row count) x's update with Σ r² and max |c| into
/// the statistics.
fn update<X: Storage + Into<f64>>(
    a: &CsrView<'_, f64>,
    c: &[X],
    alpha: &[f64],
    rows: usize,
    x: &mut [f64],
    r: &mut [f64],
    stats: &mut Stats<Cpu>,
) {
    let nrhs = alpha.len();
    let cm = faer::MatRef::from_column_major_slice(c, rows, nrhs);
    let rm = faer::MatMut::from_column_major_slice_mut(r, rows, nrhs);
    sparse::spmv_block_map(a, cm, rm, |col, _, products, r| {
        let alpha = alpha[col];
        for (ri, &p) in r.iter_mut().zip(products) {
            *ri -= alpha * p;
        }
    });
    let chunk = numeric::reduction_chunk(rows).max(1);
    let per_column = rows.div_ceil(chunk).max(1);
    let len = Stats::<Cpu>::len_for(nrhs);
    let part = partials(stats, per_column * nrhs);
    x.par_chunks_mut(rows)
        .zip(r.par_chunks(rows))
        .zip(c.par_chunks(rows))
        .zip(part.par_chunks_mut(per_column * len))
        .enumerate()
        .for_each(|(col, (((xc, rc), cc), pc))| {
            let alpha = alpha[col];
            xc.par_chunks_mut(chunk)
                .zip(rc.par_chunks(chunk))
                .zip(cc.par_chunks(chunk))
                .zip(pc.par_chunks_mut(len))
                .for_each(|(((xq, rq), cq), p)| {
                    for (xi, &ci) in xq.iter_mut().zip(cq) {
                        *xi += alpha * ci.to_f64();
                    }
                    // Σ r² and max |c| in vectorised lanes.
                    let mut of_r = [0.0; 3];
                    record_stats(&mut of_r, rq, 1, f64::INFINITY);
                    p[col] = of_r[0];
                    p[nrhs + col] = largest_magnitude(cq);
                    p[2 * nrhs] = f64::from(of_r[0].is_nan());
                });
        });
    reduce(stats);
}

/// max |v| in four lanes, so that it vectorises; NaN is skipped, as `f64::max` does.
fn largest_magnitude<X: Storage>(values: &[X]) -> f64 {
    let mut lanes = [0.0f64; 4];
    let mut groups = values.chunks_exact(4);
    for group in &mut groups {
        for (lane, v) in lanes.iter_mut().zip(group) {
            let a = v.to_f64().abs();
            *lane = if a > *lane { a } else { *lane };
        }
    }
    let rest = groups.remainder().iter().map(|v| v.to_f64().abs());
    lanes.into_iter().chain(rest).fold(0.0, f64::max)
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
        // Each row of A read once per group of columns; each product summed from zero in
        // storage order, then subtracted, as `sparse::residual` does per column.
        let x = faer::MatRef::from_column_major_slice(xs, a.ncols, k);
        let r_mat = faer::MatMut::from_column_major_slice_mut(rs, n, k);
        sparse::spmv_block_map(&m, x, r_mat, |c, r0, products, r| {
            let b = &bs[c * n + r0..][..r.len()];
            for ((ri, &bi), &p) in r.iter_mut().zip(b).zip(products) {
                *ri = bi - p;
            }
        });
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
