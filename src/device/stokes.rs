//! The structured Q2-Q1 storage of docs/mathematics.md §7 on the device and its kernels: the Stokes
//! stencils (L, B, Bᵀ, M and pressure stencils such as the Schur complement), the FE grid
//! transfers, and Vanka's gather, patch products and scatter.
//!
//! Velocity lives on the Q2 *lattice*: (2n+1)² nodes of spacing h/2, lexicographic, node
//! (I, J) at (I h/2, J h/2). Its nodes fall into four sets by parity: vertices (I, J even),
//! x-edge midpoints (I odd, J even), y-edge midpoints (I even, J odd) and cell centres
//! (both odd). Pressure lives on the (n+1)² Q1 vertices (i, j). Flow vectors are flat
//! [ux | uy | p] and keep their boundary velocity entries (zero in corrections), so a
//! stencil never leaves the array. Every matrix row stores only its coefficients, in a
//! fixed window of the 2×2-element patch around the row's node, set by set; no column
//! indices. Windows (column offsets around the row's node):
//! - lattice → lattice (L): ±2 along an even index, ±1 along an odd one (5×5, 3×5, 5×3, 3×3);
//! - pressure → lattice (Bᵀ): pressure k−1..k+1 for I = 2k, k..k+1 for I = 2k+1;
//! - lattice → pressure (B): lattice 2i−2..2i+2 × 2j−2..2j+2 (5×5 per component);
//! - pressure → pressure (M, Schur stencils): a square window centred on the row.

use super::checks::{
    check_compute, check_f64, check_flow, check_len, check_one_precision, check_vanka_relax,
};
use super::{Block, Data, DenseKernels, Device, MatMut, MatRef, View, ViewMut};
use crate::error::{Error, Result};
use crate::precision::GemmMath;

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

    /// Entries of the x velocity, y velocity and pressure in a flow vector.
    pub fn parts(self) -> [std::ops::Range<usize>; 3] {
        let l = self.lattice_len();
        [0..l, l..2 * l, 2 * l..self.flow_len()]
    }
}

/// Half-width of the lattice window along an index of this parity: 2 (even), 1 (odd).
pub fn lattice_reach(index: usize) -> usize {
    2 - (index & 1)
}

/// The pressure window of lattice index I: (first pressure index, count).
pub fn pressure_window(index: usize) -> (isize, usize) {
    let k = (index / 2) as isize;
    if index.is_multiple_of(2) {
        (k - 1, 3)
    } else {
        (k, 2)
    }
}

/// The node set of lattice node (I, J): 0 vertex, 1 x-edge, 2 y-edge, 3 cell centre.
pub fn set_of(i: usize, j: usize) -> usize {
    (i & 1) + 2 * (j & 1)
}

/// Nodes of a set per direction: n+1 along an even index, n along an odd one.
pub fn set_extent(n: usize, odd: usize) -> usize {
    n + 1 - odd
}

/// Position of lattice row (I, J) within its set.
pub fn set_row(n: usize, i: usize, j: usize) -> usize {
    (j >> 1) * set_extent(n, i & 1) + (i >> 1)
}

/// Row widths of the lattice → lattice windows per set.
pub fn laplacian_width(set: usize) -> usize {
    (2 * lattice_reach(set & 1) + 1) * (2 * lattice_reach(set >> 1) + 1)
}

/// Row widths of the gradient windows per set.
pub fn gradient_width(set: usize) -> usize {
    pressure_window(set & 1).1 * pressure_window(set >> 1).1
}

/// Row coefficients of an operator whose rows are lattice nodes, stored set by set.
pub struct LatticeRows<D: Device> {
    pub grid: Grid,
    /// The unit of the stored coefficients: entry = stored · scale (B and Bᵀ are stored in
    /// units of h, M in units of h², so low precisions neither underflow nor lose digits).
    pub scale: f64,
    /// Coefficients per row, per set.
    pub widths: [usize; 4],
    pub sets: [Data<D>; 4],
    /// Per set, the rows equal to one representative row (None: none shared).
    pub shared: [Option<SharedRows>; 4],
}

