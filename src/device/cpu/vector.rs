//! Level-1 kernels and per-column statistics.

use num_traits::{Float, Zero};
use rayon::prelude::*;

use super::simd::{self, add_squares_by_four, per_simd_level, row_tiles, SimdLevel, TileIo, TILE};
use super::{buffer, buffer_mut, by_precision, slice, slice_mut, Compute, Cpu, CHUNK};
use crate::device::cg::{self, CgStep};
use crate::device::host::HostArray;
use crate::device::{
    inverse_scale, unsupported, Block, FlagLog, Layout, Scratch, Stats, Storage, VectorKernels,
    View, ViewMut,
};
use crate::error::Result;
use crate::numeric;
use crate::precision::{Precision, Real, Stored};

/// Rows per chunk of the per-column statistics of node-major blocks.
const STATS_ROWS: usize = 4096;

/// dst = src rounded to B (exact when B is at least as wide as A).
pub(super) fn convert_slice<A: Storage, B: Storage>(src: &[A], dst: &mut [B]) {
    use std::any::TypeId;
    let (a, b) = (TypeId::of::<A>(), TypeId::of::<B>());
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| {
            if a == b {
                // SAFETY: A and B are the same type (checked by TypeId).
                let s: &[B] =
                    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const B, s.len()) };
                d.copy_from_slice(s);
            } else if a == TypeId::of::<half::f16>() && b == TypeId::of::<f32>() {
                // SAFETY: A is f16 and B is f32 (checked by TypeId).
                let (s, d) = unsafe {
                    (
                        std::slice::from_raw_parts(s.as_ptr() as *const half::f16, s.len()),
                        std::slice::from_raw_parts_mut(d.as_mut_ptr() as *mut f32, d.len()),
                    )
                };
                <half::f16 as Stored>::widen_slice(s, d);
            } else if a == TypeId::of::<f32>() && b == TypeId::of::<half::f16>() {
                // SAFETY: A is f32 and B is f16 (checked by TypeId).
                let (s, d) = unsafe {
                    (
                        std::slice::from_raw_parts(s.as_ptr() as *const f32, s.len()),
                        std::slice::from_raw_parts_mut(d.as_mut_ptr() as *mut half::f16, d.len()),
                    )
                };
                <half::f16 as Stored>::narrow_slice(s, d);
            } else {
                d.iter_mut()
                    .zip(s)
                    .for_each(|(d, s)| *d = B::from_f64(s.to_f64()));
            }
        });
}

/// y = α x + β y in T's compute precision.
fn axpby<T: Storage>(alpha: f64, x: &[T], beta: f64, y: &mut [T]) {
    let (alpha, beta) = (Compute::<T>::from_f64(alpha), Compute::<T>::from_f64(beta));
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(y, x)| {
            for (y, &x) in y.iter_mut().zip(x) {
                *y = T::from_compute(alpha * x.to_compute() + beta * y.to_compute());
            }
        });
}

/// Writes Σ v², max |v| of `values` (node-major, `nrhs` columns, compute precision, before
/// rounding to a storage precision whose largest value is `limit`) and an out-of-range flag
/// into `part` (2·nrhs + 1 values, added to what it holds).
///
/// Rows go to four interleaved accumulators (row r to lane r mod 4) whatever the number of
/// columns, so a column's sums are the same alone and inside a block.
pub(super) fn record_stats<T: Real>(part: &mut [f64], values: &[T], nrhs: usize, limit: f64) {
    let args = (part, values, nrhs, limit);
    match simd::level() {
        // SAFETY: `simd::level` names only levels this CPU has.
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => unsafe { record_avx512(args) },
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => unsafe { record_avx2(args) },
        _ => record_portable(args),
    }
}

