//! Grid transfers of multigrid on node-major blocks: on uniform meshes of the unit square
//! and cube, bilinear (trilinear) prolongation P and restriction Pᵀ of interior unknowns
//! (lexicographic, x fastest; m points per direction, m_fine = 2·m_coarse + 1); on a
//! refined mesh's hierarchy, products with the stored P and R = Pᵀ.
//!
//! Grid transfers are gathers over planes of the slowest direction (lines in 2D), one rayon
//! task per output plane: with one column, per line and tile of 16 output points, the
//! strided fine points picked from whole tiles in registers; with more, per point and tile
//! of columns. Matrix transfers take one task per chunk of output rows. Both change
//! precision on the way: values are read in the source level's storage precision,
//! combined in f64, scaled per column, and rounded once to the target level's storage
//! precision.

use num_traits::Zero;
use rayon::prelude::*;

use super::super::arena;
use super::super::simd::{per_simd_level, row_tiles, TileIo, TILE};
use super::super::vector::{fold_tiles, partials, record_stats, record_tile, reduce, TileStats};
use super::super::{buffer, buffer_mut, by_precision, Compute, Cpu};
use crate::device::inverse_scale;
use crate::device::multigrid::Direction;
use crate::device::{Block, CsrMatrix, GridShape, LevelTransfer, Stats, Storage};
use crate::error::Result;
use crate::precision::Real;

/// Coarse points (index, weight) the 1D interpolation of fine interior point `i` reads:
/// fine node i+1 sits on coarse node (i+1)/2 when i is odd, else between two coarse nodes,
/// either of which may be a (zero) boundary node.
fn interpolation_1d(i: usize, m_coarse: usize) -> ([(usize, f64); 2], usize) {
    if i % 2 == 1 {
        return ([((i - 1) / 2, 1.0), (0, 0.0)], 1);
    }
    let right = i / 2;
    match (right >= 1, right < m_coarse) {
        (true, true) => ([(right - 1, 0.5), (right, 0.5)], 2),
        (true, false) => ([(right - 1, 0.5), (0, 0.0)], 1),
        (false, true) => ([(right, 0.5), (0, 0.0)], 1),
        (false, false) => ([(0, 0.0), (0, 0.0)], 0),
    }
}

/// What the one-column transfer of one output plane needs besides its data: the grids,
/// the output plane's index and the column's scale.
#[derive(Clone, Copy)]
struct ColumnPlane {
    fine_grid: GridShape,
    coarse_grid: GridShape,
    plane: usize,
    scale: f64,
}

/// Runs `kernel(args, out, part)` for every output plane of a one-column transfer between
/// `fine_grid` and `coarse_grid` with the column's `scale` (one rayon task each; `args`
/// the plane's [`ColumnPlane`], `out` the plane, to be overwritten with its new values and
/// their statistics added into `part`, the plane's partials), then reduces the statistics
/// in plane order.
fn for_each_column_plane<O: Storage>(
    (out, plane_len): (&mut [O], usize),
    (fine_grid, coarse_grid, scale): (GridShape, GridShape, f64),
    stats: &mut Stats<Cpu>,
    kernel: impl Fn(ColumnPlane, &mut [O], &mut [f64]) + Sync,
) {
    let part = partials(stats, out.len() / plane_len);
    out.par_chunks_mut(plane_len)
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(1)))
        .enumerate()
        .for_each(|(plane, (out, part))| {
            let args = ColumnPlane {
                fine_grid,
                coarse_grid,
                plane,
                scale,
            };
            kernel(args, out, part)
        });
    reduce(stats);
}

/// fine += s · P coarse for one column (blocks: [`prolongate_add_block`]).
fn prolongate_add_column<C: Storage + TileIo, F: Storage + TileIo>(
    coarse: &[C],
    coarse_grid: GridShape,
    fine: &mut [F],
    fine_grid: GridShape,
    scale: f64,
    stats: &mut Stats<Cpu>,
) {
    let grids = (fine_grid, coarse_grid, scale);
    for_each_column_plane(
        (fine, fine_grid.plane()),
        grids,
        stats,
        |args, out, part| interpolate_plane::<C, F>((args, coarse, out, part)),
    );
}

per_simd_level! {
    /// One fine plane of [`prolongate_add_column`], fused: per fine line and tile of 16
    /// points, the interpolation of the coarse lines it reads (coarse plane, then line,
    /// ascending, as [`interpolation_terms`] orders them) summed in f64, scaled, added to
    /// the fine value, rounded to the compute precision, added to the plane's statistics
    /// (those of [`record_stats`]) and rounded into storage.
    fn interpolate_plane<C, F>((ColumnPlane, &[C], &mut [F], &mut [f64])) => interpolate_plane_portable
}

