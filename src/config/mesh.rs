//! The sections every run shares: `backend`, `[mesh]` and `[output]`.

use std::path::PathBuf;

use super::raw::{reciprocal_integer, RawConfig};
use super::{problem, Problems};
use crate::device::BackendChoice;
use crate::mesh::{Element, MeshKind};

/// `backend = "auto" | "cpu" | "cuda"` (default auto).
pub(super) fn backend(raw: &RawConfig, problems: &mut Problems) -> Option<BackendChoice> {
    match raw
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
    }
}

/// mesh.kind and mesh.element of a Poisson run (defaults: unit-square, q1).
pub(super) fn kind_and_element(
    raw: &RawConfig,
    problems: &mut Problems,
) -> (Option<MeshKind>, Option<Element>) {
    let kind = match raw.mesh.kind.as_deref().unwrap_or("unit-square") {
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
    let element = match (kind, raw.mesh.element.as_deref().unwrap_or("q1")) {
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
    (kind, element)
}

/// Cells per direction from mesh.n or mesh.h (exactly one of them, n ≥ 2).
pub(super) fn cells(raw: &RawConfig, problems: &mut Problems) -> Option<usize> {
    match (raw.mesh.n, raw.mesh.h) {
        (Some(_), Some(_)) => {
            problems.push(problem("mesh.n", "give either mesh.n or mesh.h, not both"));
            None
        }
        (None, None) => {
            problems.push(problem(
                "mesh.n",
                "missing: give the cells per direction mesh.n (≥ 2) or the mesh width mesh.h = 1/n",
            ));
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

/// [`cells`], refusing meshes whose node indices do not fit in u32 (naming the limit).
pub(super) fn cells_within_limits(
    raw: &RawConfig,
    kind: Option<MeshKind>,
    problems: &mut Problems,
) -> Option<usize> {
    cells(raw, problems).filter(|&n| {
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
    })
}

/// mesh.h0 as (coarse cells per direction, refinements), when given and consistent with n.
pub(super) fn coarse(
    raw: &RawConfig,
    kind: Option<MeshKind>,
    n: Option<usize>,
    problems: &mut Problems,
) -> Option<(usize, usize)> {
    match (raw.mesh.h0, kind) {
        (None, _) => None,
        (Some(_), Some(MeshKind::UnitCube)) => {
            problems.push(problem(
                "mesh.h0",
                "a coarse mesh width applies to unit-square meshes only",
            ));
            None
        }
        (Some(h0), _) => match (reciprocal_integer(h0), n) {
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
        },
    }
}

/// The HDF5 file a single run writes (output.path: a file name, not a directory).
pub(super) fn output_path(
    raw: &RawConfig,
    example: &str,
    problems: &mut Problems,
) -> Option<PathBuf> {
    match raw.output.path.as_deref() {
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
