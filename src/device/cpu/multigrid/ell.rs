//! ELLPACK kernels on node-major blocks of right-hand sides (entry (i, c) of an N × Nrhs
//! block at `i·nrhs + c`), so one read of a matrix row serves every column: the smoothing
//! sweeps, residuals and refinement updates of multigrid.
//!
//! The matrix is stored in slices of [`SLICE`] = [`TILE`] rows (SELL-16,
//! [`EllLayout::Sliced`]). Rows are processed in chunks of whole slices (one rayon task
//! each, [`Chunks`]), and every kernel is one fused pass that reads the matrix, x, b and
//! the output where they are and converts f16 as it reads and writes ([`TileIo`]). A
//! slot's 16 columns are one index where they are consecutive, as along a grid line
//! ([`Columns`]), so the indices cost 4 bytes per slot and slice there, not 64. With one
//! column a slice's 16 rows are the vector lanes: per slot one tile of values, and x loaded
//! at a run or gathered at listed columns ([`slice_rows`], [`update_slices`]). With more
//! columns a row at a time, its columns in tiles of [`TILE`] ([`block_rows`],
//! [`update_rows`]). Each column's sums run in one order whatever the block width and the
//! SIMD level, and statistics of what each kernel stored are reduced in chunk order.

use num_traits::Zero;
use rayon::prelude::*;

use super::super::arena;
use super::super::simd::{per_simd_level, row_tiles, TileIo, TILE};
use super::super::vector::{
    fold_column, fold_tiles, partials, record_tile, reduce, tile_sum_of_squares, TileStats,
};
use super::super::{buffer, buffer_mut, by_precision, Compute, Cpu};
use crate::device::multigrid::Chunks;
use crate::device::{Block, EllMatrix, RowOp, Stats, Storage};
use crate::error::{Error, Result};
use crate::precision::{Real, Stored};
use crate::sparse::{EllLayout, LISTED, SLICE};

/// Rows whose `A x` are accumulated together (the accumulators stay in L1/L2): whole slices.
const SUB_ROWS: usize = 256;

const _: () = assert!(SLICE == TILE && SUB_ROWS.is_multiple_of(SLICE));

/// A sliced ELLPACK matrix in S with its chunks.
struct Ell<'a, S> {
    values: &'a [S],
    columns: Columns<'a>,
    diagonal: &'a [S],
    width: usize,
    chunks: &'a Chunks,
}

/// The column indices of a sliced matrix, by slot of a slice
/// ([`SlicedColumns`](crate::sparse::SlicedColumns)).
#[derive(Clone, Copy)]
struct Columns<'a> {
    runs: &'a [u32],
    listed: &'a [u32],
}

/// The columns of one slot of a slice, for its [`SLICE`] rows.
enum SlotColumns<'a> {
    /// first, first + 1, …, first + 15.
    Run(usize),
    Listed(&'a [u32; TILE]),
}

impl<'a> Columns<'a> {
    /// The columns of slot `s` of slice `slice` of a matrix `width` wide.
    #[inline(always)]
    fn slot(&self, width: usize, slice: usize, s: usize) -> SlotColumns<'a> {
        let run = self.runs[slice * width + s];
        if run & LISTED == 0 {
            SlotColumns::Run(run as usize)
        } else {
            let k = (run & !LISTED) as usize * TILE;
            SlotColumns::Listed(self.listed[k..k + TILE].try_into().expect("a listed slot"))
        }
    }

    /// Whether every slot of slice `slice` is a run (then [`SliceX::slot`] loads each with no
    /// branch on its kind).
    #[inline(always)]
    fn all_runs(&self, width: usize, slice: usize) -> bool {
        self.runs[slice * width..(slice + 1) * width]
            .iter()
            .all(|&run| run & LISTED == 0)
    }

    /// The column of slot `s` of row `r`.
    #[inline(always)]
    fn column(&self, width: usize, r: usize, s: usize) -> usize {
        match self.slot(width, r / SLICE, s) {
            SlotColumns::Run(first) => first + r % SLICE,
            SlotColumns::Listed(columns) => columns[r % SLICE] as usize,
        }
    }
}

fn ell<'a, S: Storage>(a: &'a EllMatrix<Cpu>, kernel: &str) -> Result<Ell<'a, S>> {
    if a.layout != EllLayout::Sliced || a.grid.is_some() {
        return Err(Error::Backend(format!(
            "{kernel}: the CPU kernels read sliced ELLPACK with column indices"
        )));
    }
    Ok(Ell {
        values: buffer::<S>(&a.values, kernel)?,
        columns: Columns {
            runs: &a.slot_runs,
            listed: &a.col_idx,
        },
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

impl<S> Ell<'_, S> {
    /// The range of `values` holding rows `r0..r0 + len` (`r0` on a slice
    /// boundary), whole slices: a last partial slice with its padding rows.
    fn slices(&self, r0: usize, len: usize) -> std::ops::Range<usize> {
        r0 * self.width..(r0 + len).next_multiple_of(SLICE) * self.width
    }
}

/// Entry s of row `i` of a run of whole slices (`i` counted from the run's first row).
#[inline(always)]
fn sliced_index(width: usize, i: usize, s: usize) -> usize {
    (i / SLICE) * SLICE * width + s * SLICE + i % SLICE
}

/// The arguments of [`block_rows`]: the sub-block's values in the compute precision and its
/// column indices (whole slices), the width, the op with ω in the compute precision, x and
/// b whole, the column count, the sub-block's first row, its output rows, its chunk's
/// statistics partials, scratch for each tile's Σ v² and max |v| over the sub-block, and
/// for a row's values and x offsets.
type BlockRowsArgs<'a, S> = (
    &'a [Compute<S>],
    Columns<'a>,
    usize,
    RowOp,
    Weights<Compute<S>>,
    bool,
    &'a [S],
    &'a [S],
    usize,
    usize,
    &'a mut [S],
    &'a mut [f64],
    &'a mut [[f64; TILE]],
    &'a mut [[Compute<S>; TILE]],
    &'a mut [Compute<S>],
    &'a mut [usize],
);

