//! `tensorfem bench psc`: set-up and solve times of a PSC method (M1, M2, M3) for a block of
//! right-hand sides, in MDof/s and GFLOP/s, with the fractions of this machine's GEMM peak
//! and triad bandwidth measured in the same run, the process's peak memory, M3's CG
//! iterations, and the accuracy achieved.

use std::path::PathBuf;
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

use super::machine::{gemm_ceiling_size, GemmSite};
use super::{cuda_device, device_copy_gbs, device_gemm_gflops, gemm_gflops, time_runs, triad_gbs};
use crate::cli::PscBenchArgs;
use crate::device::{
    BackendChoice, Block, Cpu, DenseInverse, Layout, OnHost, PscDevice, StageTime,
};
use crate::error::{Error, Result};
use crate::fem::{assemble_loads, l2_error, relative_residual, Dofs, Manufactured};
use crate::linalg::{LinOp, SparseCholesky};
use crate::mesh::{unit_square_refined, Element};
use crate::precision::Precision;
use crate::psc::{
    class_counts, estimated_bytes, refinement_levels, Coupling, InnerCg, OperatorCache, PscIr,
    PscIrParams, PscMethod, PscOperator, PscSetup, SetupKey, HOST_SOLVE_VECTORS,
};
use crate::sparse::Csr;

