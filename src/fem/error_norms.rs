//! Errors against an exact solution.

use rayon::prelude::*;

use super::element::{by_nodes, corners, det_jacobian, point, Tables};
use super::{Dofs, QuadratureRule};
use crate::mesh::Mesh;

/// Gauss points per direction for the error integral: u_h is (bi/tri)linear, u smooth.
const ERROR_GAUSS_POINTS: usize = 4;
/// Cells per partial sum (fixed, so the result does not depend on the thread count).
const CELLS_PER_CHUNK: usize = 4096;

/// ‖u - u_h‖_{L2(Ω)} by quadrature on every cell, with u_h the finite-element function of
/// the unknowns `u_dofs` (zero on the boundary).
pub fn l2_error<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    u_dofs: &[f64],
    exact: impl Fn(&[f64]) -> f64 + Sync,
) -> f64 {
    assert_eq!(
        u_dofs.len(),
        dofs.len(),
        "l2_error: vector length is not the number of unknowns"
    );
    by_nodes!(mesh.element, K => {
        let tables = Tables::<D, K>::new(
            mesh.element,
            &QuadratureRule::gauss(mesh.element, ERROR_GAUSS_POINTS),
        );
        let ncells = mesh.num_cells();
        let partials: Vec<f64> = (0..ncells.div_ceil(CELLS_PER_CHUNK))
            .into_par_iter()
            .map(|chunk| {
                let mut sum = 0.0;
                for c in chunk * CELLS_PER_CHUNK..((chunk + 1) * CELLS_PER_CHUNK).min(ncells) {
                    let x = corners::<D, K>(mesh, c);
                    let uc: [f64; K] = std::array::from_fn(|a| {
                        let d = dofs.dof_of_node[mesh.cell(c)[a] as usize];
                        if d == Dofs::NONE {
                            0.0
                        } else {
                            u_dofs[d as usize]
                        }
                    });
                    for q in 0..tables.len() {
                        let n = &tables.shapes[q];
                        let det = det_jacobian(&x, &tables.ref_grads[q]);
                        let uh: f64 = (0..K).map(|a| n[a] * uc[a]).sum();
                        let e = exact(&point(&x, n)) - uh;
                        sum += tables.weights[q] * det * e * e;
                    }
                }
                sum
            })
            .collect();
        partials.iter().sum::<f64>().sqrt()
    })
}

/// The discrete (nodal) L2 error sqrt(h^d Σ_i (u_i - u(x_i))²) over the unknowns: cheap,
/// and also O(h²) for these elements.
pub fn nodal_l2_error<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    u_dofs: &[f64],
    exact: impl Fn(&[f64]) -> f64 + Sync,
) -> f64 {
    assert_eq!(
        u_dofs.len(),
        dofs.len(),
        "nodal_l2_error: vector length is not the number of unknowns"
    );
    let partials: Vec<f64> = dofs
        .node_of_dof
        .par_chunks(CELLS_PER_CHUNK)
        .zip(u_dofs.par_chunks(CELLS_PER_CHUNK))
        .map(|(nodes, u)| {
            nodes
                .iter()
                .zip(u)
                .map(|(&node, &ui)| (ui - exact(&mesh.coords[node as usize])).powi(2))
                .sum::<f64>()
        })
        .collect();
    (partials.iter().sum::<f64>() * mesh.h().powi(D as i32)).sqrt()
}
