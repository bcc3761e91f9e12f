//! Level-1 kernels on vectors and blocks ([`VectorKernels`]) and the scratch of the
//! reductions.

use super::checks::{check_block_pair, check_len, check_one_precision, check_room};
use super::{cg, Block, Device, FlagLog, Stats, View, ViewMut};
use crate::error::Error;
use crate::error::Result;

/// Scratch of a kernel that reduces (partial sums), owned by its caller and grown by the
/// backend on first use, so the apply that follows allocates nothing.
pub struct Scratch<D: Device>(pub D::Buffer<f64>);

impl<D: Device> Scratch<D> {
    pub fn new(dev: &D) -> Result<Self> {
        Ok(Scratch(dev.zeros(0)?))
    }
}

/// 1/s per column; a zero scale (an inactive column) gives zero.
pub(crate) fn inverse_scale(s: f64) -> f64 {
    if s > 0.0 {
        1.0 / s
    } else {
        0.0
    }
}

/// Level-1 operations on vectors and blocks. The methods a solver calls check their
/// arguments (device/checks.rs) and hand them to the backend's `*_unchecked` kernel.
pub trait VectorKernels: Device {
    /// x = value.
    fn fill(&self, x: ViewMut<'_, Self>, value: f64) -> Result<()>;
    /// dst = src; the precisions may differ (rounded to nearest).
    fn copy(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()> {
        check_len("copy", src.len, dst.len)?;
        self.copy_unchecked(src, dst)
    }
    /// y = α x + β y (one precision; arithmetic in its compute precision).
    fn axpby(&self, alpha: f64, x: View<'_, Self>, beta: f64, y: ViewMut<'_, Self>) -> Result<()> {
        check_len("axpby", x.len, y.len)?;
        check_one_precision("axpby", &[x.precision(), y.precision()])?;
        self.axpby_unchecked(alpha, x, beta, y)
    }
    /// x = α x.
    fn scale(&self, alpha: f64, x: ViewMut<'_, Self>) -> Result<()>;
    /// y = α d ∘ x (one precision; y is only written).
    fn scaled_product(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        check_len("scaled_product", d.len, x.len)?;
        check_len("scaled_product", x.len, y.len)?;
        check_one_precision(
            "scaled_product",
            &[d.precision(), x.precision(), y.precision()],
        )?;
        self.scaled_product_unchecked(alpha, d, x, y)
    }
    /// y += α d ∘ (x − z) (one precision): a damped Jacobi update with diagonal inverse d.
    fn scaled_product_add(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        z: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        check_len("scaled_product_add", d.len, x.len)?;
        check_len("scaled_product_add", x.len, z.len)?;
        check_len("scaled_product_add", x.len, y.len)?;
        check_one_precision(
            "scaled_product_add",
            &[d.precision(), x.precision(), z.precision(), y.precision()],
        )?;
        self.scaled_product_add_unchecked(alpha, d, x, z, y)
    }
    /// x · y in f64 (one precision).
    fn dot(&self, x: View<'_, Self>, y: View<'_, Self>) -> Result<f64> {
        check_len("dot", x.len, y.len)?;
        check_one_precision("dot", &[x.precision(), y.precision()])?;
        self.dot_unchecked(x, y)
    }
    /// ‖x‖₂ in f64, NaN when x holds a NaN.
    fn nrm2(&self, x: View<'_, Self>) -> Result<f64>;
    /// Σ x in f64.
    fn sum(&self, x: View<'_, Self>) -> Result<f64>;
    /// x += value.
    fn shift(&self, x: ViewMut<'_, Self>, value: f64) -> Result<()>;
    /// dst = src in dst's layout and precision (column-major ↔ node-major, rounded).
    fn relayout(&self, src: &Block<Self>, dst: &mut Block<Self>) -> Result<()> {
        check_len("relayout", src.len(), dst.len())?;
        let (rows, cols, layout) = (src.rows(), src.cols(), src.layout());
        if (dst.rows(), dst.cols()) != (rows, cols) || dst.layout() == layout {
            return Err(Error::Backend(format!(
                "relayout from a {rows}×{cols} {layout:?} block to a {}×{} {:?} block",
                dst.rows(),
                dst.cols(),
                dst.layout()
            )));
        }
        self.relayout_unchecked(src, dst)
    }
    /// The per-column statistics of `x`.
    fn column_stats(&self, x: &Block<Self>, stats: &mut Stats<Self>) -> Result<()> {
        check_len("column_stats", x.cols(), stats.nrhs())?;
        self.column_stats_unchecked(x, stats)
    }
    /// Appends the range flag of the kernel that last recorded into `stats` to `log`
    /// (without a host read where the statistics are still on the device); the log must
    /// have room ([`FlagLog::reserve`]).
    fn log_range_flag(&self, stats: &Stats<Self>, log: &mut FlagLog<Self>) -> Result<()>;
    /// out_c = x_c · y_c in f64 for every column (x and y in one precision).
    fn column_dots(
        &self,
        x: &Block<Self>,
        y: &Block<Self>,
        out: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<()> {
        check_block_pair("column_dots", x, y)?;
        check_len("column_dots", x.cols(), out.len())?;
        self.column_dots_unchecked(x, y, out, scratch)
    }
    /// y_c = α_c x_c + β_c y_c for every column (one precision; arithmetic in its compute
    /// precision).
    fn column_axpby(
        &self,
        alpha: &[f64],
        x: &Block<Self>,
        beta: &[f64],
        y: &mut Block<Self>,
    ) -> Result<()> {
        check_block_pair("column_axpby", x, y)?;
        check_len("column_axpby", x.cols(), alpha.len())?;
        check_len("column_axpby", x.cols(), beta.len())?;
        self.column_axpby_unchecked(alpha, x, beta, y)
    }
    /// [`VectorKernels::column_dots`] into `out[at..at + cols]`, left on the device.
    fn column_dots_to(
        &self,
        x: &Block<Self>,
        y: &Block<Self>,
        out: &mut Self::Buffer<f64>,
        at: usize,
        scratch: &mut Scratch<Self>,
    ) -> Result<()> {
        check_block_pair("column_dots_to", x, y)?;
        check_room("column_dots_to", Self::buffer_len(out), at + x.cols())?;
        self.column_dots_to_unchecked(x, y, out, at, scratch)
    }
    /// [`VectorKernels::column_axpby`] with α and β read on the device from
    /// `coefficients[alpha..alpha + cols]` and `coefficients[beta..beta + cols]`.
    fn column_axpby_from(
        &self,
        coefficients: &Self::Buffer<f64>,
        alpha: usize,
        x: &Block<Self>,
        beta: usize,
        y: &mut Block<Self>,
    ) -> Result<()> {
        check_block_pair("column_axpby_from", x, y)?;
        check_room(
            "column_axpby_from",
            Self::buffer_len(coefficients),
            alpha.max(beta) + x.cols(),
        )?;
        self.column_axpby_from_unchecked(coefficients, alpha, x, beta, y)
    }
    /// One step of block CG's scalar logic on the device buffer `scalars` of `cols`
    /// columns (layout and logic: [`cg`]).
    fn cg_scalars(
        &self,
        step: cg::CgStep,
        scalars: &mut Self::Buffer<f64>,
        cols: usize,
    ) -> Result<()> {
        check_len(
            "cg_scalars",
            Self::buffer_len(scalars),
            cg::buffer_len(cols),
        )?;
        self.cg_scalars_unchecked(step, scalars, cols)
    }
    /// dst_c = src_c / s_c (s_c = `scale[c]`; zero gives a zero column), rounded to dst's
    /// precision, with the statistics of what was stored (before rounding).
    fn scale_columns(
        &self,
        src: &Block<Self>,
        scale: &[f64],
        dst: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        check_len("scale_columns", src.len(), dst.len())?;
        check_len("scale_columns", src.cols(), scale.len())?;
        check_len("scale_columns", stats.nrhs(), scale.len())?;
        if src.layout() != dst.layout() {
            return Err(Error::Backend("scale_columns: layouts differ".into()));
        }
        self.scale_columns_unchecked(src, scale, dst, stats)
    }

    // The backend's kernels behind the checked methods above, given checked arguments.

    /// [`VectorKernels::copy`] on checked arguments.
    fn copy_unchecked(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()>;
    /// [`VectorKernels::axpby`] on checked arguments.
    fn axpby_unchecked(
        &self,
        alpha: f64,
        x: View<'_, Self>,
        beta: f64,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// [`VectorKernels::scaled_product`] on checked arguments.
    fn scaled_product_unchecked(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// [`VectorKernels::scaled_product_add`] on checked arguments.
    fn scaled_product_add_unchecked(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        z: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// [`VectorKernels::dot`] on checked arguments.
    fn dot_unchecked(&self, x: View<'_, Self>, y: View<'_, Self>) -> Result<f64>;
    /// [`VectorKernels::relayout`] on checked arguments.
    fn relayout_unchecked(&self, src: &Block<Self>, dst: &mut Block<Self>) -> Result<()>;
    /// [`VectorKernels::column_stats`] on checked arguments.
    fn column_stats_unchecked(&self, x: &Block<Self>, stats: &mut Stats<Self>) -> Result<()>;
    /// [`VectorKernels::column_dots`] on checked arguments.
    fn column_dots_unchecked(
        &self,
        x: &Block<Self>,
        y: &Block<Self>,
        out: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<()>;
    /// [`VectorKernels::column_axpby`] on checked arguments.
    fn column_axpby_unchecked(
        &self,
        alpha: &[f64],
        x: &Block<Self>,
        beta: &[f64],
        y: &mut Block<Self>,
    ) -> Result<()>;
    /// [`VectorKernels::column_dots_to`] on checked arguments.
    fn column_dots_to_unchecked(
        &self,
        x: &Block<Self>,
        y: &Block<Self>,
        out: &mut Self::Buffer<f64>,
        at: usize,
        scratch: &mut Scratch<Self>,
    ) -> Result<()>;
    /// [`VectorKernels::column_axpby_from`] on checked arguments.
    fn column_axpby_from_unchecked(
        &self,
        coefficients: &Self::Buffer<f64>,
        alpha: usize,
        x: &Block<Self>,
        beta: usize,
        y: &mut Block<Self>,
    ) -> Result<()>;
    /// [`VectorKernels::cg_scalars`] on checked arguments.
    fn cg_scalars_unchecked(
        &self,
        step: cg::CgStep,
        scalars: &mut Self::Buffer<f64>,
        cols: usize,
    ) -> Result<()>;
    /// [`VectorKernels::scale_columns`] on checked arguments.
    fn scale_columns_unchecked(
        &self,
        src: &Block<Self>,
        scale: &[f64],
        dst: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()>;
}