/// Row coefficients of an operator whose rows are pressure nodes (one window for all).
pub struct PressureRows<D: Device> {
    pub grid: Grid,
    pub scale: f64,
    /// Coefficients per row: 9 (3×3 window) or 25 (5×5).
    pub width: usize,
    pub coefficients: Data<D>,
    /// The rows equal to one representative row (None: none shared).
    pub shared: Option<SharedRows>,
}

/// Rows equal to one representative row: on a uniform mesh every row away from the
/// boundary holds the same translation-invariant stencil. The CPU kernels read the
/// representative's coefficients for them (one row that stays in L1 instead of a stream
/// of identical rows: the stencils' bytes drop to those of the vectors), with bitwise the
/// same results; the CUDA kernels read every row (their warps read rows together).
#[derive(Clone, Debug, PartialEq)]
pub struct SharedRows {
    /// The representative's index among the rows.
    pub representative: usize,
    /// Per row: whether its coefficients equal the representative's.
    pub same: Vec<bool>,
}

impl SharedRows {
    /// The rows of `width` values in `values` equal to row `representative` (bit for bit,
    /// so equal in any precision they are rounded to); None when it is out of range or
    /// fewer than half of the rows are.
    pub fn of(values: &[f64], width: usize, representative: usize) -> Option<Self> {
        let rows = values.len().checked_div(width)?;
        if representative >= rows {
            return None;
        }
        let typical = &values[representative * width..(representative + 1) * width];
        let same: Vec<bool> = values
            .chunks_exact(width)
            .map(|r| {
                r.iter()
                    .zip(typical)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
            })
            .collect();
        (2 * same.iter().filter(|&&s| s).count() >= rows).then_some(SharedRows {
            representative,
            same,
        })
    }

    /// The row whose coefficients row `row` has.
    #[inline(always)]
    pub fn row_of(&self, row: usize) -> usize {
        if self.same[row] {
            self.representative
        } else {
            row
        }
    }
}

impl<D: Device> LatticeRows<D> {
    pub fn bytes(&self) -> usize {
        self.sets.iter().map(Data::bytes).sum()
    }
}

impl<D: Device> PressureRows<D> {
    pub fn bytes(&self) -> usize {
        self.coefficients.bytes()
    }
}

/// The Stokes operator [[L, Bᵀ], [B, 0]] of one mesh and the pressure mass matrix M, with
/// Dirichlet velocity columns eliminated (their coefficients are zero).
pub struct StokesMatrices<D: Device> {
    pub grid: Grid,
    /// The scalar Q2 Laplacian (ν = 1), applied to each velocity component.
    pub laplacian: LatticeRows<D>,
    /// Bᵀ: the gradient rows for the x and y component.
    pub gradient: [LatticeRows<D>; 2],
    /// B: the divergence rows (pressure nodes), x and y component.
    pub divergence: [PressureRows<D>; 2],
    /// M: the Q1 pressure mass matrix.
    pub mass: PressureRows<D>,
}

impl<D: Device> StokesMatrices<D> {
    pub fn bytes(&self) -> usize {
        self.laplacian.bytes()
            + self.gradient.iter().map(|g| g.bytes()).sum::<usize>()
            + self.divergence.iter().map(|d| d.bytes()).sum::<usize>()
            + self.mass.bytes()
    }
}

/// A grid transfer between an n_c and a 2·n_c mesh: FE interpolation of Q2 (one velocity
/// component on the lattice) or Q1 (pressure), or its transpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transfer {
    /// fine += P coarse (lattice; coarse boundary entries are zero, so the fine ones stay).
    Q2Prolong,
    /// coarse = Pᵀ fine, boundary entries of the coarse lattice zero.
    Q2Restrict,
    Q1Prolong,
    Q1Restrict,
}

