//! Uniform refinement of a coarse mesh, `levels` times, with the hierarchy PSC and
//! multigrid need. Every coarse cell (macro element) is cut into a lattice of m = 2^levels
//! cells per side in its own frame: lattice point (i, j) of a triangle (v0, v1, v2) is
//! v0 + (i/m)(v1 − v0) + (j/m)(v2 − v0), 0 ≤ i + j ≤ m (red refinement: lines of constant
//! i, j and i + j); of a quadrilateral (v0, v1, v2, v3) the bilinear image of (i/m, j/m).
//! Refinement keeps the coarse polygon: new boundary nodes lie on the coarse edges.
//!
//! Fine nodes: the coarse vertices, then the m − 1 new nodes of every coarse edge (from
//! its lower vertex), then the interior lattice points of every cell (row by row).

use super::coarse::{BoundaryEdge, CoarseMesh, Edges};
use super::square::{Hierarchy, MacroLocation, Parents};
use super::{check_node_count, BoundaryParts, Element, Mesh2d};
use crate::error::{Error, Result};

/// Node indices of one coarse cell's lattice, and how lattice points map to fine nodes.
struct CellLattice<'a> {
    coarse: &'a CoarseMesh,
    edges: &'a Edges,
    m: usize,
    edge_base: usize,
    interior_base: usize,
}

impl CellLattice<'_> {
    fn is_triangle(&self) -> bool {
        self.coarse.element == Element::P1
    }

    /// Interior lattice points per cell.
    fn interior_per_cell(&self) -> usize {
        let m = self.m;
        if self.is_triangle() {
            (m - 1) * (m.saturating_sub(2)) / 2
        } else {
            (m - 1) * (m - 1)
        }
    }

    /// Whether (i, j) is a lattice point of the cell.
    fn contains(&self, i: usize, j: usize) -> bool {
        if self.is_triangle() {
            i + j <= self.m
        } else {
            i <= self.m && j <= self.m
        }
    }

    /// Row-by-row index of an interior lattice point among the cell's interior points.
    fn interior_index(&self, i: usize, j: usize) -> usize {
        let m = self.m;
        if self.is_triangle() {
            // rows j' = 1 … j−1 hold m − 1 − j' points each
            (j - 1) * (m - 1) - (j - 1) * j / 2 + (i - 1)
        } else {
            (i - 1) + (j - 1) * (m - 1)
        }
    }

    /// Where lattice point (i, j) of cell `c` lies: on a cell vertex, on a cell side (with
    /// its parameter t from the side's first vertex, 0 < t < m) or inside.
    fn classify(&self, c: usize, i: usize, j: usize) -> Where {
        let m = self.m;
        let cell = self.coarse.cell(c);
        if self.is_triangle() {
            match (i, j) {
                (0, 0) => Where::Vertex(cell[0]),
                (_, 0) if i == m => Where::Vertex(cell[1]),
                (0, _) if j == m => Where::Vertex(cell[2]),
                (_, 0) => Where::Side(0, i),
                (0, _) => Where::Side(2, m - j),
                _ if i + j == m => Where::Side(1, j),
                _ => Where::Inside,
            }
        } else {
            match (i, j) {
                (0, 0) => Where::Vertex(cell[0]),
                _ if (i, j) == (m, 0) => Where::Vertex(cell[1]),
                _ if (i, j) == (m, m) => Where::Vertex(cell[2]),
                _ if (i, j) == (0, m) => Where::Vertex(cell[3]),
                (_, 0) => Where::Side(0, i),
                _ if i == m => Where::Side(1, j),
                _ if j == m => Where::Side(2, m - i),
                _ if i == 0 => Where::Side(3, m - j),
                _ => Where::Inside,
            }
        }
    }

    /// The fine node at lattice point (i, j) of cell `c`, and where it lies on the coarse mesh.
    fn node(&self, c: usize, i: usize, j: usize) -> (u32, MacroLocation) {
        let cell = self.coarse.cell(c);
        match self.classify(c, i, j) {
            Where::Vertex(v) => (v, MacroLocation::Vertex(v)),
            Where::Side(side, t) => {
                let (a, b) = (cell[side], cell[(side + 1) % cell.len()]);
                let e = self.edges.find(a, b).expect("cell sides are edges");
                let along = if a < b { t - 1 } else { self.m - 1 - t };
                let node = self.edge_base + e as usize * (self.m - 1) + along;
                (node as u32, MacroLocation::Edge(e))
            }
            Where::Inside => {
                let node =
                    self.interior_base + c * self.interior_per_cell() + self.interior_index(i, j);
                (node as u32, MacroLocation::Interior(c as u32))
            }
        }
    }

    /// Coordinates of lattice point (i, j) of cell `c`.
    fn position(&self, c: usize, i: usize, j: usize) -> [f64; 2] {
        let (u, v) = (i as f64 / self.m as f64, j as f64 / self.m as f64);
        let weights = if self.is_triangle() {
            [1.0 - u - v, u, v, 0.0]
        } else {
            [(1.0 - u) * (1.0 - v), u * (1.0 - v), u * v, (1.0 - u) * v]
        };
        let mut x = [0.0; 2];
        for (w, &vertex) in weights.iter().zip(self.coarse.cell(c)) {
            let q = self.coarse.coords[vertex as usize];
            x[0] += w * q[0];
            x[1] += w * q[1];
        }
        x
    }

    /// Level of lattice point (i, j) (0: a coarse vertex) and, for a new node, its parents
    /// as lattice points: the ends of the level-(l−1) edge it halves, or the four corners of
    /// the level-(l−1) quadrilateral it is the centre of.
    fn level_and_parents(&self, i: usize, j: usize) -> (usize, Vec<[usize; 2]>) {
        let levels = self.m.trailing_zeros() as usize;
        let zeros = |a: usize| {
            if a == 0 {
                levels
            } else {
                (a.trailing_zeros() as usize).min(levels)
            }
        };
        let l = levels - zeros(i).min(zeros(j));
        if l == 0 {
            return (0, Vec::new());
        }
        let s = 1usize << (levels - l);
        let (odd_i, odd_j) = ((i / s) % 2 == 1, (j / s) % 2 == 1);
        let parents = match (odd_i, odd_j) {
            (true, false) => vec![[i - s, j], [i + s, j]],
            (false, true) => vec![[i, j - s], [i, j + s]],
            _ if self.is_triangle() => vec![[i - s, j + s], [i + s, j - s]],
            _ => vec![
                [i - s, j - s],
                [i + s, j - s],
                [i + s, j + s],
                [i - s, j + s],
            ],
        };
        (l, parents)
    }
}

