//! `tensorfem run` and `tensorfem info`: the one place that decides the backend a rank runs
//! on and dispatches a config to its driver — a single Poisson run ([`single`]), a Stokes
//! run ([`stokes`]) or a campaign (`crate::campaign`, with the operators of [`solver`]).

pub mod operators;
pub mod single;
pub mod stokes;

use std::io::Write;
use std::path::PathBuf;

use crate::campaign::signals;
use crate::comm::Comm;
use crate::config::{self, RunConfig};
use crate::device::{cuda, Backend};
use crate::error::{Error, Result};
use crate::io::h5::{GIT_REVISION, VERSION};
use crate::sys::{cores, hostname};

/// Whether the job a config describes is finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    Complete,
    /// A campaign stopped by a signal with batches left: run the same command again.
    Stopped,
}

/// Runs the job a config describes (the embedded quickstart without one) and prints its
/// summary on rank 0. A campaign resumes from its journal unless `fresh`. Expects
/// `campaign::signals::install` to have run at start-up: only a campaign stops between
/// batches on SIGTERM/SIGUSR1; other runs get the signals' default action back here.
pub fn dispatch(
    path: Option<PathBuf>,
    fresh: bool,
    retry_failed: bool,
    comm: &dyn Comm,
) -> Result<Finished> {
    let config = match &path {
        Some(p) => config::load(p)?,
        None => {
            log::info!("no config given: running the embedded quickstart (inputs/quickstart.toml)");
            config::quickstart()?
        }
    };
    if config.campaign.is_none() {
        signals::terminate_on_signal();
    }
    let backend = select_backend(&config, comm)?;
    if config.campaign.is_some() {
        let operators = operators::CampaignOperators { backend };
        let start = match (fresh, retry_failed) {
            (true, _) => crate::campaign::Start::Fresh,
            (false, true) => crate::campaign::Start::RetryFailed,
            (false, false) => crate::campaign::Start::Resume,
        };
        let outcome = crate::campaign::run(&config, &operators, comm, start)?;
        if let Some(summary) = outcome.summary {
            println!("{summary}");
        }
        if let Some(failed) = outcome.failed {
            return Err(Error::Verification(failed));
        }
        return Ok(if outcome.complete {
            Finished::Complete
        } else {
            Finished::Stopped
        });
    }
    if fresh || retry_failed {
        log::info!(
            "--fresh and --retry-failed apply to campaigns only (this config has no [campaign])"
        );
    }
    if let Some(spec) = &config.stokes {
        if let Some(summary) = stokes::run(&config, spec, &backend, comm)? {
            println!("{summary}");
        }
        return Ok(Finished::Complete);
    }
    if let Some(summary) = single::run(&config, &backend, comm)? {
        println!("{summary}");
    }
    Ok(Finished::Complete)
}

/// The backend this rank runs on: the config's choice resolved against this machine's
/// devices and what the methods can run on (a campaign: all its operators' methods).
fn select_backend(config: &RunConfig, comm: &dyn Comm) -> Result<Backend> {
    let methods: Vec<_> = match &config.campaign {
        Some(spec) => spec.operators.iter().map(|o| o.solver.method).collect(),
        None => vec![config.solver.method],
    };
    Backend::select(
        config.backend,
        &cuda::probe(),
        methods[0].name(),
        methods.iter().all(|m| m.has_cuda()),
        comm.local_rank(),
    )
}

/// `tensorfem info`: the version, this host's cores, the CUDA driver and devices, MPI and
/// every rank's binding.
pub fn info(comm: &dyn Comm) -> Result<()> {
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
        let _ = writeln!(out, "CPU    {} cores on {}", cores(), hostname());
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
    Ok(())
}
