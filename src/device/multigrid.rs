//! The kernels of geometric multigrid on the device: ELLPACK matrices (the levels) on
//! node-major blocks, and the grid transfers (uniform grids, or the interpolation matrices
//! of a refined mesh's hierarchy).

use super::checks::{
    check_f64, check_len, check_node_major, check_one_precision, check_per_column, check_stats,
    check_transfer,
};
use super::{Block, CsrMatrix, Data, Device, FlagLog, Stats, Storage};
use crate::error::{Error, Result};
use crate::precision::Precision;
use crate::sparse::{Csr, Ell, EllLayout, SlicedColumns, SparseRows, SLICE};

/// Rows of an ELLPACK matrix cut into chunks of whole slices of [`EllLayout::Sliced`] (one
/// task each on the CPU; its statistics are reduced in chunk order, so the chunks fix the
/// order of every sum).
#[derive(Clone, Debug, PartialEq)]
pub struct Chunks {
    pub rows: usize,
    count: usize,
}

/// Rows of a chunk: enough work per task, a multiple of [`SLICE`].
const CHUNK_ROWS: usize = 2048;
const _: () = assert!(CHUNK_ROWS.is_multiple_of(SLICE));

impl Chunks {
    fn new(nrows: usize) -> Self {
        let rows = CHUNK_ROWS.min(nrows.max(1));
        Chunks {
            rows,
            count: nrows.div_ceil(rows),
        }
    }

    pub fn count(&self) -> usize {
        self.count
    }
}

/// How multigrid levels store their matrices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatrixStorage {
    /// ELLPACK with a 32-bit column index per entry, on every level.
    Indexed,
    /// Levels on a uniform grid without per-entry indices where the device's kernels read
    /// them ([`MultigridKernels::reads_grid_rows`]: CUDA): each row's columns follow from its
    /// grid point, so a pass moves only the values. ELLPACK elsewhere.
    #[default]
    Grid,
}

impl MatrixStorage {
    pub fn name(self) -> &'static str {
        match self {
            MatrixStorage::Indexed => "indexed",
            MatrixStorage::Grid => "grid",
        }
    }
}

impl std::str::FromStr for MatrixStorage {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "indexed" => Ok(MatrixStorage::Indexed),
            "grid" => Ok(MatrixStorage::Grid),
            other => Err(format!("matrix storage {other:?} (allowed: indexed, grid)")),
        }
    }
}

/// A square ELLPACK matrix on the device with its diagonal in slot 0 of every row and on
/// its own, in the layout the backend's kernels read ([`SparseKernels::ell_layout`]).
pub struct EllMatrix<D: Device> {
    pub nrows: usize,
    pub width: usize,
    pub layout: EllLayout,
    /// Slot-major: one column index per entry, empty where `grid` gives the columns.
    /// Sliced: the columns of the slots that are not one run ([`SlicedColumns::listed`]).
    pub col_idx: D::Buffer<u32>,
    /// Sliced: per slice and slot a run's first column or where its columns are listed
    /// ([`SlicedColumns::runs`]); empty in the slot-major layout.
    pub slot_runs: D::Buffer<u32>,
    /// The uniform grid whose points are the rows when the matrix is stored without
    /// indices: slot 0 of a row is its point, then its neighbours inside the grid in
    /// increasing index order ([`GridShape::holds_stencil_of`]).
    pub grid: Option<GridShape>,
    pub values: Data<D>,
    pub diagonal: Data<D>,
    pub chunks: Chunks,
}

impl<D: MultigridKernels> EllMatrix<D> {
    /// `a` (square, each row's diagonal in slot 0, in the layout of
    /// [`SparseKernels::ell_layout`]) in `precision`: values out of the precision's range
    /// are an error naming the entry. Kernels may rely on every column index being a row.
    pub fn upload(dev: &D, ell: &Ell<f64>, precision: Precision) -> Result<Self> {
        Self::upload_with(dev, ell, precision, None)
    }

    /// [`EllMatrix::upload`] with `storage`: without column indices when the storage is
    /// [`MatrixStorage::Grid`], `grid` is given, the device reads grid rows and every row of
    /// `ell` holds exactly its grid point's neighbours (a uniform-grid stencil); else with
    /// them. The values and their order are the same either way.
    pub fn upload_stored(
        dev: &D,
        ell: &Ell<f64>,
        precision: Precision,
        storage: MatrixStorage,
        grid: Option<GridShape>,
    ) -> Result<Self> {
        let grid = grid.filter(|g| {
            storage == MatrixStorage::Grid && dev.reads_grid_rows() && g.holds_stencil_of(ell)
        });
        Self::upload_with(dev, ell, precision, grid)
    }

