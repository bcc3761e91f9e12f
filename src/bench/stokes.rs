//! `bench stokes`: the Stokes preconditioners side by side in one process on the same
//! manufactured problem (docs/mathematics.md §1; published figures §8.3): FGMRES
//! iterations, time to solution, time per element and per iteration, errors, and the
//! solve's time by stage (operator, preconditioner, Krylov) from device marks; plus the f64
//! operator product's bandwidth as a fraction of the memory ceiling measured in the same
//! run (the triad on the CPU, the device copy on a GPU: the kernels are bound by memory
//! traffic, every row stores its stencil).

use std::time::Instant;

use serde::Serialize;

use super::machine::device_copy_gbs;
use super::{cuda_device, time_runs, triad_gbs};
use crate::cli::StokesArgs;
use crate::device::clock::StageTime;
use crate::device::{BackendChoice, Block, Cpu, Layout, StokesDevice};
use crate::error::{Error, Result};
use crate::linalg::FgmresParams;
use crate::linalg::LinOp;
use crate::precision::Precision;
use crate::stokes::multigrid::mesh_hierarchy;
use crate::stokes::{
    check_memory, solve_timing_stages, Preconditioner, StokesProblem, StokesSpec, StokesSystem,
};

/// What to run.
#[derive(Clone, Debug)]
pub struct StokesBenchParams {
    pub n: usize,
    pub preconditioners: Vec<Preconditioner>,
    pub precision: Precision,
    pub fgmres: FgmresParams,
    /// Timed solves per preconditioner; the fastest counts.
    pub repeats: usize,
    /// Where the solves run.
    pub backend: BackendChoice,
}

/// One preconditioner's measurement.
#[derive(Clone, Debug, Serialize)]
pub struct StokesBenchResult {
    pub precond: String,
    pub precision: String,
    pub n: usize,
    pub unknowns: usize,
    pub iterations: usize,
    /// FGMRES time to solution (set-up excluded), fastest of the repeats.
    pub seconds: f64,
    pub ms_per_element: f64,
    pub ms_per_iteration: f64,
    /// That solve's seconds by stage: the f64 operator, the preconditioner, and the Krylov
    /// work around them (orthogonalisation, updates, the pressure projection).
    pub stage_seconds: Vec<StageTime>,
    pub setup_seconds: f64,
    pub velocity_l2_error: f64,
    pub pressure_l2_error: f64,
    pub relative_residual: f64,
    pub preconditioner_mib: f64,
    /// Bandwidth of one f64 product A x (stored coefficients and vectors moved per second).
    pub matvec_gbs: f64,
    /// The memory ceiling `triad_gbs` measures: the triad on the CPU, the device copy (read
    /// + write) on a GPU, in the same run.
    pub bandwidth: &'static str,
    pub triad_gbs: f64,
    /// The device the solves ran on.
    pub device: String,
}

/// Parses a comma-separated list of preconditioner names, or "all".
pub fn parse_preconditioners(list: &str) -> std::result::Result<Vec<Preconditioner>, String> {
    let names: Vec<&str> = if list == "all" {
        Preconditioner::NAMES.to_vec()
    } else {
        list.split(',').map(str::trim).collect()
    };
    names.into_iter().map(Preconditioner::by_name).collect()
}

pub fn bench_stokes(params: &StokesBenchParams) -> Result<Vec<StokesBenchResult>> {
    // Refuse impossible sizes before allocating anything.
    mesh_hierarchy(params.n)?;
    for &p in &params.preconditioners {
        check_memory(&spec_of(params, p))?;
    }
    match cuda_device(params.backend)? {
        None => run(&Cpu::new(), "triad", params),
        Some(gpu) => run(&gpu, "device copy", params),
    }
}

fn spec_of(params: &StokesBenchParams, preconditioner: Preconditioner) -> StokesSpec {
    StokesSpec {
        n: params.n,
        preconditioner,
        precision: params.precision,
        fgmres: params.fgmres,
    }
}

