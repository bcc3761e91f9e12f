//! The `tensorfem` command: CLI → MPI init → config → dispatch → exit code.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use tensorfem::backend::cuda;
use tensorfem::comm::{hostname, Comm, MpiComm};
use tensorfem::config;
use tensorfem::io::h5::{GIT_REVISION, VERSION};
use tensorfem::{job, Error};

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
    /// Run the job a config describes (the embedded quickstart when no CONFIG is given).
    Run {
        /// TOML config (see docs/configuration.md and inputs/).
        config: Option<PathBuf>,
    },
    /// Print the version and the backends found: CPU cores, CUDA driver and devices, MPI.
    Info,
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
        Command::Run { config } => run(config, &comm),
        Command::Info => {
            info(&comm);
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Config mistakes are the same on every rank: say them once.
            if comm.is_root() || !matches!(e, Error::Config { .. }) {
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

fn run(path: Option<PathBuf>, comm: &dyn Comm) -> tensorfem::Result<()> {
    let config = match &path {
        Some(p) => config::load(p)?,
        None => {
            log::info!("no config given: running the embedded quickstart (inputs/quickstart.toml)");
            config::parse(config::QUICKSTART, "embedded quickstart")?
        }
    };
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
