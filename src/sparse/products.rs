//! Host products of the sparse formats (rayon over row chunks): y = A x, r = b − A x, and
//! the block product over column-major blocks of right-hand sides. The CPU device's sparse
//! kernels, the set-up and the verification of solutions all use these.

use std::ops::Range;

use faer::{MatMut, MatRef};
use num_traits::Zero;
use rayon::prelude::*;

use super::{RowSlices, SparseRows};
use crate::numeric::sum_partials;
use crate::precision::Stored;

/// Rows one rayon task handles in sparse kernels.
const ROWS_PER_TASK: usize = 2048;
/// Right-hand sides one pass over a matrix row serves in the block SpMV.
const BLOCK_COLUMNS: usize = 8;
/// Rows [`spmv_block_map`] forms at a time before handing them on (16 KiB of f64 products).
const MAP_ROWS: usize = 256;

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

/// What a block product's X may hold for a matrix stored as S: its compute precision, or a
/// narrower type widened exactly as it is read.
pub trait Operand<S: Stored>: Copy + Sync + Into<S::Compute> {}
impl<S: Stored, X: Copy + Sync + Into<S::Compute>> Operand<S> for X {}

/// Y = A X for column-major blocks of right-hand sides (n × Nrhs), one column included.
/// Tasks take a chunk of rows and a group of up to `BLOCK_COLUMNS` columns, and sum each
/// row for the group's columns side by side (independent chains), the stored values
/// widened in runs of whole rows. (Writing a row of Y across all its columns touches a
/// page per column at every row: 13 ms for Dᵀ x_E with 64 columns at h = 1/256, against
/// under 1 ms for the same bytes in a vector pass.) Each product sums its row's entries in
/// storage order from zero, as [`spmv`] does.
pub fn spmv_block<S: Stored>(
    a: &impl RowSlices<S>,
    x: MatRef<'_, S::Compute>,
    y: MatMut<'_, S::Compute>,
) {
    let BlockProduct {
        x,
        y,
        ldy,
        nrows,
        ncols,
        groups,
        tasks,
    } = BlockProduct::new(a, x, y);
    (0..tasks).into_par_iter().for_each(|task| {
        let (rows, first) = task_block(task, groups, nrows);
        let store = |r: usize, products: &[S::Compute]| {
            for (j, &p) in products.iter().enumerate() {
                // SAFETY: this task alone writes row r of these columns; Y has A's rows
                // and `ncols` columns (checked on entry).
                unsafe { *y.get().add((first + j) * ldy + r) = p };
            }
        };
        // SAFETY: X has `ncols` columns and the rows of A's entries (checked on entry).
        unsafe { rows_on_group(a, &x, first, ncols, rows, store) };
    });
}

/// A pass that consumes A X (a subtraction, a rounding) fused into the block product: each
/// task forms A X on its chunk of rows and group of columns as [`spmv_block`] does,
/// `MAP_ROWS` rows at a time into a buffer on its stack (no allocation), then hands each
/// column's piece to `f(column, first row, products, Y's piece)` to write contiguously
/// (writing across the columns row by row, as the product runs, cost twice the time of
/// the product alone for PSC's Dᵀ). X may be stored narrower than the products (a
/// low-precision correction times the f64 matrix): each value is widened as it is read.
pub fn spmv_block_map<S: Stored, X: Operand<S>, Y: Copy + Send + Sync>(
    a: &impl RowSlices<S>,
    x: MatRef<'_, X>,
    y: MatMut<'_, Y>,
    f: impl Fn(usize, usize, &[S::Compute], &mut [Y]) + Sync,
) {
    let BlockProduct {
        x,
        y,
        ldy,
        nrows,
        ncols,
        groups,
        tasks,
    } = BlockProduct::new(a, x, y);
    (0..tasks).into_par_iter().for_each(|task| {
        let (rows, first) = task_block(task, groups, nrows);
        let width = BLOCK_COLUMNS.min(ncols - first);
        let mut products = [S::Compute::zero(); MAP_ROWS * BLOCK_COLUMNS];
        for start in rows.clone().step_by(MAP_ROWS) {
            let piece = start..(start + MAP_ROWS).min(rows.end);
            let len = piece.len();
            let store = |r: usize, sums: &[S::Compute]| {
                for (j, &p) in sums.iter().enumerate() {
                    products[j * len + r - start] = p;
                }
            };
            // SAFETY: X has `ncols` columns and the rows of A's entries (checked on entry).
            unsafe { rows_on_group(a, &x, first, ncols, piece, store) };
            for j in 0..width {
                // SAFETY: this task alone writes these rows of column first + j, which Y
                // holds (A's rows, `ncols` columns: checked on entry).
                let out = unsafe {
                    std::slice::from_raw_parts_mut(y.get().add((first + j) * ldy + start), len)
                };
                f(first + j, start, &products[j * len..(j + 1) * len], out);
            }
        }
    });
}

