//! Boundary conditions per boundary part of a 2D mesh (docs/mathematics.md §1): Dirichlet
//! u = g_D or Neumann ∂u/∂n = g_N on each named part. The load on the unknowns (the nodes
//! off the Dirichlet parts, in node order) is
//!
//!   b_i = ∫ f φ_i + ∫_{Γ_N} g_N φ_i − Σ_{j on Γ_D} A_ij g_D(x_j),
//!
//! and the discrete solution takes the values g_D(x_j) on the Dirichlet nodes. A pure Neumann
//! problem (no Dirichlet part) is singular: its load is projected onto the compatible ones,
//! one coarse vertex (node 0) is pinned to zero, and the solution is shifted to mean zero.

use rayon::prelude::*;

use super::assembly::{element_systems, gather_cell_vector};
use super::Dofs;
use crate::error::{Error, Result};
use crate::mesh::Mesh2d;
pub use crate::mesh::{Condition, Conditions, PINNED_NODE};

/// The load beyond which a pure Neumann problem counts as incompatible: the part of b the
/// projection removes, relative to Σ|b_i| (quadrature leaves far less on compatible data).
const INCOMPATIBLE: f64 = 1e-6;

/// Boundary data: g_D(part, x) on Dirichlet parts, g_N(part, x, n) on Neumann parts with
/// n the outward unit normal there (what a manufactured ∂u/∂n needs; data given as numbers
/// per part ignore it).
pub struct BoundaryData<'a> {
    pub dirichlet: &'a (dyn Fn(u16, [f64; 2]) -> f64 + Sync),
    pub neumann: &'a (dyn Fn(u16, [f64; 2], [f64; 2]) -> f64 + Sync),
}

/// g_D at every node (zero off the Dirichlet parts and at the pinned node).
pub fn dirichlet_values(
    mesh: &Mesh2d,
    conditions: &Conditions,
    data: &BoundaryData<'_>,
) -> Vec<f64> {
    let mut values = vec![0.0; mesh.num_nodes()];
    let mut set = vec![false; mesh.num_nodes()];
    for edge in &mesh.boundary.edges {
        if conditions.0[edge.part as usize] != Condition::Dirichlet {
            continue;
        }
        for v in edge.nodes {
            if !std::mem::replace(&mut set[v as usize], true) {
                values[v as usize] = (data.dirichlet)(edge.part, mesh.coords[v as usize]);
            }
        }
    }
    values
}

/// Gauss points on [0, 1] for the Neumann edge integrals (exact for degree 5).
const EDGE_GAUSS: [(f64, f64); 3] = [
    (0.112_701_665_379_258_3, 5.0 / 18.0),
    (0.5, 8.0 / 18.0),
    (0.887_298_334_620_741_7, 5.0 / 18.0),
];

/// ∫_{Γ_N} g_N φ_i at every node. Boundary edges run with the domain on their left, so
/// the outward normal of the edge (a, b) is (b − a) turned clockwise.
pub fn neumann_loads(mesh: &Mesh2d, conditions: &Conditions, data: &BoundaryData<'_>) -> Vec<f64> {
    let mut loads = vec![0.0; mesh.num_nodes()];
    for edge in &mesh.boundary.edges {
        if conditions.0[edge.part as usize] != Condition::Neumann {
            continue;
        }
        let [a, b] = edge.nodes.map(|v| mesh.coords[v as usize]);
        let length = (b[0] - a[0]).hypot(b[1] - a[1]);
        let normal = outward_normal(mesh, edge.nodes);
        let (mut to_a, mut to_b) = (0.0, 0.0);
        for (s, w) in EDGE_GAUSS {
            let x = [a[0] + s * (b[0] - a[0]), a[1] + s * (b[1] - a[1])];
            let g = (data.neumann)(edge.part, x, normal) * w * length;
            to_a += g * (1.0 - s);
            to_b += g * s;
        }
        loads[edge.nodes[0] as usize] += to_a;
        loads[edge.nodes[1] as usize] += to_b;
    }
    loads
}

/// The outward unit normal of a boundary edge (the domain on its left).
pub fn outward_normal(mesh: &Mesh2d, nodes: [u32; 2]) -> [f64; 2] {
    let [a, b] = nodes.map(|v| mesh.coords[v as usize]);
    let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
    let length = dx.hypot(dy);
    [dy / length, -dx / length]
}

