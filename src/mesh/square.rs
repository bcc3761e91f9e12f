//! The unit square: uniform Q1 and P1 meshes and their refinement hierarchy.

use super::{check_node_count, BoundaryEdge, BoundaryParts, Element, Mesh2d};
use crate::error::{Error, Result};

/// Hierarchical-basis parents of a node new on some level: its value in the nodal basis is
/// the mean of its parents' (docs/mathematics.md §3). Coarse (level-0) nodes have none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parents {
    None,
    /// Midpoint of an edge of the previous level: weight 1/2 each.
    Edge([u32; 2]),
    /// Q1 cell midpoint: the 4 corners of the previous level's cell, weight 1/4 each.
    Cell([u32; 4]),
}

/// Where a fine node lies relative to the coarse (level-0) mesh, with indices into the
/// coarse mesh's nodes, edges and cells (numbering in [`Hierarchy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MacroLocation {
    Vertex(u32),
    Edge(u32),
    Interior(u32),
}

/// The refinement hierarchy of a mesh refined `levels` times from a coarse mesh.
///
/// Coarse entity numbering of the unit square's n0×n0 mesh (I, J the coarse column and
/// row): nodes `I + J (n0+1)`; horizontal edges `I + J n0`; vertical edges
/// `n0 (n0+1) + I + J (n0+1)`; for P1 the diagonals `2 n0 (n0+1) + I + J n0`;
/// Q1 cells `I + J n0`; P1 triangles `2 (I + J n0)` (below the diagonal) and `+ 1` (above).
/// A refined [`super::CoarseMesh`] keeps its own numbering (edges as in
/// [`super::CoarseMesh::edges`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Hierarchy {
    /// Coarse cells per direction (h0 = 1/n0) when the mesh is the unit square's,
    /// structured and numbered lexicographically; None for a refined coarse mesh.
    pub n0: Option<usize>,
    /// Uniform refinements: h = h0 · 2^-levels.
    pub levels: usize,
    /// Coarse cells (macro elements).
    pub macros: usize,
    /// Level each node first appears on (0 = coarse mesh).
    pub level: Vec<u8>,
    pub parents: Vec<Parents>,
    pub location: Vec<MacroLocation>,
    /// Coarse cell (macro element) of every fine cell.
    pub cell_macro: Vec<u32>,
    /// Lattice point (i, j) of every node inside a macro element, in that element's own
    /// frame (see [`super::refine`]; the unit square's upper P1 triangles are (v00, v11,
    /// v01)): similar macro elements number their nodes alike from it. Unused elsewhere.
    pub macro_lattice: Vec<[u32; 2]>,
}

fn node_index(n: usize, i: usize, j: usize) -> u32 {
    (i + j * (n + 1)) as u32
}

fn check_cells_per_side(n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::InvalidInput(
            "a mesh needs at least 1 cell per direction".into(),
        ));
    }
    check_node_count(
        (n + 1).saturating_mul(n + 1),
        &format!("a {n}×{n} square mesh"),
    )
}

/// The sides of the n×n square mesh as boundary parts `left`, `right`, `bottom`, `top`,
/// edges counterclockwise.
pub(super) fn square_sides(n: usize) -> BoundaryParts {
    let mut edges = Vec::with_capacity(4 * n);
    for i in 0..n {
        // counterclockwise: the square on the left of every edge
        for (nodes, part) in [
            ([node_index(n, 0, i + 1), node_index(n, 0, i)], 0),
            ([node_index(n, n, i), node_index(n, n, i + 1)], 1),
            ([node_index(n, i, 0), node_index(n, i + 1, 0)], 2),
            ([node_index(n, i + 1, n), node_index(n, i, n)], 3),
        ] {
            edges.push(BoundaryEdge { nodes, part });
        }
    }
    BoundaryParts {
        names: ["left", "right", "bottom", "top"]
            .map(String::from)
            .to_vec(),
        edges,
    }
}

