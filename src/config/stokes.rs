//! A Stokes run (`method = "stokes"`, docs/mathematics.md §7): the unit-square mesh, the
//! preconditioner with its relaxation and parameters, the preconditioner's precision,
//! FGMRES settings; and the Stokes keys refused for other methods.

use super::mesh::{cells, output_path};
use super::raw::RawConfig;
use super::spec::{Method, RunConfig, SolverSpec};
use super::{problem, Problems};
use crate::mesh::{Element, MeshKind, MeshSpec};
use crate::precision::Precision;
use crate::stokes::{Preconditioner, Relaxation, StokesSpec};

/// The [solver] keys only method stokes takes, refused for the others (`solver.omega`,
/// which multigrid takes too, is refused by the Poisson validator).
pub(super) fn refuse_keys(raw: &RawConfig, problems: &mut Problems) {
    let s = &raw.solver;
    for (key, given) in [
        ("solver.preconditioner", s.preconditioner.is_some()),
        ("solver.relaxation", s.relaxation.is_some()),
        ("solver.restart", s.restart.is_some()),
        ("solver.t", s.t.is_some()),
        ("solver.jacobi_steps", s.jacobi_steps.is_some()),
        ("solver.jacobi_weight", s.jacobi_weight.is_some()),
    ] {
        if given {
            problems.push(problem(key, "applies to method stokes only"));
        }
    }
}

/// A Stokes run (docs/mathematics.md §7): mesh.n (or h) on the unit square, element q2-q1, the
/// preconditioner with its relaxation and parameters, precision, FGMRES settings.
pub(super) fn validate(raw: &RawConfig, source: &str) -> Result<RunConfig, Problems> {
    let mut problems = Vec::new();
    let s = &raw.solver;
    let backend = super::mesh::backend(raw, &mut problems);
    if let Some(kind) = raw.mesh.kind.as_deref().filter(|k| *k != "unit-square") {
        problems.push(problem(
            "mesh.kind",
            format!("'{kind}': method stokes solves on the unit square (allowed: unit-square)"),
        ));
    }
    if let Some(e) = raw.mesh.element.as_deref().filter(|e| *e != "q2-q1") {
        problems.push(problem(
            "mesh.element",
            format!("'{e}': method stokes uses Taylor-Hood elements (allowed: q2-q1)"),
        ));
    }
    for (key, given) in [
        ("mesh.h0", raw.mesh.h0.is_some()),
        ("mesh.file", raw.mesh.file.is_some()),
        ("mesh.levels", raw.mesh.levels.is_some()),
        ("mesh.coarse_levels", raw.mesh.coarse_levels.is_some()),
        ("boundary", raw.boundary.is_some()),
        ("problem.k", raw.problem.k.is_some()),
        ("solver.variant", s.variant.is_some()),
        ("solver.schedule", s.schedule.is_some()),
        ("solver.smoother", s.smoother.is_some()),
        ("solver.pre_smoothing", s.pre_smoothing.is_some()),
        ("solver.post_smoothing", s.post_smoothing.is_some()),
        ("solver.levels", s.levels.is_some()),
        ("solver.residual_scaling", s.residual_scaling.is_some()),
        ("solver.seed", s.seed.is_some()),
        ("solver.krylov", s.krylov.is_some()),
        ("solver.cycle_columns", s.cycle_columns.is_some()),
        ("solver.cg_rtol", s.cg_rtol.is_some()),
        ("solver.coupling", s.coupling.is_some()),
        ("solver.refine", s.refine.is_some()),
        ("solver.nrhs", s.nrhs.is_some()),
        ("solver.cache", s.cache.is_some()),
        ("solver.cache_dir", s.cache_dir.is_some()),
    ] {
        if given {
            problems.push(problem(key, "does not apply to method stokes (it solves the manufactured Stokes problem of docs/mathematics.md §1 with FGMRES)"));
        }
    }
    let n = cells(raw, &mut problems);
    let n = n.filter(|&n| match crate::stokes::multigrid::mesh_hierarchy(n) {
        Ok(_) => true,
        Err(e) => {
            problems.push(problem(
                if raw.mesh.h.is_some() {
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
                format!("unknown preconditioner '{other}' (allowed: multigrid, block-triangular)"),
            ));
            None
        }
    };
    // Relaxation parameters: ω for Vanka and Braess-Sarazin; t, Jacobi steps and weight
    // for Braess-Sarazin and Schur-Uzawa.
    let positive = |key: &str, v: Option<f64>, max: f64, problems: &mut Problems| {
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
                problems.push(problem("solver.omega", "Schur-Uzawa takes no outer damping (docs/configuration.md, Stokes); applies to vanka and braess-sarazin"));
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
        Ok(Precision::Tf32) => {
            problems.push(problem("solver.precision", super::TF32_IS_PSC));
            None
        }
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
    let (rtol, atol) = super::stopping_rule(raw, (defaults.rtol, defaults.atol), &mut problems);
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
    let output = output_path(raw, "out/stokes.h5", &mut problems);
    match (backend, n, preconditioner, precision, output) {
        (Some(backend), Some(n), Some(preconditioner), Some(precision), Some(output))
            if problems.is_empty() =>
        {
            let fgmres = crate::linalg::FgmresParams {
                restart: restart as usize,
                rtol,
                atol,
                max_iterations: max_iterations as usize,
            };
            Ok(RunConfig {
                backend,
                mesh: MeshSpec {
                    kind: MeshKind::UnitSquare,
                    element: Element::Q1,
                    n,
                    coarse: None,
                    domain: None,
                    boundary: None,
                },
                ks: Vec::new(),
                solver: SolverSpec {
                    method: Method::Stokes,
                    precision,
                    refine: false,
                    rtol,
                    atol,
                    tolerance: crate::linalg::Tolerance { rtol, atol },
                    max_iterations: max_iterations as usize,
                    cg_rtol: None,
                    coupling: Default::default(),
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
