//! The Stokes kernels on the CPU: structured stencils (rayon over lattice rows, one
//! accumulator per window row so the multiply-adds form independent chains), the FE grid
//! transfers as tensor products of 1D taps, Vanka's gather / patch products / scatter, and
//! the coarsest dense solve.

use num_traits::Zero;
use rayon::prelude::*;

use super::dense::product_in_task;
use super::simd::{per_simd_level, KernelStorage, TILE};
use super::{arena, buffer, buffer_mut, by_precision, slice, slice_mut, Compute, Cpu};
use crate::device::stokes::{
    lattice_reach, patch_node, pressure_window, set_of, set_row, vanka_relax_in_turn, CoarseSolve,
    Grid, LatticeRows, PressureRows, SharedRows, StokesKernels, StokesMatrices, Transfer,
    VankaMaps, VankaRelax, PATCH,
};
use crate::device::{unsupported, Block, Data, DenseKernels, Storage, View, ViewMut};
use crate::error::{Error, Result};
use crate::precision::{Real, Stored};

/// The pressure slot of a patch.
const PRESSURE_SLOT: usize = 50;

/// Lattice rows in S, typed.
struct Rows<'a, S> {
    n: usize,
    scale: f64,
    widths: [usize; 4],
    sets: [&'a [S]; 4],
    shared: [Option<&'a SharedRows>; 4],
}

impl<S> Rows<'_, S> {
    /// Row (I, J)'s coefficients: its representative's where they are the same.
    #[inline(always)]
    fn row(&self, i: usize, j: usize) -> &[S] {
        let s = set_of(i, j);
        let mut r = set_row(self.n, i, j);
        if let Some(shared) = self.shared[s] {
            r = shared.row_of(r);
        }
        &self.sets[s][r * self.widths[s]..(r + 1) * self.widths[s]]
    }
}

/// Pressure rows in S, typed.
struct PRows<'a, S> {
    np: usize,
    scale: f64,
    width: usize,
    coefficients: &'a [S],
    shared: Option<&'a SharedRows>,
}

impl<S> PRows<'_, S> {
    /// Row (i, j)'s coefficients: its representative's where they are the same.
    #[inline(always)]
    fn row(&self, i: usize, j: usize) -> &[S] {
        let mut r = j * self.np + i;
        if let Some(shared) = self.shared {
            r = shared.row_of(r);
        }
        &self.coefficients[r * self.width..(r + 1) * self.width]
    }
}

fn rows<'a, S: Storage>(r: &'a LatticeRows<Cpu>) -> Result<Rows<'a, S>> {
    let [a, b, c, d] = &r.sets;
    Ok(Rows {
        n: r.grid.n,
        scale: r.scale,
        widths: r.widths,
        sets: [
            buffer::<S>(a, "stokes")?,
            buffer::<S>(b, "stokes")?,
            buffer::<S>(c, "stokes")?,
            buffer::<S>(d, "stokes")?,
        ],
        shared: std::array::from_fn(|s| r.shared[s].as_ref()),
    })
}

fn prows<'a, S: Storage>(r: &'a PressureRows<Cpu>) -> Result<PRows<'a, S>> {
    Ok(PRows {
        np: r.grid.np(),
        scale: r.scale,
        width: r.width,
        coefficients: buffer::<S>(&r.coefficients, "stokes")?,
        shared: r.shared.as_ref(),
    })
}

/// The operators of a mesh in S, typed.
struct Typed<'a, S> {
    grid: Grid,
    laplacian: Rows<'a, S>,
    gradient: [Rows<'a, S>; 2],
    divergence: [PRows<'a, S>; 2],
}

fn typed<'a, S: Storage>(a: &'a StokesMatrices<Cpu>) -> Result<Typed<'a, S>> {
    Ok(Typed {
        grid: a.grid,
        laplacian: rows(&a.laplacian)?,
        gradient: [rows(&a.gradient[0])?, rows(&a.gradient[1])?],
        divergence: [prows(&a.divergence[0])?, prows(&a.divergence[1])?],
    })
}

/// Σ c[w]·x[window] over a W×H window whose corner is (i0, j0) in an array of row length m.
/// One accumulator per window row: H independent chains instead of one chain of W·H
/// dependent multiply-adds (the kernels are bound by that latency, not by bandwidth).
#[inline(always)]
fn window_dot<S: Stored, const W: usize, const H: usize>(
    c: &[S],
    x: &[S::Compute],
    m: usize,
    i0: usize,
    j0: usize,
) -> S::Compute {
    let c = &c[..W * H];
    let mut acc = [S::Compute::zero(); H];
    for (dj, a) in acc.iter_mut().enumerate() {
        let row = &x[(j0 + dj) * m + i0..(j0 + dj) * m + i0 + W];
        for di in 0..W {
            *a = *a + c[dj * W + di].to_compute() * row[di];
        }
    }
    acc.into_iter().fold(S::Compute::zero(), |s, a| s + a)
}

/// [`window_dot`] of one coefficient window with two vectors (the velocity components
/// share the Laplacian): each coefficient is loaded once.
#[inline(always)]
fn window_dot2<S: Stored, const W: usize, const H: usize>(
    c: &[S],
    x: &[S::Compute],
    y: &[S::Compute],
    m: usize,
    i0: usize,
    j0: usize,
) -> (S::Compute, S::Compute) {
    let c = &c[..W * H];
    let mut ax = [S::Compute::zero(); H];
    let mut ay = [S::Compute::zero(); H];
    for dj in 0..H {
        let start = (j0 + dj) * m + i0;
        let (rx, ry) = (&x[start..start + W], &y[start..start + W]);
        for di in 0..W {
            let coefficient = c[dj * W + di].to_compute();
            ax[dj] = ax[dj] + coefficient * rx[di];
            ay[dj] = ay[dj] + coefficient * ry[di];
        }
    }
    let sum = |a: [S::Compute; H]| a.into_iter().fold(S::Compute::zero(), |s, v| s + v);
    (sum(ax), sum(ay))
}

