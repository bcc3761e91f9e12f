//! The sections every run shares: `backend`, `[mesh]`, `[boundary]` and `[output]`.

use std::path::{Path, PathBuf};

use super::raw::{reciprocal_integer, RawConfig};
use super::{problem, Problems};
use crate::device::BackendChoice;
use crate::mesh::{
    read_gmsh, BoundarySpec, BoundaryValue, CoarseMesh, Condition, Element, MeshKind, MeshSpec,
    PartCondition, RefinedDomain,
};

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

/// What `[mesh]` names: the kind, the element and, for the refined domains
/// (flow-around-square, gmsh), the coarse mesh with its levels.
pub(super) struct MeshKindSpec {
    pub kind: Option<MeshKind>,
    pub element: Option<Element>,
    pub domain: Option<RefinedDomain>,
    /// The boundary parts, when the mesh is known (even if its levels are not valid).
    pub parts: Option<Vec<String>>,
}

/// mesh.kind, mesh.element and, for the refined domains, the coarse mesh with mesh.levels
/// and mesh.coarse_levels (defaults: unit-square, q1; p1 on the flow around a square; a
/// Gmsh file's own element).
pub(super) fn kind_and_element(raw: &RawConfig, problems: &mut Problems) -> MeshKindSpec {
    let kind = match raw.mesh.kind.as_deref().unwrap_or("unit-square") {
        "unit-square" => Some(MeshKind::UnitSquare),
        "unit-cube" => Some(MeshKind::UnitCube),
        "flow-around-square" => Some(MeshKind::FlowAroundSquare),
        "gmsh" => Some(MeshKind::Gmsh),
        other => {
            problems.push(problem(
                "mesh.kind",
                format!(
                    "unknown mesh kind '{other}'{} (allowed: {})",
                    super::did_you_mean(other, MeshKind::NAMES.split(", ")),
                    MeshKind::NAMES
                ),
            ));
            None
        }
    };
    let refined = matches!(kind, Some(MeshKind::FlowAroundSquare | MeshKind::Gmsh));
    let structured = matches!(kind, Some(MeshKind::UnitSquare | MeshKind::UnitCube));
    let m = &raw.mesh;
    if refined {
        for (key, given) in [
            ("mesh.n", m.n.is_some()),
            ("mesh.h", m.h.is_some()),
            ("mesh.h0", m.h0.is_some()),
        ] {
            if given {
                problems.push(problem(key, format!("does not apply to mesh.kind = \"{}\": its mesh width is set by mesh.levels (refinements of the coarse mesh) and PSC's macro elements by mesh.coarse_levels", kind.map_or("", MeshKind::name))));
            }
        }
    }
    if structured {
        for (key, given) in [
            ("mesh.file", m.file.is_some()),
            ("mesh.levels", m.levels.is_some()),
            ("mesh.coarse_levels", m.coarse_levels.is_some()),
        ] {
            if given {
                problems.push(problem(key, "applies to mesh.kind = \"flow-around-square\" or \"gmsh\" (the unit square and cube take mesh.n or mesh.h, and mesh.h0)"));
            }
        }
    }
    if m.file.is_some() && kind == Some(MeshKind::FlowAroundSquare) {
        problems.push(problem("mesh.file", "applies to mesh.kind = \"gmsh\" only"));
    }
    let coarse = match kind {
        Some(MeshKind::FlowAroundSquare) => Some(CoarseMesh::flow_around_square()),
        Some(MeshKind::Gmsh) => match m.file.as_deref() {
            None | Some("") => {
                problems.push(problem(
                    "mesh.file",
                    "missing: the Gmsh MSH 4.1 file of the coarse mesh (e.g. inputs/meshes/channel-cylinder.msh)",
                ));
                None
            }
            Some(file) => match read_gmsh(&mesh_file(raw, file)) {
                Ok(c) => Some(c),
                Err(e) => {
                    problems.push(problem("mesh.file", e.to_string()));
                    None
                }
            },
        },
        _ => None,
    };
    let element = match (kind, raw.mesh.element.as_deref()) {
        (Some(MeshKind::UnitCube), None | Some("q1")) => Some(Element::Q1Hex),
        (Some(MeshKind::UnitCube), Some(other)) => {
            problems.push(problem(
                "mesh.element",
                format!("'{other}' on unit-cube (allowed: q1)"),
            ));
            None
        }
        (Some(MeshKind::FlowAroundSquare), None | Some("p1")) => Some(Element::P1),
        (Some(MeshKind::FlowAroundSquare), Some(other)) => {
            problems.push(problem(
                "mesh.element",
                format!("'{other}': the flow around a square is a triangle mesh (allowed: p1)"),
            ));
            None
        }
        (Some(MeshKind::Gmsh), given) => coarse.as_ref().and_then(|c| match given {
            Some(e) if e != c.element.name() => {
                problems.push(problem(
                    "mesh.element",
                    format!(
                        "'{e}': {} holds {} cells (leave mesh.element out or write \"{}\")",
                        m.file.as_deref().unwrap_or_default(),
                        if c.element == Element::P1 {
                            "triangle"
                        } else {
                            "quadrilateral"
                        },
                        c.element.name()
                    ),
                ));
                None
            }
            _ => Some(c.element),
        }),
        (_, None | Some("q1")) => Some(Element::Q1),
        (_, Some("p1")) => Some(Element::P1),
        (_, Some(other)) => {
            problems.push(problem(
                "mesh.element",
                format!("unknown element '{other}' (allowed: q1, p1)"),
            ));
            None
        }
    };
    let parts = match kind {
        Some(MeshKind::UnitSquare) => Some(
            ["left", "right", "bottom", "top"]
                .map(String::from)
                .to_vec(),
        ),
        _ => coarse.as_ref().map(|c| c.parts.clone()),
    };
    let domain = coarse.and_then(|coarse| refined_domain(raw, coarse, problems));
    MeshKindSpec {
        kind,
        element,
        domain,
        parts,
    }
}

