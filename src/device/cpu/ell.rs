//! ELLPACK kernels on node-major blocks of right-hand sides (entry (i, c) of an N × Nrhs
//! block at `i·nrhs + c`), so one read of a matrix row serves every column: the smoothing
//! sweeps, residuals and refinement updates of multigrid.
//!
//! Rows are processed in chunks (one rayon task each, [`Chunks`]). With one column a chunk
//! widens the band of `x` its rows touch, and each slot of the matrix, to the compute
//! precision once (f16 → f32 with the vectorised conversions; f32 and f64 are borrowed, not
//! copied), accumulates `A x` in the compute precision, and rounds its output to the
//! storage precision once. With more columns a chunk works in tiles of [`TILE`] columns per
//! row and reads x, b and the output where they are, converting each tile as it goes
//! ([`block_rows`], [`update_rows`]): a widened band of a wide block would not stay in
//! cache. Statistics of what each kernel stored are reduced in chunk order.

use num_traits::{Float, Zero};
use rayon::prelude::*;

use super::arena;
use super::simd::{self, SimdLevel, TileIo, TILE};
use super::vector::{fold_column, partials, record_stats, record_sumsq, reduce};
use super::{buffer, buffer_mut, by_precision, Compute, Cpu};
use crate::device::sparse::Chunks;
use crate::device::{Block, EllMatrix, RowOp, Stats, Storage};
use crate::error::{Error, Result};
use crate::precision::{Real, Stored};

/// Rows whose `A x` are accumulated together (the accumulators stay in L1/L2).
const SUB_ROWS: usize = 256;

/// A row-major ELLPACK matrix in S with its chunks.
struct Ell<'a, S> {
    values: &'a [S],
    cols: &'a [u32],
    diagonal: &'a [S],
    width: usize,
    chunks: &'a Chunks,
}

fn ell<'a, S: Storage>(a: &'a EllMatrix<Cpu>, kernel: &str) -> Result<Ell<'a, S>> {
    if a.layout != crate::sparse::EllLayout::RowMajor {
        return Err(Error::Backend(format!(
            "{kernel}: the CPU kernels read row-major ELLPACK"
        )));
    }
    Ok(Ell {
        values: buffer::<S>(&a.values, kernel)?,
        cols: &a.col_idx,
        diagonal: buffer::<S>(&a.diagonal, kernel)?,
        width: a.width,
        chunks: &a.chunks,
    })
}

/// Whether S's values must be widened to be computed with (f16).
fn widens<S: Stored>() -> bool {
    S::as_compute(&[]).is_none()
}

/// Scratch length for widening `len` values of S (zero when S is its own compute type).
fn widen_len<S: Stored>(len: usize) -> usize {
    if widens::<S>() {
        len
    } else {
        0
    }
}

