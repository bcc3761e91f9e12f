//! Products of a dense column-major matrix with one vector (one right-hand side): one pass
//! that streams the matrix at the memory bound.
//!
//! The matrix is cut into parts of whole columns, each a contiguous run of memory that one
//! task streams front to back (segments of every column for a block of rows would restart
//! the hardware prefetcher at each column). Each part adds its columns into a partial y of
//! its own (L1/L2-resident), and the partials are added in part order. The parts depend on
//! the shape alone, so the result does not depend on the number of threads; each lane's
//! sums run in one order at every SIMD level (no fused multiply-add), so it does not depend
//! on the level either.
//!
//! [`symv`] reads only the lower triangle of a symmetric matrix: each a_ij below the
//! diagonal serves y_i (a_ij x_j, added into the partial) and y_j (a_ij x_i, a dot product
//! down column j), so half the bytes of [`gemv`].

use num_traits::Zero;
use rayon::prelude::*;

use super::super::arena;
use super::super::simd::{per_simd_level, TileIo, TILE};
use super::super::Compute;
use crate::device::Storage;
use crate::precision::Real;

/// Matrix entries one part streams at least (1 MiB of f32).
const PART_ENTRIES: usize = 1 << 18;
/// Most parts of one product: each keeps a partial y, added in order at the end.
const MAX_PARTS: usize = 64;
/// Columns one pass over a tile of rows adds at once (their tiles and the partial stay in
/// registers). Eight rather than four: the partial y and x tiles (L2-resident) are read
/// half as often per matrix entry, which took the SYMV from 65–73 % to 77–80 % of a plain
/// read in f16 (AVX-512 and AVX2 alike; f32/f64 gain less). SYMV's sums depend on it
/// (where a column's dot product leaves the triangle for the lanes), so it is one
/// constant for every SIMD level.
const GROUP: usize = 8;
/// Rows per task of the final sum of the partials.
const SUM_ROWS: usize = 1 << 12;

/// Where each part's columns start, and n at the end (no allocation: a product allocates
/// nothing once its scratch has grown).
struct Parts {
    bounds: [usize; MAX_PARTS + 1],
    count: usize,
}

impl Parts {
    /// The part boundaries (first column of each part, then n).
    fn bounds(&self) -> &[usize] {
        &self.bounds[..=self.count]
    }
}

/// About the same number of entries per part when column j holds `height(j)` of them.
fn column_parts(n: usize, height: impl Fn(usize) -> usize) -> Parts {
    let total: usize = (0..n).map(&height).sum();
    let parts = (total / PART_ENTRIES).clamp(1, MAX_PARTS).min(n.max(1));
    let mut bounds = [0; MAX_PARTS + 1];
    let mut count = 1;
    let mut seen = 0;
    for j in 0..n {
        if seen * parts >= count * total && count < parts {
            bounds[count] = j;
            count += 1;
        }
        seen += height(j);
    }
    bounds[count] = n;
    Parts { bounds, count }
}

/// `src` as one tile, the lanes past its end zero.
#[inline(always)]
fn load<T: Real>(src: &[T]) -> [T; TILE] {
    if let Ok(full) = <&[T; TILE]>::try_from(src) {
        return *full;
    }
    let mut tile = [T::zero(); TILE];
    for (t, &s) in tile.iter_mut().zip(src) {
        *t = s;
    }
    tile
}

/// The first `dst.len()` lanes of `tile` into `dst`.
#[inline(always)]
fn store<T: Real>(tile: &[T; TILE], dst: &mut [T]) {
    if let Ok(full) = <&mut [T; TILE]>::try_from(&mut *dst) {
        *full = *tile;
        return;
    }
    for (d, &t) in dst.iter_mut().zip(tile) {
        *d = t;
    }
}

