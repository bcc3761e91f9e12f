//! Shape functions of the reference elements and the isoparametric map.

use super::QuadratureRule;
use crate::mesh::{Element, Mesh};

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

/// Runs `$body` with the const `$k` the nodes per cell of `$element` (3, 4 or 8), so cell
/// loops work on fixed-size arrays the compiler unrolls.
macro_rules! by_nodes {
    ($element:expr, $k:ident => $body:expr) => {
        match $element.nodes_per_cell() {
            3 => {
                const $k: usize = 3;
                $body
            }
            4 => {
                const $k: usize = 4;
                $body
            }
            8 => {
                const $k: usize = 8;
                $body
            }
            n => unreachable!("{n} nodes per cell"),
        }
    };
}
pub(crate) use by_nodes;

/// A quadrature rule tabulated for an element of K nodes in D dimensions: per point its
/// weight, shape values and reference gradients (the same at every cell).
pub struct Tables<const D: usize, const K: usize> {
    pub weights: Vec<f64>,
    pub shapes: Vec<[f64; K]>,
    pub ref_grads: Vec<[[f64; D]; K]>,
}

impl<const D: usize, const K: usize> Tables<D, K> {
    pub fn new(element: Element, rule: &QuadratureRule) -> Self {
        assert!(
            element.nodes_per_cell() == K && element.dim() == D,
            "tables of {K} nodes in {D}D for {}",
            element.name()
        );
        let (mut shapes, mut ref_grads) = (vec![], vec![]);
        for q in 0..rule.len() {
            let (mut n, mut dn) = ([0.0; K], [0.0; 24]);
            shape(element, rule.point(q), &mut n, &mut dn);
            shapes.push(n);
            ref_grads.push(std::array::from_fn(|a| {
                std::array::from_fn(|d| dn[a * D + d])
            }));
        }
        Tables {
            weights: rule.weights.clone(),
            shapes,
            ref_grads,
        }
    }

    pub fn len(&self) -> usize {
        self.weights.len()
    }
}

/// Slots of a [`ShapeMemory`] (bits of its hash).
const SHAPE_SLOT_BITS: u32 = 6;

/// Per-cell values that depend on the cell's shape alone (its corners relative to its first
/// corner, [`relative_corners`]), remembered by that shape in a direct-mapped memory (a
/// collision replaces the older shape). The cells of a structured mesh are translates of a
/// few shapes, so their element matrices are computed about once per shape instead of once
/// per cell; on other meshes every cell is new, at the cost of a hash and a compare. A value
/// must be computed from the relative corners alone, so a remembered one is bit for bit the
/// one that would be computed.
pub struct ShapeMemory<const D: usize, const K: usize, V> {
    slots: Vec<Option<([[u64; D]; K], V)>>,
}

impl<const D: usize, const K: usize, V> ShapeMemory<D, K, V> {
    pub fn new() -> Self {
        ShapeMemory {
            slots: (0..1 << SHAPE_SLOT_BITS).map(|_| None).collect(),
        }
    }

    /// The value of the shape with corners `relative`, computed by `compute` when it is not
    /// remembered.
    pub fn get(
        &mut self,
        relative: &[[f64; D]; K],
        compute: impl FnOnce(&[[f64; D]; K]) -> V,
    ) -> &V {
        let key: [[u64; D]; K] =
            std::array::from_fn(|a| std::array::from_fn(|d| relative[a][d].to_bits()));
        let hash = key.iter().flatten().fold(0u64, |h, &bits| {
            (h ^ bits).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        });
        let slot = &mut self.slots[(hash >> (64 - SHAPE_SLOT_BITS)) as usize];
        if !matches!(slot, Some((k, _)) if *k == key) {
            *slot = Some((key, compute(relative)));
        }
        &slot.as_ref().expect("filled above").1
    }
}

impl<const D: usize, const K: usize, V> Default for ShapeMemory<D, K, V> {
    fn default() -> Self {
        Self::new()
    }
}

