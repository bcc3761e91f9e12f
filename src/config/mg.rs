//! The `[solver]` settings of multigrid (docs/mathematics.md §4): levels, the precision
//! schedule (a preset or a list), the smoother, residual scaling, the seed of the initial
//! guess.

use super::raw::{RawColumns, RawConfig};
use super::spec::MgSpec;
use super::{problem, Problems};
use crate::mesh::Element;
use crate::mg::{check_levels, default_levels, CycleColumns, Smoother, Variant};
use crate::precision::Precision;

/// What multigrid coarsens: the unit square or cube of n cells per direction (halved per
/// level), or a coarse mesh refined `levels` times (one level per refinement).
#[derive(Clone, Copy, Debug)]
pub(super) enum Coarsening {
    Uniform { n: usize },
    Refined { levels: usize },
}

/// The multigrid settings: mesh, levels, schedule (a preset or a list), smoother; and the
/// keys of other methods refused.
pub(super) fn validate(
    raw: &RawConfig,
    coarsening: Option<Coarsening>,
    element: Option<Element>,
    problems: &mut Problems,
) -> Option<MgSpec> {
    let solver = &raw.solver;
    if solver.precision.is_some() {
        problems.push(problem(
            "solver.precision",
            "method mg takes a precision per level: give solver.variant or solver.schedule",
        ));
    }
    let levels = match (solver.levels, coarsening) {
        (Some(l), Some(Coarsening::Uniform { n })) => match check_levels(n, l.max(0) as usize) {
            Ok(()) if l >= 1 => Some(l as usize),
            _ => {
                problems.push(problem("solver.levels", format!("{l} levels on n = {n} cells per direction: n must be divisible by 2^(levels−1) leaving at least 2 cells on the coarsest level")));
                None
            }
        },
        (Some(l), Some(Coarsening::Refined { levels })) => {
            if (1..=levels as i64 + 1).contains(&l) {
                Some(l as usize)
            } else {
                problems.push(problem("solver.levels", format!("{l} levels on a coarse mesh refined {levels} times (mesh.levels; allowed: 1 ..= {})", levels + 1)));
                None
            }
        }
        (None, Some(Coarsening::Uniform { n })) => Some(default_levels(n)),
        (None, Some(Coarsening::Refined { levels })) => Some(levels + 1),
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
            let parsed: Result<Vec<Precision>, String> = list.iter().map(|p| p.parse()).collect();
            match (parsed, levels) {
                (Err(e), _) => {
                    problems.push(problem("solver.schedule", e));
                    None
                }
                (Ok(s), _) if s.contains(&Precision::Tf32) => {
                    problems.push(problem("solver.schedule", super::TF32_IS_PSC));
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
    let base_name = solver
        .smoother
        .clone()
        .unwrap_or_else(|| default_smoother(element).into());
    let steps = |key: &str, value: Option<i64>, problems: &mut Problems| match value {
        Some(v) if !(0..=Smoother::MAX_STEPS as i64).contains(&v) => {
            problems.push(problem(
                key,
                format!("{v} (allowed: 0 ..= {})", Smoother::MAX_STEPS),
            ));
            Err(())
        }
        v => Ok(v.map(|v| v as usize)),
    };
    let pre = steps("solver.pre_smoothing", solver.pre_smoothing, problems);
    let post = steps("solver.post_smoothing", solver.post_smoothing, problems);
    let (smoother, smoother_name) = match (Smoother::by_name(&base_name), pre, post) {
        (Err(e), _, _) => {
            problems.push(problem("solver.smoother", e));
            (None, base_name)
        }
        (Ok(base), Ok(pre), Ok(post)) => match base.adjusted(&base_name, solver.omega, pre, post) {
            Ok((s, name)) => (Some(s), name),
            Err(e) => {
                let key = if e.starts_with('ω') {
                    "solver.omega"
                } else {
                    "solver.pre_smoothing"
                };
                problems.push(problem(key, e));
                (None, base_name)
            }
        },
        _ => (None, base_name),
    };
    if solver.refine == Some(false)
        && schedule
            .as_ref()
            .is_some_and(|s| s.iter().any(|&p| p != Precision::F64))
    {
        problems.push(problem(
            "solver.refine",
            "false (stand-alone multigrid) needs f64 on every level (solver.variant = \"D_MG\")",
        ));
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
    for (key, given) in [
        ("solver.cache", solver.cache.is_some()),
        ("solver.cache_dir", solver.cache_dir.is_some()),
        ("mesh.h0", raw.mesh.h0.is_some()),
        ("mesh.coarse_levels", raw.mesh.coarse_levels.is_some()),
    ] {
        if given && !problems.iter().any(|p| p.key == key) {
            problems.push(problem(
                key,
                "applies to the psc methods only (mg coarsens the mesh itself: solver.levels)",
            ));
        }
    }
    let krylov = match solver.krylov.as_deref() {
        None | Some("none") => Some(false),
        Some("cg") if solver.refine == Some(false) => {
            problems.push(problem(
                "solver.krylov",
                "\"cg\" accelerates the f64 refinement; it needs solver.refine = true",
            ));
            None
        }
        Some("cg") => Some(true),
        Some(other) => {
            problems.push(problem(
                "solver.krylov",
                format!("unknown '{other}' (allowed: none, cg)"),
            ));
            None
        }
    };
    let storage = match solver.storage.as_deref().map(str::parse) {
        None => Some(crate::device::MatrixStorage::default()),
        Some(Ok(storage)) => Some(storage),
        Some(Err(message)) => {
            problems.push(problem("solver.storage", message));
            None
        }
    };
    let cycle_columns = match &solver.cycle_columns {
        None => Some(CycleColumns::Auto),
        Some(RawColumns::Word(w)) if w.eq_ignore_ascii_case("auto") => Some(CycleColumns::Auto),
        Some(RawColumns::Word(w)) if w.eq_ignore_ascii_case("all") => Some(CycleColumns::All),
        Some(RawColumns::Count(k)) if (1..=1_000_000).contains(k) => {
            Some(CycleColumns::AtMost(*k as usize))
        }
        Some(other) => {
            let given = match other {
                RawColumns::Count(k) => k.to_string(),
                RawColumns::Word(w) => format!("{w:?}"),
            };
            problems.push(problem(
                "solver.cycle_columns",
                format!("{given} (allowed: \"auto\", \"all\" or a count 1 ..= 1000000)"),
            ));
            None
        }
    };
    Some(MgSpec {
        schedule: schedule?,
        variant: variant.or((solver.schedule.is_none()).then_some(Variant::DMg)),
        smoother: smoother?,
        smoother_name,
        residual_scaling: solver.residual_scaling.unwrap_or(true),
        storage: storage?,
        seed: seed?,
        krylov: krylov?,
        cycle_columns: cycle_columns?,
    })
}

/// The smoother of a mesh's elements when none is given: Chebyshev on triangles (the
/// refined domains' flat obtuse elements smooth poorly under point Jacobi: the flow around a
/// square needs 19 FCG steps instead of 24, 48 plain ones instead of 77), Jacobi on Q1
/// (Chebyshev takes 8 steps there where Jacobi takes 6–7).
fn default_smoother(element: Option<Element>) -> &'static str {
    match element {
        Some(Element::P1) => "chebyshev",
        _ => "jacobi",
    }
}

/// The multigrid keys, refused for other methods.
pub(super) fn refuse_keys(raw: &RawConfig, problems: &mut Problems) {
    let s = &raw.solver;
    for (key, given) in [
        ("solver.variant", s.variant.is_some()),
        ("solver.schedule", s.schedule.is_some()),
        ("solver.smoother", s.smoother.is_some()),
        ("solver.pre_smoothing", s.pre_smoothing.is_some()),
        ("solver.post_smoothing", s.post_smoothing.is_some()),
        ("solver.levels", s.levels.is_some()),
        ("solver.residual_scaling", s.residual_scaling.is_some()),
        ("solver.seed", s.seed.is_some()),
        ("solver.krylov", s.krylov.is_some()),
        ("solver.storage", s.storage.is_some()),
        ("solver.cycle_columns", s.cycle_columns.is_some()),
    ] {
        if given {
            problems.push(problem(key, "applies to method mg only"));
        }
    }
    if s.omega.is_some() {
        problems.push(problem(
            "solver.omega",
            "applies to methods mg (the smoother's damping) and stokes only",
        ));
    }
}
