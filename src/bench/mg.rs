//! `tensorfem bench mg`: mixed-precision multigrid solves side by side in one process —
//! refinement iterations, time to solution, MDof/s, the bytes the kernels moved as GB/s and
//! as a fraction of the memory bandwidth measured in the same run (the triad on the CPU,
//! the device copy on a GPU), and the f64 residual and L2 error of the answer.

use std::time::Instant;

use serde::Serialize;

use super::{cuda_device, device_copy_gbs, triad_gbs};
use crate::cli::MgBenchArgs;
use crate::device::{BackendChoice, Cpu, MatrixStorage, MultigridDevice, StageTime};
use crate::error::{Error, Result};
use crate::fem::{assemble_loads, assemble_stiffness, l2_error, Manufactured};
use crate::mesh::{unit_cube, unit_square, Element, Mesh};
use crate::mg::{
    check_levels, default_levels, random_initial_guess, schedule_name, MgInfo, MgParams, MgSolve,
    Multigrid, Smoother, StopParams, Variant,
};
use crate::numeric::nrm2;
use crate::precision::Precision;
use crate::sparse;

/// One solver of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MgBenchSolver {
    /// A precision schedule inside f64 iterative refinement.
    Refined(Variant),
    /// V-cycles on the f64 system itself, no refinement: the baseline.
    PlainF64,
}

impl MgBenchSolver {
    pub const NAMES: &'static str =
        "D_MG, H_MG, DSH_MG, HSD_MG, F64_MG (stand-alone f64 multigrid), a comma-separated list of them, or all";

    pub fn name(self) -> &'static str {
        match self {
            MgBenchSolver::Refined(v) => v.name(),
            MgBenchSolver::PlainF64 => "F64_MG",
        }
    }

    /// A comma-separated list of names, or "all" for every solver; D_MG first when it is
    /// listed (the others are compared with it), each solver once.
    pub fn parse_list(s: &str) -> Result<Vec<MgBenchSolver>, String> {
        if s.trim().eq_ignore_ascii_case("all") {
            let mut all: Vec<_> = Variant::ALL
                .into_iter()
                .map(MgBenchSolver::Refined)
                .collect();
            all.push(MgBenchSolver::PlainF64);
            return Ok(all);
        }
        let mut solvers = Vec::new();
        for name in s.split(',').map(str::trim) {
            let solver = if name.eq_ignore_ascii_case("F64_MG") {
                MgBenchSolver::PlainF64
            } else {
                name.parse::<Variant>()
                    .map(MgBenchSolver::Refined)
                    .map_err(|_| format!("unknown variant '{name}' (allowed: {})", Self::NAMES))?
            };
            if !solvers.contains(&solver) {
                solvers.push(solver);
            }
        }
        // Stable: the rest keep the order given.
        solvers.sort_by_key(|&v| v != MgBenchSolver::Refined(Variant::DMg));
        Ok(solvers)
    }
}

#[derive(Clone, Debug)]
pub struct MgBenchParams {
    pub dim: usize,
    /// Cells per direction of the finest mesh.
    pub n: usize,
    pub solvers: Vec<MgBenchSolver>,
    pub k: u32,
    pub nrhs: usize,
    pub smoother: Smoother,
    pub smoother_name: String,
    /// None: [`default_levels`].
    pub levels: Option<usize>,
    pub residual_scaling: bool,
    /// How the levels store their matrices.
    pub storage: MatrixStorage,
    /// Flexible CG around the cycle instead of plain refinement (refined solvers).
    pub krylov: bool,
    /// Timed solves per solver; the fastest counts.
    pub repeats: usize,
    /// Relative stopping tolerance (None: the source's absolute 1e-9, docs/mathematics.md §4).
    pub rtol: Option<f64>,
    pub rhs: MgBenchRhs,
    /// Where the solves run (cpu, cuda, auto).
    pub backend: BackendChoice,
    /// Time the stages of the cycles.
    pub stages: bool,
}

/// The right-hand sides of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MgBenchRhs {
    /// The manufactured solution's loads in every column, from a random initial guess
    /// (docs/mathematics.md §4); the L2 error is measured.
    Manufactured,
    /// Standard normal loads (one seed per column), from zero: no exact solution.
    Random,
}