#[inline(always)]
fn interpolate_plane_portable<C: Storage + TileIo, F: Storage + TileIo, const LEVEL: u8>(
    (args, coarse, fine_plane, part): (ColumnPlane, &[C], &mut [F], &mut [f64]),
) {
    let (mf, mc) = (args.fine_grid.m, args.coarse_grid.m);
    let lines_per_plane = if args.fine_grid.dim == 2 { 1 } else { mf };
    let (planes, planes_count) = interpolation_1d(args.plane, mc);
    let mut stats = TileStats::new();
    for j in 0..lines_per_plane {
        // The coarse lines fine line j reads, with their weights, in the order of the sum.
        let mut lines = [(0usize, 0.0f64); 4];
        let mut count = 0;
        for &(q, wq) in &planes[..planes_count] {
            if args.fine_grid.dim == 2 {
                lines[count] = (q * mc, wq);
                count += 1;
            } else {
                let (rows, rows_count) = interpolation_1d(j, mc);
                for &(b, wb) in &rows[..rows_count] {
                    lines[count] = ((q * mc + b) * mc, wq * wb);
                    count += 1;
                }
            }
        }
        let fine_line = &mut fine_plane[j * mf..(j + 1) * mf];
        stats.start_at(j * mf);
        // Tiles of 2·TILE fine points: TILE even ones and TILE odd ones, summed apart.
        for x0 in (0..mf).step_by(2 * TILE) {
            let mut acc = [[0.0f64; TILE]; 2];
            for &(first, w) in &lines[..count] {
                interpolate_tile::<C, LEVEL>(&coarse[first..first + mc], x0 / 2, w, &mut acc);
            }
            let [even, odd] = acc;
            for h in 0..2 {
                let start = x0 + h * TILE;
                if start >= mf {
                    break;
                }
                let stored = &mut fine_line[start..mf.min(start + TILE)];
                let (even, odd) = (&even[h * TILE / 2..], &odd[h * TILE / 2..]);
                match <&mut [F; TILE]>::try_from(&mut *stored) {
                    // A whole tile: fixed-size loads and stores (no length to test or copy).
                    Ok(whole) => {
                        add_interpolated::<F, LEVEL>(whole, even, odd, args.scale, &mut stats)
                    }
                    Err(_) => {
                        add_interpolated::<F, LEVEL>(stored, even, odd, args.scale, &mut stats)
                    }
                }
            }
        }
    }
    stats.fold(part, F::MAX);
}

/// `stored` (up to [`TILE`] consecutive fine points of a line, the first even) += s · the
/// interpolated sums (`even[i]` for point 2i, `odd[i]` for point 2i + 1), rounded to the
/// compute precision, added to `stats` and rounded into storage.
#[inline(always)]
fn add_interpolated<F: Storage + TileIo, const LEVEL: u8>(
    stored: &mut [F],
    even: &[f64],
    odd: &[f64],
    scale: f64,
    stats: &mut TileStats<Compute<F>>,
) {
    let f = F::load::<LEVEL>(stored);
    let mut o = [Compute::<F>::zero(); TILE];
    for i in 0..TILE / 2 {
        o[2 * i] = Compute::<F>::from_f64(Real::to_f64(f[2 * i]) + scale * even[i]);
        o[2 * i + 1] = Compute::<F>::from_f64(Real::to_f64(f[2 * i + 1]) + scale * odd[i]);
    }
    stats.add::<F, LEVEL>(&o, stored.len());
    F::store::<LEVEL>(&o, stored);
}

/// [even, odd] (fine points 2a and 2a + 1 of a fine line for a = a0, a0 + 1, …) += w · the
/// interpolation of `line` (a coarse line of m_c points): fine point 2a gets ½w c(a − 1)
/// then ½w c(a), fine point 2a + 1 gets w c(a), where those coarse points exist. The others
/// are boundary zeros, read as zero lanes: the same bits as the block path, which leaves
/// them out, because a sum that starts at +0 is never −0 and so adding ±0 leaves it as it is.
#[inline(always)]
fn interpolate_tile<C: TileIo, const LEVEL: u8>(
    line: &[C],
    a0: usize,
    w: f64,
    [even, odd]: &mut [[f64; TILE]; 2],
) {
    let mc = line.len();
    if a0 >= 1 && a0 + TILE <= mc {
        // Inside the line: every even point has both coarse neighbours.
        let left = C::load::<LEVEL>(&line[a0 - 1..a0 - 1 + TILE]);
        let right = C::load::<LEVEL>(&line[a0..a0 + TILE]);
        add_interpolation::<C>(&left, &right, w, [even, odd]);
        return;
    }
    // A line's first or last tile: the lanes past its end load zeros, and c(−1) is a zero.
    let right = C::load::<LEVEL>(&line[a0.min(mc)..(a0 + TILE).min(mc)]);
    let left = if a0 >= 1 {
        C::load::<LEVEL>(&line[a0 - 1..(a0 - 1 + TILE).min(mc)])
    } else {
        let mut shifted = [Zero::zero(); TILE];
        shifted[1..].copy_from_slice(&right[..TILE - 1]);
        shifted
    };
    add_interpolation::<C>(&left, &right, w, [even, odd]);
}

