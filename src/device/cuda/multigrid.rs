//! MultigridKernels on CUDA (kernels/multigrid.cu): slot-major ELLPACK sweeps, the first
//! Jacobi step, the f64 refinement update and the grid and matrix transfers, on node-major
//! blocks, each with its statistics fused and reduced on the device.

use super::device::Cuda;
use super::launch::{self, Arg};
use crate::device::multigrid::Direction;
use crate::device::{
    kernel_name, unsupported, Block, EllMatrix, FlagLog, LevelTransfer, MultigridKernels, RowOp,
    Stats,
};
use crate::error::{Error, Result};
use crate::precision::Precision;
use crate::sparse::EllLayout;

/// Rows as the kernels' 32-bit indices (below 2³¹, so a grid-stride step past the last
/// row cannot wrap).
fn rows_u32(what: &str, rows: usize) -> Result<u32> {
    match u32::try_from(rows) {
        Ok(r) if r <= i32::MAX as u32 => Ok(r),
        _ => Err(Error::Backend(format!(
            "{what}: {rows} rows exceed the kernels' 31-bit row indices"
        ))),
    }
}

impl Cuda {
    /// Launches a node-major kernel over `rows` rows and `cols` columns whose last argument
    /// is the chunk triples of its statistics, then reduces them into `stats`.
    fn launch_recorded(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        args: &[Arg],
        stats: &mut Stats<Cuda>,
    ) -> Result<()> {
        let cfg = launch::rows_and_columns(rows as u64, cols as u32)?;
        let chunks = cfg.grid_dim.0;
        let triples = self.stats_triples(stats, cols, chunks)?;
        let mut all = args.to_vec();
        all.push(triples);
        self.launch(name, cfg, &all)?;
        self.reduce_stats(triples, triples, cols, chunks, stats)
    }

    /// The kernel family reading the matrix and its arguments: `ell` with rows, width,
    /// column indices, values; `grid` (stored without indices) with rows, dimension, points
    /// per direction, values.
    fn ell_args(&self, what: &str, a: &EllMatrix<Cuda>) -> Result<(&'static str, [Arg; 4])> {
        if a.layout != EllLayout::SlotMajor {
            return Err(Error::Backend(format!(
                "{what}: the CUDA kernels read slot-major ELLPACK"
            )));
        }
        let rows = Arg::U32(rows_u32(what, a.nrows)?);
        let values = self.data_ptr(&a.values, 0);
        Ok(match a.grid {
            Some(g) => {
                if g.points() != a.nrows || !(2..=3).contains(&g.dim) {
                    return Err(Error::Backend(format!(
                        "{what}: a {}D grid of {} points for a matrix of {} rows",
                        g.dim,
                        g.points(),
                        a.nrows
                    )));
                }
                (
                    "grid",
                    [rows, Arg::U32(g.dim as u32), Arg::U32(g.m as u32), values],
                )
            }
            None => (
                "ell",
                [
                    rows,
                    Arg::U32(a.width as u32),
                    self.ptr(&a.col_idx, 0),
                    values,
                ],
            ),
        })
    }
}

impl Cuda {
    /// A transfer in `direction` from `src` to `dst` (checked: node-major blocks of the
    /// levels' sizes), in any precisions.
    fn transfer(
        &self,
        direction: Direction,
        transfer: &LevelTransfer<Cuda>,
        src: &Block<Cuda>,
        dst: &mut Block<Cuda>,
        scale: &[f64],
        stats: &mut Stats<Cuda>,
    ) -> Result<()> {
        let what = direction.name();
        let nrhs = src.cols();
        let dst_rows = match direction {
            Direction::Restrict => transfer.sizes().1,
            Direction::ProlongateAdd => transfer.sizes().0,
        };
        let (sp, tp) = (src.precision(), dst.precision());
        let (src_ptr, dst_ptr) = (self.data_ptr(&src.data, 0), self.data_ptr(&dst.data, 0));
        let limit = Arg::F64(tp.max());
        let factors: Vec<f64> = scale.iter().map(|&s| direction.factor(s)).collect();
        self.with_params(&factors, |factor| match transfer {
            LevelTransfer::Grid { fine, coarse } => {
                rows_u32(what, fine.points())?;
                let op = match direction {
                    Direction::Restrict => "grid_restrict",
                    Direction::ProlongateAdd => "grid_prolongate_add",
                };
                self.launch_recorded(
                    &kernel_name(op, &[sp, tp]),
                    dst_rows,
                    nrhs,
                    &[
                        src_ptr,
                        dst_ptr,
                        Arg::U32(fine.dim as u32),
                        Arg::U32(coarse.m as u32),
                        Arg::U32(nrhs as u32),
                        factor,
                        limit,
                    ],
                    stats,
                )
            }
            LevelTransfer::Matrix {
                prolongation,
                restriction,
            } => {
                let m = match direction {
                    Direction::Restrict => restriction,
                    Direction::ProlongateAdd => prolongation,
                };
                if m.values.precision() != Precision::F64 {
                    return Err(unsupported("matrix_transfer", &[m.values.precision()]));
                }
                self.launch_recorded(
                    &kernel_name("matrix_transfer", &[sp, tp]),
                    dst_rows,
                    nrhs,
                    &[
                        Arg::U32(rows_u32(what, m.nrows)?),
                        self.ptr(&m.row_ptr, 0),
                        self.ptr(&m.col_idx, 0),
                        self.data_ptr(&m.values, 0),
                        src_ptr,
                        dst_ptr,
                        Arg::U32(u32::from(direction == Direction::ProlongateAdd)),
                        Arg::U32(nrhs as u32),
                        factor,
                        limit,
                    ],
                    stats,
                )
            }
        })
    }
}