/// The arguments of [`record_stats`].
type RecordArgs<'a, T> = (&'a mut [f64], &'a [T], usize, f64);

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn record_avx2<T: Real>(args: RecordArgs<'_, T>) {
    record_portable(args)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn record_avx512<T: Real>(args: RecordArgs<'_, T>) {
    record_portable(args)
}

/// Folds one column's four lane sums (in lane order) and largest magnitude into `part`.
#[inline(always)]
pub(super) fn fold_column(
    part: &mut [f64],
    nrhs: usize,
    c: usize,
    lanes: [f64; 4],
    largest: f64,
    limit: f64,
) {
    let total = ((lanes[0] + lanes[1]) + lanes[2]) + lanes[3];
    part[c] += total;
    part[nrhs + c] = part[nrhs + c].max(largest);
    // NaN makes the sum NaN (or, without sums, the maximum: `TileIo::fold_magnitudes`),
    // ±Inf makes the maximum exceed the limit.
    if total.is_nan() || largest.is_nan() || largest > limit {
        part[2 * nrhs] = 1.0;
    }
}

/// One column's statistics gathered tile by tile inside a fused kernel: bitwise those of
/// [`record_stats`] on the same values in the same order, Σ v² in four lanes (value r of
/// the record to lane r mod 4) and max |v| per lane of a tile.
pub(super) struct TileStats<T> {
    /// The Σ v² lanes, rotated left by `shift`: lane l here is the record's lane
    /// (l + shift) mod 4, so lane l of a tile adds to lane l.
    lanes: [f64; 4],
    largest: [T; TILE],
    /// The record's position mod 4 of the first value of the tiles being added.
    shift: usize,
}

impl<T: Real> TileStats<T> {
    #[inline(always)]
    pub(super) fn new() -> Self {
        Self {
            lanes: [0.0; 4],
            largest: [T::zero(); TILE],
            shift: 0,
        }
    }

    /// The tiles added next start at value `first` of the record (and each a multiple of
    /// [`TILE`] values after it), as the lines of a 3D plane do.
    #[inline(always)]
    pub(super) fn start_at(&mut self, first: usize) {
        let by = (first + 4 - self.shift) % 4;
        let l = self.lanes;
        self.lanes = [l[by], l[(by + 1) % 4], l[(by + 2) % 4], l[(by + 3) % 4]];
        self.shift = first % 4;
    }

    /// Adds the first `t` values of the tile `o`.
    #[inline(always)]
    pub(super) fn add<S: TileIo<Compute = T>, const LEVEL: u8>(&mut self, o: &[T; TILE], t: usize) {
        // The lanes past a partial tile are padding: counted as zeros, which change neither
        // sum nor maximum (the same bits as leaving them out), so the statistics stay
        // full-width register operations. (Whole tiles apart: selects on `t` in every lane
        // make LLVM split the kernel's tiles into 1-, 2-, 4- and 8-lane pieces.)
        match <&[T; TILE]>::try_from(&o[..t]) {
            Ok(whole) => self.add_whole::<S, LEVEL>(whole),
            Err(_) => self.add_whole::<S, LEVEL>(&zero_past(o, t)),
        }
    }

    #[inline(always)]
    fn add_whole<S: TileIo<Compute = T>, const LEVEL: u8>(&mut self, o: &[T; TILE]) {
        // A NaN leaves the maximum as it is; it shows in Σ v².
        S::fold_largest::<LEVEL>(&mut self.largest, o);
        add_squares_by_four::<LEVEL>(&S::widen::<LEVEL>(o), &mut self.lanes);
    }

    /// Folds the column into `part` (one column's partials), flagging values above `limit`.
    #[inline(always)]
    pub(super) fn fold(mut self, part: &mut [f64], limit: f64) {
        self.start_at(0);
        let top = self.largest.iter().fold(0.0f64, |m, &a| m.max(a.to_f64()));
        fold_column(part, 1, 0, self.lanes, top, limit);
    }
}

/// Adds Σ v² of the first `t` values of the tile `o` (the first on a multiple of 4 of the
/// record) into `lanes` in the order of [`record_stats`]: value r to lane r mod 4.
#[inline(always)]
pub(super) fn tile_sum_of_squares<S: TileIo, const LEVEL: u8>(
    o: &[Compute<S>; TILE],
    t: usize,
    lanes: &mut [f64; 4],
) {
    let wide = match <&[Compute<S>; TILE]>::try_from(&o[..t]) {
        Ok(whole) => S::widen::<LEVEL>(whole),
        Err(_) => S::widen::<LEVEL>(&zero_past(o, t)),
    };
    add_squares_by_four::<LEVEL>(&wide, lanes);
}

/// The tile with its lanes from `t` on zero (the padding of a partial tile).
#[inline(always)]
fn zero_past<T: Real>(o: &[T; TILE], t: usize) -> [T; TILE] {
    let mut padded = [T::zero(); TILE];
    padded[..t].copy_from_slice(&o[..t]);
    padded
}

/// One row's tile of a block kernel's output `o` into its statistics: Σ v² (in f64, into
/// the row's lane: the order of [`record_stats`]) and max |v| into `top`, or without norms
/// only max |v| ([`TileIo::fold_magnitudes`], which keeps a NaN).
#[inline(always)]
pub(super) fn record_tile<S: TileIo>(
    norms: bool,
    o: &[Compute<S>; TILE],
    lane: &mut [f64; TILE],
    top: &mut [Compute<S>; TILE],
) {
    if norms {
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
    } else {
        S::fold_magnitudes(top, o);
    }
}

/// Adds a sub-block's per-tile statistics (four row lanes of Σ v² per tile, max |v| per
/// tile) into the chunk's `part`, column by column; values above `limit` flag the block.
pub(super) fn fold_tiles<T: Real>(
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
        fold_column(part, nrhs, c, lanes, top, limit);
    }
}

