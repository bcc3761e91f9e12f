//! `tensorfem bench mg --kernels`: each multigrid kernel alone on the finest two levels of
//! the unit square (cube), in f64, f32 and f16, on the CPU or a GPU, against the memory
//! bandwidth measured in the same run (the triad on the CPU, the device copy on a GPU;
//! each run waits for the device, so a GPU kernel's time includes one launch). A kernel's
//! bytes are what it must move once: the stored matrix (values, and 32-bit column indices
//! unless the level is stored without them; the diagonal where only it is read), every
//! block it reads, every block
//! it writes, twice for a block it reads and writes. Neighbours' x values re-read from
//! cache are not counted, so the fraction of the triad is what the kernel attains of the
//! memory bound.

use serde::Serialize;

use super::{cuda_device, device_copy_gbs, time_runs, triad_gbs};
use crate::device::{
    BackendChoice, Block, Cpu, EllMatrix, GridShape, Layout, LevelTransfer, MatrixStorage,
    MultigridDevice, RowOp, Stats,
};
use crate::error::{Error, Result};
use crate::mg::{assemble_level, random_initial_guess, without_roundoff};
use crate::precision::Precision;
use crate::sparse::Ell;

/// One kernel on one level in one precision.
#[derive(Clone, Debug, Serialize)]
pub struct MgKernelTiming {
    pub kernel: &'static str,
    pub precision: &'static str,
    pub dim: usize,
    /// Cells per direction of the level's mesh.
    pub n: usize,
    pub unknowns: usize,
    pub nrhs: usize,
    /// The level matrix as stored: "grid" (no column indices) or "indexed".
    pub storage: &'static str,
    /// Best and median of the timed runs.
    pub seconds: f64,
    pub median_seconds: f64,
    pub bytes: f64,
    pub gbs: f64,
    /// The memory ceiling the fraction is of: "triad" (CPU) or "device copy" (GPU).
    pub bandwidth: &'static str,
    pub triad_gbs: f64,
    pub triad_fraction: f64,
    /// The device the kernels ran on.
    pub device: String,
}

/// Times every kernel of the V-cycle and the refinement update on the levels of n and n/2
/// cells per direction, on the device `backend` picks.
pub fn bench_mg_kernels(
    backend: BackendChoice,
    dim: usize,
    n: usize,
    nrhs: usize,
    storage: MatrixStorage,
) -> Result<Vec<MgKernelTiming>> {
    if !(dim == 2 || dim == 3) || n < 4 || !n.is_multiple_of(2) || nrhs == 0 {
        return Err(Error::InvalidInput(format!(
            "bench mg --kernels: --dim {dim} --n {n} --nrhs {nrhs} (dim 2 or 3, n even ≥ 4, nrhs ≥ 1)"
        )));
    }
    match cuda_device(backend)? {
        None => kernels_on(&Cpu::new(), "triad", dim, n, nrhs, storage),
        Some(gpu) => kernels_on(&gpu, "device copy", dim, n, nrhs, storage),
    }
}

