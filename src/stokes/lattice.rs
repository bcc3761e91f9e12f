//! The structured Q2-Q1 storage of SPEC §4.1 on a uniform n×n mesh of the unit square.
//!
//! Velocity lives on the Q2 *lattice*: (2n+1)² nodes of spacing h/2, lexicographic, node
//! (I, J) at (I h/2, J h/2). Its nodes fall into four sets by parity: vertices (I, J even),
//! x-edge midpoints (I odd, J even), y-edge midpoints (I even, J odd) and cell centres (both
//! odd). Pressure lives on the (n+1)² Q1 vertices (i, j). A velocity vector keeps its
//! boundary entries (always zero in corrections), so a stencil never leaves the array.
//!
//! Every matrix row stores only its coefficients, in a fixed local numbering of the window
//! of the 2×2-element patch around the row's node, set by set; no column indices. Windows
//! (column offsets around the row's node):
//! - lattice → lattice (L): ±2 along an even index, ±1 along an odd one (5×5, 3×5, 5×3, 3×3);
//! - pressure → lattice (Bᵀ): pressure k−1..k+1 for I = 2k, k..k+1 for I = 2k+1;
//! - lattice → pressure (B): lattice 2i−2..2i+2 × 2j−2..2j+2 (5×5 per component);
//! - pressure → pressure (M): i−1..i+1 × j−1..j+1.

use num_traits::Zero;
use rayon::prelude::*;

use crate::precision::{Real, Stored};

/// Index helpers of the lattice and pressure grids of an n×n mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    /// Cells per direction.
    pub n: usize,
}

impl Grid {
    /// Lattice nodes per direction: 2n+1.
    pub fn m(self) -> usize {
        2 * self.n + 1
    }

    /// Pressure nodes per direction: n+1.
    pub fn np(self) -> usize {
        self.n + 1
    }

    pub fn lattice_len(self) -> usize {
        self.m() * self.m()
    }

    pub fn pressure_len(self) -> usize {
        self.np() * self.np()
    }

    /// Length of a flat [ux | uy | p] vector.
    pub fn flow_len(self) -> usize {
        2 * self.lattice_len() + self.pressure_len()
    }

    /// Velocity unknowns (interior lattice nodes, both components) plus pressure nodes.
    pub fn unknowns(self) -> usize {
        2 * (self.m() - 2).pow(2) + self.pressure_len()
    }

    pub fn is_interior(self, i: usize, j: usize) -> bool {
        let m = self.m();
        i > 0 && j > 0 && i + 1 < m && j + 1 < m
    }
}

/// Splits a flat [ux | uy | p] vector into its three parts.
pub fn split<T>(v: &[T], grid: Grid) -> (&[T], &[T], &[T]) {
    let l = grid.lattice_len();
    let (ux, rest) = v.split_at(l);
    let (uy, p) = rest.split_at(l);
    (ux, uy, p)
}

/// Splits a flat [ux | uy | p] vector into its three parts, mutably.
pub fn split_mut<T>(v: &mut [T], grid: Grid) -> (&mut [T], &mut [T], &mut [T]) {
    let l = grid.lattice_len();
    let (ux, rest) = v.split_at_mut(l);
    let (uy, p) = rest.split_at_mut(l);
    (ux, uy, p)
}

/// Half-width of the lattice window along an index of this parity: 2 (even), 1 (odd).
pub fn lattice_reach(index: usize) -> usize {
    2 - (index & 1)
}

/// The pressure window of lattice index I: (first pressure index, count).
pub fn pressure_window(index: usize) -> (isize, usize) {
    let k = (index / 2) as isize;
    if index % 2 == 0 {
        (k - 1, 3)
    } else {
        (k, 2)
    }
}

/// The node set of lattice node (I, J): 0 vertex, 1 x-edge, 2 y-edge, 3 cell centre.
fn set_of(i: usize, j: usize) -> usize {
    (i & 1) + 2 * (j & 1)
}

/// Nodes of a set per direction: n+1 along an even index, n along an odd one.
fn set_extent(n: usize, odd: usize) -> usize {
    n + 1 - odd
}

/// Row coefficients of one operator whose rows are lattice nodes, stored set by set.
#[derive(Clone, Debug)]
pub struct LatticeRows<S> {
    pub grid: Grid,
    /// The unit of the stored coefficients: entry = stored · scale (B and Bᵀ are stored in
    /// units of h, M in units of h², so f16 storage neither underflows nor loses digits).
    pub scale: f64,
    /// Coefficients per row, per set (see [`LatticeRows::width`]).
    widths: [usize; 4],
    sets: [Vec<S>; 4],
}