#[inline(always)]
fn record_portable<T: Real>((part, values, nrhs, limit): RecordArgs<'_, T>) {
    const LANES: usize = 4;
    /// Columns summed in one pass over the rows (their sums stay in L1).
    const BLOCK: usize = 64;
    if nrhs == 1 {
        let (mut sum, mut max) = ([0.0f64; LANES], [0.0f64; LANES]);
        let mut groups = values.chunks_exact(LANES);
        for group in &mut groups {
            for lane in 0..LANES {
                let a = Real::to_f64(group[lane]).abs();
                sum[lane] += a * a;
                max[lane] = if a > max[lane] { a } else { max[lane] };
            }
        }
        for (lane, &v) in groups.remainder().iter().enumerate() {
            let a = Real::to_f64(v).abs();
            sum[lane] += a * a;
            max[lane] = if a > max[lane] { a } else { max[lane] };
        }
        let largest = max.iter().fold(0.0f64, |m, &x| m.max(x));
        fold_column(part, 1, 0, sum, largest, limit);
        return;
    }
    for first in (0..nrhs).step_by(BLOCK) {
        let width = BLOCK.min(nrhs - first);
        let (mut sum, mut max) = ([[0.0f64; BLOCK]; LANES], [0.0f64; BLOCK]);
        for (r, row) in values.chunks_exact(nrhs).enumerate() {
            let sum = &mut sum[r % LANES][..width];
            let max = &mut max[..width];
            for ((s, m), &v) in sum
                .iter_mut()
                .zip(max.iter_mut())
                .zip(&row[first..first + width])
            {
                let a = Real::to_f64(v).abs();
                *s += a * a;
                *m = if a > *m { a } else { *m };
            }
        }
        for j in 0..width {
            let lanes = [sum[0][j], sum[1][j], sum[2][j], sum[3][j]];
            fold_column(part, nrhs, first + j, lanes, max[j], limit);
        }
    }
}

/// The partial statistics of `chunks` chunks of `stats`'s columns, zeroed (grown on first
/// use).
pub(super) fn partials(stats: &mut Stats<Cpu>, chunks: usize) -> &mut [f64] {
    let len = chunks * Stats::<Cpu>::len_for(stats.nrhs());
    let partials = stats.partials.vec_mut();
    partials.clear();
    partials.resize(len, 0.0);
    partials
}

/// Adds the chunk partials in chunk order into the reduced statistics.
pub(super) fn reduce(stats: &mut Stats<Cpu>) {
    let nrhs = stats.nrhs();
    let Stats { partials, host, .. } = stats;
    host.fill(0.0);
    for part in partials.chunks_exact(Stats::<Cpu>::len_for(nrhs)) {
        for c in 0..nrhs {
            host[c] += part[c];
            host[nrhs + c] = host[nrhs + c].max(part[nrhs + c]);
        }
        host[2 * nrhs] = host[2 * nrhs].max(part[2 * nrhs]);
    }
    stats.on_device = false;
}

/// Statistics of a column-major block: each column's chunks (fixed by the column length)
/// are recorded apart (four interleaved lanes, vectorised: [`record_stats`]) and added in
/// order.
fn col_major_stats<T: Storage>(x: &[T], rows: usize, nrhs: usize, stats: &mut Stats<Cpu>) {
    let chunk = numeric::reduction_chunk(rows).max(1);
    let per_column = rows.div_ceil(chunk).max(1);
    let len = Stats::<Cpu>::len_for(nrhs);
    let part = partials(stats, per_column * nrhs);
    part.par_chunks_mut(len).enumerate().for_each(|(k, p)| {
        let (c, q) = (k / per_column, k % per_column);
        let range = c * rows + (q * chunk).min(rows)..c * rows + ((q + 1) * chunk).min(rows);
        let mut local = [0.0f64; 3];
        let values = &x[range];
        match T::as_compute(values) {
            Some(values) => record_stats(&mut local, values, 1, T::MAX),
            None => super::arena::with(|a| {
                let wide = a.one::<Compute<T>>(0, values.len());
                T::widen_slice(values, wide);
                record_stats(&mut local, wide, 1, T::MAX);
            }),
        }
        p[c] = local[0];
        p[nrhs + c] = local[1];
        p[2 * nrhs] = local[2];
    });
    super::arena::sync();
    reduce(stats);
}