impl Transfer {
    /// Entries of the input and the output vector between the meshes of `coarse_n` and
    /// 2·`coarse_n` cells.
    pub fn lens(self, coarse_n: usize) -> (usize, usize) {
        let (coarse, fine) = match self {
            Transfer::Q2Prolong | Transfer::Q2Restrict => {
                ((2 * coarse_n + 1).pow(2), (4 * coarse_n + 1).pow(2))
            }
            Transfer::Q1Prolong | Transfer::Q1Restrict => {
                ((coarse_n + 1).pow(2), (2 * coarse_n + 1).pow(2))
            }
        };
        match self {
            Transfer::Q2Prolong | Transfer::Q1Prolong => (coarse, fine),
            Transfer::Q2Restrict | Transfer::Q1Restrict => (fine, coarse),
        }
    }
}

/// An exact solve of a small system by its dense (f64) inverse: the unknowns sit at
/// `positions` of a flat vector; `size` may exceed them by one (a bordering row that fixes
/// the pressure's sum).
pub struct CoarseSolve<D: Device> {
    pub positions: D::Buffer<u32>,
    pub unknowns: usize,
    pub size: usize,
    /// The inverse, `size` × `size` column-major, f64.
    pub inverse: Data<D>,
}

/// Where Vanka's patches sit in its buffers.
pub struct VankaMaps<D: Device> {
    /// The buffer column of patch (i, j) (index j(n+1)+i).
    pub column_of: D::Buffer<u32>,
    /// The patch of each buffer column.
    pub patch_of_column: D::Buffer<u32>,
    /// The stored inverse each buffer column uses.
    pub inverse_of_column: D::Buffer<u32>,
}

/// What one Vanka relaxation reads besides r and x: the patch maps, the stored inverses
/// (simple: one per buffer column; tuned: one per class) in the storage precision, and for
/// tuned Vanka the interior inverse in the compute precision, which the first
/// `interior_columns` buffer columns (the interior patches, row by row) share.
pub struct VankaRelax<'a, D: Device> {
    pub grid: Grid,
    pub maps: &'a VankaMaps<D>,
    pub inverses: &'a Data<D>,
    pub interior_inverse: &'a Data<D>,
    pub interior_columns: usize,
    /// 1/h: undoes the pressure scaling of the stored inverses.
    pub pressure_scale: f64,
    pub omega: f64,
}

/// Unknowns of a full Vanka patch: 2 × 25 velocity slots and the pressure (slot 50).
pub const PATCH: usize = 51;

/// The component and lattice node of velocity slot s of Vanka patch (pi, pj) (slot
/// 25c + 5(dJ+2) + (dI+2)), if the node is an interior one.
pub fn patch_node(grid: Grid, pi: usize, pj: usize, s: usize) -> Option<(usize, usize, usize)> {
    let (c, w) = (s / 25, s % 25);
    let i = 2 * pi as isize - 2 + (w % 5) as isize;
    let j = 2 * pj as isize - 2 + (w / 5) as isize;
    let m = grid.m() as isize;
    (i > 0 && j > 0 && i < m - 1 && j < m - 1).then_some((c, i as usize, j as usize))
}

/// The Stokes kernels. Vectors are in the compute precision of the operators' storage.
/// The methods a solver calls check their arguments (device/checks.rs) and hand them to
/// the backend's `*_unchecked` kernel.
pub trait StokesKernels: Device {
    /// out = A x, or out = b − A x with `b`, on flat [ux | uy | p] vectors; boundary
    /// velocity rows of out are zero.
    fn stokes_apply(
        &self,
        a: &StokesMatrices<Self>,
        x: &Block<Self>,
        b: Option<&Block<Self>>,
        out: &mut Block<Self>,
    ) -> Result<()> {
        check_flow("stokes_apply x", x, a.grid)?;
        check_flow("stokes_apply out", out, a.grid)?;
        if let Some(b) = b {
            check_flow("stokes_apply b", b, a.grid)?;
        }
        let b_precision = b.unwrap_or(x).precision();
        check_compute(
            "stokes_apply",
            a.laplacian.sets[0].precision(),
            &[x.precision(), out.precision(), b_precision],
        )?;
        self.stokes_apply_unchecked(a, x, b, out)
    }