    fn upload_with(
        dev: &D,
        ell: &Ell<f64>,
        precision: Precision,
        grid: Option<GridShape>,
    ) -> Result<Self> {
        if ell.layout() != dev.ell_layout()
            || ell.ncols() != ell.nrows()
            || ell.col_idx().iter().any(|&c| c as usize >= ell.nrows())
            || (0..ell.nrows())
                .any(|r| ell.width() == 0 || ell.col_idx()[ell.index(0, r)] as usize != r)
        {
            return Err(Error::InvalidInput(format!(
                "{}: the matrix must be square ELLPACK in {:?} layout with the diagonal in slot 0",
                dev.name(),
                dev.ell_layout()
            )));
        }
        let chunks = Chunks::new(ell.nrows());
        let diagonal: Vec<f64> = (0..ell.nrows())
            .map(|r| ell.values()[ell.index(0, r)])
            .collect();
        fn stored<D: Device, S: Storage>(dev: &D, ell: &Ell<f64>) -> Result<(Data<D>, Vec<u32>)> {
            let e = ell.convert::<S>()?;
            Ok((Data::from_stored(dev, e.values())?, e.col_idx().to_vec()))
        }
        let (values, col_idx) = match precision {
            Precision::F16 => stored::<D, half::f16>(dev, ell)?,
            Precision::F32 | Precision::Tf32 => stored::<D, f32>(dev, ell)?,
            Precision::F64 => stored::<D, f64>(dev, ell)?,
        };
        let (col_idx, slot_runs) = match (grid, ell.layout()) {
            (Some(_), _) => (Vec::new(), Vec::new()),
            (None, EllLayout::SlotMajor) => (col_idx, Vec::new()),
            (None, EllLayout::Sliced) => {
                let SlicedColumns { runs, listed } = ell.sliced_columns()?;
                (listed, runs)
            }
        };
        Ok(EllMatrix {
            nrows: ell.nrows(),
            width: ell.width(),
            layout: ell.layout(),
            col_idx: dev.upload(&col_idx)?,
            slot_runs: dev.upload(&slot_runs)?,
            grid,
            values,
            diagonal: Data::from_f64(dev, &diagonal, precision)?,
            chunks,
        })
    }

    pub fn precision(&self) -> Precision {
        self.values.precision()
    }

    /// Bytes one pass reads: values and the 32-bit column indices stored (none where the
    /// grid gives them; sliced: one per slot run and one per listed column).
    pub fn bytes(&self) -> f64 {
        let indices = D::buffer_len(&self.col_idx) + D::buffer_len(&self.slot_runs);
        (self.values.len() * self.precision().bytes() + 4 * indices) as f64
    }

    /// Bytes the diagonal takes.
    pub fn diagonal_bytes(&self) -> f64 {
        self.diagonal.bytes() as f64
    }
}

/// What a sweep computes from a row's `A x`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RowOp {
    /// out = x + ω D⁻¹ (b − A x): one damped Jacobi (Richardson) step.
    Jacobi { omega: f64 },
    /// out = x + μ (x − x_prev) + ω D⁻¹ (b − A x): one step of the Chebyshev
    /// semi-iteration (docs/mathematics.md §4). x_prev, the iterate before x, is what
    /// `out` holds on entry (each row reads its own entry before writing it), or zero when
    /// `previous_zero` (the smoothing started from x = 0 one step before).
    Chebyshev {
        omega: f64,
        momentum: f64,
        previous_zero: bool,
    },
    /// out = b − A x.
    Residual,
    /// out = A x (b unused).
    Apply,
    /// out = ω A x (b unused): the first step from zero of a smoother whose preconditioner
    /// M is the matrix A of the pass, x the right-hand side.
    Scaled { omega: f64 },
    /// out = b + μ (b − b_prev) + ω A x: a step of a smoother whose preconditioner M is the
    /// matrix A of the pass, x the residual of the iterate b. b_prev, the iterate before b,
    /// is what `out` holds on entry, or zero when `previous_zero`.
    Correction {
        omega: f64,
        momentum: f64,
        previous_zero: bool,
    },
}