/// The lanes of `tile` added in a fixed tree (halves, quarters, …).
#[inline(always)]
fn lane_sum<T: Real>(mut tile: [T; TILE]) -> T {
    let mut width = TILE / 2;
    while width > 0 {
        for l in 0..width {
            tile[l] = tile[l] + tile[l + width];
        }
        width /= 2;
    }
    tile[0]
}

/// (matrix from the part's first column, ld, rows, the part's entries of x, its partial y).
type GemvPartArgs<'a, S> = (
    &'a [S],
    usize,
    usize,
    &'a [Compute<S>],
    &'a mut [Compute<S>],
);

per_simd_level! {
    /// partial = A_part x_part, [`GROUP`] columns per pass over the rows.
    fn gemv_part<S>(GemvPartArgs<'_, S>) => gemv_part_portable
}

#[inline(always)]
fn gemv_part_portable<S: Storage + TileIo, const LEVEL: u8>(
    (a, ld, rows, x, partial): GemvPartArgs<'_, S>,
) {
    partial.fill(Compute::<S>::zero());
    let mut j = 0;
    while j < x.len() {
        if x.len() - j >= GROUP {
            gemv_columns::<S, LEVEL, GROUP>(a, ld, rows, j, x, partial);
            j += GROUP;
        } else {
            gemv_columns::<S, LEVEL, 1>(a, ld, rows, j, x, partial);
            j += 1;
        }
    }
}

/// partial += Σ_c A[:, j + c] x[j + c] for G columns, row by row in column order.
#[inline(always)]
fn gemv_columns<S: Storage + TileIo, const LEVEL: u8, const G: usize>(
    a: &[S],
    ld: usize,
    rows: usize,
    j: usize,
    x: &[Compute<S>],
    partial: &mut [Compute<S>],
) {
    let columns: [&[S]; G] = std::array::from_fn(|c| &a[(j + c) * ld..(j + c) * ld + rows]);
    let xs: [Compute<S>; G] = std::array::from_fn(|c| x[j + c]);
    // Whole tiles in the loop (no lengths to check), the rest once.
    let whole = rows / TILE * TILE;
    for r in (0..whole).step_by(TILE) {
        gemv_tile::<S, LEVEL, G, TILE>(&columns, r, &xs, partial);
    }
    match rows - whole {
        0 => {}
        t => {
            let columns = columns.map(|column| &column[whole..]);
            gemv_tile::<S, LEVEL, G, 0>(&columns, 0, &xs, &mut partial[whole..whole + t]);
        }
    }
}

/// partial[r..r + T] += Σ_c columns[c][r..r + T] xs[c]; T = 0: the whole (short) slices.
#[inline(always)]
fn gemv_tile<S: Storage + TileIo, const LEVEL: u8, const G: usize, const T: usize>(
    columns: &[&[S]; G],
    r: usize,
    xs: &[Compute<S>; G],
    partial: &mut [Compute<S>],
) {
    let t = if T == 0 { partial.len() - r } else { T };
    let mut p = load(&partial[r..r + t]);
    for c in 0..G {
        let av = S::load::<LEVEL>(&columns[c][r..r + t]);
        for l in 0..TILE {
            p[l] = p[l] + av[l] * xs[c];
        }
    }
    store(&p, &mut partial[r..r + t]);
}

/// (matrix, offset, ld, the part's columns, x, the part's partial y over all rows).
type SymvPartArgs<'a, S> = (
    &'a [S],
    usize,
    usize,
    (usize, usize),
    &'a [Compute<S>],
    &'a mut [Compute<S>],
);