/// `src` in its compute precision: borrowed when it already is, else widened into `scratch`.
fn widened<'a, S: Stored>(src: &'a [S], scratch: &'a mut [S::Compute]) -> &'a [S::Compute] {
    match S::as_compute(src) {
        Some(same) => same,
        None => {
            let scratch = &mut scratch[..src.len()];
            S::widen_slice(src, scratch);
            scratch
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
#[inline(always)]
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

/// acc[i] = Σ_s a(r, s) x(col(r, s)) for the rows r = `r0 + i` of one sub-block and one
/// right-hand side, with `x_band` holding rows `lo..` of x in the compute precision and
/// `values` the sub-block's values in it; compiled for the vector instructions
/// `simd::level` names. (Blocks of columns go through [`block_rows`] and [`update_rows`].)
fn accumulate<T: Real>(
    values: &[T],
    cols: &[u32],
    width: usize,
    x_band: &[T],
    lo: usize,
    acc: &mut [T],
) {
    let args = (values, cols, width, x_band, lo, acc);
    match simd::level() {
        // SAFETY: `simd::level` names only levels this CPU has.
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => unsafe { accumulate_avx512(args) },
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => unsafe { accumulate_avx2(args) },
        _ => accumulate_portable(args),
    }
}

/// The arguments of [`accumulate`].
type AccumulateArgs<'a, T> = (&'a [T], &'a [u32], usize, &'a [T], usize, &'a mut [T]);

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn accumulate_avx2<T: Real>(args: AccumulateArgs<'_, T>) {
    accumulate_portable(args)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn accumulate_avx512<T: Real>(args: AccumulateArgs<'_, T>) {
    accumulate_portable(args)
}

#[inline(always)]
fn accumulate_portable<T: Real>((values, cols, width, x_band, lo, acc): AccumulateArgs<'_, T>) {
    // The Q1 stencils: 9 entries per row in 2D, 27 in 3D, unrolled.
    match width {
        9 => return accumulate_single::<_, 9>(values, cols, x_band, lo, acc),
        27 => return accumulate_single::<_, 27>(values, cols, x_band, lo, acc),
        _ => {}
    }
    // Other widths (Galerkin levels): the same order as `row_dot`, even and odd slots apart.
    let rows = values.chunks_exact(width).zip(cols.chunks_exact(width));
    for (acc, (row_values, row_cols)) in acc.iter_mut().zip(rows) {
        let (mut even, mut odd) = (T::zero(), T::zero());
        for (s, (&v, &col)) in row_values.iter().zip(row_cols).enumerate() {
            let term = v * x_band[col as usize - lo];
            if s % 2 == 0 {
                even = even + term;
            } else {
                odd = odd + term;
            }
        }
        *acc = even + odd;
    }
}

/// The arguments of [`block_rows`]: the sub-block's values in the compute precision, the
/// matrix's column indices and width, the op with ω in the compute precision, x and b
/// whole, the column count, the sub-block's first row, its output rows, its chunk's
/// statistics partials, scratch for each tile's Σ v² and max |v| over the sub-block, and
/// for a row's x offsets.
type BlockRowsArgs<'a, S> = (
    &'a [Compute<S>],
    &'a [u32],
    usize,
    RowOp,
    Compute<S>,
    &'a [S],
    &'a [S],
    usize,
    usize,
    &'a mut [S],
    &'a mut [f64],
    &'a mut [[f64; TILE]],
    &'a mut [[Compute<S>; TILE]],
    &'a mut [usize],
);

/// One sub-block of rows of a pass over A with a block of at least two columns, fused: per
/// tile of [`simd::TILE`] columns and row, A x from the stored x (converted as it is read),
/// the op, the output rounded into storage, and the tile's Σ v² and max |v| (added into
/// `part` at the end of the sub-block). Only the statistics go through (L1) scratch. Each
/// column keeps the order of operations of [`row_dot`] (even and odd slots apart) and of
/// [`record_stats`] (Σ v² in f64 over four interleaved rows), so a column gets the same
/// result and statistics alone and inside a block.
fn block_rows<S: Storage + TileIo>(args: BlockRowsArgs<'_, S>) {
    match simd::level() {
        // SAFETY: `simd::level` names only levels this CPU has (F16C included).
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => unsafe { block_rows_avx512(args) },
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => unsafe { block_rows_avx2(args) },
        _ => block_rows_portable::<S, { SimdLevel::Scalar as u8 }>(args),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn block_rows_avx2<S: Storage + TileIo>(args: BlockRowsArgs<'_, S>) {
    block_rows_portable::<S, { SimdLevel::Avx2 as u8 }>(args)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,f16c")]
unsafe fn block_rows_avx512<S: Storage + TileIo>(args: BlockRowsArgs<'_, S>) {
    block_rows_portable::<S, { SimdLevel::Avx512 as u8 }>(args)
}

#[inline(always)]
fn block_rows_portable<S: Storage + TileIo, const LEVEL: u8>(
    (values, cols, width, op, omega, x, b, nrhs, r0, out, part, sumsq, largest, offsets): BlockRowsArgs<
        '_,
        S,
    >,
) {
    let rows = out.len() / nrhs;
    let cols = &cols[r0 * width..(r0 + rows) * width];
    let zero = Compute::<S>::zero();
    sumsq.fill([0.0; TILE]);
    largest.fill([zero; TILE]);
    let rows_values = values.chunks_exact(width).zip(cols.chunks_exact(width));
    for (i, (row_values, row_cols)) in rows_values.enumerate() {
        // Slot 0 holds the diagonal.
        let w = omega / row_values[0];
        // Where each slot's x row starts (once per row, not per tile).
        for (offset, &col) in offsets.iter_mut().zip(row_cols) {
            *offset = col as usize * nrhs;
        }
        for (tile, c0) in (0..nrhs).step_by(TILE).enumerate() {
            let t = TILE.min(nrhs - c0);
            let x_at = |s: usize| {
                let start = offsets[s] + c0;
                S::load::<LEVEL>(&x[start..start + t])
            };
            let ax = tile_row_sum(row_values, x_at);
            let own = (r0 + i) * nrhs + c0;
            let mut o = [zero; TILE];
            match op {
                RowOp::Apply => o = ax,
                RowOp::Residual => {
                    let bs = S::load::<LEVEL>(&b[own..own + t]);
                    for c in 0..TILE {
                        o[c] = bs[c] - ax[c];
                    }
                }
                RowOp::Jacobi { .. } => {
                    let (bs, xs) = (
                        S::load::<LEVEL>(&b[own..own + t]),
                        S::load::<LEVEL>(&x[own..own + t]),
                    );
                    for c in 0..TILE {
                        o[c] = xs[c] + w * (bs[c] - ax[c]);
                    }
                }
            }
            let (lane, top) = (&mut sumsq[4 * tile + i % 4], &mut largest[tile]);
            for c in 0..TILE {
                let a = o[c].abs();
                // Not `max`: NaN must not be dropped here (it shows in Σ v² instead).
                top[c] = if a > top[c] { a } else { top[c] };
            }
            let mut wide = [0.0f64; TILE];
            for c in 0..TILE {
                wide[c] = o[c].to_f64();
            }
            for c in 0..TILE {
                lane[c] += wide[c] * wide[c];
            }
            S::store::<LEVEL>(&o, &mut out[i * nrhs + c0..i * nrhs + c0 + t]);
        }
    }
    fold_tiles(part, nrhs, sumsq, largest, S::MAX);
}

/// Σ_s v_s x_s over one row for a tile of columns, `tile_at(s)` giving slot s's x tile: even
/// and odd slots summed apart, then added (the order of [`row_dot`]).
#[inline(always)]
fn tile_row_sum<T: Real>(row_values: &[T], tile_at: impl Fn(usize) -> [T; TILE]) -> [T; TILE] {
    let width = row_values.len();
    let (mut even, mut odd) = ([T::zero(); TILE], [T::zero(); TILE]);
    for p in 0..width / 2 {
        let (v0, v1) = (row_values[2 * p], row_values[2 * p + 1]);
        let (x0, x1) = (tile_at(2 * p), tile_at(2 * p + 1));
        for c in 0..TILE {
            even[c] = even[c] + v0 * x0[c];
            odd[c] = odd[c] + v1 * x1[c];
        }
    }
    if width % 2 == 1 {
        let (v, xs) = (row_values[width - 1], tile_at(width - 1));
        for c in 0..TILE {
            even[c] = even[c] + v * xs[c];
        }
    }
    std::array::from_fn(|c| even[c] + odd[c])
}

/// Adds a sub-block's per-tile statistics (four row lanes of Σ v² per tile, max |v| per
/// tile) into the chunk's `part`, column by column; values above `limit` flag the block.
fn fold_tiles<T: Real>(
    part: &mut [f64],
    nrhs: usize,
    sumsq: &[[f64; TILE]],
    largest: &[[T; TILE]],
    limit: f64,
) {
    for c in 0..nrhs {
        let (tile, lane) = (c / TILE, c % TILE);
        let lanes = std::array::from_fn(|k| sumsq[4 * tile + k][lane]);
        let top = largest[tile][lane].to_f64();
        fold_column(part, nrhs, c, lanes, top, limit, true);
    }
}

/// [`sweep`] for blocks of two or more columns: x and b are read where they are (no
/// widened bands), only each sub-block's matrix values are widened (f16).
fn sweep_block<S: Storage + TileIo>(
    a: &Ell<'_, S>,
    op: RowOp,
    x: &[S],
    b: &[S],
    nrhs: usize,
    out: &mut [S],
    stats: &mut Stats<Cpu>,
) {
    let omega = match op {
        RowOp::Jacobi { omega } => Compute::<S>::from_f64(omega),
        _ => Compute::<S>::zero(),
    };
    let chunk_rows = a.chunks.rows;
    let part = partials(stats, a.chunks.count());
    out.par_chunks_mut(chunk_rows * nrhs)
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(nrhs)))
        .enumerate()
        .for_each(|(k, (out_chunk, part))| {
            let rows = out_chunk.len() / nrhs;
            arena::with(|arena| {
                let tiles = nrhs.div_ceil(TILE);
                let (slot, sumsq, largest, offsets) = arena
                    .four::<Compute<S>, [f64; TILE], [Compute<S>; TILE], usize>(
                        widen_len::<S>(SUB_ROWS * a.width),
                        4 * tiles,
                        tiles,
                        a.width,
                    );
                for sub in (0..rows).step_by(SUB_ROWS) {
                    let len = SUB_ROWS.min(rows - sub);
                    let r0 = k * chunk_rows + sub;
                    let values = widened(&a.values[r0 * a.width..(r0 + len) * a.width], slot);
                    let out = &mut out_chunk[sub * nrhs..(sub + len) * nrhs];
                    block_rows::<S>((
                        values, a.cols, a.width, op, omega, x, b, nrhs, r0, out, part, sumsq,
                        largest, offsets,
                    ));
                }
            })
        });
    arena::sync();
    reduce(stats);
}

/// One pass over A applying `op` to the node-major block x (and b), written to `out`.
fn sweep<S: Storage + TileIo>(
    a: &Ell<'_, S>,
    op: RowOp,
    x: &[S],
    b: &[S],
    nrhs: usize,
    out: &mut [S],
    stats: &mut Stats<Cpu>,
) {
    let omega = match op {
        RowOp::Jacobi { omega } => Compute::<S>::from_f64(omega),
        _ => Compute::<S>::zero(),
    };
    if nrhs > 1 {
        return sweep_block(a, op, x, b, nrhs, out, stats);
    }
    let chunk_rows = a.chunks.rows;
    let len = Stats::<Cpu>::len_for(nrhs);
    let part = partials(stats, a.chunks.count());
    out.par_chunks_mut(chunk_rows * nrhs)
        .zip(part.par_chunks_mut(len))
        .enumerate()
        .for_each(|(k, (out_chunk, part))| {
            let (lo, hi) = a.chunks.bands[k];
            let chunk_start = k * chunk_rows;
            let rows = out_chunk.len() / nrhs;
            let b_len = if op == RowOp::Apply { 0 } else { rows * nrhs };
            arena::with(|arena| {
                let [xs, bs, slot, diagonal, acc, outs] = arena.six::<Compute<S>>([
                    widen_len::<S>((hi - lo) * nrhs),
                    widen_len::<S>(b_len),
                    widen_len::<S>(SUB_ROWS * a.width),
                    widen_len::<S>(SUB_ROWS),
                    SUB_ROWS * nrhs,
                    SUB_ROWS * nrhs,
                ]);
                let x_band = widened(&x[lo * nrhs..hi * nrhs], xs);
                // Apply reads no b (an empty slice): only the other ops have a chunk of it.
                let b_start = if b_len == 0 { 0 } else { chunk_start * nrhs };
                let b_chunk = widened(&b[b_start..b_start + b_len], bs);
                for sub in (0..rows).step_by(SUB_ROWS) {
                    let len = SUB_ROWS.min(rows - sub);
                    let r0 = chunk_start + sub;
                    let range = r0 * a.width..(r0 + len) * a.width;
                    let values = widened(&a.values[range.clone()], slot);
                    let (acc, outs) = (&mut acc[..len * nrhs], &mut outs[..len * nrhs]);
                    accumulate(values, &a.cols[range], a.width, x_band, lo, acc);
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
            })
        });
    arena::sync();
    reduce(stats);
}

/// out = ω D⁻¹ b, with D the diagonal stored apart (the matrix is not read).
fn jacobi_from_zero<S: Storage>(
    a: &Ell<'_, S>,
    omega: f64,
    b: &[S],
    nrhs: usize,
    out: &mut [S],
    stats: &mut Stats<Cpu>,
) {
    let omega = Compute::<S>::from_f64(omega);
    let chunk_rows = a.chunks.rows;
    let part = partials(stats, a.chunks.count());
    out.par_chunks_mut(chunk_rows * nrhs)
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(nrhs)))
        .enumerate()
        .for_each(|(k, (out_chunk, part))| {
            let chunk_start = k * chunk_rows;
            let rows = out_chunk.len() / nrhs;
            arena::with(|arena| {
                let [bs, diagonal, outs, ..] = arena.six::<Compute<S>>([
                    widen_len::<S>(rows * nrhs),
                    widen_len::<S>(rows),
                    rows * nrhs,
                    0,
                    0,
                    0,
                ]);
                let b_chunk = widened(&b[chunk_start * nrhs..(chunk_start + rows) * nrhs], bs);
                let diagonal = widened(&a.diagonal[chunk_start..chunk_start + rows], diagonal);
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
            })
        });
    arena::sync();
    reduce(stats);
}

/// The refinement update (SPEC §3.2), fused: u_c += α_c c_c and r_c −= α_c (A c)_c, with A
/// in f64 and the correction in X. Statistics: Σ r² of the new residual, max |c| of the
/// correction.
fn refinement_update<X: Storage + TileIo>(
    a: &Ell<'_, f64>,
    correction: &[X],
    alpha: &[f64],
    nrhs: usize,
    u: &mut [f64],
    r: &mut [f64],
    stats: &mut Stats<Cpu>,
) {
    if nrhs > 1 {
        return refinement_update_block(a, correction, alpha, nrhs, u, r, stats);
    }
    let chunk = a.chunks.rows * nrhs;
    let part = partials(stats, a.chunks.count());
    u.par_chunks_mut(chunk)
        .zip(r.par_chunks_mut(chunk))
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(nrhs)))
        .enumerate()
        .for_each(|(k, ((u_chunk, r_chunk), part))| {
            let (lo, hi) = a.chunks.bands[k];
            let chunk_start = k * a.chunks.rows;
            arena::with(|arena| {
                let (narrow, x, acc, _) = arena.four::<Compute<X>, f64, f64, f64>(
                    widen_len::<X>((hi - lo) * nrhs),
                    (hi - lo) * nrhs,
                    SUB_ROWS * nrhs,
                    0,
                );
                let c_band = widened(&correction[lo * nrhs..hi * nrhs], narrow);
                // α_c · c in f64, and the largest |c| of this chunk's own rows.
                for (x_row, c_row) in x.chunks_exact_mut(nrhs).zip(c_band.chunks_exact(nrhs)) {
                    for ((x, &c), &a) in x_row.iter_mut().zip(c_row).zip(alpha) {
                        *x = a * Real::to_f64(c);
                    }
                }
                let own =
                    &c_band[(chunk_start - lo) * nrhs..(chunk_start - lo) * nrhs + u_chunk.len()];
                for row in own.chunks_exact(nrhs) {
                    for (m, &c) in part[nrhs..2 * nrhs].iter_mut().zip(row) {
                        *m = m.max(Real::to_f64(c).abs());
                    }
                }
                let rows = u_chunk.len() / nrhs;
                for sub in (0..rows).step_by(SUB_ROWS) {
                    let len = SUB_ROWS.min(rows - sub);
                    let r0 = chunk_start + sub;
                    let range = r0 * a.width..(r0 + len) * a.width;
                    let acc = &mut acc[..len * nrhs];
                    accumulate(
                        &a.values[range.clone()],
                        &a.cols[range],
                        a.width,
                        x,
                        lo,
                        acc,
                    );
                    let span = sub * nrhs..(sub + len) * nrhs;
                    let scaled_c = &x[(r0 - lo) * nrhs..(r0 - lo + len) * nrhs];
                    for (u, &c) in u_chunk[span.clone()].iter_mut().zip(scaled_c) {
                        *u += c;
                    }
                    for (r, &ac) in r_chunk[span.clone()].iter_mut().zip(acc.iter()) {
                        *r -= ac;
                    }
                    // Σ r² only: this record's maxima are |c|'s (from above).
                    record_sumsq(part, &r_chunk[span], nrhs);
                }
            })
        });
    arena::sync();
    reduce(stats);
}

/// [`refinement_update`] for blocks of two or more columns: per row and tile of columns,
/// α_c c_c read where it is (converted to f64 as it is read), A (α c) summed as in
/// [`row_dot`], u and r updated, Σ r² in the order of [`record_sumsq`] and max |c| of the
/// row's own correction; no widened bands.
fn refinement_update_block<X: Storage + TileIo>(
    a: &Ell<'_, f64>,
    correction: &[X],
    alpha: &[f64],
    nrhs: usize,
    u: &mut [f64],
    r: &mut [f64],
    stats: &mut Stats<Cpu>,
) {
    let chunk = a.chunks.rows * nrhs;
    let part = partials(stats, a.chunks.count());
    u.par_chunks_mut(chunk)
        .zip(r.par_chunks_mut(chunk))
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(nrhs)))
        .enumerate()
        .for_each(|(k, ((u_chunk, r_chunk), part))| {
            let rows = u_chunk.len() / nrhs;
            arena::with(|arena| {
                let tiles = nrhs.div_ceil(TILE);
                let (sumsq, largest, ..) =
                    arena.four::<[f64; TILE], [f64; TILE], u8, u8>(4 * tiles, tiles, 0, 0);
                for sub in (0..rows).step_by(SUB_ROWS) {
                    let len = SUB_ROWS.min(rows - sub);
                    let span = sub * nrhs..(sub + len) * nrhs;
                    update_rows::<X>((
                        a,
                        correction,
                        alpha,
                        nrhs,
                        k * a.chunks.rows + sub,
                        &mut u_chunk[span.clone()],
                        &mut r_chunk[span],
                        part,
                        sumsq,
                        largest,
                    ));
                }
            })
        });
    arena::sync();
    reduce(stats);
}

