//! The `tensorfem` command: CLI → MPI init → logging → dispatch → exit code.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use tensorfem::campaign::signals;
use tensorfem::cli::{Cli, Command};
use tensorfem::comm::{Comm, MpiComm};
use tensorfem::{bench, psc, run, sys, Error};

/// mimalloc keeps freed memory for the next allocations where glibc returns large blocks to
/// the system at once: a campaign's batches then reuse their pages instead of faulting in
/// fresh ones (a fresh page costs microseconds on a VM; 40,000 faults → 9,000 in the
/// quickstart, CHANGELOG.md). See also [`sys::keep_freed_memory`].
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    sys::keep_freed_memory();
    let cli = Cli::parse();
    // Before MPI start-up: a pre-emption signal that arrives while the ranks start is
    // remembered (campaigns stop after it; other runs terminate, see run::dispatch).
    if matches!(cli.command, Command::Run { .. }) {
        if let Err(e) = signals::install() {
            eprintln!("error: installing the SIGTERM/SIGUSR1 handlers: {e}");
            return ExitCode::FAILURE;
        }
    }
    let comm = match MpiComm::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    init_logging(&comm);
    set_threads_per_rank(&comm);

    let result = match &cli.command {
        Command::Run {
            config,
            fresh,
            retry_failed,
        } => match run::dispatch(config.clone(), *fresh, *retry_failed, &comm) {
            Ok(run::Finished::Stopped) => return ExitCode::from(signals::EXIT_STOPPED),
            other => other.map(|_| ()),
        },
        Command::Info => run::info(&comm),
        // Single-process tools: under mpirun, rank 0 alone runs them.
        _ if !comm.is_root() => Ok(()),
        Command::PscInfo(a) if a.choosing_coarse_levels() => psc::report_coarse_levels(
            a.levels.unwrap_or(0),
            a.bc.conditions(),
            a.nrhs,
            a.steps,
            a.json,
        ),
        Command::PscInfo(a) => a
            .mesh()
            .and_then(|mesh| psc::report_info(&mesh, a.bc.conditions(), a.whole, a.json)),
        Command::Mesh(a) => export_mesh(a),
        Command::Bench(command) => bench::dispatch(command),
        Command::Kernels(a) => {
            tensorfem::device::cuda::compile::report(&a.arch, a.ptx_dir.as_deref())
        }
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

/// Log lines carry the rank when there are several.
fn init_logging(comm: &dyn Comm) {
    let (rank, size) = (comm.rank(), comm.size());
    let (filter, warning) = sys::log_filter(std::env::var("RUST_LOG").ok().as_deref());
    env_logger::Builder::new()
        .parse_filters(&filter)
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
    if let Some(warning) = warning {
        log::warn!("{warning}");
    }
}

/// Ranks sharing a host share its cores, unless RAYON_NUM_THREADS says otherwise (a value
/// that is not a positive integer is warned about and ignored).
fn set_threads_per_rank(comm: &dyn Comm) {
    let threads = (sys::cores() / comm.local_size().max(1)).max(1);
    if let Some(given) = std::env::var_os("RAYON_NUM_THREADS") {
        match given.to_str().and_then(|g| g.trim().parse::<usize>().ok()) {
            Some(n) if n > 0 => return,
            _ => log::warn!(
                "RAYON_NUM_THREADS = {given:?} is not a positive integer: using {threads} thread(s) per rank (the host's cores divided by its ranks)"
            ),
        }
    }
    if let Err(e) = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
    {
        log::warn!("could not size the thread pool to {threads} threads: {e}");
    }
}

/// `tensorfem mesh`: builds the mesh asked for and writes it with its sidecar.
fn export_mesh(args: &tensorfem::cli::MeshArgs) -> Result<(), Error> {
    let spec = args.spec()?;
    let summary = tensorfem::io::schema::export_mesh(&spec, &args.output)?;
    println!("{summary}");
    Ok(())
}
