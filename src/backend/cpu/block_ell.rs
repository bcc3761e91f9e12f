//! ELLPACK kernels on node-major blocks of right-hand sides (entry (i, c) of an N × Nrhs
//! block at `i·nrhs + c`), so one read of a matrix row serves every column: the smoothing
//! sweeps, residuals and refinement updates of multigrid.
//!
//! Rows are processed in chunks (one rayon task each). A chunk widens the band of `x` its
//! rows touch, and each slot of the matrix, to the compute precision once (f16 → f32 with
//! the vectorised `half` conversions; f32 and f64 are borrowed, not copied), accumulates
//! `A x` in the compute precision, and rounds its output to the storage precision once.
//! Every kernel also returns [`BlockStats`] of what it stored (per-column sum of squares
//! and largest magnitude, and whether every value fit the storage precision), reduced in
//! chunk order so results do not depend on the number of threads.

use num_traits::Zero;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::precision::{Real, Stored};
use crate::sparse::{Ell, EllLayout, SparseRows};

/// Rows whose `A x` are accumulated together (the accumulators stay in L1/L2).
const SUB_ROWS: usize = 256;
/// Fewest rows in a chunk (one rayon task).
const MIN_CHUNK_ROWS: usize = 2048;

/// A row-major ELLPACK matrix (diagonal first) cut into row chunks for the kernels, with
/// the band of `x` rows each chunk touches and the diagonal on its own. Built together, so
/// the bands always describe this matrix.
#[derive(Clone, Debug)]
pub struct ChunkedEll<S> {
    matrix: Ell<S>,
    diagonal: Vec<S>,
    chunk_rows: usize,
    bands: Vec<(usize, usize)>,
}

impl<S: Stored> ChunkedEll<S> {
    /// Chunks of at least twice the matrix's half bandwidth, so a chunk's band of `x` is at
    /// most about twice the chunk. Needs row-major storage with the diagonal in slot 0.
    pub fn new(matrix: Ell<S>) -> Result<Self> {
        let (n, width, cols) = (matrix.nrows(), matrix.width(), matrix.col_idx());
        if matrix.layout() != EllLayout::RowMajor
            || (0..n).any(|r| width == 0 || cols[r * width] as usize != r)
        {
            return Err(Error::InvalidInput(
                "the CPU block kernels need row-major ELLPACK with the diagonal in slot 0".into(),
            ));
        }
        let half_bandwidth = (0..n)
            .flat_map(|r| {
                cols[r * width..(r + 1) * width]
                    .iter()
                    .map(move |&c| (c as usize).abs_diff(r))
            })
            .max()
            .unwrap_or(0);
        let chunk_rows = (2 * half_bandwidth).max(MIN_CHUNK_ROWS).min(n.max(1));
        let bands = (0..n.div_ceil(chunk_rows))
            .map(|k| {
                let rows = k * chunk_rows..((k + 1) * chunk_rows).min(n);
                let touched = &cols[rows.start * width..rows.end * width];
                let lo = touched.iter().map(|&c| c as usize).min().unwrap_or(0);
                let hi = touched.iter().map(|&c| c as usize + 1).max().unwrap_or(0);
                (lo.min(rows.start), hi.max(rows.end))
            })
            .collect();
        let diagonal = matrix.values().iter().step_by(width).copied().collect();
        Ok(ChunkedEll {
            matrix,
            diagonal,
            chunk_rows,
            bands,
        })
    }

    pub fn matrix(&self) -> &Ell<S> {
        &self.matrix
    }

    pub fn nrows(&self) -> usize {
        self.matrix.nrows()
    }

    pub fn chunk_rows(&self) -> usize {
        self.chunk_rows
    }

    /// f64 slots a kernel needs for its per-chunk statistics with `nrhs` columns.
    pub fn partials_len(&self, nrhs: usize) -> usize {
        self.bands.len() * stats_len(nrhs)
    }

    /// Bytes one pass reads: values and 32-bit column indices.
    pub fn bytes(&self) -> f64 {
        (self.matrix.values().len() * (S::PRECISION.bytes() + 4)) as f64
    }

    /// Bytes the diagonal takes.
    pub fn diagonal_bytes(&self) -> f64 {
        (self.diagonal.len() * S::PRECISION.bytes()) as f64
    }
}

/// What a kernel stored, per column.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockStats {
    pub sumsq: Vec<f64>,
    pub max_abs: Vec<f64>,
    /// Every stored value finite and within the storage precision's range.
    pub in_range: bool,
}

