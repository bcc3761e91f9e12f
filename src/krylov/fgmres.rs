//! Flexible GMRES (Saad 1993) with right preconditioning and restarts, in f64.
//!
//! The preconditioner may change between iterations (a multigrid cycle in lower
//! precision, inexact inner solves), so the preconditioned vectors z_j are kept and the
//! update is x += Z y. Convergence is measured on the relative residual ‖b − A x‖₂/‖b‖₂,
//! recomputed from scratch at every restart and at the end.

use rayon::prelude::*;

use crate::backend::cpu::{axpy, filled, nrm2};

/// The Krylov vectors of FGMRES(restart): the basis V (restart + 1) and the preconditioned
/// vectors Z (restart), allocated once (in set-up) and reused by every solve.
pub struct FgmresWorkspace {
    v: Vec<Vec<f64>>,
    z: Vec<Vec<f64>>,
    w: Vec<f64>,
}

impl FgmresWorkspace {
    pub fn new(len: usize, restart: usize) -> Self {
        FgmresWorkspace {
            v: (0..=restart).map(|_| filled(len, 0.0)).collect(),
            z: (0..restart).map(|_| filled(len, 0.0)).collect(),
            w: filled(len, 0.0),
        }
    }

    pub fn bytes(&self) -> usize {
        (self.v.len() + self.z.len() + 1) * self.w.len() * 8
    }
}

/// Rows per rayon task in the fused Gram-Schmidt passes.
const CHUNK: usize = 1 << 14;

/// Classical Gram-Schmidt step, fused: h += Vᵀ w, then w −= V (Vᵀ w). One pass over the
/// basis for the products (with ‖w‖² alongside) and one for the update (with the new
/// ‖w‖² alongside), instead of one pass per basis vector and two per norm. Returns ‖w‖
/// before and after.
fn orthogonalize(basis: &[Vec<f64>], w: &mut [f64], h: &mut [f64]) -> (f64, f64) {
    let k = basis.len();
    // Per chunk: the k products, then w·w.
    let partials: Vec<Vec<f64>> = w
        .par_chunks(CHUNK)
        .enumerate()
        .map(|(c, wc)| {
            let start = c * CHUNK;
            let mut out: Vec<f64> = basis
                .iter()
                .map(|v| {
                    v[start..start + wc.len()]
                        .iter()
                        .zip(wc)
                        .map(|(a, b)| a * b)
                        .sum()
                })
                .collect();
            out.push(wc.iter().map(|a| a * a).sum());
            out
        })
        .collect();
    let mut sums = vec![0.0; k + 1];
    for p in &partials {
        sums.iter_mut().zip(p).for_each(|(c, v)| *c += v);
    }
    let coefficients = &sums[..k];
    let squares: Vec<f64> = w
        .par_chunks_mut(CHUNK)
        .enumerate()
        .map(|(c, wc)| {
            let (start, rows) = (c * CHUNK, wc.len());
            for (v, &hc) in basis.iter().zip(coefficients) {
                wc.iter_mut()
                    .zip(&v[start..start + rows])
                    .for_each(|(a, b)| *a -= hc * b);
            }
            wc.iter().map(|a| a * a).sum::<f64>()
        })
        .collect();
    h.iter_mut().zip(coefficients).for_each(|(h, c)| *h += c);
    (sums[k].sqrt(), squares.iter().sum::<f64>().sqrt())
}

/// Stopping and restart settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FgmresParams {
    /// Krylov vectors per cycle.
    pub restart: usize,
    /// Relative residual ‖b − A x‖₂/‖b‖₂ to reach.
    pub tolerance: f64,
    pub max_iterations: usize,
}

/// What a solve did.
#[derive(Clone, Debug, PartialEq)]
pub struct FgmresInfo {
    pub iterations: usize,
    /// The true relative residual ‖b − A x‖₂/‖b‖₂ of the returned x.
    pub relative_residual: f64,
    /// The relative residual estimate after each iteration (from the Hessenberg system).
    pub history: Vec<f64>,
    pub converged: bool,
}

