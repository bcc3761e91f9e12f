//! The `[campaign]` section: where the right-hand sides come from, how they are cut into
//! batches, where the output goes, and the checkpoint policy. A parameter study is expanded
//! here into one validated operator (mesh + solver) per combination, so every mistake of
//! every combination is reported before any rank allocates anything.

use std::path::PathBuf;

use serde::Deserialize;

use super::raw::RawConfig;
use super::spec::{
    CampaignSpec, Method, OperatorSpec, RhsSource, RunConfig, MAX_K, MAX_NRHS, STOKES,
};
use super::{problem, Problems};
use crate::precision::Precision;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimeSeries {
    pub steps: Option<i64>,
    pub t_end: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStudy {
    pub k: Option<Vec<i64>>,
    pub n: Option<Vec<i64>>,
    pub levels: Option<Vec<i64>>,
    pub h0: Option<Vec<f64>>,
    pub method: Option<Vec<String>>,
    pub precision: Option<Vec<String>>,
    pub preconditioner: Option<Vec<String>>,
    pub relaxation: Option<Vec<String>>,
    pub omega: Option<Vec<f64>>,
    pub t: Option<Vec<f64>>,
    pub jacobi_steps: Option<Vec<i64>>,
    pub jacobi_weight: Option<Vec<f64>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInput {
    pub path: Option<String>,
    pub dataset: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCampaign {
    pub rhs: Option<String>,
    pub batch_size: Option<i64>,
    pub directory: Option<String>,
    pub checkpoint: Option<String>,
    pub store: Option<String>,
    pub compression: Option<i64>,
    pub store_exact: Option<bool>,
    pub keep_batches: Option<bool>,
    pub time_series: Option<RawTimeSeries>,
    pub study: Option<RawStudy>,
    pub input: Option<RawInput>,
}

const RHS_NAMES: &str = "time-series, study, hdf5";

/// Validates `[campaign]` of `raw` (which has one); every problem is pushed. The base
/// sections are validated here too (once, or once per study combination), so the caller
/// validates nothing else.
pub(super) fn validate(
    raw: &RawConfig,
    campaign: &RawCampaign,
    source: &str,
    problems: &mut Problems,
) -> Option<(CampaignSpec, RunConfig)> {
    let study_methods = campaign.study.as_ref().and_then(|s| s.method.as_deref());
    let stokes = match study_methods {
        Some(methods) if methods.iter().any(|m| m == STOKES) => {
            if methods.iter().any(|m| m != STOKES) {
                problems.push(problem(
                    "campaign.study.method",
                    "stokes cannot share a study with the Poisson methods (another problem, another output): run them as two campaigns",
                ));
                return None;
            }
            true
        }
        Some(_) => false,
        None => raw.solver.method.as_deref() == Some(STOKES),
    };
    let directory = match campaign.directory.as_deref() {
        None => {
            problems.push(problem(
                "campaign.directory",
                "missing: the directory the campaign writes (one file per batch, the journal, campaign.h5)",
            ));
            None
        }
        Some("") => {
            problems.push(problem("campaign.directory", "is empty"));
            None
        }
        Some(d) => Some(PathBuf::from(d)),
    };
    if raw.output.path.is_some() {
        problems.push(problem(
            "output.path",
            "a campaign writes into campaign.directory (campaign.h5 and one file per batch); remove [output]",
        ));
    }
    for (key, given) in [
        ("problem.k", raw.problem.k.is_some()),
        ("solver.nrhs", raw.solver.nrhs.is_some()),
    ] {
        if given {
            problems.push(problem(key, "a campaign takes its right-hand sides from campaign.rhs (the study's wave numbers: campaign.study.k)"));
        }
    }
    if stokes && campaign.batch_size.is_some() {
        problems.push(problem(
            "campaign.batch_size",
            "does not apply to method stokes: FGMRES solves one right-hand side at a time, so each operator's problem is one batch",
        ));
    }
    let batch_size = match campaign.batch_size.unwrap_or(if stokes { 1 } else { 8 }) {
        b if (1..=MAX_NRHS).contains(&b) => Some(b as usize),
        b => {
            problems.push(problem(
                "campaign.batch_size",
                format!("{b} (allowed: 1 ..= {MAX_NRHS} columns per batch)"),
            ));
            None
        }
    };
    let checkpoint = match campaign.checkpoint.as_deref().unwrap_or("batch") {
        "batch" => Some(true),
        "none" => Some(false),
        other => {
            problems.push(problem(
                "campaign.checkpoint",
                format!("unknown policy '{other}' (allowed: batch — journal every batch and resume; none)"),
            ));
            None
        }
    };
    let store = match campaign.store.as_deref().unwrap_or("f64") {
        "f64" => Some(Precision::F64),
        "f32" => Some(Precision::F32),
        other => {
            problems.push(problem(
                "campaign.store",
                format!("'{other}' (allowed: f64, f32 — the precision solutions are stored in)"),
            ));
            None
        }
    };
    let compression = match campaign.compression.unwrap_or(0) {
        c @ 0..=9 => Some(c as u8),
        c => {
            problems.push(problem(
                "campaign.compression",
                format!("{c} (allowed: 0 = none, 1 ..= 9 = gzip level)"),
            ));
            None
        }
    };
    let sub_tables = [
        (
            "time-series",
            "campaign.time_series",
            campaign.time_series.is_some(),
        ),
        ("study", "campaign.study", campaign.study.is_some()),
        ("hdf5", "campaign.input", campaign.input.is_some()),
    ];
    let rhs_name = campaign.rhs.as_deref();
    match rhs_name {
        None => problems.push(problem(
            "campaign.rhs",
            format!("missing: where the right-hand sides come from (allowed: {RHS_NAMES})"),
        )),
        Some(name) if !sub_tables.iter().any(|(n, _, _)| *n == name) => problems.push(problem(
            "campaign.rhs",
            format!("unknown source '{name}' (allowed: {RHS_NAMES})"),
        )),
        Some(_) => {}
    }
    for (name, key, given) in sub_tables {
        if given && rhs_name.is_some_and(|r| r != name) {
            problems.push(problem(
                key,
                format!("applies to campaign.rhs = \"{name}\" only"),
            ));
        }
    }

    // The base sections, with the campaign's output file standing in for [output].
    let mut base = raw.clone();
    base.campaign = None;
    base.problem.k = None;
    base.solver.nrhs = None;
    base.rhs_from_input = rhs_name == Some("hdf5");
    base.output.path = Some(
        directory
            .clone()
            .unwrap_or_else(|| PathBuf::from("campaign"))
            .join("campaign.h5")
            .display()
            .to_string(),
    );
    let (rhs, operators, run) = match rhs_name {
        Some("study") if stokes => {
            let study = campaign.study.clone().unwrap_or_default();
            for (key, given) in [
                ("campaign.study.k", study.k.is_some()),
                ("campaign.study.h0", study.h0.is_some()),
                ("campaign.study.levels", study.levels.is_some()),
            ] {
                if given {
                    problems.push(problem(key, "does not apply to method stokes (each operator solves the manufactured Stokes problem once)"));
                }
            }
            let (operators, run) = expand_stokes_study(&base, &study, source, problems);
            (Some(RhsSource::StokesStudy), operators, run)
        }
        Some(other) if stokes => {
            problems.push(problem(
                "campaign.rhs",
                format!("'{other}' does not apply to method stokes: a Stokes campaign is a parameter study of the manufactured problem (campaign.rhs = \"study\")"),
            ));
            (None, None, None)
        }
        Some("time-series") => {
            let ts = campaign.time_series.clone().unwrap_or_default();
            let steps = match ts.steps {
                None => {
                    problems.push(problem(
                        "campaign.time_series.steps",
                        "missing: the number of time steps (one right-hand side each)",
                    ));
                    None
                }
                Some(s) if (1..=MAX_NRHS).contains(&s) => Some(s as usize),
                Some(s) => {
                    problems.push(problem(
                        "campaign.time_series.steps",
                        format!("{s} (allowed: 1 ..= {MAX_NRHS})"),
                    ));
                    None
                }
            };
            let t_end = ts.t_end.unwrap_or(1.0);
            if !(t_end.is_finite() && t_end > 0.0) {
                problems.push(problem(
                    "campaign.time_series.t_end",
                    format!("{t_end} (allowed: a finite time > 0)"),
                ));
            }
            let run = base_operator(&base, source, problems);
            (
                steps.map(|steps| RhsSource::TimeSeries { steps, t_end }),
                run.as_ref().map(|r| vec![operator_of(r)]),
                run,
            )
        }
        Some("hdf5") => {
            let input = campaign.input.clone().unwrap_or_default();
            let path = match input.path.as_deref() {
                None | Some("") => {
                    problems.push(problem(
                        "campaign.input.path",
                        "missing: the HDF5 file holding the right-hand sides",
                    ));
                    None
                }
                Some(p) => Some(PathBuf::from(p)),
            };
            let dataset = input.dataset.unwrap_or_else(|| "rhs".into());
            let run = base_operator(&base, source, problems);
            (
                path.map(|path| RhsSource::Hdf5 { path, dataset }),
                run.as_ref().map(|r| vec![operator_of(r)]),
                run,
            )
        }
        Some("study") => {
            let study = campaign.study.clone().unwrap_or_default();
            let ks = study.k.clone().unwrap_or_else(|| vec![1]);
            let ks: Option<Vec<u32>> = if ks.is_empty() {
                problems.push(problem("campaign.study.k", "the list is empty"));
                None
            } else if let Some(bad) = ks.iter().find(|&&k| !(1..=MAX_K).contains(&k)) {
                problems.push(problem(
                    "campaign.study.k",
                    format!("{bad} is out of range (allowed: integers 1 ..= {})", MAX_K),
                ));
                None
            } else {
                Some(ks.iter().map(|&k| k as u32).collect())
            };
            for (key, given) in [
                (
                    "campaign.study.preconditioner",
                    study.preconditioner.is_some(),
                ),
                ("campaign.study.relaxation", study.relaxation.is_some()),
                ("campaign.study.omega", study.omega.is_some()),
                ("campaign.study.t", study.t.is_some()),
                ("campaign.study.jacobi_steps", study.jacobi_steps.is_some()),
                (
                    "campaign.study.jacobi_weight",
                    study.jacobi_weight.is_some(),
                ),
            ] {
                if given {
                    problems.push(problem(key, "applies to method stokes only"));
                }
            }
            let (operators, run) = expand_study(&base, &study, source, problems);
            (ks.map(|ks| RhsSource::Study { ks }), operators, run)
        }
        _ => (None, None, None),
    };
    let spec = CampaignSpec {
        rhs: rhs?,
        batch_size: batch_size?,
        directory: directory?,
        checkpoint: checkpoint?,
        store: store?,
        compression: compression?,
        store_exact: campaign.store_exact.unwrap_or(false),
        keep_batches: campaign.keep_batches.unwrap_or(false),
        operators: operators?,
    };
    problems.is_empty().then_some((spec, run?))
}

fn operator_of(run: &RunConfig) -> OperatorSpec {
    OperatorSpec {
        mesh: run.mesh.clone(),
        solver: run.solver.clone(),
        stokes: run.stokes,
    }
}

fn base_operator(base: &RawConfig, source: &str, problems: &mut Problems) -> Option<RunConfig> {
    match super::validate(base, source) {
        Ok(run) => Some(run),
        Err(more) => {
            problems.extend(more);
            None
        }
    }
}

/// Every combination of the study's lists, validated as if written out by hand. Lists left
/// out take the base sections' value; h0 and precision apply to the psc methods only
/// (cholesky runs in f64 only, multigrid takes its schedule from [solver]), so
/// combinations differing only there are one operator.
fn expand_study(
    base: &RawConfig,
    study: &RawStudy,
    source: &str,
    problems: &mut Problems,
) -> (Option<Vec<OperatorSpec>>, Option<RunConfig>) {
    let ns = study_values("campaign.study.n", &study.n, None, problems);
    // The refined domains' mesh sizes (mesh.levels), as n is the unit square's.
    let levels = study_values("campaign.study.levels", &study.levels, None, problems);
    let h0s = study_values("campaign.study.h0", &study.h0, base.mesh.h0, problems);
    let methods = study_values(
        "campaign.study.method",
        &study.method,
        base.solver.method.clone(),
        problems,
    );
    let precisions = study_values(
        "campaign.study.precision",
        &study.precision,
        base.solver.precision.clone(),
        problems,
    );
    let mut operators: Vec<OperatorSpec> = Vec::new();
    let mut first_run = None;
    let mut seen: Vec<String> = Vec::new();
    for (&n, &level) in ns.iter().flat_map(|n| levels.iter().map(move |l| (n, l))) {
        for &h0 in &h0s {
            for method in &methods {
                for precision in &precisions {
                    let mut raw = base.clone();
                    if let Some(n) = n {
                        raw.mesh.n = Some(n);
                        raw.mesh.h = None;
                    }
                    if let Some(level) = level {
                        raw.mesh.levels = Some(level);
                    }
                    let is_psc = method.as_deref().is_some_and(|m| m.starts_with("psc-"));
                    raw.mesh.h0 = if is_psc { h0 } else { None };
                    raw.solver.method = method.clone();
                    raw.solver.precision = if is_psc { precision.clone() } else { None };
                    let is_mg = raw.solver.method.as_deref() == Some(Method::Mg.name());
                    if raw.solver.method.as_deref() != Some(Method::PscM3.name()) {
                        raw.solver.cg_rtol = None;
                    }
                    if !is_psc {
                        raw.solver.coupling = None;
                        raw.solver.cache = None;
                        raw.solver.cache_dir = None;
                    }
                    if !is_psc && !is_mg {
                        raw.solver.precision = Some(Precision::F64.name().into());
                        raw.solver.refine = None;
                        raw.solver.rtol = None;
                        raw.solver.atol = None;
                        raw.solver.max_iterations = None;
                    }
                    if is_mg {
                        // PSC's macro elements: mg coarsens down to the coarse mesh.
                        raw.mesh.coarse_levels = None;
                    } else {
                        raw.solver.variant = None;
                        raw.solver.schedule = None;
                        raw.solver.smoother = None;
                        raw.solver.pre_smoothing = None;
                        raw.solver.krylov = None;
                        raw.solver.post_smoothing = None;
                        raw.solver.omega = None;
                        raw.solver.levels = None;
                        raw.solver.residual_scaling = None;
                        raw.solver.seed = None;
                        raw.solver.cycle_columns = None;
                    }
                    let label = format!(
                        "{}, h0 = {}, method = {}, precision = {}",
                        match raw.mesh.levels {
                            Some(l) => format!("levels = {l}"),
                            None => format!(
                                "n = {}",
                                raw.mesh.n.map_or("(base)".into(), |n| n.to_string())
                            ),
                        },
                        raw.mesh.h0.map_or("-".into(), |h| h.to_string()),
                        raw.solver.method.as_deref().unwrap_or("(base)"),
                        raw.solver.precision.as_deref().unwrap_or("-"),
                    );
                    if seen.contains(&label) {
                        continue;
                    }
                    seen.push(label.clone());
                    match super::validate(&raw, source) {
                        Ok(run) => {
                            operators.push(operator_of(&run));
                            first_run.get_or_insert(run);
                        }
                        Err(more) => problems.extend(more.into_iter().map(|p| {
                            problem(
                                "campaign.study",
                                format!("combination [{label}]: {}: {}", p.key, p.message),
                            )
                        })),
                    }
                }
            }
        }
    }
    let complete = operators.len() == seen.len() && !seen.is_empty();
    (complete.then_some(operators), first_run)
}

/// A study list's values (`None`: the base value, once); an empty list is a problem.
fn study_values<T: Clone>(
    key: &'static str,
    list: &Option<Vec<T>>,
    base: Option<T>,
    problems: &mut Problems,
) -> Vec<Option<T>> {
    match list {
        Some(list) if list.is_empty() => {
            problems.push(problem(
                key,
                "the list is empty (leave it out to use the base value)",
            ));
            vec![]
        }
        Some(list) => list.iter().cloned().map(Some).collect(),
        None => vec![base],
    }
}

/// Every config of `configs` once with each value of a study list (`key`: the list given,
/// or else the base value) set by `set`.
fn vary<T: Clone>(
    configs: Vec<RawConfig>,
    key: &'static str,
    (list, base): (&Option<Vec<T>>, Option<T>),
    problems: &mut Problems,
    set: impl Fn(&mut RawConfig, Option<T>),
) -> Vec<RawConfig> {
    let values = study_values(key, list, base, problems);
    let set = &set;
    configs
        .into_iter()
        .flat_map(|raw| {
            values.iter().map(move |v| {
                let mut raw = raw.clone();
                set(&mut raw, v.clone());
                raw
            })
        })
        .collect()
}

/// Every combination of a Stokes study's lists (mesh size, precision, preconditioner,
/// relaxation and its parameters), validated as if written out by hand. A parameter
/// applies only where the relaxation uses it (ω: vanka, vanka-tuned, braess-sarazin; t and
/// the Jacobi steps and weight: braess-sarazin, schur-uzawa; none: block-triangular), so
/// combinations differing only in parameters they do not use are one operator; a list that
/// applies to none of the study's combinations is refused.
fn expand_stokes_study(
    base: &RawConfig,
    study: &RawStudy,
    source: &str,
    problems: &mut Problems,
) -> (Option<Vec<OperatorSpec>>, Option<RunConfig>) {
    let s = &base.solver;
    let mut base = base.clone();
    base.solver.method = Some(STOKES.into());
    let mut raws = vec![base];
    raws = vary(
        raws,
        "campaign.study.n",
        (&study.n, None),
        problems,
        |r, n| {
            if let Some(n) = n {
                r.mesh.n = Some(n);
                r.mesh.h = None;
            }
        },
    );
    let key = "campaign.study.precision";
    let list = (&study.precision, s.precision.clone());
    raws = vary(raws, key, list, problems, |r, v| r.solver.precision = v);
    let key = "campaign.study.preconditioner";
    let list = (&study.preconditioner, s.preconditioner.clone());
    raws = vary(raws, key, list, problems, |r, v| {
        r.solver.preconditioner = v
    });
    let key = "campaign.study.relaxation";
    let list = (&study.relaxation, s.relaxation.clone());
    raws = vary(raws, key, list, problems, |r, v| r.solver.relaxation = v);
    let list = (&study.omega, s.omega);
    raws = vary(raws, "campaign.study.omega", list, problems, |r, v| {
        r.solver.omega = v
    });
    let list = (&study.t, s.t);
    raws = vary(raws, "campaign.study.t", list, problems, |r, v| {
        r.solver.t = v
    });
    let key = "campaign.study.jacobi_steps";
    let list = (&study.jacobi_steps, s.jacobi_steps);
    raws = vary(raws, key, list, problems, |r, v| r.solver.jacobi_steps = v);
    let key = "campaign.study.jacobi_weight";
    let list = (&study.jacobi_weight, s.jacobi_weight);
    raws = vary(raws, key, list, problems, |r, v| r.solver.jacobi_weight = v);

    let (mut any_multigrid, mut any_omega, mut any_schur) = (false, false, false);
    let mut operators: Vec<OperatorSpec> = Vec::new();
    let mut first_run = None;
    let mut failed = false;
    for mut raw in raws {
        let r = &mut raw.solver;
        let multigrid = r.preconditioner.as_deref().unwrap_or("multigrid") == "multigrid";
        if !multigrid {
            r.relaxation = None;
        }
        let relaxation = r.relaxation.as_deref().unwrap_or("vanka-tuned");
        let uses_omega =
            multigrid && ["vanka", "vanka-tuned", "braess-sarazin"].contains(&relaxation);
        let uses_schur = multigrid && ["braess-sarazin", "schur-uzawa"].contains(&relaxation);
        if !uses_omega {
            r.omega = None;
        }
        if !uses_schur {
            (r.t, r.jacobi_steps, r.jacobi_weight) = (None, None, None);
        }
        any_multigrid |= multigrid;
        any_omega |= uses_omega;
        any_schur |= uses_schur;
        let show = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        let label = format!(
            "n = {}, precision = {}, preconditioner = {}, relaxation = {}, omega = {}, t = {}, jacobi_steps = {}, jacobi_weight = {}",
            show(raw.mesh.n.map(|n| n.to_string())),
            show(r.precision.clone()),
            show(r.preconditioner.clone()),
            show(r.relaxation.clone()),
            show(r.omega.map(|v| v.to_string())),
            show(r.t.map(|v| v.to_string())),
            show(r.jacobi_steps.map(|v| v.to_string())),
            show(r.jacobi_weight.map(|v| v.to_string())),
        );
        match super::validate(&raw, source) {
            Ok(run) => {
                let op = operator_of(&run);
                if !operators.contains(&op) {
                    operators.push(op);
                }
                first_run.get_or_insert(run);
            }
            Err(more) => {
                failed = true;
                problems.extend(more.into_iter().map(|p| {
                    problem(
                        "campaign.study",
                        format!("combination [{label}]: {}: {}", p.key, p.message),
                    )
                }));
            }
        }
    }
    let schur = "relaxations braess-sarazin and schur-uzawa";
    for (key, given, applied, applies_to) in [
        (
            "campaign.study.relaxation",
            study.relaxation.is_some(),
            any_multigrid,
            "preconditioner multigrid",
        ),
        (
            "campaign.study.omega",
            study.omega.is_some(),
            any_omega,
            "relaxations vanka, vanka-tuned and braess-sarazin",
        ),
        ("campaign.study.t", study.t.is_some(), any_schur, schur),
        (
            "campaign.study.jacobi_steps",
            study.jacobi_steps.is_some(),
            any_schur,
            schur,
        ),
        (
            "campaign.study.jacobi_weight",
            study.jacobi_weight.is_some(),
            any_schur,
            schur,
        ),
    ] {
        if given && !applied {
            problems.push(problem(
                key,
                format!("applies to {applies_to}, none of which this study runs"),
            ));
        }
    }
    let complete = !failed && !operators.is_empty();
    (complete.then_some(operators), first_run)
}
