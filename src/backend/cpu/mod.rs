//! CPU kernels (rayon): the reference implementation of every kernel.
//!
//! Reductions are split into fixed-size chunks whose partial sums are added in order, so
//! results are bitwise reproducible whatever the number of threads.

pub mod block_ell;
pub mod grid_transfer;

use faer::{MatMut, MatRef};
use num_traits::Zero;
use rayon::prelude::*;

use crate::precision::{Real, Stored};
use crate::sparse::SparseRows;

/// Rows one rayon task handles in sparse kernels.
const ROWS_PER_TASK: usize = 2048;
/// Entries per partial sum in reductions (fixed, for reproducibility).
const REDUCTION_CHUNK: usize = 8192;
/// Right-hand sides one pass over a matrix row serves in the block SpMV.
const BLOCK_COLUMNS: usize = 8;

fn check_spmv_shapes<S: Stored>(a: &impl SparseRows<S>, x_len: usize, y_len: usize) {
    assert_eq!(
        x_len,
        a.ncols(),
        "SpMV: x has {x_len} entries, A has {} columns",
        a.ncols()
    );
    assert_eq!(
        y_len,
        a.nrows(),
        "SpMV: y has {y_len} entries, A has {} rows",
        a.nrows()
    );
}

/// y = A x, stored values widened to the compute precision.
pub fn spmv<S: Stored>(a: &impl SparseRows<S>, x: &[S::Compute], y: &mut [S::Compute]) {
    check_spmv_shapes(a, x.len(), y.len());
    y.par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, rows)| {
            for (i, yi) in rows.iter_mut().enumerate() {
                let mut sum = S::Compute::zero();
                a.for_each_in_row(task * ROWS_PER_TASK + i, |c, v| {
                    sum = sum + v.to_compute() * x[c];
                });
                *yi = sum;
            }
        });
}

/// r = b - A x.
pub fn residual<S: Stored>(
    a: &impl SparseRows<S>,
    b: &[S::Compute],
    x: &[S::Compute],
    r: &mut [S::Compute],
) {
    check_spmv_shapes(a, x.len(), r.len());
    assert_eq!(b.len(), r.len(), "residual: b and r differ in length");
    r.par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, rows)| {
            for (i, ri) in rows.iter_mut().enumerate() {
                let row = task * ROWS_PER_TASK + i;
                let mut sum = S::Compute::zero();
                a.for_each_in_row(row, |c, v| sum = sum + v.to_compute() * x[c]);
                *ri = b[row] - sum;
            }
        });
}

/// A raw pointer rayon tasks may share when each writes its own disjoint rows.
#[derive(Clone, Copy)]
struct SharedMut<T>(*mut T);

impl<T> SharedMut<T> {
    /// Through a method, so closures capture the wrapper (Sync), not the bare pointer.
    fn get(self) -> *mut T {
        self.0
    }
}
// SAFETY: used only where tasks write disjoint elements (see `spmv_block`).
unsafe impl<T: Send> Send for SharedMut<T> {}
unsafe impl<T: Send> Sync for SharedMut<T> {}