    /// y = L x for one velocity component on the lattice (boundary rows zero).
    fn stokes_laplacian(
        &self,
        a: &StokesMatrices<Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let g = a.grid;
        check_len("stokes_laplacian", x.len, g.lattice_len())?;
        check_len("stokes_laplacian", y.len, g.lattice_len())?;
        let p = a.laplacian.sets[0].precision();
        check_compute("stokes_laplacian", p, &[x.precision(), y.precision()])?;
        self.stokes_laplacian_unchecked(a, x, y)
    }

    /// The velocity parts of `flow` = Bᵀ p (boundary rows zero); its pressure part is left.
    fn stokes_gradient(
        &self,
        a: &StokesMatrices<Self>,
        p: View<'_, Self>,
        flow: &mut Block<Self>,
    ) -> Result<()> {
        let g = a.grid;
        check_len("stokes_gradient", p.len, g.pressure_len())?;
        check_flow("stokes_gradient", flow, g)?;
        let sp = a.gradient[0].sets[0].precision();
        check_compute("stokes_gradient", sp, &[p.precision(), flow.precision()])?;
        self.stokes_gradient_unchecked(a, p, flow)
    }

    /// p = B u for the velocity parts of `flow`.
    fn stokes_divergence(
        &self,
        a: &StokesMatrices<Self>,
        flow: &Block<Self>,
        p: ViewMut<'_, Self>,
    ) -> Result<()> {
        let g = a.grid;
        check_flow("stokes_divergence", flow, g)?;
        check_len("stokes_divergence", p.len, g.pressure_len())?;
        let sp = a.divergence[0].coefficients.precision();
        check_compute("stokes_divergence", sp, &[flow.precision(), p.precision()])?;
        self.stokes_divergence_unchecked(a, flow, p)
    }

    /// y = P p for a pressure stencil (the mass matrix, a Schur complement).
    fn pressure_stencil(
        &self,
        rows: &PressureRows<Self>,
        p: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let g = rows.grid;
        check_len("pressure_stencil", p.len, g.pressure_len())?;
        check_len("pressure_stencil", y.len, g.pressure_len())?;
        let sp = rows.coefficients.precision();
        check_compute("pressure_stencil", sp, &[p.precision(), y.precision()])?;
        if rows.width != 9 && rows.width != 25 {
            return Err(Error::Backend(format!(
                "pressure stencils are 3×3 or 5×5, not {} wide",
                rows.width
            )));
        }
        check_len(
            "pressure_stencil coefficients",
            rows.coefficients.len(),
            rows.width * g.pressure_len(),
        )?;
        self.pressure_stencil_unchecked(rows, p, y)
    }

    /// A grid transfer between the meshes of `coarse_n` and 2·`coarse_n` cells.
    fn stokes_transfer(
        &self,
        kind: Transfer,
        coarse_n: usize,
        input: View<'_, Self>,
        output: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (from, to) = kind.lens(coarse_n);
        check_len("stokes_transfer", input.len, from)?;
        check_len("stokes_transfer", output.len, to)?;
        check_one_precision("stokes_transfer", &[input.precision(), output.precision()])?;
        self.stokes_transfer_unchecked(kind, coarse_n, input, output)
    }

    /// Vanka's gather: column k of `gathered` (51 values) = the residual `r` in the slots
    /// of patch `patch_of_column[k]` (zero in inactive slots), its pressure times
    /// `pressure_scale`.
    fn vanka_gather(
        &self,
        grid: Grid,
        r: &Block<Self>,
        maps: &VankaMaps<Self>,
        pressure_scale: f64,
        gathered: &mut Data<Self>,
    ) -> Result<()> {
        check_flow("vanka_gather", r, grid)?;
        let patches = Self::buffer_len(&maps.patch_of_column);
        check_len("vanka_gather", gathered.len(), patches * PATCH)?;
        check_one_precision("vanka_gather", &[r.precision(), gathered.precision()])?;
        self.vanka_gather_unchecked(grid, r, maps, pressure_scale, gathered)
    }