/// A block product's operands checked and shared by its tasks: X and Y column-major, Y with
/// A's rows and X's columns; tasks of `ROWS_PER_TASK` rows and `BLOCK_COLUMNS` columns.
struct BlockProduct<T, Y> {
    x: Columns<T>,
    y: SharedMut<Y>,
    ldy: usize,
    nrows: usize,
    ncols: usize,
    groups: usize,
    tasks: usize,
}

impl<T, Y> BlockProduct<T, Y> {
    fn new<S: Stored>(a: &impl RowSlices<S>, x: MatRef<'_, T>, y: MatMut<'_, Y>) -> Self {
        assert_eq!(
            x.ncols(),
            y.ncols(),
            "block SpMV: X and Y have different column counts"
        );
        check_spmv_shapes(a, x.nrows(), y.nrows());
        assert!(
            y.row_stride() == 1 || y.nrows() <= 1,
            "block SpMV needs column-major blocks"
        );
        let (nrows, ncols) = (y.nrows(), y.ncols());
        let groups = ncols.div_ceil(BLOCK_COLUMNS);
        BlockProduct {
            x: Columns::of(x),
            ldy: column_stride(y.col_stride()),
            y: SharedMut(y.as_ptr_mut()),
            nrows,
            ncols,
            groups,
            tasks: nrows.div_ceil(ROWS_PER_TASK) * groups,
        }
    }
}

/// The column-major X of a block product, shared by its tasks.
struct Columns<T> {
    x: *const T,
    ldx: usize,
}
// SAFETY: X is only read while the product runs.
unsafe impl<T: Sync> Send for Columns<T> {}
unsafe impl<T: Sync> Sync for Columns<T> {}

impl<T> Columns<T> {
    fn of(x: MatRef<'_, T>) -> Self {
        assert!(
            x.row_stride() == 1 || x.nrows() <= 1,
            "block SpMV needs column-major blocks"
        );
        Columns {
            x: x.as_ptr(),
            ldx: column_stride(x.col_stride()),
        }
    }
}

/// The rows and the first column of block-product task `task` (chunks of `ROWS_PER_TASK`
/// rows, each split into `groups` groups of `BLOCK_COLUMNS` columns).
fn task_block(task: usize, groups: usize, nrows: usize) -> (Range<usize>, usize) {
    let (chunk, group) = (task / groups, task % groups);
    let rows = chunk * ROWS_PER_TASK..((chunk + 1) * ROWS_PER_TASK).min(nrows);
    (rows, group * BLOCK_COLUMNS)
}

fn column_stride(s: isize) -> usize {
    usize::try_from(s).expect("block SpMV needs positive column strides")
}

/// [`rows_on_columns`] for the up to `BLOCK_COLUMNS` columns from `first` (of `ncols`).
///
/// # Safety
/// As [`rows_on_columns`].
unsafe fn rows_on_group<S: Stored, X: Operand<S>>(
    a: &impl RowSlices<S>,
    x: &Columns<X>,
    first: usize,
    ncols: usize,
    rows: Range<usize>,
    emit: impl FnMut(usize, &[S::Compute]),
) {
    // SAFETY (each arm): the caller's.
    match BLOCK_COLUMNS.min(ncols - first) {
        8 => unsafe { rows_on_columns::<S, X, 8>(a, x, first, rows, emit) },
        7 => unsafe { rows_on_columns::<S, X, 7>(a, x, first, rows, emit) },
        6 => unsafe { rows_on_columns::<S, X, 6>(a, x, first, rows, emit) },
        5 => unsafe { rows_on_columns::<S, X, 5>(a, x, first, rows, emit) },
        4 => unsafe { rows_on_columns::<S, X, 4>(a, x, first, rows, emit) },
        3 => unsafe { rows_on_columns::<S, X, 3>(a, x, first, rows, emit) },
        2 => unsafe { rows_on_columns::<S, X, 2>(a, x, first, rows, emit) },
        1 => unsafe { rows_on_columns::<S, X, 1>(a, x, first, rows, emit) },
        w => unreachable!("block SpMV: groups of 1 to {BLOCK_COLUMNS} columns, not {w}"),
    }
}

/// Entries widened at a time when the storage precision is not the compute one (runs of
/// whole rows, or pieces of a longer row).
const WIDEN_ENTRIES: usize = 512;

