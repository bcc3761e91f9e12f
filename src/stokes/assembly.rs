//! Q2-Q1 Taylor-Hood assembly on the uniform unit-square mesh (docs/mathematics.md §1, Stokes), the
//! manufactured solution, and the L2 errors of a discrete solution.
//!
//! Weak form (ν = 1): (∇u, ∇v) − (p, ∇·v) = (f, v), −(q, ∇·u) = 0, so the block matrix is
//! [[L, Bᵀ], [B, 0]] with B = −(q, ∇·u): symmetric and indefinite.

use rayon::prelude::*;

use super::lattice::{
    divergence_slot, gradient_slot, gradient_width, laplacian_width, lattice_slot, mass_slot,
    split_mut, Grid, HostLatticeRows, HostPressureRows, StokesHostMatrices,
};
use crate::fem::gauss_legendre_unit;

/// The exact solution of docs/mathematics.md §1: u = (a(x) b(y), −a(y) b(x)) with a(s) =
/// s(1−s)(2s−1), b(s) = 6s² − 6s + 1 = −a'(s); p = x² − 3y² + (8/3)xy (mean zero). ∇·u = 0.
pub mod exact {
    fn a(s: f64) -> f64 {
        s * (1.0 - s) * (2.0 * s - 1.0)
    }
    fn b(s: f64) -> f64 {
        6.0 * s * s - 6.0 * s + 1.0
    }
    /// a''(s).
    fn a2(s: f64) -> f64 {
        6.0 - 12.0 * s
    }

    pub fn velocity(x: f64, y: f64) -> [f64; 2] {
        [a(x) * b(y), -a(y) * b(x)]
    }

    pub fn pressure(x: f64, y: f64) -> f64 {
        x * x - 3.0 * y * y + 8.0 / 3.0 * x * y
    }

    /// f = −∇²u + ∇p (b'' = 12).
    pub fn force(x: f64, y: f64) -> [f64; 2] {
        [
            -(a2(x) * b(y) + 12.0 * a(x)) + 2.0 * x + 8.0 / 3.0 * y,
            (a2(y) * b(x) + 12.0 * a(y)) - 6.0 * y + 8.0 / 3.0 * x,
        ]
    }
}

/// 1D quadratic Lagrange basis on [0, 1] with nodes 0, ½, 1, and its derivative.
fn q2_1d(t: f64) -> ([f64; 3], [f64; 3]) {
    (
        [
            2.0 * t * t - 3.0 * t + 1.0,
            4.0 * t * (1.0 - t),
            2.0 * t * t - t,
        ],
        [4.0 * t - 3.0, 4.0 - 8.0 * t, 4.0 * t - 1.0],
    )
}

/// 1D linear basis on [0, 1].
fn q1_1d(t: f64) -> [f64; 2] {
    [1.0 - t, t]
}

/// Q2 values and reference gradients at (s, t), local node a + 3b.
pub fn q2_shape(s: f64, t: f64) -> ([f64; 9], [[f64; 2]; 9]) {
    let ((vx, dx), (vy, dy)) = (q2_1d(s), q2_1d(t));
    let mut v = [0.0; 9];
    let mut d = [[0.0; 2]; 9];
    for b in 0..3 {
        for a in 0..3 {
            v[a + 3 * b] = vx[a] * vy[b];
            d[a + 3 * b] = [dx[a] * vy[b], vx[a] * dy[b]];
        }
    }
    (v, d)
}

/// Q1 values at (s, t), local node c + 2d.
pub fn q1_shape(s: f64, t: f64) -> [f64; 4] {
    let (vx, vy) = (q1_1d(s), q1_1d(t));
    [vx[0] * vy[0], vx[1] * vy[0], vx[0] * vy[1], vx[1] * vy[1]]
}

