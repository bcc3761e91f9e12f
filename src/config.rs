//! The run config (TOML). Parsing is two-step: the file is read section by section into
//! raw structs (serde, unknown keys denied), then [`RawConfig::validate`] turns it into a
//! [`RunConfig`] or reports *every* problem at once, each naming its key and the allowed
//! values. Nothing is allocated for the solve before the whole config is valid.
//!
//! ```toml
//! backend = "auto"            # auto | cpu | cuda
//! [mesh]
//! kind = "unit-square"        # unit-square | unit-cube
//! element = "q1"              # q1 | p1 (unit-square); q1 (unit-cube)
//! n = 64                      # cells per direction, or h = 0.015625 (one of them)
//! h0 = 0.125                  # coarse mesh width: n = (1/h0)·2^j (psc-m1 needs it)
//! [problem]
//! k = [1, 2, 4]               # manufactured solutions sin(kπx)sin(kπy)(sin(kπz)), one per column
//! [solver]
//! method = "psc-m1"           # cholesky (faer, the f64 reference) | psc-m1
//! precision = "f32"           # f16 | f32 | f64
//! refine = true               # psc-m1: f64 iterative refinement (PSC-IR)
//! nrhs = 3                    # columns; column c uses k[c mod len(k)]
//! [output]
//! path = "out/run.h5"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_aux::serde_introspection::serde_introspect;

use crate::backend::BackendChoice;
use crate::campaign::spec::{CampaignSpec, RawCampaign};
use crate::error::{ConfigProblem, Error, Result};
use crate::mesh::Element;
use crate::mg::{check_levels, default_levels, Smoother, Variant};
use crate::precision::Precision;
use crate::stokes::{Preconditioner, Relaxation, StokesSpec};

/// The quickstart config, embedded so `tensorfem run` works without any file.
pub const QUICKSTART: &str = include_str!("../inputs/quickstart.toml");

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMesh {
    pub kind: Option<String>,
    pub element: Option<String>,
    pub n: Option<i64>,
    pub h: Option<f64>,
    pub h0: Option<f64>,
}

