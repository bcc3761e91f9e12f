//! The structured Q2-Q1 storage of docs/mathematics.md §7 as assembled on the host (f64):
//! every row's coefficients in a fixed window of its 2×2-element patch, set by set, no
//! column indices (the layout is described in `device::stokes`). The set-up reads entries
//! from it (patch matrices, the coarsest dense matrix, the Schur stencil) and uploads it to
//! the device in the solve's precision; the stencil kernels run there.

use std::ops::Range;

use crate::device::stokes::{
    self, lattice_reach, set_extent, set_of, set_row, SharedRows, StokesMatrices,
};
use crate::device::{Data, Device};
use crate::error::Result;
use crate::precision::{Precision, Stored};

pub use crate::device::stokes::{gradient_width, laplacian_width, pressure_window, Grid};

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

/// The (x, y) of every lattice node (the Q2 velocity nodes, spacing h/2, x fastest),
/// interleaved.
pub fn lattice_coordinates(grid: Grid) -> Vec<f64> {
    let (m, half) = (grid.m(), 0.5 / grid.n as f64);
    (0..m * m)
        .flat_map(|k| [(k % m) as f64 * half, (k / m) as f64 * half])
        .collect()
}

/// The nine lattice nodes of every cell (cells x fastest) in VTK's biquadratic order:
/// corners counterclockwise from the lower left, the midpoints of the lower, right, upper
/// and left edges, the centre.
pub fn q2_cells(grid: Grid) -> Vec<u32> {
    const LOCAL: [(usize, usize); 9] = [
        (0, 0),
        (2, 0),
        (2, 2),
        (0, 2),
        (1, 0),
        (2, 1),
        (1, 2),
        (0, 1),
        (1, 1),
    ];
    let (n, m) = (grid.n, grid.m());
    (0..n * n)
        .flat_map(|c| {
            let (i, j) = (2 * (c % n), 2 * (c / n));
            LOCAL.map(|(di, dj)| ((j + dj) * m + i + di) as u32)
        })
        .collect()
}

/// Row coefficients of one operator whose rows are lattice nodes, stored set by set.
#[derive(Clone, Debug)]
pub struct HostLatticeRows {
    pub grid: Grid,
    /// The unit of the stored coefficients: entry = stored · scale.
    pub scale: f64,
    widths: [usize; 4],
    sets: [Vec<f64>; 4],
}

impl HostLatticeRows {
    /// Zero coefficients; `width(set)` gives the row length of each set.
    pub fn zeros(grid: Grid, width: impl Fn(usize) -> usize) -> Self {
        let widths = [width(0), width(1), width(2), width(3)];
        let sets = std::array::from_fn(|s| {
            let rows = set_extent(grid.n, s & 1) * set_extent(grid.n, s >> 1);
            vec![0.0; rows * widths[s]]
        });
        HostLatticeRows {
            grid,
            scale: 1.0,
            widths,
            sets,
        }
    }

    fn span(&self, i: usize, j: usize) -> (usize, Range<usize>) {
        let s = set_of(i, j);
        let r = set_row(self.grid.n, i, j);
        (s, r * self.widths[s]..(r + 1) * self.widths[s])
    }

    /// The coefficients of row (I, J).
    pub fn row(&self, i: usize, j: usize) -> &[f64] {
        let (s, span) = self.span(i, j);
        &self.sets[s][span]
    }

    pub fn row_mut(&mut self, i: usize, j: usize) -> &mut [f64] {
        let (s, span) = self.span(i, j);
        &mut self.sets[s][span]
    }

    /// The matrix entry in slot `slot` of row (I, J).
    pub fn entry(&self, i: usize, j: usize, slot: usize) -> f64 {
        self.row(i, j)[slot] * self.scale
    }

    /// Multiplies every stored coefficient by `factor` and divides the unit by it.
    pub fn rescale(&mut self, factor: f64) {
        for set in &mut self.sets {
            set.iter_mut().for_each(|v| *v *= factor);
        }
        self.scale /= factor;
    }