/// (L ux, L uy) at lattice node (I, J) for an interior node.
#[inline(always)]
fn lattice_row2<S: Stored>(
    l: &Rows<'_, S>,
    m: usize,
    ux: &[S::Compute],
    uy: &[S::Compute],
    i: usize,
    j: usize,
) -> (S::Compute, S::Compute) {
    let c = l.row(i, j);
    match set_of(i, j) {
        0 => window_dot2::<S, 5, 5>(c, ux, uy, m, i - 2, j - 2),
        1 => window_dot2::<S, 3, 5>(c, ux, uy, m, i - 1, j - 2),
        2 => window_dot2::<S, 5, 3>(c, ux, uy, m, i - 2, j - 1),
        _ => window_dot2::<S, 3, 3>(c, ux, uy, m, i - 1, j - 1),
    }
}

/// Σ c·x over a window clipped to the array: rows of pressure nodes on the boundary.
fn window_dot_clipped<S: Stored>(
    c: &[S],
    x: &[S::Compute],
    m: usize,
    (i0, w): (isize, usize),
    (j0, h): (isize, usize),
) -> S::Compute {
    let mut acc = S::Compute::zero();
    for dj in 0..h {
        let j = j0 + dj as isize;
        if j < 0 || j >= m as isize {
            continue;
        }
        for di in 0..w {
            let i = i0 + di as isize;
            if i < 0 || i >= m as isize {
                continue;
            }
            acc = acc + c[dj * w + di].to_compute() * x[j as usize * m + i as usize];
        }
    }
    acc
}

/// (L x) at lattice node (I, J) for an interior node.
#[inline(always)]
fn lattice_row<S: Stored>(
    l: &Rows<'_, S>,
    m: usize,
    x: &[S::Compute],
    i: usize,
    j: usize,
) -> S::Compute {
    let c = l.row(i, j);
    match set_of(i, j) {
        0 => window_dot::<S, 5, 5>(c, x, m, i - 2, j - 2),
        1 => window_dot::<S, 3, 5>(c, x, m, i - 1, j - 2),
        2 => window_dot::<S, 5, 3>(c, x, m, i - 2, j - 1),
        _ => window_dot::<S, 3, 3>(c, x, m, i - 1, j - 1),
    }
}

/// (Bᵀ p) at lattice node (I, J) for an interior node (its pressure window lies inside).
#[inline(always)]
fn gradient_row<S: Stored>(
    bt: &Rows<'_, S>,
    np: usize,
    p: &[S::Compute],
    i: usize,
    j: usize,
) -> S::Compute {
    let c = bt.row(i, j);
    let (i0, _) = pressure_window(i);
    let (j0, _) = pressure_window(j);
    let (i0, j0) = (i0 as usize, j0 as usize);
    let sum = match set_of(i, j) {
        0 => window_dot::<S, 3, 3>(c, p, np, i0, j0),
        1 => window_dot::<S, 2, 3>(c, p, np, i0, j0),
        2 => window_dot::<S, 3, 2>(c, p, np, i0, j0),
        _ => window_dot::<S, 2, 2>(c, p, np, i0, j0),
    };
    sum * S::Compute::from_f64(bt.scale)
}

/// (B u) at pressure node (i, j).
#[inline(always)]
fn divergence_row<S: Stored>(
    b: &[PRows<'_, S>; 2],
    g: Grid,
    ux: &[S::Compute],
    uy: &[S::Compute],
    i: usize,
    j: usize,
) -> S::Compute {
    let (m, np) = (g.m(), g.np());
    let (cx, cy) = (b[0].row(i, j), b[1].row(i, j));
    let sum = if i > 0 && j > 0 && i + 1 < np && j + 1 < np {
        window_dot::<S, 5, 5>(cx, ux, m, 2 * i - 2, 2 * j - 2)
            + window_dot::<S, 5, 5>(cy, uy, m, 2 * i - 2, 2 * j - 2)
    } else {
        let wi = (2 * i as isize - 2, 5);
        let wj = (2 * j as isize - 2, 5);
        window_dot_clipped(cx, ux, m, wi, wj) + window_dot_clipped(cy, uy, m, wi, wj)
    };
    // Both components are stored in the same unit.
    sum * S::Compute::from_f64(b[0].scale)
}

/// (P p) at pressure node (i, j) for a pressure operator with a W×W window centred there.
#[inline(always)]
fn pressure_row<S: Stored, const W: usize>(
    rows: &PRows<'_, S>,
    p: &[S::Compute],
    i: usize,
    j: usize,
) -> S::Compute {
    let np = rows.np;
    let reach = W / 2;
    let c = rows.row(i, j);
    let sum = if i >= reach && j >= reach && i + reach < np && j + reach < np {
        window_dot::<S, W, W>(c, p, np, i - reach, j - reach)
    } else {
        let corner = |k: usize| (k as isize - reach as isize, W);
        window_dot_clipped(c, p, np, corner(i), corner(j))
    };
    sum * S::Compute::from_f64(rows.scale)
}

/// out = A x, or b − A x with `b`, for every row of a flow vector; boundary velocity rows 0.
fn combine<S: KernelStorage>(
    a: &Typed<'_, S>,
    x: &[S::Compute],
    b: Option<&[S::Compute]>,
    out: &mut [S::Compute],
) {
    let g = a.grid;
    let (m, np, len) = (g.m(), g.np(), g.lattice_len());
    let tiles = TileStencils::of(a);
    let (ox, rest) = out.split_at_mut(len);
    let (oy, op) = rest.split_at_mut(len);
    ox.par_chunks_mut(m)
        .zip(oy.par_chunks_mut(m))
        .enumerate()
        .for_each(|(j, (rx, ry))| combine_lattice_row::<S>((a, tiles.as_ref(), x, b, j, rx, ry)));
    let (ux, rest) = x.split_at(len);
    let (uy, _) = rest.split_at(len);
    op.par_chunks_mut(np).enumerate().for_each(|(j, rp)| {
        for (i, out) in rp.iter_mut().enumerate() {
            let d = divergence_row(&a.divergence, g, ux, uy, i, j);
            *out = residual_or_product(b, 2 * len + j * np + i, d);
        }
    });
}

/// b[row] − ax with a right-hand side, else ax.
#[inline(always)]
fn residual_or_product<T: Real>(b: Option<&[T]>, row: usize, ax: T) -> T {
    match b {
        Some(b) => b[row] - ax,
        None => ax,
    }
}

/// The arguments of [`combine_lattice_row`]: the operators, their shared rows laid out for
/// tiles (if every set has them), x, b (for a residual), the row index J and the row's two
/// velocity outputs.
type LatticeRowArgs<'a, S> = (
    &'a Typed<'a, S>,
    Option<&'a TileStencils<Compute<S>>>,
    &'a [Compute<S>],
    Option<&'a [Compute<S>]>,
    usize,
    &'a mut [Compute<S>],
    &'a mut [Compute<S>],
);

