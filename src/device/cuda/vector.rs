//! VectorKernels on CUDA (kernels/vector.cu): element-wise kernels, and reductions that
//! write per-chunk partials and add them up in a second one-block kernel, in order.

use cudarc::driver::{CudaSlice, LaunchConfig};

use super::device::{driver, grow, Cuda};
use super::launch::{self, Arg, REDUCE_CHUNK};
use crate::device::cg::CgStep;
use crate::device::{
    kernel_name, unsupported, Block, Device, FlagLog, Layout, Scratch, Stats, VectorKernels, View,
    ViewMut,
};
use crate::error::Result;
use crate::precision::Precision;

/// A device address as a raw value (for copies).
pub(super) fn address(arg: Arg) -> u64 {
    match arg {
        Arg::Ptr(p) => p,
        other => unreachable!("not an address: {other:?}"),
    }
}

fn node_major(layout: Layout) -> u32 {
    u32::from(layout == Layout::NodeMajor)
}

impl Cuda {
    /// The statistics of a `rows × cols` block at `x` (in `precision`, values checked
    /// against its range) reduced into `stats` on the device.
    pub(super) fn record_stats(
        &self,
        x: Arg,
        precision: Precision,
        rows: usize,
        cols: usize,
        layout: Layout,
        stats: &mut Stats<Cuda>,
    ) -> Result<()> {
        let (k, chunks) = (cols as u32, launch::chunks(rows as u64));
        let triples = self.stats_triples(stats, cols, chunks)?;
        self.launch(
            &kernel_name("column_stats", &[precision]),
            launch::per_chunk_and_group(rows as u64, k, layout == Layout::NodeMajor),
            &[
                x,
                Arg::U64(rows as u64),
                Arg::U32(k),
                Arg::U32(node_major(layout)),
                Arg::U64(REDUCE_CHUNK),
                Arg::U32(chunks),
                Arg::F64(precision.max()),
                triples,
            ],
        )?;
        self.reduce_stats(triples, triples, cols, chunks, stats)
    }

    /// Where a kernel writes the (Σ v², max |v|, flag) triples of `chunks` chunks per column
    /// of `cols` columns: behind the reduced values at the front of `stats.partials`
    /// (grown on first use).
    pub(super) fn stats_triples(
        &self,
        stats: &mut Stats<Cuda>,
        cols: usize,
        chunks: u32,
    ) -> Result<Arg> {
        let front = Stats::<Cuda>::len_for(cols);
        grow(
            self,
            &mut stats.partials,
            front + 3 * cols * chunks as usize,
        )?;
        Ok(self.ptr(&stats.partials, front))
    }

    /// Adds chunk triples into the front of `stats.partials` (Σ v² from `sums`, maxima
    /// from `maxima`), leaving them on the device.
    pub(super) fn reduce_stats(
        &self,
        sums: Arg,
        maxima: Arg,
        cols: usize,
        chunks: u32,
        stats: &mut Stats<Cuda>,
    ) -> Result<()> {
        let out = self.ptr(&stats.partials, 0);
        self.launch(
            "stats_reduce",
            launch::single_block(),
            &[sums, maxima, Arg::U32(cols as u32), Arg::U32(chunks), out],
        )?;
        stats.on_device = true;
        Ok(())
    }

    /// Per-column sums x_c · y_c into `out` (host), through `scratch`.
    #[allow(clippy::too_many_arguments)]
    fn dots(
        &self,
        x: Arg,
        y: Arg,
        precision: Precision,
        rows: usize,
        layout: Layout,
        out: &mut [f64],
        scratch: &mut CudaSlice<f64>,
    ) -> Result<()> {
        // The sums first, then the partials: grown to both before taking an address
        // (growing replaces the buffer).
        let cols = out.len();
        grow(
            self,
            scratch,
            cols + cols * launch::chunks(rows as u64) as usize,
        )?;
        let sums = self.ptr(scratch, 0);
        self.dots_into(x, y, precision, rows, layout, cols, scratch, cols, sums)?;
        self.read(scratch, 0, out)
    }