impl RowOp {
    /// Whether the op reads b.
    pub fn reads_b(self) -> bool {
        !matches!(self, RowOp::Apply | RowOp::Scaled { .. })
    }

    /// Whether the op divides by the row's diagonal (the point smoothing steps).
    pub fn by_diagonal(self) -> bool {
        matches!(self, RowOp::Jacobi { .. } | RowOp::Chebyshev { .. })
    }
}

/// A uniform grid of interior points of the unit square (dim 2) or cube (dim 3): `m` per
/// direction, lexicographic with x fastest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridShape {
    pub dim: usize,
    pub m: usize,
}

impl GridShape {
    pub fn points(&self) -> usize {
        self.m.pow(self.dim as u32)
    }

    /// Points in one plane of the slowest direction (a line in 2D).
    pub fn plane(&self) -> usize {
        self.m.pow(self.dim as u32 - 1)
    }

    /// Point p itself, then its neighbours inside the grid (offsets −1, 0, 1 per
    /// direction) in increasing index order: the columns of p's row in a grid stencil.
    pub fn stencil(&self, p: usize) -> Vec<usize> {
        let mut columns = Vec::new();
        self.stencil_into(p, &mut columns);
        columns
    }

    /// [`GridShape::stencil`] into `columns` (cleared first).
    fn stencil_into(&self, p: usize, columns: &mut Vec<usize>) {
        let m = self.m as isize;
        let (i, j, k) = (p % self.m, (p / self.m) % self.m, p / self.plane().max(1));
        let coordinates = [
            i as isize,
            j as isize,
            if self.dim == 3 { k as isize } else { 0 },
        ];
        columns.clear();
        columns.push(p);
        let offsets = 3usize.pow(self.dim as u32);
        for t in 0..offsets {
            let d = [
                t as isize % 3 - 1,
                (t as isize / 3) % 3 - 1,
                t as isize / 9 - 1,
            ];
            let d = if self.dim == 3 { d } else { [d[0], d[1], 0] };
            let inside = (0..self.dim).all(|a| (0..m).contains(&(coordinates[a] + d[a])));
            if d != [0, 0, 0] && inside {
                columns.push((p as isize + d[0] + d[1] * m + d[2] * m * m) as usize);
            }
        }
    }

    /// Whether every row of `ell` holds exactly the columns of [`GridShape::stencil`] in
    /// that order, then only padding (value 0): what the index-free kernels assume.
    pub fn holds_stencil_of(&self, ell: &Ell<f64>) -> bool {
        let mut columns = Vec::with_capacity(27);
        ell.nrows() == self.points()
            && (0..ell.nrows()).all(|r| {
                self.stencil_into(r, &mut columns);
                columns.len() <= ell.width()
                    && (0..ell.width()).all(|s| {
                        let k = ell.index(s, r);
                        match columns.get(s) {
                            Some(&c) => ell.col_idx()[k] as usize == c,
                            None => ell.values()[k] == 0.0,
                        }
                    })
            })
    }

    /// The grid one uniform coarsening down (m = 2·m_c + 1).
    pub fn coarse(&self) -> GridShape {
        GridShape {
            dim: self.dim,
            m: (self.m - 1) / 2,
        }
    }
}

/// How a multigrid level passes residuals down to the next coarser level and corrections
/// back up.
pub enum LevelTransfer<D: Device> {
    /// Bilinear (trilinear) interpolation between uniform grids of the unit square (cube).
    Grid { fine: GridShape, coarse: GridShape },
    /// Interpolation from a refinement hierarchy: the prolongation P (fine × coarse
    /// unknowns, the mean of a new node's parents) and the restriction R = Pᵀ, f64 weights.
    Matrix {
        prolongation: CsrMatrix<D>,
        restriction: CsrMatrix<D>,
    },
}

impl<D: Device> LevelTransfer<D> {
    /// The interpolation matrix P and its transpose on the device.
    pub fn matrix(dev: &D, prolongation: &Csr<f64>) -> Result<Self> {
        Ok(LevelTransfer::Matrix {
            prolongation: CsrMatrix::upload(dev, prolongation)?,
            restriction: CsrMatrix::upload(dev, &prolongation.transpose())?,
        })
    }

