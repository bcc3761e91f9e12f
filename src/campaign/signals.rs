//! SIGTERM and SIGUSR1 (SLURM pre-emption, `scancel --signal`, `sbatch --signal`) ask a
//! campaign to stop: every rank finishes the batch it is solving (or hands back the one it
//! was just given), journals it, and exits with [`EXIT_STOPPED`]; running the same command
//! again resumes.
//!
//! `tensorfem run` installs the handlers before anything else (MPI start-up, reading the
//! config), so a pre-emption that arrives while a rank is still starting is remembered, not
//! fatal. Runs that are not campaigns give the signals their default action back
//! ([`terminate_on_signal`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGTERM, SIGUSR1};

/// The exit status of a campaign stopped by a signal before its last batch (EX_TEMPFAIL of
/// sysexits.h: "try again later"); 0 means the campaign is complete.
pub const EXIT_STOPPED: u8 = 75;

struct Flags {
    stop: Arc<AtomicBool>,
    /// When set, the signals terminate the process as they would without a handler.
    terminate: Arc<AtomicBool>,
}

static FLAGS: OnceLock<Flags> = OnceLock::new();

/// Installs the handlers (once per process): from now on the signals request a stop.
pub fn install() -> std::io::Result<()> {
    if FLAGS.get().is_some() {
        return Ok(());
    }
    let flags = Flags {
        stop: Arc::new(AtomicBool::new(false)),
        terminate: Arc::new(AtomicBool::new(false)),
    };
    for signal in [SIGTERM, SIGUSR1] {
        // Registered first, so it runs before the stop flag is set.
        signal_hook::flag::register_conditional_default(signal, Arc::clone(&flags.terminate))?;
        signal_hook::flag::register(signal, Arc::clone(&flags.stop))?;
    }
    let _ = FLAGS.set(flags);
    Ok(())
}

/// Whether a stop was requested.
pub fn stop_requested() -> bool {
    FLAGS.get().is_some_and(|f| f.stop.load(Ordering::Relaxed))
}

/// For runs that cannot stop between batches (single and Stokes runs): the signals
/// terminate the process from now on, and one that arrived during start-up does so now.
pub fn terminate_on_signal() {
    if let Some(flags) = FLAGS.get() {
        flags.terminate.store(true, Ordering::Relaxed);
        if flags.stop.load(Ordering::Relaxed) {
            let _ = signal_hook::low_level::emulate_default_handler(SIGTERM);
        }
    }
}