/// even += ½w left + ½w right (in that order), odd += w right: [`interpolate_tile`]'s sums.
#[inline(always)]
fn add_interpolation<C: TileIo>(
    left: &[Compute<C>; TILE],
    right: &[Compute<C>; TILE],
    w: f64,
    [even, odd]: [&mut [f64; TILE]; 2],
) {
    let half = 0.5 * w;
    for i in 0..TILE {
        let (l, r) = (Real::to_f64(left[i]), Real::to_f64(right[i]));
        even[i] = (even[i] + half * l) + half * r;
        odd[i] += w * r;
    }
}

/// coarse = Pᵀ fine / s for one column (a zero scale gives zero; blocks:
/// [`restrict_block`]).
fn restrict_column<F: Storage + TileIo, C: Storage + TileIo>(
    fine: &[F],
    fine_grid: GridShape,
    coarse: &mut [C],
    coarse_grid: GridShape,
    scale: f64,
    stats: &mut Stats<Cpu>,
) {
    let grids = (fine_grid, coarse_grid, scale);
    for_each_column_plane(
        (coarse, coarse_grid.plane()),
        grids,
        stats,
        |args, out, part| match fine_grid.dim {
            2 => restrict_plane_2d::<F, C>((args, fine, out, part)),
            _ => arena::with(|arena| {
                let mf = fine_grid.m;
                let scratch = arena.one::<f64>(0, mf * mf + mf);
                restrict_plane_3d::<F, C>((args, fine, out, part, scratch))
            }),
        },
    );
    arena::sync();
}

// One coarse plane of [`restrict_column`] is fused and separable, in f64: the fine points
// it gathers restricted across the slower directions ([`restrict_across`]'s order), then
// along x per tile of 16 coarse points, divided by the scale, rounded to the compute
// precision, added to the plane's statistics (those of [`record_stats`]) and rounded into
// storage. One kernel per dimension (each compiled alone).

per_simd_level! {
    /// One coarse line of [`restrict_column`] in 2D: its three fine lines restricted
    /// across lines as they are read (a line is 2 m_c + 1 ≤ 8191 points of up to 64 KB:
    /// scratch for it would push it out of L1), then along x.
    fn restrict_plane_2d<F, C>((ColumnPlane, &[F], &mut [C], &mut [f64])) => restrict_plane_2d_portable
}

#[inline(always)]
fn restrict_plane_2d_portable<F: Storage + TileIo, C: Storage + TileIo, const LEVEL: u8>(
    (args, fine, coarse_line, part): (ColumnPlane, &[F], &mut [C], &mut [f64]),
) {
    let mf = args.fine_grid.m;
    let mut stats = TileStats::new();
    let lines = AcrossLines::<F, LEVEL>(fine, 2 * args.plane * mf, mf);
    restrict_line::<C, LEVEL>(&lines, inverse_scale(args.scale), coarse_line, &mut stats);
    stats.fold(part, C::MAX);
}

/// What [`restrict_plane_3d`] takes: the plane, the fine column, the coarse plane, its
/// statistics partials, and f64 scratch for one fine plane and one fine line.
type RestrictPlaneArgs<'a, F, C> = (
    ColumnPlane,
    &'a [F],
    &'a mut [C],
    &'a mut [f64],
    &'a mut [f64],
);

