//! Coarse meshes of polygonal domains: triangles (P1) or quadrilaterals (Q1) with named
//! boundary parts, checked to be conforming and counterclockwise. Fine meshes are uniform
//! refinements of them ([`super::refine`]); the coarse cells are PSC's macro elements.

use std::collections::HashMap;

use super::Element;
use crate::error::{Error, Result};

/// A coarse mesh and the boundary parts its boundary edges belong to.
#[derive(Clone, Debug, PartialEq)]
pub struct CoarseMesh {
    /// [`Element::P1`] (triangles) or [`Element::Q1`] (quadrilaterals).
    pub element: Element,
    pub coords: Vec<[f64; 2]>,
    /// `nodes_per_cell` vertices per cell, counterclockwise.
    pub cells: Vec<u32>,
    /// Names of the boundary parts (inflow, walls, …), indexed by [`BoundaryEdge::part`].
    pub parts: Vec<String>,
    /// Every boundary edge exactly once, with its part, running counterclockwise (the
    /// domain on its left).
    pub boundary: Vec<BoundaryEdge>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundaryEdge {
    pub nodes: [u32; 2],
    pub part: u16,
}

/// The edges of a coarse mesh: every vertex pair joined by a cell side, once.
#[derive(Clone, Debug, PartialEq)]
pub struct Edges {
    /// Endpoints, lower vertex first.
    pub nodes: Vec<[u32; 2]>,
    /// Boundary part of each edge; None for an interior edge.
    pub part: Vec<Option<u16>>,
    index: HashMap<[u32; 2], u32>,
}

impl Edges {
    /// The edge joining `a` and `b` (either order).
    pub fn find(&self, a: u32, b: u32) -> Option<u32> {
        self.index.get(&[a.min(b), a.max(b)]).copied()
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

impl CoarseMesh {
    /// Checks and normalises a mesh: cells of the element's shape with positive area
    /// (clockwise ones are reversed), convex quadrilaterals, every edge in at most two
    /// cells, the boundary edges exactly the edges of one cell, each in one part.
    pub fn new(
        element: Element,
        coords: Vec<[f64; 2]>,
        mut cells: Vec<u32>,
        parts: Vec<String>,
        boundary: Vec<BoundaryEdge>,
    ) -> Result<Self> {
        let k = match element {
            Element::P1 | Element::Q1 => element.nodes_per_cell(),
            Element::Q1Hex => {
                return Err(Error::InvalidInput(
                    "a coarse 2D mesh has triangles (p1) or quadrilaterals (q1)".into(),
                ))
            }
        };
        let bad = |message: String| Err(Error::InvalidInput(format!("coarse mesh: {message}")));
        if cells.is_empty() || !cells.len().is_multiple_of(k) {
            return bad(format!(
                "{} vertex indices do not make cells of {k} vertices",
                cells.len()
            ));
        }
        if coords.iter().flatten().any(|v| !v.is_finite()) {
            return bad("a vertex coordinate is not finite".into());
        }
        if let Some(&v) = cells.iter().find(|&&v| v as usize >= coords.len()) {
            return bad(format!(
                "a cell refers to vertex {v}, but there are {}",
                coords.len()
            ));
        }
        for (c, cell) in cells.chunks_mut(k).enumerate() {
            let p: Vec<[f64; 2]> = cell.iter().map(|&v| coords[v as usize]).collect();
            let area = signed_area(&p);
            let scale = p
                .iter()
                .map(|q| (q[0] - p[0][0]).hypot(q[1] - p[0][1]))
                .fold(0.0, f64::max);
            if area.abs() <= 1e-12 * scale * scale {
                return bad(format!("cell {c} has zero area"));
            }
            if area < 0.0 {
                cell.reverse();
            }
            if k == 4 {
                let p: Vec<[f64; 2]> = cell.iter().map(|&v| coords[v as usize]).collect();
                let convex = (0..4).all(|a| {
                    let (u, v, w) = (p[a], p[(a + 1) % 4], p[(a + 2) % 4]);
                    (v[0] - u[0]) * (w[1] - v[1]) - (v[1] - u[1]) * (w[0] - v[0]) > 0.0
                });
                if !convex {
                    return bad(format!(
                        "quadrilateral {c} is not convex (Q1 needs convex cells)"
                    ));
                }
            }
        }
        let mut mesh = CoarseMesh {
            element,
            coords,
            cells,
            parts,
            boundary,
        };
        mesh.edges()?;
        // Boundary edges run as their cell runs them (counterclockwise): the domain lies on
        // their left, and the outward normal is the edge turned clockwise.
        let mut sides = HashMap::new();
        for c in 0..mesh.num_cells() {
            let cell = mesh.cell(c);
            for a in 0..k {
                let (u, v) = (cell[a], cell[(a + 1) % k]);
                sides.insert([u.min(v), u.max(v)], [u, v]);
            }
        }
        for b in &mut mesh.boundary {
            let [u, v] = b.nodes;
            b.nodes = sides[&[u.min(v), u.max(v)]];
        }
        Ok(mesh)
    }

    pub fn num_cells(&self) -> usize {
        self.cells.len() / self.element.nodes_per_cell()
    }

    pub fn cell(&self, c: usize) -> &[u32] {
        let k = self.element.nodes_per_cell();
        &self.cells[c * k..(c + 1) * k]
    }

    /// The edges in order of first appearance (cell by cell, side by side), checked for
    /// conformity and matched with the boundary parts.
    pub fn edges(&self) -> Result<Edges> {
        let bad = |message: String| Err(Error::InvalidInput(format!("coarse mesh: {message}")));
        let mut index = HashMap::new();
        let mut nodes = Vec::new();
        let mut cells_at = Vec::new();
        for c in 0..self.num_cells() {
            let cell = self.cell(c);
            for a in 0..cell.len() {
                let (u, v) = (cell[a], cell[(a + 1) % cell.len()]);
                if u == v {
                    return bad(format!("cell {c} repeats vertex {u}"));
                }
                let key = [u.min(v), u.max(v)];
                let e = *index.entry(key).or_insert_with(|| {
                    nodes.push(key);
                    cells_at.push(0u32);
                    nodes.len() as u32 - 1
                });
                cells_at[e as usize] += 1;
            }
        }
        if let Some(e) = cells_at.iter().position(|&c| c > 2) {
            let [u, v] = nodes[e];
            return bad(format!(
                "edge {u}–{v} is a side of {} cells (at most 2)",
                cells_at[e]
            ));
        }
        let mut part = vec![None; nodes.len()];
        for b in &self.boundary {
            let [u, v] = b.nodes;
            let Some(&e) = index.get(&[u.min(v), u.max(v)]) else {
                return bad(format!("boundary edge {u}–{v} is not a side of any cell"));
            };
            if cells_at[e as usize] != 1 {
                return bad(format!(
                    "edge {u}–{v} is marked as boundary but lies between two cells"
                ));
            }
            if b.part as usize >= self.parts.len() {
                return bad(format!(
                    "boundary edge {u}–{v} names part {} of {}",
                    b.part,
                    self.parts.len()
                ));
            }
            if part[e as usize].replace(b.part).is_some() {
                return bad(format!("boundary edge {u}–{v} is listed twice"));
            }
        }
        if let Some(e) = (0..nodes.len()).find(|&e| cells_at[e] == 1 && part[e].is_none()) {
            let [u, v] = nodes[e];
            let (p, q) = (self.coords[u as usize], self.coords[v as usize]);
            return bad(format!(
                "boundary edge ({}, {})–({}, {}) belongs to no boundary part",
                p[0], p[1], q[0], q[1]
            ));
        }
        Ok(Edges { nodes, part, index })
    }

    /// The index of a boundary part by name.
    pub fn part(&self, name: &str) -> Option<u16> {
        self.parts.iter().position(|p| p == name).map(|p| p as u16)
    }

    /// The uniform n0×n0 mesh of the unit square (P1: every square cut by its "/"
    /// diagonal), boundary parts `left`, `right`, `bottom`, `top`.
    pub fn unit_square(n0: usize, element: Element) -> Result<Self> {
        if n0 == 0 {
            return Err(Error::InvalidInput(
                "the coarse mesh needs at least 1 cell per direction".into(),
            ));
        }
        let fine = super::unit_square(n0, element)?;
        CoarseMesh::new(
            element,
            fine.coords,
            fine.cells,
            fine.boundary.names,
            fine.boundary.edges,
        )
    }

    /// The coarse mesh of the flow around a square (docs/mathematics.md §1): the channel
    /// [0, 4] × [0, 1] around the obstacle [5/4, 7/4] × [1/4, 3/4], 28 P1 triangles, 7
    /// interior vertices, boundary parts `inflow` (x = 0), `outflow` (x = 4), `walls` (y =
    /// 0, 1), `obstacle`.
    ///
    /// The unit squares [0,1], [2,3], [3,4] × [0,1] are cut by both diagonals; the ring
    /// [1,2] × [0,1] around the obstacle into four trapezoids, each with a vertex on its
    /// axis 1/6 from the outer side, cut into 4 triangles: the two on the parallel sides are
    /// similar obtuse isosceles triangles (the obstacle at 1/4 makes them so), the other two
    /// mirror images of each other.
    pub fn flow_around_square() -> Self {
        let mut coords: Vec<[f64; 2]> = Vec::new();
        // 0..=4 bottom, 5..=9 top of the channel.
        for y in [0.0, 1.0] {
            coords.extend((0..=4).map(|x| [x as f64, y]));
        }
        let (bottom, top) = (|x: u32| x, |x: u32| 5 + x);
        // Centres of the three squares: 10, 11, 12.
        coords.extend([[0.5, 0.5], [2.5, 0.5], [3.5, 0.5]]);
        // Obstacle corners, counterclockwise: 13..=16.
        coords.extend([[1.25, 0.25], [1.75, 0.25], [1.75, 0.75], [1.25, 0.75]]);
        // Trapezoid vertices below, right of, above and left of the obstacle: 17..=20.
        let sixth = 1.0 / 6.0;
        coords.extend([
            [1.5, sixth],
            [2.0 - sixth, 0.5],
            [1.5, 1.0 - sixth],
            [1.0 + sixth, 0.5],
        ]);
        let mut cells = Vec::new();
        for (x, centre) in [(0, 10), (2, 11), (3, 12)] {
            let corners = [bottom(x), bottom(x + 1), top(x + 1), top(x)];
            for a in 0..4 {
                cells.extend([corners[a], corners[(a + 1) % 4], centre]);
            }
        }
        // Each trapezoid: outer side a → b (counterclockwise around the ring), obstacle side
        // c → d (c next to b), axis vertex p.
        for [a, b, c, d, p] in [
            [bottom(1), bottom(2), 14, 13, 17],
            [bottom(2), top(2), 15, 14, 18],
            [top(2), top(1), 16, 15, 19],
            [top(1), bottom(1), 13, 16, 20],
        ] {
            cells.extend([a, b, p, c, d, p, a, p, d, b, c, p]);
        }
        let parts = ["inflow", "outflow", "walls", "obstacle"]
            .map(String::from)
            .to_vec();
        let mut boundary = vec![
            BoundaryEdge {
                nodes: [bottom(0), top(0)],
                part: 0,
            },
            BoundaryEdge {
                nodes: [bottom(4), top(4)],
                part: 1,
            },
        ];
        for x in 0..4 {
            for side in [bottom, top] {
                boundary.push(BoundaryEdge {
                    nodes: [side(x), side(x + 1)],
                    part: 2,
                });
            }
        }
        for a in 0..4 {
            boundary.push(BoundaryEdge {
                nodes: [13 + a, 13 + (a + 1) % 4],
                part: 3,
            });
        }
        CoarseMesh::new(Element::P1, coords, cells, parts, boundary)
            .expect("the flow-around-square mesh is valid")
    }
}

/// The signed area of the cell with vertices `cell` (positive when counterclockwise).
#[cfg(test)]
pub(super) fn cell_area(coords: &[[f64; 2]], cell: &[u32]) -> f64 {
    let p: Vec<[f64; 2]> = cell.iter().map(|&v| coords[v as usize]).collect();
    signed_area(&p)
}

/// The signed area of a polygon (positive when counterclockwise).
pub(crate) fn signed_area(p: &[[f64; 2]]) -> f64 {
    (0..p.len())
        .map(|a| {
            let (u, v) = (p[a], p[(a + 1) % p.len()]);
            u[0] * v[1] - v[0] * u[1]
        })
        .sum::<f64>()
        / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_around_square_has_the_published_coarse_counts() {
        let mesh = CoarseMesh::flow_around_square();
        assert_eq!(mesh.num_cells(), 28);
        assert_eq!(mesh.coords.len(), 21);
        let edges = mesh.edges().unwrap();
        assert_eq!(edges.len(), 49);
        let on_boundary: std::collections::BTreeSet<u32> =
            mesh.boundary.iter().flat_map(|b| b.nodes).collect();
        assert_eq!(
            mesh.coords.len() - on_boundary.len(),
            7,
            "interior vertices"
        );
        // The cells tile the channel minus the obstacle: area 4 − 1/4.
        let area: f64 = (0..mesh.num_cells())
            .map(|c| cell_area(&mesh.coords, mesh.cell(c)))
            .sum();
        assert!((area - 3.75).abs() < 1e-14, "{area}");
        let obstacle = mesh.part("obstacle").unwrap();
        assert_eq!(
            mesh.boundary.iter().filter(|b| b.part == obstacle).count(),
            4
        );
    }

    #[test]
    fn clockwise_cells_are_turned_and_bad_meshes_refused() {
        let coords = vec![[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]];
        let edges = |part| {
            vec![
                BoundaryEdge {
                    nodes: [0, 1],
                    part,
                },
                BoundaryEdge {
                    nodes: [1, 2],
                    part,
                },
                BoundaryEdge {
                    nodes: [2, 0],
                    part,
                },
            ]
        };
        let parts = vec!["wall".to_string()];
        let mesh = CoarseMesh::new(
            Element::P1,
            coords.clone(),
            vec![0, 2, 1],
            parts.clone(),
            edges(0),
        )
        .unwrap();
        assert_eq!(mesh.cells, [1, 2, 0]);
        let message = |r: Result<CoarseMesh>| r.unwrap_err().to_string();
        assert!(message(CoarseMesh::new(
            Element::P1,
            coords.clone(),
            vec![0, 1, 2],
            parts.clone(),
            edges(0)[..2].to_vec()
        ))
        .contains("belongs to no boundary part"));
        assert!(message(CoarseMesh::new(
            Element::P1,
            coords.clone(),
            vec![0, 1, 2],
            parts.clone(),
            edges(3)
        ))
        .contains("names part 3"));
        assert!(message(CoarseMesh::new(
            Element::P1,
            vec![[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]],
            vec![0, 1, 2],
            parts.clone(),
            edges(0)
        ))
        .contains("zero area"));
        assert!(message(CoarseMesh::new(
            Element::Q1,
            vec![[0.0, 0.0], [1.0, 0.0], [0.2, 0.2], [0.0, 1.0]],
            vec![0, 1, 2, 3],
            parts,
            vec![]
        ))
        .contains("not convex"));
    }
}
