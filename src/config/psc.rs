//! The `[solver]` settings of the direct methods: PSC-M1/M2/M3 (mesh.h0, the operator cache,
//! M3's CG tolerance) and the f64 sparse Cholesky (which takes none of the iterative
//! keys).

use std::path::{Path, PathBuf};

use super::raw::RawConfig;
use super::spec::Coupling;
use super::spec::Method;
use super::{problem, Problems};
use crate::mesh::{Element, MeshKind, RefinedDomain};
use crate::precision::Precision;

/// psc-m*: a unit-square mesh refined from h0 with coarse interior nodes, or a refined
/// domain whose macro elements hold interior nodes.
pub(super) fn validate(
    raw: &RawConfig,
    method: Method,
    kind: Option<MeshKind>,
    coarse: Option<(usize, usize)>,
    domain: Option<&RefinedDomain>,
    problems: &mut Problems,
) {
    if let Some(d) = domain {
        let (below, element) = (d.levels - d.coarse_levels, d.coarse.element);
        if element == Element::P1 && below < 2 {
            problems.push(problem("mesh.coarse_levels", format!("{} on triangles needs nodes inside the macro elements: mesh.levels − mesh.coarse_levels ≥ 2 (got {} − {})", method.name(), d.levels, d.coarse_levels)));
        }
    } else if kind == Some(MeshKind::UnitCube) {
        problems.push(problem(
            "solver.method",
            format!(
                "{} solves on unit-square meshes (allowed mesh.kind: unit-square)",
                method.name()
            ),
        ));
    } else if raw.mesh.h0.is_none() {
        problems.push(problem("mesh.h0", format!("missing: {} needs the coarse mesh width h0 (n = (1/h0)·2^j, j ≥ 1; flop-optimal: h0 ≈ √h)", method.name())));
    } else if let Some((n0, levels)) = coarse {
        if n0 < 2 || levels == 0 {
            problems.push(problem("mesh.h0", format!("{} needs coarse interior nodes and at least one refinement (h0 ≤ 1/2 and h < h0; got h0 = 1/{n0}, {levels} refinements)", method.name())));
        }
    }
}

/// The check of a direct f64 solve (psc methods without refinement, cholesky): about 1e-12
/// relative is reached at h = 1/256 and the floor grows with the condition number (h⁻²),
/// so 1e-8 holds with margin to h = 1/2048 while any wrong solution fails it.
pub(crate) const UNREFINED_F64_TOLERANCE: f64 = 1e-8;

/// The relative residual a psc method without refinement must reach when `rtol` is not
/// given: what its precision attains at h = 1/1024 with margin (measured at h = 1/256, k =
/// 1: f64 1e-12, f32 3.3e-4, f16 and tf32 2.3e-2; each grows about 16× to h = 1/1024). It
/// catches a wrong solution (zeros have relative residual 1); for a tolerance, refine.
pub(crate) fn unrefined_tolerance(precision: Precision) -> f64 {
    match precision {
        Precision::F64 => UNREFINED_F64_TOLERANCE,
        Precision::F32 => 1e-2,
        Precision::Tf32 | Precision::F16 => 0.5,
    }
}

/// cholesky: f64, and none of the keys of the iterative or cached methods.
pub(super) fn validate_cholesky(
    raw: &RawConfig,
    precision: Option<Precision>,
    problems: &mut Problems,
) {
    if precision.is_some_and(|p| p != Precision::F64) {
        problems.push(problem(
            "solver.precision",
            "method cholesky runs in f64 only (allowed: f64)",
        ));
    }
    let s = &raw.solver;
    for (key, given) in [
        ("solver.refine", s.refine.is_some()),
        ("solver.rtol", s.rtol.is_some()),
        ("solver.atol", s.atol.is_some()),
        ("solver.max_iterations", s.max_iterations.is_some()),
        ("solver.cache", s.cache.is_some()),
        ("solver.cache_dir", s.cache_dir.is_some()),
    ] {
        if given {
            problems.push(problem(key, "applies to the psc methods only"));
        }
    }
}

/// Where PSC set-ups are cached: solver.cache_dir, by default `psc-cache` beside the
/// output file; none for other methods or with solver.cache = false.
pub(super) fn cache_dir(raw: &RawConfig, method: Method, output: &Path) -> Option<PathBuf> {
    match (method, raw.solver.cache.unwrap_or(true)) {
        (method, true) if method.is_psc() => Some(
            raw.solver
                .cache_dir
                .as_ref()
                .map(PathBuf::from)
                .unwrap_or_else(|| output.parent().unwrap_or(Path::new("")).join("psc-cache")),
        ),
        _ => None,
    }
}

/// solver.coupling: how a psc method's apply multiplies by D (`element` or `csr`; the
/// same solutions to rounding); refused for other methods.
pub(super) fn coupling(
    raw: &RawConfig,
    method: Option<Method>,
    problems: &mut Problems,
) -> Coupling {
    let Some(given) = raw.solver.coupling.as_deref() else {
        return Coupling::default();
    };
    if method.is_some_and(|m| !m.is_psc()) {
        problems.push(problem(
            "solver.coupling",
            "applies to the psc methods only (psc-m1, psc-m2, psc-m3)",
        ));
        return Coupling::default();
    }
    given.parse().unwrap_or_else(|_| {
        problems.push(problem(
            "solver.coupling",
            format!("{given:?} (allowed: element, csr)"),
        ));
        Coupling::default()
    })
}

/// solver.cg_rtol: psc-m3's CG tolerance, in (0, 1); refused for other methods.
pub(super) fn cg_rtol(
    raw: &RawConfig,
    method: Option<Method>,
    problems: &mut Problems,
) -> Option<f64> {
    let given = raw.solver.cg_rtol?;
    if method.is_some_and(|m| m != Method::PscM3) {
        problems.push(problem(
            "solver.cg_rtol",
            "applies to method psc-m3 only (its CG on the C/E system)",
        ));
        return None;
    }
    if !(given > 0.0 && given < 1.0) {
        problems.push(problem(
            "solver.cg_rtol",
            format!("{given} (allowed: 0 < cg_rtol < 1)"),
        ));
        return None;
    }
    Some(given)
}