per_simd_level! {
    /// One lattice row J of [`combine`]: runs of [`TILE`] consecutive nodes whose rows are
    /// all shared go through [`lattice_tile`] (vector lanes across the nodes), the other
    /// nodes one by one.
    fn combine_lattice_row<S>(LatticeRowArgs<'_, S>) => combine_lattice_row_portable
}

#[inline(always)]
fn combine_lattice_row_portable<S: KernelStorage, const LEVEL: u8>(
    (a, tiles, x, b, j, rx, ry): LatticeRowArgs<'_, S>,
) {
    let g = a.grid;
    let (m, np, len) = (g.m(), g.np(), g.lattice_len());
    let (ux, rest) = x.split_at(len);
    let (uy, p) = rest.split_at(len);
    let zero = Compute::<S>::zero();
    if j == 0 || j + 1 == m {
        rx.fill(zero);
        ry.fill(zero);
        return;
    }
    (rx[0], ry[0], rx[m - 1], ry[m - 1]) = (zero, zero, zero, zero);
    let mut i = 1;
    while i + 1 < m {
        if let Some(tiles) = tiles.filter(|_| tile_is_shared(a, i, j)) {
            let (tx, ty) = if j.is_multiple_of(2) {
                lattice_tile::<_, 5, 3>(tiles, a, ux, uy, p, i, j)
            } else {
                lattice_tile::<_, 3, 2>(tiles, a, ux, uy, p, i, j)
            };
            for l in 0..TILE {
                let row = j * m + i + l;
                rx[i + l] = residual_or_product(b, row, tx[l]);
                ry[i + l] = residual_or_product(b, len + row, ty[l]);
            }
            i += TILE;
            continue;
        }
        let (lx, ly) = lattice_row2(&a.laplacian, m, ux, uy, i, j);
        let gx = gradient_row(&a.gradient[0], np, p, i, j);
        let gy = gradient_row(&a.gradient[1], np, p, i, j);
        let row = j * m + i;
        rx[i] = residual_or_product(b, row, lx + gx);
        ry[i] = residual_or_product(b, len + row, ly + gy);
        i += 1;
    }
}

/// The shared (interior) rows of the lattice part of the Stokes operator, widened and laid
/// out per lane of a tile of [`TILE`] consecutive nodes of one lattice row, whose sets
/// alternate. Every node's window is padded to five columns: of x for L, and for Bᵀ of the
/// pressure row spread to lattice spacing, q[u] = p[⌊u/2⌋] (even node I = 2k reads
/// pressure k−1, k, k+1 at u = I−2, I, I+2; odd I = 2k+1 reads k, k+1 at u = I−1, I+1),
/// with zero coefficients where a node's own window is narrower. A zero term leaves a sum
/// unchanged (a sum that starts from +0 is never −0), so each lane is bitwise the node's
/// scalar row.
struct TileStencils<T> {
    /// [J parity][parity of the tile's first node][window row · 5 + column][lane].
    laplacian: [[[[T; TILE]; 25]; 2]; 2],
    /// [component][J parity][first node parity][pressure row · 5 + column][lane].
    gradient: [[[[[T; TILE]; 15]; 2]; 2]; 2],
    /// The units of the two gradients' coefficients.
    gradient_scale: [T; 2],
}

/// The coefficients of set `set`'s representative row, if the set has one.
fn representative<'a, S>(rows: &Rows<'a, S>, set: usize) -> Option<&'a [S]> {
    let w = rows.widths[set];
    let r = rows.shared[set]?.representative;
    Some(&rows.sets[set][r * w..(r + 1) * w])
}

impl<T: Real> TileStencils<T> {
    /// The layout of `a`'s representative rows; None unless every set of L and Bᵀ has one.
    fn of<S: Stored<Compute = T>>(a: &Typed<'_, S>) -> Option<Self> {
        let mut tiles = TileStencils {
            laplacian: [[[[T::zero(); TILE]; 25]; 2]; 2],
            gradient: [[[[[T::zero(); TILE]; 15]; 2]; 2]; 2],
            gradient_scale: a.gradient.each_ref().map(|r| T::from_f64(r.scale)),
        };
        for jp in 0..2 {
            for first in 0..2 {
                for lane in 0..TILE {
                    let ip = (first + lane) & 1;
                    let set = ip + 2 * jp;
                    let c = representative(&a.laplacian, set)?;
                    let w = 2 * lattice_reach(ip) + 1;
                    let pad = (5 - w) / 2;
                    for dj in 0..2 * lattice_reach(jp) + 1 {
                        for di in 0..w {
                            tiles.laplacian[jp][first][dj * 5 + di + pad][lane] =
                                c[dj * w + di].to_compute();
                        }
                    }
                    let (w, h) = (pressure_window(ip).1, pressure_window(jp).1);
                    for (component, rows) in a.gradient.iter().enumerate() {
                        let c = representative(rows, set)?;
                        for dq in 0..h {
                            for di in 0..w {
                                // Even nodes' taps at u − (I − 2) = 0, 2, 4; odd ones' at 1, 3.
                                tiles.gradient[component][jp][first][dq * 5 + 2 * di + ip][lane] =
                                    c[dq * w + di].to_compute();
                            }
                        }
                    }
                }
            }
        }
        Some(tiles)
    }
}

/// Whether the [`TILE`] nodes of row J from I = i0 on are all shared rows of L and Bᵀ, with
/// their padded windows inside the arrays.
fn tile_is_shared<S>(a: &Typed<'_, S>, i0: usize, j: usize) -> bool {
    let (n, m) = (a.grid.n, a.grid.m());
    if i0 < 2 || i0 + TILE + 2 > m || j < 2 || j + 3 > m {
        return false;
    }
    let operators = [&a.laplacian, &a.gradient[0], &a.gradient[1]];
    (i0..i0 + TILE).all(|i| {
        let (set, row) = (set_of(i, j), set_row(n, i, j));
        operators
            .iter()
            .all(|rows| rows.shared[set].is_some_and(|shared| shared.same[row]))
    })
}