impl<S: Stored> LatticeRows<S> {
    /// Zero coefficients; `width(set)` gives the row length of each set.
    pub fn zeros(grid: Grid, width: impl Fn(usize) -> usize) -> Self {
        let widths = [width(0), width(1), width(2), width(3)];
        let sets = std::array::from_fn(|s| {
            let rows = set_extent(grid.n, s & 1) * set_extent(grid.n, s >> 1);
            vec![S::default(); rows * widths[s]]
        });
        LatticeRows {
            grid,
            scale: 1.0,
            widths,
            sets,
        }
    }

    /// The coefficients of row (I, J).
    pub fn row(&self, i: usize, j: usize) -> &[S] {
        let s = set_of(i, j);
        let r = (j >> 1) * set_extent(self.grid.n, i & 1) + (i >> 1);
        &self.sets[s][r * self.widths[s]..(r + 1) * self.widths[s]]
    }

    /// The matrix entry in slot `slot` of row (I, J).
    pub fn entry(&self, i: usize, j: usize, slot: usize) -> f64 {
        self.row(i, j)[slot].to_f64() * self.scale
    }

    /// Multiplies every stored coefficient by `factor` and divides the unit by it.
    pub fn rescale(&mut self, factor: f64) {
        for set in &mut self.sets {
            set.iter_mut()
                .for_each(|v| *v = S::from_f64(v.to_f64() * factor));
        }
        self.scale /= factor;
    }

    pub fn row_mut(&mut self, i: usize, j: usize) -> &mut [S] {
        let s = set_of(i, j);
        let r = (j >> 1) * set_extent(self.grid.n, i & 1) + (i >> 1);
        &mut self.sets[s][r * self.widths[s]..(r + 1) * self.widths[s]]
    }

    /// The same coefficients in another storage precision.
    pub fn convert<T: Stored>(&self) -> LatticeRows<T> {
        LatticeRows {
            grid: self.grid,
            scale: self.scale,
            widths: self.widths,
            sets: std::array::from_fn(|s| {
                self.sets[s]
                    .iter()
                    .map(|&v| T::from_f64(v.to_f64()))
                    .collect()
            }),
        }
    }

    pub fn bytes(&self) -> usize {
        self.sets.iter().map(|s| s.len()).sum::<usize>() * std::mem::size_of::<S>()
    }
}

/// Row coefficients of one operator whose rows are pressure nodes (one window for all).
#[derive(Clone, Debug)]
pub struct PressureRows<S> {
    pub grid: Grid,
    /// The unit of the stored coefficients (see [`LatticeRows::scale`]).
    pub scale: f64,
    pub width: usize,
    pub coefficients: Vec<S>,
}

impl<S: Stored> PressureRows<S> {
    pub fn zeros(grid: Grid, width: usize) -> Self {
        PressureRows {
            grid,
            scale: 1.0,
            width,
            coefficients: vec![S::default(); grid.pressure_len() * width],
        }
    }

    pub fn row(&self, i: usize, j: usize) -> &[S] {
        let r = j * self.grid.np() + i;
        &self.coefficients[r * self.width..(r + 1) * self.width]
    }

    /// The matrix entry in slot `slot` of row (i, j).
    pub fn entry(&self, i: usize, j: usize, slot: usize) -> f64 {
        self.row(i, j)[slot].to_f64() * self.scale
    }

    /// Multiplies every stored coefficient by `factor` and divides the unit by it.
    pub fn rescale(&mut self, factor: f64) {
        self.coefficients
            .iter_mut()
            .for_each(|v| *v = S::from_f64(v.to_f64() * factor));
        self.scale /= factor;
    }

    pub fn row_mut(&mut self, i: usize, j: usize) -> &mut [S] {
        let r = j * self.grid.np() + i;
        &mut self.coefficients[r * self.width..(r + 1) * self.width]
    }

    /// y = P p for a pressure → pressure operator with a square window (3×3: the mass
    /// matrix; 5×5: the Schur complement B D⁻¹ Bᵀ of the relaxations).
    pub fn apply(&self, p: &[S::Compute], y: &mut [S::Compute]) {
        let np = self.grid.np();
        y.par_chunks_mut(np).enumerate().for_each(|(j, row)| {
            for (i, out) in row.iter_mut().enumerate() {
                *out = match self.width {
                    9 => pressure_row::<S, 3>(self, p, i, j),
                    25 => pressure_row::<S, 5>(self, p, i, j),
                    w => unreachable!("pressure stencils are 3×3 or 5×5, not {w} wide"),
                };
            }
        });
    }