/// Element matrices on a square of side h: stiffness K (9×9, independent of h in 2D),
/// divergence D_c[q][a] = −∫ ψ_q ∂φ_a/∂x_c (4×9, ∝ h), pressure mass (4×4, ∝ h²).
pub struct ElementMatrices {
    pub stiffness: [[f64; 9]; 9],
    pub divergence: [[[f64; 9]; 4]; 2],
    pub mass: [[f64; 4]; 4],
}

impl ElementMatrices {
    /// 3×3 Gauss points: exact for every product here (degree ≤ 4 per variable).
    pub fn new(h: f64) -> Self {
        let (x, w) = gauss_legendre_unit(3);
        let mut e = ElementMatrices {
            stiffness: [[0.0; 9]; 9],
            divergence: [[[0.0; 9]; 4]; 2],
            mass: [[0.0; 4]; 4],
        };
        for (qj, &t) in x.iter().enumerate() {
            for (qi, &s) in x.iter().enumerate() {
                let weight = w[qi] * w[qj];
                let (_, grad) = q2_shape(s, t);
                let psi = q1_shape(s, t);
                for a in 0..9 {
                    for b in 0..9 {
                        e.stiffness[a][b] +=
                            weight * (grad[a][0] * grad[b][0] + grad[a][1] * grad[b][1]);
                    }
                    for (q, &psi_q) in psi.iter().enumerate() {
                        for (c, &dphi) in grad[a].iter().enumerate() {
                            e.divergence[c][q][a] -= weight * h * psi_q * dphi;
                        }
                    }
                }
                for q in 0..4 {
                    for r in 0..4 {
                        e.mass[q][r] += weight * h * h * psi[q] * psi[r];
                    }
                }
            }
        }
        e
    }
}

/// Assembles the operator of an n×n mesh with every coefficient, Dirichlet columns included.
fn assemble_full(n: usize) -> StokesHostMatrices {
    let grid = Grid { n };
    let e = ElementMatrices::new(1.0 / n as f64);
    let mut laplacian = HostLatticeRows::zeros(grid, laplacian_width);
    let mut gradient = [
        HostLatticeRows::zeros(grid, gradient_width),
        HostLatticeRows::zeros(grid, gradient_width),
    ];
    let mut divergence = [
        HostPressureRows::zeros(grid, 25),
        HostPressureRows::zeros(grid, 25),
    ];
    let mut mass = HostPressureRows::zeros(grid, 9);
    for ey in 0..n {
        for ex in 0..n {
            let node = |a: usize| (2 * ex + a % 3, 2 * ey + a / 3);
            let pnode = |q: usize| (ex + q % 2, ey + q / 2);
            for a in 0..9 {
                let (i, j) = node(a);
                for b in 0..9 {
                    let (ci, cj) = node(b);
                    let slot =
                        lattice_slot(i, j, ci as isize - i as isize, cj as isize - j as isize)
                            .expect("element columns lie in the row's window");
                    laplacian.row_mut(i, j)[slot] += e.stiffness[a][b];
                }
                for q in 0..4 {
                    let (pi, pj) = pnode(q);
                    let gslot = gradient_slot(i, j, pi, pj).expect("in the gradient window");
                    let dslot = divergence_slot(pi, pj, i, j).expect("in the divergence window");
                    for c in 0..2 {
                        gradient[c].row_mut(i, j)[gslot] += e.divergence[c][q][a];
                        divergence[c].row_mut(pi, pj)[dslot] += e.divergence[c][q][a];
                    }
                }
            }
            for q in 0..4 {
                let (pi, pj) = pnode(q);
                for r in 0..4 {
                    let (ci, cj) = pnode(r);
                    let slot = mass_slot(pi, pj, ci, cj).expect("in the mass window");
                    mass.row_mut(pi, pj)[slot] += e.mass[q][r];
                }
            }
        }
    }
    // B and Bᵀ in units of h, M in units of h²: O(1) stored values at every mesh size.
    let n = n as f64;
    for c in 0..2 {
        gradient[c].rescale(n);
        divergence[c].rescale(n);
    }
    mass.rescale(n * n);
    StokesHostMatrices {
        grid,
        laplacian,
        gradient,
        divergence,
        mass,
    }
}

