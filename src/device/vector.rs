//! Level-1 kernels on vectors and blocks ([`VectorKernels`]) and the scratch of the
//! reductions.

use super::{cg, Block, Device, FlagLog, Stats, View, ViewMut};
use crate::error::Result;

/// Scratch of a kernel that reduces (partial sums), owned by its caller and grown by the
/// backend on first use, so the apply that follows allocates nothing.
pub struct Scratch<D: Device>(pub D::Buffer<f64>);

impl<D: Device> Scratch<D> {
    pub fn new(dev: &D) -> Result<Self> {
        Ok(Scratch(dev.zeros(0)?))
    }
}

/// Level-1 operations on vectors and blocks.
pub trait VectorKernels: Device {
    /// x = value.
    fn fill(&self, x: ViewMut<'_, Self>, value: f64) -> Result<()>;
    /// dst = src; the precisions may differ (rounded to nearest).
    fn copy(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()>;
    /// y = α x + β y (one precision; arithmetic in its compute precision).
    fn axpby(&self, alpha: f64, x: View<'_, Self>, beta: f64, y: ViewMut<'_, Self>) -> Result<()>;
    /// x = α x.
    fn scale(&self, alpha: f64, x: ViewMut<'_, Self>) -> Result<()>;
    /// y = α d ∘ x (one precision; y is only written).
    fn scaled_product(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// y += α d ∘ (x − z) (one precision): a damped Jacobi update with diagonal inverse d.
    fn scaled_product_add(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        z: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// x · y in f64 (one precision).
    fn dot(&self, x: View<'_, Self>, y: View<'_, Self>) -> Result<f64>;
    /// ‖x‖₂ in f64, NaN when x holds a NaN.
    fn nrm2(&self, x: View<'_, Self>) -> Result<f64>;
    /// Σ x in f64.
    fn sum(&self, x: View<'_, Self>) -> Result<f64>;
    /// x += value.
    fn shift(&self, x: ViewMut<'_, Self>, value: f64) -> Result<()>;
    /// dst = src in dst's layout and precision (column-major ↔ node-major, rounded).
    fn relayout(&self, src: &Block<Self>, dst: &mut Block<Self>) -> Result<()>;
    /// The per-column statistics of `x`.
    fn column_stats(&self, x: &Block<Self>, stats: &mut Stats<Self>) -> Result<()>;
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
    ) -> Result<()>;
    /// y_c = α_c x_c + β_c y_c for every column (one precision; arithmetic in its compute
    /// precision).
    fn column_axpby(
        &self,
        alpha: &[f64],
        x: &Block<Self>,
        beta: &[f64],
        y: &mut Block<Self>,
    ) -> Result<()>;
    /// [`VectorKernels::column_dots`] into `out[at..at + cols]`, left on the device.
    fn column_dots_to(
        &self,
        x: &Block<Self>,
        y: &Block<Self>,
        out: &mut Self::Buffer<f64>,
        at: usize,
        scratch: &mut Scratch<Self>,
    ) -> Result<()>;
    /// [`VectorKernels::column_axpby`] with α and β read on the device from
    /// `coefficients[alpha..alpha + cols]` and `coefficients[beta..beta + cols]`.
    fn column_axpby_from(
        &self,
        coefficients: &Self::Buffer<f64>,
        alpha: usize,
        x: &Block<Self>,
        beta: usize,
        y: &mut Block<Self>,
    ) -> Result<()>;
    /// One step of block CG's scalar logic on the device buffer `scalars` of `cols`
    /// columns (layout and logic: [`cg`]).
    fn cg_scalars(
        &self,
        step: cg::CgStep,
        scalars: &mut Self::Buffer<f64>,
        cols: usize,
    ) -> Result<()>;
    /// dst_c = src_c / s_c (s_c = `scale[c]`; zero gives a zero column), rounded to dst's
    /// precision, with the statistics of what was stored (before rounding).
    fn scale_columns(
        &self,
        src: &Block<Self>,
        scale: &[f64],
        dst: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()>;
}