per_simd_level! {
    /// One sub-block of rows of a pass over A with a block of at least two columns, fused:
    /// per tile of [`simd::TILE`] columns and row, A x from the stored x (converted as it
    /// is read), the op, the output rounded into storage, and the tile's Σ v² and max |v|
    /// (added into `part` at the end of the sub-block). Only the statistics go through (L1)
    /// scratch. Each column keeps the order of operations of [`tile_row_sum`] (even and odd
    /// slots apart) and of [`record_stats`](super::super::vector::record_stats) (Σ v² in f64 over
    /// four interleaved rows), so a column gets the same result and statistics alone and
    /// inside a block.
    fn block_rows<S>(BlockRowsArgs<'_, S>) => block_rows_portable
}

#[inline(always)]
fn block_rows_portable<S: Storage + TileIo, const LEVEL: u8>(args: BlockRowsArgs<'_, S>) {
    match args.2 {
        9 => block_rows_of_width::<S, LEVEL, 9>(args),
        27 => block_rows_of_width::<S, LEVEL, 27>(args),
        _ => block_rows_of_width::<S, LEVEL, 0>(args),
    }
}

/// [`block_rows`] for rows of `WIDTH` slots (0: any width): the 2D and 3D stencils' widths
/// compiled apart, so the slot loops unroll, a row's values stay in registers across its
/// tiles, and each slot's x row is checked once per row ([`SlotRows`]), not once per tile.
#[inline(always)]
fn block_rows_of_width<S: Storage + TileIo, const LEVEL: u8, const WIDTH: usize>(
    (
        values,
        columns,
        width,
        op,
        weights,
        norms,
        x,
        b,
        nrhs,
        r0,
        out,
        part,
        sumsq,
        largest,
        row_values,
        offsets,
    ): BlockRowsArgs<'_, S>,
) {
    let width = if WIDTH == 0 { width } else { WIDTH };
    let rows = out.len() / nrhs;
    let zero = Compute::<S>::zero();
    sumsq.fill([0.0; TILE]);
    largest.fill([zero; TILE]);
    for i in 0..rows {
        let out = &mut out[i * nrhs..(i + 1) * nrhs];
        let row = RowTiles {
            // Slot 0 holds the diagonal.
            w: match op.by_diagonal() {
                true => weights.omega / values[sliced_index(width, i, 0)],
                false => weights.omega,
            },
            momentum: weights.momentum,
            op,
            norms,
            x,
            b,
            own: (r0 + i) * nrhs,
        };
        if WIDTH == 0 {
            for s in 0..width {
                row_values[s] = values[sliced_index(width, i, s)];
                offsets[s] = columns.column(width, r0 + i, s) * nrhs;
            }
            let (row_values, x_rows) = (
                &row_values[..width],
                SlotRows::new(&offsets[..width], x, nrhs),
            );
            row_tiles!(nrhs, i, sumsq, largest, |c0, t, lane, top| {
                row.tile::<LEVEL>(row_values, &x_rows, c0, t, out, lane, top)
            });
        } else {
            let row_values: [Compute<S>; WIDTH] =
                std::array::from_fn(|s| values[sliced_index(WIDTH, i, s)]);
            let offsets: [usize; WIDTH] =
                std::array::from_fn(|s| columns.column(WIDTH, r0 + i, s) * nrhs);
            let x_rows = SlotRows::new(&offsets[..], x, nrhs);
            row_tiles!(nrhs, i, sumsq, largest, |c0, t, lane, top| {
                row.tile::<LEVEL>(&row_values, &x_rows, c0, t, out, lane, top)
            });
        }
    }
    fold_tiles(part, nrhs, sumsq, largest, S::MAX);
}

/// Where the block rows (`len` = nrhs columns each) a matrix row's slots point at start in
/// the node-major block, checked once per matrix row when made, not once per tile and slot
/// (those checks took a fifth of the f16 sweep's time).
struct SlotRows<'a, S> {
    offsets: &'a [usize],
    block: &'a [S],
    len: usize,
}

impl<'a, S> SlotRows<'a, S> {
    /// Panics unless every offset has `len` values of the block from it.
    #[inline(always)]
    fn new(offsets: &'a [usize], block: &'a [S], len: usize) -> Self {
        assert!(
            offsets.iter().all(|&o| o + len <= block.len()),
            "a matrix column outside the block"
        );
        SlotRows {
            offsets,
            block,
            len,
        }
    }

    /// Columns `c0 .. c0 + t` of slot `s`'s block row.
    #[inline(always)]
    fn tile(&self, s: usize, c0: usize, t: usize) -> &'a [S] {
        assert!(c0 + t <= self.len, "a tile past the block's columns");
        let start = self.offsets[s] + c0;
        // SAFETY: offsets[s] + len ≤ block.len() (checked in `new`) and c0 + t ≤ len.
        unsafe { self.block.get_unchecked(start..start + t) }
    }
}