/// The arguments of [`update_rows`]: the f64 matrix, the correction, α, the column count,
/// the sub-block's first row, its rows of u and r, its chunk's statistics partials and
/// scratch for the tiles' Σ r² and max |c|.
type UpdateRowsArgs<'a, 'm, X> = (
    &'a Ell<'m, f64>,
    &'a [X],
    &'a [f64],
    usize,
    usize,
    &'a mut [f64],
    &'a mut [f64],
    &'a mut [f64],
    &'a mut [[f64; TILE]],
    &'a mut [[f64; TILE]],
);

/// One sub-block of [`refinement_update_block`], compiled per SIMD level.
fn update_rows<X: Storage + TileIo>(args: UpdateRowsArgs<'_, '_, X>) {
    match simd::level() {
        // SAFETY: `simd::level` names only levels this CPU has (F16C included).
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => unsafe { update_rows_avx512(args) },
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => unsafe { update_rows_avx2(args) },
        _ => update_rows_portable::<X, { SimdLevel::Scalar as u8 }>(args),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn update_rows_avx2<X: Storage + TileIo>(args: UpdateRowsArgs<'_, '_, X>) {
    update_rows_portable::<X, { SimdLevel::Avx2 as u8 }>(args)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,f16c")]
unsafe fn update_rows_avx512<X: Storage + TileIo>(args: UpdateRowsArgs<'_, '_, X>) {
    update_rows_portable::<X, { SimdLevel::Avx512 as u8 }>(args)
}

/// α_c · c_c of one tile in f64 (the lanes past `c.len()` are zero).
#[inline(always)]
fn scaled_tile<X: TileIo, const LEVEL: u8>(scale: &[f64; TILE], c: &[X]) -> [f64; TILE] {
    let c = X::load::<LEVEL>(c);
    let mut wide = [0.0; TILE];
    for j in 0..TILE {
        wide[j] = scale[j] * Real::to_f64(c[j]);
    }
    wide
}

#[inline(always)]
fn update_rows_portable<X: Storage + TileIo, const LEVEL: u8>(
    (a, correction, alpha, nrhs, r0, u, r, part, sumsq, largest): UpdateRowsArgs<'_, '_, X>,
) {
    let width = a.width;
    let rows = u.len() / nrhs;
    sumsq.fill([0.0; TILE]);
    largest.fill([0.0; TILE]);
    for i in 0..rows {
        let row = (r0 + i) * width..(r0 + i + 1) * width;
        let (row_values, row_cols) = (&a.values[row.clone()], &a.cols[row]);
        for (tile, c0) in (0..nrhs).step_by(TILE).enumerate() {
            let t = TILE.min(nrhs - c0);
            let mut scale = [0.0; TILE];
            scale[..t].copy_from_slice(&alpha[c0..c0 + t]);
            let ac = tile_row_sum(row_values, |s| {
                let start = row_cols[s] as usize * nrhs + c0;
                scaled_tile::<X, LEVEL>(&scale, &correction[start..start + t])
            });
            let own_start = (r0 + i) * nrhs + c0;
            let own = X::load::<LEVEL>(&correction[own_start..own_start + t]);
            let local = i * nrhs + c0..i * nrhs + c0 + t;
            let (sumsq, largest) = (&mut sumsq[4 * tile + i % 4], &mut largest[tile]);
            for (j, (u, r)) in u[local.clone()].iter_mut().zip(&mut r[local]).enumerate() {
                *u += scale[j] * Real::to_f64(own[j]);
                *r -= ac[j];
                sumsq[j] += *r * *r;
                let c = Real::to_f64(own[j]).abs();
                largest[j] = if c > largest[j] { c } else { largest[j] };
            }
        }
    }
    // This record's maxima are |c|'s, which no limit applies to.
    fold_tiles(part, nrhs, sumsq, largest, f64::INFINITY);
}

fn check(what: &str, block: &Block<Cpu>, rows: usize, nrhs: usize) -> Result<()> {
    if block.rows() == rows && block.cols() == nrhs {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "{what}: a {}×{} block for a matrix of {rows} rows and {nrhs} columns",
            block.rows(),
            block.cols()
        )))
    }
}