    /// The per-column dots of x and y written to the device address `sums` (`cols`
    /// values), the chunk partials in `scratch` from `from` on (`sums` must not point into
    /// `scratch` unless it already holds them: growing replaces it).
    #[allow(clippy::too_many_arguments)]
    fn dots_into(
        &self,
        x: Arg,
        y: Arg,
        precision: Precision,
        rows: usize,
        layout: Layout,
        cols: usize,
        scratch: &mut CudaSlice<f64>,
        from: usize,
        sums: Arg,
    ) -> Result<()> {
        let chunks = launch::chunks(rows as u64);
        grow(self, scratch, from + cols * chunks as usize)?;
        let part = self.ptr(scratch, from);
        self.launch(
            &kernel_name("column_dots", &[precision]),
            launch::per_chunk_and_group(rows as u64, cols as u32, layout == Layout::NodeMajor),
            &[
                x,
                y,
                Arg::U64(rows as u64),
                Arg::U32(cols as u32),
                Arg::U32(node_major(layout)),
                Arg::U64(REDUCE_CHUNK),
                Arg::U32(chunks),
                part,
            ],
        )?;
        self.launch(
            "sums_reduce",
            launch::single_block(),
            &[part, Arg::U32(cols as u32), Arg::U32(chunks), sums],
        )
    }

    /// x · y of two views of one length and precision, f32 or f64 (the CPU backend's
    /// precisions for dot products).
    fn dot_views(&self, op: &str, x: View<'_, Cuda>, y: View<'_, Cuda>) -> Result<f64> {
        let p = x.precision();
        if p == Precision::F16 {
            return Err(unsupported(op, &[p]));
        }
        let mut out = [0.0];
        let (xp, yp) = (
            self.data_ptr(x.data, x.offset),
            self.data_ptr(y.data, y.offset),
        );
        self.with_reduce(|scratch| {
            self.dots(xp, yp, p, x.len, Layout::ColMajor, &mut out, scratch)
        })?;
        Ok(out[0])
    }

    /// An element-wise kernel `op` of one precision over `n` values.
    fn elementwise(&self, op: &str, p: Precision, n: usize, args: &[Arg]) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.launch(&kernel_name(op, &[p]), launch::elementwise(n as u64), args)
    }
}

impl VectorKernels for Cuda {
    fn fill(&self, x: ViewMut<'_, Self>, value: f64) -> Result<()> {
        let p = x.precision();
        let args = [
            self.data_ptr(x.data, x.offset),
            Arg::U64(x.len as u64),
            Arg::F64(value),
        ];
        self.elementwise("fill", p, x.len, &args)
    }

