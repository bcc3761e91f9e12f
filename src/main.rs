//! The `tensorfem` command: CLI → MPI init → config → dispatch → exit code.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use tensorfem::backend::cuda;
use tensorfem::bench::{
    self, MgBenchParams, MgBenchResult, MgBenchSolver, PscBenchParams, PscBenchResult,
};
use tensorfem::comm::{hostname, Comm, MpiComm};
use tensorfem::config;
use tensorfem::io::h5::{GIT_REVISION, VERSION};
use tensorfem::mesh::Element;
use tensorfem::mg::Smoother;
use tensorfem::precision::Precision;
use tensorfem::psc::{refinement_levels, PscInfo, PscSetup};
use tensorfem::{campaign, job, Error};

#[derive(Parser)]
#[command(
    name = "tensorfem",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("TENSORFEM_GIT_REVISION"), ")"),
    about = "Finite-element Poisson solvers for many right-hand sides (PSC on Tensor Cores, mixed-precision multigrid)",
    long_about = "Finite-element Poisson solvers for many right-hand sides at once.\n\n\
        Launch alone or under mpirun/srun (one rank per GPU). Logging: RUST_LOG=info|debug; \
        threads per rank: RAYON_NUM_THREADS (default: the host's cores divided by the ranks on it).\n\
        Documentation: docs/configuration.md, docs/hdf5.md."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the job a config describes (the embedded quickstart when no CONFIG is given). A
    /// config with [campaign] resumes from its journal unless --fresh.
    Run {
        /// TOML config (see docs/configuration.md and inputs/).
        config: Option<PathBuf>,
        /// Campaigns: discard the journal, batch files and campaign.h5 of an earlier run in
        /// campaign.directory and start over (the operator cache stays).
        #[arg(long)]
        fresh: bool,
    },
    /// Print the version and the backends found: CPU cores, CUDA driver and devices, MPI.
    Info,
    /// PSC figures of SPEC §2.6 for the unit square: |C|, |E|, |I|, κ(C_i), κ(Π), storage
    /// of C_i⁻¹ and Π⁻¹ relative to the FEM matrix (and whole-matrix κ with --whole).
    PscInfo {
        /// Cells per direction of the fine mesh (h = 1/n).
        #[arg(long)]
        n: usize,
        /// Cells per direction of the coarse mesh (h0 = 1/n0); n = n0·2^j.
        #[arg(long)]
        n0: usize,
        #[arg(long, value_enum, default_value_t = ElementArg::Q1)]
        element: ElementArg,
        /// Also the spectral condition numbers of A, SᵀAS and the prehandled matrix (Lanczos).
        #[arg(long)]
        whole: bool,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Benchmarks: measure, print a table (or JSON with --json).
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// This machine's ceilings: triad bandwidth and GEMM peak in f64, f32 and f16.
    Machine {
        /// Print one JSON object (keys triad_gbs, gemm_gflops_f64, gemm_gflops_f32, gemm_gflops_f16).
        #[arg(long)]
        json: bool,
    },
    /// PSC-M1 on a block of right-hand sides: set-up and solve time, MDof/s, GFLOP/s and
    /// fractions of the machine's ceilings measured in the same run, accuracy.
    Psc {
        /// Cells per direction of the fine mesh (h = 1/n).
        #[arg(long)]
        n: usize,
        /// Cells per direction of the coarse mesh (h0 = 1/n0); n = n0·2^j. Flop-optimal: h0 ≈ √h.
        #[arg(long)]
        n0: usize,
        /// Right-hand sides solved together (manufactured, k = 1…8 cycled).
        #[arg(long, default_value_t = 1)]
        nrhs: usize,
        /// Working precision of the stored operators.
        #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
        precision: PrecisionArg,
        #[arg(long, value_enum, default_value_t = ElementArg::Q1)]
        element: ElementArg,
        /// Load (or fill) the operator cache here instead of timing a fresh set-up.
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Print one JSON object (keys n, n0, nrhs, precision, setup_seconds, solve_seconds,
        /// mdofs, gflops, gemm_peak_fraction, relative_residual, l2_error, and more).
        #[arg(long)]
        json: bool,
    },
    /// Mixed-precision multigrid (SPEC §3) side by side in one process: IR iterations, time
    /// to solution, time per iteration, MDof/s, GB/s moved (fraction of the triad measured in
    /// the same run), speedup over D_MG, f64 residual and L2 error.
    Mg {
        /// 2 (unit square) or 3 (unit cube).
        #[arg(long, default_value_t = 2)]
        dim: usize,
        /// Cells per direction of the finest mesh (4096 → 4097² nodes).
        #[arg(long)]
        n: usize,
        /// D_MG, H_MG, DSH_MG, HSD_MG, F64_MG (stand-alone f64 multigrid, no refinement), or all.
        #[arg(long, default_value = "all")]
        variant: String,
        /// Wave number of the manufactured solution.
        #[arg(long, default_value_t = 1)]
        k: u32,
        /// Right-hand sides solved together.
        #[arg(long, default_value_t = 1)]
        nrhs: usize,
        /// jacobi (ω = 2/3, 3+3 steps) or richardson (ω = 0.3, 4+4 steps).
        #[arg(long, default_value = "jacobi")]
        smoother: String,
        /// Levels (default: coarsen to 8 cells per direction).
        #[arg(long)]
        levels: Option<usize>,
        /// Cast residuals into low precision without scaling them (to see them fail).
        #[arg(long)]
        no_residual_scaling: bool,
        /// Timed solves per variant; the fastest counts.
        #[arg(long, default_value_t = 1)]
        repeats: usize,
        /// One JSON object per variant, one per line (keys iterations, seconds,
        /// seconds_per_iteration, mdofs, gbs, residual, l2_error, variant, n, dim, and more).
        #[arg(long)]
        json: bool,
    },
    /// Q2-Q1 Stokes (SPEC §4): FGMRES with each preconditioner side by side in one process:
    /// iterations, time to solution, ms per element and per iteration, velocity and pressure
    /// L2 errors.
    Stokes(StokesArgs),
}

#[derive(clap::Args)]
struct StokesArgs {
    /// Cells per direction (n = n0·2^j, n0 ≤ 8).
    #[arg(long)]
    n: usize,
    /// vanka, vanka-tuned, braess-sarazin, schur-uzawa, block-triangular; a
    /// comma-separated list, or all.
    #[arg(long, default_value = "vanka-tuned,braess-sarazin")]
    precond: String,
    /// Precision of the preconditioner (f16: stored in f16, computed in f32); FGMRES is f64.
    #[arg(long, value_enum, default_value_t = PrecisionArg::F64)]
    precision: PrecisionArg,
    /// FGMRES restart length.
    #[arg(long, default_value_t = 30)]
    restart: usize,
    /// Relative residual to reach.
    #[arg(long, default_value_t = 1e-8)]
    tolerance: f64,
    /// Vanka or Braess-Sarazin damping ω (default: the tuned value).
    #[arg(long)]
    omega: Option<f64>,
    /// Braess-Sarazin / Schur-Uzawa: L ≈ t·D.
    #[arg(long)]
    t: Option<f64>,
    /// Braess-Sarazin / Schur-Uzawa: Jacobi steps on the Schur complement.
    #[arg(long)]
    jacobi_steps: Option<usize>,
    /// Braess-Sarazin / Schur-Uzawa: Jacobi weight on the Schur complement.
    #[arg(long)]
    jacobi_weight: Option<f64>,
    /// Timed solves per preconditioner; the fastest counts.
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// One JSON object per preconditioner, one per line (keys iterations, seconds,
    /// ms_per_element, velocity_l2_error, pressure_l2_error, relative_residual, precond,
    /// n, and more).
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ElementArg {
    Q1,
    P1,
}

impl ElementArg {
    fn element(self) -> Element {
        match self {
            ElementArg::Q1 => Element::Q1,
            ElementArg::P1 => Element::P1,
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PrecisionArg {
    F16,
    F32,
    F64,
}

impl PrecisionArg {
    fn precision(self) -> Precision {
        match self {
            PrecisionArg::F16 => Precision::F16,
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F64 => Precision::F64,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let comm = match MpiComm::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    init_logging(&comm);
    set_threads_per_rank(&comm);

    let result = match cli.command {
        Command::Run { config, fresh } => run(config, fresh, &comm),
        Command::Info => {
            info(&comm);
            Ok(())
        }
        // Single-process tools: under mpirun, rank 0 alone runs them.
        _ if !comm.is_root() => Ok(()),
        Command::PscInfo {
            n,
            n0,
            element,
            whole,
            json,
        } => psc_info(n, n0, element.element(), whole, json),
        Command::Bench(BenchCommand::Machine { json }) => {
            bench_machine(json);
            Ok(())
        }
        Command::Bench(BenchCommand::Psc {
            n,
            n0,
            nrhs,
            precision,
            element,
            cache_dir,
            json,
        }) => bench::bench_psc(&PscBenchParams {
            element: element.element(),
            n,
            n0,
            nrhs,
            precision: precision.precision(),
            cache_dir,
        })
        .map(|r| print_psc_bench(&r, json)),
        Command::Bench(BenchCommand::Mg {
            dim,
            n,
            variant,
            k,
            nrhs,
            smoother,
            levels,
            no_residual_scaling,
            repeats,
            json,
        }) => bench_mg(
            dim,
            n,
            &variant,
            k,
            nrhs,
            &smoother,
            levels,
            !no_residual_scaling,
            repeats,
            json,
        ),
        Command::Bench(BenchCommand::Stokes(args)) => bench_stokes(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Config mistakes are the same on every rank: say them once.
            if comm.is_root() || !matches!(e, Error::Config { .. } | Error::Elsewhere { .. }) {
                let prefix = if comm.size() > 1 {
                    format!("[rank {}] ", comm.rank())
                } else {
                    String::new()
                };
                eprintln!("{prefix}error: {e}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(path: Option<PathBuf>, fresh: bool, comm: &dyn Comm) -> tensorfem::Result<()> {
    let config = match &path {
        Some(p) => config::load(p)?,
        None => {
            log::info!("no config given: running the embedded quickstart (inputs/quickstart.toml)");
            config::parse(config::QUICKSTART, "embedded quickstart")?
        }
    };
    if let Some(spec) = &config.stokes {
        if let Some(summary) = tensorfem::stokes::output::run(&config, spec, comm)? {
            println!("{summary}");
        }
        return Ok(());
    }
    if config.campaign.is_some() {
        if let Some(summary) = campaign::run(&config, comm, fresh)? {
            println!("{summary}");
        }
        return Ok(());
    }
    if fresh {
        log::info!("--fresh applies to campaigns only (this config has no [campaign])");
    }
    if let Some(summary) = job::run(&config, comm)? {
        println!("{summary}");
    }
    Ok(())
}

fn info(comm: &dyn Comm) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let line = format!(
        "rank {:>4}  host {}  local rank {} of {}  threads {}",
        comm.rank(),
        hostname(),
        comm.local_rank(),
        comm.local_size(),
        rayon::current_num_threads()
    );
    let lines = comm.gather_strings(&line);
    let probe = cuda::probe();
    if let Some(lines) = lines {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "tensorfem {VERSION} (git {GIT_REVISION})");
        let _ = writeln!(out, "CPU    {cores} cores on {}", hostname());
        let _ = writeln!(out, "CUDA   {probe}");
        for d in probe.devices() {
            let _ = writeln!(
                out,
                "       device {}: {} (compute capability {}.{}, {:.1} GiB)",
                d.ordinal,
                d.name,
                d.compute_capability.0,
                d.compute_capability.1,
                d.total_memory_bytes as f64 / 2f64.powi(30)
            );
        }
        let _ = writeln!(out, "MPI    size {} ({})", comm.size(), comm.library());
        for l in lines {
            let _ = writeln!(out, "       {l}");
        }
    }
}

fn psc_info(
    n: usize,
    n0: usize,
    element: Element,
    whole: bool,
    json: bool,
) -> tensorfem::Result<()> {
    let setup = PscSetup::new(element, n0, refinement_levels(n, n0)?)?;
    let info = PscInfo::compute(&setup, whole)?;
    if json {
        let mut object = serde_json::json!({
            "n": info.n, "n0": info.n0, "element": info.element,
            "C": info.c, "E": info.e, "I": info.i, "groups": info.groups,
            "kappa_Ci": info.kappa_ci, "kappa_Pi": info.kappa_pi,
            "nnz_Ci_inv_over_fem": info.nnz_ci_inv_over_fem,
            "nnz_Pi_inv_over_fem": info.nnz_pi_inv_over_fem,
        });
        if let Some(w) = info.whole {
            object["kappa_A"] = w.kappa_a.into();
            object["kappa_hb"] = w.kappa_hb.into();
            object["kappa_prehandled"] = w.kappa_prehandled.into();
        }
        println!("{object}");
    } else {
        println!(
            "PSC on the unit square, {}, h = 1/{}, h0 = 1/{}",
            info.element, info.n, info.n0
        );
        println!(
            "  |C| = {}, |E| = {}, |I| = {}, {} group(s) of identical macro elements",
            info.c, info.e, info.i, info.groups
        );
        println!("  κ(C_i) (max over groups)      {:.1}", info.kappa_ci);
        println!("  κ(Π)                          {:.1}", info.kappa_pi);
        println!(
            "  NNZ(C_i⁻¹)/NNZ_FEM (summed)   {:.3}",
            info.nnz_ci_inv_over_fem
        );
        println!(
            "  NNZ(Π⁻¹)/NNZ_FEM              {:.2}",
            info.nnz_pi_inv_over_fem
        );
        if let Some(w) = info.whole {
            println!(
                "  κ(A), κ(SᵀAS), κ(prehandled)  {:.0}, {:.1}, {:.1}",
                w.kappa_a, w.kappa_hb, w.kappa_prehandled
            );
        }
    }
    Ok(())
}

fn bench_machine(json: bool) {
    let m = bench::measure_machine();
    if json {
        println!(
            "{}",
            serde_json::to_string(&m).expect("plain numbers serialise")
        );
    } else {
        println!("machine ceilings ({} threads)", m.threads);
        println!("  triad bandwidth       {:8.1} GB/s", m.triad_gbs);
        println!("  GEMM f64              {:8.1} GFLOP/s", m.gemm_gflops_f64);
        println!("  GEMM f32              {:8.1} GFLOP/s", m.gemm_gflops_f32);
        println!(
            "  GEMM f16 operands     {:8.1} GFLOP/s (f32 arithmetic)",
            m.gemm_gflops_f16
        );
    }
}

fn print_psc_bench(r: &PscBenchResult, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string(r).expect("plain numbers serialise")
        );
        return;
    }
    println!(
        "PSC-M1 {} h = 1/{}, h0 = 1/{}, {} right-hand side(s), {}",
        r.element, r.n, r.n0, r.nrhs, r.precision
    );
    let source = if r.setup_from_cache {
        "loaded from cache"
    } else {
        "computed"
    };
    println!("  set-up            {:.3} s ({source})", r.setup_seconds);
    println!(
        "  solve             {:.4} s best, {:.4} s median",
        r.solve_seconds, r.solve_seconds_median
    );
    println!("  throughput        {:.2} MDof/s", r.mdofs);
    println!(
        "  GFLOP/s           {:.1} by the SPEC §2.5 formula, {:.1} counted",
        r.gflops, r.gflops_counted
    );
    println!(
        "  GEMM peak         {:.1} GFLOP/s measured: {:.0}% of it",
        r.gemm_peak_gflops,
        100.0 * r.gemm_peak_fraction
    );
    println!(
        "  operator reads    {:.1} GB/s: {:.0}% of the {:.1} GB/s triad",
        r.operator_gbs,
        100.0 * r.triad_fraction,
        r.triad_gbs
    );
    println!(
        "  accuracy          relative residual {:.2e} (f64), relative L2 error {:.2e}",
        r.relative_residual, r.l2_error
    );
}

#[allow(clippy::too_many_arguments)]
fn bench_mg(
    dim: usize,
    n: usize,
    variant: &str,
    k: u32,
    nrhs: usize,
    smoother: &str,
    levels: Option<usize>,
    residual_scaling: bool,
    repeats: usize,
    json: bool,
) -> tensorfem::Result<()> {
    let solvers = MgBenchSolver::parse_list(variant).map_err(Error::InvalidInput)?;
    let smoother_params = Smoother::by_name(smoother).map_err(Error::InvalidInput)?;
    if k == 0 {
        return Err(Error::InvalidInput(
            "--k 0: the wave number must be ≥ 1".into(),
        ));
    }
    let results = bench::bench_mg(&MgBenchParams {
        dim,
        n,
        solvers,
        k,
        nrhs,
        smoother: smoother_params,
        smoother_name: smoother.to_string(),
        levels,
        residual_scaling,
        repeats,
    })?;
    print_mg_bench(&results, json);
    Ok(())
}

fn print_mg_bench(results: &[MgBenchResult], json: bool) {
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
    println!(
        "multigrid, {}D Q1, n = {} ({} unknowns), {} levels, {} right-hand side(s), k = {}, smoother {}",
        first.dim, first.n, first.unknowns, first.levels, first.nrhs, first.k, first.smoother
    );
    println!(
        "  {:<8} {:>5} {:>9} {:>9} {:>9} {:>8} {:>7} {:>8} {:>10} {:>10}  schedule (fine → coarse)",
        "variant",
        "iter",
        "time [s]",
        "s/iter",
        "MDof/s",
        "GB/s",
        "triad",
        "speedup",
        "residual",
        "L2 error"
    );
    for r in results {
        let speedup = r
            .speedup_vs_d_mg
            .map_or("-".to_string(), |s| format!("{s:.2}×"));
        println!(
            "  {:<8} {:>5} {:>9.3} {:>9.4} {:>9.2} {:>8.2} {:>6.0}% {:>8} {:>10.2e} {:>10.3e}  {}",
            r.variant,
            r.iterations,
            r.seconds,
            r.seconds_per_iteration,
            r.mdofs,
            r.gbs,
            100.0 * r.triad_fraction,
            speedup,
            r.residual,
            r.l2_error,
            r.schedule
        );
    }
    println!(
        "  triad bandwidth {:.1} GB/s (best of the measurements in this run); set-up [s]: {}",
        first.triad_gbs,
        results
            .iter()
            .map(|r| format!("{} {:.2}", r.variant, r.setup_seconds))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if results.iter().any(|r| !r.note.is_empty()) {
        println!("  note: f16 levels store f16 and compute in f32 on the CPU");
    }
}

/// Log lines carry the rank when there are several.
fn init_logging(comm: &dyn Comm) {
    let (rank, size) = (comm.rank(), comm.size());
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format(move |buf, record| {
            if size > 1 {
                writeln!(
                    buf,
                    "[{} rank {rank}/{size}] {}",
                    record.level(),
                    record.args()
                )
            } else {
                writeln!(buf, "[{}] {}", record.level(), record.args())
            }
        })
        .init();
}

/// Ranks sharing a host share its cores, unless RAYON_NUM_THREADS says otherwise.
fn set_threads_per_rank(comm: &dyn Comm) {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / comm.local_size().max(1)).max(1);
    if let Err(e) = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
    {
        log::warn!("could not size the thread pool to {threads} threads: {e}");
    }
}

/// Applies --t, --jacobi-steps and --jacobi-weight to a Schur-complement relaxation.
fn override_schur(params: &mut tensorfem::stokes::SchurParams, a: &StokesArgs) {
    params.t = a.t.unwrap_or(params.t);
    params.jacobi_steps = a.jacobi_steps.unwrap_or(params.jacobi_steps);
    params.jacobi_weight = a.jacobi_weight.unwrap_or(params.jacobi_weight);
}

fn bench_stokes(a: &StokesArgs) -> tensorfem::Result<()> {
    use tensorfem::stokes::{Preconditioner, Relaxation};
    let mut preconditioners =
        bench::parse_preconditioners(&a.precond).map_err(Error::InvalidInput)?;
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
    if !(a.tolerance > 0.0 && a.tolerance < 1.0) || a.restart == 0 {
        return Err(Error::InvalidInput(format!(
            "--tolerance {} --restart {}: need 0 < tolerance < 1 and restart ≥ 1",
            a.tolerance, a.restart
        )));
    }
    let results = bench::bench_stokes(&bench::StokesBenchParams {
        n: a.n,
        preconditioners,
        precision: a.precision.precision(),
        fgmres: tensorfem::krylov::FgmresParams {
            restart: a.restart,
            tolerance: a.tolerance,
            max_iterations: 1000,
        },
        repeats: a.repeats,
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
        "Stokes Q2-Q1, n = {} ({} unknowns), FGMRES({}) to {:.0e}, preconditioner in {}",
        first.n, first.unknowns, a.restart, a.tolerance, first.precision
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
    println!(
        "  f64 operator product: {:.1} GB/s = {:.0}% of the triad bandwidth measured in this run ({:.1} GB/s)",
        first.matvec_gbs,
        100.0 * first.matvec_gbs / first.triad_gbs,
        first.triad_gbs
    );
    Ok(())
}
