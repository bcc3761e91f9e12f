//! Benchmarks: commands that measure, print a table, and (with `--json`) one JSON object.
//! Tests never assert on time; these do the measuring.

mod machine;
mod mg;
mod mg_kernels;
mod psc;
mod solve;
mod stokes;

pub use machine::{
    device_copy_gbs, device_gemm_gflops, gemm_gflops, measure_device, measure_machine, triad_gbs,
    DeviceCeilings, MachineCeilings,
};
pub use mg::{bench_mg, MgBenchParams, MgBenchResult, MgBenchSolver};
pub use mg_kernels::{bench_mg_kernels, MgKernelTiming};
pub use psc::{bench_psc, PscBenchParams, PscBenchResult};
pub use solve::SolveBenchResult;
pub use stokes::{bench_stokes, parse_preconditioners, StokesBenchParams, StokesBenchResult};

use std::time::Instant;

use crate::cli::BenchCommand;
use crate::device::cuda::Cuda;
use crate::device::Backend;
use crate::device::BackendChoice;
use crate::error::Result;

/// Runs a `tensorfem bench` command and prints its table (or JSON).
pub fn dispatch(command: &BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Machine(a) => match cuda_device(a.backend)? {
            Some(dev) => {
                machine::report_device(&dev, a.gemm_size, a.json);
                Ok(())
            }
            None => {
                machine::report(a.gemm_size, a.json);
                Ok(())
            }
        },
        BenchCommand::Psc(a) => psc::report(a),
        BenchCommand::Mg(a) => mg::report(a),
        BenchCommand::Solve(a) => solve::report(a),
        BenchCommand::Stokes(a) => stokes::report(a),
    }
}

/// The CUDA device a benchmark runs on: None for the CPU (`--backend cpu`, or `auto` on a
/// machine without a GPU), the first device for `cuda` (an error where there is none).
pub fn cuda_device(choice: BackendChoice) -> Result<Option<Cuda>> {
    match Backend::select(choice, &crate::device::cuda::probe(), "bench", true, 0)? {
        Backend::Cpu { .. } => Ok(None),
        Backend::Cuda(info) => Cuda::shared(&info).map(Some),
    }
}

/// The time a stage's `cost` takes at `gemm_gflops` and `bandwidth_gbs`, whichever bounds
/// it: max(bytes / bandwidth, flops / GEMM peak).
fn model_seconds(cost: crate::linalg::Cost, gemm_gflops: f64, bandwidth_gbs: f64) -> f64 {
    (cost.bytes / (bandwidth_gbs * 1e9)).max(cost.flops / (gemm_gflops * 1e9))
}

/// Best (smallest) and median seconds of `f` over at least `min_runs` runs, running until
/// `min_seconds` have passed (after one untimed warm-up run).
pub fn time_runs(min_runs: usize, min_seconds: f64, mut f: impl FnMut()) -> (f64, f64) {
    f();
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < min_runs || start.elapsed().as_secs_f64() < min_seconds {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
        if times.len() >= 1000 {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    (times[0], times[times.len() / 2])
}