impl BlockStats {
    pub fn norms(&self) -> Vec<f64> {
        self.sumsq.iter().map(|s| s.sqrt()).collect()
    }
}

/// f64 slots of one chunk's statistics: sums of squares, maxima, an out-of-range flag.
pub(crate) fn stats_len(nrhs: usize) -> usize {
    2 * nrhs + 1
}

/// Records the statistics of `values` (node-major, `nrhs` columns, compute precision,
/// before rounding to a storage precision whose largest value is `limit`) into `part`.
///
/// Several independent accumulators per column keep the loop from waiting on one add
/// chain; their order is fixed, so the result does not depend on threads.
pub(crate) fn record_stats<T: Real>(part: &mut [f64], values: &[T], nrhs: usize, limit: f64) {
    const LANES: usize = 4;
    const BLOCK: usize = 8;
    let (sumsq, rest) = part.split_at_mut(nrhs);
    let (max_abs, flag) = rest.split_at_mut(nrhs);
    let mut fold = |c: usize, total: f64, largest: f64| {
        sumsq[c] += total;
        max_abs[c] = max_abs[c].max(largest);
        // NaN makes the sum NaN, ±Inf makes the maximum exceed the limit.
        if total.is_nan() || largest > limit {
            flag[0] = 1.0;
        }
    };
    // Row r goes to lane r mod 4, whatever the number of columns, so a column's sums are
    // the same alone and inside a block.
    if nrhs == 1 {
        let (mut sum, mut max) = ([0.0f64; LANES], [0.0f64; LANES]);
        let mut groups = values.chunks_exact(LANES);
        for group in &mut groups {
            for lane in 0..LANES {
                let a = Real::to_f64(group[lane]).abs();
                sum[lane] += a * a;
                max[lane] = max[lane].max(a);
            }
        }
        for (lane, &v) in groups.remainder().iter().enumerate() {
            let a = Real::to_f64(v).abs();
            sum[lane] += a * a;
            max[lane] = max[lane].max(a);
        }
        let largest = max.iter().fold(0.0f64, |m, &x| m.max(x));
        fold(0, ((sum[0] + sum[1]) + sum[2]) + sum[3], largest);
        return;
    }
    for first in (0..nrhs).step_by(BLOCK) {
        let width = BLOCK.min(nrhs - first);
        let (mut sum, mut max) = ([[0.0f64; BLOCK]; LANES], [[0.0f64; BLOCK]; LANES]);
        let mut add = |lane: usize, row: &[T]| {
            for j in 0..width {
                let a = Real::to_f64(row[first + j]).abs();
                sum[lane][j] += a * a;
                max[lane][j] = max[lane][j].max(a);
            }
        };
        let mut groups = values.chunks_exact(LANES * nrhs);
        for group in &mut groups {
            for (lane, row) in group.chunks_exact(nrhs).enumerate() {
                add(lane, row);
            }
        }
        for (lane, row) in groups.remainder().chunks_exact(nrhs).enumerate() {
            add(lane, row);
        }
        for j in 0..width {
            let total = ((sum[0][j] + sum[1][j]) + sum[2][j]) + sum[3][j];
            let largest = max.iter().fold(0.0f64, |m, lane| m.max(lane[j]));
            fold(first + j, total, largest);
        }
    }
}

/// 1/s per column; a zero scale (an inactive column) gives zero.
pub(crate) fn inverse_scales(scale: &[f64]) -> Vec<f64> {
    scale
        .iter()
        .map(|&s| if s > 0.0 { 1.0 / s } else { 0.0 })
        .collect()
}

/// Sums chunk statistics in chunk order.
pub(crate) fn reduce_stats(partials: &[f64], nrhs: usize) -> BlockStats {
    let mut stats = BlockStats {
        sumsq: vec![0.0; nrhs],
        max_abs: vec![0.0; nrhs],
        in_range: true,
    };
    for part in partials.chunks_exact(stats_len(nrhs)) {
        for c in 0..nrhs {
            stats.sumsq[c] += part[c];
            stats.max_abs[c] = stats.max_abs[c].max(part[nrhs + c]);
        }
        stats.in_range &= part[2 * nrhs] == 0.0;
    }
    stats
}

/// `src` in its compute precision: borrowed when it already is, else widened into `scratch`.
pub(crate) fn widened<'a, S: Stored>(
    src: &'a [S],
    scratch: &'a mut Vec<S::Compute>,
) -> &'a [S::Compute] {
    match S::as_compute(src) {
        Some(same) => same,
        None => {
            scratch.resize(src.len(), S::Compute::zero());
            S::widen_slice(src, scratch);
            scratch
        }
    }
}

