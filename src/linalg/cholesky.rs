//! The `cholesky` method: A = LLᵀ by faer's supernodal sparse Cholesky (faer's AMD
//! ordering), and the two triangular solves of a block of right-hand sides written here for
//! many columns. faer's own solve sweeps the supernodes once for the whole column-major
//! block, gathering and scattering every updated row one value per column; here the block
//! is held node-major (a row's columns adjacent), so a supernode's rows are one contiguous
//! panel for its triangular solve and its product, and each row it updates is one
//! contiguous run of values. The columns are split between the threads, each sweeping the
//! factor for its own part (no synchronisation inside a sweep). A matrix without
//! off-diagonal entries, which faer factors simplicially, is solved by faer's own solve.
//!
//! The reference solver (`crate::reference`) keeps faer's own solve: the tests check this
//! one against it.

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::matmul::matmul;
use faer::linalg::triangular_solve::{
    solve_lower_triangular_in_place, solve_upper_triangular_in_place,
};
use faer::sparse::linalg::cholesky::supernodal::SupernodalLltRef;
use faer::sparse::linalg::cholesky::{
    factorize_symbolic_cholesky, CholeskySymbolicParams, LltRef, SymbolicCholesky,
    SymbolicCholeskyRaw, SymmetricOrdering,
};
use faer::sparse::linalg::SupernodalThreshold;
use faer::sparse::{SparseColMatRef, SymbolicSparseColMatRef};
use faer::{Accum, Conj, MatMut, MatRef, Par, Side};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::sparse::Csr;

use super::{BlockOutcome, BlockSolver, Scope};

/// Rows of A a block is permuted by at a time (one 64-byte cache line of f64 per column).
const PERMUTE_ROWS: usize = 8;

/// A factorised symmetric positive definite matrix, solved in node-major blocks.
pub struct SparseCholesky {
    symbolic: SymbolicCholesky<usize>,
    /// The supernodes' values (faer's layout: each supernode's rows × columns,
    /// column-major).
    values: Vec<f64>,
    /// Row r of A is row `inverse[r]` of the factor's ordering.
    inverse: Vec<usize>,
    /// The longest below-diagonal pattern of a supernode (the product's rows).
    max_pattern: usize,
}

impl SparseCholesky {
    /// A generous estimate of the factor's bytes for `unknowns` unknowns in `dim`
    /// dimensions: nested-dissection fill of about 10 N log2 N entries in 2D and 10 N^{4/3}
    /// in 3D, 16 bytes each (value and index).
    pub fn estimated_bytes(unknowns: usize, dim: usize) -> f64 {
        let n = unknowns as f64;
        let entries = if dim == 2 {
            10.0 * n * n.log2().max(1.0)
        } else {
            10.0 * n.powf(4.0 / 3.0)
        };
        entries * 16.0
    }

    /// Factorises A = LLᵀ, supernodal wherever faer can (every matrix with off-diagonal
    /// entries). A must be symmetric; a matrix that is not positive definite is an error.
    pub fn factor(a: &Csr<f64>) -> Result<Self> {
        let n = a.row_ptr().len() - 1;
        let failed = |what: String| {
            Error::Solver(format!(
                "sparse Cholesky of the {n}×{n} matrix failed: {what}"
            ))
        };
        // A symmetric CSR matrix is its own CSC transpose.
        let row_idx: Vec<usize> = a.col_idx().iter().map(|&c| c as usize).collect();
        let structure = SymbolicSparseColMatRef::new_checked(n, n, a.row_ptr(), None, &row_idx);
        let params = CholeskySymbolicParams {
            supernodal_flop_ratio_threshold: SupernodalThreshold::FORCE_SUPERNODAL,
            ..Default::default()
        };
        let symbolic =
            factorize_symbolic_cholesky(structure, Side::Lower, SymmetricOrdering::Amd, params)
                .map_err(|e| failed(format!("{e:?}")))?;
        let mut values = vec![0.0; symbolic.len_val()];
        let par = faer::get_global_parallelism();
        let mut scratch = MemBuffer::try_new(
            symbolic.factorize_numeric_llt_scratch::<f64>(par, Default::default()),
        )
        .map_err(|e| failed(format!("{e:?}")))?;
        symbolic
            .factorize_numeric_llt(
                &mut values,
                SparseColMatRef::new(structure, a.values()),
                Side::Lower,
                Default::default(),
                par,
                MemStack::new(&mut scratch),
                Default::default(),
            )
            .map_err(|e| failed(e.to_string()))?;
        let inverse = match symbolic.perm() {
            Some(perm) => perm.arrays().1.to_vec(),
            None => (0..n).collect(),
        };
        let mut solver = SparseCholesky {
            symbolic,
            values,
            inverse,
            max_pattern: 0,
        };
        if let Some(factor) = solver.supernodal() {
            solver.max_pattern = (0..factor.symbolic().n_supernodes())
                .map(|s| factor.supernode(s).pattern().len())
                .max()
                .unwrap_or(0);
        }
        Ok(solver)
    }