/// (L ux + Bᵀ_x p, L uy + Bᵀ_y p) at the [`TILE`] nodes of row J from I = i0 on, whose rows
/// are shared: `H` window rows of L (5 for even J, 3 for odd) and `HQ` pressure rows (3, 2).
/// The sums run in the scalar rows' order ([`window_dot2`], [`gradient_row`]).
#[inline(always)]
fn lattice_tile<S: Stored, const H: usize, const HQ: usize>(
    tiles: &TileStencils<S::Compute>,
    a: &Typed<'_, S>,
    ux: &[S::Compute],
    uy: &[S::Compute],
    p: &[S::Compute],
    i0: usize,
    j: usize,
) -> ([S::Compute; TILE], [S::Compute; TILE]) {
    let zero = S::Compute::zero();
    let (m, np) = (a.grid.m(), a.grid.np());
    let (jp, first) = (j & 1, i0 & 1);
    let laplacian = &tiles.laplacian[jp][first];
    let (mut lx, mut ly) = ([zero; TILE], [zero; TILE]);
    for dj in 0..H {
        let start = (j + dj - H / 2) * m + i0 - 2;
        let (mut ax, mut ay) = ([zero; TILE], [zero; TILE]);
        for di in 0..5 {
            let c = &laplacian[dj * 5 + di];
            let xs: &[S::Compute; TILE] = ux[start + di..start + di + TILE]
                .try_into()
                .expect("a tile");
            let ys: &[S::Compute; TILE] = uy[start + di..start + di + TILE]
                .try_into()
                .expect("a tile");
            for l in 0..TILE {
                ax[l] = ax[l] + c[l] * xs[l];
                ay[l] = ay[l] + c[l] * ys[l];
            }
        }
        for l in 0..TILE {
            lx[l] = lx[l] + ax[l];
            ly[l] = ly[l] + ay[l];
        }
    }
    let q0 = pressure_window(j).0 as usize;
    let mut gradient = [[zero; TILE]; 2];
    for dq in 0..HQ {
        let row = &p[(q0 + dq) * np..(q0 + dq + 1) * np];
        let mut q = [zero; TILE + 4];
        for (t, v) in q.iter_mut().enumerate() {
            *v = row[(i0 - 2 + t) >> 1];
        }
        for (component, sum) in gradient.iter_mut().enumerate() {
            let coefficients = &tiles.gradient[component][jp][first];
            let mut acc = [zero; TILE];
            for t in 0..5 {
                let c = &coefficients[dq * 5 + t];
                for l in 0..TILE {
                    acc[l] = acc[l] + c[l] * q[t + l];
                }
            }
            for l in 0..TILE {
                sum[l] = sum[l] + acc[l];
            }
        }
    }
    let [sx, sy] = tiles.gradient_scale;
    for l in 0..TILE {
        lx[l] = lx[l] + gradient[0][l] * sx;
        ly[l] = ly[l] + gradient[1][l] * sy;
    }
    (lx, ly)
}

/// One output index's 1D taps: up to five (input index, weight) pairs, and how many.
type Taps = ([(usize, f64); 5], usize);

/// No upper clip (interpolation taps never leave the coarse array).
const UNCLIPPED: usize = isize::MAX as usize;

/// Taps at offsets from a centre, clipped to 0..len.
fn clipped(centre: usize, offsets: &[(isize, f64)], len: usize) -> Taps {
    let mut taps = [(0, 0.0); 5];
    let mut count = 0;
    for &(d, w) in offsets {
        let k = centre as isize + d;
        if k >= 0 && k < len as isize {
            taps[count] = (k as usize, w);
            count += 1;
        }
    }
    (taps, count)
}

/// Q2 interpolation (1D): fine 4e+2k copies coarse 2e+k; fine 4e+1 takes (3/8, 3/4, −1/8),
/// fine 4e+3 takes (−1/8, 3/4, 3/8).
fn q2_prolong_taps(f: usize) -> Taps {
    let e = 2 * (f / 4);
    match f % 4 {
        0 => clipped(e, &[(0, 1.0)], UNCLIPPED),
        2 => clipped(e, &[(1, 1.0)], UNCLIPPED),
        1 => clipped(e, &[(0, 0.375), (1, 0.75), (2, -0.125)], UNCLIPPED),
        _ => clipped(e, &[(0, -0.125), (1, 0.75), (2, 0.375)], UNCLIPPED),
    }
}

/// Q2 restriction (the transpose): the fine lattice nodes coarse index `c` takes.
fn q2_restrict_taps(c: usize, mf: usize) -> Taps {
    if c.is_multiple_of(2) {
        let offsets = [(-3, -0.125), (-1, 0.375), (0, 1.0), (1, 0.375), (3, -0.125)];
        clipped(2 * c, &offsets, mf)
    } else {
        clipped(2 * c, &[(-1, 0.75), (0, 1.0), (1, 0.75)], mf)
    }
}

/// Q1 interpolation: fine 2k copies coarse k, fine 2k+1 averages k, k+1.
fn q1_prolong_taps(f: usize) -> Taps {
    if f.is_multiple_of(2) {
        clipped(f / 2, &[(0, 1.0)], UNCLIPPED)
    } else {
        clipped(f / 2, &[(0, 0.5), (1, 0.5)], UNCLIPPED)
    }
}

/// Q1 restriction (the transpose): the fine nodes coarse index `c` takes.
fn q1_restrict_taps(c: usize, pf: usize) -> Taps {
    clipped(2 * c, &[(-1, 0.5), (0, 1.0), (1, 0.5)], pf)
}

/// The tensor product of 1D taps, row by row: out[j][i] (+)= Σ w_y w_x input[y][x] on
/// square arrays of side `m_in` and `m_out`. `accumulate` adds to `out` (prolongation);
/// `zero_boundary` keeps the boundary of `out` at zero (Dirichlet lattice nodes).
fn tensor_transfer<T: Real>(
    input: &[T],
    m_in: usize,
    out: &mut [T],
    m_out: usize,
    taps: impl Fn(usize) -> Taps + Sync,
    accumulate: bool,
    zero_boundary: bool,
) {
    out.par_chunks_mut(m_out).enumerate().for_each(|(j, row)| {
        let (wy, ny) = taps(j);
        for (i, o) in row.iter_mut().enumerate() {
            if zero_boundary && (i == 0 || j == 0 || i + 1 == m_out || j + 1 == m_out) {
                *o = T::zero();
                continue;
            }
            let (wx, nx) = taps(i);
            let mut v = T::zero();
            for &(y, by) in &wy[..ny] {
                for &(x, bx) in &wx[..nx] {
                    v = v + T::from_f64(bx * by) * input[y * m_in + x];
                }
            }
            *o = if accumulate { *o + v } else { v };
        }
    });
}