per_simd_level! {
    /// The part's columns j0..j1 of the lower triangle: partial_i = Σ_j a_ij x_j (i ≥ j)
    /// and partial_j += Σ_{i>j} a_ij x_i. Rows from j0 rounded down to a tile are written
    /// (zero above j0); rows above are not touched.
    fn symv_part<S>(SymvPartArgs<'_, S>) => symv_part_portable
}

#[inline(always)]
fn symv_part_portable<S: Storage + TileIo, const LEVEL: u8>(
    (a, offset, ld, (j0, j1), x, partial): SymvPartArgs<'_, S>,
) {
    partial[j0 / TILE * TILE..].fill(Compute::<S>::zero());
    let mut j = j0;
    while j < j1 {
        if j1 - j >= GROUP {
            symv_columns::<S, LEVEL, GROUP>(a, offset, ld, j, x, partial);
            j += GROUP;
        } else {
            symv_columns::<S, LEVEL, 1>(a, offset, ld, j, x, partial);
            j += 1;
        }
    }
}

/// Columns j..j+G of the lower triangle into the partial: the G×G triangle at the top one
/// entry at a time, the rows below in tiles (both halves' products from one load).
#[inline(always)]
fn symv_columns<S: Storage + TileIo, const LEVEL: u8, const G: usize>(
    a: &[S],
    offset: usize,
    ld: usize,
    j: usize,
    x: &[Compute<S>],
    partial: &mut [Compute<S>],
) {
    let n = x.len();
    let zero = Compute::<S>::zero();
    let columns: [&[S]; G] = std::array::from_fn(|c| {
        let start = offset + (j + c) * ld;
        &a[start..start + n]
    });
    let xs: [Compute<S>; G] = std::array::from_fn(|c| x[j + c]);
    // Column j + c's dot product below the diagonal: the triangle's entries, then lanes
    // (each lane: its entry of the short last tile, then the whole tiles in order).
    let mut head = [zero; G];
    for r in j..j + G {
        for c in 0..=r - j {
            let v = columns[c][r].to_compute();
            partial[r] = partial[r] + v * xs[c];
            if r > j + c {
                head[c] = head[c] + v * x[r];
            }
        }
    }
    // f64: each lane of a dot product takes both halves of a tile (lanes l and l + 8), so
    // eight columns' sums are eight AVX-512 registers rather than sixteen (with sixteen,
    // LLVM kept them on the stack and the loop ran at half its in-cache speed).
    let fold = std::mem::size_of::<Compute<S>>() == 8;
    let mut dots = [[zero; TILE]; G];
    // Rows r..r + t (t ≤ TILE): partial += Σ_c a_c xs[c], dots[c] += a_c x. Whole tiles in
    // the loop (no lengths to check), the rest once.
    macro_rules! tile {
        ($r:expr, $t:expr) => {{
            let (r, t) = ($r, $t);
            let xt = load(&x[r..r + t]);
            let mut p = load(&partial[r..r + t]);
            for c in 0..G {
                let av = S::load::<LEVEL>(&columns[c][r..r + t]);
                for l in 0..TILE {
                    p[l] = p[l] + av[l] * xs[c];
                }
                if fold {
                    for l in 0..TILE / 2 {
                        let h = l + TILE / 2;
                        dots[c][l] = dots[c][l] + (av[l] * xt[l] + av[h] * xt[h]);
                    }
                } else {
                    for l in 0..TILE {
                        dots[c][l] = dots[c][l] + av[l] * xt[l];
                    }
                }
            }
            store(&p, &mut partial[r..r + t]);
        }};
    }
    // The short last tile first: with it after the loop, LLVM kept the dot products in
    // memory through the loop (seven of eight spilled, the SYMV at half its in-cache speed).
    let below = j + G;
    let whole = below + (n.max(below) - below) / TILE * TILE;
    if whole < n {
        tile!(whole, n - whole);
    }
    for r in (below..whole).step_by(TILE) {
        tile!(r, TILE);
    }
    for c in 0..G {
        partial[j + c] = partial[j + c] + (head[c] + lane_sum(dots[c]));
    }
}

/// y = A x for a column-major m×n matrix A (leading dimension `ld` ≥ m, from `offset`)
/// stored in S, x and y in S's compute precision.
pub(super) fn gemv<S: Storage + TileIo>(
    (m, n): (usize, usize),
    a: &[S],
    offset: usize,
    ld: usize,
    x: &[Compute<S>],
    y: &mut [Compute<S>],
) {
    let (x, y) = (&x[..n], &mut y[..m]);
    if m == 0 {
        return;
    }
    let parts = column_parts(n, |_| m);
    sum_over_parts(
        &parts,
        y,
        |_| 0,
        |(j0, j1), partial| {
            gemv_part::<S>((&a[offset + j0 * ld..], ld, m, &x[j0..j1], partial));
        },
    );
}

/// y = A x for a symmetric n×n A (column-major, leading dimension `ld`, from `offset`) of
/// which only the lower triangle is read.
pub(super) fn symv<S: Storage + TileIo>(
    n: usize,
    a: &[S],
    offset: usize,
    ld: usize,
    x: &[Compute<S>],
    y: &mut [Compute<S>],
) {
    let (x, y) = (&x[..n], &mut y[..n]);
    if n == 0 {
        return;
    }
    let parts = column_parts(n, |j| n - j);
    sum_over_parts(
        &parts,
        y,
        |j0| j0 / TILE * TILE,
        |columns, partial| {
            symv_part::<S>((a, offset, ld, columns, x, partial));
        },
    );
}

/// y = Σ_k partial_k: `part((j0, j1), partial_k)` writes each part's partial (`y.len()` rows,
/// in the shared scratch) in parallel, then the partials are added in part order; part k's
/// partial counts from row `first(j0)` (a multiple of [`TILE`], increasing with k).
fn sum_over_parts<T: Real + bytemuck::Pod>(
    parts: &Parts,
    y: &mut [T],
    first: impl Fn(usize) -> usize + Sync,
    part: impl Fn((usize, usize), &mut [T]) + Sync,
) {
    let (rows, bounds) = (y.len(), parts.bounds());
    arena::with_shared::<T, _>(parts.count * rows, |partials| {
        partials
            .par_chunks_mut(rows)
            .enumerate()
            .for_each(|(k, partial)| part((bounds[k], bounds[k + 1]), partial));
        sum_partials(partials, &bounds[..parts.count], first, y);
    });
}

/// y = Σ_k partial_k in part order, where part k's partial is valid from row `first(start_k)`
/// (a multiple of [`TILE`]; parts start in increasing order).
fn sum_partials<T: Real>(
    partials: &[T],
    starts: &[usize],
    first: impl Fn(usize) -> usize + Sync,
    y: &mut [T],
) {
    let rows = y.len();
    y.par_chunks_mut(SUM_ROWS)
        .enumerate()
        .for_each(|(chunk, yc)| {
            for (t, yt) in yc.chunks_mut(TILE).enumerate() {
                let r = chunk * SUM_ROWS + t * TILE;
                let len = yt.len();
                let mut sum = [T::zero(); TILE];
                for (k, &start) in starts.iter().enumerate() {
                    if first(start) > r {
                        break;
                    }
                    let p = load(&partials[k * rows + r..k * rows + r + len]);
                    for l in 0..TILE {
                        sum[l] = sum[l] + p[l];
                    }
                }
                store(&sum, yt);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_columns_with_similar_areas() {
        for n in [1, 7, 300, 7200] {
            let parts = column_parts(n, |j| n - j);
            let starts = parts.bounds();
            assert_eq!((starts[0], *starts.last().unwrap()), (0, n));
            assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
            let area = |a: usize, b: usize| (a..b).map(|j| n - j).sum::<usize>();
            let parts = starts.len() - 1;
            let ideal = area(0, n) / parts;
            for w in starts.windows(2) {
                // Off by less than one column from the ideal share.
                assert!(area(w[0], w[1]).abs_diff(ideal) <= n, "{n}: {starts:?}");
            }
        }
        assert_eq!(column_parts(7200, |j| 7200 - j).count, MAX_PARTS);
        assert_eq!(column_parts(300, |_| 225).count, 1);
    }
}