    /// corrections column k = inverse number `inverse_of_column[k]` (51 × 51, stored in S)
    /// times gathered column k, for the columns from `first` on.
    fn vanka_products(
        &self,
        inverses: &Data<Self>,
        maps: &VankaMaps<Self>,
        first: usize,
        gathered: &Data<Self>,
        corrections: &mut Data<Self>,
    ) -> Result<()> {
        let columns = Self::buffer_len(&maps.inverse_of_column);
        check_len("vanka_products", gathered.len(), columns * PATCH)?;
        check_len("vanka_products", gathered.len(), corrections.len())?;
        check_compute(
            "vanka_products",
            inverses.precision(),
            &[gathered.precision(), corrections.precision()],
        )?;
        self.vanka_products_unchecked(inverses, maps, first, gathered, corrections)
    }

    /// x += ω Σ_i V_iᵀ (corrections of patch i): every unknown sums the patches holding it;
    /// pressure corrections times `pressure_scale`.
    fn vanka_scatter(
        &self,
        grid: Grid,
        corrections: &Data<Self>,
        maps: &VankaMaps<Self>,
        omega: f64,
        pressure_scale: f64,
        x: &mut Block<Self>,
    ) -> Result<()> {
        check_flow("vanka_scatter", x, grid)?;
        check_len(
            "vanka_scatter",
            Self::buffer_len(&maps.column_of),
            grid.pressure_len(),
        )?;
        check_one_precision("vanka_scatter", &[x.precision(), corrections.precision()])?;
        self.vanka_scatter_unchecked(grid, corrections, maps, omega, pressure_scale, x)
    }

    /// Whether [`StokesKernels::vanka_relax`] works in its own scratch (fused), so that the
    /// gathered residuals and corrections need no buffers, for a relaxation whose interior
    /// patches share one inverse (`shared_interior`: tuned Vanka with interior patches) or
    /// not.
    fn vanka_relax_is_fused(&self, shared_interior: bool) -> bool {
        let _ = shared_interior;
        false
    }

    /// One whole Vanka relaxation, x += ω Σ_i V_iᵀ W_i A_i⁻¹ V_i r: by default
    /// [`vanka_relax_in_turn`]. A device may fuse the steps (and then ignore the two
    /// buffers, see [`StokesKernels::vanka_relax_is_fused`]).
    fn vanka_relax(
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
        check_vanka_relax(&v, r, x)?;
        self.vanka_relax_unchecked(v, r, gathered, corrections, x)
    }

    /// x = A⁻¹ b at the solve's positions, 0 elsewhere (in x's precision, computed in f64).
    fn coarse_solve(
        &self,
        solve: &CoarseSolve<Self>,
        b: View<'_, Self>,
        x: ViewMut<'_, Self>,
    ) -> Result<()> {
        check_len("coarse_solve", b.len, x.len)?;
        check_one_precision("coarse_solve", &[b.precision(), x.precision()])?;
        check_f64("coarse_solve", &[solve.inverse.precision()])?;
        check_len(
            "coarse_solve positions",
            Self::buffer_len(&solve.positions),
            solve.unknowns,
        )?;
        check_len(
            "coarse_solve inverse",
            solve.inverse.len(),
            solve.size * solve.size,
        )?;
        self.coarse_solve_unchecked(solve, b, x)
    }

    // The backend's kernels behind the checked methods above, given checked arguments.