/// Solves A x = b from the initial guess in x, with the vectors of `work` (grown if it was
/// made for a shorter restart or another length). `apply(v, out)`: out = A v.
/// `precondition(r, z)`: z ≈ A⁻¹ r. `project(v)` maps a vector into the space the solution
/// lives in (for Stokes: pressure mean zero); it is applied to every z and to x.
pub fn fgmres(
    params: FgmresParams,
    b: &[f64],
    x: &mut [f64],
    work: &mut FgmresWorkspace,
    mut apply: impl FnMut(&[f64], &mut [f64]),
    mut precondition: impl FnMut(&[f64], &mut [f64]),
    project: impl Fn(&mut [f64]),
) -> FgmresInfo {
    let len = b.len();
    let restart = params.restart.max(1);
    let b_norm = nrm2(b);
    let mut info = FgmresInfo {
        iterations: 0,
        relative_residual: 0.0,
        history: Vec::new(),
        converged: false,
    };
    if b_norm == 0.0 {
        x.iter_mut().for_each(|v| *v = 0.0);
        info.converged = true;
        return info;
    }
    if work.w.len() != len || work.z.len() < restart {
        *work = FgmresWorkspace::new(len, restart);
    }
    let FgmresWorkspace { v, z, w } = work;
    loop {
        // r = b − A x, the first basis vector.
        apply(x, w);
        v[0].par_iter_mut()
            .zip(b.par_iter().zip(w.par_iter()))
            .for_each(|(r, (bi, ai))| *r = bi - ai);
        let beta = nrm2(&v[0]);
        info.relative_residual = beta / b_norm;
        if info.relative_residual <= params.tolerance
            || info.iterations >= params.max_iterations
            || !beta.is_finite()
        {
            info.converged = info.relative_residual <= params.tolerance;
            return info;
        }
        v[0].par_iter_mut().for_each(|ri| *ri /= beta);
        // Hessenberg matrix column by column, Givens rotations, rotated right-hand side.
        let mut hessenberg: Vec<Vec<f64>> = Vec::with_capacity(restart);
        let mut rotations: Vec<(f64, f64)> = Vec::with_capacity(restart);
        let mut g = vec![beta];
        for j in 0..restart {
            precondition(&v[j], &mut z[j]);
            project(&mut z[j]);
            apply(&z[j], w);
            // Classical Gram-Schmidt, repeated when the first pass cancelled most of w
            // (the DGKS criterion ‖w'‖ < ‖w‖/√2; "twice is enough").
            let mut h = vec![0.0; j + 2];
            let (before, mut norm) = orthogonalize(&v[..=j], w, &mut h[..=j]);
            if norm < before * std::f64::consts::FRAC_1_SQRT_2 {
                norm = orthogonalize(&v[..=j], w, &mut h[..=j]).1;
            }
            h[j + 1] = norm;
            for (i, &(c, s)) in rotations.iter().enumerate() {
                let (a, b) = (h[i], h[i + 1]);
                h[i] = c * a + s * b;
                h[i + 1] = -s * a + c * b;
            }
            let (a, b) = (h[j], h[j + 1]);
            let radius = a.hypot(b);
            let (c, s) = if radius == 0.0 {
                (1.0, 0.0)
            } else {
                (a / radius, b / radius)
            };
            h[j] = radius;
            h[j + 1] = 0.0;
            rotations.push((c, s));
            g.push(-s * g[j]);
            g[j] *= c;
            let breakdown = norm == 0.0;
            if !breakdown {
                v[j + 1]
                    .par_iter_mut()
                    .zip(w.par_iter())
                    .for_each(|(vi, wi)| *vi = wi / norm);
            }
            hessenberg.push(h);
            info.iterations += 1;
            let estimate = g[j + 1].abs() / b_norm;
            info.history.push(estimate);
            // A non-finite estimate (overflow in the preconditioner) ends the cycle; the
            // true residual computed next reports it.
            if estimate <= params.tolerance
                || info.iterations >= params.max_iterations
                || breakdown
                || !estimate.is_finite()
            {
                break;
            }
        }
        // Back substitution R y = g, then x += Z y.
        let k = hessenberg.len();
        let mut y = vec![0.0; k];
        for i in (0..k).rev() {
            let s: f64 = (i + 1..k).map(|l| hessenberg[l][i] * y[l]).sum();
            y[i] = (g[i] - s) / hessenberg[i][i];
        }
        for (zi, yi) in z.iter().zip(&y) {
            axpy(*yi, zi, x);
        }
        project(x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A nonsymmetric tridiagonal system, checked against its known solution, with and
    /// without a (Jacobi) preconditioner and with restarts.
    #[test]
    fn solves_a_nonsymmetric_system() {
        let n = 200;
        let apply = |x: &[f64], y: &mut [f64]| {
            for i in 0..n {
                let left = if i > 0 { x[i - 1] } else { 0.0 };
                let right = if i + 1 < n { x[i + 1] } else { 0.0 };
                y[i] = (3.0 + i as f64 / n as f64) * x[i] - 1.3 * left - 0.7 * right;
            }
        };
        let exact: Vec<f64> = (0..n).map(|i| (i as f64 * 0.1).sin()).collect();
        let mut b = vec![0.0; n];
        apply(&exact, &mut b);
        let mut work = FgmresWorkspace::new(n, 5);
        for restart in [5, 30] {
            let mut x = vec![0.0; n];
            let info = fgmres(
                FgmresParams {
                    restart,
                    tolerance: 1e-10,
                    max_iterations: 500,
                },
                &b,
                &mut x,
                &mut work,
                apply,
                |r, z| {
                    z.iter_mut()
                        .zip(r)
                        .enumerate()
                        .for_each(|(i, (zi, ri))| *zi = ri / (3.0 + i as f64 / n as f64))
                },
                |_| {},
            );
            assert!(info.converged, "restart {restart}: {info:?}");
            assert!(info.relative_residual <= 1e-10);
            let err = exact
                .iter()
                .zip(&x)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-8, "restart {restart}: error {err}");
        }
    }
}