enum Where {
    Vertex(u32),
    /// Cell side (0 = v0→v1, …) and the lattice steps from its first vertex.
    Side(usize, usize),
    Inside,
}

/// The coarse mesh refined uniformly `levels` times (h = h0 / 2^levels), with the
/// hierarchy attached; Dirichlet nodes are all boundary nodes.
pub fn refine(coarse: &CoarseMesh, levels: usize) -> Result<Mesh2d> {
    if levels > 15 {
        return Err(Error::InvalidInput(format!(
            "{levels} refinement levels is more than a mesh can hold"
        )));
    }
    let edges = coarse.edges()?;
    let m = 1usize << levels;
    let lattice = CellLattice {
        coarse,
        edges: &edges,
        m,
        edge_base: coarse.coords.len(),
        interior_base: coarse.coords.len() + edges.len() * (m - 1),
    };
    let ncells = coarse.num_cells();
    let nodes =
        (lattice.interior_base as u128) + (ncells as u128) * (lattice.interior_per_cell() as u128);
    check_node_count(
        usize::try_from(nodes).unwrap_or(usize::MAX),
        &format!("the coarse mesh refined {levels} times"),
    )?;
    let nodes = nodes as usize;

    const UNSET: u8 = u8::MAX;
    let mut coords = vec![[0.0; 2]; nodes];
    let mut level = vec![UNSET; nodes];
    let mut parents = vec![Parents::None; nodes];
    let mut location = vec![MacroLocation::Vertex(0); nodes];
    let mut macro_lattice = vec![[0u32; 2]; nodes];
    let per_side = if lattice.is_triangle() { 3 } else { 4 };
    let fine_per_cell = m * m;
    let mut cells = Vec::with_capacity(ncells * fine_per_cell * per_side);
    let mut cell_macro = Vec::with_capacity(ncells * fine_per_cell);
    for c in 0..ncells {
        for j in 0..=m {
            for i in 0..=m {
                if !lattice.contains(i, j) {
                    continue;
                }
                let (node, loc) = lattice.node(c, i, j);
                let node = node as usize;
                if level[node] != UNSET {
                    continue; // a vertex or edge node met from a neighbouring cell
                }
                coords[node] = match loc {
                    MacroLocation::Vertex(v) => coarse.coords[v as usize],
                    _ => lattice.position(c, i, j),
                };
                let (l, lattice_parents) = lattice.level_and_parents(i, j);
                level[node] = l as u8;
                let p: Vec<u32> = lattice_parents
                    .iter()
                    .map(|&[a, b]| lattice.node(c, a, b).0)
                    .collect();
                parents[node] = match p.len() {
                    0 => Parents::None,
                    2 => Parents::Edge([p[0], p[1]]),
                    _ => Parents::Cell([p[0], p[1], p[2], p[3]]),
                };
                if let MacroLocation::Interior(_) = loc {
                    macro_lattice[node] = [i as u32, j as u32];
                }
                location[node] = loc;
            }
        }
        let at = |i: usize, j: usize| lattice.node(c, i, j).0;
        for j in 0..m {
            for i in 0..m {
                if lattice.is_triangle() {
                    if i + j < m {
                        cells.extend([at(i, j), at(i + 1, j), at(i, j + 1)]);
                        cell_macro.push(c as u32);
                    }
                    if i + j + 1 < m {
                        cells.extend([at(i + 1, j), at(i + 1, j + 1), at(i, j + 1)]);
                        cell_macro.push(c as u32);
                    }
                } else {
                    cells.extend([at(i, j), at(i + 1, j), at(i + 1, j + 1), at(i, j + 1)]);
                    cell_macro.push(c as u32);
                }
            }
        }
    }
    if level.contains(&UNSET) {
        return Err(Error::InvalidInput(
            "coarse mesh: a vertex belongs to no cell".into(),
        ));
    }

    // Fine boundary edges: the nodes along every coarse boundary edge, in order.
    let mut boundary_edges = Vec::with_capacity(coarse.boundary.len() * m);
    for b in &coarse.boundary {
        let [a, z] = b.nodes;
        let e = edges.find(a, z).expect("boundary edges are edges") as usize;
        // edge nodes are numbered from the lower vertex; keep the edge's direction
        let mut inner: Vec<u32> = (0..m - 1)
            .map(|t| (lattice.edge_base + e * (m - 1) + t) as u32)
            .collect();
        if a > z {
            inner.reverse();
        }
        let along: Vec<u32> = std::iter::once(a)
            .chain(inner)
            .chain(std::iter::once(z))
            .collect();
        boundary_edges.extend(along.windows(2).map(|w| BoundaryEdge {
            nodes: [w[0], w[1]],
            part: b.part,
        }));
    }

    let mut on_boundary = vec![false; nodes];
    for (node, loc) in location.iter().enumerate() {
        if let MacroLocation::Edge(e) = *loc {
            on_boundary[node] = edges.part[e as usize].is_some();
        }
    }
    for b in &coarse.boundary {
        for v in b.nodes {
            on_boundary[v as usize] = true;
        }
    }

    Ok(Mesh2d {
        element: coarse.element,
        n: m,
        coords,
        cells,
        on_boundary,
        boundary: BoundaryParts {
            names: coarse.parts.clone(),
            edges: boundary_edges,
        },
        hierarchy: Some(Hierarchy {
            n0: None,
            levels,
            macros: ncells,
            level,
            parents,
            location,
            cell_macro,
            macro_lattice,
        }),
    })
}