/// (A X)[r, j] = Σ_e value_e · X[col_e, j] for the rows `rows` and the W columns from
/// `first`: row by row, the W columns' sums side by side (independent chains, a page per
/// column), each row's W products handed to `emit` in row order.
///
/// # Safety
/// X holds `first + W` columns and the rows of A's columns.
unsafe fn rows_on_columns<S: Stored, X: Operand<S>, const W: usize>(
    a: &impl RowSlices<S>,
    x: &Columns<X>,
    first: usize,
    rows: Range<usize>,
    mut emit: impl FnMut(usize, &[S::Compute]),
) {
    // SAFETY: the columns lie in the block (the caller).
    let xs: [*const X; W] = std::array::from_fn(|j| unsafe { x.x.add((first + j) * x.ldx) });
    let add = |sums: &mut [S::Compute; W], cols: &[u32], values: &[S::Compute]| {
        for (&c, &v) in cols.iter().zip(values) {
            for j in 0..W {
                // SAFETY: c < nrows(X) (the caller).
                sums[j] = sums[j] + v * unsafe { *xs[j].add(c as usize) }.into();
            }
        }
    };
    let (all_cols, all_stored) = a.entries();
    // Entries `window` of A widened into `wide`: runs of whole rows, widened at once (a
    // call per row costs more than the conversion for rows of a few entries).
    let mut wide = [S::Compute::zero(); WIDEN_ENTRIES];
    let mut window = 0..0;
    let last_entry = rows.clone().last().map_or(0, |r| a.row_span(r).end);
    for r in rows {
        let span = a.row_span(r);
        let cols = &all_cols[span.clone()];
        let mut sums = [S::Compute::zero(); W];
        match S::as_compute(all_stored) {
            Some(values) => add(&mut sums, cols, &values[span]),
            None if span.len() <= WIDEN_ENTRIES => {
                if span.end > window.end {
                    window = span.start..last_entry.min(span.start + WIDEN_ENTRIES);
                    S::widen_slice(&all_stored[window.clone()], &mut wide[..window.len()]);
                }
                add(
                    &mut sums,
                    cols,
                    &wide[span.start - window.start..span.end - window.start],
                );
            }
            None => {
                let stored = &all_stored[span];
                for (cols, stored) in cols.chunks(WIDEN_ENTRIES).zip(stored.chunks(WIDEN_ENTRIES)) {
                    let wide = &mut wide[..stored.len()];
                    S::widen_slice(stored, wide);
                    add(&mut sums, cols, wide);
                }
            }
        }
        emit(r, &sums);
    }
}

