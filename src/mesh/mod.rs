//! Meshes: structured meshes of the unit square (Q1 quads, P1 right triangles) and the unit
//! cube (Q1 hexahedra), and uniform refinements of coarse triangle or quadrilateral meshes
//! of polygonal domains (the flow around a square, Gmsh files), with the refinement
//! hierarchy PSC and multigrid need: for every fine node the level it first appears on,
//! its hierarchical-basis parents, and the coarse macro element (or coarse edge or vertex)
//! it lies in.
//!
//! Structured nodes are numbered lexicographically (x fastest), so node `(i, j)` of an n×n
//! square mesh is `i + j (n + 1)` at `(i h, j h)` with `h = 1/n`.

mod coarse;
mod conditions;
mod cube;
mod gmsh;
mod refine;
mod spec;
mod square;
mod tensor;

#[cfg(test)] // the element tests check cell areas with it
pub(crate) use coarse::signed_area;
pub use coarse::{BoundaryEdge, CoarseMesh, Edges};
pub use conditions::{Condition, Conditions, PINNED_NODE};

pub use cube::unit_cube;
pub use gmsh::read_gmsh;
pub use refine::refine;
pub use spec::{
    build, AnyMesh, BoundarySpec, BoundaryValue, MeshKind, MeshSpec, PartCondition, RefinedDomain,
};
pub use square::{unit_square, unit_square_refined, Hierarchy, MacroLocation, Parents};
pub use tensor::{grid_index, step, TensorGrid};

use crate::error::{Error, Result};

/// The finite element a mesh carries; fixes the cell shape and the nodes per cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Element {
    /// Bilinear quadrilateral, nodes counterclockwise from the lower-left corner.
    Q1,
    /// Linear triangle: every square cell split by its lower-left to upper-right diagonal.
    P1,
    /// Trilinear hexahedron, nodes lexicographic in (x, y, z) within the cell.
    Q1Hex,
}

impl Element {
    pub fn nodes_per_cell(self) -> usize {
        match self {
            Element::Q1 => 4,
            Element::P1 => 3,
            Element::Q1Hex => 8,
        }
    }

    pub fn dim(self) -> usize {
        match self {
            Element::Q1 | Element::P1 => 2,
            Element::Q1Hex => 3,
        }
    }

    /// The name used in configs, HDF5 attributes and logs.
    pub fn name(self) -> &'static str {
        match self {
            Element::Q1 => "q1",
            Element::P1 => "p1",
            Element::Q1Hex => "q1-hex",
        }
    }

    /// Where corner `a` of a cell sits on the unit box: 0 or 1 per axis (quadrilaterals
    /// counterclockwise from (0, 0), hexahedra a = i + 2j + 4k). None for triangles.
    pub fn box_corner(self, a: usize) -> Option<[usize; 3]> {
        match self {
            Element::Q1 => [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]].get(a).copied(),
            Element::Q1Hex => (a < 8).then_some([a & 1, (a >> 1) & 1, (a >> 2) & 1]),
            Element::P1 => None,
        }
    }

    /// XDMF topology name of the cell shape.
    pub fn xdmf_topology(self) -> &'static str {
        match self {
            Element::Q1 => "Quadrilateral",
            Element::P1 => "Triangle",
            Element::Q1Hex => "Hexahedron",
        }
    }
}

/// An unstructured view of a (structured) mesh in `D` dimensions.
#[derive(Clone, Debug, PartialEq)]
pub struct Mesh<const D: usize> {
    pub element: Element,
    /// Cells per direction of the unit square or cube (h = 1/n); for a refined coarse
    /// mesh, cells per coarse cell side (h = h0/n).
    pub n: usize,
    pub coords: Vec<[f64; D]>,
    /// `nodes_per_cell` node indices per cell, cell after cell.
    pub cells: Vec<u32>,
    /// Dirichlet nodes (the whole boundary).
    pub on_boundary: Vec<bool>,
    /// The refinement hierarchy, for meshes refined from a coarse mesh.
    pub hierarchy: Option<Hierarchy>,
    /// The named boundary parts and the boundary edges that make them up (2D meshes; empty
    /// for the cube).
    pub boundary: BoundaryParts,
}

/// Named parts of a 2D mesh's boundary (inflow, walls, …) and every boundary edge with
/// the part it belongs to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BoundaryParts {
    pub names: Vec<String>,
    pub edges: Vec<BoundaryEdge>,
}

pub type Mesh2d = Mesh<2>;
pub type Mesh3d = Mesh<3>;

impl<const D: usize> Mesh<D> {
    /// This mesh as a 2D mesh, when it is one (for code generic over the dimension that
    /// hands a mesh to a 2D-only method).
    pub fn planar(&self) -> Option<&Mesh2d> {
        (self as &dyn std::any::Any).downcast_ref()
    }

    pub fn num_nodes(&self) -> usize {
        self.coords.len()
    }

    pub fn num_cells(&self) -> usize {
        self.cells.len() / self.element.nodes_per_cell()
    }

    pub fn cell(&self, c: usize) -> &[u32] {
        let k = self.element.nodes_per_cell();
        &self.cells[c * k..(c + 1) * k]
    }

    /// Mesh width h = 1/n.
    pub fn h(&self) -> f64 {
        1.0 / self.n as f64
    }

    /// Number of interior (unknown) nodes.
    pub fn num_interior(&self) -> usize {
        self.on_boundary.iter().filter(|b| !**b).count()
    }

    /// xxh3-64 of the coordinates, the cells and which nodes are `given` (the Dirichlet
    /// parts' nodes): what a right-hand-side file built on this mesh depends on (its rows
    /// follow the node order), as 16 hex digits.
    pub fn fingerprint(&self, given: &[bool]) -> String {
        let mut hash = xxhash_rust::xxh3::Xxh3::new();
        for x in &self.coords {
            for c in x {
                hash.update(&c.to_le_bytes());
            }
        }
        for v in &self.cells {
            hash.update(&v.to_le_bytes());
        }
        for &g in given {
            hash.update(&[g as u8]);
        }
        format!("{:016x}", hash.digest())
    }
}

/// The largest node count a mesh may have: node indices are stored as u32.
pub const MAX_NODES: usize = u32::MAX as usize - 1;

/// Refuses meshes whose node indices would not fit in u32.
fn check_node_count(nodes: usize, what: &str) -> Result<()> {
    if nodes > MAX_NODES {
        return Err(Error::InvalidInput(format!(
            "{what} would have {nodes} nodes; at most {MAX_NODES} are supported"
        )));
    }
    Ok(())
}