fn node_major_stats<T: Storage>(x: &[T], nrhs: usize, stats: &mut Stats<Cpu>) {
    let rows = x.len() / nrhs.max(1);
    let len = Stats::<Cpu>::len_for(nrhs);
    let part = partials(stats, rows.div_ceil(STATS_ROWS).max(1));
    part.par_chunks_mut(len)
        .zip(x.par_chunks(STATS_ROWS * nrhs))
        .for_each(|(p, chunk)| {
            super::arena::with(|a| {
                let wide = a.one::<Compute<T>>(0, chunk.len());
                wide.iter_mut()
                    .zip(chunk)
                    .for_each(|(w, v)| *w = v.to_compute());
                record_stats(p, wide, nrhs, T::MAX);
            })
        });
    super::arena::sync();
    reduce(stats);
}

/// dst = src / s_c per column, rounded to B; statistics of the scaled values before
/// rounding (node-major: rows in chunks; column-major: column by column).
fn scale_columns<A: Storage + TileIo, B: Storage + TileIo>(
    src: &[A],
    layout: Layout,
    rows: usize,
    scale: &[f64],
    dst: &mut [B],
    stats: &mut Stats<Cpu>,
) {
    let nrhs = scale.len();
    let len = Stats::<Cpu>::len_for(nrhs);
    match layout {
        Layout::NodeMajor => {
            let chunks = rows.div_ceil(STATS_ROWS).max(1);
            let norms = stats.norms();
            let part = partials(stats, chunks);
            if nrhs == 1 {
                let factor = inverse_scale(scale[0]);
                // One column: contiguous; three vectorised passes over each chunk in scratch.
                dst.par_chunks_mut(STATS_ROWS)
                    .zip(src.par_chunks(STATS_ROWS))
                    .zip(part.par_chunks_mut(len))
                    .for_each(|((d, s), p)| {
                        super::arena::with(|a| {
                            let outs = a.one::<Compute<B>>(0, s.len());
                            for (o, v) in outs.iter_mut().zip(s) {
                                *o = Compute::<B>::from_f64(v.to_f64() * factor);
                            }
                            record_stats(p, outs, 1, B::MAX);
                            B::narrow_slice(outs, d);
                        })
                    });
                super::arena::sync();
                return reduce(stats);
            }
            dst.par_chunks_mut(STATS_ROWS * nrhs)
                .zip(src.par_chunks(STATS_ROWS * nrhs))
                .zip(part.par_chunks_mut(len))
                .for_each(|((d, s), p)| {
                    super::arena::with(|a| {
                        let tiles = nrhs.div_ceil(TILE);
                        let (sumsq, largest, factors, _) = a
                            .four::<[f64; TILE], [Compute<B>; TILE], f64, u8>(
                                4 * tiles,
                                tiles,
                                nrhs,
                                0,
                            );
                        for (f, &column_scale) in factors.iter_mut().zip(scale) {
                            *f = inverse_scale(column_scale);
                        }
                        scale_rows::<A, B>((s, factors, norms, d, p, sumsq, largest));
                    })
                });
            super::arena::sync();
        }
        Layout::ColMajor => {
            let part = partials(stats, nrhs);
            dst.par_chunks_mut(rows.max(1))
                .zip(src.par_chunks(rows.max(1)))
                .zip(part.par_chunks_mut(len))
                .enumerate()
                .for_each(|(c, ((d, s), p))| {
                    let inverse = inverse_scale(scale[c]);
                    // As one node-major column: the values in scratch, then their
                    // statistics in lanes and the rounding into storage, each vectorised.
                    super::arena::with(|a| {
                        let outs = a.one::<Compute<B>>(0, s.len());
                        for (o, v) in outs.iter_mut().zip(s) {
                            *o = Compute::<B>::from_f64(v.to_f64() * inverse);
                        }
                        let mut column = [0.0; 3];
                        record_stats(&mut column, outs, 1, B::MAX);
                        (p[c], p[nrhs + c], p[2 * nrhs]) = (column[0], column[1], column[2]);
                        B::narrow_slice(outs, d);
                    })
                });
            super::arena::sync();
        }
    }
    reduce(stats);
}

/// The arguments of [`scale_rows`]: a chunk's rows of src, 1 / s_c per column, whether Σ v²
/// is kept, the chunk's rows of dst, its statistics partials, and scratch for Σ v² (four
/// row lanes per tile) and max |v| per tile.
type ScaleRowsArgs<'a, A, B> = (
    &'a [A],
    &'a [f64],
    bool,
    &'a mut [B],
    &'a mut [f64],
    &'a mut [[f64; TILE]],
    &'a mut [[Compute<B>; TILE]],
);

