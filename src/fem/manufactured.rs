//! The manufactured Poisson solution of docs/mathematics.md §1: u = Π_d sin(kπ x_d) with -Δu = f,
//! zero on the boundary of the unit square or cube for integer k.

use std::f64::consts::PI;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Manufactured {
    pub k: f64,
    pub dim: usize,
}

impl Manufactured {
    pub fn new(k: u32, dim: usize) -> Self {
        Manufactured { k: k as f64, dim }
    }

    /// u(x) = Π_d sin(kπ x_d)
    pub fn u(&self, x: &[f64]) -> f64 {
        x[..self.dim]
            .iter()
            .map(|&xd| (self.k * PI * xd).sin())
            .product()
    }

    /// f = -Δu = d (kπ)² u
    pub fn f(&self, x: &[f64]) -> f64 {
        let kpi = self.k * PI;
        self.dim as f64 * kpi * kpi * self.u(x)
    }

    /// ‖u‖_{L2(unit cell)} = 2^{-d/2} for integer k ≥ 1.
    pub fn l2_norm(&self) -> f64 {
        0.5f64.powf(self.dim as f64 / 2.0)
    }
}

/// A smooth time-dependent manufactured pressure field for pressure-Poisson campaigns: the
/// right-hand side of every time step of a projection method, with its exact solution known
/// so every column is verifiable. Two separable modes, orthogonal in L2, with smooth time
/// coefficients:
///
/// p(x, t) = cos(2πt) Π_d sin(π x_d) + ½ sin(2πt) Π_d sin(κ_d π x_d),  κ = (2, 3, 2),
///
/// −Δp = cos(2πt) d π² φ₁ + ½ sin(2πt) |κ|² π² φ₂, zero on the boundary for all t.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PressureSeries {
    pub t: f64,
    pub dim: usize,
}

/// Wave numbers per axis of the second mode of [`PressureSeries`].
const SECOND_MODE: [u32; 3] = [2, 3, 2];

impl PressureSeries {
    pub fn new(t: f64, dim: usize) -> Self {
        PressureSeries { t, dim }
    }

    /// (amplitude, Π_d sin(κ_d π x_d), |κ|²) of both modes at x.
    fn modes(&self, x: &[f64]) -> [(f64, f64, f64); 2] {
        let phase = 2.0 * PI * self.t;
        let first: f64 = x[..self.dim].iter().map(|&xd| (PI * xd).sin()).product();
        let second: f64 = x[..self.dim]
            .iter()
            .zip(SECOND_MODE)
            .map(|(&xd, k)| (k as f64 * PI * xd).sin())
            .product();
        let k2: f64 = SECOND_MODE[..self.dim]
            .iter()
            .map(|&k| (k * k) as f64)
            .sum();
        [
            (phase.cos(), first, self.dim as f64),
            (0.5 * phase.sin(), second, k2),
        ]
    }

    pub fn u(&self, x: &[f64]) -> f64 {
        self.modes(x).iter().map(|(a, phi, _)| a * phi).sum()
    }

    pub fn f(&self, x: &[f64]) -> f64 {
        self.modes(x)
            .iter()
            .map(|(a, phi, k2)| a * k2 * PI * PI * phi)
            .sum()
    }

    /// ‖p(·, t)‖_{L2}: the modes are orthogonal, each of norm 2^{-d/2}.
    pub fn l2_norm(&self) -> f64 {
        let phase = 2.0 * PI * self.t;
        let (a, b) = (phase.cos(), 0.5 * phase.sin());
        (a * a + b * b).sqrt() * 0.5f64.powf(self.dim as f64 / 2.0)
    }
}

/// A sine mode φ(x) = Π_d sin(κ_d π x_d) on the unit square or cube: zero on the boundary,
/// −Δφ = λφ with λ = π² Σ_d κ_d².
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mode {
    /// κ_d for the first `dim` axes; the others are 0.
    kappa: [u32; 3],
    dim: usize,
}

impl Mode {
    pub fn new(kappa: [u32; 3], dim: usize) -> Self {
        let mut k = [0; 3];
        k[..dim].copy_from_slice(&kappa[..dim]);
        Mode { kappa: k, dim }
    }

    pub fn value(&self, x: &[f64]) -> f64 {
        (0..self.dim).map(|d| self.axis_factor(d, x[d])).product()
    }

    /// Axes the mode varies along.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The factor sin(κ_d π x_d) of axis `d`; 1 on axes beyond the mode's dimension.
    pub fn axis_factor(&self, d: usize, xd: f64) -> f64 {
        if d < self.dim {
            (self.kappa[d] as f64 * PI * xd).sin()
        } else {
            1.0
        }
    }