#[derive(Clone, Debug)]
pub struct PscBenchParams {
    pub element: Element,
    pub n: usize,
    pub n0: usize,
    pub nrhs: usize,
    pub precision: Precision,
    pub method: PscMethod,
    /// How the apply multiplies by D.
    pub coupling: Coupling,
    /// M3's CG tolerance (None: rtol/10 alone, `InnerCg::inner`'s default with `refine`).
    pub cg_rtol: Option<f64>,
    /// Reuse (or fill) an operator cache instead of timing a fresh set-up.
    pub cache_dir: Option<PathBuf>,
    pub backend: BackendChoice,
    /// Time PSC-IR to this relative tolerance instead of one apply.
    pub refine: Option<f64>,
    /// M3 alone: the nodal relative residual its CG aims at when `cg_rtol` is not given.
    pub rtol: f64,
    /// Timed solves (after one warm-up).
    pub runs: usize,
    /// Also factor A with the sparse Cholesky (`cholesky`, f64) and time its solve of the
    /// same block, side by side.
    pub reference: bool,
    /// Time each stage of the apply (marks in the device's queue).
    pub stages: bool,
    /// m = n = k of the GEMM peak (None: [`gemm_ceiling_size`]'s default).
    pub gemm_size: Option<usize>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PscBenchResult {
    /// Where the method ran.
    pub device: String,
    pub method: &'static str,
    pub element: &'static str,
    pub n: usize,
    pub n0: usize,
    pub nrhs: usize,
    pub precision: &'static str,
    /// How the apply multiplied by D (csr or element).
    pub coupling: &'static str,
    pub unknowns: usize,
    /// Set-up (or cache load) seconds, and which of the two it was.
    pub setup_seconds: f64,
    pub setup_from_cache: bool,
    /// Bytes of the stored operators in the working precision.
    pub operator_bytes: usize,
    /// Of those, the bytes one apply reads (Nrhs = 1 on the CPU: half of each symmetric
    /// dense inverse).
    pub operator_bytes_read: usize,
    /// Peak resident memory of the process (Linux VmHWM) after the solves, bytes.
    pub peak_memory_bytes: Option<u64>,
    /// Best and median seconds of one apply on the whole block (with --refine: of the
    /// whole PSC-IR solve, every step's apply and f64 residual), the blocks resident on
    /// the device.
    pub solve_seconds: f64,
    pub solve_seconds_median: f64,
    /// Seconds to write the right-hand sides (host f64) into the device block the solve
    /// takes and read the solution back into fresh host memory, once: host↔device
    /// transfers, apart from solve_seconds (on the CPU backend a copy and conversion each
    /// way).
    pub transfer_seconds: f64,
    pub mdofs: f64,
    /// M1: GFLOP/s by the formula of docs/mathematics.md §3 (per apply),
    /// (8/4^l + 4·4^l)·N^{3/2} per right-hand side with N = 1/h² and h0 = 2^l √h (Q1);
    /// M2/M3: the counted figure (the formula is M1's).
    pub gflops: f64,
    /// GFLOP/s counting the operations the method performs (GEMMs 2mnk, sparse products
    /// 2 nnz; M3 per CG iteration as well).
    pub gflops_counted: f64,
    /// The larger of two GEMM-peak measurements, before and after the timed solves.
    pub gemm_peak_gflops: f64,
    /// gflops (the formula of docs/mathematics.md §3) / the GEMM peak of this precision
    /// measured in the same run.
    pub gemm_peak_fraction: f64,
    /// gflops_counted / the same peak.
    pub gemm_peak_fraction_counted: f64,
    /// Operator bytes read per apply / seconds, and its fraction of the memory
    /// ceiling: the triad on the CPU, the device copy (read + write) on a GPU.
    pub operator_gbs: f64,
    pub bandwidth: &'static str,
    pub triad_gbs: f64,
    pub triad_fraction: f64,
    /// Refinement steps of the slowest column (--refine), else None.
    pub refine_steps: Option<usize>,
    /// --refine: seconds (and refinement steps) of the last timed solve until every
    /// column's f64 relative residual was ≤ 1e-6 and ≤ 1e-10 (None if not reached).
    pub seconds_to_1e6: Option<f64>,
    pub steps_to_1e6: Option<usize>,
    pub seconds_to_1e10: Option<f64>,
    pub steps_to_1e10: Option<usize>,
    /// M3: block-CG iterations of the timed solve (summed over its refinement steps), and
    /// its stopping rule.
    pub cg_iterations: Option<usize>,
    pub cg_rtol: Option<f64>,
    /// Worst column: f64 ‖b − Ax‖₂/‖b‖₂ of the solution and its relative L2 error.
    pub relative_residual: f64,
    pub l2_error: f64,
    /// --reference: the `cholesky` method ([`SparseCholesky`], f64) on the same matrix and
    /// block: factorisation seconds, best and median seconds of its solve of the whole block
    /// (the factorisation excluded; like the method's, each solve copies the block in), the
    /// worst column's f64 relative residual, and the worst column's difference from the
    /// method's solution, ‖x − x_ref‖₂/‖x_ref‖₂ (how close PSC-IR comes to the f64 direct
    /// solve).
    pub reference_factor_seconds: Option<f64>,
    pub reference_solve_seconds: Option<f64>,
    pub reference_solve_seconds_median: Option<f64>,
    pub reference_relative_residual: Option<f64>,
    pub reference_difference: Option<f64>,
    /// --stages: seconds per stage of the last timed apply (with --refine: summed over the
    /// applies of the last timed solve), in the order they run, beside the stage's model.
    pub stage_seconds: Option<Vec<StageRow>>,
}

/// One stage of the apply: its measured seconds, what it must move and compute
/// ([`PscOperator::stage_costs`]: compulsory bytes, counted flops), and the time that takes
/// at the memory bandwidth and the GEMM peak measured in the same run,
/// max(bytes / bandwidth, flops / peak).
#[derive(Clone, Debug, Serialize)]
pub struct StageRow {
    pub stage: &'static str,
    pub seconds: f64,
    pub bytes: f64,
    pub flops: f64,
    pub model_seconds: f64,
}

impl StageRow {
    /// The measured stages beside their costs summed over the applies (`counts.stages`);
    /// the model's seconds are left to [`PscBenchResult::against`].
    fn of(times: Vec<StageTime>, counts: &crate::psc::ApplyCounts) -> Vec<StageRow> {
        let costs = &counts.stages;
        times
            .into_iter()
            .map(|t| {
                let cost = costs
                    .iter()
                    .find(|(stage, _)| *stage == t.stage)
                    .map(|&(_, c)| c)
                    .unwrap_or_default();
                StageRow {
                    stage: t.stage,
                    seconds: t.seconds,
                    bytes: cost.bytes,
                    flops: cost.flops,
                    model_seconds: f64::NAN,
                }
            })
            .collect()
    }
}

/// The sparse Cholesky (`cholesky`) on the bench's matrix and block.
struct ReferenceTimes {
    factor: f64,
    best: f64,
    median: f64,
    relative_residual: f64,
    /// The worst column's ‖x − x_ref‖₂/‖x_ref‖₂ of the method's solution x.
    difference: f64,
}

/// Factors A (timed once) and times the solve of the block `rhs` (Nrhs columns of
/// `stiffness.nrows()`) with at least `runs` runs, and compares the method's `solution`
/// (same layout) with the reference's.
fn time_reference(
    stiffness: &Csr<f64>,
    rhs: &[f64],
    solution: &[f64],
    runs: usize,
) -> Result<ReferenceTimes> {
    let n = crate::sparse::SparseRows::nrows(stiffness);
    let t = Instant::now();
    let cholesky = SparseCholesky::factor(stiffness)?;
    let factor = t.elapsed().as_secs_f64();
    let mut x = Vec::new();
    let (best, median) = time_runs(runs, 2.0, || x = cholesky.solve(rhs, rhs.len() / n));
    let mut residual = vec![0.0; n];
    let relative_residual = rhs
        .chunks(n)
        .zip(x.chunks(n))
        .map(|(b, x)| relative_residual(stiffness, b, x, &mut residual))
        .fold(0.0, f64::max);
    let difference = solution
        .chunks(n)
        .zip(x.chunks(n))
        .map(|(method, reference)| {
            let pairs = method.iter().zip(reference);
            let (diff, norm) = pairs.fold((0.0, 0.0), |(d, r), (&xi, &ri)| {
                (d + (xi - ri) * (xi - ri), r + ri * ri)
            });
            if norm > 0.0 {
                (diff / norm).sqrt()
            } else {
                diff.sqrt()
            }
        })
        .fold(0.0, f64::max);
    Ok(ReferenceTimes {
        factor,
        best,
        median,
        relative_residual,
        difference,
    })
}

/// Seconds to write the host block `rhs` (f64) into a device block of `precision` and
/// read it back as f64 into fresh host memory, once (as a solve on host data would; on
/// the CPU backend a copy and conversion each way): what it adds to the device-resident
/// time.
fn time_transfers<D: PscDevice>(
    dev: &D,
    rhs: &[f64],
    rows: usize,
    cols: usize,
    precision: Precision,
) -> Result<f64> {
    let mut block = Block::zeros(dev, rows, cols, precision, Layout::ColMajor)?;
    dev.synchronize()?;
    let start = Instant::now();
    block.data.write_f64(dev, rhs)?;
    let back = block.to_f64(dev)?;
    dev.synchronize()?;
    let seconds = start.elapsed().as_secs_f64();
    drop(back);
    Ok(seconds)
}

/// Distinct wave numbers in the block (columns cycle through them).
const DISTINCT_K: u32 = 8;

/// The GEMM peak of a precision and the memory bandwidth of a device, measured.
struct Ceilings<'a> {
    bandwidth: &'static str,
    gemm: &'a dyn Fn(Precision) -> f64,
    memory: &'a dyn Fn() -> f64,
}

