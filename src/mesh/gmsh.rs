//! Coarse meshes from Gmsh MSH 4.1 files (ASCII or binary, parsed by mshio): the
//! first-order triangles or quadrilaterals of the file and its boundary lines, whose
//! physical groups name the boundary parts (`Physical Curve("walls") = {…}` in the .geo).
//! Gmsh saves only the elements of physical groups once any group is defined, so the
//! surface needs one too (`Physical Surface("fluid") = {…}`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use mshio::ElementType;

use super::coarse::{BoundaryEdge, CoarseMesh};
use super::Element;
use crate::error::{Error, Result};

/// Reads a coarse mesh from a Gmsh MSH 4.1 file.
pub fn read_gmsh(path: &Path) -> Result<CoarseMesh> {
    let bytes = std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |message: String| Error::InvalidInput(format!("{}: {message}", path.display()));
    if !bytes.starts_with(b"$MeshFormat") {
        return Err(bad(
            "not a Gmsh mesh file (it does not start with $MeshFormat)".into(),
        ));
    }
    // mshio panics on a few inputs it does not support (parametric nodes, tag 0): keep the
    // panic from ending the run and report it as a bad file.
    let parsed =
        std::panic::catch_unwind(|| mshio::parse_msh_bytes(&bytes).map_err(|e| e.to_string()))
            .map_err(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                bad(format!("the MSH reader cannot read this file: {what}"))
            })?
            .map_err(|e| bad(format!("not a readable MSH 4.1 file: {e}")))?;
    if (parsed.header.version - 4.1).abs() > 1e-9 {
        return Err(bad(format!(
            "MSH version {} (tensorfem reads 4.1: gmsh -format msh41)",
            parsed.header.version
        )));
    }
    let names = physical_names(&bytes);

    // Node tag → coordinates; tags are listed per block when they are not contiguous.
    let nodes = parsed
        .data
        .nodes
        .as_ref()
        .ok_or_else(|| bad("no $Nodes section".into()))?;
    let mut position: HashMap<u64, [f64; 3]> = HashMap::new();
    let mut next_tag = nodes.min_node_tag;
    for block in &nodes.node_blocks {
        let tags: Vec<u64> = match &block.node_tags {
            Some(map) => {
                let mut tags = vec![0; block.nodes.len()];
                for (&tag, &i) in map {
                    tags[i] = tag;
                }
                tags
            }
            None => {
                let tags = (next_tag..next_tag + block.nodes.len() as u64).collect();
                next_tag += block.nodes.len() as u64;
                tags
            }
        };
        for (tag, node) in tags.into_iter().zip(&block.nodes) {
            position.insert(tag, [node.x, node.y, node.z]);
        }
    }

    // Physical groups of every curve.
    let entities = parsed
        .data
        .entities
        .as_ref()
        .ok_or_else(|| bad("no $Entities section".into()))?;
    let curve_groups: HashMap<i32, &Vec<i32>> = entities
        .curves
        .iter()
        .map(|c| (c.tag, &c.physical_tags))
        .collect();

    let elements = parsed
        .data
        .elements
        .as_ref()
        .ok_or_else(|| bad("no $Elements section".into()))?;
    let mut cell_type = None;
    let mut cells: Vec<u64> = Vec::new();
    let mut lines: Vec<([u64; 2], i32)> = Vec::new();
    for block in &elements.element_blocks {
        match (block.entity_dim, block.element_type) {
            (2, t @ (ElementType::Tri3 | ElementType::Qua4)) => {
                if cell_type.is_some_and(|c| c != t) {
                    return Err(bad(
                        "the mesh mixes triangles and quadrilaterals: give one kind (p1 triangles or q1 quadrilaterals)".into(),
                    ));
                }
                cell_type = Some(t);
                for e in &block.elements {
                    cells.extend(&e.nodes);
                }
            }
            (1, ElementType::Lin2) => {
                let groups = curve_groups.get(&block.entity_tag).copied();
                let group = match groups.map(Vec::as_slice) {
                    Some([group]) => *group,
                    Some([]) | None => continue,
                    Some(many) => {
                        return Err(bad(format!(
                            "curve {} is in {} physical groups: a boundary part per curve",
                            block.entity_tag,
                            many.len()
                        )))
                    }
                };
                for e in &block.elements {
                    lines.push(([e.nodes[0], e.nodes[1]], group.abs()));
                }
            }
            (0, ElementType::Pnt) => {}
            (dim, t) => {
                return Err(bad(format!(
                    "elements of Gmsh type {} on a {dim}-dimensional entity: tensorfem reads first-order triangles (type 2) or quadrilaterals (type 3) and boundary lines (type 1); mesh with -order 1",
                    t as i32
                )))
            }
        }
    }
    let element = match cell_type {
        Some(ElementType::Tri3) => Element::P1,
        Some(_) => Element::Q1,
        None => {
            return Err(bad(
                "no triangles or quadrilaterals (is the surface in a physical group? Gmsh saves only those once any is defined)".into(),
            ))
        }
    };

    // Vertices in order of first use by a cell; unused nodes (e.g. a circle's centre) drop.
    let mut index: HashMap<u64, u32> = HashMap::new();
    let mut coords = Vec::new();
    let mut vertex = |tag: u64| -> Result<u32> {
        if let Some(&v) = index.get(&tag) {
            return Ok(v);
        }
        let p = position.get(&tag).ok_or_else(|| {
            bad(format!(
                "an element refers to node {tag}, which is not listed"
            ))
        })?;
        if p[2].abs() > 1e-12 * (1.0 + p[0].abs() + p[1].abs()) {
            return Err(bad(format!(
                "node {tag} has z = {}: tensorfem meshes lie in the plane z = 0",
                p[2]
            )));
        }
        coords.push([p[0], p[1]]);
        index.insert(tag, coords.len() as u32 - 1);
        Ok(coords.len() as u32 - 1)
    };
    let cells = cells
        .into_iter()
        .map(&mut vertex)
        .collect::<Result<Vec<u32>>>()?;
    // Boundary parts in the order of their physical tags.
    let groups: BTreeMap<i32, u16> = lines
        .iter()
        .map(|l| l.1)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .enumerate()
        .map(|(k, g)| (g, k as u16))
        .collect();
    let parts = groups
        .keys()
        .map(|g| {
            names
                .get(&(1, *g))
                .cloned()
                .unwrap_or_else(|| format!("group {g}"))
        })
        .collect();
    let mut boundary = Vec::with_capacity(lines.len());
    for ([a, b], group) in lines {
        let (Some(&a), Some(&b)) = (index.get(&a), index.get(&b)) else {
            return Err(bad(format!(
                "a line of physical group {group} is not a side of any cell"
            )));
        };
        boundary.push(BoundaryEdge {
            nodes: [a, b],
            part: groups[&group],
        });
    }
    CoarseMesh::new(element, coords, cells, parts, boundary).map_err(|e| {
        bad(e
            .to_string()
            .trim_start_matches("invalid input: ")
            .to_string())
    })
}