impl MultigridKernels for Cuda {
    fn ell_layout(&self) -> EllLayout {
        EllLayout::SlotMajor
    }

    fn reads_grid_rows(&self) -> bool {
        true
    }

    fn ell_sweep_unchecked(
        &self,
        a: &EllMatrix<Self>,
        op: RowOp,
        x: &Block<Self>,
        b: Option<&Block<Self>>,
        out: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let nrhs = x.cols();
        let p = a.precision();
        // The op codes of kernels/multigrid.cu (OP_APPLY …).
        let (code, omega, momentum, b) = match (op, b) {
            (RowOp::Apply, _) => (0, 0.0, 0.0, x),
            (RowOp::Residual, Some(b)) => (1, 0.0, 0.0, b),
            (RowOp::Jacobi { omega }, Some(b)) => (2, omega, 0.0, b),
            (
                RowOp::Chebyshev {
                    omega,
                    momentum,
                    previous_zero,
                },
                Some(b),
            ) => (if previous_zero { 4 } else { 3 }, omega, momentum, b),
            (RowOp::Scaled { omega }, _) => (5, omega, 0.0, x),
            (
                RowOp::Correction {
                    omega,
                    momentum,
                    previous_zero,
                },
                Some(b),
            ) => (if previous_zero { 7 } else { 6 }, omega, momentum, b),
            (_, None) => unreachable!("checked by MultigridKernels::ell_sweep"),
        };
        let (family, matrix) = self.ell_args("ell_sweep", a)?;
        self.launch_recorded(
            &kernel_name(&format!("{family}_sweep"), &[p]),
            a.nrows,
            nrhs,
            &[
                matrix[0],
                matrix[1],
                matrix[2],
                matrix[3],
                Arg::U32(code),
                Arg::F64(omega),
                Arg::F64(momentum),
                self.data_ptr(&x.data, 0),
                self.data_ptr(&b.data, 0),
                self.data_ptr(&out.data, 0),
                Arg::U32(nrhs as u32),
                Arg::F64(p.max()),
            ],
            stats,
        )
    }

    fn ell_jacobi_from_zero_unchecked(
        &self,
        a: &EllMatrix<Self>,
        omega: f64,
        b: &Block<Self>,
        out: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let nrhs = b.cols();
        let p = a.precision();
        self.launch_recorded(
            &kernel_name("ell_jacobi_from_zero", &[p]),
            a.nrows,
            nrhs,
            &[
                Arg::U32(rows_u32("ell_jacobi_from_zero", a.nrows)?),
                self.data_ptr(&a.diagonal, 0),
                Arg::F64(omega),
                self.data_ptr(&b.data, 0),
                self.data_ptr(&out.data, 0),
                Arg::U32(nrhs as u32),
                Arg::F64(p.max()),
            ],
            stats,
        )
    }

    fn ell_refine_update_unchecked(
        &self,
        a: &EllMatrix<Self>,
        c: &Block<Self>,
        alpha: &[f64],
        x: &mut Block<Self>,
        r: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        let nrhs = c.cols();
        let (family, matrix) = self.ell_args("ell_refine_update", a)?;
        let entry = kernel_name(&format!("{family}_refine_update"), &[c.precision()]);
        let (c_ptr, x_ptr, r_ptr) = (
            self.data_ptr(&c.data, 0),
            self.data_ptr(&x.data, 0),
            self.data_ptr(&r.data, 0),
        );
        self.with_params(alpha, |alpha| {
            self.launch_recorded(
                &entry,
                a.nrows,
                nrhs,
                &[
                    matrix[0],
                    matrix[1],
                    matrix[2],
                    matrix[3],
                    c_ptr,
                    alpha,
                    x_ptr,
                    r_ptr,
                    Arg::U32(nrhs as u32),
                ],
                stats,
            )
        })
    }

    fn restrict_unchecked(
        &self,
        transfer: &LevelTransfer<Self>,
        fine: &Block<Self>,
        coarse: &mut Block<Self>,
        scale: &[f64],
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        self.transfer(Direction::Restrict, transfer, fine, coarse, scale, stats)
    }

    fn log_flushed_column_unchecked(
        &self,
        fine: &Stats<Self>,
        coarse: &Stats<Self>,
        half_tiny: f64,
        log: &mut FlagLog<Self>,
    ) -> Result<()> {
        let (slot, cols) = (log.next_slot("log_flushed_column", 2)?, fine.nrhs());
        if !fine.on_device || !coarse.on_device {
            return Err(Error::Backend(
                "log_flushed_column: statistics already read to the host (check them there)".into(),
            ));
        }
        self.launch(
            "flushed_column",
            launch::single_block(),
            &[
                self.ptr(&fine.partials, 0),
                self.ptr(&coarse.partials, 0),
                Arg::U32(cols as u32),
                Arg::F64(half_tiny),
                self.ptr(&log.flags, slot),
            ],
        )?;
        log.len += 2;
        Ok(())
    }

    fn prolongate_add_unchecked(
        &self,
        transfer: &LevelTransfer<Self>,
        coarse: &Block<Self>,
        fine: &mut Block<Self>,
        scale: &[f64],
        stats: &mut Stats<Self>,
    ) -> Result<()> {
        self.transfer(
            Direction::ProlongateAdd,
            transfer,
            coarse,
            fine,
            scale,
            stats,
        )
    }
}
