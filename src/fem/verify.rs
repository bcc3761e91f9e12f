//! Verification of solutions, shared by single runs, campaigns and benchmarks: the f64
//! residual of the nodal system for every column and, where the exact solution is known,
//! the L2 errors. Computed on the host in f64 with the reference CPU kernels, whatever
//! device solved.

use faer::MatRef;

use super::{Dofs, Exact, ModeBasis};
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::numeric::{dot, nrm2};
use crate::sparse;
use crate::sparse::Csr;

/// The verification of one right-hand side.
#[derive(Clone, Copy, Debug)]
pub struct ColumnReport {
    pub l2_error: f64,
    pub relative_l2_error: f64,
    pub nodal_l2_error: f64,
    pub relative_residual: f64,
}

/// Sums of squares below this may have lost terms to underflow (squares of entries below
/// 1e-154 are subnormal or zero); the norm is then computed scaled.
const SQUARES_FLOOR: f64 = 1e-250;

/// ‖v‖₂ as the root of the plain sum of squares where that is exact enough, else scaled
/// (a pass fewer than [`nrm2`] in the common case).
fn plain_norm(v: &[f64]) -> f64 {
    let squares = dot(v, v);
    if squares.is_finite() && squares >= SQUARES_FLOOR {
        squares.sqrt()
    } else {
        nrm2(v)
    }
}

/// ‖b − A x‖₂ / ‖b‖₂ of one column (‖b − A x‖₂ when b = 0); `residual` is scratch of the
/// column's length.
pub fn relative_residual(matrix: &Csr<f64>, b: &[f64], x: &[f64], residual: &mut [f64]) -> f64 {
    sparse::residual(matrix, b, x, residual);
    let b_norm = nrm2(b);
    if b_norm > 0.0 {
        nrm2(residual) / b_norm
    } else {
        nrm2(residual)
    }
}

/// ‖b − A u‖₂ / ‖b‖₂ (‖b − A u‖₂ where b = 0) of every column of the column-major blocks
/// `rhs` and `u` (nrhs columns), in f64 on the host: *the* verified residual, which every
/// run's check and the solve's own correction step compute with this one function, so the
/// two agree to the last bit. One pass over A for the whole block; where a column's sum of
/// squares leaves the range where it is exact, its residual is stored and its norm scaled.
pub fn relative_residuals(matrix: &Csr<f64>, rhs: &[f64], u: &[f64], nrhs: usize) -> Vec<f64> {
    let n = crate::sparse::SparseRows::nrows(matrix);
    assert!(
        rhs.len() == n * nrhs && u.len() == n * nrhs,
        "relative_residuals: blocks are not unknowns × columns"
    );
    // ‖b − A u‖² per column in one pass over A, the residual never stored.
    let squares = sparse::spmv_block_sums(
        matrix,
        MatRef::from_column_major_slice(u, n, nrhs),
        |i, c, au| (rhs[c * n + i] - au).powi(2),
    );
    (0..nrhs)
        .map(|c| {
            let (b, x) = (&rhs[c * n..(c + 1) * n], &u[c * n..(c + 1) * n]);
            if squares[c].is_finite() && squares[c] >= SQUARES_FLOOR {
                let b_norm = plain_norm(b);
                if b_norm > 0.0 {
                    squares[c].sqrt() / b_norm
                } else {
                    squares[c].sqrt()
                }
            } else {
                // Overflowed, underflowed or not finite: the scaled norm, from the residual.
                relative_residual(matrix, b, x, &mut vec![0.0; n])
            }
        })
        .collect()
}

/// The report of every column of the column-major block `u` of solutions: its verified
/// f64 residual, `residuals` (from [`relative_residuals`]), and where its exact solution is
/// known the L2 errors (through `basis`: a pass over the nodes and one over the cells, see
/// [`ModeBasis`]); a column that is not finite is an error.
pub fn verify<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    basis: &ModeBasis<D>,
    u: &[f64],
    exact: &[Option<Exact>],
    residuals: &[f64],
) -> Result<Vec<ColumnReport>> {
    let (n, nrhs) = (dofs.len(), exact.len());
    assert!(
        u.len() == n * nrhs && residuals.len() == nrhs,
        "verify: the block is not unknowns × columns"
    );
    let known: Vec<usize> = (0..nrhs).filter(|&c| exact[c].is_some()).collect();
    let known_exact: Vec<Exact> = known.iter().map(|&c| exact[c].expect("known")).collect();
    let errors = if known.len() == nrhs {
        basis.errors(mesh, dofs, u, &known_exact)
    } else {
        let part: Vec<f64> = known
            .iter()
            .flat_map(|&c| u[c * n..(c + 1) * n].iter().copied())
            .collect();
        basis.errors(mesh, dofs, &part, &known_exact)
    };
    let mut per_column = vec![None; nrhs];
    for (&c, e) in known.iter().zip(errors) {
        per_column[c] = Some(e);
    }
    let columns: Vec<ColumnReport> = (0..nrhs)
        .map(|c| {
            let relative_residual = residuals[c];
            match (exact[c], per_column[c]) {
                (Some(m), Some(e)) => ColumnReport {
                    l2_error: e.l2,
                    relative_l2_error: e.l2 / m.l2_norm(),
                    nodal_l2_error: e.nodal,
                    relative_residual,
                },
                _ => ColumnReport {
                    l2_error: f64::NAN,
                    relative_l2_error: f64::NAN,
                    nodal_l2_error: f64::NAN,
                    relative_residual,
                },
            }
        })
        .collect();
    if let Some((c, r)) = columns.iter().enumerate().find(|(c, r)| {
        !(r.relative_residual.is_finite() && (exact[*c].is_none() || r.l2_error.is_finite()))
    }) {
        return Err(Error::Solver(format!(
            "the solution of right-hand side {c} is not finite (relative residual {}, L2 error {})",
            r.relative_residual, r.l2_error
        )));
    }
    Ok(columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fem::assemble_poisson;
    use crate::mesh::{unit_square, Element};

    /// The residual of the verification is ‖b − A u‖₂ / ‖b‖₂ computed from the stored
    /// residual, and stays right where the sums of squares overflow (1e200) or underflow
    /// (1e-200): a scaled system has the same relative residual.
    #[test]
    fn relative_residuals_at_any_scale() {
        let mesh = unit_square(16, Element::Q1).unwrap();
        let sys = assemble_poisson(&mesh, |_| 1.0).unwrap();
        let n = sys.dofs.len();
        let u: Vec<f64> = (0..n)
            .map(|i| 0.07 + ((i * 13) % 7) as f64 * 1e-3)
            .collect();
        let mut scratch = vec![0.0; n];
        let want = relative_residual(&sys.matrix, &sys.rhs, &u, &mut scratch);
        assert!(want > 1e-3, "{want}");
        for scale in [1.0, 1e200, 1e-200] {
            let b: Vec<f64> = sys.rhs.iter().map(|v| v * scale).collect();
            let x: Vec<f64> = u.iter().map(|v| v * scale).collect();
            let (b, x) = ([b.clone(), b].concat(), [x.clone(), x].concat());
            let residuals = relative_residuals(&sys.matrix, &b, &x, 2);
            let reports = verify(
                &mesh,
                &sys.dofs,
                &ModeBasis::new(),
                &x,
                &[None, None],
                &residuals,
            )
            .unwrap();
            for r in reports {
                let got = r.relative_residual;
                assert!(
                    (got - want).abs() <= 1e-12 * want,
                    "scale {scale}: {got} vs {want}"
                );
                assert!(r.l2_error.is_nan());
            }
        }
    }
}