fn transfer<T: Real>(kind: Transfer, nc: usize, input: &[T], output: &mut [T]) {
    let (mc, mf, pc, pf) = (2 * nc + 1, 4 * nc + 1, nc + 1, 2 * nc + 1);
    match kind {
        Transfer::Q2Prolong => tensor_transfer(input, mc, output, mf, q2_prolong_taps, true, false),
        Transfer::Q2Restrict => tensor_transfer(
            input,
            mf,
            output,
            mc,
            |c| q2_restrict_taps(c, mf),
            false,
            true,
        ),
        Transfer::Q1Prolong => tensor_transfer(input, pc, output, pf, q1_prolong_taps, true, false),
        Transfer::Q1Restrict => tensor_transfer(
            input,
            pf,
            output,
            pc,
            |c| q1_restrict_taps(c, pf),
            false,
            false,
        ),
    }
}

/// The residual in the 51 slots of patch (pi, pj), zero in inactive slots, its pressure
/// times `pressure_scale`.
fn gather<T: Real>(g: Grid, r: &[T], pi: usize, pj: usize, pressure_scale: T, v: &mut [T]) {
    let (m, len) = (g.m(), g.lattice_len());
    let (rx, ry, rp) = (&r[..len], &r[len..2 * len], &r[2 * len..]);
    v.fill(T::zero());
    v[PRESSURE_SLOT] = pressure_scale * rp[pj * g.np() + pi];
    if pi >= 2 && pj >= 2 && pi + 2 <= g.n && pj + 2 <= g.n {
        // Interior patch: every slot active, five contiguous runs per component.
        for dj in 0..5 {
            let start = (2 * pj - 2 + dj) * m + 2 * pi - 2;
            v[5 * dj..5 * dj + 5].copy_from_slice(&rx[start..start + 5]);
            v[25 + 5 * dj..25 + 5 * dj + 5].copy_from_slice(&ry[start..start + 5]);
        }
        return;
    }
    for s in 0..25 {
        if let Some((_, i, j)) = patch_node(g, pi, pj, s) {
            v[s] = rx[j * m + i];
            v[25 + s] = ry[j * m + i];
        }
    }
}

/// out = A v for a column-major 51×51 A stored in S.
fn matvec<S: Stored>(a: &[S], v: &[S::Compute], out: &mut [S::Compute]) {
    out.iter_mut().for_each(|o| *o = S::Compute::zero());
    for (c, &vc) in v.iter().enumerate() {
        if vc == S::Compute::zero() {
            continue;
        }
        let column = &a[c * PATCH..(c + 1) * PATCH];
        for (o, &acr) in out.iter_mut().zip(column) {
            *o = *o + acr.to_compute() * vc;
        }
    }
}

/// x += ω Σ_i V_iᵀ (corrections of patch i).
fn scatter<T: Real>(
    g: Grid,
    corrections: &[T],
    column_of: &[u32],
    omega: T,
    pressure_scale: T,
    x: &mut [T],
) {
    let (m, np, len) = (g.m(), g.np(), g.lattice_len());
    let (xx, rest) = x.split_at_mut(len);
    let (xy, xp) = rest.split_at_mut(len);
    xx.par_chunks_mut(m)
        .zip(xy.par_chunks_mut(m))
        .enumerate()
        .for_each(|(j, (rx, ry))| {
            if j == 0 || j + 1 == m {
                return;
            }
            for i in 1..m - 1 {
                let (mut sx, mut sy) = (T::zero(), T::zero());
                // Patches (pi, pj) with |I − 2pi| ≤ 2 and |J − 2pj| ≤ 2.
                for pj in (j.saturating_sub(2)).div_ceil(2)..=((j + 2) / 2).min(np - 1) {
                    for pi in (i.saturating_sub(2)).div_ceil(2)..=((i + 2) / 2).min(np - 1) {
                        let col = column_of[pj * np + pi] as usize;
                        let w = (j + 2 - 2 * pj) * 5 + (i + 2 - 2 * pi);
                        sx = sx + corrections[col * PATCH + w];
                        sy = sy + corrections[col * PATCH + 25 + w];
                    }
                }
                rx[i] = rx[i] + omega * sx;
                ry[i] = ry[i] + omega * sy;
            }
        });
    xp.par_chunks_mut(np).enumerate().for_each(|(pj, row)| {
        for (pi, v) in row.iter_mut().enumerate() {
            let col = column_of[pj * np + pi] as usize;
            *v = *v + omega * pressure_scale * corrections[col * PATCH + PRESSURE_SLOT];
        }
    });
}

/// Patch rows per task of [`fused_vanka`]: two tasks per worker. Each task also computes
/// the patch row on either side of its own, which its neighbours compute too.
fn vanka_task_rows(np: usize) -> usize {
    np.div_ceil(2 * rayon::current_num_threads()).max(1)
}