/// One row of [`block_rows`]: the op with its weight (ω / a_ii for the point smoothing
/// steps, ω for the block smoother's), x and b whole, and where the row starts in them.
struct RowTiles<'a, S: Stored> {
    op: RowOp,
    w: Compute<S>,
    momentum: Compute<S>,
    norms: bool,
    x: &'a [S],
    b: &'a [S],
    own: usize,
}

impl<S: Storage + TileIo> RowTiles<'_, S> {
    /// The row's `t` columns from `c0` (`t` ≤ TILE), its values and its slots' x rows given:
    /// A x, the op, the output rounded into `out`, Σ v² into `lane` and max |v| into `top`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn tile<const LEVEL: u8>(
        &self,
        row_values: &[Compute<S>],
        x_rows: &SlotRows<'_, S>,
        c0: usize,
        t: usize,
        out: &mut [S],
        lane: &mut [f64; TILE],
        top: &mut [Compute<S>; TILE],
    ) {
        let ax = tile_row_sum(
            row_values,
            &StoredTiles::<S, LEVEL> {
                rows: x_rows,
                c0,
                t,
            },
        );
        let own = self.own + c0..self.own + c0 + t;
        let mut o = ax;
        match self.op {
            RowOp::Apply => {}
            RowOp::Residual => {
                let bs = S::load::<LEVEL>(&self.b[own]);
                for c in 0..TILE {
                    o[c] = bs[c] - ax[c];
                }
            }
            RowOp::Jacobi { .. } => {
                let (bs, xs) = (
                    S::load::<LEVEL>(&self.b[own.clone()]),
                    S::load::<LEVEL>(&self.x[own]),
                );
                for c in 0..TILE {
                    o[c] = xs[c] + self.w * (bs[c] - ax[c]);
                }
            }
            RowOp::Chebyshev { previous_zero, .. } => {
                let (bs, xs) = (
                    S::load::<LEVEL>(&self.b[own.clone()]),
                    S::load::<LEVEL>(&self.x[own]),
                );
                let previous = match previous_zero {
                    true => [Compute::<S>::zero(); TILE],
                    false => S::load::<LEVEL>(&out[c0..c0 + t]),
                };
                for c in 0..TILE {
                    o[c] = xs[c] + self.momentum * (xs[c] - previous[c]) + self.w * (bs[c] - ax[c]);
                }
            }
            RowOp::Scaled { .. } => {
                for c in 0..TILE {
                    o[c] = self.w * ax[c];
                }
            }
            RowOp::Correction { previous_zero, .. } => {
                let iterate = S::load::<LEVEL>(&self.b[own]);
                let previous = match previous_zero {
                    true => [Compute::<S>::zero(); TILE],
                    false => S::load::<LEVEL>(&out[c0..c0 + t]),
                };
                for c in 0..TILE {
                    o[c] = iterate[c] + self.momentum * (iterate[c] - previous[c]) + self.w * ax[c];
                }
            }
        }
        record_tile::<S>(self.norms, &o, lane, top);
        S::store::<LEVEL>(&o, &mut out[c0..c0 + t]);
    }
}

/// The tiles [`tile_row_sum`] multiplies a row's values with, slot by slot. (A trait with
/// `#[inline(always)]` methods, not a closure: closures are compiled without the target
/// features of the kernel they are in, and one left out of line costs a call per slot.)
trait SlotTiles<T> {
    fn slot(&self, s: usize) -> [T; TILE];
}

/// x's tile of `t` columns from `c0` in the row each slot points at, widened.
struct StoredTiles<'a, S, const LEVEL: u8> {
    rows: &'a SlotRows<'a, S>,
    c0: usize,
    t: usize,
}

impl<S: TileIo, const LEVEL: u8> SlotTiles<Compute<S>> for StoredTiles<'_, S, LEVEL> {
    #[inline(always)]
    fn slot(&self, s: usize) -> [Compute<S>; TILE] {
        S::load::<LEVEL>(self.rows.tile(s, self.c0, self.t))
    }
}

/// The correction's tile of `t` columns from `c0` in the row each slot points at, in f64.
struct WideTiles<'a, X, const LEVEL: u8> {
    rows: &'a SlotRows<'a, X>,
    c0: usize,
    t: usize,
}

impl<X: TileIo, const LEVEL: u8> SlotTiles<f64> for WideTiles<'_, X, LEVEL> {
    #[inline(always)]
    fn slot(&self, s: usize) -> [f64; TILE] {
        X::load_f64::<LEVEL>(self.rows.tile(s, self.c0, self.t))
    }
}

/// Σ_s v_s x_s over one row for a tile of columns, `tiles.slot(s)` giving slot s's x tile: even
/// and odd slots summed apart, then added (the order of [`accumulate`] with one column).
#[inline(always)]
fn tile_row_sum<T: Real>(row_values: &[T], tiles: &impl SlotTiles<T>) -> [T; TILE] {
    let width = row_values.len();
    let (mut even, mut odd) = ([T::zero(); TILE], [T::zero(); TILE]);
    for p in 0..width / 2 {
        let (v0, v1) = (row_values[2 * p], row_values[2 * p + 1]);
        let (x0, x1) = (tiles.slot(2 * p), tiles.slot(2 * p + 1));
        for c in 0..TILE {
            even[c] = even[c] + v0 * x0[c];
            odd[c] = odd[c] + v1 * x1[c];
        }
    }
    if width % 2 == 1 {
        let (v, xs) = (row_values[width - 1], tiles.slot(width - 1));
        for c in 0..TILE {
            even[c] = even[c] + v * xs[c];
        }
    }
    std::array::from_fn(|c| even[c] + odd[c])
}