/// mesh.file, relative to the config's folder.
fn mesh_file(raw: &RawConfig, file: &str) -> PathBuf {
    match &raw.folder {
        Some(folder) => super::resolve(folder, Path::new(file)),
        None => PathBuf::from(file),
    }
}

/// Most refinements of a coarse mesh (4^12 cells per coarse cell).
const MAX_LEVELS: i64 = 12;

/// mesh.levels and mesh.coarse_levels of a refined domain, checked against the node limit.
fn refined_domain(
    raw: &RawConfig,
    coarse: CoarseMesh,
    problems: &mut Problems,
) -> Option<RefinedDomain> {
    let levels = match raw.mesh.levels {
        None => {
            problems.push(problem(
                "mesh.levels",
                format!("missing: the uniform refinements of the coarse mesh (1 ..= {MAX_LEVELS}; each halves h)"),
            ));
            None
        }
        Some(l) if (1..=MAX_LEVELS).contains(&l) => Some(l as usize),
        Some(l) => {
            problems.push(problem(
                "mesh.levels",
                format!("{l} (allowed: 1 ..= {MAX_LEVELS} refinements of the coarse mesh)"),
            ));
            None
        }
    }?;
    let coarse_levels = match raw.mesh.coarse_levels.unwrap_or(0) {
        l if (0..levels as i64).contains(&l) => l as usize,
        l => {
            problems.push(problem(
                "mesh.coarse_levels",
                format!("{l} (allowed: 0 ..= mesh.levels − 1 = {}: the refinements that make PSC's macro elements)", levels - 1),
            ));
            return None;
        }
    };
    let coarse_edges = match coarse.edges() {
        Ok(e) => e.len(),
        Err(e) => {
            problems.push(problem("mesh.file", e.to_string()));
            return None;
        }
    };
    let domain = RefinedDomain {
        file: raw.mesh.file.as_ref().map(|f| mesh_file(raw, f)),
        coarse,
        coarse_edges,
        levels,
        coarse_levels,
    };
    let spec = MeshSpec {
        kind: MeshKind::Gmsh,
        element: domain.coarse.element,
        n: 1 << levels,
        coarse: None,
        domain: Some(domain),
        boundary: None,
    };
    if spec.nodes() > crate::mesh::MAX_NODES {
        problems.push(problem(
            "mesh.levels",
            format!(
                "{levels} refinements give {} nodes; at most {} are supported",
                spec.nodes(),
                crate::mesh::MAX_NODES
            ),
        ));
        return None;
    }
    spec.domain
}