/// Y = A X for column-major blocks of right-hand sides (n × Nrhs): each pass over a row of
/// A serves up to `BLOCK_COLUMNS` columns, so the matrix is read once per group of columns
/// instead of once per column.
pub fn spmv_block<S: Stored>(
    a: &impl SparseRows<S>,
    x: MatRef<'_, S::Compute>,
    y: MatMut<'_, S::Compute>,
) {
    assert_eq!(
        x.ncols(),
        y.ncols(),
        "block SpMV: X and Y have different column counts"
    );
    check_spmv_shapes(a, x.nrows(), y.nrows());
    assert!(
        (x.row_stride() == 1 || x.nrows() <= 1) && (y.row_stride() == 1 || y.nrows() <= 1),
        "block SpMV needs column-major blocks"
    );
    let (nrows, ncols) = (y.nrows(), y.ncols());
    let (ldx, ldy) = (x.col_stride(), y.col_stride());
    let x_ptr = x.as_ptr() as usize;
    let y_ptr = SharedMut(y.as_ptr_mut());
    let tasks = nrows.div_ceil(ROWS_PER_TASK);
    (0..tasks).into_par_iter().for_each(|task| {
        let x_base = x_ptr as *const S::Compute;
        let rows = task * ROWS_PER_TASK..((task + 1) * ROWS_PER_TASK).min(nrows);
        for first in (0..ncols).step_by(BLOCK_COLUMNS) {
            let width = BLOCK_COLUMNS.min(ncols - first);
            for r in rows.clone() {
                let mut sums = [S::Compute::zero(); BLOCK_COLUMNS];
                a.for_each_in_row(r, |c, v| {
                    let v = v.to_compute();
                    for (j, sum) in sums.iter_mut().enumerate().take(width) {
                        // SAFETY: c < nrows(X) and first + j < ncols(X), checked above.
                        let xv = unsafe { *x_base.offset(c as isize + (first + j) as isize * ldx) };
                        *sum = *sum + v * xv;
                    }
                });
                for (j, sum) in sums.iter().enumerate().take(width) {
                    // SAFETY: r < nrows(Y), first + j < ncols(Y); each task owns rows `rows`.
                    unsafe { *y_ptr.get().offset(r as isize + (first + j) as isize * ldy) = *sum };
                }
            }
        }
    });
}

/// A dense matrix operand for [`gemm`]: entry (i, j) at `data[i * row_stride + j * col_stride]`.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a, S> {
    pub data: &'a [S],
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a, S> Operand<'a, S> {
    /// A column-major matrix with leading dimension `ld`.
    pub fn col_major(data: &'a [S], ld: usize) -> Self {
        Operand {
            data,
            row_stride: 1,
            col_stride: ld,
        }
    }

    /// The transpose of a column-major matrix with leading dimension `ld`.
    pub fn transposed(data: &'a [S], ld: usize) -> Self {
        Operand {
            data,
            row_stride: ld,
            col_stride: 1,
        }
    }

    fn check(&self, rows: usize, cols: usize, what: &str) {
        if rows > 0 && cols > 0 {
            let last = (rows - 1) * self.row_stride + (cols - 1) * self.col_stride;
            assert!(
                last < self.data.len(),
                "GEMM: {what} ({rows}×{cols}) exceeds its buffer"
            );
        }
    }
}

/// D = A·B (m×k times k×n into column-major D with leading dimension `ldd`), all operands
/// in the storage precision S (the `gemm` crate: f64 and f32 natively; f16 operands are
/// multiplied in f32 and the result rounded to f16).
pub fn gemm<S: Stored>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [S],
    ldd: usize,
    lhs: Operand<'_, S>,
    rhs: Operand<'_, S>,
) {
    gemm_checked(m, n, k, dst, ldd, lhs, rhs, S::from_f64(1.0));
}

/// [`gemm`] in a compute precision (f32 or f64).
pub fn gemm_real<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    ldd: usize,
    lhs: Operand<'_, T>,
    rhs: Operand<'_, T>,
) {
    gemm_checked(m, n, k, dst, ldd, lhs, rhs, T::one());
}

/// D = A·B for any element type the `gemm` crate multiplies, after checking every index.
#[allow(clippy::too_many_arguments)]
fn gemm_checked<T: Copy + 'static>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    ldd: usize,
    lhs: Operand<'_, T>,
    rhs: Operand<'_, T>,
    one: T,
) {
    lhs.check(m, k, "left operand");
    rhs.check(k, n, "right operand");
    Operand::col_major(&*dst, ldd).check(m, n, "destination");
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: every index the product touches lies inside the buffers (checked above), and
    // `dst` does not alias the operands (it is borrowed mutably). With read_dst = false
    // the destination's old contents (and alpha) are ignored.
    unsafe {
        ::gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            ldd as isize,
            1,
            false,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            one,
            one,
            false,
            false,
            false,
            ::gemm::Parallelism::Rayon(rayon::current_num_threads()),
        );
    }
}

/// Rows of the matrix one rayon task owns in [`gemv`].
const GEMV_ROWS: usize = 1024;

