//! Progress of long work — the PSC set-up, the operator-cache write, a campaign — whatever
//! the output is: a bar on an attended terminal, and where stderr is a pipe or a file
//! (mpirun, SLURM) a log line at a steady interval with the fraction done, the time
//! elapsed and an estimate of the time left. Work is counted in any unit the caller
//! chooses (flops, bytes, batches); a thread of its own writes the lines, so a step that
//! runs for minutes without reporting (one dense factorisation) still shows the clock.
//!
//! The interval is `TENSORFEM_PROGRESS_SECONDS` (default 30 s).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Seconds between two progress lines when not on a terminal.
const DEFAULT_INTERVAL_SECONDS: f64 = 30.0;

/// The interval of progress lines: `TENSORFEM_PROGRESS_SECONDS`, else the default (a value
/// that is not a positive number of seconds is warned about once and ignored).
pub fn interval() -> Duration {
    static CHECKED: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *CHECKED.get_or_init(|| {
        let default = Duration::from_secs_f64(DEFAULT_INTERVAL_SECONDS);
        match std::env::var("TENSORFEM_PROGRESS_SECONDS") {
            Err(_) => default,
            Ok(text) => match text.trim().parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 => Duration::from_secs_f64(s),
                _ => {
                    log::warn!(
                        "TENSORFEM_PROGRESS_SECONDS = {text:?} is not a positive number of seconds: progress lines every {DEFAULT_INTERVAL_SECONDS} s"
                    );
                    default
                }
            },
        }
    })
}

/// "1h02m", "3m05s", "12.3s".
pub fn format_duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "?".into();
    }
    let whole = seconds.round() as u64;
    if whole >= 3600 {
        format!("{}h{:02}m", whole / 3600, (whole % 3600) / 60)
    } else if whole >= 60 {
        format!("{}m{:02}s", whole / 60, whole % 60)
    } else {
        format!("{seconds:.1}s")
    }
}

/// What the reporting thread and the worker share.
struct Shared {
    label: String,
    total: f64,
    /// Work done, as f64 bits.
    done: AtomicU64,
    stage: Mutex<String>,
    start: Instant,
    finished: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn done(&self) -> f64 {
        f64::from_bits(self.done.load(Ordering::Relaxed))
    }

    /// "PSC set-up: 45 % (Π⁻¹: Cholesky), 2m10s elapsed, about 2m40s left".
    fn line(&self) -> String {
        let fraction = (self.done() / self.total).clamp(0.0, 1.0);
        let elapsed = self.start.elapsed().as_secs_f64();
        let stage = self.stage.lock().map(|s| s.clone()).unwrap_or_default();
        let stage = if stage.is_empty() {
            String::new()
        } else {
            format!(" ({stage})")
        };
        let left = if fraction > 0.0 {
            format!(
                ", about {} left",
                format_duration(elapsed * (1.0 - fraction) / fraction)
            )
        } else {
            String::new()
        };
        format!(
            "{}: {:.0} %{stage}, {} elapsed{left}",
            self.label,
            100.0 * fraction,
            format_duration(elapsed)
        )
    }
}

/// How progress is shown.
enum Display {
    Bar(indicatif::ProgressBar),
    Lines(std::thread::JoinHandle<()>),
    None,
}

/// The progress of one piece of work; dropping it ends the display.
pub struct Progress {
    shared: Arc<Shared>,
    display: Display,
}

/// Bar positions: the work is shown in thousandths.
const BAR_LENGTH: u64 = 1000;

impl Progress {
    /// Progress of `total` units of work, shown as `label`: a bar when stderr is a
    /// terminal, log lines every [`interval`] otherwise.
    pub fn new(label: &str, total: f64) -> Self {
        let display = if std::io::stderr().is_terminal() {
            Self::bar(label)
        } else {
            DisplayKind::Lines
        };
        Self::with(label, total, display)
    }

    /// Progress shown as log lines whatever stderr is (a campaign's, whose other log lines
    /// would break a bar).
    pub fn lines(label: &str, total: f64) -> Self {
        Self::with(label, total, DisplayKind::Lines)
    }

