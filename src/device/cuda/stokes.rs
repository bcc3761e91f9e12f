//! StokesKernels on CUDA (kernels/stokes.cu): the structured Q2-Q1 stencils, the FE grid
//! transfers, Vanka's gather / patch products / scatter and the coarsest dense solve, on
//! single flow vectors. The interior patches of tuned Vanka are one cuBLAS GEMM (stokes::
//! vanka); the kernels here do the rest.

use super::device::Cuda;
use super::launch::{self, Arg};
use crate::device::stokes::{
    gradient_width, laplacian_width, CoarseSolve, Grid, LatticeRows, PressureRows, StokesKernels,
    StokesMatrices, Transfer, VankaMaps, PATCH,
};
use crate::device::{kernel_name, unsupported, Block, Data, Device, VectorKernels, View, ViewMut};
use crate::error::{Error, Result};
use crate::precision::Precision;

/// Fails unless the kernels' 32-bit indices cover `entries` (below 2³¹, so a grid-stride
/// step past the last one cannot wrap).
fn fits_u32(what: &str, entries: usize) -> Result<u32> {
    match u32::try_from(entries) {
        Ok(e) if e <= i32::MAX as u32 => Ok(e),
        _ => Err(Error::Backend(format!(
            "{what}: {entries} entries exceed the Stokes kernels' 31-bit indices"
        ))),
    }
}

/// The mesh size of `grid` as the kernels take it, once its flow vectors fit 31 bits.
fn mesh_arg(what: &str, grid: Grid) -> Result<Arg> {
    fits_u32(what, grid.flow_len())?;
    Ok(Arg::U32(grid.n as u32))
}

/// The one precision of `given`, if it is one the vector kernels take (f32 or f64).
fn vector_precision(what: &str, given: &[Precision]) -> Result<Precision> {
    match given {
        [p @ (Precision::F32 | Precision::F64), rest @ ..] if rest.iter().all(|r| r == p) => Ok(*p),
        _ => Err(unsupported(what, given)),
    }
}

impl Cuda {
    /// The four sets' coefficients of lattice rows, checked to have the windows the
    /// kernels read (`width` per set) and one storage precision `p`.
    fn lattice_sets(
        &self,
        what: &str,
        rows: &LatticeRows<Cuda>,
        width: fn(usize) -> usize,
        p: Precision,
    ) -> Result<[Arg; 4]> {
        for (set, data) in rows.sets.iter().enumerate() {
            if rows.widths[set] != width(set) || data.precision() != p {
                return Err(Error::Backend(format!(
                    "{what}: set {set} stores {} coefficients per row in {} where the kernels read {} in {p}",
                    rows.widths[set],
                    data.precision(),
                    width(set)
                )));
            }
        }
        Ok(std::array::from_fn(|set| self.data_ptr(&rows.sets[set], 0)))
    }

    /// The x and y gradient rows: eight set pointers and the two units.
    fn gradient_args(&self, a: &StokesMatrices<Cuda>, p: Precision) -> Result<Vec<Arg>> {
        let mut args = Vec::with_capacity(10);
        for g in &a.gradient {
            args.extend(self.lattice_sets("stokes gradient", g, gradient_width, p)?);
        }
        args.extend([Arg::F64(a.gradient[0].scale), Arg::F64(a.gradient[1].scale)]);
        Ok(args)
    }

    /// The x and y divergence rows (5×5 lattice windows) and their common unit.
    fn divergence_args(&self, a: &StokesMatrices<Cuda>, p: Precision) -> Result<[Arg; 3]> {
        let [bx, by] = &a.divergence;
        for b in [bx, by] {
            if b.width != 25 || b.coefficients.precision() != p {
                return Err(Error::Backend(format!(
                    "stokes divergence: {} coefficients per row in {} where the kernels read 25 in {p}",
                    b.width,
                    b.coefficients.precision()
                )));
            }
        }
        if bx.scale != by.scale {
            return Err(Error::Backend(
                "stokes divergence: the two components are stored in different units".into(),
            ));
        }
        Ok([
            self.data_ptr(&bx.coefficients, 0),
            self.data_ptr(&by.coefficients, 0),
            Arg::F64(bx.scale),
        ])
    }