/// Zeroes the coefficients of Dirichlet (boundary lattice) columns.
fn eliminate_boundary(op: &mut StokesHostMatrices) {
    let g = op.grid;
    let m = g.m();
    for j in 1..m - 1 {
        for i in 1..m - 1 {
            let row = op.laplacian.row_mut(i, j);
            for dj in -2..=2isize {
                for di in -2..=2isize {
                    let (ci, cj) = (i as isize + di, j as isize + dj);
                    let on_boundary =
                        ci == 0 || cj == 0 || ci == m as isize - 1 || cj == m as isize - 1;
                    if on_boundary {
                        if let Some(slot) = lattice_slot(i, j, di, dj) {
                            row[slot] = 0.0;
                        }
                    }
                }
            }
        }
    }
    for c in 0..2 {
        for pj in 0..g.np() {
            for pi in 0..g.np() {
                let row = op.divergence[c].row_mut(pi, pj);
                for (slot, v) in row.iter_mut().enumerate() {
                    let (i, j) = (
                        2 * pi as isize - 2 + (slot % 5) as isize,
                        2 * pj as isize - 2 + (slot / 5) as isize,
                    );
                    let inside = i > 0 && j > 0 && i < m as isize - 1 && j < m as isize - 1;
                    if !inside {
                        *v = 0.0;
                    }
                }
            }
        }
    }
}

/// The homogeneous operator of an n×n mesh (multigrid levels, corrections).
pub fn assemble(n: usize) -> StokesHostMatrices {
    let mut op = assemble_full(n);
    eliminate_boundary(&mut op);
    op
}

/// The discrete manufactured problem: operator, right-hand side (Dirichlet data lifted),
/// and the boundary values to add back to the solution's velocity.
pub struct StokesProblem {
    pub operator: StokesHostMatrices,
    /// Flat [f_x | f_y | g], zero on boundary velocity rows, pressure part mean zero.
    pub rhs: Vec<f64>,
    /// Flat vector with the Dirichlet velocity on boundary lattice nodes, zero elsewhere.
    pub boundary: Vec<f64>,
}

impl StokesProblem {
    pub fn manufactured(n: usize) -> Self {
        let full = assemble_full(n);
        let grid = full.grid;
        let (m, h2) = (grid.m(), 0.5 / n as f64);
        let mut boundary = vec![0.0; grid.flow_len()];
        {
            let (bx, by, _) = split_mut(&mut boundary, grid);
            for j in 0..m {
                for i in 0..m {
                    if !grid.is_interior(i, j) {
                        let v = exact::velocity(i as f64 * h2, j as f64 * h2);
                        bx[j * m + i] = v[0];
                        by[j * m + i] = v[1];
                    }
                }
            }
        }
        let lifted = lifted(grid, &boundary);
        let mut rhs = loads(grid);
        rhs.iter_mut().zip(&lifted).for_each(|(r, l)| *r -= l);
        // Boundary velocity rows are not unknowns.
        {
            let (rx, ry, _) = split_mut(&mut rhs, grid);
            for j in 0..m {
                for i in 0..m {
                    if !grid.is_interior(i, j) {
                        rx[j * m + i] = 0.0;
                        ry[j * m + i] = 0.0;
                    }
                }
            }
        }
        let mut operator = full;
        eliminate_boundary(&mut operator);
        StokesProblem {
            operator,
            rhs,
            boundary,
        }
    }
}