/// y = A x for a column-major m×n matrix A (leading dimension `ld`) stored in S, with x
/// and y in S's compute precision. Each task owns a block of rows and streams the matching
/// segment of every column once: a bandwidth-bound kernel for one right-hand side, where a
/// GEMM would pack its operands first.
pub fn gemv<S: Stored>(
    m: usize,
    n: usize,
    a: &[S],
    ld: usize,
    x: &[S::Compute],
    y: &mut [S::Compute],
) {
    Operand::col_major(a, ld).check(m, n, "GEMV matrix");
    assert!(
        x.len() >= n && y.len() >= m,
        "GEMV: vectors shorter than the matrix"
    );
    const COLUMNS: usize = 4;
    y[..m]
        .par_chunks_mut(GEMV_ROWS)
        .enumerate()
        .for_each(|(task, yb)| {
            let (first, rows) = (task * GEMV_ROWS, yb.len());
            let mut buffers = [[S::Compute::zero(); GEMV_ROWS]; COLUMNS];
            yb.iter_mut().for_each(|v| *v = S::Compute::zero());
            for j0 in (0..n).step_by(COLUMNS) {
                let width = COLUMNS.min(n - j0);
                // The segments of columns j0..j0+width for these rows, in the compute precision.
                let mut segments: [&[S::Compute]; COLUMNS] = [&[]; COLUMNS];
                for (c, buffer) in buffers.iter_mut().enumerate().take(width) {
                    let start = first + (j0 + c) * ld;
                    let stored = &a[start..start + rows];
                    segments[c] = match S::as_compute(stored) {
                        Some(same) => same,
                        None => {
                            S::widen_slice(stored, &mut buffer[..rows]);
                            &buffer[..rows]
                        }
                    };
                }
                if width == COLUMNS {
                    let (x0, x1, x2, x3) = (x[j0], x[j0 + 1], x[j0 + 2], x[j0 + 3]);
                    let [s0, s1, s2, s3] = segments;
                    for i in 0..rows {
                        yb[i] = yb[i] + s0[i] * x0 + s1[i] * x1 + s2[i] * x2 + s3[i] * x3;
                    }
                } else {
                    for (c, segment) in segments.iter().enumerate().take(width) {
                        let xc = x[j0 + c];
                        yb.iter_mut()
                            .zip(segment.iter())
                            .for_each(|(yi, &aij)| *yi = *yi + aij * xc);
                    }
                }
            }
        });
}

/// A vector of `len` copies of `value`, written in parallel so its pages are mapped now
/// (in set-up) rather than on first use (inside a timed solve), by the threads that use them.
pub fn filled<T: Copy + Send + Sync>(len: usize, value: T) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    v.spare_capacity_mut()
        .par_chunks_mut(1 << 14)
        .for_each(|c| {
            c.iter_mut().for_each(|x| {
                x.write(value);
            })
        });
    // SAFETY: every one of the `len` elements was initialised above.
    unsafe { v.set_len(len) };
    v
}

/// dst[i] = src[i] rounded to T (the preconditioner's precision), in parallel.
pub fn from_f64_into<T: Real>(src: &[f64], dst: &mut [T]) {
    assert_eq!(src.len(), dst.len(), "from_f64_into: lengths differ");
    dst.par_iter_mut()
        .zip(src.par_iter())
        .for_each(|(d, &s)| *d = T::from_f64(s));
}

/// dst[i] = src[i] widened to f64, in parallel.
pub fn to_f64_into<T: Real>(src: &[T], dst: &mut [f64]) {
    assert_eq!(src.len(), dst.len(), "to_f64_into: lengths differ");
    dst.par_iter_mut()
        .zip(src.par_iter())
        .for_each(|(d, &s)| *d = s.to_f64());
}

/// x · y, reproducible across thread counts.
pub fn dot<T: Real>(x: &[T], y: &[T]) -> T {
    assert_eq!(x.len(), y.len(), "dot: lengths differ");
    let partials: Vec<T> = x
        .par_chunks(REDUCTION_CHUNK)
        .zip(y.par_chunks(REDUCTION_CHUNK))
        .map(|(a, b)| a.iter().zip(b).fold(T::zero(), |s, (&u, &v)| s + u * v))
        .collect();
    partials.into_iter().fold(T::zero(), |s, p| s + p)
}

