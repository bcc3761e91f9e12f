//! The inverse of a dense symmetric positive definite matrix in its own storage (LAPACK's
//! potrf + potri, blocked): Cholesky A = LLᵀ, then L⁻¹, then A⁻¹ = L⁻ᵀL⁻¹, each in place.
//! The PSC set-up turns Π into Π⁻¹ this way, so one |E|×|E| matrix is held instead of three
//! (|E| = 39,480 at the flow around a square's L0 = 3: 12.5 GB each in f64).

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::matmul::triangular::{matmul as triangular_matmul, BlockStructure};
use faer::linalg::triangular_inverse::invert_lower_triangular;
use faer::linalg::triangular_solve::{
    solve_lower_triangular_in_place, solve_upper_triangular_in_place,
};
use faer::reborrow::{Reborrow, ReborrowMut};
use faer::{Accum, Mat, MatMut, Par};

/// Block size of the blocked passes: the products are GEMMs of this depth.
const BLOCK: usize = 256;

/// The matrix is not positive definite: the Cholesky pivot at `index` was not positive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotPositiveDefinite {
    pub index: usize,
}

/// A ← A⁻¹ for a symmetric positive definite A (read from its lower triangle); the whole
/// matrix holds the symmetric inverse afterwards. Needs O(n·BLOCK) extra memory.
pub fn spd_inverse_in_place(a: &mut Mat<f64>) -> Result<(), NotPositiveDefinite> {
    spd_inverse_in_place_reporting(a, &|_| {})
}

/// [`spd_inverse_in_place`], calling `report` with the fraction of its flops done (the
/// Cholesky factorisation, L⁻¹ and L⁻ᵀL⁻¹ a third each) after every block: the minutes a
/// large inverse takes show as progress.
pub fn spd_inverse_in_place_reporting(
    a: &mut Mat<f64>,
    report: &dyn Fn(f64),
) -> Result<(), NotPositiveDefinite> {
    let n = a.nrows();
    assert_eq!(n, a.ncols(), "spd_inverse_in_place: a square matrix");
    let par = Par::rayon(0);
    cholesky_in_place(a.as_mut(), par, &|f| report(f / 3.0))?;
    invert_lower_in_place(a.as_mut(), par, &|f| report((1.0 + f) / 3.0));
    lower_gram_in_place(a.as_mut(), par, &|f| report((2.0 + f) / 3.0));
    mirror_lower(a.as_mut());
    Ok(())
}

/// The fraction of an n³ process done when the first `done` of n rows or columns are.
fn cubed(done: usize, n: usize) -> f64 {
    (done as f64 / n.max(1) as f64).powi(3)
}

/// A = LLᵀ in the lower triangle (LAPACK potrf, right-looking, by block columns): each
/// diagonal block factored, the panel below it solved, the trailing lower triangle updated
/// by one product.
fn cholesky_in_place(
    mut a: MatMut<'_, f64>,
    par: Par,
    report: &dyn Fn(f64),
) -> Result<(), NotPositiveDefinite> {
    let n = a.nrows();
    for j in block_starts(n) {
        let jb = BLOCK.min(n - j);
        let rest = n - j - jb;
        {
            let a11 = a.rb_mut().submatrix_mut(j, j, jb, jb);
            let mut mem = MemBuffer::new(
                faer::linalg::cholesky::llt::factor::cholesky_in_place_scratch::<f64>(
                    jb,
                    Par::Seq,
                    Default::default(),
                ),
            );
            faer::linalg::cholesky::llt::factor::cholesky_in_place(
                a11,
                Default::default(),
                Par::Seq,
                MemStack::new(&mut mem),
                Default::default(),
            )
            .map_err(|e| match e {
                faer::linalg::cholesky::llt::factor::LltError::NonPositivePivot { index } => {
                    NotPositiveDefinite { index: j + index }
                }
            })?;
        }
        if rest > 0 {
            let (top, bottom) = a.rb_mut().split_at_row_mut(j + jb);
            let l11 = top.rb().submatrix(j, j, jb, jb);
            let (mut left, a22) = bottom.split_at_col_mut(j + jb);
            // L21 L11ᵀ = A21 ⇔ L11 L21ᵀ = A21ᵀ
            let mut a21 = left.rb_mut().submatrix_mut(0, j, rest, jb);
            solve_lower_triangular_in_place(l11, a21.rb_mut().transpose_mut(), par);
            let l21 = left.rb().submatrix(0, j, rest, jb);
            triangular_matmul(
                a22,
                BlockStructure::TriangularLower,
                Accum::Add,
                l21,
                BlockStructure::Rectangular,
                l21.transpose(),
                BlockStructure::Rectangular,
                -1.0,
                par,
            );
        }
        report(1.0 - cubed(rest, n));
    }
    Ok(())
}

