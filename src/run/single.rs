//! A single run (no `[campaign]`): mesh, assembly of the stiffness matrix and of a block
//! of manufactured right-hand sides, set-up, block solve, verification of every column
//! (f64 residual of the nodal system, L2 error against the exact solution), HDF5 output
//! with an XDMF sidecar (`io::schema`).

use std::fmt;
use std::path::PathBuf;
use std::time::Instant;

use crate::campaign::Checks;
use crate::comm::Comm;
use crate::config::RunConfig;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::fem::{ColumnReport, Exact, Manufactured};
use crate::io::schema;
use crate::poisson::{check_memory, with_solver, AnyPoissonSolver};

/// What a run produced, for the printed summary.
#[derive(Clone, Debug)]
pub struct JobSummary {
    pub description: String,
    pub backend: String,
    pub unknowns: usize,
    pub nonzeros: usize,
    /// Wave number of each column.
    pub ks: Vec<u32>,
    pub columns: Vec<ColumnReport>,
    /// The relative residual each column had to reach.
    pub tolerance: Vec<f64>,
    /// How the set-up was obtained (cache loaded/built), if there was one to cache.
    pub setup_note: Option<String>,
    /// Refinement steps (PSC-IR) or V-cycles (multigrid) of the slowest column, when the
    /// method iterates.
    pub refine_iterations: Option<usize>,
    /// PSC-M3's block-CG iterations, summed over the refinement steps.
    pub cg_iterations: Option<usize>,
    pub seconds: StageSeconds,
    pub output: PathBuf,
    pub xdmf: PathBuf,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct StageSeconds {
    pub mesh: f64,
    pub assembly: f64,
    pub setup: f64,
    pub solve: f64,
    pub verify: f64,
    pub write: f64,
}

impl StageSeconds {
    pub fn total(&self) -> f64 {
        self.mesh + self.assembly + self.setup + self.solve + self.verify + self.write
    }

    /// The stages timed before the output is written, as the output file's attributes.
    fn attributes(&self) -> [(&'static str, f64); 5] {
        [
            ("mesh_seconds", self.mesh),
            ("assembly_seconds", self.assembly),
            ("setup_seconds", self.setup),
            ("solve_seconds", self.solve),
            ("verify_seconds", self.verify),
        ]
    }
}

/// Columns listed in the printed summary; the HDF5 file has all of them.
const PRINTED_COLUMNS: usize = 12;

impl fmt::Display for JobSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.seconds;
        let nrhs = self.columns.len();
        writeln!(f, "tensorfem run: {}", self.description)?;
        writeln!(f, "  backend             {}", self.backend)?;
        writeln!(
            f,
            "  unknowns            {} × {nrhs} right-hand side(s)",
            self.unknowns
        )?;
        writeln!(f, "  nonzeros            {}", self.nonzeros)?;
        if let Some(note) = &self.setup_note {
            writeln!(f, "  set-up              {note}")?;
        }
        if let Some(it) = self.refine_iterations {
            writeln!(f, "  iterations          {it} (slowest column)")?;
        }
        if let Some(it) = self.cg_iterations {
            writeln!(
                f,
                "  CG iterations       {it} (PSC-M3, block CG, all refinement steps)"
            )?;
        }
        writeln!(
            f,
            "  column      k     L2 error    rel. L2 error  nodal L2 error  rel. residual (f64)  tolerance"
        )?;
        for (c, ((r, k), t)) in self
            .columns
            .iter()
            .zip(&self.ks)
            .zip(&self.tolerance)
            .enumerate()
            .take(PRINTED_COLUMNS)
        {
            writeln!(
                f,
                "  {c:>6} {k:>6}  {:>11.4e}  {:>13.4e}  {:>14.4e}  {:>19.3e}  {t:>9.1e}{}",
                r.l2_error,
                r.relative_l2_error,
                r.nodal_l2_error,
                r.relative_residual,
                if r.relative_residual <= *t {
                    ""
                } else {
                    "  FAILED"
                }
            )?;
        }
        if nrhs > PRINTED_COLUMNS {
            writeln!(
                f,
                "  … {} more column(s) in the output file",
                nrhs - PRINTED_COLUMNS
            )?;
        }
        writeln!(
            f,
            "  time [s]            total {:.3}: mesh {:.3}, assembly {:.3}, set-up {:.3}, solve {:.3}, verify {:.3}, write {:.3}",
            s.total(),
            s.mesh,
            s.assembly,
            s.setup,
            s.solve,
            s.verify,
            s.write
        )?;
        writeln!(
            f,
            "  throughput          {:.2} MDof/s (unknowns × right-hand sides / solve seconds)",
            (self.unknowns * nrhs) as f64 / s.solve.max(1e-12) / 1e6
        )?;
        write!(
            f,
            "  output              {} (ParaView: {})",
            self.output.display(),
            self.xdmf.display()
        )
    }
}