/// Σ_i f(i, j, (A X)_ij) for every column j of the column-major block X: the block SpMV's
/// products consumed as they are made and never stored (a residual's norm, a quadratic
/// form). Tasks take a chunk of rows and a group of columns as [`spmv_block`] does, reading
/// X where it is (no node-major copy: for a wide block that copy cost more than the
/// product, and its memory was fresh at every call). Each product sums its row's entries
/// in storage order; each column sums its rows in order within a chunk of
/// `ROWS_PER_TASK` rows and the chunks in order, so the sums do not depend on the thread
/// count.
pub fn spmv_block_sums<S: Stored>(
    a: &impl RowSlices<S>,
    x: MatRef<'_, S::Compute>,
    f: impl Fn(usize, usize, S::Compute) -> f64 + Sync,
) -> Vec<f64> {
    check_spmv_shapes(a, x.nrows(), a.nrows());
    let (nrows, ncols) = (a.nrows(), x.ncols());
    if ncols == 0 {
        return Vec::new();
    }
    let x = Columns::of(x);
    let groups = ncols.div_ceil(BLOCK_COLUMNS);
    let tasks = nrows.div_ceil(ROWS_PER_TASK) * groups;
    let partials: Vec<Vec<f64>> = (0..tasks)
        .into_par_iter()
        .map(|task| {
            let (rows, first) = task_block(task, groups, nrows);
            let mut sums = vec![0.0; BLOCK_COLUMNS.min(ncols - first)];
            let add = |r: usize, products: &[S::Compute]| {
                for (j, (s, &p)) in sums.iter_mut().zip(products).enumerate() {
                    *s += f(r, first + j, p);
                }
            };
            // SAFETY: X has `ncols` columns and the rows of A's entries (checked on entry).
            unsafe { rows_on_group(a, &x, first, ncols, rows, add) };
            sums
        })
        .collect();
    // A chunk's groups side by side: each chunk's sums of every column, the chunks in order.
    let chunks: Vec<Vec<f64>> = partials.chunks(groups).map(<[Vec<f64>]>::concat).collect();
    sum_partials(&chunks, ncols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numeric::nrm2;
    use crate::sparse::{Csr, Ell};
    use half::f16;

    /// A random-ish sparse matrix with `n` rows, several entries per row; its values are
    /// multiples of 1/8 (exact in f16).
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

        // f16 storage, f32 arithmetic: all matrix values are exact in f16.
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

    /// Each column of a block product is bitwise the single-vector product (one column
    /// takes the single-vector path).
    #[test]
    fn block_spmv_matches_column_by_column() {
        let n = 4500;
        let a = test_matrix(n);
        for nrhs in [1, 3, 8, 11, 17] {
            // Inexact sums: equal bits need the same order of additions.
            let x = faer::Mat::<f64>::from_fn(n, nrhs, |i, j| {
                ((i * 7 + j * 5) % 19) as f64 / 7.3 - 1.1
            });
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

    /// The column sums of f over the block product equal those over the stored product
    /// (a residual's squares and a quadratic form), on rows longer than a chunk too, and do
    /// not depend on the thread count.
    #[test]
    fn block_sums_equal_sums_over_the_product() {
        let n = 5000;
        let a = test_matrix(n);
        for nrhs in [0, 1, 3, 11] {
            let x = faer::Mat::<f64>::from_fn(n, nrhs, |i, j| {
                ((i * 7 + j * 5) % 19) as f64 / 7.3 - 1.1
            });
            let b = faer::Mat::<f64>::from_fn(n, nrhs, |i, j| ((i + 3 * j) % 5) as f64 - 2.0);
            let mut y = faer::Mat::<f64>::zeros(n, nrhs);
            spmv_block(&a, x.as_ref(), y.as_mut());
            let squares = |i: usize, j: usize, ax: f64| (b[(i, j)] - ax).powi(2);
            let quadratic = |i: usize, j: usize, ax: f64| x[(i, j)] * ax;
            let got = spmv_block_sums(&a, x.as_ref(), squares);
            let form = spmv_block_sums(&a, x.as_ref(), quadratic);
            for j in 0..nrhs {
                let want: f64 = (0..n).map(|i| (b[(i, j)] - y[(i, j)]).powi(2)).sum();
                assert!(
                    (got[j] - want).abs() <= 1e-12 * want,
                    "{} vs {want}",
                    got[j]
                );
                let want: f64 = (0..n).map(|i| x[(i, j)] * y[(i, j)]).sum();
                assert!(
                    (form[j] - want).abs() <= 1e-12 * want.abs(),
                    "{} vs {want}",
                    form[j]
                );
            }
            let single = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap()
                .install(|| spmv_block_sums(&a, x.as_ref(), squares));
            assert_eq!(single, got);
        }
    }

    /// Rows longer than the piece of entries widened at once (and empty rows) in the block
    /// SpMV: the sums carried across pieces give the same values as the single-vector product, in f64
    /// and in f16 storage; whatever Y held before is overwritten.
    #[test]
    fn block_spmv_handles_rows_longer_than_a_widened_piece() {
        let n = 2000;
        let lengths = [
            0,
            1,
            WIDEN_ENTRIES - 1,
            WIDEN_ENTRIES,
            WIDEN_ENTRIES + 1,
            2 * WIDEN_ENTRIES + 7,
            300,
            3,
        ];
        let mut row_ptr = vec![0];
        let (mut cols, mut vals) = (vec![], vec![]);
        for r in 0..n {
            let len = lengths[r % lengths.len()];
            for e in 0..len {
                cols.push(((r * 3 + e * 11) % n) as u32);
                vals.push(((r + 5 * e) % 17) as f64 / 4.0 - 2.0);
            }
            let row = &mut cols[row_ptr[r]..];
            row.sort();
            row_ptr.push(cols.len());
        }
        let a = Csr::new(n, n, row_ptr, cols, vals).unwrap();
        let a16: Csr<f16> = a.convert().unwrap();
        for nrhs in [1, 9, 17] {
            let x = faer::Mat::<f64>::from_fn(n, nrhs, |i, j| ((i * 5 + j * 3) % 13) as f64 - 6.0);
            let mut y = faer::Mat::<f64>::from_fn(n, nrhs, |_, _| f64::NAN);
            spmv_block(&a, x.as_ref(), y.as_mut());
            let x32 = faer::Mat::<f32>::from_fn(n, nrhs, |i, j| x[(i, j)] as f32);
            let mut y32 = faer::Mat::<f32>::from_fn(n, nrhs, |_, _| f32::NAN);
            spmv_block(&a16, x32.as_ref(), y32.as_mut());
            for j in 0..nrhs {
                let xj: Vec<f64> = (0..n).map(|i| x[(i, j)]).collect();
                let expected = dense_matvec(&a, &xj);
                let mut yj = vec![0.0; n];
                spmv(&a, &xj, &mut yj);
                for i in 0..n {
                    assert_eq!(y[(i, j)], yj[i], "row {i}, column {j}");
                    // Values and x are small multiples of 1/4: every sum is exact in f32.
                    assert_eq!(y32[(i, j)] as f64, expected[i], "f16 row {i}, column {j}");
                }
            }
            // The sums see each row's whole product (values are exact: any order agrees).
            let differences = spmv_block_sums(&a, x.as_ref(), |i, j, ax| (ax - y[(i, j)]).abs());
            assert!(differences.iter().all(|&d| d == 0.0), "{differences:?}");
        }
    }
}