fn block_starts(n: usize) -> Vec<usize> {
    (0..n).step_by(BLOCK).collect()
}

/// L ← L⁻¹ in the lower triangle (LAPACK trtri), block columns last to first: with the
/// trailing block already inverted, L21 ← −L22⁻¹ L21 L11⁻¹, then L11 ← L11⁻¹.
fn invert_lower_in_place(mut a: MatMut<'_, f64>, par: Par, report: &dyn Fn(f64)) {
    let n = a.nrows();
    for &j in block_starts(n).iter().rev() {
        let jb = BLOCK.min(n - j);
        let (top, bottom) = a.rb_mut().split_at_row_mut(j + jb);
        let l11 = top.rb().submatrix(j, j, jb, jb);
        if j + jb < n {
            let (bottom_left, l22_inv) = bottom.split_at_col_mut(j + jb);
            let mut l21 = bottom_left.submatrix_mut(0, j, n - j - jb, jb);
            let copy = l21.to_owned();
            triangular_matmul(
                l21.rb_mut(),
                BlockStructure::Rectangular,
                Accum::Replace,
                l22_inv.rb(),
                BlockStructure::TriangularLower,
                copy.as_ref(),
                BlockStructure::Rectangular,
                -1.0,
                par,
            );
            // X L11 = L21 ⇔ L11ᵀ Xᵀ = L21ᵀ
            solve_upper_triangular_in_place(l11.transpose(), l21.transpose_mut(), par);
        }
        let mut inverse = Mat::<f64>::zeros(jb, jb);
        invert_lower_triangular(inverse.as_mut(), l11, par);
        top.submatrix_mut(j, j, jb, jb).copy_from(&inverse);
        report(cubed(n - j, n));
    }
}

/// X ← XᵀX in the lower triangle for a lower triangular X (LAPACK lauum), row blocks first
/// to last: P_ij = X_iiᵀ X_ij + X(below i, i)ᵀ X(below i, j) reads only rows not yet
/// overwritten.
fn lower_gram_in_place(mut a: MatMut<'_, f64>, par: Par, report: &dyn Fn(f64)) {
    let n = a.nrows();
    for i in block_starts(n) {
        let ib = BLOCK.min(n - i);
        let (top, below) = a.rb_mut().split_at_row_mut(i + ib);
        let (_, row) = top.split_at_row_mut(i);
        let (mut left, right) = row.split_at_col_mut(i);
        let mut x_ii = Mat::<f64>::zeros(ib, ib);
        x_ii.copy_from_triangular_lower(right.rb().submatrix(0, 0, ib, ib));
        if i > 0 {
            let copy = left.to_owned();
            triangular_matmul(
                left.rb_mut(),
                BlockStructure::Rectangular,
                Accum::Replace,
                x_ii.transpose(),
                BlockStructure::TriangularUpper,
                copy.as_ref(),
                BlockStructure::Rectangular,
                1.0,
                par,
            );
            if i + ib < n {
                faer::linalg::matmul::matmul(
                    left.rb_mut(),
                    Accum::Add,
                    below.rb().submatrix(0, i, n - i - ib, ib).transpose(),
                    below.rb().submatrix(0, 0, n - i - ib, i),
                    1.0,
                    par,
                );
            }
        }
        let mut p = Mat::<f64>::zeros(ib, ib);
        triangular_matmul(
            p.as_mut(),
            BlockStructure::Rectangular,
            Accum::Replace,
            x_ii.transpose(),
            BlockStructure::TriangularUpper,
            x_ii.as_ref(),
            BlockStructure::TriangularLower,
            1.0,
            par,
        );
        if i + ib < n {
            let x_below = below.rb().submatrix(0, i, n - i - ib, ib);
            faer::linalg::matmul::matmul(
                p.as_mut(),
                Accum::Add,
                x_below.transpose(),
                x_below,
                1.0,
                par,
            );
        }
        right.submatrix_mut(0, 0, ib, ib).copy_from(&p);
        report(cubed(i + ib, n));
    }
}

