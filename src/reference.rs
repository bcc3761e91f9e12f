//! The independent reference solver: faer's supernodal sparse Cholesky (f64) with faer's
//! own solve. Every other solver of this crate is tested against it, the `cholesky`
//! method's blocked solve (`linalg::SparseCholesky`) included.

use faer::linalg::solvers::Solve;
use faer::sparse::linalg::solvers::Llt;
use faer::sparse::{SparseColMatRef, SymbolicSparseColMatRef};
use faer::{MatMut, Side};

use crate::error::{Error, Result};
use crate::sparse::Csr;

/// A factorised symmetric positive definite matrix.
pub struct CholeskySolver {
    llt: Llt<usize, f64>,
    n: usize,
}

impl CholeskySolver {
    /// Factorises A = LLᵀ (fill-reducing ordering by faer). A must be symmetric; a matrix
    /// that is not positive definite is reported as an error.
    pub fn factor(a: &Csr<f64>) -> Result<Self> {
        let n = a.row_ptr().len() - 1;
        // A symmetric CSR matrix is its own CSC transpose.
        let col_ptr = a.row_ptr().to_vec();
        let row_idx: Vec<usize> = a.col_idx().iter().map(|&c| c as usize).collect();
        let symbolic = SymbolicSparseColMatRef::new_checked(n, n, &col_ptr, None, &row_idx);
        let matrix = SparseColMatRef::new(symbolic, a.values());
        let llt = matrix.sp_cholesky(Side::Lower).map_err(|e| {
            Error::Solver(format!("sparse Cholesky of the {n}×{n} matrix failed: {e}"))
        })?;
        Ok(CholeskySolver { llt, n })
    }

    pub fn dim(&self) -> usize {
        self.n
    }

    /// Overwrites the columns of `b` (n × Nrhs) with the solutions.
    pub fn solve_in_place(&self, b: MatMut<'_, f64>) {
        assert_eq!(
            b.nrows(),
            self.n,
            "Cholesky solve: right-hand side has the wrong length"
        );
        self.llt.solve_in_place(b);
    }

    pub fn solve(&self, b: &[f64]) -> Vec<f64> {
        let mut x = faer::Mat::from_fn(b.len(), 1, |i, _| b[i]);
        self.solve_in_place(x.as_mut());
        (0..b.len()).map(|i| x[(i, 0)]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fem::assemble_poisson;
    use crate::mesh::{unit_square, Element};
    use crate::numeric::nrm2;
    use crate::sparse;

    /// Checked against faer's dense Cholesky on a small problem.
    #[test]
    fn matches_dense_solve() {
        let sys =
            assemble_poisson(&unit_square(9, Element::Q1).unwrap(), |x| x[0] + 2.0 * x[1]).unwrap();
        let n = sys.rhs.len();
        let x = CholeskySolver::factor(&sys.matrix).unwrap().solve(&sys.rhs);
        let dense = faer::Mat::from_fn(n, n, |i, j| sys.matrix.to_dense_f64()[i + j * n]);
        let llt = dense.llt(Side::Lower).unwrap();
        let mut reference = faer::Mat::from_fn(n, 1, |i, _| sys.rhs[i]);
        llt.solve_in_place(reference.as_mut());
        for i in 0..n {
            assert!((x[i] - reference[(i, 0)]).abs() < 1e-14);
        }
        let mut r = vec![0.0; n];
        sparse::residual(&sys.matrix, &sys.rhs, &x, &mut r);
        assert!(nrm2(&r) / nrm2(&sys.rhs) < 1e-14);
    }

    #[test]
    fn indefinite_matrix_is_an_error() {
        let a = Csr::new(
            2,
            2,
            vec![0, 2, 4],
            vec![0, 1, 0, 1],
            vec![1.0, 2.0, 2.0, 1.0],
        )
        .unwrap();
        assert!(CholeskySolver::factor(&a).is_err());
    }
}