/// The coefficients of a sweep's op in the compute precision: ω (of D⁻¹ (b − A x), or of
/// A x where A is a block smoother's B⁻¹) and the Chebyshev step's or correction's momentum
/// μ (of the iterate minus the one before); zero where the op has none.
#[derive(Clone, Copy)]
struct Weights<C> {
    omega: C,
    momentum: C,
}

impl<C: Real> Weights<C> {
    fn of(op: RowOp) -> Self {
        let (omega, momentum) = match op {
            RowOp::Jacobi { omega } | RowOp::Scaled { omega } => (omega, 0.0),
            RowOp::Chebyshev {
                omega, momentum, ..
            }
            | RowOp::Correction {
                omega, momentum, ..
            } => (omega, momentum),
            RowOp::Residual | RowOp::Apply => (0.0, 0.0),
        };
        Weights {
            omega: C::from_f64(omega),
            momentum: C::from_f64(momentum),
        }
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
    let weights = Weights::<Compute<S>>::of(op);
    let chunk_rows = a.chunks.rows;
    let norms = stats.norms();
    let part = partials(stats, a.chunks.count());
    out.par_chunks_mut(chunk_rows * nrhs)
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(nrhs)))
        .enumerate()
        .for_each(|(k, (out_chunk, part))| {
            let rows = out_chunk.len() / nrhs;
            arena::with(|arena| {
                let tiles = nrhs.div_ceil(TILE);
                let (slot, sumsq, largest, row_values, offsets) = arena
                    .five::<Compute<S>, [f64; TILE], [Compute<S>; TILE], Compute<S>, usize>(
                        widen_len::<S>(SUB_ROWS * a.width),
                        4 * tiles,
                        tiles,
                        a.width,
                        a.width,
                    );
                for sub in (0..rows).step_by(SUB_ROWS) {
                    let len = SUB_ROWS.min(rows - sub);
                    let r0 = k * chunk_rows + sub;
                    let values = widened(&a.values[a.slices(r0, len)], slot);
                    let out = &mut out_chunk[sub * nrhs..(sub + len) * nrhs];
                    block_rows::<S>((
                        values, a.columns, a.width, op, weights, norms, x, b, nrhs, r0, out, part,
                        sumsq, largest, row_values, offsets,
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
    let weights = Weights::<Compute<S>>::of(op);
    if nrhs > 1 {
        return sweep_block(a, op, x, b, nrhs, out, stats);
    }
    let chunk_rows = a.chunks.rows;
    let part = partials(stats, a.chunks.count());
    out.par_chunks_mut(chunk_rows)
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(1)))
        .enumerate()
        .for_each(|(k, (out_chunk, part))| {
            let rows = out_chunk.len();
            for sub in (0..rows).step_by(SUB_ROWS) {
                let len = SUB_ROWS.min(rows - sub);
                let r0 = k * chunk_rows + sub;
                slice_rows::<S>((
                    &a.values[a.slices(r0, len)],
                    a.columns,
                    a.width,
                    op,
                    weights,
                    x,
                    b,
                    r0,
                    &mut out_chunk[sub..sub + len],
                    part,
                ));
            }
        });
    arena::sync();
    reduce(stats);
}

/// The arguments of [`slice_rows`]: the sub-block's stored values and column indices (whole
/// slices), the width, the op with ω in the compute precision, x and b whole (b empty for
/// Apply and Scaled), the sub-block's first row, its output rows, and its chunk's statistics partials.
type SliceRowsArgs<'a, S> = (
    &'a [S],
    Columns<'a>,
    usize,
    RowOp,
    Weights<Compute<S>>,
    &'a [S],
    &'a [S],
    usize,
    &'a mut [S],
    &'a mut [f64],
);

per_simd_level! {
    /// One sub-block of a pass over A with one column, fused: per slice of 16 rows (the
    /// vector lanes) the slice's A x (values converted as they are read, x gathered at each
    /// slot's columns, [`TileIo::gather`]; even and odd slots summed apart as in
    /// [`tile_row_sum`]), the op (the diagonal from slot 0), the output rounded into
    /// storage, and Σ v² and max |v| in the order of
    /// [`record_stats`](super::super::vector::record_stats) (row r to lane r mod 4), added into
    /// `part` at the end.
    fn slice_rows<S>(SliceRowsArgs<'_, S>) => slice_rows_portable
}

#[inline(always)]
fn slice_rows_portable<S: Storage + TileIo, const LEVEL: u8>(
    (values, columns, width, op, weights, x, b, r0, out, part): SliceRowsArgs<'_, S>,
) {
    let zero = Compute::<S>::zero();
    let mut stats = TileStats::new();
    let slices = values.chunks_exact(SLICE * width);
    for (k, (out, slice_values)) in out.chunks_mut(SLICE).zip(slices).enumerate() {
        let slice = r0 / SLICE + k;
        let at = (width, slice);
        let (diagonal, ax) = if columns.all_runs(width, slice) {
            slice_product::<S, LEVEL, true>(slice_values, columns, at, &AsStored(x))
        } else {
            slice_product::<S, LEVEL, false>(slice_values, columns, at, &AsStored(x))
        };
        let first = r0 + k * SLICE;
        let t = out.len();
        let mut o = [zero; TILE];
        match op {
            RowOp::Apply => {
                o = ax;
            }
            RowOp::Residual => {
                let bs = S::load::<LEVEL>(&b[first..first + t]);
                for j in 0..TILE {
                    o[j] = bs[j] - ax[j];
                }
            }
            RowOp::Jacobi { .. } => {
                let (bs, xs) = (
                    S::load::<LEVEL>(&b[first..first + t]),
                    S::load::<LEVEL>(&x[first..first + t]),
                );
                for j in 0..TILE {
                    o[j] = xs[j] + weights.omega / diagonal[j] * (bs[j] - ax[j]);
                }
            }
            RowOp::Chebyshev { previous_zero, .. } => {
                let (bs, xs) = (
                    S::load::<LEVEL>(&b[first..first + t]),
                    S::load::<LEVEL>(&x[first..first + t]),
                );
                let previous = match previous_zero {
                    true => [zero; TILE],
                    false => S::load::<LEVEL>(out),
                };
                for j in 0..TILE {
                    o[j] = xs[j]
                        + weights.momentum * (xs[j] - previous[j])
                        + weights.omega / diagonal[j] * (bs[j] - ax[j]);
                }
            }
            RowOp::Scaled { .. } => {
                for j in 0..TILE {
                    o[j] = weights.omega * ax[j];
                }
            }
            RowOp::Correction { previous_zero, .. } => {
                let iterate = S::load::<LEVEL>(&b[first..first + t]);
                let previous = match previous_zero {
                    true => [zero; TILE],
                    false => S::load::<LEVEL>(out),
                };
                for j in 0..TILE {
                    o[j] = iterate[j]
                        + weights.momentum * (iterate[j] - previous[j])
                        + weights.omega * ax[j];
                }
            }
        }
        stats.add::<S, LEVEL>(&o, t);
        S::store::<LEVEL>(&o, out);
    }
    stats.fold(part, S::MAX);
}

/// One slice's slot-0 tile (the diagonal) and A x: even and odd slots summed apart, then
/// added (the order of [`tile_row_sum`]). `RUNS`: every slot is a run
/// ([`Columns::all_runs`]), so x is one load per slot with no branch on the slot's kind
/// (a branch per slot keeps LLVM from holding the tiles in registers).
#[inline(always)]
fn slice_product<V: TileIo, const LEVEL: u8, const RUNS: bool>(
    slice_values: &[V],
    columns: Columns<'_>,
    (width, slice): (usize, usize),
    x: &impl SliceX<Compute<V>>,
) -> ([Compute<V>; TILE], [Compute<V>; TILE]) {
    let zero = Compute::<V>::zero();
    let (mut even, mut odd) = ([zero; TILE], [zero; TILE]);
    let diagonal = slot_values::<V, LEVEL>(slice_values, 0);
    for p in 0..width.div_ceil(2) {
        let (s0, s1) = (2 * p, 2 * p + 1);
        let v0 = slot_values::<V, LEVEL>(slice_values, s0);
        let x0 = x.slot::<LEVEL, RUNS>(columns, (width, slice, s0));
        for j in 0..TILE {
            even[j] = even[j] + v0[j] * x0[j];
        }
        if s1 < width {
            let v1 = slot_values::<V, LEVEL>(slice_values, s1);
            let x1 = x.slot::<LEVEL, RUNS>(columns, (width, slice, s1));
            for j in 0..TILE {
                odd[j] = odd[j] + v1[j] * x1[j];
            }
        }
    }
    for j in 0..TILE {
        even[j] = even[j] + odd[j];
    }
    (diagonal, even)
}

/// Slot s of a slice's stored values, in the compute precision.
#[inline(always)]
fn slot_values<S: TileIo, const LEVEL: u8>(slice_values: &[S], s: usize) -> [Compute<S>; TILE] {
    S::load::<LEVEL>(&slice_values[s * TILE..(s + 1) * TILE])
}

/// A vector read at the columns of a slice's slots, as tiles in precision T. (A trait with
/// `#[inline(always)]` methods, not closures: see [`SlotTiles`].)
trait SliceX<T> {
    /// The tile of slot s of slice `slice`: with `RUNS` one load from the slot's first
    /// column, else [`slot_of`].
    fn slot<const LEVEL: u8, const RUNS: bool>(
        &self,
        columns: Columns<'_>,
        at: (usize, usize, usize),
    ) -> [T; TILE];
}

/// x in its own compute precision.
struct AsStored<'a, S>(&'a [S]);

impl<S: TileIo> SliceX<Compute<S>> for AsStored<'_, S> {
    #[inline(always)]
    fn slot<const LEVEL: u8, const RUNS: bool>(
        &self,
        columns: Columns<'_>,
        (width, slice, s): (usize, usize, usize),
    ) -> [Compute<S>; TILE] {
        if RUNS {
            let first = columns.runs[slice * width + s] as usize;
            S::load::<LEVEL>(&self.0[first..first + TILE])
        } else {
            slot_of::<S, LEVEL>(self.0, columns.slot(width, slice, s))
        }
    }
}

/// A correction widened to f64.
struct Widened<'a, X>(&'a [X]);

impl<X: TileIo> SliceX<f64> for Widened<'_, X> {
    #[inline(always)]
    fn slot<const LEVEL: u8, const RUNS: bool>(
        &self,
        columns: Columns<'_>,
        at: (usize, usize, usize),
    ) -> [f64; TILE] {
        X::widen::<LEVEL>(&AsStored(self.0).slot::<LEVEL, RUNS>(columns, at))
    }
}