per_simd_level! {
    /// One coarse plane of [`restrict_column`] in 3D: its three fine planes restricted
    /// across planes into scratch (each fine value read once, in three sequential
    /// streams); then per coarse line, its three lines of that restricted across lines
    /// into scratch, and that restricted along x.
    fn restrict_plane_3d<F, C>(RestrictPlaneArgs<'_, F, C>) => restrict_plane_3d_portable
}

#[inline(always)]
fn restrict_plane_3d_portable<F: Storage + TileIo, C: Storage + TileIo, const LEVEL: u8>(
    (args, fine, coarse_plane, part, scratch): RestrictPlaneArgs<'_, F, C>,
) {
    let (mf, mc, q) = (args.fine_grid.m, args.coarse_grid.m, args.plane);
    let (across_planes, line) = scratch.split_at_mut(mf * mf);
    let first = 2 * q * mf * mf;
    for (j, z_line) in across_planes.chunks_exact_mut(mf).enumerate() {
        for i0 in (0..mf).step_by(TILE) {
            let t = TILE.min(mf - i0);
            let z = restrict_rows::<F, LEVEL>(fine, (first + j * mf + i0, mf * mf), (1, 0, t));
            f64::store::<LEVEL>(&z, &mut z_line[i0..i0 + t]);
        }
    }
    let factor = inverse_scale(args.scale);
    let mut stats = TileStats::new();
    for (b, out_line) in coarse_plane.chunks_exact_mut(mc).enumerate() {
        let lines = AcrossLines::<f64, LEVEL>(across_planes, 2 * b * mf, mf);
        for i0 in (0..mf).step_by(TILE) {
            let t = TILE.min(mf - i0);
            f64::store::<LEVEL>(&lines.tile(i0, t), &mut line[i0..i0 + t]);
        }
        stats.start_at(b * mc);
        restrict_line::<C, LEVEL>(&Line::<LEVEL>(line), factor, out_line, &mut stats);
    }
    stats.fold(part, C::MAX);
}

/// One coarse line of a column from its fine line restricted across the slower directions:
/// per tile of 16 coarse points, restricted along x ([`restrict_along`]), times `factor`,
/// rounded to the compute precision, added to `stats` and rounded into `out_line`.
#[inline(always)]
fn restrict_line<C: Storage + TileIo, const LEVEL: u8>(
    line: &impl FineLine,
    factor: f64,
    out_line: &mut [C],
    stats: &mut TileStats<Compute<C>>,
) {
    let mc = out_line.len();
    for a0 in (0..mc).step_by(TILE) {
        let t = TILE.min(mc - a0);
        let g = restrict_along(line, a0);
        let mut o = [Compute::<C>::zero(); TILE];
        for k in 0..TILE {
            o[k] = Compute::<C>::from_f64(g[k] * factor);
        }
        let stored = &mut out_line[a0..a0 + t];
        match <&mut [C; TILE]>::try_from(&mut *stored) {
            // A whole tile: a fixed-size store (no length to test or copy).
            Ok(whole) => {
                stats.add::<C, LEVEL>(&o, TILE);
                C::store::<LEVEL>(&o, whole);
            }
            Err(_) => {
                stats.add::<C, LEVEL>(&o, t);
                C::store::<LEVEL>(&o, stored);
            }
        }
    }
}

/// ½ (a + c) + b lane by lane: the 1D restriction (weights ½, 1, ½) of three neighbouring
/// points, in one order of operations everywhere, so that every path gives the same bits.
/// (As written on the GPU, where a fused multiply-add gives the same: ½ (a + c) is exact.)
#[inline(always)]
fn restrict3(a: &[f64; TILE], b: &[f64; TILE], c: &[f64; TILE]) -> [f64; TILE] {
    let mut out = [0.0; TILE];
    for k in 0..TILE {
        out[k] = 0.5 * (a[k] + c[k]) + b[k];
    }
    out
}

/// The first fine row (in the fine grid's lexicographic order) coarse line `b` of coarse
/// plane `q` gathers, at fine point x of that line: in 2D coarse line q gathers fine lines
/// 2q, 2q + 1, 2q + 2 (`b` is 0); in 3D fine lines 2b, 2b + 1, 2b + 2 of fine planes 2q,
/// 2q + 1, 2q + 2.
#[inline(always)]
fn restriction_base(fine_grid: GridShape, q: usize, b: usize, x: usize) -> usize {
    let mf = fine_grid.m;
    match fine_grid.dim {
        2 => 2 * q * mf + x,
        _ => (2 * q * mf + 2 * b) * mf + x,
    }
}

/// The restriction across the directions slower than x at fine row `first` + x (from
/// [`restriction_base`]) for a tile of `t` columns from `c0` of the node-major block `fine`
/// (`nrhs` columns; what the one-column kernels compute line by line): in 2D across lines,
/// [`restrict3`] of lines 0, 1, 2; in 3D across planes first, then across lines,
/// [`restrict3`] of the plane restrictions of lines 0, 1, 2. In f64 from storage.
#[inline(always)]
fn restrict_across<F: TileIo, const LEVEL: u8>(
    fine: &[F],
    fine_grid: GridShape,
    first: usize,
    nrhs: usize,
    c0: usize,
    t: usize,
) -> [f64; TILE] {
    let line = fine_grid.m;
    let columns = (nrhs, c0, t);
    if fine_grid.dim == 2 {
        return restrict_rows::<F, LEVEL>(fine, (first, line), columns);
    }
    let plane = line * line;
    let mut across_planes = [[0.0; TILE]; 3];
    for (dy, z) in across_planes.iter_mut().enumerate() {
        *z = restrict_rows::<F, LEVEL>(fine, (first + dy * line, plane), columns);
    }
    let [z0, z1, z2] = &across_planes;
    restrict3(z0, z1, z2)
}

/// [`restrict3`] of the node-major rows `row`, `row + stride` and `row + 2 stride` of `src`
/// (`nrhs` columns), a tile of `t` columns from `c0`, in f64 from storage.
#[inline(always)]
fn restrict_rows<S: TileIo, const LEVEL: u8>(
    src: &[S],
    (row, stride): (usize, usize),
    (nrhs, c0, t): (usize, usize, usize),
) -> [f64; TILE] {
    restrict3(
        &f64_tile::<S, LEVEL>(src, row, nrhs, c0, t),
        &f64_tile::<S, LEVEL>(src, row + stride, nrhs, c0, t),
        &f64_tile::<S, LEVEL>(src, row + 2 * stride, nrhs, c0, t),
    )
}

/// One fine line of a column restricted across the slower directions, as
/// [`restrict_along`] reads it: `tile(x, t)`, its `t` ≤ [`TILE`] points from x (the lanes
/// past them zero), and `point(x)`. (A trait with `#[inline(always)]` methods, not
/// closures: closures do not get the kernel's target features.)
trait FineLine {
    fn len(&self) -> usize;
    fn tile(&self, x: usize, t: usize) -> [f64; TILE];
    fn point(&self, x: usize) -> f64;
}

/// The three lines of `.0` from row `.1` (lines of `.2` points; one column) restricted
/// across lines ([`restrict3`]) as they are read.
struct AcrossLines<'a, S, const LEVEL: u8>(&'a [S], usize, usize);