    pub fn dim(&self) -> usize {
        self.inverse.len()
    }

    /// The supernodal factor; None where faer factored simplicially: a matrix without
    /// off-diagonal entries (one unknown, a diagonal), which no threshold makes supernodal.
    fn supernodal(&self) -> Option<SupernodalLltRef<'_, usize, f64>> {
        match self.symbolic.raw() {
            SymbolicCholeskyRaw::Supernodal(symbolic) => {
                Some(SupernodalLltRef::new(symbolic, &self.values))
            }
            SymbolicCholeskyRaw::Simplicial(_) => None,
        }
    }

    /// The solutions of the column-major block `b` (n × `nrhs`), column-major: the columns
    /// in one part per thread, each part permuted into the factor's ordering node-major,
    /// swept forward through L and back through Lᵀ, and permuted back (a simplicial factor:
    /// faer's own solve).
    pub fn solve(&self, b: &[f64], nrhs: usize) -> Vec<f64> {
        let n = self.dim();
        assert_eq!(
            b.len(),
            n * nrhs,
            "Cholesky solve: the block has the wrong length"
        );
        let mut u = vec![0.0; n * nrhs];
        if n == 0 || nrhs == 0 {
            return u;
        }
        let Some(factor) = self.supernodal() else {
            u.copy_from_slice(b);
            let mut scratch =
                MemBuffer::new(self.symbolic.solve_in_place_scratch::<f64>(nrhs, Par::Seq));
            LltRef::new(&self.symbolic, &self.values).solve_in_place_with_conj(
                Conj::No,
                MatMut::from_column_major_slice_mut(&mut u, n, nrhs),
                Par::Seq,
                MemStack::new(&mut scratch),
            );
            return u;
        };
        let width = nrhs.div_ceil(rayon::current_num_threads()).max(1);
        u.par_chunks_mut(n * width)
            .enumerate()
            .for_each(|(part, out)| {
                let w = out.len() / n;
                let first = part * width;
                let columns = first * n..(first + w) * n;
                let mut x = vec![0.0; n * w];
                self.to_factor_order(&b[columns], &mut x, w);
                sweep(factor, self.max_pattern, &mut x, w);
                self.to_caller_order(&x, out, w);
            });
        u
    }

    /// The column-major block `b` (n × `w`, A's ordering) node-major in the factor's
    /// ordering, into `x`: A's rows [`PERMUTE_ROWS`] at a time, so each column is read a
    /// cache line at a time and the few rows of `x` it goes to stay in cache across the
    /// columns.
    fn to_factor_order(&self, b: &[f64], x: &mut [f64], w: usize) {
        let n = self.dim();
        for (first, rows) in self.inverse.chunks(PERMUTE_ROWS).enumerate() {
            let first = first * PERMUTE_ROWS;
            for (j, column) in b.chunks_exact(n).enumerate() {
                for (&i, &value) in rows.iter().zip(&column[first..]) {
                    x[i * w + j] = value;
                }
            }
        }
    }

    /// The inverse of [`SparseCholesky::to_factor_order`]: the node-major block `x` in the
    /// factor's ordering into the column-major block `u` (n × `w`, A's ordering).
    fn to_caller_order(&self, x: &[f64], u: &mut [f64], w: usize) {
        let n = self.dim();
        for (first, rows) in self.inverse.chunks(PERMUTE_ROWS).enumerate() {
            let first = first * PERMUTE_ROWS;
            for (j, column) in u.chunks_exact_mut(n).enumerate() {
                for (&i, value) in rows.iter().zip(&mut column[first..]) {
                    *value = x[i * w + j];
                }
            }
        }
    }
}

/// Solves LLᵀ x = y in place for the node-major block `x` (n rows of `w` values) with the
/// supernodal `factor` (`max_pattern`: its longest pattern).
fn sweep(factor: SupernodalLltRef<'_, usize, f64>, max_pattern: usize, x: &mut [f64], w: usize) {
    let supernodes = factor.symbolic().n_supernodes();
    let mut below = vec![0.0; max_pattern * w];
    // L y = b: each supernode's rows solved with its diagonal block, then its
    // product subtracted from the rows of its pattern (all later, ancestors' rows).
    for s in 0..supernodes {
        let node = factor.supernode(s);
        let l = node.val();
        let size = l.ncols();
        let (diagonal, off) = l.split_at_row(size);
        let rows = node.start() * w..(node.start() + size) * w;
        solve_lower_triangular_in_place(
            diagonal,
            MatMut::from_row_major_slice_mut(&mut x[rows.clone()], size, w),
            Par::Seq,
        );
        let pattern = node.pattern();
        if pattern.is_empty() {
            continue;
        }
        let product = &mut below[..pattern.len() * w];
        matmul(
            MatMut::from_row_major_slice_mut(product, pattern.len(), w),
            Accum::Replace,
            off,
            MatRef::from_row_major_slice(&x[rows], size, w),
            1.0,
            Par::Seq,
        );
        for (&r, p) in pattern.iter().zip(product.chunks_exact(w)) {
            x[r * w..(r + 1) * w]
                .iter_mut()
                .zip(p)
                .for_each(|(x, p)| *x -= p);
        }
    }
    // Lᵀ x = y: the supernodes in reverse, each gathering its pattern's rows.
    for s in (0..supernodes).rev() {
        let node = factor.supernode(s);
        let l = node.val();
        let size = l.ncols();
        let (diagonal, off) = l.split_at_row(size);
        let rows = node.start() * w..(node.start() + size) * w;
        let pattern = node.pattern();
        if !pattern.is_empty() {
            let gathered = &mut below[..pattern.len() * w];
            for (&r, g) in pattern.iter().zip(gathered.chunks_exact_mut(w)) {
                g.copy_from_slice(&x[r * w..(r + 1) * w]);
            }
            matmul(
                MatMut::from_row_major_slice_mut(&mut x[rows.clone()], size, w),
                Accum::Add,
                off.transpose(),
                MatRef::from_row_major_slice(gathered, pattern.len(), w),
                -1.0,
                Par::Seq,
            );
        }
        solve_upper_triangular_in_place(
            diagonal.transpose(),
            MatMut::from_row_major_slice_mut(&mut x[rows], size, w),
            Par::Seq,
        );
    }
}