/// The uniform n×n mesh of the unit square with Q1 cells or P1 triangles.
pub fn unit_square(n: usize, element: Element) -> Result<Mesh2d> {
    check_cells_per_side(n)?;
    let h = 1.0 / n as f64;
    let coords = (0..=n)
        .flat_map(|j| (0..=n).map(move |i| [i as f64 * h, j as f64 * h]))
        .collect();
    let on_boundary = (0..=n)
        .flat_map(|j| (0..=n).map(move |i| i == 0 || j == 0 || i == n || j == n))
        .collect();
    let mut cells = Vec::with_capacity(n * n * 6);
    for j in 0..n {
        for i in 0..n {
            let v00 = node_index(n, i, j);
            let v10 = node_index(n, i + 1, j);
            let v11 = node_index(n, i + 1, j + 1);
            let v01 = node_index(n, i, j + 1);
            match element {
                Element::Q1 => cells.extend_from_slice(&[v00, v10, v11, v01]),
                Element::P1 => cells.extend_from_slice(&[v00, v10, v11, v00, v11, v01]),
                Element::Q1Hex => {
                    return Err(Error::InvalidInput(
                        "the unit square takes q1 or p1 elements, not q1-hex".into(),
                    ))
                }
            }
        }
    }
    Ok(Mesh2d {
        element,
        n,
        coords,
        cells,
        on_boundary,
        hierarchy: None,
        boundary: square_sides(n),
    })
}

