//! SIGTERM, SIGUSR1 and SIGINT (SLURM pre-emption, `scancel --signal`, `sbatch --signal`,
//! Ctrl-C) ask a campaign to stop: every rank finishes the batch it is solving (or hands
//! back the one it was just given), journals it, and exits with [`EXIT_STOPPED`]; running
//! the same command again resumes. A second Ctrl-C stops at once (the journal keeps every
//! batch finished so far); repeated SIGTERM/SIGUSR1 only repeat the request (job scripts
//! resend them until the step ends).
//!
//! `tensorfem run` installs the handlers before anything else (MPI start-up, reading the
//! config), so a pre-emption that arrives while a rank is still starting is remembered, not
//! fatal. Runs that are not campaigns cannot stop between batches: for them a stop signal
//! ends the process at once with [`EXIT_STOPPED`] and a message ([`terminate_on_signal`]);
//! their output is written under a temporary name, so nothing half-written is left under
//! the final one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};

/// The exit status of a run stopped by a signal (EX_TEMPFAIL of sysexits.h: "try again
/// later"); for a campaign, with batches left that the same command resumes.
pub const EXIT_STOPPED: u8 = 75;

struct Flags {
    stop: AtomicBool,
    /// When set, a stop signal ends the process (runs that are not campaigns).
    terminate: AtomicBool,
}

static FLAGS: OnceLock<Flags> = OnceLock::new();

fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT (Ctrl-C)",
        SIGTERM => "SIGTERM",
        SIGUSR1 => "SIGUSR1",
        _ => "a signal",
    }
}

/// Ends the process now with [`EXIT_STOPPED`], after saying why. `_exit` skips the
/// libraries' exit handlers, which could wait on a file another thread is writing.
fn stop_now(message: &str) -> ! {
    eprintln!("tensorfem: {message}");
    // SAFETY: _exit only ends the process; nothing of it runs afterwards.
    unsafe { libc::_exit(i32::from(EXIT_STOPPED)) }
}

/// What a stop signal does, on the thread that receives them.
fn handle(flags: &Flags, signal: i32) {
    let what = name(signal);
    if flags.terminate.load(Ordering::SeqCst) {
        stop_now(&format!(
            "stopped by {what} before the run finished; its output was not written (run it again)"
        ));
    }
    if flags.stop.swap(true, Ordering::SeqCst) {
        if signal == SIGINT {
            stop_now(&format!(
                "stopped at once by a second {what}: the batches finished so far are journaled; run the same command again to resume"
            ));
        }
        return;
    }
    eprintln!(
        "tensorfem: {what} received: finishing the batch in progress, then stopping{}",
        if signal == SIGINT {
            " (Ctrl-C again to stop at once)"
        } else {
            ""
        }
    );
}

/// Installs the handlers (once per process): from now on the signals request a stop.
pub fn install() -> std::io::Result<()> {
    if FLAGS.get().is_some() {
        return Ok(());
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGUSR1, SIGINT])?;
    let _ = FLAGS.set(Flags {
        stop: AtomicBool::new(false),
        terminate: AtomicBool::new(false),
    });
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let flags = FLAGS.get().expect("set before the thread starts");
            for signal in signals.forever() {
                handle(flags, signal);
            }
        })?;
    Ok(())
}

/// Whether a stop was requested.
pub fn stop_requested() -> bool {
    FLAGS.get().is_some_and(|f| f.stop.load(Ordering::SeqCst))
}

/// For runs that cannot stop between batches (single and Stokes runs): a stop signal ends
/// the process from now on, and one that arrived during start-up does so now.
pub fn terminate_on_signal() {
    if let Some(flags) = FLAGS.get() {
        flags.terminate.store(true, Ordering::SeqCst);
        if flags.stop.load(Ordering::SeqCst) {
            stop_now("stopped by a signal received while starting; nothing was solved or written (run it again)");
        }
    }
}