/// Scratch buffers of one rayon task.
struct Scratch<T> {
    x: Vec<T>,
    b: Vec<T>,
    slot: Vec<T>,
    diagonal: Vec<T>,
    acc: Vec<T>,
    out: Vec<T>,
}

impl<T: Real> Scratch<T> {
    fn new() -> Self {
        Scratch {
            x: Vec::new(),
            b: Vec::new(),
            slot: Vec::new(),
            diagonal: Vec::new(),
            acc: Vec::new(),
            out: Vec::new(),
        }
    }
}

/// Σ_s v_s x[col_s − lo] for one row of fixed width W, in two interleaved partial sums.
#[inline(always)]
fn row_dot<T: Real, const W: usize>(values: &[T], cols: &[u32], x_band: &[T], lo: usize) -> T {
    let (values, cols): (&[T; W], &[u32; W]) = (
        values.try_into().expect("row of width W"),
        cols.try_into().expect("row of width W"),
    );
    let (mut even, mut odd) = (T::zero(), T::zero());
    for s in 0..W {
        let term = values[s] * x_band[cols[s] as usize - lo];
        if s % 2 == 0 {
            even = even + term;
        } else {
            odd = odd + term;
        }
    }
    even + odd
}

/// acc[i] = Σ_s a(r, s) x(col(r, s)) for the rows of one sub-block (one right-hand side).
fn accumulate_single<T: Real, const W: usize>(
    values: &[T],
    cols: &[u32],
    x_band: &[T],
    lo: usize,
    acc: &mut [T],
) {
    let rows = values.chunks_exact(W).zip(cols.chunks_exact(W));
    for (acc, (row_values, row_cols)) in acc.iter_mut().zip(rows) {
        *acc = row_dot::<T, W>(row_values, row_cols, x_band, lo);
    }
}

/// acc[i·nrhs + c] = Σ_s a(r, s) x(col(r, s), c) for the rows r = `r0 + i` of one sub-block,
/// with `x_band` holding rows `lo..` of x in the compute precision.
#[allow(clippy::too_many_arguments)]
fn accumulate<S: Stored>(
    a: &ChunkedEll<S>,
    r0: usize,
    len: usize,
    x_band: &[S::Compute],
    lo: usize,
    nrhs: usize,
    slot_scratch: &mut Vec<S::Compute>,
    acc: &mut [S::Compute],
) {
    let width = a.matrix.width();
    let range = r0 * width..(r0 + len) * width;
    let values = widened(&a.matrix.values()[range.clone()], slot_scratch);
    let cols = &a.matrix.col_idx()[range];
    if nrhs == 1 {
        // The Q1 stencils: 9 entries per row in 2D, 27 in 3D, unrolled.
        match width {
            9 => return accumulate_single::<_, 9>(values, cols, x_band, lo, acc),
            27 => return accumulate_single::<_, 27>(values, cols, x_band, lo, acc),
            _ => {}
        }
    }
    // Even and odd slots summed apart, then added: the order of `row_dot`, so a column
    // gets the same result alone and inside a block.
    let rows = values.chunks_exact(width).zip(cols.chunks_exact(width));
    for (acc_row, (row_values, row_cols)) in acc.chunks_exact_mut(nrhs).zip(rows) {
        for (c, acc) in acc_row.iter_mut().enumerate() {
            let (mut even, mut odd) = (S::Compute::zero(), S::Compute::zero());
            for (s, (&v, &col)) in row_values.iter().zip(row_cols).enumerate() {
                let term = v * x_band[(col as usize - lo) * nrhs + c];
                if s % 2 == 0 {
                    even = even + term;
                } else {
                    odd = odd + term;
                }
            }
            *acc = even + odd;
        }
    }
}

/// What a sweep computes from a row's `A x`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RowOp {
    /// out = x + ω D⁻¹ (b − A x): one damped Jacobi (Richardson) step.
    Jacobi { omega: f64 },
    /// out = b − A x.
    Residual,
    /// out = A x (b unused).
    Apply,
}

