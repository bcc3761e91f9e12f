//! The manufactured Poisson solution of SPEC §1: u = Π_d sin(kπ x_d) with -Δu = f,
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
