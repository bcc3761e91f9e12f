//! What a mesh section describes, validated: the domain, the element, the cells per
//! direction, the coarse mesh it is refined from and the condition on every boundary part;
//! and the mesh it builds.

use std::path::PathBuf;

use super::{
    refine, unit_cube, unit_square, unit_square_refined, BoundaryEdge, CoarseMesh, Condition,
    Conditions, Element, Mesh, Mesh2d,
};
use crate::error::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeshKind {
    UnitSquare,
    UnitCube,
    /// The flow around a square of docs/mathematics.md §1, refined uniformly.
    FlowAroundSquare,
    /// A coarse mesh from a Gmsh file, refined uniformly.
    Gmsh,
}

impl MeshKind {
    pub const NAMES: &'static str = "unit-square, unit-cube, flow-around-square, gmsh";

    pub fn name(self) -> &'static str {
        match self {
            MeshKind::UnitSquare => "unit-square",
            MeshKind::UnitCube => "unit-cube",
            MeshKind::FlowAroundSquare => "flow-around-square",
            MeshKind::Gmsh => "gmsh",
        }
    }
}

/// A coarse mesh of a polygonal domain refined uniformly `levels` times; PSC's macro
/// elements are the coarse cells refined `coarse_levels` times.
#[derive(Clone, Debug, PartialEq)]
pub struct RefinedDomain {
    /// The Gmsh file it was read from (kind gmsh).
    pub file: Option<PathBuf>,
    /// The coarse mesh, read once when the config is validated.
    pub coarse: CoarseMesh,
    /// Edges of the coarse mesh.
    pub coarse_edges: usize,
    pub levels: usize,
    pub coarse_levels: usize,
}

impl RefinedDomain {
    /// xxh3-64 of the coarse mesh (coordinates, cells, parts and boundary edges): a changed
    /// Gmsh file changes it.
    pub fn content(&self) -> u64 {
        let c = &self.coarse;
        let mut hash = xxhash_rust::xxh3::Xxh3::new();
        for x in &c.coords {
            hash.update(&x[0].to_le_bytes());
            hash.update(&x[1].to_le_bytes());
        }
        for v in &c.cells {
            hash.update(&v.to_le_bytes());
        }
        for name in &c.parts {
            hash.update(name.as_bytes());
            hash.update(&[0]);
        }
        for e in &c.boundary {
            hash.update(&e.nodes[0].to_le_bytes());
            hash.update(&e.nodes[1].to_le_bytes());
            hash.update(&e.part.to_le_bytes());
        }
        hash.digest()
    }

    /// The fine mesh: the macro elements (coarse cells refined `coarse_levels` times)
    /// refined the remaining levels, so PSC's macro elements are cells of a coarse mesh.
    fn build(&self) -> Result<Mesh2d> {
        let macros = if self.coarse_levels == 0 {
            self.coarse.clone()
        } else {
            self.coarse.refined(self.coarse_levels)?
        };
        refine(&macros, self.levels - self.coarse_levels)
    }
}

/// Where the values of a part's boundary condition come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BoundaryValue {
    /// g_D or g_N equal to this number on the whole part (with manufactured right-hand
    /// sides the exact solution's data are used instead).
    Constant(f64),
    /// g_D per Dirichlet node from the dataset `dirichlet` of the right-hand-side file.
    Input,
}

/// The condition on one boundary part.
#[derive(Clone, Debug, PartialEq)]
pub struct PartCondition {
    pub name: String,
    pub condition: Condition,
    pub value: BoundaryValue,
}

/// The conditions on every boundary part, in the mesh's part order.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundarySpec {
    pub parts: Vec<PartCondition>,
}

impl BoundarySpec {
    pub fn conditions(&self) -> Conditions {
        Conditions(self.parts.iter().map(|p| p.condition).collect())
    }

    /// `part<between>condition` for every part, joined by `separator` (logs, attributes,
    /// cache keys).
    pub fn describe(&self, between: &str, separator: &str) -> String {
        self.parts
            .iter()
            .map(|p| format!("{}{between}{}", p.name, p.condition.name()))
            .collect::<Vec<_>>()
            .join(separator)
    }