/// `src` at the columns of one slot, widened: one load for a run, else a gather.
#[inline(always)]
fn slot_of<S: TileIo, const LEVEL: u8>(src: &[S], columns: SlotColumns<'_>) -> [Compute<S>; TILE] {
    match columns {
        SlotColumns::Run(first) => S::load::<LEVEL>(&src[first..first + TILE]),
        SlotColumns::Listed(idx) => S::gather::<LEVEL>(src, idx, 0),
    }
}

/// out = ω D⁻¹ b, with D the diagonal stored apart (the matrix is not read).
fn jacobi_from_zero<S: Storage + TileIo>(
    a: &Ell<'_, S>,
    omega: f64,
    b: &[S],
    nrhs: usize,
    out: &mut [S],
    stats: &mut Stats<Cpu>,
) {
    let omega = Compute::<S>::from_f64(omega);
    let chunk_rows = a.chunks.rows;
    let norms = stats.norms();
    let part = partials(stats, a.chunks.count());
    if nrhs == 1 {
        out.par_chunks_mut(chunk_rows)
            .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(1)))
            .enumerate()
            .for_each(|(k, (out_chunk, part))| {
                let rows = k * chunk_rows..k * chunk_rows + out_chunk.len();
                jacobi_rows::<S>((&a.diagonal[rows.clone()], &b[rows], omega, out_chunk, part));
            });
        return reduce(stats);
    }
    out.par_chunks_mut(chunk_rows * nrhs)
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(nrhs)))
        .enumerate()
        .for_each(|(k, (out_chunk, part))| {
            let rows = k * chunk_rows..k * chunk_rows + out_chunk.len() / nrhs;
            let b = &b[rows.start * nrhs..rows.end * nrhs];
            arena::with(|arena| {
                let tiles = nrhs.div_ceil(TILE);
                let (sumsq, largest, ..) =
                    arena.four::<[f64; TILE], [Compute<S>; TILE], u8, u8>(4 * tiles, tiles, 0, 0);
                jacobi_block_rows::<S>((
                    &a.diagonal[rows],
                    b,
                    omega,
                    norms,
                    nrhs,
                    out_chunk,
                    part,
                    sumsq,
                    largest,
                ));
            })
        });
    arena::sync();
    reduce(stats);
}

