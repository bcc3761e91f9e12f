//! Verification of solutions, shared by single runs, campaigns and benchmarks: the f64
//! residual of the nodal system for every column and, where the exact solution is known,
//! the L2 errors. Computed on the host in f64 with the reference CPU kernels, whatever
//! device solved.

use faer::{MatMut, MatRef};
use rayon::prelude::*;

use super::{Dofs, Exact, ModeBasis};
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
/// exact solution is known, the L2 errors (through `basis`: one block product with the mass
/// matrix, see [`ModeBasis`]); a column that is not finite is an error.
pub fn verify<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    matrix: &Csr<f64>,
    basis: &ModeBasis,
    rhs: &[f64],
    u: &[f64],
    exact: &[Option<Exact>],
) -> Result<Vec<ColumnReport>> {
    let (n, nrhs) = (dofs.len(), exact.len());
    assert!(
        rhs.len() == n * nrhs && u.len() == n * nrhs,
        "verify: blocks are not unknowns × columns"
    );
    // R = B − A U, one pass over A for every group of columns.
    let mut residual = vec![0.0; n * nrhs];
    sparse::spmv_block(
        matrix,
        MatRef::from_column_major_slice(u, n, nrhs),
        MatMut::from_column_major_slice_mut(&mut residual, n, nrhs),
    );
    residual
        .par_iter_mut()
        .zip(rhs)
        .for_each(|(r, b)| *r = b - *r);
    let known: Vec<usize> = (0..nrhs).filter(|&c| exact[c].is_some()).collect();
    let known_exact: Vec<Exact> = known.iter().map(|&c| exact[c].expect("known")).collect();
    let errors = if known.len() == nrhs {
        basis.errors(mesh, dofs, u, &known_exact)?
    } else {
        let part: Vec<f64> = known
            .iter()
            .flat_map(|&c| u[c * n..(c + 1) * n].iter().copied())
            .collect();
        basis.errors(mesh, dofs, &part, &known_exact)?
    };
    let mut per_column = vec![None; nrhs];
    for (&c, e) in known.iter().zip(errors) {
        per_column[c] = Some(e);
    }
    let columns: Vec<ColumnReport> = (0..nrhs)
        .map(|c| {
            let (b, r) = (&rhs[c * n..(c + 1) * n], &residual[c * n..(c + 1) * n]);
            let b_norm = nrm2(b);
            let relative_residual = if b_norm > 0.0 {
                nrm2(r) / b_norm
            } else {
                nrm2(r)
            };
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