/// One Vanka relaxation x += ω Σ_i V_iᵀ (W_i A_i⁻¹ V_i r), fused per block of patch rows:
/// a task walks its patch rows (and one on either side) in order; for each it gathers the
/// residuals, multiplies (the interior patches, which share one inverse, as one GEMM, the
/// others with their class's or their own inverse) into a ring of the last three patch
/// rows' corrections, adds the pressure corrections of its own rows, and scatters the
/// lattice rows whose patches are then all done. The corrections never leave the task's
/// cache, and they are kept slot-major (slot s of patch pi at s·(n+1) + pi), so that the
/// GEMM's long side is the patches and the scatter's sums run along a lattice row in
/// vector lanes. Each node sums its patches in (pj, pi) order, as [`scatter`] does.
fn fused_vanka<S: Stored<Compute = T>, T: Real + Storage>(
    g: Grid,
    (column_of, inverse_of_column): (&[u32], &[u32]),
    (inverses, interior, interior_columns): (&[S], &[T], usize),
    (pressure_scale, omega): (T, T),
    r: &[T],
    x: &mut [T],
) {
    let (m, np, len) = (g.m(), g.np(), g.lattice_len());
    let rows = vanka_task_rows(np);
    let (xx, rest) = x.split_at_mut(len);
    let (xy, xp) = rest.split_at_mut(len);
    xx.par_chunks_mut(2 * rows * m)
        .zip(xy.par_chunks_mut(2 * rows * m))
        .zip(xp.par_chunks_mut(rows * np))
        .enumerate()
        .for_each(|(task, ((rx, ry), rp))| {
            let (p0, p1) = (task * rows, ((task + 1) * rows).min(np));
            arena::with(|arena| {
                let (gathered, ring, patch, product, sums) =
                    arena.five::<T, T, T, T, T>(np * PATCH, 3 * np * PATCH, PATCH, PATCH, 2 * np);
                for pj in p0.saturating_sub(1)..=p1.min(np - 1) {
                    let row = &mut ring[(pj % 3) * np * PATCH..][..np * PATCH];
                    let patches = PatchRow {
                        g,
                        pj,
                        column_of: &column_of[pj * np..(pj + 1) * np],
                        inverse_of_column,
                        inverses,
                        interior: (interior, interior_columns),
                        pressure_scale,
                    };
                    patches.corrections(r, gathered, (patch, product), row);
                    if (p0..p1).contains(&pj) {
                        let own = &mut rp[(pj - p0) * np..(pj - p0 + 1) * np];
                        let pressure = &row[PRESSURE_SLOT * np..(PRESSURE_SLOT + 1) * np];
                        for (v, &c) in own.iter_mut().zip(pressure) {
                            *v = *v + omega * pressure_scale * c;
                        }
                    }
                    // Lattice rows 2pj − 2 and 2pj − 1 read patch rows pj − 2 … pj at most.
                    for j in (2 * pj).saturating_sub(2)..2 * pj {
                        if j >= (2 * p0).max(1) && j < (2 * p1).min(m - 1) {
                            let local = (j - 2 * p0) * m..(j - 2 * p0 + 1) * m;
                            let line = (&mut rx[local.clone()], &mut ry[local]);
                            scatter_line(g, ring, j, omega, line, sums);
                        }
                    }
                }
            })
        });
}

/// One patch row of [`fused_vanka`]: its row index, its patches' buffer columns, the stored
/// inverses and which columns share the interior one.
struct PatchRow<'a, S: Stored> {
    g: Grid,
    pj: usize,
    column_of: &'a [u32],
    inverse_of_column: &'a [u32],
    inverses: &'a [S],
    interior: (&'a [S::Compute], usize),
    pressure_scale: S::Compute,
}

impl<S: Stored> PatchRow<'_, S>
where
    S::Compute: Storage,
{
    /// `out` (slot-major: slot s of patch pi at s·(n+1) + pi) = W_i A_i⁻¹ V_i r for every
    /// patch of the row. The interior patches (contiguous in pi) are gathered slot-major into
    /// `gathered` and multiplied as one GEMM, (corrections)ᵀ = (gathered)ᵀ A⁻ᵀ; the others
    /// through `patch` and `product` ([`gather`], [`matvec`]).
    fn corrections(
        &self,
        r: &[S::Compute],
        gathered: &mut [S::Compute],
        (patch, product): (&mut [S::Compute], &mut [S::Compute]),
        out: &mut [S::Compute],
    ) {
        let np = self.g.np();
        let (interior, interior_columns) = self.interior;
        let is_interior = |pi: usize| (self.column_of[pi] as usize) < interior_columns;
        let first = (0..np).find(|&pi| is_interior(pi)).unwrap_or(np);
        let count = (first..np).take_while(|&pi| is_interior(pi)).count();
        assert!(
            (first + count..np).all(|pi| !is_interior(pi)),
            "interior patches of row {} not contiguous",
            self.pj
        );
        for pi in (0..first).chain(first + count..np) {
            gather(self.g, r, pi, self.pj, self.pressure_scale, patch);
            let inverse = self.inverse_of_column[self.column_of[pi] as usize] as usize;
            let a = &self.inverses[inverse * PATCH * PATCH..(inverse + 1) * PATCH * PATCH];
            matvec(a, patch, product);
            for (s, &v) in product.iter().enumerate() {
                out[s * np + pi] = v;
            }
        }
        if count > 0 {
            gather_interior(
                self.g,
                r,
                self.pj,
                first..first + count,
                self.pressure_scale,
                gathered,
            );
            product_in_task(
                (count, PATCH, PATCH),
                (&gathered[..count * PATCH], 1, count),
                (interior, PATCH, 1),
                &mut out[first..],
                np,
            );
        }
    }
}

/// The residual in the 51 slots of the interior patches `patches` of patch row pj,
/// slot-major (slot s of the k-th patch at s·len + k), pressure times `pressure_scale`:
/// what [`gather`] gives each of them.
fn gather_interior<T: Real>(
    g: Grid,
    r: &[T],
    pj: usize,
    patches: std::ops::Range<usize>,
    pressure_scale: T,
    v: &mut [T],
) {
    let (m, np, len) = (g.m(), g.np(), g.lattice_len());
    let count = patches.len();
    for (c, part) in [0, len].into_iter().enumerate() {
        for dj in 0..5 {
            let line = &r[part + (2 * pj - 2 + dj) * m..][..m];
            for di in 0..5 {
                let s = 25 * c + 5 * dj + di;
                let out = &mut v[s * count..(s + 1) * count];
                for (k, o) in out.iter_mut().enumerate() {
                    *o = line[2 * (patches.start + k) - 2 + di];
                }
            }
        }
    }
    let pressure = &r[2 * len + pj * np..][patches];
    for (o, &p) in v[PRESSURE_SLOT * count..(PRESSURE_SLOT + 1) * count]
        .iter_mut()
        .zip(pressure)
    {
        *o = pressure_scale * p;
    }
}