/// A g for the Dirichlet values g on boundary lattice nodes (flat [gx | gy | 0]), element by
/// element: the velocity rows get L g, the pressure rows B g.
fn lifted(grid: Grid, boundary: &[f64]) -> Vec<f64> {
    let n = grid.n;
    let (m, np, len) = (grid.m(), grid.np(), grid.lattice_len());
    let e = ElementMatrices::new(1.0 / n as f64);
    let mut out = vec![0.0; grid.flow_len()];
    let (ox, oy, op) = split_mut(&mut out, grid);
    for ey in 0..n {
        for ex in 0..n {
            let node = |a: usize| (2 * ey + a / 3) * m + 2 * ex + a % 3;
            let pnode = |q: usize| (ey + q / 2) * np + ex + q % 2;
            for b in 0..9 {
                let (gx, gy) = (boundary[node(b)], boundary[len + node(b)]);
                if gx == 0.0 && gy == 0.0 {
                    continue;
                }
                for a in 0..9 {
                    ox[node(a)] += e.stiffness[a][b] * gx;
                    oy[node(a)] += e.stiffness[a][b] * gy;
                }
                for q in 0..4 {
                    op[pnode(q)] += e.divergence[0][q][b] * gx + e.divergence[1][q][b] * gy;
                }
            }
        }
    }
    out
}

/// (f, φ) for every lattice node and component (3×3 Gauss per element: f is cubic, φ
/// quadratic, so the rule is exact); the pressure part is zero.
fn loads(grid: Grid) -> Vec<f64> {
    let n = grid.n;
    let (m, h) = (grid.m(), 1.0 / n as f64);
    let (x, w) = gauss_legendre_unit(3);
    let mut f = vec![0.0; grid.flow_len()];
    let (fx, fy, _) = split_mut(&mut f, grid);
    for ey in 0..n {
        for ex in 0..n {
            for (qj, &t) in x.iter().enumerate() {
                for (qi, &s) in x.iter().enumerate() {
                    let weight = w[qi] * w[qj] * h * h;
                    let force = exact::force((ex as f64 + s) * h, (ey as f64 + t) * h);
                    let (phi, _) = q2_shape(s, t);
                    for (a, &v) in phi.iter().enumerate() {
                        let k = (2 * ey + a / 3) * m + 2 * ex + a % 3;
                        fx[k] += weight * force[0] * v;
                        fy[k] += weight * force[1] * v;
                    }
                }
            }
        }
    }
    f
}

/// The exact solution at the nodes: the velocity at every lattice node, (x, y)
/// interleaved, and the pressure (of integral mean zero) at every Q1 node.
pub fn exact_at_nodes(grid: Grid) -> (Vec<f64>, Vec<f64>) {
    let (m, np, h) = (grid.m(), grid.np(), 1.0 / grid.n as f64);
    let velocity = (0..m * m)
        .flat_map(|k| exact::velocity((k % m) as f64 * h / 2.0, (k / m) as f64 * h / 2.0))
        .collect();
    let pressure = (0..np * np)
        .map(|k| exact::pressure((k % np) as f64 * h, (k / np) as f64 * h))
        .collect();
    (velocity, pressure)
}