impl<S: TileIo, const LEVEL: u8> FineLine for AcrossLines<'_, S, LEVEL> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.2
    }

    #[inline(always)]
    fn tile(&self, x: usize, t: usize) -> [f64; TILE] {
        restrict_rows::<S, LEVEL>(self.0, (self.1 + x, self.2), (1, 0, t))
    }

    #[inline(always)]
    fn point(&self, x: usize) -> f64 {
        let (src, row, stride) = (self.0, self.1 + x, self.2);
        let (a, b, c) = (src[row], src[row + stride], src[row + 2 * stride]);
        let (a, b, c) = (S::to_compute(a), S::to_compute(b), S::to_compute(c));
        0.5 * (Real::to_f64(a) + Real::to_f64(c)) + Real::to_f64(b)
    }
}

/// A line already restricted across the slower directions, in f64.
struct Line<'a, const LEVEL: u8>(&'a [f64]);

impl<const LEVEL: u8> FineLine for Line<'_, LEVEL> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.0.len()
    }

    #[inline(always)]
    fn tile(&self, x: usize, t: usize) -> [f64; TILE] {
        f64::load::<LEVEL>(&self.0[x..x + t])
    }

    #[inline(always)]
    fn point(&self, x: usize) -> f64 {
        self.0[x]
    }
}

/// The restriction along x of a fine line restricted across the slower directions (2 m_c + 1
/// points) at coarse points a0, a0 + 1, …: [`restrict3`] of f(2a), f(2a + 1), f(2a + 2).
/// Lanes past the line's last coarse point are not meaningful.
#[inline(always)]
fn restrict_along(line: &impl FineLine, a0: usize) -> [f64; TILE] {
    let (x, m) = (2 * a0, line.len());
    let (low, high, last) = if x + 2 * TILE < m {
        (
            line.tile(x, TILE),
            line.tile(x + TILE, TILE),
            line.point(x + 2 * TILE),
        )
    } else {
        // The line's last tile: f(2a + 2) exists for each of its coarse points a; the
        // lanes past them load zeros.
        let middle = (x + TILE).min(m);
        (line.tile(x, middle - x), line.tile(middle, m - middle), 0.0)
    };
    // f(2a), f(2a + 1), f(2a + 2) picked from the two tiles in registers (no array through
    // memory: a wide store read back narrower stalls).
    let (mut even, mut odd) = ([0.0f64; TILE], [0.0f64; TILE]);
    for k in 0..TILE / 2 {
        even[k] = low[2 * k];
        odd[k] = low[2 * k + 1];
        even[TILE / 2 + k] = high[2 * k];
        odd[TILE / 2 + k] = high[2 * k + 1];
    }
    let mut next = [last; TILE];
    next[..TILE - 1].copy_from_slice(&even[1..]);
    restrict3(&even, &odd, &next)
}

/// The coarse points fine point `i` of fine plane `p` interpolates, with their weights, in
/// the order the line-by-line sum adds them (coarse plane, then line, then point, each
/// ascending): up to 4 in 2D, 8 in 3D; returns their count.
#[inline(always)]
fn interpolation_terms(
    fine_grid: GridShape,
    coarse_grid: GridShape,
    p: usize,
    i: usize,
    terms: &mut [(usize, f64); 8],
) -> usize {
    let (mf, mc) = (fine_grid.m, coarse_grid.m);
    let mut count = 0;
    let (planes, planes_count) = interpolation_1d(p, mc);
    for &(q, wq) in &planes[..planes_count] {
        let (lines, lines_count, k) = if fine_grid.dim == 2 {
            ([(0, 1.0), (0, 0.0)], 1, i)
        } else {
            let (l, c) = interpolation_1d(i / mf, mc);
            (l, c, i % mf)
        };
        let (points, points_count) = interpolation_1d(k, mc);
        for &(b, wb) in &lines[..lines_count] {
            let w = wq * wb;
            for &(a, wa) in &points[..points_count] {
                let row = if fine_grid.dim == 2 {
                    q * mc + a
                } else {
                    (q * mc + b) * mc + a
                };
                terms[count] = (row, w * wa);
                count += 1;
            }
        }
    }
    count
}

/// A tile of `t` columns from `c0` of node-major row `row` of `src` (`nrhs` columns),
/// widened to f64 (exactly).
#[inline(always)]
fn f64_tile<S: TileIo, const LEVEL: u8>(
    src: &[S],
    row: usize,
    nrhs: usize,
    c0: usize,
    t: usize,
) -> [f64; TILE] {
    let start = row * nrhs + c0;
    S::load_f64::<LEVEL>(&src[start..start + t])
}