/// One pass over `A` applying `op` to the node-major block `x` (and `b`), written to `out`.
/// `partials` holds [`ChunkedEll::partials_len`] values.
#[allow(clippy::too_many_arguments)]
pub fn sweep<S: Stored>(
    a: &ChunkedEll<S>,
    op: RowOp,
    x: &[S],
    b: &[S],
    nrhs: usize,
    out: &mut [S],
    partials: &mut [f64],
) -> BlockStats {
    let n = a.nrows();
    assert_eq!(x.len(), n * nrhs, "sweep: x is not N × nrhs");
    assert_eq!(out.len(), n * nrhs, "sweep: out is not N × nrhs");
    assert!(
        op == RowOp::Apply || b.len() == n * nrhs,
        "sweep: b is not N × nrhs"
    );
    let omega = match op {
        RowOp::Jacobi { omega } => S::Compute::from_f64(omega),
        _ => S::Compute::zero(),
    };
    partials.fill(0.0);
    out.par_chunks_mut(a.chunk_rows * nrhs)
        .zip(partials.par_chunks_mut(stats_len(nrhs)))
        .enumerate()
        .for_each_init(Scratch::new, |scratch, (k, (out_chunk, part))| {
            let (lo, hi) = a.bands[k];
            let chunk_start = k * a.chunk_rows;
            let Scratch {
                x: xs,
                b: bs,
                slot,
                diagonal,
                acc,
                out: outs,
            } = scratch;
            let x_band = widened(&x[lo * nrhs..hi * nrhs], xs);
            let rows = out_chunk.len() / nrhs;
            let b_chunk = if op == RowOp::Apply {
                &[][..]
            } else {
                widened(&b[chunk_start * nrhs..(chunk_start + rows) * nrhs], bs)
            };
            for sub in (0..rows).step_by(SUB_ROWS) {
                let len = SUB_ROWS.min(rows - sub);
                let r0 = chunk_start + sub;
                acc.resize(len * nrhs, S::Compute::zero());
                accumulate(a, r0, len, x_band, lo, nrhs, slot, acc);
                outs.resize(len * nrhs, S::Compute::zero());
                match op {
                    RowOp::Apply => outs.copy_from_slice(acc),
                    RowOp::Residual => {
                        let b_sub = &b_chunk[sub * nrhs..(sub + len) * nrhs];
                        for ((o, &ax), &b) in outs.iter_mut().zip(acc.iter()).zip(b_sub) {
                            *o = b - ax;
                        }
                    }
                    RowOp::Jacobi { .. } => {
                        let b_sub = &b_chunk[sub * nrhs..(sub + len) * nrhs];
                        let x_sub = &x_band[(r0 - lo) * nrhs..(r0 - lo + len) * nrhs];
                        let d_sub = widened(&a.diagonal[r0..r0 + len], diagonal);
                        for (i, &d) in d_sub.iter().enumerate() {
                            let w = omega / d;
                            for c in i * nrhs..(i + 1) * nrhs {
                                outs[c] = x_sub[c] + w * (b_sub[c] - acc[c]);
                            }
                        }
                    }
                }
                record_stats(part, outs, nrhs, S::MAX);
                S::narrow_slice(outs, &mut out_chunk[sub * nrhs..(sub + len) * nrhs]);
            }
        });
    reduce_stats(partials, nrhs)
}

/// The first damped Jacobi step from x = 0: out = ω D⁻¹ b, with D the matrix diagonal
/// stored separately (`diagonal`), so this step does not read the matrix.
#[allow(clippy::too_many_arguments)]
pub fn jacobi_from_zero<S: Stored>(
    a: &ChunkedEll<S>,
    omega: f64,
    b: &[S],
    nrhs: usize,
    out: &mut [S],
    partials: &mut [f64],
) -> BlockStats {
    let (n, diagonal) = (a.nrows(), &a.diagonal);
    assert_eq!(b.len(), n * nrhs, "jacobi_from_zero: b is not N × nrhs");
    assert_eq!(out.len(), n * nrhs, "jacobi_from_zero: out is not N × nrhs");
    let omega = S::Compute::from_f64(omega);
    partials.fill(0.0);
    out.par_chunks_mut(a.chunk_rows * nrhs)
        .zip(partials.par_chunks_mut(stats_len(nrhs)))
        .enumerate()
        .for_each_init(Scratch::new, |scratch, (k, (out_chunk, part))| {
            let chunk_start = k * a.chunk_rows;
            let rows = out_chunk.len() / nrhs;
            let b_chunk = widened(
                &b[chunk_start * nrhs..(chunk_start + rows) * nrhs],
                &mut scratch.b,
            );
            let diagonal = widened(
                &diagonal[chunk_start..chunk_start + rows],
                &mut scratch.diagonal,
            );
            let outs = &mut scratch.out;
            outs.resize(rows * nrhs, S::Compute::zero());
            for ((o, b), &d) in outs
                .chunks_exact_mut(nrhs)
                .zip(b_chunk.chunks_exact(nrhs))
                .zip(diagonal)
            {
                let w = omega / d;
                for (o, &b) in o.iter_mut().zip(b) {
                    *o = w * b;
                }
            }
            record_stats(part, outs, nrhs, S::MAX);
            S::narrow_slice(outs, out_chunk);
        });
    reduce_stats(partials, nrhs)
}