    /// Launches `op` for storage `p` over `items` threads' worth of work.
    fn stencil_launch(&self, op: &str, p: Precision, items: usize, args: &[Arg]) -> Result<()> {
        self.launch(
            &kernel_name(op, &[p]),
            launch::elementwise(items as u64),
            args,
        )
    }
}

impl StokesKernels for Cuda {
    fn stokes_apply_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        x: &Block<Self>,
        b: Option<&Block<Self>>,
        out: &mut Block<Self>,
    ) -> Result<()> {
        let g = a.grid;
        let p = a.laplacian.sets[0].precision();
        let mut args = vec![mesh_arg("stokes_apply", g)?];
        args.extend(self.lattice_sets("stokes_apply", &a.laplacian, laplacian_width, p)?);
        args.extend(self.gradient_args(a, p)?);
        args.extend(self.divergence_args(a, p)?);
        args.extend([
            self.data_ptr(&x.data, 0),
            self.data_ptr(&b.unwrap_or(x).data, 0),
            Arg::U32(u32::from(b.is_some())),
            self.data_ptr(&out.data, 0),
        ]);
        self.stencil_launch("stokes_apply", p, g.lattice_len() + g.pressure_len(), &args)
    }

    fn stokes_laplacian_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let g = a.grid;
        let p = a.laplacian.sets[0].precision();
        let mut args = vec![mesh_arg("stokes_laplacian", g)?];
        args.extend(self.lattice_sets("stokes_laplacian", &a.laplacian, laplacian_width, p)?);
        args.extend([
            self.data_ptr(x.data, x.offset),
            self.data_ptr(y.data, y.offset),
        ]);
        self.stencil_launch("stokes_laplacian", p, g.lattice_len(), &args)
    }

    fn stokes_gradient_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        p: View<'_, Self>,
        flow: &mut Block<Self>,
    ) -> Result<()> {
        let g = a.grid;
        let sp = a.gradient[0].sets[0].precision();
        let mut args = vec![mesh_arg("stokes_gradient", g)?];
        args.extend(self.gradient_args(a, sp)?);
        args.extend([
            self.data_ptr(p.data, p.offset),
            self.data_ptr(&flow.data, 0),
        ]);
        self.stencil_launch("stokes_gradient", sp, g.lattice_len(), &args)
    }

    fn stokes_divergence_unchecked(
        &self,
        a: &StokesMatrices<Self>,
        flow: &Block<Self>,
        p: ViewMut<'_, Self>,
    ) -> Result<()> {
        let g = a.grid;
        let sp = a.divergence[0].coefficients.precision();
        let mut args = vec![mesh_arg("stokes_divergence", g)?];
        args.extend(self.divergence_args(a, sp)?);
        args.extend([
            self.data_ptr(&flow.data, 0),
            self.data_ptr(p.data, p.offset),
        ]);
        self.stencil_launch("stokes_divergence", sp, g.pressure_len(), &args)
    }

    fn pressure_stencil_unchecked(
        &self,
        rows: &PressureRows<Self>,
        p: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let g = rows.grid;
        let sp = rows.coefficients.precision();
        let args = [
            Arg::U32(fits_u32("pressure_stencil", g.pressure_len()).map(|_| g.np() as u32)?),
            Arg::U32(rows.width as u32),
            self.data_ptr(&rows.coefficients, 0),
            Arg::F64(rows.scale),
            self.data_ptr(p.data, p.offset),
            self.data_ptr(y.data, y.offset),
        ];
        self.stencil_launch("pressure_stencil", sp, g.pressure_len(), &args)
    }

    fn stokes_transfer_unchecked(
        &self,
        kind: Transfer,
        coarse_n: usize,
        input: View<'_, Self>,
        output: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (from, to) = kind.lens(coarse_n);
        let p = vector_precision("stokes_transfer", &[input.precision(), output.precision()])?;
        fits_u32("stokes_transfer", from.max(to))?;
        let code = match kind {
            Transfer::Q2Prolong => 0,
            Transfer::Q2Restrict => 1,
            Transfer::Q1Prolong => 2,
            Transfer::Q1Restrict => 3,
        };
        self.stencil_launch(
            "stokes_transfer",
            p,
            to,
            &[
                Arg::U32(code),
                Arg::U32(coarse_n as u32),
                self.data_ptr(input.data, input.offset),
                self.data_ptr(output.data, output.offset),
            ],
        )
    }

    fn vanka_gather_unchecked(
        &self,
        grid: Grid,
        r: &Block<Self>,
        maps: &VankaMaps<Self>,
        pressure_scale: f64,
        gathered: &mut Data<Self>,
    ) -> Result<()> {
        let patches = Cuda::buffer_len(&maps.patch_of_column);
        let p = vector_precision("vanka_gather", &[r.precision(), gathered.precision()])?;
        let args = [
            mesh_arg("vanka_gather", grid)?,
            self.data_ptr(&r.data, 0),
            self.ptr(&maps.patch_of_column, 0),
            Arg::U32(fits_u32("vanka_gather", patches * PATCH)? / PATCH as u32),
            Arg::F64(pressure_scale),
            self.data_ptr(gathered, 0),
        ];
        self.stencil_launch("vanka_gather", p, patches * PATCH, &args)
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
        let columns = Cuda::buffer_len(&maps.inverse_of_column);
        fits_u32("vanka_products", columns * PATCH)?;
        if first >= columns {
            return Ok(());
        }
        // A block of two warps per column (51 rows), at most MAX_BLOCKS blocks looping.
        let blocks = (columns - first).min(launch::MAX_BLOCKS as usize) as u32;
        self.launch(
            &kernel_name("vanka_products", &[sp]),
            cudarc::driver::LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (64, 1, 1),
                shared_mem_bytes: 0,
            },
            &[
                self.data_ptr(inverses, 0),
                self.ptr(&maps.inverse_of_column, 0),
                Arg::U32(first as u32),
                Arg::U32(columns as u32),
                self.data_ptr(gathered, 0),
                self.data_ptr(corrections, 0),
            ],
        )
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
        let p = vector_precision("vanka_scatter", &[x.precision(), corrections.precision()])?;
        let args = [
            mesh_arg("vanka_scatter", grid)?,
            self.data_ptr(corrections, 0),
            self.ptr(&maps.column_of, 0),
            Arg::F64(omega),
            Arg::F64(pressure_scale),
            self.data_ptr(&x.data, 0),
        ];
        self.stencil_launch(
            "vanka_scatter",
            p,
            grid.lattice_len() + grid.pressure_len(),
            &args,
        )
    }

    fn coarse_solve_unchecked(
        &self,
        solve: &CoarseSolve<Self>,
        b: View<'_, Self>,
        mut x: ViewMut<'_, Self>,
    ) -> Result<()> {
        let p = vector_precision("coarse_solve", &[b.precision(), x.precision()])?;
        self.fill(x.reborrow(), 0.0)?;
        fits_u32("coarse_solve", solve.size * solve.size)?;
        let args = [
            self.ptr(&solve.positions, 0),
            Arg::U32(solve.unknowns as u32),
            Arg::U32(solve.size as u32),
            self.data_ptr(&solve.inverse, 0),
            self.data_ptr(b.data, b.offset),
            self.data_ptr(x.data, x.offset),
        ];
        self.launch(
            &kernel_name("coarse_solve", &[p]),
            launch::elementwise(solve.unknowns.max(1) as u64),
            &args,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_past_31_bits_are_refused() {
        assert_eq!(fits_u32("t", 1000).unwrap(), 1000);
        assert!(fits_u32("t", 1 << 31).is_err());
        // The lattice of n = 16384 holds 2·32769² + 16385² ≈ 2.4·10⁹ flow entries.
        let err = mesh_arg("stokes_apply", Grid { n: 16384 }).unwrap_err();
        assert!(err.to_string().contains("31-bit"), "{err}");
    }
}