fn kernels_on<D: MultigridDevice>(
    dev: &D,
    bandwidth: &'static str,
    dim: usize,
    n: usize,
    nrhs: usize,
    storage: MatrixStorage,
) -> Result<Vec<MgKernelTiming>> {
    let ceiling = || match bandwidth {
        "triad" => triad_gbs(),
        _ => device_copy_gbs(dev, 1 << 28),
    };
    let mut triad = ceiling();
    let mut timings = Vec::new();
    for (fine_n, coarser) in [(n, true), (n / 2, false)] {
        let matrix = assemble_level(dim, fine_n)?;
        let ell = Ell::from_csr_diagonal_first(&matrix, dev.ell_layout())?;
        let rows = matrix_rows(&ell);
        let fine = GridShape { dim, m: fine_n - 1 };
        let transfer = LevelTransfer::<D>::Grid {
            fine,
            coarse: fine.coarse(),
        };
        let coarse_rows = fine.coarse().points();
        for precision in [Precision::F64, Precision::F32, Precision::F16] {
            // As the solver stores its levels: rounding-level entries dropped (3D).
            let a = EllMatrix::upload_stored(
                dev,
                &without_roundoff(ell.clone(), precision),
                precision,
                storage,
                Some(fine),
            )?;
            let stored = match a.grid {
                Some(_) => MatrixStorage::Grid.name(),
                None => MatrixStorage::Indexed.name(),
            };
            let block = |len: usize, seed: u64| {
                Block::from_f64(
                    dev,
                    &random_initial_guess(len * nrhs, seed),
                    len,
                    nrhs,
                    precision,
                    Layout::NodeMajor,
                )
            };
            let (x, b, mut out) = (block(rows, 1)?, block(rows, 2)?, block(rows, 3)?);
            let mut coarse = block(coarse_rows, 4)?;
            // Statistics as the solver keeps them: a level's without Σ v², the
            // refinement's with (its residual norms).
            let mut stats = Stats::without_norms(dev, nrhs)?;
            let mut norm_stats = Stats::new(dev, nrhs)?;
            let vector = (rows * nrhs * precision.bytes()) as f64;
            let coarse_vector = (coarse_rows * nrhs * precision.bytes()) as f64;
            let scale = vec![1.0; nrhs];
            let mut time = |kernel: &'static str, bytes: f64, f: &mut dyn FnMut() -> Result<()>| {
                let mut failed = None;
                let (best, median) = time_runs(5, 0.5, || {
                    if let Err(e) = f().and_then(|()| dev.synchronize()) {
                        failed.get_or_insert(e);
                    }
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                timings.push(MgKernelTiming {
                    kernel,
                    precision: precision.name(),
                    dim,
                    n: fine_n,
                    unknowns: rows,
                    nrhs,
                    storage: stored,
                    seconds: best,
                    median_seconds: median,
                    bytes,
                    gbs: bytes / best / 1e9,
                    bandwidth,
                    triad_gbs: 0.0,
                    triad_fraction: 0.0,
                    device: dev.name(),
                });
                Ok(())
            };
            let jacobi = RowOp::Jacobi { omega: 2.0 / 3.0 };
            time("jacobi sweep", a.bytes() + 3.0 * vector, &mut || {
                dev.ell_sweep(&a, jacobi, &x, Some(&b), &mut out, &mut stats)
            })?;
            // The previous iterate read from `out` and the new one written over it.
            let chebyshev = RowOp::Chebyshev {
                omega: 0.6,
                momentum: 0.5,
                previous_zero: false,
            };
            time("chebyshev step", a.bytes() + 4.0 * vector, &mut || {
                dev.ell_sweep(&a, chebyshev, &x, Some(&b), &mut out, &mut stats)
            })?;
            time("residual", a.bytes() + 3.0 * vector, &mut || {
                dev.ell_sweep(&a, RowOp::Residual, &x, Some(&b), &mut out, &mut stats)
            })?;
            time(
                "jacobi from zero",
                a.diagonal_bytes() + 2.0 * vector,
                &mut || dev.ell_jacobi_from_zero(&a, 2.0 / 3.0, &b, &mut out, &mut stats),
            )?;
            if coarser {
                time("restriction", vector + coarse_vector, &mut || {
                    dev.restrict(&transfer, &x, &mut coarse, &scale, &mut stats)
                })?;
                time(
                    "prolongation (add)",
                    2.0 * vector + coarse_vector,
                    &mut || dev.prolongate_add(&transfer, &coarse, &mut out, &scale, &mut stats),
                )?;
            }
            if precision == Precision::F64 {
                // The refinement's update with a correction in each precision it meets.
                for c_precision in [Precision::F64, Precision::F32, Precision::F16] {
                    let c = Block::from_f64(
                        dev,
                        &random_initial_guess(rows * nrhs, 5),
                        rows,
                        nrhs,
                        c_precision,
                        Layout::NodeMajor,
                    )?;
                    let (mut u, mut r) = (block(rows, 6)?, block(rows, 7)?);
                    let c_vector = (rows * nrhs * c_precision.bytes()) as f64;
                    let kernel = match c_precision {
                        Precision::F64 => "refinement update (c f64)",
                        Precision::F32 | Precision::Tf32 => "refinement update (c f32)",
                        Precision::F16 => "refinement update (c f16)",
                    };
                    time(kernel, a.bytes() + c_vector + 4.0 * vector, &mut || {
                        dev.ell_refine_update(&a, &c, &scale, &mut u, &mut r, &mut norm_stats)
                    })?;
                }
            }
        }
    }
    triad = triad.max(ceiling());
    for t in &mut timings {
        t.triad_gbs = triad;
        t.triad_fraction = t.gbs / triad;
    }
    Ok(timings)
}

/// Unknowns of a level's matrix.
fn matrix_rows(ell: &Ell<f64>) -> usize {
    crate::sparse::SparseRows::nrows(ell)
}

/// Prints the timings as a table or one JSON object per line.
pub fn print_kernels(timings: &[MgKernelTiming], json: bool) {
    if json {
        for t in timings {
            println!(
                "{}",
                serde_json::to_string(t).expect("plain numbers serialise")
            );
        }
        return;
    }
    let Some(first) = timings.first() else { return };
    println!(
        "multigrid kernels on {}, {}D Q1, the finest two levels ({} matrices), {} right-hand side(s), best of ≥ 5 runs",
        first.device, first.dim, first.storage, first.nrhs
    );
    let ceiling = if first.bandwidth == "triad" {
        "triad"
    } else {
        "copy"
    };
    println!(
        "  {:>6} {:>10} {:<28} {:>5} {:>10} {:>8} {:>7}",
        "n", "unknowns", "kernel", "prec", "ms", "GB/s", ceiling
    );
    for t in timings {
        println!(
            "  {:>6} {:>10} {:<28} {:>5} {:>10.3} {:>8.1} {:>6.0}%",
            t.n,
            t.unknowns,
            t.kernel,
            t.precision,
            1e3 * t.seconds,
            t.gbs,
            100.0 * t.triad_fraction
        );
    }
    println!(
        "  {} bandwidth {:.1} GB/s (best of the measurements in this run)",
        first.bandwidth, first.triad_gbs
    );
}