/// The unit square refined `levels` times uniformly from the `n0`×`n0` mesh (h0 = 1/n0),
/// so n = n0 · 2^levels, with the refinement hierarchy attached.
///
/// Uniform refinement of the structured mesh is again the structured mesh (P1: the
/// children of a triangle cut along the same diagonal direction), so the fine mesh is
/// built directly and the hierarchy computed from node positions.
pub fn unit_square_refined(n0: usize, levels: usize, element: Element) -> Result<Mesh2d> {
    if n0 == 0 {
        return Err(Error::InvalidInput(
            "the coarse mesh needs at least 1 cell per direction".into(),
        ));
    }
    if levels > 24 {
        return Err(Error::InvalidInput(format!(
            "{levels} refinement levels is more than a mesh can hold"
        )));
    }
    let n = n0
        .checked_mul(1 << levels)
        .ok_or_else(|| Error::InvalidInput("mesh size overflows".into()))?;
    let mut mesh = unit_square(n, element)?;
    let m = 1usize << levels;

    // Level of an index along one axis: 0 on coarse lines, else levels - trailing zeros.
    let axis_level = |i: usize| -> usize {
        if i.is_multiple_of(m) {
            0
        } else {
            levels - i.trailing_zeros() as usize
        }
    };

    let nodes = (n + 1) * (n + 1);
    let mut level = Vec::with_capacity(nodes);
    let mut parents = Vec::with_capacity(nodes);
    let mut location = Vec::with_capacity(nodes);
    let mut macro_lattice = Vec::with_capacity(nodes);
    let horizontal_edges = n0 * (n0 + 1);
    let diagonal_base = 2 * n0 * (n0 + 1);
    for j in 0..=n {
        for i in 0..=n {
            let (lx, ly) = (axis_level(i), axis_level(j));
            let l = lx.max(ly);
            level.push(l as u8);
            parents.push(if l == 0 {
                Parents::None
            } else {
                let s = 1usize << (levels - l);
                let v = |a: usize, b: usize| node_index(n, a, b);
                match (lx == l, ly == l) {
                    (true, true) => match element {
                        Element::P1 => Parents::Edge([v(i - s, j - s), v(i + s, j + s)]),
                        _ => Parents::Cell([
                            v(i - s, j - s),
                            v(i + s, j - s),
                            v(i + s, j + s),
                            v(i - s, j + s),
                        ]),
                    },
                    (true, false) => Parents::Edge([v(i - s, j), v(i + s, j)]),
                    (false, _) => Parents::Edge([v(i, j - s), v(i, j + s)]),
                }
            });
            let (ci, cj, ri, rj) = (i / m, j / m, i % m, j % m);
            macro_lattice.push(match element {
                Element::P1 if ri > rj => [(ri - rj) as u32, rj as u32],
                Element::P1 => [ri as u32, (rj - ri) as u32],
                _ => [ri as u32, rj as u32],
            });
            location.push(match (ri, rj) {
                (0, 0) => MacroLocation::Vertex((ci + cj * (n0 + 1)) as u32),
                (_, 0) => MacroLocation::Edge((ci + cj * n0) as u32),
                (0, _) => MacroLocation::Edge((horizontal_edges + ci + cj * (n0 + 1)) as u32),
                _ => {
                    let square = (ci + cj * n0) as u32;
                    match element {
                        Element::P1 if ri == rj => {
                            MacroLocation::Edge(diagonal_base as u32 + square)
                        }
                        Element::P1 if ri > rj => MacroLocation::Interior(2 * square),
                        Element::P1 => MacroLocation::Interior(2 * square + 1),
                        _ => MacroLocation::Interior(square),
                    }
                }
            });
        }
    }

    let mut cell_macro = Vec::with_capacity(mesh.num_cells());
    for j in 0..n {
        for i in 0..n {
            let square = ((i / m) + (j / m) * n0) as u32;
            let (ri, rj) = (i % m, j % m);
            match element {
                Element::P1 => {
                    // Fine squares off the coarse diagonal lie wholly on one side of it; on
                    // the diagonal, each fine triangle is on its own side.
                    let (below, above) = (2 * square, 2 * square + 1);
                    cell_macro.push(if ri >= rj { below } else { above });
                    cell_macro.push(if ri > rj { below } else { above });
                }
                _ => cell_macro.push(square),
            }
        }
    }

    mesh.hierarchy = Some(Hierarchy {
        n0: Some(n0),
        levels,
        macros: match element {
            Element::P1 => 2 * n0 * n0,
            _ => n0 * n0,
        },
        level,
        parents,
        location,
        cell_macro,
        macro_lattice,
    });
    Ok(mesh)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class_counts(mesh: &Mesh2d) -> (usize, usize, usize) {
        let hier = mesh.hierarchy.as_ref().unwrap();
        let (mut c, mut e, mut i) = (0, 0, 0);
        for (node, loc) in hier.location.iter().enumerate() {
            if mesh.on_boundary[node] {
                continue;
            }
            match loc {
                MacroLocation::Vertex(_) => c += 1,
                MacroLocation::Edge(_) => e += 1,
                MacroLocation::Interior(_) => i += 1,
            }
        }
        (c, e, i)
    }

    /// |C|, |E|, |I| as in docs/mathematics.md §3 (class sizes) and §8.1 (Table 1, h = 1/256).
    #[test]
    fn node_class_counts_match_spec() {
        for (n0, levels, expected) in [
            (4, 6, (9, 1_512, 63_504)),
            (8, 5, (49, 3_472, 61_504)),
            (16, 4, (225, 7_200, 57_600)),
            (32, 3, (961, 13_888, 50_176)),
        ] {
            let q1 = unit_square_refined(n0, levels, Element::Q1).unwrap();
            assert_eq!(class_counts(&q1), expected, "Q1 n0 = {n0}");
        }
        for (n0, levels) in [(2, 3), (4, 4), (8, 2)] {
            let p1 = unit_square_refined(n0, levels, Element::P1).unwrap();
            let (inv_h, inv_h0) = ((n0 << levels) as i64, n0 as i64);
            let expected = (
                ((inv_h0 - 1) * (inv_h0 - 1)) as usize,
                ((3 * inv_h0 - 2) * (inv_h - inv_h0)) as usize,
                ((inv_h - 2 * inv_h0) * (inv_h - inv_h0)) as usize,
            );
            assert_eq!(class_counts(&p1), expected, "P1 n0 = {n0}");
        }
    }

    /// Every new node sits at the mean of its parents, which are on an earlier level.
    #[test]
    fn parents_are_older_and_average_to_the_node() {
        for element in [Element::Q1, Element::P1] {
            let mesh = unit_square_refined(2, 3, element).unwrap();
            let hier = mesh.hierarchy.as_ref().unwrap();
            for node in 0..mesh.num_nodes() {
                let parents: Vec<u32> = match hier.parents[node] {
                    Parents::None => {
                        assert_eq!(hier.level[node], 0);
                        continue;
                    }
                    Parents::Edge(p) => p.to_vec(),
                    Parents::Cell(p) => {
                        assert_eq!(element, Element::Q1);
                        p.to_vec()
                    }
                };
                let mut mean = [0.0; 2];
                for &p in &parents {
                    assert!(hier.level[p as usize] < hier.level[node]);
                    mean[0] += mesh.coords[p as usize][0] / parents.len() as f64;
                    mean[1] += mesh.coords[p as usize][1] / parents.len() as f64;
                }
                assert!((mean[0] - mesh.coords[node][0]).abs() < 1e-15);
                assert!((mean[1] - mesh.coords[node][1]).abs() < 1e-15);
            }
        }
    }

    /// Each fine cell lies inside its macro element: its centroid is in the coarse cell.
    #[test]
    fn cells_lie_in_their_macro_element() {
        let (n0, levels) = (3, 2);
        for element in [Element::Q1, Element::P1] {
            let mesh = unit_square_refined(n0, levels, element).unwrap();
            let coarse = unit_square(n0, element).unwrap();
            let hier = mesh.hierarchy.as_ref().unwrap();
            assert_eq!(hier.macros, coarse.num_cells());
            for c in 0..mesh.num_cells() {
                let centroid = centroid(&mesh.coords, mesh.cell(c));
                let macro_cell = coarse.cell(hier.cell_macro[c] as usize);
                assert!(inside(&coarse.coords, macro_cell, centroid), "cell {c}");
            }
        }
    }

    fn centroid(coords: &[[f64; 2]], cell: &[u32]) -> [f64; 2] {
        let k = cell.len() as f64;
        cell.iter().fold([0.0, 0.0], |acc, &v| {
            [
                acc[0] + coords[v as usize][0] / k,
                acc[1] + coords[v as usize][1] / k,
            ]
        })
    }

    /// Point inside a convex counterclockwise polygon.
    fn inside(coords: &[[f64; 2]], cell: &[u32], p: [f64; 2]) -> bool {
        (0..cell.len()).all(|a| {
            let u = coords[cell[a] as usize];
            let v = coords[cell[(a + 1) % cell.len()] as usize];
            (v[0] - u[0]) * (p[1] - u[1]) - (v[1] - u[1]) * (p[0] - u[0]) > 0.0
        })
    }

    #[test]
    fn cells_are_counterclockwise_and_cover_the_square() {
        for element in [Element::Q1, Element::P1] {
            let mesh = unit_square(5, element).unwrap();
            let mut area = 0.0;
            for c in 0..mesh.num_cells() {
                let cell = mesh.cell(c);
                let mut twice = 0.0;
                for a in 0..cell.len() {
                    let u = mesh.coords[cell[a] as usize];
                    let v = mesh.coords[cell[(a + 1) % cell.len()] as usize];
                    twice += u[0] * v[1] - v[0] * u[1];
                }
                assert!(twice > 0.0);
                area += twice / 2.0;
            }
            assert!((area - 1.0).abs() < 1e-14);
        }
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert!(unit_square(0, Element::Q1).is_err());
        assert!(unit_square(4, Element::Q1Hex).is_err());
        assert!(unit_square(1 << 17, Element::Q1).is_err());
        assert!(unit_square_refined(0, 2, Element::Q1).is_err());
        assert!(unit_square_refined(4, 40, Element::Q1).is_err());
    }
}