/// The load b on the unknowns of `dofs` (module doc), for the conditions already applied
/// to the mesh. A pure Neumann load is projected onto the compatible ones (Σ_i b_i = 0
/// over all nodes): b − (Σ b_i / Σ w_i) w with w_i = ∫ φ_i; an error when the part removed
/// exceeds 1e-6 of Σ|b_i| (incompatible data, named with both sums).
pub fn boundary_load(
    mesh: &Mesh2d,
    dofs: &Dofs,
    conditions: &Conditions,
    f: impl Fn(&[f64]) -> f64 + Sync,
    data: &BoundaryData<'_>,
) -> Result<Vec<f64>> {
    let g = dirichlet_values(mesh, conditions, data);
    let (stiffness, load) = element_systems(mesh, &f, true);
    let k = mesh.element.nodes_per_cell();
    // Per cell: its load minus its stiffness applied to the Dirichlet values.
    let lifted: Vec<f64> = load
        .par_chunks(k)
        .zip(stiffness.par_chunks(k * k))
        .enumerate()
        .flat_map_iter(|(c, (fe, ke))| {
            let (cell, g) = (mesh.cell(c), &g);
            (0..k).map(move |a| {
                fe[a]
                    - (0..k)
                        .map(|b| ke[a * k + b] * g[cell[b] as usize])
                        .sum::<f64>()
            })
        })
        .collect();
    let neumann = neumann_loads(mesh, conditions, data);
    let all = Dofs::from_boundary(&vec![false; mesh.num_nodes()]);
    let mut full = gather_cell_vector(mesh, &all, &lifted);
    full.iter_mut().zip(&neumann).for_each(|(b, n)| *b += n);
    if conditions.is_pure_neumann() {
        let weights = node_weights(mesh);
        let sum: f64 = full.iter().sum();
        let size: f64 = full.iter().map(|b| b.abs()).sum();
        if sum.abs() > INCOMPATIBLE * size {
            return Err(Error::InvalidInput(format!(
                "pure Neumann data are incompatible: ∫f + ∫g_N = {sum:.3e} (Σ_i b_i) against a load of size {size:.3e} (Σ_i |b_i|); the problem has no solution"
            )));
        }
        let total: f64 = weights.iter().sum();
        full.iter_mut()
            .zip(&weights)
            .for_each(|(b, w)| *b -= sum / total * w);
    }
    Ok(dofs.node_of_dof.iter().map(|&n| full[n as usize]).collect())
}

/// ∫ f over the mesh's domain (the load quadrature): divided by |Ω| = Σ_i w_i, what a pure
/// Neumann problem's exact solution is shifted by to compare with the mean-zero discrete one.
pub fn integral(mesh: &Mesh2d, f: impl Fn(&[f64]) -> f64 + Sync) -> f64 {
    let all = Dofs::from_boundary(&vec![false; mesh.num_nodes()]);
    super::assemble_loads(mesh, &all, &[f]).iter().sum()
}

/// w_i = ∫ φ_i at every node: ∫ u_h = Σ_i w_i u_i.
pub fn node_weights(mesh: &Mesh2d) -> Vec<f64> {
    let (_, load) = element_systems(mesh, &|_: &[f64]| 1.0, false);
    let all = Dofs::from_boundary(&vec![false; mesh.num_nodes()]);
    gather_cell_vector(mesh, &all, &load)
}

/// The nodal solution from the unknowns: g_D on the Dirichlet nodes; for a pure Neumann
/// problem shifted to ∫ u_h = 0.
pub fn nodal_solution(
    mesh: &Mesh2d,
    dofs: &Dofs,
    conditions: &Conditions,
    data: &BoundaryData<'_>,
    u: &[f64],
) -> Vec<f64> {
    let mut nodal = dirichlet_values(mesh, conditions, data);
    for (&node, &value) in dofs.node_of_dof.iter().zip(u) {
        nodal[node as usize] = value;
    }
    if conditions.is_pure_neumann() {
        let weights = node_weights(mesh);
        let mean = nodal.iter().zip(&weights).map(|(u, w)| u * w).sum::<f64>()
            / weights.iter().sum::<f64>();
        nodal.iter_mut().for_each(|u| *u -= mean);
    }
    nodal
}