    /// Progress that shows nothing (work too small to report).
    pub fn hidden() -> Self {
        Self::with("", 1.0, DisplayKind::None)
    }

    fn bar(label: &str) -> DisplayKind {
        let bar = indicatif::ProgressBar::new(BAR_LENGTH);
        bar.set_style(
            indicatif::ProgressStyle::with_template(&format!(
                "{label} [{{bar:20}}] {{percent:>3}} % {{msg}} ({{elapsed}}, about {{eta}} left)"
            ))
            .expect("valid template")
            .progress_chars("=> "),
        );
        DisplayKind::Bar(bar)
    }

    fn with(label: &str, total: f64, kind: DisplayKind) -> Self {
        let shared = Arc::new(Shared {
            label: label.to_string(),
            total: if total > 0.0 { total } else { 1.0 },
            done: AtomicU64::new(0f64.to_bits()),
            stage: Mutex::new(String::new()),
            start: Instant::now(),
            finished: Mutex::new(false),
            wake: Condvar::new(),
        });
        let display = match kind {
            DisplayKind::Bar(bar) => Display::Bar(bar),
            DisplayKind::None => Display::None,
            DisplayKind::Lines => {
                let shared = Arc::clone(&shared);
                Display::Lines(std::thread::spawn(move || report_lines(&shared)))
            }
        };
        Progress { shared, display }
    }

    /// Names the step now running.
    pub fn stage(&self, what: &str) {
        if let Ok(mut stage) = self.shared.stage.lock() {
            *stage = what.to_string();
        }
        if let Display::Bar(bar) = &self.display {
            bar.set_message(what.to_string());
        }
    }

    /// Adds `work` units to the work done.
    pub fn advance(&self, work: f64) {
        self.set(self.shared.done() + work);
    }

    /// Sets the work done to `done` units.
    pub fn set(&self, done: f64) {
        self.shared.done.store(done.to_bits(), Ordering::Relaxed);
        if let Display::Bar(bar) = &self.display {
            let fraction = (done / self.shared.total).clamp(0.0, 1.0);
            bar.set_position((fraction * BAR_LENGTH as f64) as u64);
        }
    }

    /// Seconds since the work began.
    pub fn elapsed(&self) -> f64 {
        self.shared.start.elapsed().as_secs_f64()
    }
}

/// What [`Progress::with`] is asked to show.
enum DisplayKind {
    Bar(indicatif::ProgressBar),
    Lines,
    None,
}

/// Logs the state every interval until the work is finished.
fn report_lines(shared: &Shared) {
    let every = interval();
    let Ok(mut finished) = shared.finished.lock() else {
        return;
    };
    loop {
        let (guard, timeout) = match shared.wake.wait_timeout(finished, every) {
            Ok(woken) => woken,
            Err(_) => return,
        };
        finished = guard;
        if *finished {
            return;
        }
        if timeout.timed_out() {
            log::info!("{}", shared.line());
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.display, Display::None) {
            Display::Bar(bar) => bar.finish_and_clear(),
            Display::Lines(handle) => {
                if let Ok(mut finished) = self.shared.finished.lock() {
                    *finished = true;
                }
                self.shared.wake.notify_all();
                let _ = handle.join();
            }
            Display::None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_writes_them() {
        assert_eq!(format_duration(12.34), "12.3s");
        assert_eq!(format_duration(185.0), "3m05s");
        assert_eq!(format_duration(3720.0), "1h02m");
        assert_eq!(format_duration(f64::NAN), "?");
    }

    /// The line names the work, the fraction, the stage and an estimate from the rate so
    /// far.
    #[test]
    fn lines_carry_fraction_stage_and_estimate() {
        let progress = Progress::with("PSC set-up", 200.0, DisplayKind::None);
        let line = progress.shared.line();
        assert!(
            line.starts_with("PSC set-up: 0 %, ") && line.ends_with(" elapsed"),
            "{line}"
        );
        progress.stage("Π⁻¹");
        progress.advance(50.0);
        let line = progress.shared.line();
        assert!(line.starts_with("PSC set-up: 25 % (Π⁻¹), "), "{line}");
        assert!(
            line.contains(" elapsed, about ") && line.ends_with(" left"),
            "{line}"
        );
    }
}
