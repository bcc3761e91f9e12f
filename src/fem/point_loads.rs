//! Load vectors ∫ f φ_i of data a caller evaluates itself: f at the points of the load
//! quadrature (one vectorised call of a Python function instead of one call per point),
//! or nodal values, whose interpolant f_h the rule integrates exactly. The rule is the
//! one of [`super::assemble_loads`], so a function given both ways gives the same loads.

use rayon::prelude::*;

use super::assembly::{gather_cell_vector, GAUSS_POINTS};
use super::element::{by_nodes, corners, det_jacobian, point, relative_corners, Tables};
use super::{Dofs, QuadratureRule};
use crate::error::{Error, Result};
use crate::mesh::Mesh;

fn tables<const D: usize, const K: usize>(mesh: &Mesh<D>) -> Tables<D, K> {
    Tables::new(
        mesh.element,
        &QuadratureRule::gauss(mesh.element, GAUSS_POINTS),
    )
}

/// The points of the load quadrature, cell after cell, each cell's in its rule's order:
/// where [`loads_at_points`] takes the values of f.
pub fn load_points<const D: usize>(mesh: &Mesh<D>) -> Vec<[f64; D]> {
    by_nodes!(mesh.element, K => {
        let tables = tables::<D, K>(mesh);
        (0..mesh.num_cells())
            .into_par_iter()
            .flat_map_iter(|c| {
                let x = corners::<D, K>(mesh, c);
                tables.shapes.iter().map(move |n| point(&x, n)).collect::<Vec<_>>()
            })
            .collect()
    })
}

/// ∫ f φ_i on the unknowns of `dofs` from the values of f at [`load_points`].
pub fn loads_at_points<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    values: &[f64],
) -> Result<Vec<f64>> {
    by_nodes!(mesh.element, K => {
        let tables = tables::<D, K>(mesh);
        let nq = tables.len();
        if values.len() != mesh.num_cells() * nq {
            return Err(Error::InvalidInput(format!(
                "{} values of f for {} quadrature points ({} cells × {nq})",
                values.len(),
                mesh.num_cells() * nq,
                mesh.num_cells()
            )));
        }
        let mut per_cell = vec![0.0; mesh.num_cells() * K];
        per_cell
            .par_chunks_mut(K)
            .zip(values.par_chunks(nq))
            .enumerate()
            .for_each(|(c, (load, f))| {
                let relative = relative_corners(&corners::<D, K>(mesh, c));
                let rule = tables.weights.iter().zip(&tables.ref_grads).zip(&tables.shapes);
                for (((weight, dn), n), fq) in rule.zip(f) {
                    let w = weight * det_jacobian(&relative, dn);
                    for (l, na) in load.iter_mut().zip(n) {
                        *l += w * fq * na;
                    }
                }
            });
        Ok(gather_cell_vector(mesh, dofs, &per_cell))
    })
}

/// The interpolant f_h = Σ_j f_j φ_j of the nodal values `nodal` at [`load_points`].
pub fn interpolate_at_load_points<const D: usize>(mesh: &Mesh<D>, nodal: &[f64]) -> Vec<f64> {
    assert_eq!(nodal.len(), mesh.num_nodes(), "one value per node");
    by_nodes!(mesh.element, K => {
        let tables = tables::<D, K>(mesh);
        (0..mesh.num_cells())
            .into_par_iter()
            .flat_map_iter(|c| {
                let cell = &mesh.cells[c * K..(c + 1) * K];
                tables
                    .shapes
                    .iter()
                    .map(|n| (0..K).map(|a| n[a] * nodal[cell[a] as usize]).sum::<f64>())
                    .collect::<Vec<_>>()
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fem::assemble_loads;
    use crate::mesh::{unit_square, Element};

    /// f given at the points equals f given as a function (the same rule), and the
    /// interpolant of a bilinear (linear) function is the function itself.
    #[test]
    fn values_at_points_give_the_loads_of_the_function() {
        for element in [Element::Q1, Element::P1] {
            let mesh = unit_square(8, element).unwrap();
            let dofs = Dofs::from_boundary(&mesh.on_boundary);
            let f = |x: &[f64]| (3.0 * x[0]).sin() * (1.0 + x[1] * x[1]);
            let expected = assemble_loads(&mesh, &dofs, &[f]);
            let points = load_points(&mesh);
            let values: Vec<f64> = points.iter().map(|x| f(x)).collect();
            let loads = loads_at_points(&mesh, &dofs, &values).unwrap();
            let scale = expected.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (a, b) in loads.iter().zip(&expected) {
                assert!((a - b).abs() <= 1e-15 * scale, "{a} vs {b} ({element:?})");
            }

            let g = |x: &[f64]| 2.0 * x[0] - 0.5 * x[1] + 1.0;
            let nodal: Vec<f64> = mesh.coords.iter().map(|x| g(x)).collect();
            let at = interpolate_at_load_points(&mesh, &nodal);
            for (x, v) in points.iter().zip(&at) {
                assert!((g(x) - v).abs() < 1e-14, "{element:?} at {x:?}");
            }
            let short = loads_at_points(&mesh, &dofs, &values[1..]).unwrap_err();
            assert!(short.to_string().contains("quadrature points"), "{short}");
        }
    }
}