/// A fused block transfer's work on one output plane: the output rows (`nrhs` columns
/// each), their statistics partials, and scratch for Σ v² (four row lanes per tile) and
/// max |v| per tile.
type PlaneOut<'a, O> = (
    &'a mut [O],
    &'a mut [f64],
    &'a mut [[f64; TILE]],
    &'a mut [[Compute<O>; TILE]],
);

/// Runs `plane(p, out, per_column)` for every output plane p of a fused block transfer (one
/// rayon task each, its scratch, `per_column` an f64 per column included, from the thread's
/// arena: nothing is allocated) and reduces the statistics in plane order.
fn for_each_plane<O: Storage + TileIo>(
    out: &mut [O],
    plane_len: usize,
    nrhs: usize,
    stats: &mut Stats<Cpu>,
    plane: impl Fn(usize, PlaneOut<'_, O>, &mut [f64]) + Sync,
) {
    let part = partials(stats, out.len() / plane_len);
    out.par_chunks_mut(plane_len)
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(nrhs)))
        .enumerate()
        .for_each(|(p, (rows, part))| {
            arena::with(|arena| {
                let tiles = nrhs.div_ceil(TILE);
                let (sumsq, largest, per_column, _) = arena
                    .four::<[f64; TILE], [Compute<O>; TILE], f64, u8>(4 * tiles, tiles, nrhs, 0);
                plane(p, (rows, part, sumsq, largest), per_column);
            })
        });
    arena::sync();
    reduce(stats);
}

/// The output points of one plane of a fused block transfer, one at a time.
trait PlanePoints<O: TileIo> {
    /// Makes point `i` of the plane the current one.
    fn at(&mut self, i: usize);
    /// The current point's `t` columns from `c0` into its output row `out`, with the
    /// statistics of what was stored.
    fn tile<const LEVEL: u8>(
        &self,
        c0: usize,
        t: usize,
        out: &mut [O],
        lane: &mut [f64; TILE],
        top: &mut [Compute<O>; TILE],
    );
}

/// One output plane of a fused block transfer: per point and tile of columns
/// [`PlanePoints::tile`] (whole tiles, then the partial one compiled for its width), the
/// statistics folded per plane in the order of [`record_stats`] over the plane.
#[inline(always)]
fn plane_block<O: Storage + TileIo, P: PlanePoints<O>, const LEVEL: u8>(
    mut points: P,
    nrhs: usize,
    (plane, part, sumsq, largest): PlaneOut<'_, O>,
) {
    sumsq.fill([0.0; TILE]);
    largest.fill([Compute::<O>::zero(); TILE]);
    for (i, out) in plane.chunks_exact_mut(nrhs).enumerate() {
        points.at(i);
        row_tiles!(nrhs, i, sumsq, largest, |c0, t, lane, top| {
            points.tile::<LEVEL>(c0, t, out, lane, top)
        });
    }
    fold_tiles(part, nrhs, sumsq, largest, O::MAX);
}

/// coarse = Pᵀ fine / s_c for a block of two or more columns, one fused pass per coarse
/// plane: per coarse point and tile of columns the separable restriction of
/// [`restrict_column`] (across the slower directions at the three fine points along x, then
/// along x) in f64 from storage, scaled, rounded into storage, with the plane's
/// statistics. Each column gets what [`restrict_column`] gives it alone.
fn restrict_block<F: Storage + TileIo, C: Storage + TileIo>(
    fine: &[F],
    fine_grid: GridShape,
    coarse: &mut [C],
    coarse_grid: GridShape,
    scale: &[f64],
    stats: &mut Stats<Cpu>,
) {
    let nrhs = scale.len();
    let norms = stats.norms();
    let plane_len = coarse_grid.plane() * nrhs;
    for_each_plane(coarse, plane_len, nrhs, stats, |q, out, factors| {
        for (f, &s) in factors.iter_mut().zip(scale) {
            *f = inverse_scale(s);
        }
        let points = RestrictPoints {
            fine,
            grids: (fine_grid, coarse_grid),
            plane: q,
            first: 0,
            factors,
            norms,
        };
        restrict_plane_block::<F, C>((points, out));
    });
}

per_simd_level! {
    /// One coarse plane of [`restrict_block`].
    fn restrict_plane_block<F, C>((RestrictPoints<'_, F>, PlaneOut<'_, C>)) => restrict_plane_block_portable
}

#[inline(always)]
fn restrict_plane_block_portable<F: Storage + TileIo, C: Storage + TileIo, const LEVEL: u8>(
    (points, out): (RestrictPoints<'_, F>, PlaneOut<'_, C>),
) {
    let nrhs = points.factors.len();
    plane_block::<C, _, LEVEL>(points, nrhs, out)
}

/// The coarse points of one plane of [`restrict_block`]: the fine block, the grids, the
/// coarse plane's index, the current point's first fine row ([`restriction_base`]), 1 / s_c
/// per column, whether Σ v² is kept.
struct RestrictPoints<'a, F> {
    fine: &'a [F],
    grids: (GridShape, GridShape),
    plane: usize,
    first: usize,
    factors: &'a [f64],
    norms: bool,
}

