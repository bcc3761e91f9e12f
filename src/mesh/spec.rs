//! What a mesh section describes, validated: the domain, the element, the cells per
//! direction and the coarse mesh it is refined from; and the mesh it builds.

use super::{unit_cube, unit_square, unit_square_refined, Element, Mesh};
use crate::error::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeshKind {
    UnitSquare,
    UnitCube,
}

impl MeshKind {
    pub fn name(self) -> &'static str {
        match self {
            MeshKind::UnitSquare => "unit-square",
            MeshKind::UnitCube => "unit-cube",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeshSpec {
    pub kind: MeshKind,
    pub element: Element,
    /// Cells per direction.
    pub n: usize,
    /// Coarse cells per direction (1/h0) and refinements, when h0 is given.
    pub coarse: Option<(usize, usize)>,
}

impl MeshSpec {
    pub fn dim(&self) -> usize {
        self.element.dim()
    }

    /// Interior unknowns: (n-1)^d.
    pub fn unknowns(&self) -> usize {
        (self.n - 1).pow(self.dim() as u32)
    }

    pub fn nodes(&self) -> usize {
        (self.n + 1).pow(self.dim() as u32)
    }

    pub fn cells(&self) -> usize {
        let squares = self.n.pow(self.dim() as u32);
        match self.element {
            Element::P1 => 2 * squares,
            _ => squares,
        }
    }
}

/// A mesh of the unit square (2D) or cube (3D).
pub enum AnyMesh {
    Square(Mesh<2>),
    Cube(Mesh<3>),
}

/// The mesh a spec describes (refined from its coarse mesh when it has h0).
pub fn build(spec: &MeshSpec) -> Result<AnyMesh> {
    Ok(match spec.kind {
        MeshKind::UnitSquare => AnyMesh::Square(match spec.coarse {
            Some((n0, levels)) => unit_square_refined(n0, levels, spec.element)?,
            None => unit_square(spec.n, spec.element)?,
        }),
        MeshKind::UnitCube => AnyMesh::Cube(unit_cube(spec.n)?),
    })
}