/// One wave number or a list of them.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum RawWaveNumbers {
    One(i64),
    Many(Vec<i64>),
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProblem {
    pub k: Option<RawWaveNumbers>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSolver {
    pub method: Option<String>,
    pub precision: Option<String>,
    pub variant: Option<String>,
    pub schedule: Option<Vec<String>>,
    pub smoother: Option<String>,
    pub levels: Option<i64>,
    pub residual_scaling: Option<bool>,
    pub seed: Option<i64>,
    pub refine: Option<bool>,
    pub nrhs: Option<i64>,
    pub tolerance: Option<f64>,
    pub max_iterations: Option<i64>,
    pub cache: Option<bool>,
    pub cache_dir: Option<String>,
    pub preconditioner: Option<String>,
    pub relaxation: Option<String>,
    pub restart: Option<i64>,
    pub omega: Option<f64>,
    pub t: Option<f64>,
    pub jacobi_steps: Option<i64>,
    pub jacobi_weight: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    pub path: Option<String>,
}

/// The config as written, before validation.
#[derive(Clone, Debug, Default)]
pub struct RawConfig {
    pub backend: Option<String>,
    pub mesh: RawMesh,
    pub problem: RawProblem,
    pub solver: RawSolver,
    pub output: RawOutput,
    pub campaign: Option<RawCampaign>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeshKind {
    UnitSquare,
    UnitCube,
}

impl MeshKind {
    pub fn name(self) -> &'static str {
        match self {
            MeshKind::UnitSquare => "unit-square",
            MeshKind::UnitCube => "unit-cube",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeshSpec {
    pub kind: MeshKind,
    pub element: Element,
    /// Cells per direction.
    pub n: usize,
    /// Coarse cells per direction (1/h0) and refinements, when h0 is given.
    pub coarse: Option<(usize, usize)>,
}

impl MeshSpec {
    pub fn dim(&self) -> usize {
        self.element.dim()
    }

    /// Interior unknowns: (n-1)^d.
    pub fn unknowns(&self) -> usize {
        (self.n - 1).pow(self.dim() as u32)
    }

    pub fn nodes(&self) -> usize {
        (self.n + 1).pow(self.dim() as u32)
    }

    pub fn cells(&self) -> usize {
        let squares = self.n.pow(self.dim() as u32);
        match self.element {
            Element::P1 => 2 * squares,
            _ => squares,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// faer's sparse Cholesky in f64: the reference solver.
    Cholesky,
    /// The PSC direct method M1 (SPEC §2.4), optionally inside f64 refinement (PSC-IR).
    PscM1,
    /// Geometric multigrid with a precision per level inside f64 refinement (SPEC §3).
    Mg,
    /// Q2-Q1 Stokes with preconditioned FGMRES (SPEC §4); configured by `RunConfig::stokes`.
    Stokes,
}

impl Method {
    pub const NAMES: &'static str = "cholesky, psc-m1, mg, stokes";

    pub fn name(self) -> &'static str {
        match self {
            Method::Cholesky => "cholesky",
            Method::PscM1 => "psc-m1",
            Method::Mg => "mg",
            Method::Stokes => STOKES,
        }
    }

    pub fn has_cuda(self) -> bool {
        match self {
            Method::Cholesky | Method::PscM1 | Method::Mg | Method::Stokes => false,
        }
    }
}

/// Settings of the solver section that apply to multigrid.
#[derive(Clone, Debug, PartialEq)]
pub struct MgSpec {
    /// Precision per level, finest first (its length is the number of levels).
    pub schedule: Vec<Precision>,
    /// The preset the schedule came from, if any.
    pub variant: Option<Variant>,
    pub smoother: Smoother,
    pub smoother_name: String,
    pub residual_scaling: bool,
    /// Seed of the random initial guess (SPEC §3.2).
    pub seed: u64,
}

/// Settings of the solver section that apply to PSC-M1.
#[derive(Clone, Debug, PartialEq)]
pub struct SolverSpec {
    pub method: Method,
    pub precision: Precision,
    /// f64 iterative refinement around the M1 solve (PSC-IR).
    pub refine: bool,
    /// Relative residual ‖b − Ax‖₂/‖b‖₂ PSC-IR stops at, and its iteration limit.
    pub tolerance: f64,
    pub max_iterations: usize,
    /// Where PSC set-ups are cached (None: no cache).
    pub cache_dir: Option<PathBuf>,
    /// Multigrid settings (method mg only).
    pub mg: Option<MgSpec>,
}

/// A validated config.
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    pub backend: BackendChoice,
    pub mesh: MeshSpec,
    /// Wave number of the manufactured solution of each right-hand side (the block's
    /// columns, Nrhs of them).
    pub ks: Vec<u32>,
    pub solver: SolverSpec,
    pub output: PathBuf,
    /// The config text as given, echoed into output files.
    pub source: String,
    /// A campaign (`[campaign]`): the right-hand sides, batches and operators; `ks` and
    /// `output` are then unused.
    pub campaign: Option<CampaignSpec>,
    /// A Stokes run (`method = "stokes"`): the solver it describes; `mesh` is then its Q1
    /// pressure mesh (velocity is Q2 on the same cells), `solver` its precision and
    /// tolerance, `ks` empty.
    pub stokes: Option<StokesSpec>,
}

/// The method name of the Stokes solver (SPEC §4).
pub const STOKES: &str = "stokes";

const SECTIONS: [&str; 5] = ["mesh", "problem", "solver", "output", "campaign"];

/// Largest supported wave number: beyond it no affordable mesh resolves the solution.
pub(crate) const MAX_K: i64 = 100_000;
/// Largest block of right-hand sides one run solves.
pub(crate) const MAX_NRHS: i64 = 1_000_000;

pub(crate) fn problem(key: &str, message: impl Into<String>) -> ConfigProblem {
    ConfigProblem {
        key: key.to_string(),
        message: message.into(),
    }
}

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<RunConfig> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, &path.display().to_string())
}

/// Parses and validates config text; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<RunConfig> {
    let fail = |problems: Vec<ConfigProblem>| Error::Config {
        path: origin.to_string(),
        problems,
    };
    let (raw, mut problems) = parse_raw(text).map_err(|p| fail(vec![p]))?;
    match raw.validate(text) {
        Ok(config) if problems.is_empty() => Ok(config),
        Ok(_) => Err(fail(problems)),
        Err(more) => {
            // A key already reported as mistyped was dropped; don't report it missing too.
            let more: Vec<ConfigProblem> = more
                .into_iter()
                .filter(|p| !problems.iter().any(|q| q.key == p.key))
                .collect();
            problems.extend(more);
            Err(fail(problems))
        }
    }
}

/// Reads the TOML into raw sections. Unknown keys and type errors are collected (every
/// section is read even when another has a problem); a TOML syntax error ends parsing.
fn parse_raw(text: &str) -> Result<(RawConfig, Vec<ConfigProblem>), ConfigProblem> {
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        problem(
            "(syntax)",
            e.message().to_string() + &location(text, e.span()),
        )
    })?;
    let mut problems = Vec::new();
    let mut raw = RawConfig::default();

    let top_keys: Vec<String> = table.keys().cloned().collect();
    for key in top_keys {
        if key == "backend" || SECTIONS.contains(&key.as_str()) {
            continue;
        }
        problems.push(problem(
            &key,
            format!(
                "unknown key (allowed at the top level: backend, [{}])",
                SECTIONS.join("], [")
            ),
        ));
        table.remove(&key);
    }
    if let Some(value) = table.remove("backend") {
        match value {
            toml::Value::String(s) => raw.backend = Some(s),
            other => problems.push(problem(
                "backend",
                format!("expected a string, found {}", other.type_str()),
            )),
        }
    }

    fn section<T: for<'de> Deserialize<'de> + Default>(
        table: &mut toml::Table,
        name: &str,
        problems: &mut Vec<ConfigProblem>,
    ) -> T {
        let Some(value) = table.remove(name) else {
            return T::default();
        };
        let toml::Value::Table(mut fields) = value else {
            problems.push(problem(name, "expected a table [".to_string() + name + "]"));
            return T::default();
        };
        let allowed = serde_introspect::<T>();
        let unknown: Vec<String> = fields
            .keys()
            .filter(|k| !allowed.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            problems.push(problem(
                &format!("{name}.{key}"),
                format!("unknown key (allowed in [{name}]: {})", allowed.join(", ")),
            ));
            fields.remove(&key);
        }
        // Find the keys whose values have the wrong type, one key at a time, so each is
        // named and the rest of the section is still read and validated.
        let mistyped: Vec<String> = fields
            .iter()
            .filter_map(|(key, value)| {
                let single = toml::Table::from_iter([(key.clone(), value.clone())]);
                T::deserialize(toml::Value::Table(single)).err().map(|e| {
                    problems.push(problem(&format!("{name}.{key}"), e.message().to_string()));
                    key.clone()
                })
            })
            .collect();
        for key in mistyped {
            fields.remove(&key);
        }
        T::deserialize(toml::Value::Table(fields)).unwrap_or_else(|e| {
            problems.push(problem(name, e.message().to_string()));
            T::default()
        })
    }
    raw.mesh = section(&mut table, "mesh", &mut problems);
    raw.problem = section(&mut table, "problem", &mut problems);
    raw.solver = section(&mut table, "solver", &mut problems);
    raw.output = section(&mut table, "output", &mut problems);
    if table.contains_key("campaign") {
        raw.campaign = Some(section(&mut table, "campaign", &mut problems));
    }
    Ok((raw, problems))
}