pub(super) fn ell_sweep(
    a: &EllMatrix<Cpu>,
    op: RowOp,
    x: &Block<Cpu>,
    b: Option<&Block<Cpu>>,
    out: &mut Block<Cpu>,
    stats: &mut Stats<Cpu>,
) -> Result<()> {
    let nrhs = x.cols();
    check("ell_sweep x", x, a.nrows, nrhs)?;
    check("ell_sweep out", out, a.nrows, nrhs)?;
    if op != RowOp::Apply && b.is_none() {
        return Err(Error::Backend("ell_sweep: this operation needs b".into()));
    }
    if let Some(b) = b {
        check("ell_sweep b", b, a.nrows, nrhs)?;
    }
    by_precision!(a.precision(), S => {
        let m = ell::<S>(a, "ell_sweep")?;
        let b = match b { Some(b) => buffer::<S>(&b.data, "ell_sweep")?.as_slice(), None => &[] };
        sweep::<S>(&m, op, buffer::<S>(&x.data, "ell_sweep")?, b, nrhs, buffer_mut::<S>(&mut out.data, "ell_sweep")?, stats);
    });
    Ok(())
}

pub(super) fn ell_jacobi_from_zero(
    a: &EllMatrix<Cpu>,
    omega: f64,
    b: &Block<Cpu>,
    out: &mut Block<Cpu>,
    stats: &mut Stats<Cpu>,
) -> Result<()> {
    let nrhs = b.cols();
    check("ell_jacobi_from_zero b", b, a.nrows, nrhs)?;
    check("ell_jacobi_from_zero out", out, a.nrows, nrhs)?;
    by_precision!(a.precision(), S => {
        let m = ell::<S>(a, "ell_jacobi_from_zero")?;
        jacobi_from_zero::<S>(&m, omega, buffer::<S>(&b.data, "ell_jacobi_from_zero")?, nrhs, buffer_mut::<S>(&mut out.data, "ell_jacobi_from_zero")?, stats);
    });
    Ok(())
}

pub(super) fn ell_refine_update(
    a: &EllMatrix<Cpu>,
    c: &Block<Cpu>,
    alpha: &[f64],
    x: &mut Block<Cpu>,
    r: &mut Block<Cpu>,
    stats: &mut Stats<Cpu>,
) -> Result<()> {
    let nrhs = c.cols();
    check("ell_refine_update c", c, a.nrows, nrhs)?;
    check("ell_refine_update x", x, a.nrows, nrhs)?;
    check("ell_refine_update r", r, a.nrows, nrhs)?;
    if alpha.len() != nrhs {
        return Err(Error::Backend("ell_refine_update: one α per column".into()));
    }
    let m = ell::<f64>(a, "ell_refine_update")?;
    let (x, r) = (
        buffer_mut::<f64>(&mut x.data, "ell_refine_update")?,
        buffer_mut::<f64>(&mut r.data, "ell_refine_update")?,
    );
    by_precision!(c.precision(), X => refinement_update::<X>(&m, buffer::<X>(&c.data, "ell_refine_update")?, alpha, nrhs, x, r, stats));
    Ok(())
}