/// Interior lattice row J of x += ω Σ_i V_iᵀ (corrections of patch i) (velocity only), the
/// patch rows' corrections in `ring` (patch row pj at slot pj mod 3, slot-major): the sums
/// of [`scatter`] in its order, patch rows then patches ascending, each term added along
/// the row in vector lanes (`sums`: 2(n+1) of scratch). An even node 2a lies in patches
/// a − 1, a, a + 1 (at offsets 4, 2, 0), an odd node 2a + 1 in patches a, a + 1 (3, 1), in
/// both directions.
fn scatter_line<T: Real>(
    g: Grid,
    ring: &[T],
    j: usize,
    omega: T,
    (rx, ry): (&mut [T], &mut [T]),
    sums: &mut [T],
) {
    let (n, np) = (g.n, g.np());
    let slot = |pj: usize, s: usize| &ring[(pj % 3) * np * PATCH + s * np..][..np];
    let patch_rows = (j - 1) / 2..=(j + 2) / 2;
    let (even, odd) = sums.split_at_mut(np);
    for (c, line) in [rx, ry].into_iter().enumerate() {
        even.fill(T::zero());
        odd.fill(T::zero());
        for pj in patch_rows.clone() {
            let s = 25 * c + 5 * (j + 2 - 2 * pj);
            // Even nodes 2a, a = 1 … n − 1.
            let (left, centre, right) = (slot(pj, s + 4), slot(pj, s + 2), slot(pj, s));
            for a in 1..n {
                even[a] = even[a] + left[a - 1];
                even[a] = even[a] + centre[a];
                even[a] = even[a] + right[a + 1];
            }
            // Odd nodes 2a + 1, a = 0 … n − 1.
            let (left, right) = (slot(pj, s + 3), slot(pj, s + 1));
            for a in 0..n {
                odd[a] = odd[a] + left[a];
                odd[a] = odd[a] + right[a + 1];
            }
        }
        for a in 1..n {
            line[2 * a] = line[2 * a] + omega * even[a];
        }
        for a in 0..n {
            line[2 * a + 1] = line[2 * a + 1] + omega * odd[a];
        }
    }
}

/// x = A⁻¹ b at the positions, 0 elsewhere.
fn coarse_solve<T: Real>(positions: &[u32], size: usize, inverse: &[f64], b: &[T], x: &mut [T]) {
    x.iter_mut().for_each(|v| *v = T::zero());
    for (r, &p) in positions.iter().enumerate() {
        let v: f64 = positions
            .iter()
            .enumerate()
            .map(|(c, &q)| inverse[c * size + r] * b[q as usize].to_f64())
            .sum();
        x[p as usize] = T::from_f64(v);
    }
}