    /// The rows on the device, rounded to `precision`.
    pub fn upload<D: Device>(
        &self,
        dev: &D,
        precision: Precision,
    ) -> Result<stokes::LatticeRows<D>> {
        let [a, b, c, d] = &self.sets;
        let n = self.grid.n;
        // The representative of a set: its node nearest the middle of the lattice.
        let central = |odd: usize| if n & 1 == odd { n } else { n + 1 };
        let shared = std::array::from_fn(|s| {
            let representative = set_row(n, central(s & 1), central(s >> 1));
            SharedRows::of(&self.sets[s], self.widths[s], representative)
        });
        Ok(stokes::LatticeRows {
            grid: self.grid,
            scale: self.scale,
            widths: self.widths,
            sets: [
                Data::from_f64(dev, a, precision)?,
                Data::from_f64(dev, b, precision)?,
                Data::from_f64(dev, c, precision)?,
                Data::from_f64(dev, d, precision)?,
            ],
            shared,
        })
    }
}

/// Row coefficients of one operator whose rows are pressure nodes (one window for all).
#[derive(Clone, Debug)]
pub struct HostPressureRows {
    pub grid: Grid,
    /// The unit of the stored coefficients (see [`HostLatticeRows::scale`]).
    pub scale: f64,
    pub width: usize,
    pub coefficients: Vec<f64>,
}

impl HostPressureRows {
    pub fn zeros(grid: Grid, width: usize) -> Self {
        HostPressureRows {
            grid,
            scale: 1.0,
            width,
            coefficients: vec![0.0; grid.pressure_len() * width],
        }
    }

    pub fn row(&self, i: usize, j: usize) -> &[f64] {
        let r = j * self.grid.np() + i;
        &self.coefficients[r * self.width..(r + 1) * self.width]
    }

    pub fn row_mut(&mut self, i: usize, j: usize) -> &mut [f64] {
        let r = j * self.grid.np() + i;
        &mut self.coefficients[r * self.width..(r + 1) * self.width]
    }

    /// The matrix entry in slot `slot` of row (i, j).
    pub fn entry(&self, i: usize, j: usize, slot: usize) -> f64 {
        self.row(i, j)[slot] * self.scale
    }

    /// Multiplies every stored coefficient by `factor` and divides the unit by it.
    pub fn rescale(&mut self, factor: f64) {
        self.coefficients.iter_mut().for_each(|v| *v *= factor);
        self.scale /= factor;
    }

    /// The pressure column of slot `slot` in row (i, j) of a square window, if inside.
    pub fn column(&self, i: usize, j: usize, slot: usize) -> Option<(usize, usize)> {
        let w = (self.width as f64).sqrt() as isize;
        let reach = w / 2;
        let (ci, cj) = (
            i as isize - reach + slot as isize % w,
            j as isize - reach + slot as isize / w,
        );
        let np = self.grid.np() as isize;
        (ci >= 0 && cj >= 0 && ci < np && cj < np).then_some((ci as usize, cj as usize))
    }

    /// The rows on the device, rounded to `precision`.
    pub fn upload<D: Device>(
        &self,
        dev: &D,
        precision: Precision,
    ) -> Result<stokes::PressureRows<D>> {
        let np = self.grid.np();
        let representative = (np / 2) * np + np / 2;
        Ok(stokes::PressureRows {
            grid: self.grid,
            scale: self.scale,
            width: self.width,
            coefficients: Data::from_f64(dev, &self.coefficients, precision)?,
            shared: SharedRows::of(&self.coefficients, self.width, representative),
        })
    }
}

/// The Stokes operator [[L, Bᵀ], [B, 0]] of one mesh on the host (f64), plus the pressure
/// mass matrix M, with Dirichlet velocity columns eliminated (their coefficients are zero).
#[derive(Clone, Debug)]
pub struct StokesHostMatrices {
    pub grid: Grid,
    /// The scalar Q2 Laplacian (ν = 1), applied to each velocity component.
    pub laplacian: HostLatticeRows,
    /// Bᵀ: the gradient rows for the x and y component.
    pub gradient: [HostLatticeRows; 2],
    /// B: the divergence rows (pressure nodes), x and y component.
    pub divergence: [HostPressureRows; 2],
    /// M: the Q1 pressure mass matrix.
    pub mass: HostPressureRows,
}