    /// Unknowns of the fine and the coarse level.
    pub fn sizes(&self) -> (usize, usize) {
        match self {
            LevelTransfer::Grid { fine, coarse } => (fine.points(), coarse.points()),
            LevelTransfer::Matrix { prolongation, .. } => (prolongation.nrows, prolongation.ncols),
        }
    }

    /// Flops of one restriction or prolongation of one column.
    pub fn flops_per_column(&self) -> f64 {
        match self {
            LevelTransfer::Grid { fine, coarse } => {
                2.0 * 3f64.powi(fine.dim as i32) * coarse.points() as f64
            }
            LevelTransfer::Matrix { prolongation, .. } => 2.0 * prolongation.nnz() as f64,
        }
    }

    /// Bytes the transfer's own data take per pass (the matrix; nothing for grids).
    pub fn bytes(&self) -> f64 {
        match self {
            LevelTransfer::Grid { .. } => 0.0,
            LevelTransfer::Matrix { prolongation, .. } => prolongation.bytes() as f64,
        }
    }
}

/// ELLPACK sweeps and grid transfers of geometric multigrid, with the statistics of
/// what each kernel writes. The methods a solver calls check their arguments
/// (device/checks.rs) and hand them to the backend's `*_unchecked` kernel.
pub trait MultigridKernels: Device {
    /// The ELLPACK layout this backend's kernels read.
    fn ell_layout(&self) -> EllLayout;

    /// Whether the kernels read matrices stored without indices on a uniform grid
    /// ([`EllMatrix::grid`]).
    fn reads_grid_rows(&self) -> bool {
        false
    }

    /// One pass over A applying `op` to the node-major blocks x (and b), written to `out`
    /// (read first by [`RowOp::Chebyshev`] and [`RowOp::Correction`]); all in A's precision.
    fn ell_sweep(
        &self,
        a: &EllMatrix<Self>,
        op: RowOp,
        x: &Block<Self>,
        b: Option<&Block<Self>>,
        out: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let nrhs = x.cols();
        check_node_major("ell_sweep x", x, a.nrows, nrhs)?;
        check_node_major("ell_sweep out", out, a.nrows, nrhs)?;
        match b {
            Some(b) => check_node_major("ell_sweep b", b, a.nrows, nrhs)?,
            None if op.reads_b() => {
                return Err(Error::Backend("ell_sweep: this operation needs b".into()))
            }
            None => {}
        }
        check_stats("ell_sweep", stats, nrhs)?;
        let p = a.precision();
        let b_precision = b.map_or(p, |b| b.precision());
        check_one_precision(
            "ell_sweep",
            &[p, x.precision(), out.precision(), b_precision],
        )?;
        self.ell_sweep_unchecked(a, op, x, b, out, stats)
    }

    /// The first damped Jacobi step from x = 0: out = ω D⁻¹ b (reads the diagonal only).
    fn ell_jacobi_from_zero(
        &self,
        a: &EllMatrix<Self>,
        omega: f64,
        b: &Block<Self>,
        out: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let nrhs = b.cols();
        check_node_major("ell_jacobi_from_zero b", b, a.nrows, nrhs)?;
        check_node_major("ell_jacobi_from_zero out", out, a.nrows, nrhs)?;
        check_stats("ell_jacobi_from_zero", stats, nrhs)?;
        check_one_precision(
            "ell_jacobi_from_zero",
            &[a.precision(), b.precision(), out.precision()],
        )?;
        self.ell_jacobi_from_zero_unchecked(a, omega, b, out, stats)
    }

    /// [`SparseKernels::csr_refine_update`] for an f64 ELLPACK A on node-major blocks.
    fn ell_refine_update(
        &self,
        a: &EllMatrix<Self>,
        c: &Block<Self>,
        alpha: &[f64],
        x: &mut Block<Self>,
        r: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let nrhs = c.cols();
        check_node_major("ell_refine_update c", c, a.nrows, nrhs)?;
        check_node_major("ell_refine_update x", x, a.nrows, nrhs)?;
        check_node_major("ell_refine_update r", r, a.nrows, nrhs)?;
        check_stats("ell_refine_update", stats, nrhs)?;
        check_per_column("ell_refine_update", alpha, nrhs)?;
        check_f64(
            "ell_refine_update",
            &[a.precision(), x.precision(), r.precision()],
        )?;
        self.ell_refine_update_unchecked(a, c, alpha, x, r, stats)
    }

