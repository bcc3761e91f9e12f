//! SIGTERM and SIGUSR1 (SLURM pre-emption, `scancel --signal`, `sbatch --signal`) ask a
//! campaign to stop: every rank finishes the batch it is solving (or hands back the one it
//! was just given), journals it, and exits 0; running the same command again resumes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Installs the handlers (once per process).
pub fn install() -> std::io::Result<()> {
    let flag = STOP.get_or_init(|| Arc::new(AtomicBool::new(false)));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGUSR1] {
        signal_hook::flag::register(signal, Arc::clone(flag))?;
    }
    Ok(())
}

/// Whether a stop was requested.
pub fn stop_requested() -> bool {
    STOP.get().is_some_and(|f| f.load(Ordering::Relaxed))
}