    fn copy_unchecked(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()> {
        if src.len == 0 {
            return Ok(());
        }
        let (a, b) = (src.precision(), dst.precision());
        let (from, to) = (
            self.data_ptr(src.data, src.offset),
            self.data_ptr(dst.data, dst.offset),
        );
        if a == b {
            self.bind()?;
            // SAFETY: both ranges lie inside live buffers (views are bounds-checked) and the
            // copy is ordered on the rank's stream.
            return unsafe {
                cudarc::driver::result::memcpy_dtod_async(
                    address(to),
                    address(from),
                    src.len * a.bytes(),
                    self.stream().cu_stream(),
                )
            }
            .map_err(|e| driver("copy", e));
        }
        self.launch(
            &kernel_name("convert", &[a, b]),
            launch::elementwise(src.len as u64),
            &[from, to, Arg::U64(src.len as u64)],
        )
    }

    fn axpby_unchecked(
        &self,
        alpha: f64,
        x: View<'_, Self>,
        beta: f64,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let p = x.precision();
        let args = [
            Arg::U64(x.len as u64),
            Arg::F64(alpha),
            self.data_ptr(x.data, x.offset),
            Arg::F64(beta),
            self.data_ptr(y.data, y.offset),
        ];
        self.elementwise("axpby", p, x.len, &args)
    }

    fn scale(&self, alpha: f64, x: ViewMut<'_, Self>) -> Result<()> {
        let args = [
            Arg::U64(x.len as u64),
            Arg::F64(alpha),
            self.data_ptr(x.data, x.offset),
        ];
        self.elementwise("scale", x.precision(), x.len, &args)
    }

    fn scaled_product_unchecked(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let p = x.precision();
        let args = [
            Arg::U64(x.len as u64),
            Arg::F64(alpha),
            self.data_ptr(d.data, d.offset),
            self.data_ptr(x.data, x.offset),
            self.data_ptr(y.data, y.offset),
        ];
        self.elementwise("scaled_product", p, x.len, &args)
    }

    fn scaled_product_add_unchecked(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        z: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let p = x.precision();
        let args = [
            Arg::U64(x.len as u64),
            Arg::F64(alpha),
            self.data_ptr(d.data, d.offset),
            self.data_ptr(x.data, x.offset),
            self.data_ptr(z.data, z.offset),
            self.data_ptr(y.data, y.offset),
        ];
        self.elementwise("scaled_product_add", p, x.len, &args)
    }

    fn dot_unchecked(&self, x: View<'_, Self>, y: View<'_, Self>) -> Result<f64> {
        self.dot_views("dot", x, y)
    }

    fn nrm2(&self, x: View<'_, Self>) -> Result<f64> {
        Ok(self.dot_views("nrm2", x, x)?.sqrt())
    }

    fn sum(&self, x: View<'_, Self>) -> Result<f64> {
        let p = x.precision();
        if p == Precision::F16 {
            return Err(unsupported("sum", &[p]));
        }
        let chunks = launch::chunks(x.len as u64);
        self.with_reduce(|buf| {
            grow(self, buf, 1 + chunks as usize)?;
            let part = self.ptr(buf, 1);
            self.launch(
                &kernel_name("sum_partials", &[p]),
                LaunchConfig {
                    grid_dim: (chunks, 1, 1),
                    ..launch::single_block()
                },
                &[
                    self.data_ptr(x.data, x.offset),
                    Arg::U64(x.len as u64),
                    Arg::U64(REDUCE_CHUNK),
                    part,
                ],
            )?;
            self.launch(
                "sums_reduce",
                launch::single_block(),
                &[part, Arg::U32(1), Arg::U32(chunks), self.ptr(buf, 0)],
            )?;
            let mut out = [0.0];
            self.read(buf, 0, &mut out)?;
            Ok(out[0])
        })
    }

    fn shift(&self, x: ViewMut<'_, Self>, value: f64) -> Result<()> {
        let args = [
            Arg::U64(x.len as u64),
            Arg::F64(value),
            self.data_ptr(x.data, x.offset),
        ];
        self.elementwise("shift", x.precision(), x.len, &args)
    }

    fn relayout_unchecked(&self, src: &Block<Self>, dst: &mut Block<Self>) -> Result<()> {
        let (rows, cols, layout) = (src.rows(), src.cols(), src.layout());
        if src.is_empty() {
            return Ok(());
        }
        self.launch(
            &kernel_name("relayout", &[src.precision(), dst.precision()]),
            launch::elementwise(src.len() as u64),
            &[
                self.data_ptr(&src.data, 0),
                self.data_ptr(&dst.data, 0),
                Arg::U64(rows as u64),
                Arg::U32(cols as u32),
                Arg::U32(node_major(layout)),
            ],
        )
    }

    fn log_range_flag(&self, stats: &Stats<Self>, log: &mut FlagLog<Self>) -> Result<()> {
        let slot = log.next_slot("log_range_flag", 1)?;
        let flag = 2 * stats.nrhs();
        if stats.on_device {
            self.bind()?;
            // SAFETY: one f64 inside each of two live buffers (the statistics' front holds
            // 2·nrhs + 1 values, the log has room for `slot`), ordered on the rank's stream.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(
                    address(self.ptr(&log.flags, slot)),
                    address(self.ptr(&stats.partials, flag)),
                    std::mem::size_of::<f64>(),
                    self.stream().cu_stream(),
                )
            }
            .map_err(|e| driver("log_range_flag", e))?;
        } else {
            self.stream()
                .memcpy_htod(
                    &stats.host[flag..flag + 1],
                    &mut log.flags.slice_mut(slot..slot + 1),
                )
                .map_err(|e| driver("log_range_flag", e))?;
        }
        log.len += 1;
        Ok(())
    }

    fn column_stats_unchecked(&self, x: &Block<Self>, stats: &mut Stats<Self>) -> Result<()> {
        let p = x.precision();
        self.record_stats(
            self.data_ptr(&x.data, 0),
            p,
            x.rows(),
            x.cols(),
            x.layout(),
            stats,
        )
    }

    fn column_dots_unchecked(
        &self,
        x: &Block<Self>,
        y: &Block<Self>,
        out: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<()> {
        self.dots(
            self.data_ptr(&x.data, 0),
            self.data_ptr(&y.data, 0),
            x.precision(),
            x.rows(),
            x.layout(),
            out,
            &mut scratch.0,
        )
    }

    fn column_dots_to_unchecked(
        &self,
        x: &Block<Self>,
        y: &Block<Self>,
        out: &mut CudaSlice<f64>,
        at: usize,
        scratch: &mut Scratch<Self>,
    ) -> Result<()> {
        let sums = self.ptr(out, at);
        self.dots_into(
            self.data_ptr(&x.data, 0),
            self.data_ptr(&y.data, 0),
            x.precision(),
            x.rows(),
            x.layout(),
            x.cols(),
            &mut scratch.0,
            0,
            sums,
        )
    }

    fn column_axpby_from_unchecked(
        &self,
        coefficients: &CudaSlice<f64>,
        alpha: usize,
        x: &Block<Self>,
        beta: usize,
        y: &mut Block<Self>,
    ) -> Result<()> {
        if x.is_empty() {
            return Ok(());
        }
        self.launch(
            &kernel_name("column_axpby", &[x.precision()]),
            launch::elementwise(x.len() as u64),
            &[
                self.ptr(coefficients, alpha),
                self.data_ptr(&x.data, 0),
                self.ptr(coefficients, beta),
                self.data_ptr(&y.data, 0),
                Arg::U64(x.rows() as u64),
                Arg::U32(x.cols() as u32),
                Arg::U32(node_major(x.layout())),
            ],
        )
    }

    fn cg_scalars_unchecked(
        &self,
        step: CgStep,
        scalars: &mut CudaSlice<f64>,
        cols: usize,
    ) -> Result<()> {
        let (code, tolerance, relative, unit_roundoff) = step.code();
        self.launch(
            "cg_scalars",
            launch::single_block(),
            &[
                self.ptr(scalars, 0),
                Arg::U32(cols as u32),
                Arg::U32(code),
                Arg::F64(tolerance),
                Arg::U32(relative),
                Arg::F64(unit_roundoff),
            ],
        )
    }

    fn column_axpby_unchecked(
        &self,
        alpha: &[f64],
        x: &Block<Self>,
        beta: &[f64],
        y: &mut Block<Self>,
    ) -> Result<()> {
        if x.is_empty() {
            return Ok(());
        }
        let k = x.cols();
        let both: Vec<f64> = alpha.iter().chain(beta).copied().collect();
        self.with_params(&both, |params| {
            let a = address(params);
            self.launch(
                &kernel_name("column_axpby", &[x.precision()]),
                launch::elementwise(x.len() as u64),
                &[
                    Arg::Ptr(a),
                    self.data_ptr(&x.data, 0),
                    Arg::Ptr(a + 8 * k as u64),
                    self.data_ptr(&y.data, 0),
                    Arg::U64(x.rows() as u64),
                    Arg::U32(k as u32),
                    Arg::U32(node_major(x.layout())),
                ],
            )
        })
    }

    fn scale_columns_unchecked(
        &self,
        src: &Block<Self>,
        scale: &[f64],
        dst: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let (rows, cols) = (src.rows(), src.cols());
        let chunks = launch::chunks(rows as u64);
        let triples = self.stats_triples(stats, cols, chunks)?;
        self.with_params(scale, |params| {
            self.launch(
                &kernel_name("scale_columns", &[src.precision(), dst.precision()]),
                launch::per_chunk_and_group(
                    rows as u64,
                    cols as u32,
                    src.layout() == Layout::NodeMajor,
                ),
                &[
                    self.data_ptr(&src.data, 0),
                    params,
                    self.data_ptr(&dst.data, 0),
                    Arg::U64(rows as u64),
                    Arg::U32(cols as u32),
                    Arg::U32(node_major(src.layout())),
                    Arg::U64(REDUCE_CHUNK),
                    Arg::U32(chunks),
                    Arg::F64(dst.precision().max()),
                    triples,
                ],
            )
        })?;
        self.reduce_stats(triples, triples, cols, chunks, stats)
    }
}