    /// coarse = Pᵀ fine / s_c per column (a zero scale gives a zero column); node-major
    /// blocks, the precisions may differ.
    fn restrict(
        &self,
        transfer: &LevelTransfer<Self>,
        fine: &Block<Self>,
        coarse: &mut Block<Self>,
        scale: &[f64],
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        check_transfer(Direction::Restrict, transfer, fine, coarse, scale, stats)?;
        self.restrict_unchecked(transfer, fine, coarse, scale, stats)
    }

    /// Appends two values to `log`: 1 + the first column that `fine`'s statistics call
    /// active (largest magnitude above zero) and whose largest magnitude in `coarse` is
    /// below `half_tiny` (its restriction flushed to zero), or 0; then that magnitude (or 0).
    /// Both statistics are still where their kernels left them (no host read on a GPU).
    fn log_flushed_column(
        &self,
        fine: &Stats<Self>,
        coarse: &Stats<Self>,
        half_tiny: f64,
        log: &mut FlagLog<Self>,
    ) -> Result<()> {
        check_len("log_flushed_column statistics", fine.nrhs(), coarse.nrhs())?;
        self.log_flushed_column_unchecked(fine, coarse, half_tiny, log)
    }

    /// fine += s_c · P coarse per column.
    fn prolongate_add(
        &self,
        transfer: &LevelTransfer<Self>,
        coarse: &Block<Self>,
        fine: &mut Block<Self>,
        scale: &[f64],
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        check_transfer(
            Direction::ProlongateAdd,
            transfer,
            coarse,
            fine,
            scale,
            stats,
        )?;
        self.prolongate_add_unchecked(transfer, coarse, fine, scale, stats)
    }

    // The backend's kernels behind the checked methods above, given checked arguments.

    /// [`MultigridKernels::ell_sweep`] on checked arguments.
    fn ell_sweep_unchecked(
        &self,
        a: &EllMatrix<Self>,
        op: RowOp,
        x: &Block<Self>,
        b: Option<&Block<Self>>,
        out: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()>;

    /// [`MultigridKernels::ell_jacobi_from_zero`] on checked arguments.
    fn ell_jacobi_from_zero_unchecked(
        &self,
        a: &EllMatrix<Self>,
        omega: f64,
        b: &Block<Self>,
        out: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()>;

    /// [`MultigridKernels::ell_refine_update`] on checked arguments.
    fn ell_refine_update_unchecked(
        &self,
        a: &EllMatrix<Self>,
        c: &Block<Self>,
        alpha: &[f64],
        x: &mut Block<Self>,
        r: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()>;

    /// [`MultigridKernels::restrict`] on checked arguments.
    fn restrict_unchecked(
        &self,
        transfer: &LevelTransfer<Self>,
        fine: &Block<Self>,
        coarse: &mut Block<Self>,
        scale: &[f64],
        stats: &mut Stats<Self>,
    ) -> Result<()>;

    /// [`MultigridKernels::log_flushed_column`] on checked arguments.
    fn log_flushed_column_unchecked(
        &self,
        fine: &Stats<Self>,
        coarse: &Stats<Self>,
        half_tiny: f64,
        log: &mut FlagLog<Self>,
    ) -> Result<()>;

    /// [`MultigridKernels::prolongate_add`] on checked arguments.
    fn prolongate_add_unchecked(
        &self,
        transfer: &LevelTransfer<Self>,
        coarse: &Block<Self>,
        fine: &mut Block<Self>,
        scale: &[f64],
        stats: &mut Stats<Self>,
    ) -> Result<()>;
}

/// Which way a transfer goes: coarse = Pᵀ fine / s_c, or fine += s_c · P coarse (each
/// backend's restriction and prolongation are one kernel in two directions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Restrict,
    ProlongateAdd,
}

impl Direction {
    /// The kernel family's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Restrict => "restrict",
            Direction::ProlongateAdd => "prolongate_add",
        }
    }

