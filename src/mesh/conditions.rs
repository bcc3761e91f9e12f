//! The kind of condition on each boundary part of a 2D mesh, and the Dirichlet nodes it
//! makes: the unknowns of the discrete problem are the other nodes. The data (g_D, g_N)
//! and the loads they give are the finite-element side's ([`crate::fem`]).

use super::Mesh2d;
use crate::error::{Error, Result};

/// What holds on one boundary part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Condition {
    /// u = g_D.
    Dirichlet,
    /// ∂u/∂n = g_N (outward normal).
    Neumann,
}

impl Condition {
    pub fn name(self) -> &'static str {
        match self {
            Condition::Dirichlet => "dirichlet",
            Condition::Neumann => "neumann",
        }
    }
}

/// The node pinned to zero in a pure Neumann problem: node 0, a vertex of the coarse mesh
/// on every mesh tensorfem builds (so PSC's class C loses one node and keeps its structure).
pub const PINNED_NODE: u32 = 0;

/// The condition on each boundary part of a mesh (indexed like `mesh.boundary.names`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Conditions(pub Vec<Condition>);

impl Conditions {
    /// Dirichlet on every part.
    pub fn dirichlet(mesh: &Mesh2d) -> Self {
        Conditions(vec![Condition::Dirichlet; mesh.boundary.names.len()])
    }

    pub fn is_pure_neumann(&self) -> bool {
        self.0.iter().all(|&c| c == Condition::Neumann)
    }

    /// Whether each node lies on a Dirichlet part (the pinned node of a pure Neumann
    /// problem does not).
    pub fn on_dirichlet_parts(&self, mesh: &Mesh2d) -> Vec<bool> {
        let mut on = vec![false; mesh.num_nodes()];
        for edge in &mesh.boundary.edges {
            if self.0[edge.part as usize] == Condition::Dirichlet {
                for v in edge.nodes {
                    on[v as usize] = true;
                }
            }
        }
        on
    }

    /// Marks the mesh's Dirichlet nodes (`on_boundary`): the nodes of the edges of
    /// Dirichlet parts, or the pinned node of a pure Neumann problem.
    pub fn apply(&self, mesh: &mut Mesh2d) -> Result<()> {
        if self.0.len() != mesh.boundary.names.len() {
            return Err(Error::InvalidInput(format!(
                "{} boundary conditions for the {} boundary parts {}",
                self.0.len(),
                mesh.boundary.names.len(),
                mesh.boundary.names.join(", ")
            )));
        }
        mesh.on_boundary = self.on_dirichlet_parts(mesh);
        if self.is_pure_neumann() {
            mesh.on_boundary[PINNED_NODE as usize] = true;
        }
        Ok(())
    }
}
