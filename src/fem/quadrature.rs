//! Quadrature rules on the reference cells: [0,1]^d for quads and hexahedra, the triangle
//! (0,0), (1,0), (0,1) for P1.

use crate::mesh::Element;

/// Points (in reference coordinates, `dim` per point) and weights.
#[derive(Clone, Debug)]
pub struct QuadratureRule {
    pub dim: usize,
    pub points: Vec<f64>,
    pub weights: Vec<f64>,
}

impl QuadratureRule {
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }

    pub fn point(&self, q: usize) -> &[f64] {
        &self.points[q * self.dim..(q + 1) * self.dim]
    }

    /// A rule with `m` Gauss points per direction: exact for polynomials of degree 2m-1 in
    /// each variable on quads/hexahedra; on triangles the collapsed (Duffy) Gauss rule,
    /// exact to total degree 2m-2.
    pub fn gauss(element: Element, m: usize) -> QuadratureRule {
        let (x, w) = gauss_legendre_unit(m);
        let mut points = Vec::new();
        let mut weights = Vec::new();
        match element {
            Element::Q1 => {
                for j in 0..m {
                    for i in 0..m {
                        points.extend_from_slice(&[x[i], x[j]]);
                        weights.push(w[i] * w[j]);
                    }
                }
            }
            Element::P1 => {
                // (u, v) in the unit square ↦ (u (1 - v), v), Jacobian 1 - v.
                for j in 0..m {
                    for i in 0..m {
                        points.extend_from_slice(&[x[i] * (1.0 - x[j]), x[j]]);
                        weights.push(w[i] * w[j] * (1.0 - x[j]));
                    }
                }
            }
            Element::Q1Hex => {
                for k in 0..m {
                    for j in 0..m {
                        for i in 0..m {
                            points.extend_from_slice(&[x[i], x[j], x[k]]);
                            weights.push(w[i] * w[j] * w[k]);
                        }
                    }
                }
            }
        }
        QuadratureRule {
            dim: element.dim(),
            points,
            weights,
        }
    }
}

/// Gauss-Legendre points and weights on [0, 1], by Newton's method on P_m.
pub fn gauss_legendre_unit(m: usize) -> (Vec<f64>, Vec<f64>) {
    assert!(m >= 1, "a Gauss rule needs at least one point");
    let mut x = vec![0.0; m];
    let mut w = vec![0.0; m];
    for i in 0..m {
        // Chebyshev-like initial guess for the i-th root of P_m on [-1, 1].
        let mut t = (std::f64::consts::PI * (i as f64 + 0.75) / (m as f64 + 0.5)).cos();
        let mut derivative = 1.0;
        for _ in 0..100 {
            let (mut p0, mut p1) = (1.0, t);
            for k in 2..=m {
                let p2 = ((2 * k - 1) as f64 * t * p1 - (k - 1) as f64 * p0) / k as f64;
                p0 = p1;
                p1 = p2;
            }
            let pm = if m == 1 { t } else { p1 };
            let pm_1 = if m == 1 { 1.0 } else { p0 };
            derivative = m as f64 * (t * pm - pm_1) / (t * t - 1.0);
            let step = pm / derivative;
            t -= step;
            if step.abs() < 1e-16 {
                break;
            }
        }
        x[i] = 0.5 * (1.0 - t);
        w[i] = 1.0 / ((1.0 - t * t) * derivative * derivative);
    }
    (x, w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauss_legendre_integrates_polynomials_exactly() {
        for m in 1..=5 {
            let (x, w) = gauss_legendre_unit(m);
            for degree in 0..2 * m {
                let integral: f64 = x
                    .iter()
                    .zip(&w)
                    .map(|(x, w)| w * x.powi(degree as i32))
                    .sum();
                assert!(
                    (integral - 1.0 / (degree + 1) as f64).abs() < 1e-14,
                    "m={m} deg={degree}"
                );
            }
        }
    }

    #[test]
    fn cell_rules_integrate_monomials() {
        // ∫ x^a y^b over the unit triangle = a! b! / (a + b + 2)!
        let fact = |n: u32| (1..=n).product::<u32>() as f64;
        let tri = QuadratureRule::gauss(Element::P1, 3);
        for (a, b) in [(0, 0), (1, 0), (2, 1), (2, 2), (0, 4)] {
            let exact = fact(a) * fact(b) / fact(a + b + 2);
            let got: f64 = (0..tri.len())
                .map(|q| {
                    tri.weights[q] * tri.point(q)[0].powi(a as i32) * tri.point(q)[1].powi(b as i32)
                })
                .sum();
            assert!((got - exact).abs() < 1e-15, "x^{a} y^{b}");
        }
        let hex = QuadratureRule::gauss(Element::Q1Hex, 2);
        let got: f64 = (0..hex.len())
            .map(|q| {
                let p = hex.point(q);
                hex.weights[q] * p[0].powi(3) * p[1] * p[2].powi(2)
            })
            .sum();
        assert!((got - 1.0 / 24.0).abs() < 1e-15);
    }
}