/// A GEMM peak and a memory bandwidth, measured.
#[derive(Clone, Copy)]
struct Measured {
    gemm: f64,
    memory: f64,
}

impl Ceilings<'_> {
    fn measure(&self, p: Precision) -> Measured {
        Measured {
            gemm: (self.gemm)(p),
            memory: (self.memory)(),
        }
    }
}

impl PscBenchResult {
    /// Sets the ceilings and the fractions of them.
    fn against(&mut self, ceilings: Measured) {
        self.gemm_peak_gflops = ceilings.gemm;
        self.gemm_peak_fraction = self.gflops / ceilings.gemm;
        self.gemm_peak_fraction_counted = self.gflops_counted / ceilings.gemm;
        self.triad_gbs = ceilings.memory;
        self.triad_fraction = self.operator_gbs / ceilings.memory;
        for s in self.stage_seconds.iter_mut().flatten() {
            let cost = crate::linalg::Cost {
                bytes: s.bytes,
                flops: s.flops,
            };
            s.model_seconds = super::model_seconds(cost, ceilings.gemm, ceilings.memory);
        }
    }
}

/// One row: the fractions of the ceilings are left to [`PscBenchResult::against`].
fn run<D: PscDevice>(
    dev: D,
    bandwidth: &'static str,
    params: &PscBenchParams,
    setup: &PscSetup,
    setup_seconds: f64,
    from_cache: bool,
) -> Result<PscBenchResult> {
    let mut op = PscOperator::new(&dev, setup, params.precision, params.coupling)?;
    let cg = InnerCg::configured(
        params.refine.is_some(),
        params.precision,
        params.cg_rtol,
        params.rtol,
    );
    op.set_inner_cg(cg);
    op.time_stages(params.stages);
    let mut stages = Vec::new();
    let n_unknowns = setup.num_unknowns();
    let nrhs = params.nrhs;
    let mesh = unit_square_refined(params.n0, setup.levels, params.element)?;
    let dofs = Dofs::from_boundary(&mesh.on_boundary);
    let distinct = (nrhs as u32).min(DISTINCT_K);
    let exact: Vec<Manufactured> = (1..=distinct).map(|k| Manufactured::new(k, 2)).collect();
    let loads: Vec<_> = exact.iter().map(|m| move |x: &[f64]| m.f(x)).collect();
    let distinct_rhs = assemble_loads(&mesh, &dofs, &loads);
    // The block column by column in parallel (4096 columns at h = 1/512 are 8.6 GB).
    let mut rhs = vec![0.0; n_unknowns * nrhs];
    rhs.par_chunks_mut(n_unknowns)
        .enumerate()
        .for_each(|(c, column)| {
            let d = c % distinct as usize;
            column.copy_from_slice(&distinct_rhs[d * n_unknowns..(d + 1) * n_unknowns]);
        });
    let operator_bytes_stored = op.operator_bytes();
    let operator_bytes = op.operator_bytes_read(nrhs) as f64;
    let runs = params.runs;
    let mut failure = None;
    // Counted flops and CG iterations of the last timed solve, and PSC-IR's time to 1e-6
    // and 1e-10.
    let mut last = crate::psc::ApplyCounts::default();
    let (mut to_1e6, mut to_1e10) = (None, None);
    // The block as the solve takes it: the operator's compute precision, or f64 in PSC-IR.
    let input_precision = match params.refine {
        Some(_) => Precision::F64,
        None => op.input().precision,
    };
    let (best, median, x64, applies, residual_flops, refine_steps, stage_rows) = match params.refine
    {
        None => {
            let kind = op.input();
            op.prepare(nrhs)?;
            let b = Block::from_f64(
                &dev,
                &rhs,
                n_unknowns,
                nrhs,
                kind.precision,
                Layout::ColMajor,
            )?;
            let mut x = Block::zeros(&dev, n_unknowns, nrhs, kind.precision, Layout::ColMajor)?;
            // Each apply ends by reading its columns' statistics, which waits for the device.
            let (best, median) = time_runs(runs, 2.0, || {
                op.take_counts();
                let applied = op.take_stage_seconds().and_then(|_| {
                    dev.run(|| op.apply(&b, &mut x).and_then(|()| dev.synchronize()))
                });
                if let Err(e) = applied {
                    failure = Some(e);
                }
                last = op.take_counts();
                match op.take_stage_seconds() {
                    Ok(s) => stages = s,
                    Err(e) => failure = Some(e),
                }
            });
            let rows = StageRow::of(std::mem::take(&mut stages), &last);
            (best, median, x.to_f64(&dev)?, 1.0, 0.0, None, rows)
        }
        Some(rtol) => {
            let params = PscIrParams {
                rtol,
                atol: 0.0,
                max_iterations: 50,
            };
            let mut ir = PscIr::new(&dev, op, &setup.stiffness, nrhs, params.max_iterations)?;
            // Device-resident like the single apply: the blocks' transfers are timed apart.
            let f64_block =
                || Block::zeros(&dev, n_unknowns, nrhs, Precision::F64, Layout::ColMajor);
            let (mut b, mut x) = (f64_block()?, f64_block()?);
            b.data.write_f64(&dev, &rhs)?;
            let (mut steps, mut update_columns) = (0, 0);
            let (best, median) = time_runs(runs, 2.0, || {
                ir.operator_mut().take_counts();
                let cleared = ir.operator_mut().take_stage_seconds();
                let solved = cleared.and_then(|_| {
                    dev.run(|| {
                        let info = ir.solve_blocks_from_zero(&b, &mut x, params)?.clone();
                        dev.synchronize()?;
                        Ok::<_, Error>(info)
                    })
                });
                match solved {
                    Ok(info) => {
                        steps = info.steps();
                        update_columns = info.update_columns;
                        to_1e6 = info.time_to(1e-6);
                        to_1e10 = info.time_to(1e-10);
                    }
                    Err(e) => failure = Some(e),
                }
                last = ir.operator_mut().take_counts();
                match ir.operator_mut().take_stage_seconds() {
                    Ok(s) => stages = s,
                    Err(e) => failure = Some(e),
                }
            });
            // Each step: one apply (as counted) and one f64 product with A (2 nnz per
            // column it ran on); from zero, the initial residual is b.
            let applies = last.applies as f64;
            let residuals = 2.0 * setup.stiffness.nnz() as f64 * update_columns as f64;
            let times = std::mem::take(&mut stages);
            let rows = StageRow::of(times, &last);
            (
                best,
                median,
                x.to_f64(&dev)?,
                applies,
                residuals,
                Some(steps),
                rows,
            )
        }
    };
    let transfer_seconds = time_transfers(&dev, &rhs, n_unknowns, nrhs, input_precision)?;
    if let Some(e) = failure {
        return Err(e);
    }

    // Every column's residual (in parallel: a maximum, the same in any order), and the L2
    // error of the columns with distinct exact solutions.
    let worst_residual = rhs
        .par_chunks(n_unknowns)
        .zip(x64.par_chunks(n_unknowns))
        .map_init(
            || vec![0.0; n_unknowns],
            |residual, (b, x)| relative_residual(&setup.stiffness, b, x, residual),
        )
        .reduce(|| 0.0, f64::max);
    let worst_l2 = exact
        .iter()
        .zip(x64.chunks(n_unknowns))
        .map(|(m, x)| l2_error(&mesh, &dofs, x, |p| m.u(p)) / m.l2_norm())
        .fold(0.0, f64::max);

    let reference = params
        .reference
        .then(|| time_reference(&setup.stiffness, &rhs, &x64, runs))
        .transpose()?;

    let (n, n0) = (params.n as f64, params.n0 as f64);
    let l = (n.sqrt() / n0).log2();
    let counted_flops = last.flops + residual_flops;
    let formula_flops = match params.method {
        PscMethod::M1 => {
            (8.0 / 4f64.powf(l) + 4.0 * 4f64.powf(l)) * (n * n).powf(1.5) * last.columns as f64
        }
        PscMethod::M2 | PscMethod::M3 => counted_flops,
    };
    // Every apply reads the operators once, and M3 once more per CG iteration.
    let operator_reads = applies + last.cg_iterations as f64;
    let operator_gbs = operator_bytes * operator_reads / best / 1e9;
    let is_m3 = params.method == PscMethod::M3;
    Ok(PscBenchResult {
        device: dev.name(),
        method: params.method.label(),
        element: params.element.name(),
        n: params.n,
        n0: params.n0,
        nrhs,
        precision: params.precision.name(),
        coupling: params.coupling.name(),
        unknowns: n_unknowns,
        setup_seconds,
        setup_from_cache: from_cache,
        operator_bytes: operator_bytes_stored,
        operator_bytes_read: operator_bytes as usize,
        peak_memory_bytes: crate::sys::peak_memory(),
        solve_seconds: best,
        solve_seconds_median: median,
        transfer_seconds,
        mdofs: (n_unknowns * nrhs) as f64 / best / 1e6,
        gflops: formula_flops / best / 1e9,
        gflops_counted: counted_flops / best / 1e9,
        gemm_peak_gflops: f64::NAN,
        gemm_peak_fraction: f64::NAN,
        gemm_peak_fraction_counted: f64::NAN,
        operator_gbs,
        bandwidth,
        triad_gbs: f64::NAN,
        triad_fraction: f64::NAN,
        refine_steps,
        seconds_to_1e6: to_1e6.map(|t| t.1),
        steps_to_1e6: to_1e6.map(|t| t.0),
        seconds_to_1e10: to_1e10.map(|t| t.1),
        steps_to_1e10: to_1e10.map(|t| t.0),
        cg_iterations: is_m3.then_some(last.cg_iterations),
        cg_rtol: is_m3.then_some(cg.rtol),
        relative_residual: worst_residual,
        l2_error: worst_l2,
        reference_factor_seconds: reference.as_ref().map(|r| r.factor),
        reference_solve_seconds: reference.as_ref().map(|r| r.best),
        reference_solve_seconds_median: reference.as_ref().map(|r| r.median),
        reference_relative_residual: reference.as_ref().map(|r| r.relative_residual),
        reference_difference: reference.as_ref().map(|r| r.difference),
        stage_seconds: params.stages.then_some(stage_rows),
    })
}