per_simd_level! {
    /// One chunk of [`scale_columns`] on a node-major block, fused: per row and tile of
    /// columns v / s_c rounded into storage, with the statistics of what was stored (in the
    /// order of [`record_stats`] over the chunk).
    fn scale_rows<A, B>(ScaleRowsArgs<'_, A, B>) => scale_rows_portable
}

#[inline(always)]
fn scale_rows_portable<A: Storage + TileIo, B: Storage + TileIo, const LEVEL: u8>(
    (src, factors, norms, dst, part, sumsq, largest): ScaleRowsArgs<'_, A, B>,
) {
    let nrhs = factors.len();
    sumsq.fill([0.0; TILE]);
    largest.fill([Compute::<B>::zero(); TILE]);
    let rows = dst.chunks_exact_mut(nrhs).zip(src.chunks_exact(nrhs));
    for (i, (d, s)) in rows.enumerate() {
        row_tiles!(nrhs, i, sumsq, largest, |c0, t, lane, top| {
            scale_tile::<A, B, LEVEL>(s, factors, c0, t, norms, d, lane, top)
        });
    }
    fold_tiles(part, nrhs, sumsq, largest, B::MAX);
}

/// `t` columns from `c0` of one row: v / s_c rounded into `dst`, with their statistics.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn scale_tile<A: TileIo, B: TileIo, const LEVEL: u8>(
    src: &[A],
    factors: &[f64],
    c0: usize,
    t: usize,
    norms: bool,
    dst: &mut [B],
    lane: &mut [f64; TILE],
    top: &mut [Compute<B>; TILE],
) {
    let v = A::load_f64::<LEVEL>(&src[c0..c0 + t]);
    let mut factor = [0.0; TILE];
    factor[..t].copy_from_slice(&factors[c0..c0 + t]);
    let mut scaled = [0.0; TILE];
    for c in 0..TILE {
        scaled[c] = v[c] * factor[c];
    }
    let o = B::narrow::<LEVEL>(&scaled);
    record_tile::<B>(norms, &o, lane, top);
    B::store::<LEVEL>(&o, &mut dst[c0..c0 + t]);
}

/// dst (node-major k columns) from src (column-major), or back, in tiles that keep both
/// sides' accesses sequential: to node-major, each task takes whole rows and reads every
/// column's [`RELAYOUT_ROWS`] values of a tile at once; to column-major, each task takes
/// [`RELAYOUT_COLUMNS`] whole columns and reads one stretch of every row (a reader going
/// down one column alone would touch every cache line of the node-major block per column).
fn relayout<A: Storage, B: Storage>(
    src: &[A],
    src_layout: Layout,
    rows: usize,
    cols: usize,
    dst: &mut [B],
) {
    match src_layout {
        Layout::ColMajor => dst
            .par_chunks_mut(STATS_ROWS * cols)
            .enumerate()
            .for_each(|(k, d)| {
                for (t, tile) in d.chunks_mut(RELAYOUT_ROWS * cols).enumerate() {
                    let first = k * STATS_ROWS + t * RELAYOUT_ROWS;
                    let tile_rows = tile.len() / cols;
                    for c in 0..cols {
                        let column = &src[c * rows + first..c * rows + first + tile_rows];
                        for (i, &v) in column.iter().enumerate() {
                            tile[i * cols + c] = B::from_f64(v.to_f64());
                        }
                    }
                }
            }),
        Layout::NodeMajor => dst
            .par_chunks_mut(rows.max(1) * RELAYOUT_COLUMNS)
            .enumerate()
            .for_each(|(g, d)| {
                let first = g * RELAYOUT_COLUMNS;
                let width = d.len() / rows.max(1);
                // A tile of rows gathered first, then written as one stretch per column.
                let mut tile = [[B::default(); RELAYOUT_ROWS]; RELAYOUT_COLUMNS];
                for r0 in (0..rows).step_by(RELAYOUT_ROWS) {
                    let len = RELAYOUT_ROWS.min(rows - r0);
                    for (i, row) in src[r0 * cols..(r0 + len) * cols]
                        .chunks_exact(cols)
                        .enumerate()
                    {
                        for (j, &v) in row[first..first + width].iter().enumerate() {
                            tile[j][i] = B::from_f64(v.to_f64());
                        }
                    }
                    for (j, column) in tile.iter().enumerate().take(width) {
                        d[j * rows + r0..j * rows + r0 + len].copy_from_slice(&column[..len]);
                    }
                }
            }),
    }
}

