//! The prolongations of a refined 2D mesh's hierarchy (a coarse mesh refined uniformly,
//! [`crate::mesh::refine`], or the unit square's): level ℓ's nodes are those that appear
//! on level ℓ or before, and a node new on level ℓ takes the mean of its parents' values
//! (½ each for an edge midpoint, ¼ each for a Q1 cell centre) — the nodal interpolation
//! of a level ℓ − 1 finite-element function, so the spaces are nested and PᵀAP is that
//! level's own stiffness matrix.
//!
//! Only unknowns take part: Dirichlet nodes are zero in every correction, so their rows
//! and columns are left out on every level. Unknowns are numbered in node order on every
//! level, like [`crate::fem::Dofs`] on the finest.
//!
//! A pure Neumann problem is posed with one node pinned to zero ([`PINNED_NODE`]), but
//! multigrid solves it on every node: coarse levels barely see a point constraint (it has
//! no H¹ capacity in 2D), so the pinned system's V-cycle slows down level by level, while
//! the singular system of every node, with the constants projected out of the coarsest
//! solve, converges like a problem with a Dirichlet part ([`PinnedEmbedding`]).

use super::{MgParams, Multigrid, NullSpace};
use crate::device::MultigridDevice;
use crate::error::{Error, Result};
use crate::fem::{assemble_stiffness, Dofs};
use crate::mesh::{Mesh2d, Parents, PINNED_NODE};
use crate::sparse::Csr;

/// Marks nodes that are not unknowns of a level.
const NONE: u32 = Dofs::NONE;

/// Unknown index on level `level` of every node (NONE for Dirichlet nodes and nodes of
/// finer levels), and the level's unknown count: the numbering of [`Dofs`] with the finer
/// levels' nodes left out like Dirichlet ones.
fn numbering(node_level: &[u8], on_boundary: &[bool], level: usize) -> (Vec<u32>, usize) {
    let left_out: Vec<bool> = node_level
        .iter()
        .zip(on_boundary)
        .map(|(&l, &dirichlet)| dirichlet || l as usize > level)
        .collect();
    let dofs = Dofs::from_boundary(&left_out);
    let count = dofs.len();
    (dofs.dof_of_node, count)
}

/// The prolongations P_ℓ (level ℓ − 1 → ℓ, unknowns × unknowns) of the `count` finest
/// levels of `mesh`'s hierarchy, finest first (`count − 1` of them). Fails when the mesh
/// has no hierarchy, fewer levels than asked, or a level without unknowns.
pub fn prolongations(mesh: &Mesh2d, count: usize) -> Result<Vec<Csr<f64>>> {
    let hierarchy = mesh.hierarchy.as_ref().ok_or_else(|| {
        Error::InvalidInput("multigrid on a mesh needs its refinement hierarchy".into())
    })?;
    let finest = hierarchy.levels;
    if count == 0 || count > finest + 1 {
        return Err(Error::InvalidInput(format!(
            "{count} multigrid levels on a mesh refined {finest} times (allowed: 1 to {})",
            finest + 1
        )));
    }
    let (mut fine_index, mut fine_count) = numbering(&hierarchy.level, &mesh.on_boundary, finest);
    let mut result = Vec::with_capacity(count - 1);
    for level in (finest + 1 - count..finest).rev() {
        let (coarse_index, coarse_count) = numbering(&hierarchy.level, &mesh.on_boundary, level);
        if coarse_count == 0 {
            return Err(Error::InvalidInput(format!(
                "{count} multigrid levels: level {level} of the mesh's hierarchy (refined {level} times) has no unknowns; use fewer levels"
            )));
        }
        let (mut row_ptr, mut col_idx, mut values) =
            (Vec::with_capacity(fine_count + 1), Vec::new(), Vec::new());
        row_ptr.push(0);
        for (node, _) in fine_index.iter().enumerate().filter(|(_, &i)| i != NONE) {
            let mut entries: Vec<(u32, f64)> = if coarse_index[node] != NONE {
                vec![(coarse_index[node], 1.0)]
            } else {
                let parents: &[u32] = match &hierarchy.parents[node] {
                    Parents::Edge(p) => p,
                    Parents::Cell(p) => p,
                    Parents::None => &[],
                };
                if parents.is_empty()
                    || parents
                        .iter()
                        .any(|&p| hierarchy.level[p as usize] as usize > level)
                {
                    return Err(Error::InvalidInput(format!(
                        "the mesh's hierarchy gives node {node} (new on level {}) no parents on level {level}",
                        hierarchy.level[node]
                    )));
                }
                let weight = 1.0 / parents.len() as f64;
                parents
                    .iter()
                    .map(|&p| coarse_index[p as usize])
                    .filter(|&c| c != NONE)
                    .map(|c| (c, weight))
                    .collect()
            };
            entries.sort_unstable_by_key(|e| e.0);
            for (c, w) in entries {
                col_idx.push(c);
                values.push(w);
            }
            row_ptr.push(col_idx.len());
        }
        result.push(Csr::new(
            fine_count,
            coarse_count,
            row_ptr,
            col_idx,
            values,
        )?);
        (fine_index, fine_count) = (coarse_index, coarse_count);
    }
    Ok(result)
}