/// " (line L, column C)" for a byte span, when toml gives one.
fn location(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    span.map(|s| {
        let before = &text[..s.start.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.len() - before.rfind('\n').map_or(0, |p| p + 1) + 1;
        format!(" (line {line}, column {column})")
    })
    .unwrap_or_default()
}

/// 1/w as an integer, when w is the reciprocal of one (to 1e-9 relative).
fn reciprocal_integer(w: f64) -> Option<usize> {
    if !(w.is_finite() && w > 0.0) {
        return None;
    }
    let r = (1.0 / w).round();
    ((r * w - 1.0).abs() < 1e-9 && (1.0..1e9).contains(&r)).then_some(r as usize)
}

impl RawConfig {
    /// The multigrid settings: mesh, levels, schedule (a preset or a list), smoother.
    fn validate_mg(
        &self,
        element: Option<Element>,
        n: Option<usize>,
        problems: &mut Vec<ConfigProblem>,
    ) -> Option<MgSpec> {
        let solver = &self.solver;
        if element == Some(Element::P1) {
            problems.push(problem(
                "mesh.element",
                "method mg solves Q1 problems (allowed: q1)",
            ));
        }
        let levels = match (solver.levels, n) {
            (Some(l), Some(n)) => match check_levels(n, l.max(0) as usize) {
                Ok(()) if l >= 1 => Some(l as usize),
                _ => {
                    problems.push(problem("solver.levels", format!("{l} levels on n = {n} cells per direction: n must be divisible by 2^(levels−1) leaving at least 2 cells on the coarsest level")));
                    None
                }
            },
            (None, Some(n)) => Some(default_levels(n)),
            (_, None) => None,
        };
        let variant = match solver.variant.as_deref().map(str::parse::<Variant>) {
            Some(Err(e)) => {
                problems.push(problem("solver.variant", e));
                None
            }
            Some(Ok(v)) => Some(v),
            None => None,
        };
        let schedule = match (&solver.schedule, variant, levels) {
            (Some(_), Some(_), _) => {
                problems.push(problem(
                    "solver.schedule",
                    "give solver.variant or solver.schedule, not both",
                ));
                None
            }
            (Some(list), None, levels) => {
                let parsed: Result<Vec<Precision>, String> =
                    list.iter().map(|p| p.parse()).collect();
                match (parsed, levels) {
                    (Err(e), _) => {
                        problems.push(problem("solver.schedule", e));
                        None
                    }
                    (Ok(s), Some(l)) if s.len() != l => {
                        problems.push(problem("solver.schedule", format!("{} precisions for {l} levels (one per level, finest first; set solver.levels to change the level count)", s.len())));
                        None
                    }
                    (Ok(s), _) => Some(s),
                }
            }
            (None, v, Some(l)) => Some(v.unwrap_or(Variant::DMg).schedule(l)),
            (None, _, None) => None,
        };
        let smoother_name = solver.smoother.clone().unwrap_or_else(|| "jacobi".into());
        let smoother = match Smoother::by_name(&smoother_name) {
            Ok(s) => Some(s),
            Err(e) => {
                problems.push(problem("solver.smoother", e));
                None
            }
        };
        if solver.refine == Some(false)
            && schedule
                .as_ref()
                .is_some_and(|s| s.iter().any(|&p| p != Precision::F64))
        {
            problems.push(problem("solver.refine", "false (stand-alone multigrid) needs f64 on every level (solver.variant = \"D_MG\")"));
        }
        let seed = match solver.seed {
            Some(s) if s < 0 => {
                problems.push(problem(
                    "solver.seed",
                    format!("{s} (allowed: integers ≥ 0)"),
                ));
                None
            }
            s => Some(s.unwrap_or(0) as u64),
        };
        Some(MgSpec {
            schedule: schedule?,
            variant: variant.or((solver.schedule.is_none()).then_some(Variant::DMg)),
            smoother: smoother?,
            smoother_name,
            residual_scaling: solver.residual_scaling.unwrap_or(true),
            seed: seed?,
        })
    }

    /// Cells per direction from mesh.n or mesh.h (exactly one of them, n ≥ 2).
    fn cells(&self, problems: &mut Vec<ConfigProblem>) -> Option<usize> {
        match (self.mesh.n, self.mesh.h) {
            (Some(_), Some(_)) => {
                problems.push(problem("mesh.n", "give either mesh.n or mesh.h, not both"));
                None
            }
            (None, None) => {
                problems.push(problem("mesh.n", "missing: give the cells per direction mesh.n (≥ 2) or the mesh width mesh.h = 1/n"));
                None
            }
            (Some(n), None) if n < 2 => {
                problems.push(problem(
                    "mesh.n",
                    format!("{n} cells per direction leave no interior unknown (allowed: n ≥ 2)"),
                ));
                None
            }
            (Some(n), None) => Some(n as usize),
            (None, Some(h)) => match reciprocal_integer(h) {
                Some(n) if n >= 2 => Some(n),
                _ => {
                    problems.push(problem(
                        "mesh.h",
                        format!("{h} is not 1/n for an integer n ≥ 2 (e.g. 0.015625 = 1/64)"),
                    ));
                    None
                }
            },
        }
    }

    /// The HDF5 file a single run writes (output.path: a file name, not a directory).
    fn output_path(&self, example: &str, problems: &mut Vec<ConfigProblem>) -> Option<PathBuf> {
        match self.output.path.as_deref() {
            None => {
                problems.push(problem(
                    "output.path",
                    format!("missing: the HDF5 file to write, e.g. path = \"{example}\""),
                ));
                None
            }
            Some("") => {
                problems.push(problem("output.path", "is empty"));
                None
            }
            Some(p) if p.ends_with('/') => {
                problems.push(problem(
                    "output.path",
                    format!("'{p}' is a directory; name the HDF5 file"),
                ));
                None
            }
            Some(p) => Some(PathBuf::from(p)),
        }
    }

    /// The [solver] keys only method stokes takes, and whether each is given.
    fn stokes_keys(&self) -> [(&'static str, bool); 7] {
        let s = &self.solver;
        [
            ("solver.preconditioner", s.preconditioner.is_some()),
            ("solver.relaxation", s.relaxation.is_some()),
            ("solver.restart", s.restart.is_some()),
            ("solver.omega", s.omega.is_some()),
            ("solver.t", s.t.is_some()),
            ("solver.jacobi_steps", s.jacobi_steps.is_some()),
            ("solver.jacobi_weight", s.jacobi_weight.is_some()),
        ]
    }

    /// A Stokes run (SPEC §4): mesh.n (or h) on the unit square, element q2-q1, the
    /// preconditioner with its relaxation and parameters, precision, FGMRES settings.
    fn validate_stokes(&self, source: &str) -> Result<RunConfig, Vec<ConfigProblem>> {
        let mut problems = Vec::new();
        let s = &self.solver;
        let backend = match self.backend.as_deref().unwrap_or("auto") {
            "auto" | "cpu" => Some(BackendChoice::Cpu),
            other => {
                problems.push(problem(
                    "backend",
                    format!("'{other}': method stokes runs on the CPU (allowed: auto, cpu)"),
                ));
                None
            }
        };
        if let Some(kind) = self.mesh.kind.as_deref().filter(|k| *k != "unit-square") {
            problems.push(problem(
                "mesh.kind",
                format!("'{kind}': method stokes solves on the unit square (allowed: unit-square)"),
            ));
        }
        if let Some(e) = self.mesh.element.as_deref().filter(|e| *e != "q2-q1") {
            problems.push(problem(
                "mesh.element",
                format!("'{e}': method stokes uses Taylor-Hood elements (allowed: q2-q1)"),
            ));
        }
        for (key, given) in [
            ("mesh.h0", self.mesh.h0.is_some()),
            ("problem.k", self.problem.k.is_some()),
            ("solver.variant", s.variant.is_some()),
            ("solver.schedule", s.schedule.is_some()),
            ("solver.smoother", s.smoother.is_some()),
            ("solver.levels", s.levels.is_some()),
            ("solver.residual_scaling", s.residual_scaling.is_some()),
            ("solver.seed", s.seed.is_some()),
            ("solver.refine", s.refine.is_some()),
            ("solver.nrhs", s.nrhs.is_some()),
            ("solver.cache", s.cache.is_some()),
            ("solver.cache_dir", s.cache_dir.is_some()),
        ] {
            if given {
                problems.push(problem(key, "does not apply to method stokes (it solves the manufactured Stokes problem of SPEC §1 with FGMRES)"));
            }
        }
        let n = self.cells(&mut problems);
        let n = n.filter(|&n| match crate::stokes::multigrid::mesh_hierarchy(n) {
            Ok(_) => true,
            Err(e) => {
                problems.push(problem(
                    if self.mesh.h.is_some() {
                        "mesh.h"
                    } else {
                        "mesh.n"
                    },
                    e.to_string(),
                ));
                false
            }
        });
        let multigrid = s.preconditioner.as_deref().unwrap_or("multigrid");
        let relaxation_name = s.relaxation.as_deref().unwrap_or("vanka-tuned");
        let preconditioner = match multigrid {
            "multigrid" => match relaxation_name {
                "block-triangular" => {
                    problems.push(problem("solver.relaxation", "block-triangular is a preconditioner: give solver.preconditioner = \"block-triangular\""));
                    None
                }
                name => match Preconditioner::by_name(name) {
                    Ok(p) => Some(p),
                    Err(_) => {
                        problems.push(problem("solver.relaxation", format!("unknown relaxation '{name}' (allowed: vanka, vanka-tuned, braess-sarazin, schur-uzawa)")));
                        None
                    }
                },
            },
            "block-triangular" => {
                if s.relaxation.is_some() {
                    problems.push(problem("solver.relaxation", "applies to preconditioner multigrid only (block-triangular smooths with weighted Jacobi)"));
                }
                Some(Preconditioner::BlockTriangular)
            }
            other => {
                problems.push(problem(
                    "solver.preconditioner",
                    format!(
                        "unknown preconditioner '{other}' (allowed: multigrid, block-triangular)"
                    ),
                ));
                None
            }
        };
        // Relaxation parameters: ω for Vanka and Braess-Sarazin; t, Jacobi steps and weight
        // for Braess-Sarazin and Schur-Uzawa.
        let positive = |key: &str, v: Option<f64>, max: f64, problems: &mut Vec<ConfigProblem>| {
            if let Some(v) = v {
                if !(v > 0.0 && v <= max) {
                    problems.push(problem(key, format!("{v} (allowed: 0 < value ≤ {max})")));
                }
            }
        };
        positive("solver.omega", s.omega, 2.0, &mut problems);
        positive("solver.t", s.t, 100.0, &mut problems);
        positive("solver.jacobi_weight", s.jacobi_weight, 2.0, &mut problems);
        if let Some(k) = s.jacobi_steps.filter(|k| !(0..=100).contains(k)) {
            problems.push(problem(
                "solver.jacobi_steps",
                format!("{k} (allowed: 0 ..= 100)"),
            ));
        }
        let preconditioner = preconditioner.map(|p| match p {
            Preconditioner::Multigrid(Relaxation::Vanka { form, omega }) => {
                for (key, given) in [("solver.t", s.t.is_some()), ("solver.jacobi_steps", s.jacobi_steps.is_some()), ("solver.jacobi_weight", s.jacobi_weight.is_some())] {
                    if given {
                        problems.push(problem(key, "applies to relaxations braess-sarazin and schur-uzawa only"));
                    }
                }
                Preconditioner::Multigrid(Relaxation::Vanka { form, omega: s.omega.unwrap_or(omega) })
            }
            Preconditioner::Multigrid(Relaxation::BraessSarazin(d)) => Preconditioner::Multigrid(Relaxation::BraessSarazin(crate::stokes::SchurParams {
                t: s.t.unwrap_or(d.t),
                omega: s.omega.unwrap_or(d.omega),
                jacobi_steps: s.jacobi_steps.map_or(d.jacobi_steps, |k| k as usize),
                jacobi_weight: s.jacobi_weight.unwrap_or(d.jacobi_weight),
            })),
            Preconditioner::Multigrid(Relaxation::SchurUzawa(d)) => {
                if s.omega.is_some() {
                    problems.push(problem("solver.omega", "Schur-Uzawa takes no outer damping (SPEC §4.2); applies to vanka and braess-sarazin"));
                }
                Preconditioner::Multigrid(Relaxation::SchurUzawa(crate::stokes::SchurParams {
                    t: s.t.unwrap_or(d.t),
                    omega: 1.0,
                    jacobi_steps: s.jacobi_steps.map_or(d.jacobi_steps, |k| k as usize),
                    jacobi_weight: s.jacobi_weight.unwrap_or(d.jacobi_weight),
                }))
            }
            Preconditioner::BlockTriangular => {
                for (key, given) in [("solver.omega", s.omega.is_some()), ("solver.t", s.t.is_some()), ("solver.jacobi_steps", s.jacobi_steps.is_some()), ("solver.jacobi_weight", s.jacobi_weight.is_some())] {
                    if given {
                        problems.push(problem(key, "applies to preconditioner multigrid only (block-triangular uses the published Jacobi weights 0.6 and 1.0)"));
                    }
                }
                p
            }
        });
        let precision = match s.precision.as_deref().unwrap_or("f64").parse::<Precision>() {
            Ok(p) => Some(p),
            Err(e) => {
                problems.push(problem(
                    "solver.precision",
                    format!("{e}; the preconditioner's precision (FGMRES is f64)"),
                ));
                None
            }
        };
        let defaults = crate::stokes::FGMRES_DEFAULT;
        let tolerance = s.tolerance.unwrap_or(defaults.tolerance);
        if !(tolerance > 0.0 && tolerance < 1.0) {
            problems.push(problem("solver.tolerance", format!("{tolerance} (allowed: 0 < tolerance < 1, the relative residual ‖b − Ax‖₂/‖b‖₂)")));
        }
        let restart = s.restart.unwrap_or(defaults.restart as i64);
        if !(1..=1000).contains(&restart) {
            problems.push(problem(
                "solver.restart",
                format!("{restart} (allowed: 1 ..= 1000 Krylov vectors per cycle)"),
            ));
        }
        let max_iterations = s.max_iterations.unwrap_or(defaults.max_iterations as i64);
        if !(1..=100_000).contains(&max_iterations) {
            problems.push(problem(
                "solver.max_iterations",
                format!("{max_iterations} (allowed: 1 ..= 100000)"),
            ));
        }
        let output = self.output_path("out/stokes.h5", &mut problems);
        match (backend, n, preconditioner, precision, output) {
            (Some(backend), Some(n), Some(preconditioner), Some(precision), Some(output))
                if problems.is_empty() =>
            {
                let fgmres = crate::krylov::FgmresParams {
                    restart: restart as usize,
                    tolerance,
                    max_iterations: max_iterations as usize,
                };
                Ok(RunConfig {
                    backend,
                    mesh: MeshSpec {
                        kind: MeshKind::UnitSquare,
                        element: Element::Q1,
                        n,
                        coarse: None,
                    },
                    ks: Vec::new(),
                    solver: SolverSpec {
                        method: Method::Stokes,
                        precision,
                        refine: false,
                        tolerance,
                        max_iterations: max_iterations as usize,
                        cache_dir: None,
                        mg: None,
                    },
                    output,
                    source: source.to_string(),
                    campaign: None,
                    stokes: Some(StokesSpec {
                        n,
                        preconditioner,
                        precision,
                        fgmres,
                    }),
                })
            }
            _ => Err(problems),
        }
    }

    /// Checks every value; returns all problems found, or the validated config.
    pub fn validate(&self, source: &str) -> Result<RunConfig, Vec<ConfigProblem>> {
        if let Some(campaign) = &self.campaign {
            let mut problems = Vec::new();
            return match crate::campaign::spec::validate(self, campaign, source, &mut problems) {
                Some((spec, run)) if problems.is_empty() => Ok(RunConfig {
                    campaign: Some(spec),
                    ..run
                }),
                _ => Err(problems),
            };
        }
        if self.solver.method.as_deref() == Some(STOKES) {
            return self.validate_stokes(source);
        }
        let mut problems = Vec::new();

        let backend = match self
            .backend
            .as_deref()
            .unwrap_or("auto")
            .parse::<BackendChoice>()
        {
            Ok(b) => Some(b),
            Err(e) => {
                problems.push(problem("backend", e));
                None
            }
        };

        let kind = match self.mesh.kind.as_deref().unwrap_or("unit-square") {
            "unit-square" => Some(MeshKind::UnitSquare),
            "unit-cube" => Some(MeshKind::UnitCube),
            other => {
                problems.push(problem(
                    "mesh.kind",
                    format!("unknown mesh kind '{other}' (allowed: unit-square, unit-cube)"),
                ));
                None
            }
        };
        let element = match (kind, self.mesh.element.as_deref().unwrap_or("q1")) {
            (Some(MeshKind::UnitCube), "q1") => Some(Element::Q1Hex),
            (Some(MeshKind::UnitCube), other) => {
                problems.push(problem(
                    "mesh.element",
                    format!("'{other}' on unit-cube (allowed: q1)"),
                ));
                None
            }
            (_, "q1") => Some(Element::Q1),
            (_, "p1") => Some(Element::P1),
            (_, other) => {
                problems.push(problem(
                    "mesh.element",
                    format!("unknown element '{other}' (allowed: q1, p1)"),
                ));
                None
            }
        };

        let n = self.cells(&mut problems);
        // Node indices are u32: refuse sizes that cannot be represented, naming the limit.
        let n = n.filter(|&n| {
            let dim = if kind == Some(MeshKind::UnitCube) {
                3
            } else {
                2
            };
            let nodes = (n as f64 + 1.0).powi(dim);
            if nodes > crate::mesh::MAX_NODES as f64 {
                problems.push(problem(
                    "mesh.n",
                    format!(
                        "n = {n} gives {nodes:.3e} nodes; at most {} are supported",
                        crate::mesh::MAX_NODES
                    ),
                ));
                false
            } else {
                true
            }
        });

        let coarse = match (self.mesh.h0, kind) {
            (None, _) => None,
            (Some(_), Some(MeshKind::UnitCube)) => {
                problems.push(problem(
                    "mesh.h0",
                    "a coarse mesh width applies to unit-square meshes only",
                ));
                None
            }
            (Some(h0), _) => {
                match (reciprocal_integer(h0), n) {
                    (None, _) => {
                        problems.push(problem(
                            "mesh.h0",
                            format!("{h0} is not 1/n0 for an integer n0 ≥ 1 (e.g. 0.25)"),
                        ));
                        None
                    }
                    (Some(n0), Some(n)) => {
                        let ratio = n / n0;
                        if n % n0 != 0 || !ratio.is_power_of_two() {
                            problems.push(problem(
                            "mesh.h0",
                            format!("h = 1/{n} is not h0 = 1/{n0} refined uniformly (need n = n0·2^j)"),
                        ));
                            None
                        } else {
                            Some((n0, ratio.trailing_zeros() as usize))
                        }
                    }
                    (Some(_), None) => None,
                }
            }
        };

        let k_values: Vec<i64> = match &self.problem.k {
            None => vec![1],
            Some(RawWaveNumbers::One(k)) => vec![*k],
            Some(RawWaveNumbers::Many(ks)) => ks.clone(),
        };
        let ks: Option<Vec<u32>> = if k_values.is_empty() {
            problems.push(problem(
                "problem.k",
                "the list is empty (give at least one wave number)",
            ));
            None
        } else if let Some(bad) = k_values.iter().find(|k| !(1..=MAX_K).contains(*k)) {
            problems.push(problem("problem.k", format!("{bad} is out of range (allowed: integers 1 ..= {MAX_K}; u = 0 on the boundary needs an integer k)")));
            None
        } else {
            Some(k_values.iter().map(|&k| k as u32).collect())
        };
        let nrhs = match self.solver.nrhs {
            None => Some(k_values.len().max(1)),
            Some(r) if (1..=MAX_NRHS).contains(&r) => Some(r as usize),
            Some(r) => {
                problems.push(problem("solver.nrhs", format!("{r} right-hand sides (allowed: 1 ..= {MAX_NRHS}; column c uses problem.k[c mod len])")));
                None
            }
        };
        // Column c solves for k[c mod len(k)].
        let ks = ks
            .zip(nrhs)
            .map(|(ks, nrhs)| (0..nrhs).map(|c| ks[c % ks.len()]).collect::<Vec<u32>>());

        let method = match self.solver.method.as_deref().unwrap_or("cholesky") {
            "cholesky" => Some(Method::Cholesky),
            "psc-m1" => Some(Method::PscM1),
            "mg" => Some(Method::Mg),
            other => {
                problems.push(problem(
                    "solver.method",
                    format!("unknown method '{other}' (allowed: {})", Method::NAMES),
                ));
                None
            }
        };
        let precision = match self
            .solver
            .precision
            .as_deref()
            .unwrap_or("f64")
            .parse::<Precision>()
        {
            Ok(p) => Some(p),
            Err(e) => {
                problems.push(problem("solver.precision", e));
                None
            }
        };
        let mg_keys = [
            ("solver.variant", self.solver.variant.is_some()),
            ("solver.schedule", self.solver.schedule.is_some()),
            ("solver.smoother", self.solver.smoother.is_some()),
            ("solver.levels", self.solver.levels.is_some()),
            (
                "solver.residual_scaling",
                self.solver.residual_scaling.is_some(),
            ),
            ("solver.seed", self.solver.seed.is_some()),
        ];
        for (key, given) in self.stokes_keys() {
            if given {
                problems.push(problem(key, "applies to method stokes only"));
            }
        }
        if method != Some(Method::Mg) {
            for (key, given) in mg_keys {
                if given {
                    problems.push(problem(key, "applies to method mg only"));
                }
            }
        }
        let mut mg = None;
        match method {
            Some(Method::Mg) => {
                mg = self.validate_mg(element, n, &mut problems);
                if self.solver.precision.is_some() {
                    problems.push(problem(
                        "solver.precision",
                        "method mg takes a precision per level: give solver.variant or solver.schedule",
                    ));
                }
                for (key, given) in [
                    ("solver.cache", self.solver.cache.is_some()),
                    ("solver.cache_dir", self.solver.cache_dir.is_some()),
                    ("mesh.h0", self.mesh.h0.is_some()),
                ] {
                    if given && !problems.iter().any(|p| p.key == key) {
                        problems.push(problem(key, "applies to method psc-m1 only (mg coarsens the mesh itself: solver.levels)"));
                    }
                }
            }
            Some(Method::Cholesky) => {
                if precision.is_some_and(|p| p != Precision::F64) {
                    problems.push(problem(
                        "solver.precision",
                        "method cholesky is the f64 reference (allowed: f64)",
                    ));
                }
                for (key, given) in [
                    ("solver.refine", self.solver.refine.is_some()),
                    ("solver.tolerance", self.solver.tolerance.is_some()),
                    (
                        "solver.max_iterations",
                        self.solver.max_iterations.is_some(),
                    ),
                    ("solver.cache", self.solver.cache.is_some()),
                    ("solver.cache_dir", self.solver.cache_dir.is_some()),
                ] {
                    if given {
                        problems.push(problem(key, "applies to method psc-m1 only"));
                    }
                }
            }
            Some(Method::PscM1) => {
                if kind == Some(MeshKind::UnitCube) {
                    problems.push(problem(
                        "solver.method",
                        "psc-m1 solves on unit-square meshes (allowed mesh.kind: unit-square)",
                    ));
                } else if self.mesh.h0.is_none() {
                    problems.push(problem("mesh.h0", "missing: psc-m1 needs the coarse mesh width h0 (n = (1/h0)·2^j, j ≥ 1; flop-optimal: h0 ≈ √h)"));
                } else if let Some((n0, levels)) = coarse {
                    if n0 < 2 || levels == 0 {
                        problems.push(problem("mesh.h0", format!("psc-m1 needs coarse interior nodes and at least one refinement (h0 ≤ 1/2 and h < h0; got h0 = 1/{n0}, {levels} refinements)")));
                    }
                }
            }
            // Stokes configs are validated by validate_stokes before reaching here.
            Some(Method::Stokes) | None => {}
        }
        let (default_tolerance, meaning) = match method {
            Some(Method::Mg) => (1e-9, "an absolute ‖b − Au‖₂"),
            _ => (1e-12, "a relative residual"),
        };
        let tolerance = self.solver.tolerance.unwrap_or(default_tolerance);
        if !(tolerance > 0.0 && tolerance < 1.0) {
            problems.push(problem(
                "solver.tolerance",
                format!("{tolerance} (allowed: 0 < tolerance < 1, {meaning})"),
            ));
        }
        let max_iterations = self
            .solver
            .max_iterations
            .unwrap_or(if method == Some(Method::Mg) { 100 } else { 30 });
        if !(1..=1000).contains(&max_iterations) {
            problems.push(problem(
                "solver.max_iterations",
                format!("{max_iterations} (allowed: 1 ..= 1000)"),
            ));
        }
        if self.solver.cache_dir.as_deref() == Some("") {
            problems.push(problem("solver.cache_dir", "is empty"));
        }

        let output = self.output_path("out/run.h5", &mut problems);

        match (backend, kind, element, n, ks, method, precision, output) {
            (
                Some(backend),
                Some(kind),
                Some(element),
                Some(n),
                Some(ks),
                Some(method),
                Some(precision),
                Some(output),
            ) if problems.is_empty() => {
                let cache_dir = match (method, self.solver.cache.unwrap_or(true)) {
                    (Method::PscM1, true) => Some(
                        self.solver
                            .cache_dir
                            .as_ref()
                            .map(PathBuf::from)
                            .unwrap_or_else(|| {
                                output.parent().unwrap_or(Path::new("")).join("psc-cache")
                            }),
                    ),
                    _ => None,
                };
                Ok(RunConfig {
                    backend,
                    mesh: MeshSpec {
                        kind,
                        element,
                        n,
                        coarse,
                    },
                    ks,
                    solver: SolverSpec {
                        method,
                        precision,
                        refine: self
                            .solver
                            .refine
                            .unwrap_or(precision != Precision::F64 || method == Method::Mg),
                        tolerance,
                        max_iterations: max_iterations as usize,
                        cache_dir,
                        mg,
                    },
                    output,
                    source: source.to_string(),
                    campaign: None,
                    stokes: None,
                })
            }
            _ => Err(problems),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quickstart_is_valid() {
        let c = parse(QUICKSTART, "quickstart").unwrap();
        assert_eq!(c.solver.method, Method::PscM1);
        let campaign = c.campaign.expect("the quickstart is a campaign");
        assert_eq!(
            campaign.rhs,
            crate::campaign::spec::RhsSource::TimeSeries {
                steps: 32,
                t_end: 1.0
            }
        );
        assert_eq!(campaign.batch_size, 8);
        assert_eq!(
            campaign.operators[0].solver.cache_dir,
            Some(PathBuf::from("out/quickstart/psc-cache"))
        );
        assert_eq!(c.source, QUICKSTART);
    }

    #[test]
    fn full_config() {
        let c = parse(
            "backend = \"cpu\"\n[mesh]\nkind = \"unit-square\"\nelement = \"p1\"\nh = 0.0078125\nh0 = 0.25\n\
             [problem]\nk = 20\n[solver]\nmethod = \"cholesky\"\nprecision = \"f64\"\n[output]\npath = \"a/b.h5\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.backend, BackendChoice::Cpu);
        assert_eq!(
            c.mesh,
            MeshSpec {
                kind: MeshKind::UnitSquare,
                element: Element::P1,
                n: 128,
                coarse: Some((4, 5))
            }
        );
        assert_eq!(c.ks, vec![20]);
        assert_eq!(c.solver.cache_dir, None);
        assert_eq!(c.output, PathBuf::from("a/b.h5"));
        let c = parse(
            "[mesh]\nn = 64\nh0 = 0.125\n[problem]\nk = [1, 4]\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f16\"\nnrhs = 5\n[output]\npath = \"r/x.h5\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.ks, vec![1, 4, 1, 4, 1]);
        assert!(c.solver.refine, "low precisions refine by default");
        assert_eq!(c.solver.cache_dir, Some(PathBuf::from("r/psc-cache")));
    }

    #[test]
    fn example_inputs_are_valid() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/inputs");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        }
    }

    #[test]
    fn multigrid_settings() {
        let c = parse(
            "[mesh]\nn = 4096\n[solver]\nmethod = \"mg\"\n[output]\npath = \"m.h5\"\n",
            "t",
        )
        .unwrap();
        let mg = c.solver.mg.unwrap();
        assert_eq!(mg.schedule, vec![Precision::F64; 10]);
        assert_eq!(mg.variant, Some(Variant::DMg));
        assert!(c.solver.refine && mg.residual_scaling);
        assert_eq!((c.solver.tolerance, c.solver.max_iterations), (1e-9, 100));
        let c = parse(
            "[mesh]\nkind = \"unit-cube\"\nn = 32\n[solver]\nmethod = \"mg\"\nschedule = [\"f16\", \"f32\", \"f64\"]\nlevels = 3\nsmoother = \"richardson\"\nseed = 5\n[output]\npath = \"m.h5\"\n",
            "t",
        )
        .unwrap();
        let mg = c.solver.mg.unwrap();
        assert_eq!(
            mg.schedule,
            vec![Precision::F16, Precision::F32, Precision::F64]
        );
        assert_eq!(
            (mg.variant, mg.smoother, mg.seed),
            (None, Smoother::RICHARDSON, 5)
        );
        let p = problems(
            "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nschedule = [\"f16\", \"f32\"]\nresidual_scaling = \"yes\"\n[output]\npath = \"m.h5\"\n",
        );
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            ["solver.residual_scaling", "solver.schedule"],
            "{p:?}"
        );
        let p = problems(
            "[mesh]\nn = 64\n[solver]\nmethod = \"cholesky\"\nvariant = \"H_MG\"\n[output]\npath = \"m.h5\"\n",
        );
        assert_eq!(p[0].key, "solver.variant");
    }

    fn problems(text: &str) -> Vec<ConfigProblem> {
        match parse(text, "t") {
            Err(Error::Config { problems, .. }) => problems,
            other => panic!("expected config problems, got {other:?}"),
        }
    }

    #[test]
    fn three_mistakes_are_all_reported() {
        let p = problems(
            "[mesh]\nn = 64\nelemnt = \"q1\"\n[solver]\nmethod = \"lu\"\n[output]\npath = \"x.h5\"\n[problem]\nk = 0\n",
        );
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["mesh.elemnt", "problem.k", "solver.method"], "{p:?}");
        assert!(
            p[0].message
                .contains("allowed in [mesh]: kind, element, n, h, h0"),
            "{}",
            p[0].message
        );
        assert!(p[2].message.contains("allowed: cholesky"));
    }

    #[test]
    fn type_errors_in_two_sections_are_both_reported() {
        let p = problems("[mesh]\nn = \"big\"\nelement = \"q2\"\n[output]\npath = 3\n");
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["mesh.n", "output.path", "mesh.element"], "{p:?}");
        assert!(p[0].message.contains("expected i64"), "{}", p[0].message);
    }

    #[test]
    fn value_checks() {
        let base = "[output]\npath = \"x.h5\"\n[mesh]\n";
        let one = |extra: &str| problems(&format!("{base}{extra}"));
        assert_eq!(one("n = 1\n")[0].key, "mesh.n");
        assert_eq!(one("n = 8\nh = 0.125\n")[0].key, "mesh.n");
        assert_eq!(one("h = 0.3\n")[0].key, "mesh.h");
        assert_eq!(one("n = 24\nh0 = 0.25\n")[0].key, "mesh.h0");
        assert_eq!(one("n = 64\nh0 = 0.3\n")[0].key, "mesh.h0");
        assert_eq!(
            one("n = 8\nkind = \"unit-cube\"\nelement = \"p1\"\n")[0].key,
            "mesh.element"
        );
        assert_eq!(
            one("n = 8\nkind = \"unit-cube\"\nh0 = 0.5\n")[0].key,
            "mesh.h0"
        );
        assert_eq!(one("n = 70000\n")[0].key, "mesh.n");
        assert!(problems("[mesh]\nn = 8\n")[0].key == "output.path");
        let p = problems("backend = \"gpu\"\n[mesh]\nn = 8\n[output]\npath = \"x.h5\"\n[solver]\nprecision = \"f16\"\n");
        assert_eq!(
            p.iter().map(|p| p.key.as_str()).collect::<Vec<_>>(),
            ["backend", "solver.precision"]
        );
        let p = problems("bogus = 1\n[mesh]\nn = 8\n[output]\npath = \"x.h5\"\n");
        assert_eq!(p[0].key, "bogus");
        let psc = |extra: &str| {
            problems(&format!(
                "[output]\npath = \"x.h5\"\n[solver]\nmethod = \"psc-m1\"\n{extra}"
            ))
        };
        assert_eq!(psc("[mesh]\nn = 64\n")[0].key, "mesh.h0");
        assert_eq!(psc("[mesh]\nn = 64\nh0 = 1.0\n")[0].key, "mesh.h0");
        assert_eq!(
            psc("nrhs = 0\n[mesh]\nn = 64\nh0 = 0.25\n")[0].key,
            "solver.nrhs"
        );
        assert_eq!(
            psc("tolerance = 2.0\n[mesh]\nn = 64\nh0 = 0.25\n")[0].key,
            "solver.tolerance"
        );
        assert_eq!(
            problems("[mesh]\nn = 8\n[problem]\nk = []\n[output]\npath = \"x.h5\"\n")[0].key,
            "problem.k"
        );
        assert_eq!(
            problems("[mesh]\nn = 8\n[solver]\nrefine = true\n[output]\npath = \"x.h5\"\n")[0].key,
            "solver.refine"
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let p = problems("[mesh]\nn = 8\n[output\n");
        assert_eq!(p[0].key, "(syntax)");
        assert!(p[0].message.contains("line 3"), "{}", p[0].message);
    }
}
