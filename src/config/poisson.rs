//! A single Poisson run (no `[campaign]`): the manufactured right-hand sides of
//! `[problem]`, the mesh, the method with its own settings (each method's validator in
//! its module), the output file.

use super::mesh::{backend, boundary, cells_within_limits, coarse, kind_and_element, output_path};
use super::raw::{RawConfig, RawWaveNumbers};
use super::spec::{Method, RunConfig, SolverSpec, MAX_K, MAX_NRHS};
use super::{mg, problem, psc, stokes, Problems};
use crate::linalg::Tolerance;
use crate::mesh::{MeshKind, MeshSpec};
use crate::precision::Precision;

/// Checks every value of a Poisson run; returns all problems found, or the validated config.
pub(super) fn validate(raw: &RawConfig, source: &str) -> Result<RunConfig, Problems> {
    let mut problems = Vec::new();
    let backend = backend(raw, &mut problems);
    let mesh = kind_and_element(raw, &mut problems);
    let boundary = boundary(raw, &mesh, &mut problems);
    let (kind, element, domain) = (mesh.kind, mesh.element, mesh.domain);
    let refined = matches!(kind, Some(MeshKind::FlowAroundSquare | MeshKind::Gmsh));
    // A refined domain: n = 2^levels cells per coarse cell side, macro elements of
    // 2^coarse_levels cells per side.
    let (n, coarse) = if refined {
        let n = domain.as_ref().map(|d| 1 << d.levels);
        let coarse = domain
            .as_ref()
            .map(|d| (1 << d.coarse_levels, d.levels - d.coarse_levels));
        (n, coarse)
    } else if kind.is_some() {
        let n = cells_within_limits(raw, kind, &mut problems);
        (n, coarse(raw, kind, n, &mut problems))
    } else {
        (None, None) // an unknown kind: its cells would only add follow-on problems
    };
    let ks = wave_numbers(raw, &mut problems);

    let method = match raw.solver.method.as_deref().unwrap_or("cholesky") {
        "cholesky" => Some(Method::Cholesky),
        "psc-m1" => Some(Method::PscM1),
        "psc-m2" => Some(Method::PscM2),
        "psc-m3" => Some(Method::PscM3),
        "mg" => Some(Method::Mg),
        other => {
            problems.push(problem(
                "solver.method",
                format!(
                    "unknown method '{other}'{} (allowed: {})",
                    super::did_you_mean(other, Method::NAMES.split(", ")),
                    Method::NAMES
                ),
            ));
            None
        }
    };
    let precision = match raw
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
    // Keys of other methods are refused once the method is known: after a typo in it,
    // they would only add follow-on errors.
    if method.is_some() {
        stokes::refuse_keys(raw, &mut problems);
    }
    if method.is_some_and(|m| m != Method::Mg) {
        mg::refuse_keys(raw, &mut problems);
    }
    let mut mg = None;
    let coarsening = match &domain {
        Some(d) => Some(mg::Coarsening::Refined { levels: d.levels }),
        None if refined => None,
        None => n.map(|n| mg::Coarsening::Uniform { n }),
    };
    match method {
        Some(Method::Mg) => mg = mg::validate(raw, coarsening, element, &mut problems),
        Some(Method::Cholesky) => psc::validate_cholesky(raw, precision, &mut problems),
        Some(m @ (Method::PscM1 | Method::PscM2 | Method::PscM3)) => {
            psc::validate(raw, m, kind, coarse, domain.as_ref(), &mut problems)
        }
        // Stokes configs are validated by stokes::validate before reaching here.
        Some(Method::Stokes) | None => {}
    }
    // One rule for every method (docs/mathematics.md §6): relative by default, never an
    // absolute part the user did not ask for.
    let defaults = (1e-10, 0.0);
    let (rtol, atol) = super::stopping_rule(raw, defaults, &mut problems);
    let max_iterations = raw
        .solver
        .max_iterations
        .unwrap_or(if method == Some(Method::Mg) { 100 } else { 30 });
    if !(1..=1000).contains(&max_iterations) {
        problems.push(problem(
            "solver.max_iterations",
            format!("{max_iterations} (allowed: 1 ..= 1000)"),
        ));
    }
    let cg_rtol = psc::cg_rtol(raw, method, &mut problems);
    let coupling = psc::coupling(raw, method, &mut problems);
    if raw.solver.cache_dir.as_deref() == Some("") {
        problems.push(problem("solver.cache_dir", "is empty"));
    }

    // An embedding program keeps the solutions itself: no output file.
    let output = if raw.embedded {
        Some(std::path::PathBuf::new())
    } else {
        output_path(raw, "out/run.h5", &mut problems)
    };
    let cache_dir = match (method, &output) {
        (Some(method), Some(output)) => psc::cache_dir(raw, method, output),
        _ => None,
    };

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
            let refine = raw
                .solver
                .refine
                .unwrap_or(precision != Precision::F64 || method == Method::Mg);
            Ok(RunConfig {
                backend,
                mesh: MeshSpec {
                    kind,
                    element,
                    n,
                    coarse,
                    domain,
                    boundary,
                },
                ks,
                solver: SolverSpec {
                    method,
                    precision,
                    refine,
                    rtol,
                    atol,
                    tolerance: match (method, refine, raw.solver.rtol) {
                        (Method::Cholesky, _, _) => Tolerance {
                            rtol: psc::UNREFINED_F64_TOLERANCE,
                            atol: 0.0,
                        },
                        (m, false, None) if m.is_psc() => Tolerance {
                            rtol: psc::unrefined_tolerance(precision),
                            atol,
                        },
                        _ => Tolerance { rtol, atol },
                    },
                    max_iterations: max_iterations as usize,
                    cg_rtol,
                    coupling,
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

/// problem.k and solver.nrhs: the wave number of every column (column c solves for
/// k[c mod len(k)]).
fn wave_numbers(raw: &RawConfig, problems: &mut Problems) -> Option<Vec<u32>> {
    let k_values: Vec<i64> = match &raw.problem.k {
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
    let nrhs = match raw.solver.nrhs {
        None => Some(k_values.len().max(1)),
        Some(r) if (1..=MAX_NRHS).contains(&r) => Some(r as usize),
        Some(r) => {
            problems.push(problem("solver.nrhs", format!("{r} right-hand sides (allowed: 1 ..= {MAX_NRHS}; column c uses problem.k[c mod len])")));
            None
        }
    };
    ks.zip(nrhs)
        .map(|(ks, nrhs)| (0..nrhs).map(|c| ks[c % ks.len()]).collect())
}