/// L2 errors of a discrete solution against the exact one: (velocity, pressure), with
/// the discrete pressure shifted to integral mean zero (4×4 Gauss per element).
/// `flow` is the full solution: velocity including its boundary values.
pub fn l2_errors(grid: Grid, flow: &[f64]) -> (f64, f64) {
    let n = grid.n;
    let (m, np, h) = (grid.m(), grid.np(), 1.0 / n as f64);
    let len = grid.lattice_len();
    let (x, w) = gauss_legendre_unit(4);
    let p = &flow[2 * len..];
    // ∫ p_h over the unit square (area 1): the mean to remove.
    let mean: f64 = (0..n)
        .into_par_iter()
        .map(|ey| {
            let mut s = 0.0;
            for ex in 0..n {
                for (qj, &t) in x.iter().enumerate() {
                    for (qi, &sx) in x.iter().enumerate() {
                        let psi = q1_shape(sx, t);
                        let ph: f64 = (0..4)
                            .map(|q| psi[q] * p[(ey + q / 2) * np + ex + q % 2])
                            .sum();
                        s += w[qi] * w[qj] * h * h * ph;
                    }
                }
            }
            s
        })
        .sum();
    let (ev, ep): (f64, f64) = (0..n)
        .into_par_iter()
        .map(|ey| {
            let (mut ev, mut ep) = (0.0, 0.0);
            for ex in 0..n {
                for (qj, &t) in x.iter().enumerate() {
                    for (qi, &s) in x.iter().enumerate() {
                        let weight = w[qi] * w[qj] * h * h;
                        let (xp, yp) = ((ex as f64 + s) * h, (ey as f64 + t) * h);
                        let (phi, _) = q2_shape(s, t);
                        let mut uh = [0.0; 2];
                        for (a, &v) in phi.iter().enumerate() {
                            let k = (2 * ey + a / 3) * m + 2 * ex + a % 3;
                            uh[0] += v * flow[k];
                            uh[1] += v * flow[len + k];
                        }
                        let u = exact::velocity(xp, yp);
                        ev += weight * ((u[0] - uh[0]).powi(2) + (u[1] - uh[1]).powi(2));
                        let psi = q1_shape(s, t);
                        let ph: f64 = (0..4)
                            .map(|q| psi[q] * p[(ey + q / 2) * np + ex + q % 2])
                            .sum();
                        ep += weight * (exact::pressure(xp, yp) - (ph - mean)).powi(2);
                    }
                }
            }
            (ev, ep)
        })
        .reduce(|| (0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    (ev.sqrt(), ep.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manufactured_solution_is_divergence_free_and_consistent() {
        // Finite differences of the closed forms.
        let d = 1e-5;
        for &(x, y) in &[(0.3, 0.7), (0.11, 0.52), (0.9, 0.25)] {
            let ux = |x: f64, y: f64| exact::velocity(x, y)[0];
            let uy = |x: f64, y: f64| exact::velocity(x, y)[1];
            let div = (ux(x + d, y) - ux(x - d, y) + uy(x, y + d) - uy(x, y - d)) / (2.0 * d);
            assert!(div.abs() < 1e-8, "div u = {div}");
            let lap = |u: &dyn Fn(f64, f64) -> f64| {
                (u(x + d, y) + u(x - d, y) + u(x, y + d) + u(x, y - d) - 4.0 * u(x, y)) / (d * d)
            };
            let dpx = (exact::pressure(x + d, y) - exact::pressure(x - d, y)) / (2.0 * d);
            let dpy = (exact::pressure(x, y + d) - exact::pressure(x, y - d)) / (2.0 * d);
            let f = exact::force(x, y);
            assert!((f[0] - (-lap(&ux) + dpx)).abs() < 1e-4);
            assert!((f[1] - (-lap(&uy) + dpy)).abs() < 1e-4);
        }
    }

    #[test]
    fn element_matrices_have_the_exact_invariants() {
        let h = 0.25;
        let e = ElementMatrices::new(h);
        // Constants are in the kernel of the stiffness matrix.
        for a in 0..9 {
            assert!(e.stiffness[a].iter().sum::<f64>().abs() < 1e-13);
        }
        // Mass entries sum to the element area.
        let total: f64 = e.mass.iter().flatten().sum();
        assert!((total - h * h).abs() < 1e-15);
        // −Σ_q (q=1 everywhere) ∫ ∂φ_a/∂x over the element, summed with u = x (nodal values),
        // gives −∫ 1 = −h².
        let xs = [0.0, 0.5, 1.0];
        let div_of_x: f64 = (0..4)
            .map(|q| {
                (0..9)
                    .map(|a| e.divergence[0][q][a] * xs[a % 3] * h)
                    .sum::<f64>()
            })
            .sum();
        assert!((div_of_x + h * h).abs() < 1e-14);
    }
}