    pub fn convert<T: Stored>(&self) -> PressureRows<T> {
        PressureRows {
            grid: self.grid,
            scale: self.scale,
            width: self.width,
            coefficients: self
                .coefficients
                .iter()
                .map(|&v| T::from_f64(v.to_f64()))
                .collect(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.coefficients.len() * std::mem::size_of::<S>()
    }
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
    l: &LatticeRows<S>,
    ux: &[S::Compute],
    uy: &[S::Compute],
    i: usize,
    j: usize,
) -> (S::Compute, S::Compute) {
    let m = l.grid.m();
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
fn lattice_row<S: Stored>(l: &LatticeRows<S>, x: &[S::Compute], i: usize, j: usize) -> S::Compute {
    let m = l.grid.m();
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
    bt: &LatticeRows<S>,
    p: &[S::Compute],
    i: usize,
    j: usize,
) -> S::Compute {
    let np = bt.grid.np();
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

/// The Stokes operator [[L, Bᵀ], [B, 0]] of one mesh, plus the pressure mass matrix M,
/// with Dirichlet velocity columns eliminated (their coefficients are zero).
#[derive(Clone, Debug)]
pub struct StokesOperator<S> {
    pub grid: Grid,
    /// The scalar Q2 Laplacian (ν = 1), applied to each velocity component.
    pub laplacian: LatticeRows<S>,
    /// Bᵀ: the gradient rows for the x and y component.
    pub gradient: [LatticeRows<S>; 2],
    /// B: the divergence rows (pressure nodes), x and y component.
    pub divergence: [PressureRows<S>; 2],
    /// M: the Q1 pressure mass matrix.
    pub mass: PressureRows<S>,
}

impl<S: Stored> StokesOperator<S> {
    /// The same operator in another storage precision.
    pub fn convert<T: Stored>(&self) -> StokesOperator<T> {
        StokesOperator {
            grid: self.grid,
            laplacian: self.laplacian.convert(),
            gradient: [self.gradient[0].convert(), self.gradient[1].convert()],
            divergence: [self.divergence[0].convert(), self.divergence[1].convert()],
            mass: self.mass.convert(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.laplacian.bytes()
            + self.gradient.iter().map(|g| g.bytes()).sum::<usize>()
            + self.divergence.iter().map(|d| d.bytes()).sum::<usize>()
            + self.mass.bytes()
    }

    /// r = b − A x on flat [ux | uy | p] vectors (r may not alias).
    pub fn residual(&self, b: &[S::Compute], x: &[S::Compute], r: &mut [S::Compute]) {
        self.combine(x, r, |row, ax| b[row] - ax);
    }

    /// y = A x on flat [ux | uy | p] vectors.
    pub fn apply(&self, x: &[S::Compute], y: &mut [S::Compute]) {
        self.combine(x, y, |_, ax| ax);
    }

    /// out[row] = f(row, (A x)[row]) for every row; boundary velocity rows get 0.
    fn combine(
        &self,
        x: &[S::Compute],
        out: &mut [S::Compute],
        f: impl Fn(usize, S::Compute) -> S::Compute + Sync,
    ) {
        let g = self.grid;
        let (m, np, len) = (g.m(), g.np(), g.lattice_len());
        let (ux, uy, p) = split(x, g);
        let (ox, oy, op) = split_mut(out, g);
        let zero = S::Compute::zero();
        ox.par_chunks_mut(m)
            .zip(oy.par_chunks_mut(m))
            .enumerate()
            .for_each(|(j, (rx, ry))| {
                for i in 0..m {
                    if !g.is_interior(i, j) {
                        rx[i] = zero;
                        ry[i] = zero;
                        continue;
                    }
                    let (lx, ly) = lattice_row2(&self.laplacian, ux, uy, i, j);
                    let gx = gradient_row(&self.gradient[0], p, i, j);
                    let gy = gradient_row(&self.gradient[1], p, i, j);
                    let row = j * m + i;
                    rx[i] = f(row, lx + gx);
                    ry[i] = f(len + row, ly + gy);
                }
            });
        op.par_chunks_mut(np).enumerate().for_each(|(j, rp)| {
            for (i, out) in rp.iter_mut().enumerate() {
                let d = divergence_row(&self.divergence, ux, uy, i, j);
                *out = f(2 * len + j * np + i, d);
            }
        });
    }

    /// y = L x for one velocity component (boundary rows 0).
    pub fn apply_laplacian(&self, x: &[S::Compute], y: &mut [S::Compute]) {
        let g = self.grid;
        let m = g.m();
        y.par_chunks_mut(m).enumerate().for_each(|(j, row)| {
            for (i, out) in row.iter_mut().enumerate() {
                *out = if g.is_interior(i, j) {
                    lattice_row(&self.laplacian, x, i, j)
                } else {
                    S::Compute::zero()
                };
            }
        });
    }

    /// y = Bᵀ p, both components (boundary rows 0).
    pub fn apply_gradient(&self, p: &[S::Compute], yx: &mut [S::Compute], yy: &mut [S::Compute]) {
        let g = self.grid;
        let m = g.m();
        yx.par_chunks_mut(m)
            .zip(yy.par_chunks_mut(m))
            .enumerate()
            .for_each(|(j, (rx, ry))| {
                for i in 0..m {
                    if g.is_interior(i, j) {
                        rx[i] = gradient_row(&self.gradient[0], p, i, j);
                        ry[i] = gradient_row(&self.gradient[1], p, i, j);
                    } else {
                        rx[i] = S::Compute::zero();
                        ry[i] = S::Compute::zero();
                    }
                }
            });
    }

    /// y = B u.
    pub fn apply_divergence(&self, ux: &[S::Compute], uy: &[S::Compute], y: &mut [S::Compute]) {
        let np = self.grid.np();
        y.par_chunks_mut(np).enumerate().for_each(|(j, row)| {
            for (i, out) in row.iter_mut().enumerate() {
                *out = divergence_row(&self.divergence, ux, uy, i, j);
            }
        });
    }

    /// y = M p.
    pub fn apply_mass(&self, p: &[S::Compute], y: &mut [S::Compute]) {
        self.mass.apply(p, y);
    }
}

/// (B u) at pressure node (i, j).
#[inline(always)]
fn divergence_row<S: Stored>(
    b: &[PressureRows<S>; 2],
    ux: &[S::Compute],
    uy: &[S::Compute],
    i: usize,
    j: usize,
) -> S::Compute {
    let g = b[0].grid;
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
    rows: &PressureRows<S>,
    p: &[S::Compute],
    i: usize,
    j: usize,
) -> S::Compute {
    let np = rows.grid.np();
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

/// Mean-zero projection of a pressure vector: p −= (Σ p)/len (the discrete null space of
/// the Stokes operator is the constant pressure).
pub fn remove_mean<T: Real>(p: &mut [T]) {
    let mean = p.iter().fold(T::zero(), |s, &v| s + v) / T::from_f64(p.len() as f64);
    p.iter_mut().for_each(|v| *v = *v - mean);
}

/// The window index of lattice column (I + dI, J + dJ) in row (I, J) of a lattice → lattice
/// operator, if inside the window.
pub fn lattice_slot(i: usize, j: usize, di: isize, dj: isize) -> Option<usize> {
    let (rx, ry) = (lattice_reach(i) as isize, lattice_reach(j) as isize);
    (di.abs() <= rx && dj.abs() <= ry).then(|| ((dj + ry) * (2 * rx + 1) + di + rx) as usize)
}

/// The window index of pressure column (pi, pj) in row (I, J) of a gradient operator.
pub fn gradient_slot(i: usize, j: usize, pi: usize, pj: usize) -> Option<usize> {
    let ((i0, w), (j0, h)) = (pressure_window(i), pressure_window(j));
    let (di, dj) = (pi as isize - i0, pj as isize - j0);
    (0 <= di && di < w as isize && 0 <= dj && dj < h as isize)
        .then(|| dj as usize * w + di as usize)
}

/// The window index of lattice column (I, J) in row (i, j) of a divergence operator.
pub fn divergence_slot(pi: usize, pj: usize, i: usize, j: usize) -> Option<usize> {
    let (di, dj) = (
        i as isize - (2 * pi as isize - 2),
        j as isize - (2 * pj as isize - 2),
    );
    ((0..5).contains(&di) && (0..5).contains(&dj)).then(|| dj as usize * 5 + di as usize)
}

/// The window index of pressure column (ci, cj) in row (i, j) of the mass matrix.
pub fn mass_slot(i: usize, j: usize, ci: usize, cj: usize) -> Option<usize> {
    let (di, dj) = (ci as isize - i as isize + 1, cj as isize - j as isize + 1);
    ((0..3).contains(&di) && (0..3).contains(&dj)).then(|| dj as usize * 3 + di as usize)
}

/// Row widths of the lattice → lattice windows per set.
pub fn laplacian_width(set: usize) -> usize {
    (2 * lattice_reach(set & 1) + 1) * (2 * lattice_reach(set >> 1) + 1)
}

/// Row widths of the gradient windows per set.
pub fn gradient_width(set: usize) -> usize {
    pressure_window(set & 1).1 * pressure_window(set >> 1).1
}
