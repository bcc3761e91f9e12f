//! Shape functions of the reference elements and the isoparametric map.

use super::QuadratureRule;
use crate::mesh::Element;

/// Shape function values `n[a]` and reference gradients `dn[a * dim + d]` at `xi`.
pub fn shape(element: Element, xi: &[f64], n: &mut [f64], dn: &mut [f64]) {
    match element {
        Element::P1 => {
            let (x, y) = (xi[0], xi[1]);
            n[..3].copy_from_slice(&[1.0 - x - y, x, y]);
            dn[..6].copy_from_slice(&[-1.0, -1.0, 1.0, 0.0, 0.0, 1.0]);
        }
        Element::Q1 => {
            let (x, y) = (xi[0], xi[1]);
            // Corners counterclockwise: (0,0), (1,0), (1,1), (0,1).
            n[..4].copy_from_slice(&[(1.0 - x) * (1.0 - y), x * (1.0 - y), x * y, (1.0 - x) * y]);
            dn[..8].copy_from_slice(&[-(1.0 - y), -(1.0 - x), 1.0 - y, -x, y, x, -y, 1.0 - x]);
        }
        Element::Q1Hex => {
            // Corner a = i + 2 j + 4 k sits at (i, j, k).
            for a in 0..8 {
                let corner = [(a & 1) as f64, ((a >> 1) & 1) as f64, ((a >> 2) & 1) as f64];
                let f: [f64; 3] =
                    std::array::from_fn(|d| if corner[d] == 1.0 { xi[d] } else { 1.0 - xi[d] });
                let df: [f64; 3] =
                    std::array::from_fn(|d| if corner[d] == 1.0 { 1.0 } else { -1.0 });
                n[a] = f[0] * f[1] * f[2];
                dn[3 * a] = df[0] * f[1] * f[2];
                dn[3 * a + 1] = f[0] * df[1] * f[2];
                dn[3 * a + 2] = f[0] * f[1] * df[2];
            }
        }
    }
}

/// Physical gradients `grad[a * dim + d]` from reference gradients, and |det J|, for the
/// cell with node coordinates `x[a * dim + d]`.
pub fn physical_gradients(
    dim: usize,
    nodes: usize,
    x: &[f64],
    dn: &[f64],
    grad: &mut [f64],
) -> f64 {
    // J[r][c] = Σ_a x_a[r] ∂N_a/∂ξ_c
    let mut jac = [0.0; 9];
    for a in 0..nodes {
        for r in 0..dim {
            for c in 0..dim {
                jac[r * dim + c] += x[a * dim + r] * dn[a * dim + c];
            }
        }
    }
    let (det, inv) = invert(dim, &jac);
    // ∇N_a = J^{-T} ∇_ξ N_a, i.e. grad[d] = Σ_c inv[c][d] dn[c]
    for a in 0..nodes {
        for d in 0..dim {
            grad[a * dim + d] = (0..dim).map(|c| inv[c * dim + d] * dn[a * dim + c]).sum();
        }
    }
    det.abs()
}

/// Determinant and inverse of a 2×2 or 3×3 row-major matrix.
fn invert(dim: usize, m: &[f64; 9]) -> (f64, [f64; 9]) {
    let mut inv = [0.0; 9];
    if dim == 2 {
        let det = m[0] * m[3] - m[1] * m[2];
        inv[..4].copy_from_slice(&[m[3] / det, -m[1] / det, -m[2] / det, m[0] / det]);
        (det, inv)
    } else {
        let c = |r: usize, k: usize| m[r * 3 + k];
        let cof = |r: usize, k: usize| {
            let (r1, r2) = ((r + 1) % 3, (r + 2) % 3);
            let (k1, k2) = ((k + 1) % 3, (k + 2) % 3);
            c(r1, k1) * c(r2, k2) - c(r1, k2) * c(r2, k1)
        };
        let det = (0..3).map(|k| c(0, k) * cof(0, k)).sum::<f64>();
        for r in 0..3 {
            for k in 0..3 {
                inv[k * 3 + r] = cof(r, k) / det;
            }
        }
        (det, inv)
    }
}

/// Shape values (k per point) and reference gradients (k × dim per point) at every point
/// of `rule`: the same at every cell, so computed once per integral.
pub fn tabulate(element: Element, rule: &QuadratureRule) -> (Vec<f64>, Vec<f64>) {
    let (k, dim) = (element.nodes_per_cell(), element.dim());
    let (mut shapes, mut grads) = (vec![0.0; rule.len() * k], vec![0.0; rule.len() * k * dim]);
    for q in 0..rule.len() {
        shape(
            element,
            rule.point(q),
            &mut shapes[q * k..(q + 1) * k],
            &mut grads[q * k * dim..(q + 1) * k * dim],
        );
    }
    (shapes, grads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_functions_are_a_partition_of_unity_and_interpolate() {
        for (element, corners) in [
            (
                Element::P1,
                vec![[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
            ),
            (
                Element::Q1,
                vec![
                    [0.0, 0.0, 0.0],
                    [1.0, 0.0, 0.0],
                    [1.0, 1.0, 0.0],
                    [0.0, 1.0, 0.0],
                ],
            ),
            (
                Element::Q1Hex,
                (0..8)
                    .map(|a| [(a & 1) as f64, ((a >> 1) & 1) as f64, ((a >> 2) & 1) as f64])
                    .collect(),
            ),
        ] {
            let (k, dim) = (element.nodes_per_cell(), element.dim());
            let (mut n, mut dn) = (vec![0.0; k], vec![0.0; k * dim]);
            for (b, corner) in corners.iter().enumerate() {
                shape(element, &corner[..dim], &mut n, &mut dn);
                for (a, &value) in n.iter().enumerate() {
                    assert_eq!(value, if a == b { 1.0 } else { 0.0 });
                }
                for d in 0..dim {
                    let s: f64 = (0..k).map(|a| dn[a * dim + d]).sum();
                    assert!(s.abs() < 1e-15);
                }
            }
        }
    }

    #[test]
    fn three_by_three_inverse() {
        let m = [2.0, 1.0, 0.0, 0.0, 3.0, 1.0, 1.0, 0.0, 4.0];
        let (det, inv) = invert(3, &m);
        assert!((det - 25.0).abs() < 1e-14);
        for r in 0..3 {
            for k in 0..3 {
                let v: f64 = (0..3).map(|t| m[r * 3 + t] * inv[t * 3 + k]).sum();
                assert!((v - if r == k { 1.0 } else { 0.0 }).abs() < 1e-14);
            }
        }
    }
}