impl BlockSolver for SparseCholesky {
    fn solve(&mut self, _a: &Csr<f64>, b: &[f64], scope: &Scope) -> Result<BlockOutcome> {
        Ok(BlockOutcome {
            u: SparseCholesky::solve(self, b, scope.columns.len()),
            iterations: None,
            inner_iterations: None,
            flops: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fem::assemble_poisson;
    use crate::mesh::{unit_square, Element};
    use crate::reference::CholeskySolver;
    use crate::sparse;

    /// A column-major block of `k` columns of pseudo-random loads (a different sequence
    /// in every column).
    fn loads(n: usize, k: usize) -> Vec<f64> {
        (0..n * k)
            .map(|i| ((i * 7919 + 13) % 1009) as f64 / 1009.0 - 0.5)
            .collect()
    }

    /// Every column equals faer's own solve of it to rounding and solves A x = b to 1e-12,
    /// on meshes whose supernodes range from one column to hundreds, with blocks split into
    /// parts of equal and unequal widths (three threads).
    #[test]
    fn blocks_match_faers_own_solve() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for (n, element) in [(40, Element::Q1), (32, Element::P1)] {
            let sys = assemble_poisson(&unit_square(n, element).unwrap(), |_| 1.0).unwrap();
            let a = &sys.matrix;
            let dim = sys.rhs.len();
            let reference = CholeskySolver::factor(a).unwrap();
            let ours = SparseCholesky::factor(a).unwrap();
            assert!(ours.max_pattern > 16, "some supernode is wide");
            for k in [1, 2, 3, 8, 13] {
                let b = loads(dim, k);
                let u = pool.install(|| ours.solve(&b, k));
                for c in 0..k {
                    let column = &b[c * dim..(c + 1) * dim];
                    let x = &u[c * dim..(c + 1) * dim];
                    let expected = reference.solve(column);
                    let scale = expected.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                    for (got, want) in x.iter().zip(&expected) {
                        assert!((got - want).abs() <= 1e-12 * scale, "{element:?} k = {k}");
                    }
                    let mut r = vec![0.0; dim];
                    sparse::residual(a, column, x, &mut r);
                    let relative = crate::numeric::nrm2(&r) / crate::numeric::nrm2(column);
                    assert!(
                        relative < 1e-12,
                        "{element:?} k = {k}: residual {relative:e}"
                    );
                }
            }
        }
    }

    /// Matrices without off-diagonal entries, which faer factors simplicially: one
    /// unknown (the unit square with n = 2) and a diagonal.
    #[test]
    fn diagonal_matrices_are_solved() {
        let sys = assemble_poisson(&unit_square(2, Element::Q1).unwrap(), |_| 1.0).unwrap();
        let ours = SparseCholesky::factor(&sys.matrix).unwrap();
        assert!(ours.supernodal().is_none());
        let close = |u: &[f64], x: &[f64]| {
            u.iter()
                .zip(x)
                .all(|(u, x)| (u - x).abs() <= 4.0 * f64::EPSILON * x.abs())
        };
        let d = sys.matrix.values()[0];
        assert!(close(&ours.solve(&[2.0, -4.0], 2), &[2.0 / d, -4.0 / d]));
        let a = Csr::new(3, 3, vec![0, 1, 2, 3], vec![0, 1, 2], vec![4.0, 2.0, 8.0]).unwrap();
        let u = SparseCholesky::factor(&a)
            .unwrap()
            .solve(&[4.0, 1.0, -2.0], 1);
        assert!(close(&u, &[1.0, 0.5, -0.25]), "{u:?}");
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
        let error = SparseCholesky::factor(&a)
            .err()
            .expect("not positive definite");
        assert!(error
            .to_string()
            .contains("sparse Cholesky of the 2×2 matrix failed"));
    }
}