impl StokesHostMatrices {
    /// The operator on the device, its coefficients rounded to `precision`.
    pub fn upload<D: Device>(&self, dev: &D, precision: Precision) -> Result<StokesMatrices<D>> {
        Ok(StokesMatrices {
            grid: self.grid,
            laplacian: self.laplacian.upload(dev, precision)?,
            gradient: [
                self.gradient[0].upload(dev, precision)?,
                self.gradient[1].upload(dev, precision)?,
            ],
            divergence: [
                self.divergence[0].upload(dev, precision)?,
                self.divergence[1].upload(dev, precision)?,
            ],
            mass: self.mass.upload(dev, precision)?,
        })
    }

    /// Bytes the operator takes stored in `S`.
    pub fn bytes<S: Stored>(&self) -> usize {
        let lattice = |r: &HostLatticeRows| r.sets.iter().map(Vec::len).sum::<usize>();
        let pressure = |r: &HostPressureRows| r.coefficients.len();
        std::mem::size_of::<S>()
            * (lattice(&self.laplacian)
                + self.gradient.iter().map(lattice).sum::<usize>()
                + self.divergence.iter().map(pressure).sum::<usize>()
                + pressure(&self.mass))
    }
}

/// A flow vector's unknown: (component 0/1 at lattice node (I, J)) or pressure (2, i, j).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unknown {
    pub part: usize,
    pub i: usize,
    pub j: usize,
}

impl Unknown {
    /// Its index in a flat [ux | uy | p] vector.
    pub fn index(self, grid: Grid) -> usize {
        if self.part < 2 {
            self.part * grid.lattice_len() + self.j * grid.m() + self.i
        } else {
            2 * grid.lattice_len() + self.j * grid.np() + self.i
        }
    }
}

impl StokesHostMatrices {
    /// Calls `f(column, value)` for the stored entries of the row of unknown `u` of the
    /// block system [[L, Bᵀ], [B, 0]] (interior velocity rows, every pressure row).
    pub fn for_each_in_row(&self, u: Unknown, mut f: impl FnMut(Unknown, f64)) {
        let g = self.grid;
        let m = g.m() as isize;
        let (i, j) = (u.i, u.j);
        if u.part < 2 {
            let (rx, ry) = (lattice_reach(i) as isize, lattice_reach(j) as isize);
            let w = 2 * rx + 1;
            for (slot, _) in self.laplacian.row(i, j).iter().enumerate() {
                let (ci, cj) = (
                    i as isize - rx + slot as isize % w,
                    j as isize - ry + slot as isize / w,
                );
                if ci >= 0 && cj >= 0 && ci < m && cj < m {
                    let column = Unknown {
                        part: u.part,
                        i: ci as usize,
                        j: cj as usize,
                    };
                    f(column, self.laplacian.entry(i, j, slot));
                }
            }
            let ((i0, wi), (j0, _)) = (pressure_window(i), pressure_window(j));
            for slot in 0..gradient_width(set_of(i, j)) {
                let (pi, pj) = (i0 + (slot % wi) as isize, j0 + (slot / wi) as isize);
                let column = Unknown {
                    part: 2,
                    i: pi as usize,
                    j: pj as usize,
                };
                f(column, self.gradient[u.part].entry(i, j, slot));
            }
        } else {
            for c in 0..2 {
                for slot in 0..25 {
                    let (li, lj) = (
                        2 * i as isize - 2 + (slot % 5) as isize,
                        2 * j as isize - 2 + (slot / 5) as isize,
                    );
                    if li > 0 && lj > 0 && li < m - 1 && lj < m - 1 {
                        let column = Unknown {
                            part: c,
                            i: li as usize,
                            j: lj as usize,
                        };
                        f(column, self.divergence[c].entry(i, j, slot));
                    }
                }
            }
        }
    }
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