impl<F: TileIo, C: Storage + TileIo> PlanePoints<C> for RestrictPoints<'_, F> {
    #[inline(always)]
    fn at(&mut self, i: usize) {
        let (fine_grid, coarse_grid) = self.grids;
        let mc = coarse_grid.m;
        let (b, a) = match fine_grid.dim {
            2 => (0, i),
            _ => (i / mc, i % mc),
        };
        self.first = restriction_base(fine_grid, self.plane, b, 2 * a);
    }

    /// [`restrict3`] of the restrictions across the slower directions ([`restrict_across`])
    /// at the fine points 2a, 2a + 1, 2a + 2 along x, times 1 / s_c, rounded into `out`.
    #[inline(always)]
    fn tile<const LEVEL: u8>(
        &self,
        c0: usize,
        t: usize,
        out: &mut [C],
        lane: &mut [f64; TILE],
        top: &mut [Compute<C>; TILE],
    ) {
        let nrhs = self.factors.len();
        let fine_grid = self.grids.0;
        let mut along = [[0.0; TILE]; 3];
        for (dx, y) in along.iter_mut().enumerate() {
            *y = restrict_across::<F, LEVEL>(self.fine, fine_grid, self.first + dx, nrhs, c0, t);
        }
        let [y0, y1, y2] = &along;
        let acc = restrict3(y0, y1, y2);
        let mut factor = [0.0; TILE];
        factor[..t].copy_from_slice(&self.factors[c0..c0 + t]);
        let mut scaled = [0.0; TILE];
        for c in 0..TILE {
            scaled[c] = acc[c] * factor[c];
        }
        let o = C::narrow::<LEVEL>(&scaled);
        record_tile::<C>(self.norms, &o, lane, top);
        C::store::<LEVEL>(&o, &mut out[c0..c0 + t]);
    }
}

/// fine += s_c · P coarse for a block of two or more columns, one fused pass per fine
/// plane: per fine point and tile of columns the coarse terms of [`interpolation_terms`]
/// summed in f64 from storage, scaled and added to the fine value, rounded into storage,
/// with the plane's statistics. Each column gets what [`prolongate_add_column`] gives it
/// alone.
fn prolongate_add_block<C: Storage + TileIo, F: Storage + TileIo>(
    coarse: &[C],
    coarse_grid: GridShape,
    fine: &mut [F],
    fine_grid: GridShape,
    scale: &[f64],
    stats: &mut Stats<Cpu>,
) {
    let nrhs = scale.len();
    let norms = stats.norms();
    let plane_len = fine_grid.plane() * nrhs;
    for_each_plane(fine, plane_len, nrhs, stats, |p, out, _| {
        let points = InterpolatePoints {
            coarse,
            grids: (fine_grid, coarse_grid),
            plane: p,
            terms: [(0, 0.0); 8],
            count: 0,
            scale,
            norms,
        };
        interpolate_plane_block::<C, F>((points, out));
    });
}

per_simd_level! {
    /// One fine plane of [`prolongate_add_block`].
    fn interpolate_plane_block<C, F>((InterpolatePoints<'_, C>, PlaneOut<'_, F>)) => interpolate_plane_block_portable
}

#[inline(always)]
fn interpolate_plane_block_portable<C: Storage + TileIo, F: Storage + TileIo, const LEVEL: u8>(
    (points, out): (InterpolatePoints<'_, C>, PlaneOut<'_, F>),
) {
    let nrhs = points.scale.len();
    plane_block::<F, _, LEVEL>(points, nrhs, out)
}

/// The fine points of one plane of [`prolongate_add_block`]: the coarse block, the grids,
/// the fine plane's index, the current point's terms, s_c per column, whether Σ v² is kept.
struct InterpolatePoints<'a, C> {
    coarse: &'a [C],
    grids: (GridShape, GridShape),
    plane: usize,
    terms: [(usize, f64); 8],
    count: usize,
    scale: &'a [f64],
    norms: bool,
}

impl<C: TileIo, F: Storage + TileIo> PlanePoints<F> for InterpolatePoints<'_, C> {
    #[inline(always)]
    fn at(&mut self, i: usize) {
        let (fine_grid, coarse_grid) = self.grids;
        self.count = interpolation_terms(fine_grid, coarse_grid, self.plane, i, &mut self.terms);
    }

    /// Σ w v over the terms in f64 (the order of [`interpolate_tile`]), f + s_c Σ
    /// rounded back into the fine row `fine`.
    #[inline(always)]
    fn tile<const LEVEL: u8>(
        &self,
        c0: usize,
        t: usize,
        fine: &mut [F],
        lane: &mut [f64; TILE],
        top: &mut [Compute<F>; TILE],
    ) {
        let nrhs = self.scale.len();
        let mut acc = [0.0f64; TILE];
        for &(row, w) in &self.terms[..self.count] {
            let v = f64_tile::<C, LEVEL>(self.coarse, row, nrhs, c0, t);
            for c in 0..TILE {
                acc[c] += w * v[c];
            }
        }
        let f = F::load_f64::<LEVEL>(&fine[c0..c0 + t]);
        let mut scale = [0.0; TILE];
        scale[..t].copy_from_slice(&self.scale[c0..c0 + t]);
        let mut sum = [0.0; TILE];
        for c in 0..TILE {
            sum[c] = f[c] + scale[c] * acc[c];
        }
        let o = F::narrow::<LEVEL>(&sum);
        record_tile::<F>(self.norms, &o, lane, top);
        F::store::<LEVEL>(&o, &mut fine[c0..c0 + t]);
    }
}

