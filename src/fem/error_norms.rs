//! Errors against an exact solution.

use rayon::prelude::*;

use super::element::{physical_gradients, shape};
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
    let element = mesh.element;
    let (k, dim) = (element.nodes_per_cell(), element.dim());
    let rule = QuadratureRule::gauss(element, ERROR_GAUSS_POINTS);
    let ncells = mesh.num_cells();
    let partials: Vec<f64> = (0..ncells.div_ceil(CELLS_PER_CHUNK))
        .into_par_iter()
        .map(|chunk| {
            let (mut n, mut dn, mut grad) = ([0.0; 8], [0.0; 24], [0.0; 24]);
            let mut sum = 0.0;
            for c in chunk * CELLS_PER_CHUNK..((chunk + 1) * CELLS_PER_CHUNK).min(ncells) {
                let cell = mesh.cell(c);
                let mut x = [0.0; 24];
                let mut uc = [0.0; 8];
                for (a, &node) in cell.iter().enumerate() {
                    x[a * dim..(a + 1) * dim].copy_from_slice(&mesh.coords[node as usize]);
                    let d = dofs.dof_of_node[node as usize];
                    uc[a] = if d == Dofs::NONE {
                        0.0
                    } else {
                        u_dofs[d as usize]
                    };
                }
                for q in 0..rule.len() {
                    shape(element, rule.point(q), &mut n, &mut dn);
                    let det = physical_gradients(dim, k, &x, &dn, &mut grad);
                    let mut xq = [0.0; 3];
                    let mut uh = 0.0;
                    for a in 0..k {
                        uh += n[a] * uc[a];
                        for d in 0..dim {
                            xq[d] += n[a] * x[a * dim + d];
                        }
                    }
                    let e = exact(&xq[..dim]) - uh;
                    sum += rule.weights[q] * det * e * e;
                }
            }
            sum
        })
        .collect();
    partials.iter().sum::<f64>().sqrt()
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