impl MgBenchRhs {
    fn parse(s: &str) -> Result<Self> {
        match s {
            "manufactured" => Ok(MgBenchRhs::Manufactured),
            "random" => Ok(MgBenchRhs::Random),
            _ => Err(Error::InvalidInput(format!(
                "--rhs {s} (allowed: manufactured, random)"
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            MgBenchRhs::Manufactured => "manufactured",
            MgBenchRhs::Random => "random",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct MgBenchResult {
    pub variant: &'static str,
    /// Precisions finest → coarsest.
    pub schedule: String,
    pub dim: usize,
    pub n: usize,
    pub levels: usize,
    pub nrhs: usize,
    pub k: u32,
    pub smoother: String,
    /// The level matrices as stored: "grid" (no column indices on the uniform-grid levels)
    /// or "indexed" (ELLPACK with 32-bit indices; always on the CPU).
    pub storage: &'static str,
    /// Flexible CG around the cycle (refined solvers only).
    pub krylov: bool,
    pub unknowns: usize,
    /// Refinement steps (V-cycles) of the slowest column.
    pub iterations: usize,
    pub setup_seconds: f64,
    /// Time to solution (best of the repeats), from the initial residual to the last update.
    pub seconds: f64,
    pub seconds_per_iteration: f64,
    pub mdofs: f64,
    /// Bytes of stored matrices and vectors the kernels read and wrote, per solve.
    pub bytes: f64,
    pub gbs: f64,
    /// The memory ceiling the fraction is of: the triad on the CPU, the device copy (read +
    /// write) on a GPU, measured in the same run.
    pub bandwidth: &'static str,
    pub triad_gbs: f64,
    pub triad_fraction: f64,
    /// D_MG's time to solution / this one's, when D_MG ran in the same process.
    pub speedup_vs_d_mg: Option<f64>,
    /// The right-hand sides: manufactured or random.
    pub rhs: &'static str,
    /// The relative stopping tolerance (None: absolute 1e-9).
    pub rtol: Option<f64>,
    /// Largest f64 ‖b − A u‖₂ over the columns (the true residual, recomputed).
    pub residual: f64,
    /// Largest ‖b − A u‖₂ / ‖b‖₂ over the columns.
    pub relative_residual: f64,
    /// Largest L2 error ‖u − u_h‖ over the columns (manufactured right-hand sides only).
    pub l2_error: Option<f64>,
    /// Seconds per stage of the timed solve (with --stages), then what the cycles' stages
    /// leave of the time to solution ("between cycles": the refinement's own f64 work).
    pub stage_seconds: Option<Vec<StageTime>>,
    /// The device the solves ran on.
    pub device: String,
    /// How f16 is computed on this machine.
    pub note: &'static str,
}

/// `len` standard normal values, reproducible from `seed` (ChaCha8 and the Box–Muller
/// transform: the same stream on every machine).
pub(super) fn normal_loads(len: usize, seed: u64) -> Vec<f64> {
    let uniform = random_initial_guess(len + len % 2, seed);
    uniform
        .chunks_exact(2)
        .flat_map(|pair| {
            let radius = (-2.0 * (1.0 - pair[0]).ln()).sqrt();
            let angle = 2.0 * std::f64::consts::PI * pair[1];
            [radius * angle.cos(), radius * angle.sin()]
        })
        .take(len)
        .collect()
}

const F16_NOTE: &str = "f16 levels store f16 and compute in f32";
const SEED: u64 = 20;

/// Runs every solver of `params` on one assembled problem, in order.
pub fn bench_mg(params: &MgBenchParams) -> Result<Vec<MgBenchResult>> {
    if params.nrhs == 0 || params.repeats == 0 {
        return Err(Error::InvalidInput(
            "bench mg needs nrhs ≥ 1 and repeats ≥ 1".into(),
        ));
    }
    let levels = params.levels.unwrap_or_else(|| default_levels(params.n));
    check_levels(params.n, levels)?;
    match cuda_device(params.backend)? {
        None => on_mesh(&Cpu::new(), "triad", params, levels),
        Some(gpu) => on_mesh(&gpu, "device copy", params, levels),
    }
}

/// The comparison on `dev` for the mesh of `params`.
fn on_mesh<Dev: MultigridDevice>(
    dev: &Dev,
    bandwidth: &'static str,
    params: &MgBenchParams,
    levels: usize,
) -> Result<Vec<MgBenchResult>> {
    match params.dim {
        2 => run(
            dev,
            bandwidth,
            params,
            levels,
            &unit_square(params.n, Element::Q1)?,
        ),
        3 => run(dev, bandwidth, params, levels, &unit_cube(params.n)?),
        d => Err(Error::InvalidInput(format!(
            "bench mg: --dim {d} (allowed: 2, 3)"
        ))),
    }
}

fn run<Dev: MultigridDevice, const D: usize>(
    dev: &Dev,
    bandwidth: &'static str,
    params: &MgBenchParams,
    levels: usize,
    mesh: &Mesh<D>,
) -> Result<Vec<MgBenchResult>> {
    let exact = Manufactured::new(params.k, D);
    let (matrix, dofs) = assemble_stiffness(mesh)?;
    let n = dofs.len();
    let (b, initial) = match params.rhs {
        MgBenchRhs::Manufactured => {
            let column = assemble_loads(mesh, &dofs, &[|x: &[f64]| exact.f(x)]);
            let b: Vec<f64> = (0..params.nrhs)
                .flat_map(|_| column.iter().copied())
                .collect();
            let initial: Vec<f64> = (0..params.nrhs)
                .flat_map(|c| random_initial_guess(n, SEED + c as u64))
                .collect();
            (b, initial)
        }
        MgBenchRhs::Random => {
            let b = (0..params.nrhs)
                .flat_map(|c| normal_loads(n, SEED + c as u64))
                .collect();
            (b, vec![0.0; n * params.nrhs])
        }
    };
    let stop = match params.rtol {
        Some(rtol) => StopParams {
            rtol,
            atol: 0.0,
            max_iterations: 100,
        },
        None => StopParams {
            rtol: 0.0,
            atol: 1e-9,
            max_iterations: 100,
        },
    };
    let ceiling = || match bandwidth {
        "triad" => triad_gbs(),
        _ => device_copy_gbs(dev, 1 << 28),
    };
    let mut triad = ceiling();
    let mut results: Vec<MgBenchResult> = Vec::new();
    for &solver in &params.solvers {
        let schedule = match solver {
            MgBenchSolver::Refined(v) => v.schedule(levels),
            MgBenchSolver::PlainF64 => vec![Precision::F64; levels],
        };
        let mg_params = MgParams {
            schedule: schedule.clone(),
            smoother: params.smoother,
            base_tolerance: 1e-4,
            residual_scaling: params.residual_scaling,
            storage: params.storage,
        };
        let solve = match solver {
            MgBenchSolver::Refined(_) => MgSolve::Refined,
            MgBenchSolver::PlainF64 => MgSolve::Plain,
        };
        // Set-up includes the blocks for this many columns: the timed solves allocate nothing.
        let t = Instant::now();
        let mut mg = Multigrid::new(dev, D, params.n, &matrix, mg_params)?;
        mg.set_krylov(params.krylov);
        mg.prepare_solve(solve, params.nrhs, stop.max_iterations)?;
        let setup_seconds = t.elapsed().as_secs_f64();
        mg.time_stages(params.stages);
        let mut best: Option<(f64, MgInfo, Vec<f64>, Vec<StageTime>)> = None;
        for _ in 0..params.repeats {
            // Device-resident time: the blocks are loaded before the clock starts and the
            // solution read back after it stops.
            let mut u = initial.clone();
            mg.load(&b, &u, params.nrhs)?;
            dev.synchronize()?;
            let t = Instant::now();
            let info = dev.run(|| mg.solve_loaded(solve, stop))?;
            dev.synchronize()?;
            let seconds = t.elapsed().as_secs_f64();
            mg.unload(&mut u)?;
            // The cycles' stages, then the refinement's own between them.
            let mut stages = mg.take_stage_seconds()?;
            stages.extend(mg.take_refinement_stages()?.into_iter().map(|t| StageTime {
                stage: t.stage,
                seconds: t.seconds,
            }));
            if best.as_ref().is_none_or(|(s, ..)| seconds < *s) {
                best = Some((seconds, info, u, stages));
            }
        }
        let (seconds, info, u, mut stages) = best.expect("repeats ≥ 1");
        if params.stages {
            let cycles: f64 = stages.iter().map(|t| t.seconds).sum();
            stages.push(StageTime {
                stage: "between cycles",
                seconds: seconds - cycles,
            });
        }
        drop(mg);
        let mut r = vec![0.0; n];
        let (mut residual, mut relative, mut l2) = (0.0f64, 0.0f64, 0.0f64);
        for c in 0..params.nrhs {
            let (x, b) = (&u[c * n..(c + 1) * n], &b[c * n..(c + 1) * n]);
            sparse::residual(&matrix, b, x, &mut r);
            residual = residual.max(nrm2(&r));
            relative = relative.max(nrm2(&r) / nrm2(b));
            if params.rhs == MgBenchRhs::Manufactured {
                l2 = l2.max(l2_error(mesh, &dofs, x, |p| exact.u(p)));
            }
        }
        let iterations = info.max_iterations();
        let gbs = info.bytes / seconds / 1e9;
        triad = triad.max(ceiling());
        let has_f16 = schedule.contains(&Precision::F16);
        results.push(MgBenchResult {
            variant: solver.name(),
            schedule: schedule_name(&schedule),
            dim: D,
            n: params.n,
            levels,
            nrhs: params.nrhs,
            k: params.k,
            smoother: params.smoother_name.clone(),
            storage: match params.storage {
                MatrixStorage::Grid if dev.reads_grid_rows() => MatrixStorage::Grid.name(),
                _ => MatrixStorage::Indexed.name(),
            },
            krylov: params.krylov && solver != MgBenchSolver::PlainF64,
            unknowns: n,
            iterations,
            setup_seconds,
            seconds,
            seconds_per_iteration: seconds / iterations.max(1) as f64,
            mdofs: (n * params.nrhs) as f64 / seconds / 1e6,
            bytes: info.bytes,
            gbs,
            bandwidth,
            triad_gbs: 0.0,
            triad_fraction: 0.0,
            speedup_vs_d_mg: None,
            rhs: params.rhs.name(),
            rtol: params.rtol,
            residual,
            relative_residual: relative,
            l2_error: (params.rhs == MgBenchRhs::Manufactured).then_some(l2),
            stage_seconds: params.stages.then_some(stages),
            device: dev.name(),
            note: if has_f16 { F16_NOTE } else { "" },
        });
    }
    let d_mg = results
        .iter()
        .find(|r| r.variant == Variant::DMg.name())
        .map(|r| r.seconds);
    for r in &mut results {
        r.triad_gbs = triad;
        r.triad_fraction = r.gbs / triad;
        r.speedup_vs_d_mg = d_mg.map(|d| d / r.seconds);
    }
    Ok(results)
}

/// `tensorfem bench mg`: checks the arguments, runs, prints.
pub fn report(a: &MgBenchArgs) -> Result<()> {
    if a.kernels {
        let timings =
            super::mg_kernels::bench_mg_kernels(a.backend, a.dim, a.n, a.nrhs, a.storage)?;
        super::mg_kernels::print_kernels(&timings, a.json);
        return Ok(());
    }
    let solvers = MgBenchSolver::parse_list(&a.variant).map_err(Error::InvalidInput)?;
    let (smoother, smoother_name) = Smoother::by_name(&a.smoother)
        .and_then(|s| s.adjusted(&a.smoother, a.omega, a.pre_smoothing, a.post_smoothing))
        .map_err(Error::InvalidInput)?;
    if a.k == 0 {
        return Err(Error::InvalidInput(
            "--k 0: the wave number must be ≥ 1".into(),
        ));
    }
    if let Some(rtol) = a.rtol {
        if !(rtol > 0.0 && rtol < 1.0) {
            return Err(Error::InvalidInput(format!(
                "--rtol {rtol}: a relative tolerance is in (0, 1)"
            )));
        }
    }
    let rhs = MgBenchRhs::parse(&a.rhs)?;
    let results = bench_mg(&MgBenchParams {
        dim: a.dim,
        n: a.n,
        solvers,
        k: a.k,
        nrhs: a.nrhs,
        smoother,
        smoother_name,
        levels: a.levels,
        residual_scaling: !a.no_residual_scaling,
        storage: a.storage,
        krylov: a.krylov,
        repeats: a.repeats,
        rtol: a.rtol,
        rhs,
        backend: a.backend,
        stages: a.stages,
    })?;
    print(&results, a.json);
    Ok(())
}

/// Prints the results as a table or one JSON object per line.
pub fn print(results: &[MgBenchResult], json: bool) {
    if json {
        for r in results {
            println!(
                "{}",
                serde_json::to_string(r).expect("plain numbers serialise")
            );
        }
        return;
    }
    let Some(first) = results.first() else { return };
    let problem = match first.rhs {
        "random" => "random normal loads from zero".to_string(),
        _ => format!("manufactured loads, k = {}", first.k),
    };
    let stop = match first.rtol {
        Some(rtol) => format!("‖r‖ ≤ {rtol:e}·‖b‖"),
        None => "‖r‖ ≤ 1e-9".to_string(),
    };
    println!(
        "multigrid on {}, {}D Q1, n = {} ({} unknowns), {} levels, {} right-hand side(s), {problem}, {stop}, smoother {}, {} level matrices{}",
        first.device, first.dim, first.n, first.unknowns, first.levels, first.nrhs, first.smoother, first.storage,
        if results.iter().any(|r| r.krylov) { ", flexible CG around the cycle" } else { "" }
    );
    println!(
        "  {:<8} {:>5} {:>9} {:>9} {:>9} {:>8} {:>7} {:>8} {:>10} {:>10} {:>10}  schedule (fine → coarse)",
        "variant",
        "iter",
        "time [s]",
        "s/iter",
        "MDof/s",
        "GB/s",
        if first.bandwidth == "triad" { "triad" } else { "copy" },
        "speedup",
        "residual",
        "relative",
        "L2 error"
    );
    for r in results {
        let speedup = r
            .speedup_vs_d_mg
            .map_or("-".to_string(), |s| format!("{s:.2}×"));
        let l2 = r.l2_error.map_or("-".to_string(), |e| format!("{e:.3e}"));
        println!(
            "  {:<8} {:>5} {:>9.3} {:>9.4} {:>9.2} {:>8.2} {:>6.0}% {:>8} {:>10.2e} {:>10.2e} {:>10}  {}",
            r.variant,
            r.iterations,
            r.seconds,
            r.seconds_per_iteration,
            r.mdofs,
            r.gbs,
            100.0 * r.triad_fraction,
            speedup,
            r.residual,
            r.relative_residual,
            l2,
            r.schedule
        );
    }
    println!(
        "  {} bandwidth {:.1} GB/s (best of the measurements in this run); set-up [s]: {}",
        first.bandwidth,
        first.triad_gbs,
        results
            .iter()
            .map(|r| format!("{} {:.2}", r.variant, r.setup_seconds))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for r in results {
        if let Some(stages) = &r.stage_seconds {
            let split: Vec<String> = stages
                .iter()
                .map(|t| {
                    let share = 100.0 * t.seconds / r.seconds;
                    format!("{} {:.4} s ({share:.0}%)", t.stage, t.seconds)
                })
                .collect();
            println!("  {} stages: {}", r.variant, split.join(", "));
        }
    }
    if results.iter().any(|r| !r.note.is_empty()) {
        println!("  note: {F16_NOTE}");
    }
}

#[cfg(test)]
mod tests {
    use super::MgBenchSolver;
    use crate::mg::Variant;

    #[test]
    fn variant_lists_put_d_mg_first_and_name_each_solver_once() {
        let parsed = MgBenchSolver::parse_list("H_MG, F64_MG,D_MG,H_MG").unwrap();
        assert_eq!(
            parsed,
            [
                MgBenchSolver::Refined(Variant::DMg),
                MgBenchSolver::Refined(Variant::HMg),
                MgBenchSolver::PlainF64
            ]
        );
        assert_eq!(MgBenchSolver::parse_list("all").unwrap().len(), 5);
        let bad = MgBenchSolver::parse_list("H_MG,Q_MG").unwrap_err();
        assert!(bad.contains("'Q_MG'"), "{bad}");
    }
}