/// The corners of a cell relative to its first: what its shape's values are computed from
/// (the Jacobian is the same as from the absolute corners, since Σ_a ∇N_a = 0).
pub fn relative_corners<const D: usize, const K: usize>(x: &[[f64; D]; K]) -> [[f64; D]; K] {
    std::array::from_fn(|a| std::array::from_fn(|d| x[a][d] - x[0][d]))
}

/// The node coordinates of cell `c`.
pub fn corners<const D: usize, const K: usize>(mesh: &Mesh<D>, c: usize) -> [[f64; D]; K] {
    let cell = mesh.cell(c);
    std::array::from_fn(|a| mesh.coords[cell[a] as usize])
}

/// The physical point Σ_a N_a x_a of shape values `n`.
pub fn point<const D: usize, const K: usize>(x: &[[f64; D]; K], n: &[f64; K]) -> [f64; D] {
    let mut p = [0.0; D];
    for a in 0..K {
        for d in 0..D {
            p[d] += n[a] * x[a][d];
        }
    }
    p
}

/// |det J| of the isoparametric map of the cell with nodes `x` at a point with reference
/// gradients `dn`, J[r][c] = Σ_a x_a[r] ∂N_a/∂ξ_c.
pub fn jacobian<const D: usize, const K: usize>(
    x: &[[f64; D]; K],
    dn: &[[f64; D]; K],
) -> [[f64; D]; D] {
    let mut jac = [[0.0; D]; D];
    for a in 0..K {
        for r in 0..D {
            for c in 0..D {
                jac[r][c] += x[a][r] * dn[a][c];
            }
        }
    }
    jac
}

/// |det J| and the physical gradients ∇N_a = J^{-T} ∇_ξ N_a at a point with reference
/// gradients `dn` of the cell with nodes `x`.
pub fn gradients<const D: usize, const K: usize>(
    x: &[[f64; D]; K],
    dn: &[[f64; D]; K],
) -> (f64, [[f64; D]; K]) {
    let (det, inv) = invert(&jacobian(x, dn));
    let grads = std::array::from_fn(|a| {
        std::array::from_fn(|d| {
            let mut g = 0.0;
            for c in 0..D {
                g += inv[c][d] * dn[a][c];
            }
            g
        })
    });
    (det.abs(), grads)
}

/// |det J| at a point with reference gradients `dn` of the cell with nodes `x`.
pub fn det_jacobian<const D: usize, const K: usize>(x: &[[f64; D]; K], dn: &[[f64; D]; K]) -> f64 {
    determinant(&jacobian(x, dn)).abs()
}

fn determinant<const D: usize>(m: &[[f64; D]; D]) -> f64 {
    match D {
        2 => m[0][0] * m[1][1] - m[0][1] * m[1][0],
        3 => (0..3).map(|k| m[0][k] * cofactor(m, 0, k)).sum(),
        _ => unreachable!("{D}×{D} Jacobian"),
    }
}

/// The cofactor (r, k) of a 3×3 matrix.
fn cofactor<const D: usize>(m: &[[f64; D]; D], r: usize, k: usize) -> f64 {
    let (r1, r2) = ((r + 1) % 3, (r + 2) % 3);
    let (k1, k2) = ((k + 1) % 3, (k + 2) % 3);
    m[r1][k1] * m[r2][k2] - m[r1][k2] * m[r2][k1]
}