/// Copies the lower triangle onto the upper one, block by block.
pub fn mirror_lower(mut a: MatMut<'_, f64>) {
    let n = a.nrows();
    for j in block_starts(n) {
        let jb = BLOCK.min(n - j);
        let (top, bottom) = a.rb_mut().split_at_row_mut(j);
        // rows above the block column ← the block row to the left of the diagonal, transposed
        let (_, top_right) = top.split_at_col_mut(j);
        let (bottom_left, mut diagonal) = bottom.split_at_col_mut(j);
        top_right
            .submatrix_mut(0, 0, j, jb)
            .copy_from(bottom_left.rb().submatrix(0, 0, jb, j).transpose());
        for c in 0..jb {
            for r in 0..c {
                diagonal[(r, c)] = diagonal[(c, r)];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::linalg::solvers::DenseSolveCore;
    use faer::Side;

    #[test]
    fn inverse_matches_faer_and_is_symmetric() {
        for n in [1, 5, BLOCK, BLOCK + 1, 2 * BLOCK + 37] {
            // SPD: a tridiagonal Laplacian plus a smooth dense part.
            let a = Mat::<f64>::from_fn(n, n, |i, j| {
                let tri = match i.abs_diff(j) {
                    0 => 2.5,
                    1 => -1.0,
                    _ => 0.0,
                };
                tri + 0.1 / (1.0 + (i + j) as f64)
            });
            let expected = a.llt(Side::Lower).unwrap().inverse();
            let mut inverse = a.clone();
            spd_inverse_in_place(&mut inverse).unwrap();
            let scale = expected.norm_max();
            let diff = (&inverse - &expected).norm_max();
            assert!(diff < 1e-12 * scale, "n = {n}: {diff:e}");
            let asymmetry = (&inverse - inverse.transpose()).norm_max();
            assert_eq!(asymmetry, 0.0, "n = {n}");
        }
    }

    #[test]
    fn indefinite_matrices_are_refused() {
        let mut a = Mat::<f64>::from_fn(3, 3, |i, j| if i == j { 1.0 - i as f64 } else { 0.0 });
        assert_eq!(
            spd_inverse_in_place(&mut a),
            Err(NotPositiveDefinite { index: 1 })
        );
        // A pivot in a later block is named by its row in the whole matrix.
        let n = 2 * BLOCK + 5;
        let bad = BLOCK + 7;
        let mut a = Mat::<f64>::from_fn(n, n, |i, j| match (i == j, i == bad) {
            (true, true) => -1.0,
            (true, false) => 2.0,
            _ => 0.0,
        });
        assert_eq!(
            spd_inverse_in_place(&mut a),
            Err(NotPositiveDefinite { index: bad })
        );
    }

    /// The reported fractions grow block by block from above 0 to 1.
    #[test]
    fn progress_is_reported_to_the_end() {
        let n = 3 * BLOCK + 11;
        let mut a = Mat::<f64>::from_fn(n, n, |i, j| {
            if i == j {
                4.0
            } else {
                1.0 / (1.0 + (i + j) as f64)
            }
        });
        let seen = std::sync::Mutex::new(Vec::new());
        spd_inverse_in_place_reporting(&mut a, &|f| seen.lock().unwrap().push(f)).unwrap();
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 3 * 4, "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        assert!(
            seen[0] > 0.0 && (seen[seen.len() - 1] - 1.0).abs() < 1e-15,
            "{seen:?}"
        );
    }
}