/// Output rows of a matrix transfer per rayon task.
const MATRIX_CHUNK_ROWS: usize = 1024;

/// dst = M src / s_c (restriction, M = R) or dst += s_c · M src (prolongation, M = P) per
/// column, M a CSR matrix with f64 weights (out rows × in rows); the statistics are those
/// of the stored dst.
fn matrix_transfer<S: Storage, T: Storage>(
    m: &CsrMatrix<Cpu>,
    direction: Direction,
    src: &[S],
    dst: &mut [T],
    nrhs: usize,
    scale: &[f64],
    stats: &mut Stats<Cpu>,
) -> Result<()> {
    let weights = buffer::<f64>(&m.values, direction.name())?;
    let (row_ptr, col_idx) = (&m.row_ptr, &m.col_idx);
    let keep = direction == Direction::ProlongateAdd;
    let part = partials(stats, m.nrows.div_ceil(MATRIX_CHUNK_ROWS).max(1));
    dst.par_chunks_mut(MATRIX_CHUNK_ROWS * nrhs)
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(nrhs)))
        .enumerate()
        .for_each(|(k, (dst_rows, part))| {
            arena::with(|arena| {
                let (acc, outs, _, _) =
                    arena.four::<f64, Compute<T>, f64, f64>(dst_rows.len(), dst_rows.len(), 0, 0);
                acc.fill(0.0);
                let first = k * MATRIX_CHUNK_ROWS;
                for (i, acc_row) in acc.chunks_exact_mut(nrhs).enumerate() {
                    let row = first + i;
                    for e in row_ptr[row] as usize..row_ptr[row + 1] as usize {
                        let (j, w) = (col_idx[e] as usize, weights[e]);
                        for (a, v) in acc_row.iter_mut().zip(&src[j * nrhs..(j + 1) * nrhs]) {
                            *a += w * v.to_f64();
                        }
                    }
                }
                for ((o_row, a_row), d_row) in outs
                    .chunks_exact_mut(nrhs)
                    .zip(acc.chunks_exact(nrhs))
                    .zip(dst_rows.chunks_exact(nrhs))
                {
                    for (((o, &a), d), &s) in o_row.iter_mut().zip(a_row).zip(d_row).zip(scale) {
                        let kept = if keep { d.to_f64() } else { 0.0 };
                        *o = Compute::<T>::from_f64(kept + direction.factor(s) * a);
                    }
                }
                record_stats(part, outs, nrhs, T::MAX);
                T::narrow_slice(outs, dst_rows);
            })
        });
    arena::sync();
    reduce(stats);
    Ok(())
}

/// A transfer in `direction` from `src` to `dst` (fine → coarse or coarse → fine), node-
/// major blocks in any precisions.
pub(super) fn transfer_block(
    direction: Direction,
    transfer: &LevelTransfer<Cpu>,
    src: &Block<Cpu>,
    dst: &mut Block<Cpu>,
    scale: &[f64],
    stats: &mut Stats<Cpu>,
) -> Result<()> {
    let nrhs = src.cols();
    let kernel = direction.name();
    by_precision!(src.precision(), S => by_precision!(dst.precision(), T => {
        let (src, dst) = (buffer::<S>(&src.data, kernel)?, buffer_mut::<T>(&mut dst.data, kernel)?);
        match (transfer, direction) {
            (LevelTransfer::Grid { fine, coarse }, Direction::Restrict) if nrhs == 1 => {
                restrict_column::<S, T>(src, *fine, dst, *coarse, scale[0], stats)
            }
            (LevelTransfer::Grid { fine, coarse }, Direction::Restrict) => {
                restrict_block::<S, T>(src, *fine, dst, *coarse, scale, stats)
            }
            (LevelTransfer::Grid { fine, coarse }, Direction::ProlongateAdd) if nrhs == 1 => {
                prolongate_add_column::<S, T>(src, *coarse, dst, *fine, scale[0], stats)
            }
            (LevelTransfer::Grid { fine, coarse }, Direction::ProlongateAdd) => {
                prolongate_add_block::<S, T>(src, *coarse, dst, *fine, scale, stats)
            }
            (LevelTransfer::Matrix { restriction, .. }, Direction::Restrict) => {
                matrix_transfer::<S, T>(restriction, direction, src, dst, nrhs, scale, stats)?
            }
            (LevelTransfer::Matrix { prolongation, .. }, Direction::ProlongateAdd) => {
                matrix_transfer::<S, T>(prolongation, direction, src, dst, nrhs, scale, stats)?
            }
        }
    }));
    Ok(())
}