    /// Whether the Dirichlet values are read from the right-hand-side file.
    pub fn dirichlet_from_input(&self) -> bool {
        self.parts.iter().any(|p| p.value == BoundaryValue::Input)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct MeshSpec {
    pub kind: MeshKind,
    pub element: Element,
    /// Cells per direction (unit square, cube); cells per coarse cell side, 2^levels, of a
    /// refined domain.
    pub n: usize,
    /// PSC's macro elements: their cells per side (1/h0 of the unit square, 2^coarse_levels
    /// of a refined domain) and the refinements from them to the fine mesh.
    pub coarse: Option<(usize, usize)>,
    /// The coarse mesh and levels of kinds flow-around-square and gmsh.
    pub domain: Option<RefinedDomain>,
    /// The condition on every boundary part; None: u = 0 on the whole boundary.
    pub boundary: Option<BoundarySpec>,
}

impl MeshSpec {
    pub fn dim(&self) -> usize {
        self.element.dim()
    }

    /// The unknowns: the nodes off the Dirichlet parts (of a pure Neumann problem, all
    /// but the pinned node).
    pub fn unknowns(&self) -> usize {
        if self.kind == MeshKind::UnitCube {
            return (self.n - 1).pow(3);
        }
        // A pure Neumann problem pins one node.
        self.nodes() - self.dirichlet_nodes().max(1)
    }

    /// The nodes a row of a right-hand-side file holds: those off the Dirichlet parts
    /// (every node of a pure Neumann problem).
    pub fn load_nodes(&self) -> usize {
        self.nodes() - self.dirichlet_nodes()
    }

    /// The nodes on Dirichlet parts (2D): the entries of the file's Dirichlet values.
    pub fn dirichlet_nodes(&self) -> usize {
        if self.kind == MeshKind::UnitCube {
            return self.nodes() - self.unknowns();
        }
        self.on_dirichlet_parts()
    }

    pub fn nodes(&self) -> usize {
        match &self.domain {
            None => (self.n + 1).pow(self.dim() as u32),
            Some(d) => {
                let m = self.n;
                let interior_per_cell = match self.element {
                    Element::P1 => (m - 1) * m.saturating_sub(2) / 2,
                    _ => (m - 1) * (m - 1),
                };
                d.coarse.coords.len()
                    + d.coarse_edges * (m - 1)
                    + d.coarse.num_cells() * interior_per_cell
            }
        }
    }

    pub fn cells(&self) -> usize {
        let per_coarse_cell = self.n.pow(self.dim() as u32);
        let coarse_cells = self.domain.as_ref().map_or(1, |d| d.coarse.num_cells());
        let cells = coarse_cells * per_coarse_cell;
        match (self.element, &self.domain) {
            // The unit square's triangles halve its squares.
            (Element::P1, None) => 2 * cells,
            _ => cells,
        }
    }

    /// The nodes on Dirichlet parts, counted on the coarse boundary: each of its edges
    /// carries n − 1 fine nodes besides its ends.
    fn on_dirichlet_parts(&self) -> usize {
        let square;
        let sides: &[BoundaryEdge] = match &self.domain {
            Some(d) => &d.coarse.boundary,
            None => {
                // The unit square's sides left, right, bottom, top (the mesh's part order).
                square = [[3, 0], [1, 2], [0, 1], [2, 3]]
                    .iter()
                    .enumerate()
                    .map(|(part, &nodes)| BoundaryEdge {
                        nodes,
                        part: part as u16,
                    })
                    .collect::<Vec<_>>();
                &square
            }
        };
        let dirichlet = |part: u16| {
            self.boundary
                .as_ref()
                .is_none_or(|b| b.parts[part as usize].condition == Condition::Dirichlet)
        };
        let mut vertices: Vec<u32> = sides
            .iter()
            .filter(|e| dirichlet(e.part))
            .flat_map(|e| e.nodes)
            .collect();
        if vertices.is_empty() {
            return 0;
        }
        vertices.sort_unstable();
        vertices.dedup();
        let edges = sides.iter().filter(|e| dirichlet(e.part)).count();
        vertices.len() + edges * (self.n - 1)
    }
}

/// A mesh of the unit square, of a refined domain (2D) or of the unit cube (3D).
pub enum AnyMesh {
    Square(Mesh<2>),
    Cube(Mesh<3>),
}

/// The mesh a spec describes (refined from its coarse mesh when it has one), its Dirichlet
/// nodes those of the spec's conditions.
pub fn build(spec: &MeshSpec) -> Result<AnyMesh> {
    let mut mesh = match (spec.kind, &spec.domain) {
        (MeshKind::UnitCube, _) => return Ok(AnyMesh::Cube(unit_cube(spec.n)?)),
        (_, Some(domain)) => domain.build()?,
        (_, None) => match spec.coarse {
            Some((n0, levels)) => unit_square_refined(n0, levels, spec.element)?,
            None => unit_square(spec.n, spec.element)?,
        },
    };
    if let Some(boundary) = &spec.boundary {
        boundary.conditions().apply(&mut mesh)?;
    }
    Ok(AnyMesh::Square(mesh))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain(coarse: CoarseMesh, levels: usize, coarse_levels: usize) -> RefinedDomain {
        RefinedDomain {
            file: None,
            coarse_edges: coarse.edges().unwrap().len(),
            coarse,
            levels,
            coarse_levels,
        }
    }

    fn spec(kind: MeshKind, element: Element, n: usize, domain: Option<RefinedDomain>) -> MeshSpec {
        MeshSpec {
            kind,
            element,
            n,
            coarse: None,
            domain,
            boundary: None,
        }
    }

    fn with(mut s: MeshSpec, conditions: &[Condition]) -> MeshSpec {
        let names: Vec<String> = match &s.domain {
            Some(d) => d.coarse.parts.clone(),
            None => ["left", "right", "bottom", "top"]
                .map(String::from)
                .to_vec(),
        };
        s.boundary = Some(BoundarySpec {
            parts: names
                .into_iter()
                .zip(conditions)
                .map(|(name, &condition)| PartCondition {
                    name,
                    condition,
                    value: BoundaryValue::Constant(0.0),
                })
                .collect(),
        });
        s
    }

    /// The counts a spec gives without building its mesh (memory estimates, the input
    /// file's expected shape) are those of the mesh it builds, for every kind of condition.
    #[test]
    fn counts_match_the_built_meshes() {
        use Condition::{Dirichlet as D, Neumann as N};
        let quads = CoarseMesh::new(
            Element::Q1,
            vec![
                [0.0, 0.0],
                [1.0, 0.0],
                [2.0, 0.2],
                [0.0, 1.0],
                [1.1, 1.0],
                [2.0, 1.3],
            ],
            vec![0, 1, 4, 3, 1, 2, 5, 4],
            vec!["all".into()],
            vec![
                BoundaryEdge {
                    nodes: [0, 1],
                    part: 0,
                },
                BoundaryEdge {
                    nodes: [1, 2],
                    part: 0,
                },
                BoundaryEdge {
                    nodes: [2, 5],
                    part: 0,
                },
                BoundaryEdge {
                    nodes: [5, 4],
                    part: 0,
                },
                BoundaryEdge {
                    nodes: [4, 3],
                    part: 0,
                },
                BoundaryEdge {
                    nodes: [3, 0],
                    part: 0,
                },
            ],
        )
        .unwrap();
        let cases = [
            spec(MeshKind::UnitSquare, Element::Q1, 6, None),
            spec(MeshKind::UnitSquare, Element::P1, 5, None),
            with(
                spec(MeshKind::UnitSquare, Element::Q1, 6, None),
                &[N, D, N, N],
            ),
            with(
                spec(MeshKind::UnitSquare, Element::P1, 4, None),
                &[N, N, N, N],
            ),
            spec(
                MeshKind::FlowAroundSquare,
                Element::P1,
                8,
                Some(domain(CoarseMesh::flow_around_square(), 3, 1)),
            ),
            with(
                spec(
                    MeshKind::FlowAroundSquare,
                    Element::P1,
                    4,
                    Some(domain(CoarseMesh::flow_around_square(), 2, 0)),
                ),
                &[N, D, N, N],
            ),
            with(
                spec(
                    MeshKind::FlowAroundSquare,
                    Element::P1,
                    4,
                    Some(domain(CoarseMesh::flow_around_square(), 2, 0)),
                ),
                &[N, N, N, N],
            ),
            spec(
                MeshKind::Gmsh,
                Element::Q1,
                8,
                Some(domain(quads.clone(), 3, 2)),
            ),
            with(
                spec(MeshKind::Gmsh, Element::Q1, 4, Some(domain(quads, 2, 0))),
                &[N],
            ),
        ];
        for s in cases {
            let AnyMesh::Square(mesh) = build(&s).unwrap() else {
                unreachable!()
            };
            let conditions = s
                .boundary
                .as_ref()
                .map_or(Conditions::dirichlet(&mesh), |b| b.conditions());
            let on_parts = conditions.on_dirichlet_parts(&mesh);
            let what = format!("{:?} {:?} n = {}", s.kind, s.element, s.n);
            assert_eq!(s.nodes(), mesh.num_nodes(), "{what}: nodes");
            assert_eq!(s.cells(), mesh.num_cells(), "{what}: cells");
            assert_eq!(s.unknowns(), mesh.num_interior(), "{what}: unknowns");
            assert_eq!(
                s.dirichlet_nodes(),
                on_parts.iter().filter(|d| **d).count(),
                "{what}: Dirichlet nodes"
            );
            assert_eq!(
                s.load_nodes(),
                on_parts.iter().filter(|d| !**d).count(),
                "{what}: load nodes"
            );
        }
    }
}