/// The arguments of [`jacobi_block_rows`]: a chunk's diagonal and b, ω in the compute
/// precision, whether Σ v² is recorded, the column count, the chunk's output and statistics
/// partials, and scratch for each tile's Σ v² and max |v|.
type JacobiBlockArgs<'a, S> = (
    &'a [S],
    &'a [S],
    Compute<S>,
    bool,
    usize,
    &'a mut [S],
    &'a mut [f64],
    &'a mut [[f64; TILE]],
    &'a mut [[Compute<S>; TILE]],
);

per_simd_level! {
    /// One chunk of [`jacobi_from_zero`] with a block of columns, fused: per row and tile
    /// of columns out = (ω / d) b, converted as it is read and written, with the statistics
    /// of [`record_tile`] (one fold per chunk, as
    /// [`record_stats`](super::super::vector::record_stats) on the whole chunk did).
    fn jacobi_block_rows<S>(JacobiBlockArgs<'_, S>) => jacobi_block_rows_portable
}

#[inline(always)]
fn jacobi_block_rows_portable<S: Storage + TileIo, const LEVEL: u8>(
    (diagonal, b, omega, norms, nrhs, out, part, sumsq, largest): JacobiBlockArgs<'_, S>,
) {
    let zero = Compute::<S>::zero();
    sumsq.fill([0.0; TILE]);
    largest.fill([zero; TILE]);
    let rows = out.chunks_exact_mut(nrhs).zip(b.chunks_exact(nrhs));
    for (i, ((out, b), &d)) in rows.zip(diagonal).enumerate() {
        let w = omega / d.to_compute();
        row_tiles!(nrhs, i, sumsq, largest, |c0, t, lane, top| {
            let span = c0..c0 + t;
            jacobi_tile::<S, LEVEL>(w, norms, &b[span.clone()], &mut out[span], lane, top)
        });
    }
    fold_tiles(part, nrhs, sumsq, largest, S::MAX);
}

/// out = w b for one row's tile of at most TILE columns, with its statistics.
#[inline(always)]
fn jacobi_tile<S: Storage + TileIo, const LEVEL: u8>(
    w: Compute<S>,
    norms: bool,
    b: &[S],
    out: &mut [S],
    lane: &mut [f64; TILE],
    top: &mut [Compute<S>; TILE],
) {
    let bs = S::load::<LEVEL>(b);
    let mut o = [Compute::<S>::zero(); TILE];
    for j in 0..TILE {
        o[j] = w * bs[j];
    }
    record_tile::<S>(norms, &o, lane, top);
    S::store::<LEVEL>(&o, out);
}

/// The arguments of [`jacobi_rows`]: a chunk's diagonal and b, ω in the compute precision,
/// the chunk's output and statistics partials.
type JacobiRowsArgs<'a, S> = (&'a [S], &'a [S], Compute<S>, &'a mut [S], &'a mut [f64]);

per_simd_level! {
    /// One chunk of [`jacobi_from_zero`] with one column, fused: per tile of 16 rows out =
    /// (ω / d) b, converted as it is read and written, with the statistics of
    /// [`record_stats`](super::super::vector::record_stats) (one fold per chunk, as its call on
    /// the whole chunk did).
    fn jacobi_rows<S>(JacobiRowsArgs<'_, S>) => jacobi_rows_portable
}

#[inline(always)]
fn jacobi_rows_portable<S: Storage + TileIo, const LEVEL: u8>(
    (diagonal, b, omega, out, part): JacobiRowsArgs<'_, S>,
) {
    let zero = Compute::<S>::zero();
    let mut stats = TileStats::new();
    let tiles = diagonal.chunks(TILE).zip(b.chunks(TILE));
    for (out, (d, b)) in out.chunks_mut(TILE).zip(tiles) {
        let (d, b) = (S::load::<LEVEL>(d), S::load::<LEVEL>(b));
        let mut o = [zero; TILE];
        for j in 0..TILE {
            o[j] = omega / d[j] * b[j];
        }
        stats.add::<S, LEVEL>(&o, out.len());
        S::store::<LEVEL>(&o, out);
    }
    stats.fold(part, S::MAX);
}

/// The refinement update (docs/mathematics.md §4), fused: u_c += α_c c_c and r_c −= α_c (A
/// c)_c, with A in f64 and the correction in X. Statistics: Σ r² of the new residual, max
/// |c| of the correction.
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
    let chunk_rows = a.chunks.rows;
    let part = partials(stats, a.chunks.count());
    u.par_chunks_mut(chunk_rows)
        .zip(r.par_chunks_mut(chunk_rows))
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(1)))
        .enumerate()
        .for_each(|(k, ((u_chunk, r_chunk), part))| {
            let rows = u_chunk.len();
            for sub in (0..rows).step_by(SUB_ROWS) {
                let len = SUB_ROWS.min(rows - sub);
                let r0 = k * chunk_rows + sub;
                update_slices::<X>((
                    a,
                    correction,
                    alpha[0],
                    r0,
                    &mut u_chunk[sub..sub + len],
                    &mut r_chunk[sub..sub + len],
                    part,
                ));
            }
        });
    reduce(stats);
}