    /// ∂φ/∂x_d = κ_d π cos(κ_d π x_d) Π_{e≠d} sin(κ_e π x_e), for the first `dim` axes.
    pub fn gradient(&self, x: &[f64]) -> [f64; 3] {
        let mut g = [0.0; 3];
        for (d, gd) in g.iter_mut().enumerate().take(self.dim) {
            *gd = (0..self.dim)
                .map(|e| {
                    let kpi = self.kappa[e] as f64 * PI;
                    if e == d {
                        kpi * (kpi * x[e]).cos()
                    } else {
                        (kpi * x[e]).sin()
                    }
                })
                .product();
        }
        g
    }

    /// λ = π² Σ_d κ_d²
    pub fn eigenvalue(&self) -> f64 {
        PI * PI * self.kappa.iter().map(|&k| (k * k) as f64).sum::<f64>()
    }
}

/// The exact solution behind one right-hand side, when it has one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Exact {
    Wave(Manufactured),
    Pressure(PressureSeries),
}

impl Exact {
    pub fn u(&self, x: &[f64]) -> f64 {
        match self {
            Exact::Wave(m) => m.u(x),
            Exact::Pressure(p) => p.u(x),
        }
    }

    pub fn f(&self, x: &[f64]) -> f64 {
        match self {
            Exact::Wave(m) => m.f(x),
            Exact::Pressure(p) => p.f(x),
        }
    }

    pub fn l2_norm(&self) -> f64 {
        match self {
            Exact::Wave(m) => m.l2_norm(),
            Exact::Pressure(p) => p.l2_norm(),
        }
    }

    /// ∇u at x (the first `dim` entries), from the modes: the Neumann data ∂u/∂n = ∇u·n.
    pub fn gradient(&self, x: &[f64]) -> [f64; 3] {
        let mut g = [0.0; 3];
        for (a, mode) in self.modes() {
            for (gd, md) in g.iter_mut().zip(mode.gradient(x)) {
                *gd += a * md;
            }
        }
        g
    }

    /// u as a sum of sine modes: u = Σ a_m φ_m, so f = Σ a_m λ_m φ_m (what makes loads and
    /// L2 errors block operations over columns: see [`super::ModeBasis`]).
    pub fn modes(&self) -> Vec<(f64, Mode)> {
        match self {
            Exact::Wave(m) => vec![(1.0, Mode::new([m.k as u32; 3], m.dim))],
            Exact::Pressure(p) => {
                let phase = 2.0 * PI * p.t;
                vec![
                    (phase.cos(), Mode::new([1; 3], p.dim)),
                    (0.5 * phase.sin(), Mode::new(SECOND_MODE, p.dim)),
                ]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// −Δp = f checked by central differences, and ‖p‖ by a tensor Gauss rule.
    #[test]
    fn pressure_series_is_consistent() {
        for dim in [2, 3] {
            let p = PressureSeries::new(0.3, dim);
            let x = [0.31, 0.57, 0.23];
            let h = 1e-4;
            let mut laplacian = 0.0;
            for d in 0..dim {
                let (mut plus, mut minus) = (x, x);
                plus[d] += h;
                minus[d] -= h;
                laplacian += (p.u(&plus) - 2.0 * p.u(&x) + p.u(&minus)) / (h * h);
            }
            assert!((p.f(&x) + laplacian).abs() < 1e-5 * p.f(&x).abs().max(1.0));
            let (points, weights) = crate::fem::quadrature::gauss_legendre_unit(24);
            let mut sum = 0.0;
            let m = points.len();
            for i in 0..m.pow(dim as u32) {
                let (mut y, mut w) = ([0.0; 3], 1.0);
                for (d, yd) in y.iter_mut().enumerate().take(dim) {
                    let j = (i / m.pow(d as u32)) % m;
                    *yd = points[j];
                    w *= weights[j];
                }
                sum += w * p.u(&y).powi(2);
            }
            assert!(
                (sum.sqrt() - p.l2_norm()).abs() < 1e-10,
                "dim {dim}: {} vs {}",
                sum.sqrt(),
                p.l2_norm()
            );
        }
    }

    /// ∇u (the Neumann data of the manufactured solutions) against central differences.
    #[test]
    fn gradients_match_differences() {
        let x = [0.31, 0.57, 0.23];
        let h = 1e-6;
        for dim in [2, 3] {
            for exact in [
                Exact::Wave(Manufactured::new(3, dim)),
                Exact::Pressure(PressureSeries::new(0.3, dim)),
            ] {
                let g = exact.gradient(&x);
                for d in 0..dim {
                    let (mut plus, mut minus) = (x, x);
                    plus[d] += h;
                    minus[d] -= h;
                    let difference = (exact.u(&plus) - exact.u(&minus)) / (2.0 * h);
                    assert!(
                        (g[d] - difference).abs() < 1e-7 * difference.abs().max(1.0),
                        "{exact:?} ∂/∂x_{d}: {} vs {difference}",
                        g[d]
                    );
                }
            }
        }
    }
}