impl StokesKernels for Cpu {
    fn stokes_apply_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        x: &Block<Self>,
        b: Option<&Block<Self>>,
        out: &mut Block<Self>,
    ) -> Result<()> {
        let sp = a.laplacian.sets[0].precision();
        by_precision!(sp, S => {
            let m = typed::<S>(a)?;
            let xs = buffer::<Compute<S>>(&x.data, "stokes_apply")?;
            let os = buffer_mut::<Compute<S>>(&mut out.data, "stokes_apply")?;
            match b {
                Some(b) => {
                    let bs = buffer::<Compute<S>>(&b.data, "stokes_apply")?;
                    combine(&m, xs, Some(bs), os);
                }
                None => combine(&m, xs, None, os),
            }
        });
        Ok(())
    }

    fn stokes_laplacian_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let g = a.grid;
        by_precision!(a.laplacian.sets[0].precision(), S => {
            let l = rows::<S>(&a.laplacian)?;
            let x = slice::<Compute<S>>(&x, "stokes_laplacian")?;
            let m = g.m();
            slice_mut::<Compute<S>>(y, "stokes_laplacian")?
                .par_chunks_mut(m)
                .enumerate()
                .for_each(|(j, row)| {
                    for (i, out) in row.iter_mut().enumerate() {
                        *out = if g.is_interior(i, j) {
                            lattice_row(&l, m, x, i, j)
                        } else {
                            Compute::<S>::zero()
                        };
                    }
                });
        });
        Ok(())
    }

    fn stokes_gradient_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        p: View<'_, Self>,
        flow: &mut Block<Self>,
    ) -> Result<()> {
        let g = a.grid;
        by_precision!(a.gradient[0].sets[0].precision(), S => {
            let bt = [rows::<S>(&a.gradient[0])?, rows::<S>(&a.gradient[1])?];
            let p = slice::<Compute<S>>(&p, "stokes_gradient")?;
            let (m, np, len) = (g.m(), g.np(), g.lattice_len());
            let f = buffer_mut::<Compute<S>>(&mut flow.data, "stokes_gradient")?;
            let (yx, rest) = f.split_at_mut(len);
            let yy = &mut rest[..len];
            yx.par_chunks_mut(m)
                .zip(yy.par_chunks_mut(m))
                .enumerate()
                .for_each(|(j, (rx, ry))| {
                    for i in 0..m {
                        if g.is_interior(i, j) {
                            rx[i] = gradient_row(&bt[0], np, p, i, j);
                            ry[i] = gradient_row(&bt[1], np, p, i, j);
                        } else {
                            rx[i] = Compute::<S>::zero();
                            ry[i] = Compute::<S>::zero();
                        }
                    }
                });
        });
        Ok(())
    }

    fn stokes_divergence_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        flow: &Block<Self>,
        p: ViewMut<'_, Self>,
    ) -> Result<()> {
        let g = a.grid;
        by_precision!(a.divergence[0].coefficients.precision(), S => {
            let b = [prows::<S>(&a.divergence[0])?, prows::<S>(&a.divergence[1])?];
            let f = buffer::<Compute<S>>(&flow.data, "stokes_divergence")?;
            let len = g.lattice_len();
            let (ux, uy) = (&f[..len], &f[len..2 * len]);
            slice_mut::<Compute<S>>(p, "stokes_divergence")?
                .par_chunks_mut(g.np())
                .enumerate()
                .for_each(|(j, row)| {
                    for (i, out) in row.iter_mut().enumerate() {
                        *out = divergence_row(&b, g, ux, uy, i, j);
                    }
                });
        });
        Ok(())
    }

    fn pressure_stencil_unchecked(
        &self,
        r: &PressureRows<Self>,
        p: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let g = r.grid;
        by_precision!(r.coefficients.precision(), S => {
            let rows = prows::<S>(r)?;
            let p = slice::<Compute<S>>(&p, "pressure_stencil")?;
            let np = g.np();
            let width = r.width;
            slice_mut::<Compute<S>>(y, "pressure_stencil")?
                .par_chunks_mut(np)
                .enumerate()
                .for_each(|(j, row)| {
                    for (i, out) in row.iter_mut().enumerate() {
                        *out = if width == 9 {
                            pressure_row::<S, 3>(&rows, p, i, j)
                        } else {
                            pressure_row::<S, 5>(&rows, p, i, j)
                        };
                    }
                });
        });
        Ok(())
    }

    fn stokes_transfer_unchecked(
        &self,
        kind: Transfer,
        coarse_n: usize,
        input: View<'_, Self>,
        output: ViewMut<'_, Self>,
    ) -> Result<()> {
        match input.precision() {
            crate::precision::Precision::F64 => transfer(
                kind,
                coarse_n,
                slice::<f64>(&input, "stokes_transfer")?,
                slice_mut::<f64>(output, "stokes_transfer")?,
            ),
            crate::precision::Precision::F32 => transfer(
                kind,
                coarse_n,
                slice::<f32>(&input, "stokes_transfer")?,
                slice_mut::<f32>(output, "stokes_transfer")?,
            ),
            p => return Err(unsupported("stokes_transfer", &[p])),
        }
        Ok(())
    }

    fn vanka_gather_unchecked(
        &self,
        grid: Grid,
        r: &Block<Self>,
        maps: &VankaMaps<Self>,
        pressure_scale: f64,
        gathered: &mut Data<Self>,
    ) -> Result<()> {
        let np = grid.np();
        macro_rules! run {
            ($t:ty) => {{
                let r = buffer::<$t>(&r.data, "vanka_gather")?;
                let scale = <$t as Real>::from_f64(pressure_scale);
                buffer_mut::<$t>(gathered, "vanka_gather")?
                    .par_chunks_mut(PATCH)
                    .zip(maps.patch_of_column.par_iter())
                    .for_each(|(out, &k)| {
                        let k = k as usize;
                        gather(grid, r, k % np, k / np, scale, out);
                    });
            }};
        }
        match r.precision() {
            crate::precision::Precision::F64 => run!(f64),
            crate::precision::Precision::F32 => run!(f32),
            p => return Err(unsupported("vanka_gather", &[p])),
        }
        Ok(())
    }

    fn vanka_products_unchecked(
        &self,
        inverses: &Data<Self>,
        maps: &VankaMaps<Self>,
        first: usize,
        gathered: &Data<Self>,
        corrections: &mut Data<Self>,
    ) -> Result<()> {
        let sp = inverses.precision();
        by_precision!(sp, S => {
            let inverses = buffer::<S>(inverses, "vanka_products")?;
            let gathered = &buffer::<Compute<S>>(gathered, "vanka_products")?[first * PATCH..];
            let corrections = &mut buffer_mut::<Compute<S>>(corrections, "vanka_products")?[first * PATCH..];
            corrections
                .par_chunks_mut(PATCH)
                .zip(gathered.par_chunks(PATCH))
                .zip(maps.inverse_of_column[first..].par_iter())
                .for_each(|((out, v), &inverse)| {
                    let inverse = inverse as usize;
                    matvec(&inverses[inverse * PATCH * PATCH..(inverse + 1) * PATCH * PATCH], v, out);
                });
        });
        Ok(())
    }

    fn vanka_scatter_unchecked(
        &self,
        grid: Grid,
        corrections: &Data<Self>,
        maps: &VankaMaps<Self>,
        omega: f64,
        pressure_scale: f64,
        x: &mut Block<Self>,
    ) -> Result<()> {
        macro_rules! run {
            ($t:ty) => {
                scatter(
                    grid,
                    buffer::<$t>(corrections, "vanka_scatter")?,
                    &maps.column_of,
                    <$t as Real>::from_f64(omega),
                    <$t as Real>::from_f64(pressure_scale),
                    buffer_mut::<$t>(&mut x.data, "vanka_scatter")?,
                )
            };
        }
        match x.precision() {
            crate::precision::Precision::F64 => run!(f64),
            crate::precision::Precision::F32 => run!(f32),
            p => return Err(unsupported("vanka_scatter", &[p])),
        }
        Ok(())
    }

    /// Tuned Vanka only: simple Vanka streams one inverse per patch from memory, and fused
    /// it was 4–14 % slower (512², two pairs).
    fn vanka_relax_is_fused(&self, shared_interior: bool) -> bool {
        shared_interior
    }

    /// Tuned Vanka fused in strips of patch rows ([`fused_vanka`]; `gathered` and
    /// `corrections` are not used), simple Vanka in turn.
    fn vanka_relax_unchecked(
        &self,
        v: VankaRelax<'_, Self>,
        r: &Block<Self>,
        gathered: &mut Data<Self>,
        corrections: &mut Data<Self>,
        x: &mut Block<Self>,
    ) -> Result<()>
    where
        Self: DenseKernels,
    {
        if v.interior_columns == 0 {
            return vanka_relax_in_turn(self, v, r, gathered, corrections, x);
        }
        let (sp, ic) = (v.inverses.precision(), v.interior_columns);
        let inverses_stored = v.inverses.len() / (PATCH * PATCH);
        if let Some(&bad) = v
            .maps
            .inverse_of_column
            .iter()
            .find(|&&k| k as usize >= inverses_stored)
        {
            return Err(Error::Backend(format!(
                "vanka_relax: inverse {bad} of {inverses_stored} stored"
            )));
        }
        by_precision!(sp, S => {
            fused_vanka::<S, Compute<S>>(
                v.grid,
                (&v.maps.column_of, &v.maps.inverse_of_column),
                (
                    buffer::<S>(v.inverses, "vanka_relax")?,
                    buffer::<Compute<S>>(v.interior_inverse, "vanka_relax")?,
                    ic,
                ),
                (
                    <Compute<S> as Real>::from_f64(v.pressure_scale),
                    <Compute<S> as Real>::from_f64(v.omega),
                ),
                buffer::<Compute<S>>(&r.data, "vanka_relax")?,
                buffer_mut::<Compute<S>>(&mut x.data, "vanka_relax")?,
            )
        });
        Ok(())
    }

    fn coarse_solve_unchecked(
        &self,
        solve: &CoarseSolve<Self>,
        b: View<'_, Self>,
        x: ViewMut<'_, Self>,
    ) -> Result<()> {
        let inverse = buffer::<f64>(&solve.inverse, "coarse_solve")?;
        match b.precision() {
            crate::precision::Precision::F64 => coarse_solve(
                &solve.positions,
                solve.size,
                inverse,
                slice::<f64>(&b, "coarse_solve")?,
                slice_mut::<f64>(x, "coarse_solve")?,
            ),
            crate::precision::Precision::F32 => coarse_solve(
                &solve.positions,
                solve.size,
                inverse,
                slice::<f32>(&b, "coarse_solve")?,
                slice_mut::<f32>(x, "coarse_solve")?,
            ),
            p => return Err(unsupported("coarse_solve", &[p])),
        }
        Ok(())
    }
}
