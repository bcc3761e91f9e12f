//! The performance log: one record per batch (stored in the batch's file, collected into
//! campaign.h5) and per-rank stage totals, printed at the end like PETSc's -log_view.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::operator::Checks;
use crate::config::CampaignSpec;

/// Seconds since the Unix epoch.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What one batch cost and how accurate it was.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchRecord {
    pub batch: usize,
    pub operator: usize,
    pub rank: usize,
    pub host: String,
    pub device: String,
    pub method: String,
    pub precision: String,
    pub nrhs: usize,
    pub unknowns: usize,
    /// Set-up of the operator, charged to the first batch a rank solved with it (0 when
    /// the rank reused the operator it held).
    pub setup_seconds: f64,
    /// Assembling (or reading) the right-hand sides.
    pub rhs_seconds: f64,
    pub solve_seconds: f64,
    pub verify_seconds: f64,
    /// Writing the batch's file (durably) and journaling it.
    pub write_seconds: f64,
    /// unknowns × nrhs / solve seconds / 10⁶.
    pub mdofs: f64,
    /// Counted GFLOP/s of the solve (PSC); None where the method has no flop count.
    pub gflops: Option<f64>,
    /// Refinement steps or V-cycles of the slowest column, when the method iterates.
    pub iterations: Option<usize>,
    /// PSC-M3's block-CG iterations in the batch's solve (all refinement steps).
    #[serde(default)]
    pub cg_iterations: Option<usize>,
    pub max_relative_residual: f64,
    /// Largest relative L2 error of its columns (None without exact solutions).
    pub max_relative_l2_error: Option<f64>,
    /// Its columns (positions in the batch) whose verified residual missed their tolerance.
    #[serde(default)]
    pub failed_columns: Vec<usize>,
    /// Unix seconds.
    pub start: f64,
    pub end: f64,
}

/// Why a batch failed and what its solver did: written to `failures/` next to the batch
/// files when a batch fails, so the campaign's log keeps it after the run stops.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailureRecord {
    pub batch: usize,
    pub operator: usize,
    pub rank: usize,
    pub host: String,
    pub device: String,
    pub method: String,
    pub precision: String,
    pub nrhs: usize,
    /// The error as printed.
    pub error: String,
    pub exit_code: u8,
    /// Iterations per column and residual history of the failing solve (None when the
    /// failure was not the solver's: input, set-up, I/O).
    pub solver: Option<crate::error::SolveRecord>,
    /// Unix seconds.
    pub time: f64,
}

/// Where one rank's time went in this run (seconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StageTotals {
    pub setup: f64,
    pub rhs: f64,
    pub solve: f64,
    pub verify: f64,
    pub io: f64,
    /// Waiting for work or for another rank's operator cache.
    pub idle: f64,
    pub batches: usize,
    pub columns: usize,
    /// Wall time of the rank's campaign loop.
    pub wall: f64,
}

impl StageTotals {
    pub const NAMES: [&'static str; 6] = ["set-up", "rhs", "solve", "verify", "I/O", "idle"];

    pub fn stages(&self) -> [f64; 6] {
        [
            self.setup,
            self.rhs,
            self.solve,
            self.verify,
            self.io,
            self.idle,
        ]
    }
}

/// The -log_view-style table: stages summed over ranks with max/min, then one line per
/// rank.
pub fn summary_table(ranks: &[(usize, String, StageTotals)]) -> String {
    let mut out = String::new();
    let wall: f64 = ranks.iter().map(|r| r.2.wall).sum::<f64>().max(1e-12);
    let _ = writeln!(
        out,
        "  stage      total [s]   % of rank time   max/rank [s]  min/rank [s]"
    );
    for (i, name) in StageTotals::NAMES.iter().enumerate() {
        let values: Vec<f64> = ranks.iter().map(|r| r.2.stages()[i]).collect();
        let total: f64 = values.iter().sum();
        let max = values.iter().copied().fold(0.0, f64::max);
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            out,
            "  {name:<8} {total:>11.3}   {:>13.1}   {max:>12.3}  {min:>12.3}",
            100.0 * total / wall
        );
    }
    let _ = writeln!(
        out,
        "  rank  host                 batches  columns   wall [s]  set-up   rhs      solve    verify   I/O      idle"
    );
    for (rank, host, t) in ranks {
        let _ = writeln!(
            out,
            "  {rank:>4}  {host:<20} {:>7}  {:>7}  {:>9.3}  {:>7.3}  {:>7.3}  {:>7.3}  {:>7.3}  {:>7.3}  {:>7.3}",
            t.batches, t.columns, t.wall, t.setup, t.rhs, t.solve, t.verify, t.io, t.idle
        );
    }
    out
}

/// A Stokes study's results, one line per operator (each solves the manufactured problem
/// once): its settings, FGMRES iterations, solve time and checks.
pub fn stokes_study_table(spec: &CampaignSpec, records: &[BatchRecord], checks: &Checks) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  operator     n  preconditioner    parameters               precision  iterations  solve [s]  ms/iter  residual   velocity L2  pressure L2"
    );
    for record in records {
        let (o, c) = (record.operator, record.batch);
        let Some(stokes) = &spec.operators[o].stokes else {
            continue;
        };
        // ω, t, and Jacobi steps × weight, as the relaxation uses them.
        let p = super::output::stokes_parameters(stokes);
        let parameters = match p[..] {
            [] => "-".to_string(),
            [(_, omega)] => format!("ω={omega}"),
            [(_, omega), (_, t), (_, steps), (_, weight)] => {
                format!("ω={omega} t={t} jacobi {steps}×{weight}")
            }
            _ => unreachable!("stokes_parameters gives none, ω, or ω, t, steps, weight"),
        };
        let iterations = record.iterations.unwrap_or(0);
        let error = |i: usize| checks.errors[i].1[c];
        let _ = writeln!(
            out,
            "  {o:>8} {:>5}  {:<17} {:<24} {:<10} {iterations:>10}  {:>9.3}  {:>7.3}  {:.2e}   {:.3e}    {:.3e}",
            stokes.n,
            stokes.preconditioner.name(),
            parameters,
            stokes.precision.name(),
            record.solve_seconds,
            record.solve_seconds * 1e3 / iterations.max(1) as f64,
            checks.relative_residual[c],
            error(0),
            error(1),
        );
    }
    out
}