/// The arguments of [`update_slices`]: the f64 matrix, the correction, α, the sub-block's
/// first row, its rows of u and r, and its chunk's statistics partials.
type UpdateSlicesArgs<'a, 'm, X> = (
    &'a Ell<'m, f64>,
    &'a [X],
    f64,
    usize,
    &'a mut [f64],
    &'a mut [f64],
    &'a mut [f64],
);

per_simd_level! {
    /// One sub-block of [`refinement_update`] with one column, fused: per slice of 16 rows (the
    /// vector lanes) c gathered at each slot's columns and converted to f64 as it is read,
    /// A c summed as in [`tile_row_sum`], u and r updated (r −= α (A c)), Σ r² in the order of
    /// [`record_stats`](super::super::vector::record_stats) and max |c| of the rows' own correction.
    fn update_slices<X>(UpdateSlicesArgs<'_, '_, X>) => update_slices_portable
}

#[inline(always)]
fn update_slices_portable<X: Storage + TileIo, const LEVEL: u8>(
    (a, correction, alpha, r0, u, r, part): UpdateSlicesArgs<'_, '_, X>,
) {
    let width = a.width;
    let values = &a.values[a.slices(r0, u.len())];
    let (mut lanes, mut largest) = ([0.0f64; 4], [0.0f64; TILE]);
    let slices = values.chunks_exact(SLICE * width);
    let rows = u.chunks_mut(SLICE).zip(r.chunks_mut(SLICE));
    for (k, ((u, r), slice_values)) in rows.zip(slices).enumerate() {
        let slice = r0 / SLICE + k;
        let (at, c) = ((width, slice), &Widened(correction));
        let (_, ac) = if a.columns.all_runs(width, slice) {
            slice_product::<f64, LEVEL, true>(slice_values, a.columns, at, c)
        } else {
            slice_product::<f64, LEVEL, false>(slice_values, a.columns, at, c)
        };
        let (first, t) = (r0 + k * SLICE, u.len());
        // Past a partial slice: zeros, which change no maximum.
        let own = X::load_f64::<LEVEL>(&correction[first..first + t]);
        let (mut us, mut rs) = (f64::load::<LEVEL>(u), f64::load::<LEVEL>(r));
        for j in 0..TILE {
            let c = own[j];
            us[j] += alpha * c;
            rs[j] -= alpha * ac[j];
            let c = c.abs();
            largest[j] = if c > largest[j] { c } else { largest[j] };
        }
        f64::store::<LEVEL>(&us, u);
        f64::store::<LEVEL>(&rs, r);
        tile_sum_of_squares::<f64, LEVEL>(&rs, t, &mut lanes);
    }
    let top = largest
        .iter()
        .fold(0.0f64, |m, &c| if c > m { c } else { m });
    // This record's maxima are |c|'s, which no limit applies to.
    fold_column(part, 1, 0, lanes, top, f64::INFINITY);
}

/// [`refinement_update`] for blocks of two or more columns: per row and tile of columns, c
/// read where it is (converted to f64 as it is read), A c summed as in [`tile_row_sum`], u
/// and r updated, Σ r² in the order of [`record_stats`](super::super::vector::record_stats) and
/// max |c| of the row's own correction; no widened bands.
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
                let (sumsq, largest, row_values, offsets) = arena
                    .four::<[f64; TILE], [f64; TILE], f64, usize>(
                        4 * tiles,
                        tiles,
                        a.width,
                        a.width,
                    );
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
                        row_values,
                        offsets,
                    ));
                }
            })
        });
    arena::sync();
    reduce(stats);
}

