//! Extreme eigenvalues of a symmetric operator by Lanczos (host vectors, f64): with full
//! reorthogonalization, the condition numbers of the PSC set-up; without, in a few steps
//! and three vectors of memory, the top of each multigrid level's spectrum a Chebyshev
//! smoother needs (the Ritz values stay inside the spectrum either way).

use faer::{Mat, Side};

use crate::error::{Error, Result};
use crate::numeric::{dot, nrm2};

#[derive(Clone, Copy, Debug)]
pub struct LanczosParams {
    pub max_iterations: usize,
    /// Stop when both extreme Ritz values change by less than this (relative) in an
    /// iteration.
    pub tolerance: f64,
    pub seed: u64,
    /// Orthogonalize each new vector against all before it (keeps them all): the interior
    /// Ritz values stay free of spurious copies. Without, three vectors are kept.
    pub full_reorthogonalization: bool,
}

impl Default for LanczosParams {
    fn default() -> Self {
        LanczosParams {
            max_iterations: 400,
            tolerance: 1e-10,
            seed: 42,
            full_reorthogonalization: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LanczosInfo {
    pub smallest: f64,
    pub largest: f64,
    pub iterations: usize,
}

/// Smallest and largest eigenvalues of the symmetric operator `apply(x, y): y = M x` of
/// size `n`, from a seeded pseudo-random start vector.
pub fn extreme_eigenvalues(
    n: usize,
    params: LanczosParams,
    mut apply: impl FnMut(&[f64], &mut [f64]),
) -> Result<LanczosInfo> {
    if n == 0 {
        return Err(Error::InvalidInput("Lanczos on an empty operator".into()));
    }
    let mut state = params
        .seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut q: Vec<f64> = (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect();
    let norm = nrm2(&q);
    q.iter_mut().for_each(|v| *v /= norm);

    let mut basis: Vec<Vec<f64>> = Vec::new();
    // q_{k−1}, the vector before q.
    let mut last: Vec<f64> = Vec::new();
    let (mut alpha, mut beta): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    let mut w = vec![0.0; n];
    let mut previous: Option<(f64, f64)> = None;
    let steps = params.max_iterations.min(n);
    for k in 0..steps {
        apply(&q, &mut w);
        let a = dot(&q, &w);
        alpha.push(a);
        axpy(-a, &q, &mut w);
        if k > 0 {
            axpy(-beta[k - 1], &last, &mut w);
        }
        if params.full_reorthogonalization {
            basis.push(q.clone());
            // Twice ("twice is enough").
            for _ in 0..2 {
                for v in &basis {
                    let c = dot(v, &w);
                    axpy(-c, v, &mut w);
                }
            }
        }
        let (smallest, largest) = tridiagonal_extremes(&alpha, &beta)?;
        if let Some((s0, l0)) = previous {
            let change = ((smallest - s0) / smallest)
                .abs()
                .max(((largest - l0) / largest).abs());
            if change < params.tolerance {
                return Ok(LanczosInfo {
                    smallest,
                    largest,
                    iterations: k + 1,
                });
            }
        }
        previous = Some((smallest, largest));
        let b = nrm2(&w);
        if b <= 1e-14 * a.abs().max(1e-300) || k + 1 == steps {
            // Invariant subspace found, or out of iterations: the Ritz values are final.
            return Ok(LanczosInfo {
                smallest,
                largest,
                iterations: k + 1,
            });
        }
        beta.push(b);
        last.clone_from(&q);
        q.iter_mut().zip(&w).for_each(|(qi, &wi)| *qi = wi / b);
    }
    unreachable!("the loop returns on its last step")
}

fn tridiagonal_extremes(alpha: &[f64], beta: &[f64]) -> Result<(f64, f64)> {
    let m = alpha.len();
    let t = Mat::<f64>::from_fn(m, m, |i, j| {
        if i == j {
            alpha[i]
        } else if i == j + 1 {
            beta[j]
        } else if j == i + 1 {
            beta[i]
        } else {
            0.0
        }
    });
    let ev = t
        .self_adjoint_eigenvalues(Side::Lower)
        .map_err(|e| Error::Solver(format!("tridiagonal eigenvalues: {e:?}")))?;
    Ok((ev[0], ev[m - 1]))
}

/// y += α x (host vectors of the set-up).
fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) {
    y.iter_mut().zip(x).for_each(|(y, x)| *y += alpha * x);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_extremes_of_a_diagonal_operator() {
        let n = 500;
        let d: Vec<f64> = (0..n).map(|i| 1.0 + (i as f64).powf(1.5) / 100.0).collect();
        let info = extreme_eigenvalues(n, LanczosParams::default(), |x, y| {
            y.iter_mut()
                .zip(x)
                .zip(&d)
                .for_each(|((yi, xi), di)| *yi = di * xi)
        })
        .unwrap();
        assert!((info.smallest - d[0]).abs() < 1e-8, "{info:?}");
        assert!(
            (info.largest - d[n - 1]).abs() < 1e-8 * d[n - 1],
            "{info:?}"
        );
        // A few steps without reorthogonalization: the largest Ritz value from below,
        // within a few per cent.
        let params = LanczosParams {
            max_iterations: 12,
            tolerance: 1e-3,
            full_reorthogonalization: false,
            ..LanczosParams::default()
        };
        let info = extreme_eigenvalues(n, params, |x, y| {
            y.iter_mut()
                .zip(x)
                .zip(&d)
                .for_each(|((yi, xi), di)| *yi = di * xi)
        })
        .unwrap();
        let top = d[n - 1];
        assert!(
            info.largest <= top * (1.0 + 1e-12) && info.largest > 0.95 * top,
            "{info:?}"
        );
    }
}