/// How the pinned system of a pure Neumann problem (every node but [`PINNED_NODE`], whose
/// value is zero) sits in the singular system of every node: the pinned node's equation
/// gets b_p = −Σ b (the full matrix's rows sum to zero, so every solution of the pinned
/// system satisfies it), and a solution of the singular system, unique up to a constant,
/// is shifted so that u_p = 0.
#[derive(Clone, Debug)]
pub struct PinnedEmbedding {
    /// Node of each unknown of the pinned system (the full system's unknowns are nodes).
    node_of_dof: Vec<u32>,
    nodes: usize,
}

impl PinnedEmbedding {
    /// The embedding of `mesh`'s unknowns (all nodes but the pinned one).
    pub fn new(mesh: &Mesh2d) -> Self {
        PinnedEmbedding {
            node_of_dof: Dofs::from_boundary(&mesh.on_boundary).node_of_dof,
            nodes: mesh.num_nodes(),
        }
    }

    /// The full system's right-hand sides (nodes × nrhs, column-major) of the pinned
    /// system's `b` (unknowns × nrhs).
    pub fn embed(&self, b: &[f64], nrhs: usize) -> Vec<f64> {
        let n = self.node_of_dof.len();
        let mut full = vec![0.0; self.nodes * nrhs];
        for (column, full) in b.chunks(n.max(1)).zip(full.chunks_mut(self.nodes)) {
            for (&node, &v) in self.node_of_dof.iter().zip(column) {
                full[node as usize] = v;
            }
            full[PINNED_NODE as usize] = -column.iter().sum::<f64>();
        }
        full
    }

    /// The pinned system's solutions from the full system's.
    pub fn extract(&self, full: &[f64]) -> Vec<f64> {
        full.chunks(self.nodes)
            .flat_map(|column| {
                let pinned = column[PINNED_NODE as usize];
                self.node_of_dof
                    .iter()
                    .map(move |&node| column[node as usize] - pinned)
            })
            .collect()
    }
}

impl<D: MultigridDevice> Multigrid<D> {
    /// Multigrid along `mesh`'s hierarchy for the system `matrix` of its unknowns, with
    /// `params.schedule.len()` levels. For a pure Neumann problem (`mesh`'s only Dirichlet
    /// node the pinned one) it is set up on the singular system of every node, and the
    /// embedding maps the pinned system's blocks to it and back.
    pub fn on_mesh(
        dev: &D,
        mesh: &Mesh2d,
        matrix: &Csr<f64>,
        params: MgParams,
        pure_neumann: bool,
    ) -> Result<(Self, Option<PinnedEmbedding>)> {
        let count = params.schedule.len();
        if !pure_neumann {
            let prolongations = prolongations(mesh, count)?;
            let mg = Multigrid::galerkin(dev, matrix, &prolongations, params, NullSpace::None)?;
            return Ok((mg, None));
        }
        let embedding = PinnedEmbedding::new(mesh);
        let mut full = mesh.clone();
        full.on_boundary = vec![false; full.num_nodes()];
        let (full_matrix, _) = assemble_stiffness(&full)?;
        let prolongations = prolongations(&full, count)?;
        let mg = Multigrid::galerkin(
            dev,
            &full_matrix,
            &prolongations,
            params,
            NullSpace::Constants,
        )?;
        Ok((mg, Some(embedding)))
    }
}
