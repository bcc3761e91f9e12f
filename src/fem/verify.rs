//! Verification of solutions, shared by single runs, campaigns and benchmarks: the f64
//! residual of the nodal system for every column and, where the exact solution is known,
//! the L2 errors. Computed on the host in f64 with the reference CPU kernels, whatever
//! device solved.

use super::{l2_error, nodal_l2_error, Dofs, Exact};
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::numeric::nrm2;
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

/// The f64 residual of every column of the column-major blocks `rhs` and `u` and, where its
/// exact solution is known, the L2 errors; a column that is not finite is an error.
pub fn verify<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    matrix: &Csr<f64>,
    rhs: &[f64],
    u: &[f64],
    exact: &[Option<Exact>],
) -> Result<Vec<ColumnReport>> {
    let n = dofs.len();
    let mut residual = vec![0.0; n];
    let columns: Vec<ColumnReport> = exact
        .iter()
        .enumerate()
        .map(|(c, exact)| {
            let (b, x) = (&rhs[c * n..(c + 1) * n], &u[c * n..(c + 1) * n]);
            let relative_residual = relative_residual(matrix, b, x, &mut residual);
            match exact {
                Some(m) => {
                    let l2 = l2_error(mesh, dofs, x, |p| m.u(p));
                    ColumnReport {
                        l2_error: l2,
                        relative_l2_error: l2 / m.l2_norm(),
                        nodal_l2_error: nodal_l2_error(mesh, dofs, x, |p| m.u(p)),
                        relative_residual,
                    }
                }
                None => ColumnReport {
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