/// Refuses a set-up this machine's memory cannot hold, naming the method and its sizes.
fn check_memory(params: &PscBenchParams, levels: usize, on_gpu: bool) -> Result<()> {
    let Some(available) = crate::sys::available_memory() else {
        return Ok(());
    };
    let (c, e) = class_counts(params.element, params.n, params.n0);
    let unknowns = (params.n - 1) * (params.n - 1);
    // On a GPU the host holds the right-hand sides, the solution and what checks them.
    let host_vectors = if on_gpu { 4.0 } else { HOST_SOLVE_VECTORS };
    let needed = estimated_bytes(
        params.method,
        unknowns,
        (c, e),
        levels,
        params.nrhs,
        host_vectors,
    );
    if needed > available as f64 {
        let hint = match params.method {
            PscMethod::M3 => "a larger --n0 or a smaller --nrhs",
            PscMethod::M1 | PscMethod::M2 => {
                "--method m3 (nothing of size |E|²), a larger --n0 or a smaller --nrhs"
            }
        };
        return Err(Error::InvalidInput(format!(
            "{} at h = 1/{}, h0 = 1/{} (|C| = {c}, |E| = {e}, {unknowns} unknowns × {} right-hand sides) needs about {:.1} GiB of memory, but only {:.1} GiB are available; use {hint}",
            params.method,
            params.n,
            params.n0,
            params.nrhs,
            needed / 2f64.powi(30),
            available as f64 / 2f64.powi(30),
        )));
    }
    Ok(())
}