/// ‖x‖₂, scaled so it neither overflows nor underflows for any finite x; NaN when x holds
/// a NaN (`max` alone would skip it and report a finite norm).
pub fn nrm2<T: Real>(x: &[T]) -> T {
    let scale = x.par_iter().map(|v| v.abs()).reduce(T::zero, |a, b| {
        if a.is_nan() {
            a
        } else if b.is_nan() {
            b
        } else {
            a.max(b)
        }
    });
    if scale == T::zero() || !scale.is_finite() {
        return scale;
    }
    let partials: Vec<T> = x
        .par_chunks(REDUCTION_CHUNK)
        .map(|c| {
            c.iter().fold(T::zero(), |s, &v| {
                let w = v / scale;
                s + w * w
            })
        })
        .collect();
    scale * partials.into_iter().fold(T::zero(), |s, p| s + p).sqrt()
}

/// y += alpha x.
pub fn axpy<T: Real>(alpha: T, x: &[T], y: &mut [T]) {
    assert_eq!(x.len(), y.len(), "axpy: lengths differ");
    y.par_iter_mut()
        .zip(x.par_iter())
        .for_each(|(yi, &xi)| *yi = *yi + alpha * xi);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::{Csr, Ell};
    use half::f16;

    /// A random-ish sparse matrix with `n` rows, several entries per row.
    fn test_matrix(n: usize) -> Csr<f64> {
        let mut row_ptr = vec![0];
        let (mut cols, mut vals) = (vec![], vec![]);
        for r in 0..n {
            let mut row: Vec<u32> = [r, (r * 7 + 3) % n, (r * 13 + 1) % n, (r + n - 1) % n]
                .iter()
                .map(|&c| c as u32)
                .collect();
            row.sort();
            row.dedup();
            for &c in &row {
                cols.push(c);
                vals.push(((r * 31 + c as usize * 17) % 23) as f64 / 8.0 - 1.0);
            }
            row_ptr.push(cols.len());
        }
        Csr::new(n, n, row_ptr, cols, vals).unwrap()
    }

    fn dense_matvec(a: &Csr<f64>, x: &[f64]) -> Vec<f64> {
        let dense = a.to_dense_f64();
        let n = x.len();
        (0..n)
            .map(|r| (0..n).map(|c| dense[r + c * n] * x[c]).sum())
            .collect()
    }

    #[test]
    fn nrm2_propagates_nan() {
        let mut x = vec![1.0f64; 10_000];
        x[1234] = f64::NAN;
        assert!(nrm2(&x).is_nan());
        x[1234] = f64::INFINITY;
        assert_eq!(nrm2(&x), f64::INFINITY);
    }

    #[test]
    fn spmv_matches_dense_in_all_formats() {
        let n = 5000;
        let a = test_matrix(n);
        let x: Vec<f64> = (0..n)
            .map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0)
            .collect();
        let expected = dense_matvec(&a, &x);
        let mut y = vec![0.0; n];
        spmv(&a, &x, &mut y);
        for (u, v) in y.iter().zip(&expected) {
            assert!((u - v).abs() < 1e-12);
        }
        let mut y_ell = vec![0.0; n];
        spmv(&Ell::from_csr(&a), &x, &mut y_ell);
        assert_eq!(y, y_ell);

        // f16 storage, f32 arithmetic: all test values are exact in f16.
        let a16: Csr<f16> = a.convert().unwrap();
        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let mut y32 = vec![0.0f32; n];
        spmv(&Ell::from_csr(&a16), &x32, &mut y32);
        for (u, v) in y32.iter().zip(&expected) {
            assert!((*u as f64 - v).abs() < 1e-5);
        }

        let mut r = vec![0.0; n];
        residual(&a, &expected, &x, &mut r);
        assert!(nrm2(&r) < 1e-11);
    }

    #[test]
    fn block_spmv_matches_column_by_column() {
        let n = 4500;
        let a = test_matrix(n);
        for nrhs in [1, 3, 8, 11] {
            let x = faer::Mat::<f64>::from_fn(n, nrhs, |i, j| ((i * 7 + j * 5) % 19) as f64 - 9.0);
            let mut y = faer::Mat::<f64>::zeros(n, nrhs);
            spmv_block(&a, x.as_ref(), y.as_mut());
            for j in 0..nrhs {
                let xj: Vec<f64> = (0..n).map(|i| x[(i, j)]).collect();
                let mut yj = vec![0.0; n];
                spmv(&a, &xj, &mut yj);
                for i in 0..n {
                    assert_eq!(y[(i, j)], yj[i]);
                }
            }
        }
    }

    #[test]
    fn gemm_matches_naive_products_in_every_precision() {
        let (m, n, k) = (37, 5, 23);
        let a: Vec<f64> = (0..m * k).map(|i| ((i * 13) % 7) as f64 - 3.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| ((i * 5) % 11) as f64 - 5.0).collect();
        let naive = |i: usize, j: usize, transposed: bool| -> f64 {
            (0..k)
                .map(|l| if transposed { a[l + i * k] } else { a[i + l * m] } * b[l + j * k])
                .sum()
        };
        let mut d = vec![0.0; m * n];
        gemm(
            m,
            n,
            k,
            &mut d,
            m,
            Operand::col_major(&a, m),
            Operand::col_major(&b, k),
        );
        for j in 0..n {
            for i in 0..m {
                assert_eq!(d[i + j * m], naive(i, j, false));
            }
        }
        // Aᵀ with A stored k×m: same data read transposed.
        gemm(
            m,
            n,
            k,
            &mut d,
            m,
            Operand::transposed(&a, k),
            Operand::col_major(&b, k),
        );
        assert_eq!(d[3 + 2 * m], naive(3, 2, true));
        // Small integers are exact in f16 and f32, and so are these products' sums.
        let a16: Vec<f16> = a.iter().map(|&v| f16::from_f64(v)).collect();
        let b16: Vec<f16> = b.iter().map(|&v| f16::from_f64(v)).collect();
        let mut d16 = vec![f16::ZERO; m * n];
        gemm(
            m,
            n,
            k,
            &mut d16,
            m,
            Operand::col_major(&a16, m),
            Operand::col_major(&b16, k),
        );
        assert_eq!(d16[4 + m].to_f64(), naive(4, 1, false));
        let a32: Vec<f32> = a.iter().map(|&v| v as f32).collect();
        let b32: Vec<f32> = b.iter().map(|&v| v as f32).collect();
        let mut d32 = vec![0.0f32; m * n];
        gemm(
            m,
            n,
            k,
            &mut d32,
            m,
            Operand::col_major(&a32, m),
            Operand::col_major(&b32, k),
        );
        assert_eq!(d32[36 + 4 * m] as f64, naive(36, 4, false));
    }

    #[test]
    fn gemv_matches_gemm_in_every_precision() {
        let (m, n) = (2500, 37);
        let a: Vec<f64> = (0..m * n).map(|i| ((i * 7) % 13) as f64 - 6.0).collect();
        let x: Vec<f64> = (0..n).map(|i| (i % 5) as f64 - 2.0).collect();
        let mut expected = vec![0.0; m];
        gemm(
            m,
            1,
            n,
            &mut expected,
            m,
            Operand::col_major(&a, m),
            Operand::col_major(&x, n),
        );
        let mut y = vec![0.0; m];
        gemv(m, n, &a, m, &x, &mut y);
        assert_eq!(y, expected);
        let a16: Vec<f16> = a.iter().map(|&v| f16::from_f64(v)).collect();
        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let mut y32 = vec![0.0f32; m];
        gemv(m, n, &a16, m, &x32, &mut y32);
        assert!(
            y32.iter().zip(&expected).all(|(u, v)| *u as f64 == *v),
            "small integers are exact"
        );
    }

    #[test]
    fn reductions() {
        let x: Vec<f64> = (0..100_000).map(|i| (i % 7) as f64 - 3.0).collect();
        let expected: f64 = x.iter().map(|v| v * v).sum();
        assert_eq!(dot(&x, &x), expected);
        assert!((nrm2(&x) - expected.sqrt()).abs() < 1e-9);
        assert_eq!(nrm2(&[1e300, 1e300]), 1e300 * 2f64.sqrt());
        assert!((nrm2(&[3e-300f64, 4e-300]) / 5e-300 - 1.0).abs() < 1e-15);
        let mut y = vec![1.0; 100_000];
        axpy(2.0, &x, &mut y);
        assert_eq!(y[4], 3.0);
    }
}