fn describe(config: &RunConfig) -> String {
    let m = &config.mesh;
    let coarse = match (&m.domain, m.coarse) {
        (Some(d), _) => format!(
            "{} refinements of the coarse mesh ({} cells; macro elements after {})",
            d.levels,
            d.coarse.num_cells(),
            d.coarse_levels
        ),
        (None, Some((n0, levels))) => {
            format!("h = 1/{}, refined {levels}× from h0 = 1/{n0}", m.n)
        }
        (None, None) => format!("h = 1/{}", m.n),
    };
    let boundary = match &m.boundary {
        None => "u = 0 on the boundary".to_string(),
        Some(b) => b.describe(" ", ", "),
    };
    let s = &config.solver;
    let precision = match (&s.mg, s.method.is_psc() && s.refine) {
        (Some(mg), _) => format!(
            "{} levels {} ({}), smoother {}{}",
            mg.schedule.len(),
            mg.variant.map_or("custom schedule", |v| v.name()),
            crate::mg::schedule_name(&mg.schedule),
            mg.smoother_name,
            if mg.krylov {
                ", preconditioning flexible CG (f64)"
            } else if s.refine {
                ", inside f64 refinement"
            } else {
                ", stand-alone in f64"
            }
        ),
        (None, true) => format!("{} inside f64 refinement (PSC-IR)", s.precision),
        (None, false) => s.precision.to_string(),
    };
    format!(
        "{} {} mesh, {coarse}; {boundary}; u = sin(kπx)·… for {} right-hand side(s); method {} in {precision}",
        m.element.name(),
        m.kind.name(),
        config.ks.len(),
        s.method.name(),
    )
}

/// What to change when columns miss their tolerance.
pub fn advice(solver: &crate::config::SolverSpec) -> &'static str {
    if solver.method == crate::config::Method::Cholesky {
        ": the f64 factorisation is at its rounding floor; check the loads"
    } else if solver.method.is_psc() && !solver.refine {
        ": without refinement a psc method is a direct solve in its precision; set refine = true to reach rtol, or give a looser rtol"
    } else {
        ": a tolerance near f64's rounding floor for this problem (about 1e-16 times its condition number) cannot be verified; loosen rtol"
    }
}

/// Runs the configured job. The block runs on rank 0; other ranks have no work and return
/// `None` (campaigns spread work over ranks).
pub fn run(config: &RunConfig, backend: &Backend, comm: &dyn Comm) -> Result<Option<JobSummary>> {
    if !comm.is_root() {
        log::info!("a single run executes on rank 0; this rank has no work");
        return Ok(None);
    }
    // A bad output path fails now, not after the solve.
    crate::io::h5::H5Writer::check_destination(&config.output)?;
    log::info!("backend: {backend}");
    check_memory(&config.mesh, &config.solver, config.ks.len(), backend)?;

    let t = Instant::now();
    let mut op = AnyPoissonSolver::new(backend, &config.mesh, &config.solver)?;
    let (assembly, setup) = (op.assembly_seconds(), op.setup_seconds());
    let mut seconds = StageSeconds {
        mesh: t.elapsed().as_secs_f64() - assembly - setup,
        assembly,
        setup,
        ..Default::default()
    };
    let exact: Vec<Exact> = config
        .ks
        .iter()
        .map(|&k| Exact::Wave(Manufactured::new(k, op.dim())))
        .collect();
    let nrhs = exact.len();
    let t = Instant::now();
    let (b, dirichlet) = op.manufactured_loads(&exact)?;
    seconds.assembly += t.elapsed().as_secs_f64();

    let t = Instant::now();
    let outcome = op.solve(&b, nrhs)?;
    seconds.solve = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let nodal = op.to_nodal(&outcome.u, dirichlet.as_deref());
    let known: Vec<Option<Exact>> = exact.iter().cloned().map(Some).collect();
    let reports = op.reports(&b, &outcome.u, &nodal, &known)?;
    let tolerance = op.tolerances(&b);
    seconds.verify = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let exact = op.exact_nodal(&exact);
    let nonzeros = op.nonzeros();
    let (output, xdmf) = with_solver!(&op, o => schema::write_run(
        config,
        &o.mesh,
        &nodal,
        &exact,
        &reports,
        &tolerance,
        &seconds.attributes(),
        &backend.to_string(),
        nonzeros,
        outcome.iterations,
        outcome.inner_iterations,
    ))?;
    seconds.write = t.elapsed().as_secs_f64();

    let checks = Checks::poisson(&reports, tolerance.clone());
    let failed = checks.failed();
    if !failed.is_empty() {
        return Err(Error::Verification(format!(
            "{} of {nrhs} column(s) missed their tolerance ({}); the solutions are in {} with /solution/passed = 0 for them{}",
            failed.len(),
            checks.describe_failures(&failed, 0, 8),
            output.display(),
            advice(&config.solver)
        )));
    }

    Ok(Some(JobSummary {
        description: describe(config),
        backend: backend.to_string(),
        unknowns: op.unknowns(),
        nonzeros,
        ks: config.ks.clone(),
        columns: reports,
        tolerance,
        setup_note: op.setup_note(),
        refine_iterations: outcome.iterations,
        cg_iterations: outcome.inner_iterations,
        seconds,
        output,
        xdmf,
    }))
}