/// A row per precision, coupling and block width (`params`' own three ignored) after one
/// set-up (or cache load), each handed to `row` as soon as it is measured; the set-up
/// seconds are reported in every row.
pub fn bench_psc(
    params: &PscBenchParams,
    precisions: &[Precision],
    couplings: &[Coupling],
    widths: &[usize],
    mut row: impl FnMut(PscBenchResult),
) -> Result<()> {
    let levels = refinement_levels(params.n, params.n0)?;
    if widths.contains(&0) || widths.is_empty() || precisions.is_empty() || couplings.is_empty() {
        return Err(Error::InvalidInput(
            "--nrhs, --precision and --coupling need at least one value, and --nrhs values of at least 1"
                .into(),
        ));
    }
    let widest = PscBenchParams {
        nrhs: *widths.iter().max().expect("not empty"),
        ..params.clone()
    };
    // The device first: a missing GPU is said before minutes of set-up.
    let device = cuda_device(params.backend)?;
    check_memory(&widest, levels, device.is_some())?;
    // The set-up's dense inversions run on the GPU when there is one.
    let dense: &dyn DenseInverse = match &device {
        Some(gpu) => gpu,
        None => &OnHost,
    };
    let t = Instant::now();
    let (setup, from_cache) = match &params.cache_dir {
        Some(dir) => {
            let key = SetupKey::unit_square(params.element, params.n0, levels, params.method);
            let mesh = unit_square_refined(params.n0, levels, params.element)?;
            let cache = match &device {
                Some(gpu) => OperatorCache::new(dir).inverting_on(gpu.clone()),
                None => OperatorCache::new(dir),
            };
            let (setup, outcome) = cache.load_or_build(&key, &mesh, params.method)?;
            (
                setup,
                matches!(outcome, crate::psc::CacheOutcome::Loaded(_)),
            )
        }
        None => (
            PscSetup::new_inverting_on(params.element, params.n0, levels, params.method, dense)?,
            false,
        ),
    };
    let setup_seconds = t.elapsed().as_secs_f64();
    let lists = (precisions, couplings, widths);
    match &device {
        None => {
            let gemm = |p| gemm_gflops(p, params.gemm_size);
            let ceilings = Ceilings {
                bandwidth: "triad",
                gemm: &gemm,
                memory: &triad_gbs,
            };
            let rows = |p: &PscBenchParams| {
                run(
                    Cpu::new(),
                    ceilings.bandwidth,
                    p,
                    &setup,
                    setup_seconds,
                    from_cache,
                )
            };
            precision_groups(params, lists, &ceilings, rows, &mut row)
        }
        Some(dev) => {
            let gemm = |p| {
                let size = gemm_ceiling_size(GemmSite::Gpu, p, params.gemm_size);
                device_gemm_gflops(dev, p, size)
            };
            let memory = || device_copy_gbs(dev, 1 << 28);
            let ceilings = Ceilings {
                bandwidth: "device copy",
                gemm: &gemm,
                memory: &memory,
            };
            let rows = |p: &PscBenchParams| {
                run(
                    dev.clone(),
                    "device copy",
                    p,
                    &setup,
                    setup_seconds,
                    from_cache,
                )
            };
            precision_groups(params, lists, &ceilings, rows, &mut row)
        }
    }
}