fn run<D: StokesDevice>(
    dev: &D,
    bandwidth: &'static str,
    params: &StokesBenchParams,
) -> Result<Vec<StokesBenchResult>> {
    let ceiling = match bandwidth {
        "triad" => triad_gbs(),
        _ => device_copy_gbs(dev, 1 << 28),
    };
    // The f64 operator product FGMRES applies once per iteration.
    let problem = StokesProblem::manufactured(params.n);
    let g = problem.operator.grid;
    let mut system = StokesSystem::new(dev, &problem.operator)?;
    let rhs = Block::from_f64(
        dev,
        &problem.rhs,
        g.flow_len(),
        1,
        Precision::F64,
        Layout::ColMajor,
    )?;
    let mut y = Block::vector(dev, g.flow_len(), Precision::F64)?;
    let mut failure = None;
    let (best, _) = time_runs(3, 0.5, || {
        if let Err(e) = dev.run(|| system.apply(&rhs, &mut y).and_then(|()| dev.synchronize())) {
            failure = Some(e);
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let matvec_gbs = system.cost(1).bytes / best / 1e9;
    drop((problem, system, rhs, y));
    let cells = (params.n * params.n) as f64;
    let mut results = Vec::new();
    for &preconditioner in &params.preconditioners {
        let spec = spec_of(params, preconditioner);
        let mut fastest = None::<crate::stokes::StokesSolution>;
        for _ in 0..params.repeats.max(1) {
            let t = Instant::now();
            let s = dev.run(|| solve_timing_stages(dev, &spec, true))?;
            log::info!(
                "{}: {} iterations in {:.3} s (whole run {:.3} s)",
                preconditioner.name(),
                s.info.iterations,
                s.solve_seconds,
                t.elapsed().as_secs_f64()
            );
            if fastest
                .as_ref()
                .is_none_or(|f| s.solve_seconds < f.solve_seconds)
            {
                fastest = Some(s);
            }
        }
        let s = fastest.expect("at least one repeat");
        results.push(StokesBenchResult {
            precond: preconditioner.name().to_string(),
            precision: params.precision.name().to_string(),
            n: params.n,
            unknowns: s.grid.unknowns(),
            iterations: s.info.iterations,
            seconds: s.solve_seconds,
            ms_per_element: s.solve_seconds * 1e3 / cells,
            ms_per_iteration: s.solve_seconds * 1e3 / s.info.iterations.max(1) as f64,
            stage_seconds: s.stage_seconds,
            setup_seconds: s.setup_seconds,
            velocity_l2_error: s.velocity_l2_error,
            pressure_l2_error: s.pressure_l2_error,
            relative_residual: s.info.relative_residual,
            preconditioner_mib: s.preconditioner_bytes as f64 / 1048576.0,
            matvec_gbs,
            bandwidth,
            triad_gbs: ceiling,
            device: dev.name(),
        });
    }
    Ok(results)
}

/// Applies --t, --jacobi-steps and --jacobi-weight to a Schur-complement relaxation.
fn override_schur(params: &mut crate::stokes::SchurParams, a: &StokesArgs) {
    params.t = a.t.unwrap_or(params.t);
    params.jacobi_steps = a.jacobi_steps.unwrap_or(params.jacobi_steps);
    params.jacobi_weight = a.jacobi_weight.unwrap_or(params.jacobi_weight);
}

/// `tensorfem bench stokes`: checks the arguments, runs, prints.
pub fn report(a: &StokesArgs) -> Result<()> {
    use crate::stokes::Relaxation;
    let mut preconditioners = parse_preconditioners(&a.precond).map_err(Error::InvalidInput)?;
    // Parameter overrides (for tuning) apply to the relaxations that take them.
    for p in &mut preconditioners {
        match p {
            Preconditioner::Multigrid(Relaxation::Vanka { omega, .. }) => {
                *omega = a.omega.unwrap_or(*omega);
            }
            Preconditioner::Multigrid(Relaxation::BraessSarazin(params)) => {
                params.omega = a.omega.unwrap_or(params.omega);
                override_schur(params, a);
            }
            Preconditioner::Multigrid(Relaxation::SchurUzawa(params)) => override_schur(params, a),
            Preconditioner::BlockTriangular => {}
        }
    }
    if !(a.rtol > 0.0 && a.rtol < 1.0) || a.restart == 0 {
        return Err(Error::InvalidInput(format!(
            "--rtol {} --restart {}: need 0 < rtol < 1 and restart ≥ 1",
            a.rtol, a.restart
        )));
    }
    if a.precision.precision() == Precision::Tf32 {
        return Err(Error::InvalidInput(format!(
            "--precision tf32: {}",
            crate::config::TF32_IS_PSC
        )));
    }
    let results = bench_stokes(&StokesBenchParams {
        n: a.n,
        preconditioners,
        precision: a.precision.precision(),
        fgmres: FgmresParams {
            restart: a.restart,
            rtol: a.rtol,
            atol: 0.0,
            max_iterations: 1000,
        },
        repeats: a.repeats,
        backend: a.backend,
    })?;
    if a.json {
        for r in &results {
            println!(
                "{}",
                serde_json::to_string(r).expect("plain numbers serialise")
            );
        }
        return Ok(());
    }
    let Some(first) = results.first() else {
        return Ok(());
    };
    println!(
        "Stokes Q2-Q1, n = {} ({} unknowns), FGMRES({}) to {:.0e}, preconditioner in {}, on {}",
        first.n, first.unknowns, a.restart, a.rtol, first.precision, first.device
    );
    println!(
        "  {:<17} {:>5} {:>9} {:>9} {:>11} {:>9} {:>10} {:>10} {:>10} {:>9}",
        "precond",
        "iter",
        "solve [s]",
        "ms/iter",
        "ms/element",
        "setup [s]",
        "residual",
        "u L2 err",
        "p L2 err",
        "MiB"
    );
    for r in &results {
        println!(
            "  {:<17} {:>5} {:>9.3} {:>9.2} {:>11.5} {:>9.3} {:>10.2e} {:>10.3e} {:>10.3e} {:>9.1}",
            r.precond,
            r.iterations,
            r.seconds,
            r.ms_per_iteration,
            r.ms_per_element,
            r.setup_seconds,
            r.relative_residual,
            r.velocity_l2_error,
            r.pressure_l2_error,
            r.preconditioner_mib
        );
    }
    println!("  time by stage [s]:");
    for r in &results {
        let stages: Vec<String> = r
            .stage_seconds
            .iter()
            .map(|t| format!("{} {:.4}", t.stage, t.seconds))
            .collect();
        println!("    {:<17} {}", r.precond, stages.join("   "));
    }
    println!(
        "  f64 operator product: {:.1} GB/s = {:.0}% of the {} bandwidth measured in this run ({:.1} GB/s)",
        first.matvec_gbs,
        100.0 * first.matvec_gbs / first.triad_gbs,
        first.bandwidth,
        first.triad_gbs
    );
    Ok(())
}