    /// The factor column c's product is multiplied by: 1/s_c (a zero scale, an inactive
    /// column, gives zero) or s_c.
    pub fn factor(self, scale: f64) -> f64 {
        match self {
            Direction::Restrict => super::inverse_scale(scale),
            Direction::ProlongateAdd => scale,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::{Csr, LISTED};

    #[test]
    fn grid_stencils_list_a_point_and_its_neighbours_in_index_order() {
        let square = GridShape { dim: 2, m: 4 };
        assert_eq!(square.stencil(0), [0, 1, 4, 5]);
        assert_eq!(square.stencil(5), [5, 0, 1, 2, 4, 6, 8, 9, 10]);
        assert_eq!(square.stencil(15), [15, 10, 11, 14]);
        let cube = GridShape { dim: 3, m: 3 };
        assert_eq!(cube.stencil(13).len(), 27);
        assert_eq!(cube.stencil(0), [0, 1, 3, 4, 9, 10, 12, 13]);
        let inner = cube.stencil(13);
        assert!(inner[1..].windows(2).all(|w| w[0] < w[1]));
    }

    /// The matrix whose rows hold `grid`'s stencils (columns in increasing order), without
    /// the entries `drop(row, column)` names.
    fn stencil_matrix(grid: GridShape, drop: impl Fn(usize, usize) -> bool) -> Csr<f64> {
        let (mut row_ptr, mut cols, mut values) = (vec![0], Vec::new(), Vec::new());
        for r in 0..grid.points() {
            let mut row = grid.stencil(r);
            row.sort_unstable();
            for c in row.into_iter().filter(|&c| !drop(r, c)) {
                cols.push(c as u32);
                values.push(if c == r { 8.0 } else { -1.0 });
            }
            row_ptr.push(cols.len());
        }
        Csr::new(grid.points(), grid.points(), row_ptr, cols, values).unwrap()
    }

    /// A stencil matrix qualifies for index-free rows in the slot-major layout (CUDA's; the
    /// CPU's sliced layout puts entries in the slots of their offsets and keeps its
    /// indices); a row missing a neighbour, or a grid of another size, does not. (That the
    /// assembled levels hold their stencils, the 3D exact zeros included, is checked in
    /// tests/mg.rs.)
    #[test]
    fn only_matrices_holding_their_stencils_drop_the_indices() {
        for grid in [GridShape { dim: 2, m: 7 }, GridShape { dim: 3, m: 5 }] {
            let full = stencil_matrix(grid, |_, _| false);
            let holed = stencil_matrix(grid, |r, c| r == 0 && c == 1);
            let layout = EllLayout::SlotMajor;
            let ell = Ell::from_csr_diagonal_first(&full, layout).unwrap();
            assert!(grid.holds_stencil_of(&ell), "{grid:?}");
            let smaller = GridShape {
                dim: grid.dim,
                m: grid.m - 2,
            };
            assert!(!smaller.holds_stencil_of(&ell));
            let ell = Ell::from_csr_diagonal_first(&holed, layout).unwrap();
            assert!(!grid.holds_stencil_of(&ell), "{grid:?}");
        }
    }

    #[test]
    fn storage_names_parse() {
        assert_eq!("grid".parse(), Ok(MatrixStorage::Grid));
        assert_eq!("indexed".parse(), Ok(MatrixStorage::Indexed));
        assert_eq!(MatrixStorage::default(), MatrixStorage::Grid);
        let err = "csr".parse::<MatrixStorage>().unwrap_err();
        assert!(err.contains("indexed, grid"), "{err}");
    }

    /// The CPU reads indexed matrices only: grid storage falls back to the indices there,
    /// as slot runs ([`SlicedColumns`]), counted in the bytes a pass reads.
    #[test]
    fn the_cpu_keeps_the_indices() {
        let dev = crate::device::Cpu::new();
        let grid = GridShape { dim: 2, m: 7 };
        let ell =
            Ell::from_csr_diagonal_first(&stencil_matrix(grid, |_, _| false), dev.ell_layout())
                .unwrap();
        let m =
            EllMatrix::upload_stored(&dev, &ell, Precision::F32, MatrixStorage::Grid, Some(grid))
                .unwrap();
        let SlicedColumns { runs, listed } = ell.sliced_columns().unwrap();
        assert!(m.grid.is_none());
        assert_eq!(m.slot_runs.len(), ell.values().len() / SLICE);
        assert_eq!(&m.slot_runs[..], &runs[..]);
        assert_eq!(&m.col_idx[..], &listed[..]);
        // Slot 0 (the diagonal) of each whole slice is a run.
        assert!(runs[..3 * 9]
            .iter()
            .step_by(9)
            .all(|&run| run & LISTED == 0));
        let indices = runs.len() + listed.len();
        assert_eq!(m.bytes(), (ell.values().len() * 4 + indices * 4) as f64);
    }
}