/// Rows of a tile of [`relayout`] to node-major (each column's stretch: 512 bytes of f64).
const RELAYOUT_ROWS: usize = 64;
/// Columns of a task of [`relayout`] to column-major (one cache line of a row in f64).
const RELAYOUT_COLUMNS: usize = 8;

impl VectorKernels for Cpu {
    fn fill(&self, x: ViewMut<'_, Self>, value: f64) -> Result<()> {
        by_precision!(x.precision(), T => {
            let v = <T as Stored>::from_f64(value);
            slice_mut::<T>(x, "fill")?.par_chunks_mut(CHUNK).for_each(|c| c.fill(v));
        });
        Ok(())
    }

    fn copy_unchecked(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()> {
        by_precision!(src.precision(), A => by_precision!(dst.precision(), B => {
            convert_slice::<A, B>(slice::<A>(&src, "copy")?, slice_mut::<B>(dst, "copy")?);
        }));
        Ok(())
    }

    fn axpby_unchecked(
        &self,
        alpha: f64,
        x: View<'_, Self>,
        beta: f64,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        by_precision!(x.precision(), T => axpby::<T>(alpha, slice::<T>(&x, "axpby")?, beta, slice_mut::<T>(y, "axpby")?));
        Ok(())
    }

    fn scale(&self, alpha: f64, x: ViewMut<'_, Self>) -> Result<()> {
        by_precision!(x.precision(), T => {
            let a = <Compute<T> as Real>::from_f64(alpha);
            slice_mut::<T>(x, "scale")?.par_chunks_mut(CHUNK).for_each(|c| {
                c.iter_mut().for_each(|x| *x = T::from_compute(a * x.to_compute()))
            });
        });
        Ok(())
    }

    fn scaled_product_unchecked(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        by_precision!(x.precision(), T => {
            let a = <Compute<T> as Real>::from_f64(alpha);
            let (d, x) = (slice::<T>(&d, "scaled_product")?, slice::<T>(&x, "scaled_product")?);
            slice_mut::<T>(y, "scaled_product")?
                .par_chunks_mut(CHUNK)
                .zip(d.par_chunks(CHUNK).zip(x.par_chunks(CHUNK)))
                .for_each(|(y, (d, x))| {
                    for ((y, d), x) in y.iter_mut().zip(d).zip(x) {
                        *y = T::from_compute(a * d.to_compute() * x.to_compute());
                    }
                });
        });
        Ok(())
    }

    fn scaled_product_add_unchecked(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        z: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        by_precision!(x.precision(), T => {
            let a = <Compute<T> as Real>::from_f64(alpha);
            let (d, x, z) = (
                slice::<T>(&d, "scaled_product_add")?,
                slice::<T>(&x, "scaled_product_add")?,
                slice::<T>(&z, "scaled_product_add")?,
            );
            slice_mut::<T>(y, "scaled_product_add")?
                .par_chunks_mut(CHUNK)
                .zip(d.par_chunks(CHUNK).zip(x.par_chunks(CHUNK).zip(z.par_chunks(CHUNK))))
                .for_each(|(y, (d, (x, z)))| {
                    for (((y, d), x), z) in y.iter_mut().zip(d).zip(x).zip(z) {
                        *y = T::from_compute(
                            y.to_compute() + a * d.to_compute() * (x.to_compute() - z.to_compute()),
                        );
                    }
                });
        });
        Ok(())
    }

    fn dot_unchecked(&self, x: View<'_, Self>, y: View<'_, Self>) -> Result<f64> {
        match x.precision() {
            Precision::F64 => Ok(numeric::dot(
                slice::<f64>(&x, "dot")?,
                slice::<f64>(&y, "dot")?,
            )),
            Precision::F32 => {
                Ok(numeric::dot(slice::<f32>(&x, "dot")?, slice::<f32>(&y, "dot")?) as f64)
            }
            p => Err(unsupported("dot", &[p])),
        }
    }

    fn nrm2(&self, x: View<'_, Self>) -> Result<f64> {
        match x.precision() {
            Precision::F64 => Ok(numeric::nrm2(slice::<f64>(&x, "nrm2")?)),
            Precision::F32 => Ok(numeric::nrm2(slice::<f32>(&x, "nrm2")?) as f64),
            p => Err(unsupported("nrm2", &[p])),
        }
    }

    fn sum(&self, x: View<'_, Self>) -> Result<f64> {
        match x.precision() {
            Precision::F64 => Ok(numeric::sum(slice::<f64>(&x, "sum")?)),
            Precision::F32 => Ok(numeric::sum(slice::<f32>(&x, "sum")?) as f64),
            p => Err(unsupported("sum", &[p])),
        }
    }

    fn shift(&self, x: ViewMut<'_, Self>, value: f64) -> Result<()> {
        by_precision!(x.precision(), T => {
            let v = <Compute<T> as Real>::from_f64(value);
            slice_mut::<T>(x, "shift")?.par_chunks_mut(CHUNK).for_each(|c| {
                c.iter_mut().for_each(|x| *x = T::from_compute(x.to_compute() + v))
            });
        });
        Ok(())
    }

    fn relayout_unchecked(&self, src: &Block<Self>, dst: &mut Block<Self>) -> Result<()> {
        let (rows, cols, layout) = (src.rows(), src.cols(), src.layout());
        by_precision!(src.precision(), A => by_precision!(dst.precision(), B => {
            relayout::<A, B>(buffer::<A>(&src.data, "relayout")?, layout, rows, cols, buffer_mut::<B>(&mut dst.data, "relayout")?);
        }));
        Ok(())
    }

    fn log_range_flag(&self, stats: &Stats<Self>, log: &mut FlagLog<Self>) -> Result<()> {
        let slot = log.next_slot("log_range_flag", 1)?;
        log.flags[slot] = stats.host[2 * stats.nrhs()];
        log.len += 1;
        Ok(())
    }

    fn column_stats_unchecked(&self, x: &Block<Self>, stats: &mut Stats<Self>) -> Result<()> {
        by_precision!(x.precision(), T => {
            let v = buffer::<T>(&x.data, "column_stats")?;
            match x.layout() {
                Layout::ColMajor => col_major_stats::<T>(v, x.rows(), x.cols(), stats),
                Layout::NodeMajor => node_major_stats::<T>(v, x.cols(), stats),
            }
        });
        Ok(())
    }

    fn column_dots_unchecked(
        &self,
        x: &Block<Self>,
        y: &Block<Self>,
        out: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<()> {
        by_precision!(x.precision(), T => column_dots::<T>(
            buffer::<T>(&x.data, "column_dots")?,
            buffer::<T>(&y.data, "column_dots")?,
            x.layout(),
            x.rows(),
            out,
            scratch.0.vec_mut(),
        ));
        Ok(())
    }

    fn column_dots_to_unchecked(
        &self,
        x: &Block<Self>,
        y: &Block<Self>,
        out: &mut HostArray<f64>,
        at: usize,
        scratch: &mut Scratch<Self>,
    ) -> Result<()> {
        let cols = x.cols();
        self.column_dots_unchecked(x, y, &mut out[at..at + cols], scratch)
    }

    fn column_axpby_from_unchecked(
        &self,
        coefficients: &HostArray<f64>,
        alpha: usize,
        x: &Block<Self>,
        beta: usize,
        y: &mut Block<Self>,
    ) -> Result<()> {
        let cols = x.cols();
        self.column_axpby_unchecked(
            &coefficients[alpha..alpha + cols],
            x,
            &coefficients[beta..beta + cols],
            y,
        )
    }

    fn cg_scalars_unchecked(
        &self,
        step: CgStep,
        scalars: &mut HostArray<f64>,
        cols: usize,
    ) -> Result<()> {
        cg::step_on_host(step, scalars, cols);
        Ok(())
    }

    fn column_axpby_unchecked(
        &self,
        alpha: &[f64],
        x: &Block<Self>,
        beta: &[f64],
        y: &mut Block<Self>,
    ) -> Result<()> {
        let (layout, rows) = (x.layout(), x.rows());
        by_precision!(x.precision(), T => column_axpby::<T>(
            alpha,
            buffer::<T>(&x.data, "column_axpby")?,
            beta,
            buffer_mut::<T>(&mut y.data, "column_axpby")?,
            layout,
            rows,
        ));
        Ok(())
    }

    fn scale_columns_unchecked(
        &self,
        src: &Block<Self>,
        scale: &[f64],
        dst: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let (layout, rows) = (src.layout(), src.rows());
        by_precision!(src.precision(), A => by_precision!(dst.precision(), B => {
            scale_columns::<A, B>(buffer::<A>(&src.data, "scale_columns")?, layout, rows, scale, buffer_mut::<B>(&mut dst.data, "scale_columns")?, stats);
        }));
        Ok(())
    }
}

/// Per-column dots of two blocks in f64; each column's chunks (fixed by the row count) are
/// added in order. Node-major blocks are read row by row, every column's sums carried at
/// once in four lanes (row r to lane r mod 4, as [`record_stats`] does), so that one
/// column's sum is no chain of dependent additions and a column gives the same sum alone
/// and inside a block.
fn column_dots<T: Storage>(
    x: &[T],
    y: &[T],
    layout: Layout,
    rows: usize,
    out: &mut [f64],
    partial: &mut Vec<f64>,
) {
    let nrhs = out.len();
    let chunk = numeric::reduction_chunk(rows).max(1);
    let per_column = rows.div_ceil(chunk).max(1);
    let span = |q: usize| (q * chunk).min(rows)..((q + 1) * chunk).min(rows);
    partial.clear();
    match layout {
        // partial[c · per_column + q]: chunk q of column c.
        Layout::ColMajor => {
            partial.resize(per_column * nrhs, 0.0);
            partial.par_iter_mut().enumerate().for_each(|(k, p)| {
                let (c, span) = (k / per_column, span(k % per_column));
                *p = x[c * rows + span.start..c * rows + span.end]
                    .iter()
                    .zip(&y[c * rows + span.start..c * rows + span.end])
                    .fold(0.0, |s, (a, b)| s + a.to_f64() * b.to_f64());
            });
            for (c, o) in out.iter_mut().enumerate() {
                *o = partial[c * per_column..(c + 1) * per_column].iter().sum();
            }
        }
        // partial[(4q + lane) · nrhs + c]: chunk q's four lanes of every column.
        Layout::NodeMajor => {
            partial.resize(4 * per_column * nrhs, 0.0);
            partial
                .par_chunks_mut(4 * nrhs.max(1))
                .enumerate()
                .for_each(|(q, lanes)| {
                    let span = span(q);
                    let (x, y) = (
                        &x[span.start * nrhs..span.end * nrhs],
                        &y[span.start * nrhs..span.end * nrhs],
                    );
                    if nrhs == 1 {
                        // One column: the lanes are four consecutive values.
                        let (xs, ys) = (x.chunks_exact(4), y.chunks_exact(4));
                        let tail = xs.remainder().iter().zip(ys.remainder());
                        for (xg, yg) in xs.zip(ys) {
                            for ((s, a), b) in lanes.iter_mut().zip(xg).zip(yg) {
                                *s += a.to_f64() * b.to_f64();
                            }
                        }
                        for (s, (a, b)) in lanes.iter_mut().zip(tail) {
                            *s += a.to_f64() * b.to_f64();
                        }
                        return;
                    }
                    let rows = x.chunks_exact(nrhs).zip(y.chunks_exact(nrhs));
                    for (r, (x_row, y_row)) in rows.enumerate() {
                        let sums = &mut lanes[(r % 4) * nrhs..(r % 4 + 1) * nrhs];
                        for ((s, a), b) in sums.iter_mut().zip(x_row).zip(y_row) {
                            *s += a.to_f64() * b.to_f64();
                        }
                    }
                });
            for (c, o) in out.iter_mut().enumerate() {
                *o = (0..per_column)
                    .map(|q| {
                        let lane = |l: usize| partial[(4 * q + l) * nrhs + c];
                        ((lane(0) + lane(1)) + lane(2)) + lane(3)
                    })
                    .sum();
            }
        }
    }
}

/// y_c = α_c x_c + β_c y_c in T's compute precision.
fn column_axpby<T: Storage>(
    alpha: &[f64],
    x: &[T],
    beta: &[f64],
    y: &mut [T],
    layout: Layout,
    rows: usize,
) {
    let nrhs = alpha.len();
    let step = |a: f64, x: T, b: f64, y: T| {
        T::from_compute(
            Compute::<T>::from_f64(a) * x.to_compute() + Compute::<T>::from_f64(b) * y.to_compute(),
        )
    };
    match layout {
        Layout::ColMajor => y
            .par_chunks_mut(rows.max(1))
            .zip(x.par_chunks(rows.max(1)))
            .enumerate()
            .for_each(|(c, (y, x))| {
                for (y, &x) in y.iter_mut().zip(x) {
                    *y = step(alpha[c], x, beta[c], *y);
                }
            }),
        Layout::NodeMajor => y
            .par_chunks_mut(STATS_ROWS * nrhs)
            .zip(x.par_chunks(STATS_ROWS * nrhs))
            .for_each(|(y, x)| {
                for (y_row, x_row) in y.chunks_exact_mut(nrhs).zip(x.chunks_exact(nrhs)) {
                    for (c, (y, &x)) in y_row.iter_mut().zip(x_row).enumerate() {
                        *y = step(alpha[c], x, beta[c], *y);
                    }
                }
            }),
    }
}