/// `[boundary]`: the condition on every boundary part of a 2D mesh, each part named (None
/// without the section: u = 0 on the whole boundary). A part is `"dirichlet"`,
/// `"neumann"` or `{ condition = …, value = … }` with a number (g_D or g_N on the part) or,
/// for Dirichlet parts with right-hand sides from HDF5, `"hdf5"` (g_D per node from the
/// file's dataset `dirichlet`). Manufactured right-hand sides take their data from the
/// exact solution, so they refuse values.
pub(super) fn boundary(
    raw: &RawConfig,
    mesh: &MeshKindSpec,
    problems: &mut Problems,
) -> Option<BoundarySpec> {
    let table = raw.boundary.as_ref()?;
    if mesh.kind == Some(MeshKind::UnitCube) {
        problems.push(problem(
            "boundary",
            "applies to 2D meshes (the unit cube has u = 0 on its boundary)",
        ));
        return None;
    }
    // Without the parts, the mesh itself has a problem, reported.
    let names = mesh.parts.clone()?;
    for key in table.keys().filter(|k| !names.contains(k)) {
        problems.push(problem(
            &format!("boundary.{key}"),
            format!(
                "no boundary part '{key}'{} (this mesh's parts: {})",
                super::did_you_mean(key, names.iter().map(String::as_str)),
                names.join(", ")
            ),
        ));
    }
    let missing: Vec<&str> = names
        .iter()
        .filter(|n| !table.contains_key(*n))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        problems.push(problem(
            "boundary",
            format!(
                "no condition for the part(s) {} (every part needs one: \"dirichlet\" or \"neumann\")",
                missing.join(", ")
            ),
        ));
    }
    let parts: Vec<Option<PartCondition>> = names
        .iter()
        .filter_map(|name| table.get(name).map(|v| (name, v)))
        .map(|(name, value)| part_condition(raw, name, value, problems))
        .collect();
    let parts: Vec<PartCondition> = parts.into_iter().collect::<Option<_>>()?;
    if parts.len() != names.len() {
        return None;
    }
    let spec = BoundarySpec { parts };
    let from_input = spec
        .parts
        .iter()
        .filter(|p| p.condition == Condition::Dirichlet);
    if spec.dirichlet_from_input() && from_input.clone().any(|p| p.value != BoundaryValue::Input) {
        problems.push(problem(
            "boundary",
            "the dataset dirichlet gives the values of every Dirichlet node: give value = \"hdf5\" on every Dirichlet part or on none",
        ));
    }
    Some(spec)
}

/// One part's condition: a name, or a table with `condition` and `value`.
fn part_condition(
    raw: &RawConfig,
    name: &str,
    value: &toml::Value,
    problems: &mut Problems,
) -> Option<PartCondition> {
    let key = format!("boundary.{name}");
    let parse_condition = |c: &str, problems: &mut Problems| match c {
        "dirichlet" => Some(Condition::Dirichlet),
        "neumann" => Some(Condition::Neumann),
        other => {
            problems.push(problem(
                &key,
                format!("unknown condition '{other}' (allowed: dirichlet — u = g_D, neumann — ∂u/∂n = g_N)"),
            ));
            None
        }
    };
    let (condition, given) = match value {
        toml::Value::String(c) => (parse_condition(c, problems)?, None),
        toml::Value::Table(t) => {
            for k in t.keys().filter(|k| *k != "condition" && *k != "value") {
                problems.push(problem(
                    &format!("{key}.{k}"),
                    "unknown key (allowed: condition, value)",
                ));
            }
            let condition = match t.get("condition") {
                Some(toml::Value::String(c)) => parse_condition(c, problems),
                Some(other) => {
                    problems.push(problem(
                        &format!("{key}.condition"),
                        format!("expected a string, found {}", other.type_str()),
                    ));
                    None
                }
                None => {
                    problems.push(problem(
                        &format!("{key}.condition"),
                        "missing (allowed: dirichlet, neumann)",
                    ));
                    None
                }
            }?;
            (condition, t.get("value"))
        }
        other => {
            problems.push(problem(
                &key,
                format!("expected \"dirichlet\", \"neumann\" or a table {{ condition = …, value = … }}, found {}", other.type_str()),
            ));
            return None;
        }
    };
    let value = match given {
        None => BoundaryValue::Constant(0.0),
        Some(_) if !raw.rhs_from_input => {
            problems.push(problem(
                &format!("{key}.value"),
                "manufactured right-hand sides take the boundary data of their exact solution; values apply with campaign.rhs = \"hdf5\"",
            ));
            return None;
        }
        Some(toml::Value::Float(v)) if v.is_finite() => BoundaryValue::Constant(*v),
        Some(toml::Value::Integer(v)) => BoundaryValue::Constant(*v as f64),
        Some(toml::Value::String(s)) if s == "hdf5" && condition == Condition::Dirichlet => {
            BoundaryValue::Input
        }
        Some(toml::Value::String(s)) if s == "hdf5" => {
            problems.push(problem(
                &format!("{key}.value"),
                "\"hdf5\" gives Dirichlet values per node; a Neumann flux per node goes into the right-hand side itself (docs/hdf5.md)",
            ));
            return None;
        }
        Some(other) => {
            problems.push(problem(
                &format!("{key}.value"),
                format!("{other} (allowed: a finite number — g_D or g_N on the whole part —, or \"hdf5\" on a Dirichlet part)"),
            ));
            return None;
        }
    };
    Some(PartCondition {
        name: name.to_string(),
        condition,
        value,
    })
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