/// The `$PhysicalNames` section (ASCII in text and binary files alike): (dimension, tag) →
/// name. mshio does not parse it.
fn physical_names(bytes: &[u8]) -> HashMap<(i32, i32), String> {
    let text = String::from_utf8_lossy(bytes);
    let Some(start) = text.find("$PhysicalNames") else {
        return HashMap::new();
    };
    let section = &text[start..];
    let end = section.find("$EndPhysicalNames").unwrap_or(section.len());
    section[..end]
        .lines()
        .skip(2)
        .filter_map(|line| {
            let mut fields = line.splitn(3, ' ');
            let dim = fields.next()?.trim().parse().ok()?;
            let tag = fields.next()?.trim().parse().ok()?;
            let name = fields.next()?.trim().trim_matches('"').to_string();
            Some(((dim, tag), name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> std::path::PathBuf {
        let path = dir.join("mesh.msh");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Two triangles of the unit square, three named boundary parts.
    const SQUARE: &str = r#"$MeshFormat
4.1 0 8
$EndMeshFormat
$PhysicalNames
4
1 1 "bottom"
1 2 "sides"
1 3 "top"
2 4 "domain"
$EndPhysicalNames
$Entities
4 4 1 0
1 0 0 0 0
2 1 0 0 0
3 1 1 0 0
4 0 1 0 0
1 0 0 0 1 0 0 1 1 2 1 -2
2 1 0 0 1 1 0 1 2 2 2 -3
3 0 1 0 1 1 0 1 3 2 3 -4
4 0 0 0 0 1 0 1 2 2 4 -1
1 0 0 0 1 1 0 1 4 4 1 2 3 4
$EndEntities
$Nodes
1 4 1 4
2 1 0 4
1
2
3
4
0 0 0
1 0 0
1 1 0
0 1 0
$EndNodes
$Elements
5 6 1 6
1 1 1 1
1 1 2
1 2 1 1
2 2 3
1 3 1 1
3 3 4
1 4 1 1
4 4 1
2 1 2 2
5 1 2 3
6 1 3 4
$EndElements
"#;

    #[test]
    fn a_small_file_reads_with_its_parts() {
        let dir = tempfile::tempdir().unwrap();
        let mesh = read_gmsh(&write(dir.path(), SQUARE)).unwrap();
        assert_eq!(mesh.element, Element::P1);
        assert_eq!(mesh.num_cells(), 2);
        assert_eq!(mesh.parts, ["bottom", "sides", "top"]);
        let sides = mesh.part("sides").unwrap();
        assert_eq!(mesh.boundary.iter().filter(|b| b.part == sides).count(), 2);
    }

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let message = |text: &str| read_gmsh(&write(dir.path(), text)).unwrap_err().to_string();
        assert!(message("hello").contains("not a Gmsh mesh file"));
        assert!(
            message(&SQUARE.replace("$Elements\n5 6 1 6", "$Elements\n5 6 1 6 x"))
                .contains("mesh.msh")
        );
        // The side x = 0 left out of every physical group.
        let unnamed = SQUARE.replace("4 0 0 0 0 1 0 1 2 2 4 -1", "4 0 0 0 0 1 0 0 2 4 -1");
        assert!(
            message(&unnamed).contains("belongs to no boundary part"),
            "{}",
            message(&unnamed)
        );
        let lifted = SQUARE.replace("1 1 0\n0 1 0\n$EndNodes", "1 1 0.5\n0 1 0\n$EndNodes");
        assert!(message(&lifted).contains("z = 0.5"));
    }

    /// The shipped channel with a circular obstacle: its four parts, and cells that tile
    /// the channel minus the obstacle's inscribed polygon.
    #[test]
    fn the_shipped_channel_mesh_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("inputs/meshes/channel-cylinder.msh");
        let mesh = read_gmsh(&path).unwrap();
        assert_eq!(mesh.element, Element::P1);
        assert_eq!(mesh.parts, ["inflow", "outflow", "walls", "obstacle"]);
        let area: f64 = (0..mesh.num_cells())
            .map(|c| super::super::coarse::cell_area(&mesh.coords, mesh.cell(c)))
            .sum();
        let disc = std::f64::consts::PI * 0.05 * 0.05;
        assert!(
            area > 2.2 * 0.41 - disc && area < 2.2 * 0.41 - 0.9 * disc,
            "{area}"
        );
    }
}