/// The refinement step's update, fused (SPEC §3.2): u += α_c c and r −= α_c A c for every
/// column c, with A in f64 and the correction c in the finest level's precision. Returns
/// the statistics of the new residual.
#[allow(clippy::too_many_arguments)]
pub fn refinement_update<X: Stored>(
    a: &ChunkedEll<f64>,
    correction: &[X],
    alpha: &[f64],
    nrhs: usize,
    u: &mut [f64],
    r: &mut [f64],
    partials: &mut [f64],
) -> BlockStats {
    let n = a.nrows();
    assert_eq!(
        correction.len(),
        n * nrhs,
        "refinement_update: c is not N × nrhs"
    );
    assert_eq!(alpha.len(), nrhs, "refinement_update: one α per column");
    assert!(u.len() == n * nrhs && r.len() == n * nrhs);
    partials.fill(0.0);
    let chunk = a.chunk_rows * nrhs;
    u.par_chunks_mut(chunk)
        .zip(r.par_chunks_mut(chunk))
        .zip(partials.par_chunks_mut(stats_len(nrhs)))
        .enumerate()
        .for_each_init(
            || (Vec::<X::Compute>::new(), Scratch::<f64>::new()),
            |(narrow, scratch), (k, ((u_chunk, r_chunk), part))| {
                let (lo, hi) = a.bands[k];
                let chunk_start = k * a.chunk_rows;
                let c_band = widened(&correction[lo * nrhs..hi * nrhs], narrow);
                scratch.x.resize(c_band.len(), 0.0);
                for (x_row, c_row) in scratch
                    .x
                    .chunks_exact_mut(nrhs)
                    .zip(c_band.chunks_exact(nrhs))
                {
                    for ((x, &c), &a) in x_row.iter_mut().zip(c_row).zip(alpha) {
                        *x = a * Real::to_f64(c);
                    }
                }
                let rows = u_chunk.len() / nrhs;
                for sub in (0..rows).step_by(SUB_ROWS) {
                    let len = SUB_ROWS.min(rows - sub);
                    let r0 = chunk_start + sub;
                    let Scratch { x, slot, acc, .. } = &mut *scratch;
                    acc.resize(len * nrhs, 0.0);
                    accumulate(a, r0, len, x, lo, nrhs, slot, acc);
                    let range = sub * nrhs..(sub + len) * nrhs;
                    let scaled_c = &x[(r0 - lo) * nrhs..(r0 - lo + len) * nrhs];
                    for (u, &c) in u_chunk[range.clone()].iter_mut().zip(scaled_c) {
                        *u += c;
                    }
                    for (r, &ac) in r_chunk[range.clone()].iter_mut().zip(acc.iter()) {
                        *r -= ac;
                    }
                    record_stats(part, &r_chunk[range], nrhs, f64::MAX);
                }
            },
        );
    reduce_stats(partials, nrhs)
}

/// out = r / s_c, rounded to the storage precision X (s_c = `scale[c]`, a zero scale gives
/// a zero column); the statistics are of the scaled values before rounding.
pub fn scale_into<X: Stored>(
    chunk_rows: usize,
    r: &[f64],
    scale: &[f64],
    nrhs: usize,
    out: &mut [X],
    partials: &mut [f64],
) -> BlockStats {
    assert_eq!(r.len(), out.len(), "scale_into: r and out differ in length");
    assert_eq!(scale.len(), nrhs, "scale_into: one scale per column");
    partials.fill(0.0);
    let inverse = inverse_scales(scale);
    out.par_chunks_mut(chunk_rows * nrhs)
        .zip(r.par_chunks(chunk_rows * nrhs))
        .zip(partials.par_chunks_mut(stats_len(nrhs)))
        .for_each_init(
            Vec::<X::Compute>::new,
            |outs, ((out_chunk, r_chunk), part)| {
                outs.resize(r_chunk.len(), X::Compute::zero());
                for (o_row, r_row) in outs.chunks_exact_mut(nrhs).zip(r_chunk.chunks_exact(nrhs)) {
                    for ((o, &v), &s) in o_row.iter_mut().zip(r_row).zip(&inverse) {
                        *o = X::Compute::from_f64(v * s);
                    }
                }
                record_stats(part, outs, nrhs, X::MAX);
                X::narrow_slice(outs, out_chunk);
            },
        );
    reduce_stats(partials, nrhs)
}