/// The rows of each precision, the ceilings measured before and after them: the larger
/// counts (on a shared machine one measurement may fall into a slow phase).
fn precision_groups(
    params: &PscBenchParams,
    (precisions, couplings, widths): (&[Precision], &[Coupling], &[usize]),
    ceilings: &Ceilings<'_>,
    run: impl Fn(&PscBenchParams) -> Result<PscBenchResult>,
    row: &mut impl FnMut(PscBenchResult),
) -> Result<()> {
    for &precision in precisions {
        let before = ceilings.measure(precision);
        let results = couplings
            .iter()
            .flat_map(|&coupling| widths.iter().map(move |&nrhs| (coupling, nrhs)))
            .map(|(coupling, nrhs)| {
                run(&PscBenchParams {
                    precision,
                    coupling,
                    nrhs,
                    ..params.clone()
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let after = ceilings.measure(precision);
        let measured = Measured {
            gemm: before.gemm.max(after.gemm),
            memory: before.memory.max(after.memory),
        };
        for mut result in results {
            result.against(measured);
            row(result);
        }
    }
    Ok(())
}

/// Prints one result as a table or one JSON object.
pub fn print(r: &PscBenchResult, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string(r).expect("plain numbers serialise")
        );
        return;
    }
    println!(
        "{} {} h = 1/{}, h0 = 1/{}, {} right-hand side(s), {}, {} coupling, on {}",
        r.method, r.element, r.n, r.n0, r.nrhs, r.precision, r.coupling, r.device
    );
    let source = if r.setup_from_cache {
        "loaded from cache"
    } else {
        "computed"
    };
    println!("  set-up            {:.3} s ({source})", r.setup_seconds);
    let peak = r.peak_memory_bytes.map_or("unknown".to_string(), |b| {
        format!("{:.2} GiB", b as f64 / 2f64.powi(30))
    });
    println!(
        "  memory            operators {:.1} MiB, process peak {peak}",
        r.operator_bytes as f64 / 1048576.0
    );
    let what = match r.refine_steps {
        Some(steps) => format!(
            " (PSC-IR: {steps} refinement steps, each one {} apply)",
            r.method
        ),
        None => String::new(),
    };
    println!(
        "  solve             {:.4} s best, {:.4} s median{what}, data on the device",
        r.solve_seconds, r.solve_seconds_median
    );
    println!(
        "  transfers         {:.3e} s to write the block and read the solution back",
        r.transfer_seconds
    );
    for (target, seconds, steps) in [
        ("1e-6", r.seconds_to_1e6, r.steps_to_1e6),
        ("1e-10", r.seconds_to_1e10, r.steps_to_1e10),
    ] {
        if let (Some(seconds), Some(steps)) = (seconds, steps) {
            println!(
                "  to residual {target:<6} {seconds:.4} s ({steps} refinement steps; the last timed solve)"
            );
        }
    }
    if let (Some(it), Some(rtol)) = (r.cg_iterations, r.cg_rtol) {
        println!("  CG                {it} block iterations in all (each apply to {rtol:.0e})");
    }
    if let Some(stages) = &r.stage_seconds {
        let total: f64 = stages.iter().map(|s| s.seconds).sum();
        println!(
            "  stages            measured from marks in the device's queue; model: compulsory bytes at the {:.1} GB/s {}, flops at the {:.1} GFLOP/s GEMM peak",
            r.triad_gbs, r.bandwidth, r.gemm_peak_gflops
        );
        println!(
            "    {:<16}{:>11} {:>6} {:>11} {:>10} {:>11} {:>7}",
            "stage", "ms", "%", "MB", "GFLOP", "model ms", "model"
        );
        for s in stages {
            println!(
                "    {:<16}{:>11.3} {:>6.1} {:>11.1} {:>10.2} {:>11.3} {:>6.0}%",
                s.stage,
                s.seconds * 1e3,
                100.0 * s.seconds / total,
                s.bytes / 1e6,
                s.flops / 1e9,
                s.model_seconds * 1e3,
                100.0 * s.model_seconds / s.seconds
            );
        }
        let model: f64 = stages.iter().map(|s| s.model_seconds).sum();
        println!(
            "    {:<16}{:>11.3} {:>6.1} {:>11.1} {:>10.2} {:>11.3} {:>6.0}%",
            "all",
            total * 1e3,
            100.0,
            stages.iter().map(|s| s.bytes).sum::<f64>() / 1e6,
            stages.iter().map(|s| s.flops).sum::<f64>() / 1e9,
            model * 1e3,
            100.0 * model / total
        );
    }
    println!("  throughput        {:.2} MDof/s", r.mdofs);
    if r.method == PscMethod::M1.label() {
        println!(
            "  GFLOP/s           {:.1} by the formula of docs/mathematics.md §3, {:.1} counted",
            r.gflops, r.gflops_counted
        );
    } else {
        println!("  GFLOP/s           {:.1} counted", r.gflops_counted);
    }
    println!(
        "  GEMM peak         {:.1} GFLOP/s measured: {:.0}% of it",
        r.gemm_peak_gflops,
        100.0 * r.gemm_peak_fraction
    );
    println!(
        "  operator reads    {:.1} GB/s: {:.0}% of the {:.1} GB/s {}",
        r.operator_gbs,
        100.0 * r.triad_fraction,
        r.triad_gbs,
        r.bandwidth
    );
    println!(
        "  accuracy          relative residual {:.2e} (f64), relative L2 error {:.2e}",
        r.relative_residual, r.l2_error
    );
    if let (Some(factor), Some(best), Some(median), Some(residual), Some(difference)) = (
        r.reference_factor_seconds,
        r.reference_solve_seconds,
        r.reference_solve_seconds_median,
        r.reference_relative_residual,
        r.reference_difference,
    ) {
        println!(
            "  sparse Cholesky   solve {best:.4} s best, {median:.4} s median (factorisation {factor:.2} s, excluded): {:.2}× the method's time; relative residual {residual:.2e}; the method's solution differs by {difference:.2e} (relative, worst column)",
            best / r.solve_seconds
        );
    }
}

/// `tensorfem bench psc`: runs and prints a row per precision and block width.
pub fn report(a: &PscBenchArgs) -> Result<()> {
    let precisions: Vec<Precision> = a.precision.iter().map(|p| p.precision()).collect();
    let params = PscBenchParams {
        element: a.element.element(),
        n: a.n,
        n0: a.n0,
        nrhs: a.nrhs.first().copied().unwrap_or(1),
        precision: precisions.first().copied().unwrap_or(Precision::F32),
        method: a.method,
        coupling: a.coupling.first().copied().unwrap_or_default(),
        cg_rtol: a.cg_rtol,
        cache_dir: a.cache_dir.clone(),
        backend: a.backend,
        refine: a.refine.then_some(a.rtol),
        rtol: a.rtol,
        runs: a.runs as usize,
        reference: a.reference,
        stages: a.stages,
        gemm_size: a.gemm_size,
    };
    bench_psc(&params, &precisions, &a.coupling, &a.nrhs, |r| {
        print(&r, a.json)
    })
}
