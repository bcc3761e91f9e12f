//! The `[solver]` settings of the direct methods: PSC-M1 (mesh.h0, the operator cache) and
//! the f64 Cholesky reference (which takes none of the iterative keys).

use std::path::{Path, PathBuf};

use super::raw::RawConfig;
use super::spec::Method;
use super::{problem, Problems};
use crate::mesh::{Element, MeshKind, RefinedDomain};
use crate::precision::Precision;

/// psc-m1: a unit-square mesh refined from h0 with coarse interior nodes, or a refined
/// domain whose macro elements hold interior nodes.
pub(super) fn validate(
    raw: &RawConfig,
    kind: Option<MeshKind>,
    coarse: Option<(usize, usize)>,
    domain: Option<&RefinedDomain>,
    problems: &mut Problems,
) {
    if let Some(d) = domain {
        let (below, element) = (d.levels - d.coarse_levels, d.coarse.element);
        if element == Element::P1 && below < 2 {
            problems.push(problem("mesh.coarse_levels", format!("psc-m1 on triangles needs nodes inside the macro elements: mesh.levels − mesh.coarse_levels ≥ 2 (got {} − {})", d.levels, d.coarse_levels)));
        }
    } else if kind == Some(MeshKind::UnitCube) {
        problems.push(problem(
            "solver.method",
            "psc-m1 solves on unit-square meshes (allowed mesh.kind: unit-square)",
        ));
    } else if raw.mesh.h0.is_none() {
        problems.push(problem("mesh.h0", "missing: psc-m1 needs the coarse mesh width h0 (n = (1/h0)·2^j, j ≥ 1; flop-optimal: h0 ≈ √h)"));
    } else if let Some((n0, levels)) = coarse {
        if n0 < 2 || levels == 0 {
            problems.push(problem("mesh.h0", format!("psc-m1 needs coarse interior nodes and at least one refinement (h0 ≤ 1/2 and h < h0; got h0 = 1/{n0}, {levels} refinements)")));
        }
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
            "method cholesky is the f64 reference (allowed: f64)",
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
            problems.push(problem(key, "applies to method psc-m1 only"));
        }
    }
}

/// Where PSC set-ups are cached: solver.cache_dir, by default `psc-cache` beside the
/// output file; none for other methods or with solver.cache = false.
pub(super) fn cache_dir(raw: &RawConfig, method: Method, output: &Path) -> Option<PathBuf> {
    match (method, raw.solver.cache.unwrap_or(true)) {
        (Method::PscM1, true) => Some(
            raw.solver
                .cache_dir
                .as_ref()
                .map(PathBuf::from)
                .unwrap_or_else(|| output.parent().unwrap_or(Path::new("")).join("psc-cache")),
        ),
        _ => None,
    }
}