    /// [`StokesKernels::stokes_apply`] on checked arguments.
    fn stokes_apply_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        x: &Block<Self>,
        b: Option<&Block<Self>>,
        out: &mut Block<Self>,
    ) -> Result<()>;

    /// [`StokesKernels::stokes_laplacian`] on checked arguments.
    fn stokes_laplacian_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;

    /// [`StokesKernels::stokes_gradient`] on checked arguments.
    fn stokes_gradient_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        p: View<'_, Self>,
        flow: &mut Block<Self>,
    ) -> Result<()>;

    /// [`StokesKernels::stokes_divergence`] on checked arguments.
    fn stokes_divergence_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        flow: &Block<Self>,
        p: ViewMut<'_, Self>,
    ) -> Result<()>;

    /// [`StokesKernels::pressure_stencil`] on checked arguments.
    fn pressure_stencil_unchecked(
        &self,
        rows: &PressureRows<Self>,
        p: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;

    /// [`StokesKernels::stokes_transfer`] on checked arguments.
    fn stokes_transfer_unchecked(
        &self,
        kind: Transfer,
        coarse_n: usize,
        input: View<'_, Self>,
        output: ViewMut<'_, Self>,
    ) -> Result<()>;

    /// [`StokesKernels::vanka_gather`] on checked arguments.
    fn vanka_gather_unchecked(
        &self,
        grid: Grid,
        r: &Block<Self>,
        maps: &VankaMaps<Self>,
        pressure_scale: f64,
        gathered: &mut Data<Self>,
    ) -> Result<()>;

    /// [`StokesKernels::vanka_products`] on checked arguments.
    fn vanka_products_unchecked(
        &self,
        inverses: &Data<Self>,
        maps: &VankaMaps<Self>,
        first: usize,
        gathered: &Data<Self>,
        corrections: &mut Data<Self>,
    ) -> Result<()>;

    /// [`StokesKernels::vanka_scatter`] on checked arguments.
    fn vanka_scatter_unchecked(
        &self,
        grid: Grid,
        corrections: &Data<Self>,
        maps: &VankaMaps<Self>,
        omega: f64,
        pressure_scale: f64,
        x: &mut Block<Self>,
    ) -> Result<()>;

    /// [`StokesKernels::vanka_relax`] on checked arguments (by default
    /// [`vanka_relax_in_turn`]).
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
        vanka_relax_in_turn(self, v, r, gathered, corrections, x)
    }

    /// [`StokesKernels::coarse_solve`] on checked arguments.
    fn coarse_solve_unchecked(
        &self,
        solve: &CoarseSolve<Self>,
        b: View<'_, Self>,
        x: ViewMut<'_, Self>,
    ) -> Result<()>;
}

/// A Vanka relaxation in steps: [`StokesKernels::vanka_gather`] into `gathered`, the
/// interior columns' product with their shared inverse as one GEMM, the other columns'
/// products ([`StokesKernels::vanka_products`]) into `corrections`, and
/// [`StokesKernels::vanka_scatter`].
pub fn vanka_relax_in_turn<D: StokesKernels + DenseKernels>(
    dev: &D,
    v: VankaRelax<'_, D>,
    r: &Block<D>,
    gathered: &mut Data<D>,
    corrections: &mut Data<D>,
    x: &mut Block<D>,
) -> Result<()> {
    dev.vanka_gather(v.grid, r, v.maps, v.pressure_scale, gathered)?;
    let ic = v.interior_columns;
    if ic > 0 {
        dev.gemm(
            MatRef::col_major(v.interior_inverse, 0, PATCH, PATCH, PATCH),
            MatRef::col_major(gathered, 0, PATCH, ic, PATCH),
            MatMut::col_major(corrections, 0, PATCH, ic, PATCH),
            GemmMath::Full,
        )?;
    }
    dev.vanka_products(v.inverses, v.maps, ic, gathered, corrections)?;
    dev.vanka_scatter(v.grid, corrections, v.maps, v.omega, v.pressure_scale, x)
}

#[cfg(test)]
mod shared_rows_tests {
    use super::SharedRows;

    #[test]
    fn rows_equal_to_the_representative_bit_for_bit() {
        // Rows of two values: 0 and 2 equal row 1; row 3 holds -0.0, which is not 0.0's bits.
        let values = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, -0.0];
        let shared = SharedRows::of(&values, 2, 1).unwrap();
        assert_eq!(shared.same, [true, true, true, false]);
        assert_eq!((shared.row_of(0), shared.row_of(3)), (1, 3));
        assert_eq!(SharedRows::of(&values, 2, 4), None, "out of range");
        let mostly_different = [1.0, 2.0, 3.0, 4.0, 1.0];
        assert_eq!(
            SharedRows::of(&mostly_different, 1, 0),
            None,
            "fewer than half"
        );
        assert_eq!(SharedRows::of(&[], 0, 0), None);
    }
}
