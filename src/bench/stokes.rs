//! `bench stokes`: the Stokes preconditioners side by side in one process on the same
//! manufactured problem (SPEC §4.3): FGMRES iterations, time to solution, time per
//! element and per iteration, errors; plus the f64 operator product's bandwidth as a
//! fraction of the triad bandwidth measured in the same run (the kernels are bound by
//! memory traffic: every row stores its stencil).

use std::time::Instant;

use serde::Serialize;

use super::{time_runs, triad_gbs};
use crate::error::Result;
use crate::krylov::FgmresParams;
use crate::precision::Precision;
use crate::stokes::multigrid::mesh_hierarchy;
use crate::stokes::{check_memory, solve, Preconditioner, StokesProblem, StokesSpec};

/// What to run.
#[derive(Clone, Debug)]
pub struct StokesBenchParams {
    pub n: usize,
    pub preconditioners: Vec<Preconditioner>,
    pub precision: Precision,
    pub fgmres: FgmresParams,
    /// Timed solves per preconditioner; the fastest counts.
    pub repeats: usize,
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
    pub setup_seconds: f64,
    pub velocity_l2_error: f64,
    pub pressure_l2_error: f64,
    pub relative_residual: f64,
    pub preconditioner_mib: f64,
    /// Bandwidth of one f64 product A x (stored coefficients and vectors moved per second).
    pub matvec_gbs: f64,
    pub triad_gbs: f64,
}

/// Parses a comma-separated list of preconditioner names, or "all".
pub fn parse_preconditioners(list: &str) -> std::result::Result<Vec<Preconditioner>, String> {
    let names: Vec<&str> = if list == "all" {
        vec![
            "vanka",
            "vanka-tuned",
            "braess-sarazin",
            "schur-uzawa",
            "block-triangular",
        ]
    } else {
        list.split(',').map(str::trim).collect()
    };
    names.into_iter().map(Preconditioner::by_name).collect()
}

pub fn bench_stokes(params: &StokesBenchParams) -> Result<Vec<StokesBenchResult>> {
    let spec_of = |preconditioner| StokesSpec {
        n: params.n,
        preconditioner,
        precision: params.precision,
        fgmres: params.fgmres,
    };
    // Refuse impossible sizes before allocating anything.
    mesh_hierarchy(params.n)?;
    for &p in &params.preconditioners {
        check_memory(&spec_of(p))?;
    }
    let triad = triad_gbs();
    // The f64 operator product FGMRES applies once per iteration.
    let problem = StokesProblem::manufactured(params.n);
    let g = problem.operator.grid;
    let mut y = vec![0.0; g.flow_len()];
    let (best, _) = time_runs(3, 0.5, || problem.operator.apply(&problem.rhs, &mut y));
    let matvec_bytes = problem.operator.bytes() as f64 + 2.0 * 8.0 * g.flow_len() as f64;
    let matvec_gbs = matvec_bytes / best / 1e9;
    drop(problem);
    let cells = (params.n * params.n) as f64;
    let mut results = Vec::new();
    for &preconditioner in &params.preconditioners {
        let spec = spec_of(preconditioner);
        let mut fastest = None::<crate::stokes::StokesSolution>;
        for _ in 0..params.repeats.max(1) {
            let t = Instant::now();
            let s = solve(&spec)?;
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
            setup_seconds: s.setup_seconds,
            velocity_l2_error: s.velocity_l2_error,
            pressure_l2_error: s.pressure_l2_error,
            relative_residual: s.info.relative_residual,
            preconditioner_mib: s.preconditioner_bytes as f64 / 1048576.0,
            matvec_gbs,
            triad_gbs: triad,
        });
    }
    Ok(results)
}