impl CoarseMesh {
    /// This mesh refined `levels` times, as a coarse mesh (its cells the macro elements of
    /// a further refinement), boundary edges keeping their parts.
    pub fn refined(&self, levels: usize) -> Result<CoarseMesh> {
        let fine = refine(self, levels)?;
        CoarseMesh::new(
            self.element,
            fine.coords,
            fine.cells,
            fine.boundary.names,
            fine.boundary.edges,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::coarse::CoarseMesh;

    fn interior_classes(mesh: &Mesh2d) -> [usize; 3] {
        let h = mesh.hierarchy.as_ref().unwrap();
        let mut counts = [0; 3];
        for (node, loc) in h.location.iter().enumerate() {
            if !mesh.on_boundary[node] {
                counts[match loc {
                    MacroLocation::Vertex(_) => 0,
                    MacroLocation::Edge(_) => 1,
                    MacroLocation::Interior(_) => 2,
                }] += 1;
            }
        }
        counts
    }

    /// docs/mathematics.md §8.1: N = 228,480 interior nodes at L = 7; |C| = 7, 42, 196, 840
    /// at L0 = 0…3.
    #[test]
    fn flow_around_square_counts_match_spec() {
        let coarse = CoarseMesh::flow_around_square();
        let fine = refine(&coarse, 7).unwrap();
        assert_eq!(fine.num_interior(), 228_480);
        assert_eq!(fine.num_cells(), 28 << 14);
        for (l0, c) in [(0, 7), (1, 42), (2, 196), (3, 840)] {
            let coarse_l0 = refine(&coarse, l0).unwrap();
            assert_eq!(coarse_l0.num_interior(), c, "L0 = {l0}");
            // Refining in two steps gives the same counts of nodes and Dirichlet nodes.
            let two_steps = refine(&coarse.refined(l0).unwrap(), 7 - l0).unwrap();
            assert_eq!(two_steps.num_interior(), 228_480, "L0 = {l0}");
            assert_eq!(two_steps.num_nodes(), fine.num_nodes());
        }
        // With L0 = 0 the classes are the coarse mesh's: 7 vertices, 35 interior edges.
        let [c, e, i] = interior_classes(&refine(&coarse, 3).unwrap());
        assert_eq!((c, e, i), (7, 35 * 7, 28 * 21));
    }

    /// Every new node is the mean of its parents, which are on earlier levels; fine cells
    /// are counterclockwise and tile their macro element.
    #[test]
    fn hierarchy_is_geometric_and_cells_tile_the_macros() {
        let tri = CoarseMesh::flow_around_square();
        let quad = CoarseMesh::new(
            Element::Q1,
            vec![[0.0, 0.0], [2.0, 0.0], [2.5, 1.5], [0.0, 1.0], [3.0, 0.0]],
            vec![0, 1, 2, 3, 1, 4, 2, 2],
            vec!["wall".into()],
            vec![],
        );
        assert!(quad.is_err(), "a repeated vertex is refused");
        let quad = CoarseMesh::new(
            Element::Q1,
            vec![
                [0.0, 0.0],
                [2.0, 0.0],
                [2.5, 1.5],
                [0.0, 1.0],
                [3.5, 0.2],
                [3.2, 1.8],
            ],
            vec![0, 1, 2, 3, 1, 4, 5, 2],
            vec!["wall".into()],
            [[0, 1], [2, 3], [3, 0], [1, 4], [4, 5], [5, 2]]
                .map(|nodes| crate::mesh::coarse::BoundaryEdge { nodes, part: 0 })
                .to_vec(),
        )
        .unwrap();
        for coarse in [tri, quad] {
            let mesh = refine(&coarse, 3).unwrap();
            let h = mesh.hierarchy.as_ref().unwrap();
            for node in 0..mesh.num_nodes() {
                let p: Vec<u32> = match h.parents[node] {
                    Parents::None => {
                        assert_eq!(h.level[node], 0);
                        continue;
                    }
                    Parents::Edge(p) => p.to_vec(),
                    Parents::Cell(p) => p.to_vec(),
                };
                for &q in &p {
                    assert!(h.level[q as usize] < h.level[node]);
                }
                for (d, &x) in mesh.coords[node].iter().enumerate() {
                    let mean: f64 =
                        p.iter().map(|&q| mesh.coords[q as usize][d]).sum::<f64>() / p.len() as f64;
                    assert!((mean - x).abs() < 1e-14, "node {node}");
                }
            }
            let mut area = vec![0.0; coarse.num_cells()];
            for c in 0..mesh.num_cells() {
                let a = crate::mesh::coarse::cell_area(&mesh.coords, mesh.cell(c));
                assert!(a > 0.0, "fine cell {c} is not counterclockwise");
                area[h.cell_macro[c] as usize] += a;
            }
            for (m, a) in area.iter().enumerate() {
                let expected = crate::mesh::coarse::cell_area(&coarse.coords, coarse.cell(m));
                assert!((a - expected).abs() < 1e-13 * expected, "macro {m}");
            }
        }
    }

    /// Refining the unit square's coarse mesh gives the structured fine mesh (as a set of
    /// node positions and boundary marks).
    #[test]
    fn refined_unit_square_matches_the_structured_mesh() {
        for element in [Element::Q1, Element::P1] {
            let general = refine(&CoarseMesh::unit_square(2, element).unwrap(), 3).unwrap();
            let structured = crate::mesh::unit_square(16, element).unwrap();
            let key = |x: [f64; 2]| ((x[0] * 16.0).round() as i64, (x[1] * 16.0).round() as i64);
            let mut a: Vec<_> = general
                .coords
                .iter()
                .zip(&general.on_boundary)
                .map(|(&x, &b)| (key(x), b))
                .collect();
            let mut b: Vec<_> = structured
                .coords
                .iter()
                .zip(&structured.on_boundary)
                .map(|(&x, &b)| (key(x), b))
                .collect();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "{element:?}");
            assert_eq!(general.num_cells(), structured.num_cells());
        }
    }
}