/// The arguments of [`update_rows`]: the f64 matrix, the correction, α, the column count,
/// the sub-block's first row, its rows of u and r, its chunk's statistics partials,
/// scratch for the tiles' Σ r² and max |c|, and for a row's values and x offsets.
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
    &'a mut [f64],
    &'a mut [usize],
);

per_simd_level! {
    /// One sub-block of [`refinement_update_block`], compiled per SIMD level.
    fn update_rows<X>(UpdateRowsArgs<'_, '_, X>) => update_rows_portable
}

#[inline(always)]
fn update_rows_portable<X: Storage + TileIo, const LEVEL: u8>(args: UpdateRowsArgs<'_, '_, X>) {
    match args.0.width {
        9 => update_rows_of_width::<X, LEVEL, 9>(args),
        27 => update_rows_of_width::<X, LEVEL, 27>(args),
        _ => update_rows_of_width::<X, LEVEL, 0>(args),
    }
}

/// [`update_rows`] for rows of `WIDTH` slots (0: any width), as [`block_rows_of_width`].
#[inline(always)]
fn update_rows_of_width<X: Storage + TileIo, const LEVEL: u8, const WIDTH: usize>(
    (a, correction, alpha, nrhs, r0, u, r, part, sumsq, largest, row_values, offsets): UpdateRowsArgs<'_, '_, X>,
) {
    let width = if WIDTH == 0 { a.width } else { WIDTH };
    let rows = u.len() / nrhs;
    let values = &a.values[r0 * width..];
    sumsq.fill([0.0; TILE]);
    largest.fill([0.0; TILE]);
    for i in 0..rows {
        let row = UpdateTiles {
            correction,
            alpha,
            own: (r0 + i) * nrhs,
        };
        let (u, r) = (
            &mut u[i * nrhs..(i + 1) * nrhs],
            &mut r[i * nrhs..(i + 1) * nrhs],
        );
        if WIDTH == 0 {
            for s in 0..width {
                row_values[s] = values[sliced_index(width, i, s)];
                offsets[s] = a.columns.column(width, r0 + i, s) * nrhs;
            }
            let (row_values, c_rows) = (
                &row_values[..width],
                SlotRows::new(&offsets[..width], correction, nrhs),
            );
            row_tiles!(nrhs, i, sumsq, largest, |c0, t, lane, top| {
                row.tile::<LEVEL>(row_values, &c_rows, c0, t, u, r, lane, top)
            });
        } else {
            let row_values: [f64; WIDTH] =
                std::array::from_fn(|s| values[sliced_index(WIDTH, i, s)]);
            let offsets: [usize; WIDTH] =
                std::array::from_fn(|s| a.columns.column(WIDTH, r0 + i, s) * nrhs);
            let c_rows = SlotRows::new(&offsets[..], correction, nrhs);
            row_tiles!(nrhs, i, sumsq, largest, |c0, t, lane, top| {
                row.tile::<LEVEL>(&row_values, &c_rows, c0, t, u, r, lane, top)
            });
        }
    }
    // This record's maxima are |c|'s, which no limit applies to.
    fold_tiles(part, nrhs, sumsq, largest, f64::INFINITY);
}

/// One row of [`update_rows`]: the correction whole, α, and where the row starts in the
/// correction.
struct UpdateTiles<'a, X> {
    correction: &'a [X],
    alpha: &'a [f64],
    own: usize,
}

impl<X: Storage + TileIo> UpdateTiles<'_, X> {
    /// The row's `t` columns from `c0` (`t` ≤ TILE) of u and r (the row's), its f64 values
    /// and its slots' correction rows given: u += α c, r −= α (A c), Σ r² into `lane`, max
    /// |c| into `top`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn tile<const LEVEL: u8>(
        &self,
        row_values: &[f64],
        c_rows: &SlotRows<'_, X>,
        c0: usize,
        t: usize,
        u: &mut [f64],
        r: &mut [f64],
        lane: &mut [f64; TILE],
        top: &mut [f64; TILE],
    ) {
        let mut scale = [0.0; TILE];
        scale[..t].copy_from_slice(&self.alpha[c0..c0 + t]);
        let ac = tile_row_sum(
            row_values,
            &WideTiles::<X, LEVEL> {
                rows: c_rows,
                c0,
                t,
            },
        );
        let own_start = self.own + c0;
        let own = X::load_f64::<LEVEL>(&self.correction[own_start..own_start + t]);
        let (u, r) = (&mut u[c0..c0 + t], &mut r[c0..c0 + t]);
        for (j, (u, r)) in u.iter_mut().zip(r).enumerate() {
            *u += scale[j] * own[j];
            *r -= scale[j] * ac[j];
            lane[j] += *r * *r;
            let c = own[j].abs();
            top[j] = if c > top[j] { c } else { top[j] };
        }
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
    by_precision!(a.precision(), S => {
        let m = ell::<S>(a, "ell_sweep")?;
        let b = match b { Some(b) => &buffer::<S>(&b.data, "ell_sweep")?[..], None => &[] };
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
    let m = ell::<f64>(a, "ell_refine_update")?;
    let (x, r) = (
        buffer_mut::<f64>(&mut x.data, "ell_refine_update")?,
        buffer_mut::<f64>(&mut r.data, "ell_refine_update")?,
    );
    by_precision!(c.precision(), X => refinement_update::<X>(&m, buffer::<X>(&c.data, "ell_refine_update")?, alpha, nrhs, x, r, stats));
    Ok(())
}