/// Determinant and inverse of a 2×2 or 3×3 matrix.
fn invert<const D: usize>(m: &[[f64; D]; D]) -> (f64, [[f64; D]; D]) {
    let det = determinant(m);
    let mut inv = [[0.0; D]; D];
    match D {
        2 => {
            inv[0][0] = m[1][1] / det;
            inv[0][1] = -m[0][1] / det;
            inv[1][0] = -m[1][0] / det;
            inv[1][1] = m[0][0] / det;
        }
        3 => {
            inv = std::array::from_fn(|k| std::array::from_fn(|r| cofactor(m, r, k) / det));
        }
        _ => unreachable!("{D}×{D} Jacobian"),
    }
    (det, inv)
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

    /// The physical gradients reproduce linear functions, Σ_a x_a[r] ∇N_a[d] = δ_rd, and
    /// |det J| is the cell's area element, on a skewed quadrilateral, a triangle and a
    /// skewed hexahedron.
    #[test]
    fn gradients_reproduce_linear_functions() {
        fn check<const D: usize, const K: usize>(element: Element, x: [[f64; D]; K], det: f64) {
            let rule = QuadratureRule::gauss(element, 2);
            let tables = Tables::<D, K>::new(element, &rule);
            let mut measure = 0.0;
            for q in 0..tables.len() {
                let (det_q, grads) = gradients(&x, &tables.ref_grads[q]);
                assert!((det_jacobian(&x, &tables.ref_grads[q]) - det_q).abs() < 1e-15);
                measure += tables.weights[q] * det_q;
                for (r, d) in (0..D).flat_map(|r| (0..D).map(move |d| (r, d))) {
                    let v: f64 = (0..K).map(|a| x[a][r] * grads[a][d]).sum();
                    let expected = if r == d { 1.0 } else { 0.0 };
                    assert!((v - expected).abs() < 1e-13, "{element:?} r {r} d {d}: {v}");
                }
            }
            assert!(
                (measure - det).abs() < 1e-14,
                "{element:?}: measure {measure}"
            );
        }
        // Corners (0,0), (2,0), (2.5,1.5), (0.5,1): area by the shoelace formula.
        let quad = [[0.0, 0.0], [2.0, 0.0], [2.5, 1.5], [0.5, 1.0]];
        check::<2, 4>(Element::Q1, quad, crate::mesh::signed_area(&quad));
        let tri = [[0.0, 0.0], [1.0, 0.2], [0.3, 0.9]];
        check::<2, 3>(Element::P1, tri, crate::mesh::signed_area(&tri));
        // A unit cube sheared in x by 0.3 z and scaled by 2 in y: volume 2.
        let hex: [[f64; 3]; 8] = std::array::from_fn(|a| {
            let (i, j, k) = ((a & 1) as f64, ((a >> 1) & 1) as f64, ((a >> 2) & 1) as f64);
            [i + 0.3 * k, 2.0 * j, k]
        });
        check::<3, 8>(Element::Q1Hex, hex, 2.0);
    }

    #[test]
    fn three_by_three_inverse() {
        let m = [[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 4.0]];
        let (det, inv) = invert(&m);
        assert!((det - 25.0).abs() < 1e-14);
        for (r, k) in (0..3).flat_map(|r| (0..3).map(move |k| (r, k))) {
            let v: f64 = (0..3).map(|t| m[r][t] * inv[t][k]).sum();
            assert!((v - if r == k { 1.0 } else { 0.0 }).abs() < 1e-14);
        }
    }

    /// The memory gives the value computed for the shape asked about, also when shapes
    /// alternate in one slot (more shapes than slots), and computes once per shape.
    #[test]
    fn shape_memory_remembers_by_shape() {
        let mut memory = ShapeMemory::<2, 4, f64>::new();
        let square = |h: f64| [[0.0, 0.0], [h, 0.0], [h, h], [0.0, h]];
        let area = |x: &[[f64; 2]; 4]| x[1][0] * x[3][1];
        let mut computed = 0;
        for round in 0..3 {
            for k in 1..=200 {
                let h = k as f64 / 256.0;
                let value = *memory.get(&square(h), |x| {
                    computed += 1;
                    area(x)
                });
                assert_eq!(value, h * h, "round {round}, h = {h}");
            }
        }
        // 200 shapes in 64 slots: some are replaced and computed again, never wrong.
        assert!((200..600).contains(&computed), "{computed}");
        let before = computed;
        for _ in 0..10 {
            memory.get(&square(0.5), |x| {
                computed += 1;
                area(x)
            });
        }
        assert!(
            computed - before <= 1,
            "one shape asked 10 times: {} computations",
            computed - before
        );
        // Translates share a shape.
        let x = [[0.25, 0.5], [0.5, 0.5], [0.5, 0.75], [0.25, 0.75]];
        assert_eq!(relative_corners(&x), square(0.25));
    }
}
