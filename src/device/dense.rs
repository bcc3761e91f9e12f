//! Dense kernels ([`DenseKernels`]: GEMM with explicit storage and compute precision,
//! GEMV, SYMV, the Gram-Schmidt steps of FGMRES) and the set-up's dense inversions
//! ([`DenseInverse`]).

use super::checks::{check_gemm, check_gemm_batch, check_gemv, check_gram_schmidt};
use super::{Block, Device, MatMut, MatRef, Scratch, View, ViewMut};
use crate::error::{Error, Result};
use crate::precision::GemmMath;

/// Dense products. The methods a solver calls check their arguments (device/checks.rs)
/// and hand them to the backend's `*_unchecked` kernel.
pub trait DenseKernels: Device {
    /// C = A·B with A and B in one storage precision S and C in S or in S's compute
    /// precision; products and sums in the compute precision (f16: f32), with f32
    /// operands rounded to TF32 first when `math` is [`GemmMath::Tf32`] (f32 only).
    fn gemm(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        math: GemmMath,
    ) -> Result<()> {
        check_gemm(&a, &b, &c, math)?;
        self.gemm_unchecked(a, b, c, math)
    }
    /// C = A·B for a symmetric A (square; both triangles stored, Aᵀ = A): what
    /// [`DenseKernels::gemm`] computes, in whichever layout of the product the device
    /// multiplies fastest (the CPU: Cᵀ = Bᵀ·A for a narrow B). PSC's dense inverses Π⁻¹,
    /// Λ⁻¹ and Θ⁻¹ on blocks of right-hand sides.
    fn symm(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        math: GemmMath,
    ) -> Result<()> {
        if a.rows != a.cols {
            return Err(Error::Backend(format!(
                "SYMM: the symmetric operand is {}×{}",
                a.rows, a.cols
            )));
        }
        check_gemm(&a, &b, &c, math)?;
        self.symm_unchecked(a, b, c, math)
    }
    /// C_i = A_i·B_i for i < `batch.count`, the i-th operands at their offsets plus i times
    /// the batch's strides (a stride of 0 shares an operand): the group-wise C⁻¹ products
    /// of PSC for every right-hand side in one call. Precisions as in [`DenseKernels::gemm`].
    fn gemm_batched(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        batch: GemmBatch,
        math: GemmMath,
    ) -> Result<()> {
        check_gemm(&a, &b, &c, math)?;
        let strides = [batch.stride_a, batch.stride_b, batch.stride_c];
        check_gemm_batch(&a, &b, &c, batch.count, strides)?;
        self.gemm_batched_unchecked(a, b, c, batch, math)
    }
    /// y = A x for a column-major A in storage S, x and y in S's compute precision: one
    /// pass over A (the product of a single right-hand side).
    fn gemv(&self, a: MatRef<'_, Self>, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        check_gemv("GEMV", &a, (x.len, x.precision()), (y.len, y.precision()))?;
        self.gemv_unchecked(a, x, y)
    }
    /// y = A x for a symmetric A (square, column-major, both triangles stored) in storage S:
    /// what [`DenseKernels::gemv`] computes, reading only the lower triangle where
    /// [`DenseKernels::symv_reads_lower_triangle`] says so (half the bytes).
    fn symv(&self, a: MatRef<'_, Self>, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        check_gemv("SYMV", &a, (x.len, x.precision()), (y.len, y.precision()))?;
        self.symv_unchecked(a, x, y)
    }
    /// Whether [`DenseKernels::symv`] reads only the lower triangle (else all of A).
    fn symv_reads_lower_triangle(&self) -> bool {
        false
    }
    /// One classical Gram-Schmidt step against the f64 vectors `basis`, fused: c = Vᵀw,
    /// w −= V c and h += c (a second step re-orthogonalises into the same h), with ‖w‖²
    /// alongside; returns ‖w‖ before and after.
    fn orthogonalize(
        &self,
        basis: &[Block<Self>],
        w: &mut Block<Self>,
        h: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<(f64, f64)> {
        check_gram_schmidt(basis, w, h)?;
        self.orthogonalize_unchecked(basis, w, h, scratch)
    }
    /// Gram-Schmidt as FGMRES needs it: one [`DenseKernels::orthogonalize`] step, and a
    /// second when the first cancelled most of w (the DGKS criterion ‖w'‖ < ‖w‖/√2; "twice
    /// is enough"), both adding into h; returns ‖w‖ at the end. With a good preconditioner
    /// w = A M⁻¹ v_j is close to v_j and the second step always runs, so a device may fuse
    /// the first step's update with the second step's products (one pass over the basis
    /// less); the results are those of the two steps.
    fn orthogonalize_twice_if_needed(
        &self,
        basis: &[Block<Self>],
        w: &mut Block<Self>,
        h: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<f64> {
        check_gram_schmidt(basis, w, h)?;
        self.orthogonalize_twice_if_needed_unchecked(basis, w, h, scratch)
    }

    // The backend's kernels behind the checked methods above, given checked arguments.

    /// [`DenseKernels::gemm`] on checked arguments.
    fn gemm_unchecked(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        math: GemmMath,
    ) -> Result<()>;
    /// [`DenseKernels::symm`] on checked arguments (by default the GEMM).
    fn symm_unchecked(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        math: GemmMath,
    ) -> Result<()> {
        self.gemm_unchecked(a, b, c, math)
    }
    /// [`DenseKernels::gemm_batched`] on checked arguments (by default one GEMM after the
    /// other).
    fn gemm_batched_unchecked(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        batch: GemmBatch,
        math: GemmMath,
    ) -> Result<()> {
        products_in_turn(self, a, b, c, batch, math)
    }
    /// [`DenseKernels::gemv`] on checked arguments.
    fn gemv_unchecked(
        &self,
        a: MatRef<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// [`DenseKernels::symv`] on checked arguments (by default the GEMV).
    fn symv_unchecked(
        &self,
        a: MatRef<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        self.gemv_unchecked(a, x, y)
    }
    /// [`DenseKernels::orthogonalize`] on checked arguments.
    fn orthogonalize_unchecked(
        &self,
        basis: &[Block<Self>],
        w: &mut Block<Self>,
        h: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<(f64, f64)>;
    /// [`DenseKernels::orthogonalize_twice_if_needed`] on checked arguments (by default two
    /// separate steps where the first needs a second).
    fn orthogonalize_twice_if_needed_unchecked(
        &self,
        basis: &[Block<Self>],
        w: &mut Block<Self>,
        h: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<f64> {
        let (before, after) = self.orthogonalize_unchecked(basis, w, h, scratch)?;
        if needs_second_step(before, after) {
            return Ok(self.orthogonalize_unchecked(basis, w, h, scratch)?.1);
        }
        Ok(after)
    }
}

/// The DGKS criterion of [`DenseKernels::orthogonalize_twice_if_needed`]: a Gram-Schmidt
/// step that left ‖w‖ below ‖w‖/√2 of before cancelled enough that a second is needed.
pub fn needs_second_step(before: f64, after: f64) -> bool {
    after < before * std::f64::consts::FRAC_1_SQRT_2
}

/// What a device did with a set-up's dense inversion ([`DenseInverse::spd_inverse`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inverted {
    Done,
    /// The Cholesky pivot at `index` was not positive (the matrix is left undefined).
    NotPositiveDefinite {
        index: usize,
    },
    /// The device leaves it to the host (the matrix is untouched): no such device code,
    /// its library is missing, or the matrix does not fit its memory.
    LeftToHost,
}

/// The dense f64 inversions of a set-up (PSC's Π⁻¹ and Λ⁻¹: |E|² values, |E|³ work,
/// 30 GB and minutes on a host at h = 1/1024): a GPU does them with cuSOLVER; the host's
/// blocked inversion (`linalg::spd_inverse_in_place`) is the default and the fallback.
pub trait DenseInverse {
    /// A ← (A − GᵀG)⁻¹ (`gram` G: k × n, when given) for a symmetric A (its lower triangle
    /// read) whose result is positive definite; after `Done` A's lower triangle holds the
    /// inverse (the caller mirrors it).
    fn spd_inverse(
        &self,
        a: &mut faer::Mat<f64>,
        gram: Option<&faer::Mat<f64>>,
    ) -> Result<Inverted> {
        let _ = (a, gram);
        Ok(Inverted::LeftToHost)
    }
}

/// The host: [`DenseInverse`]'s default.
pub struct OnHost;

impl DenseInverse for OnHost {}

/// C_i = A_i·B_i for the products of `batch`, one GEMM after the other (what
/// [`DenseKernels::gemm_batched_unchecked`] does unless a device does better).
pub(crate) fn products_in_turn<D: DenseKernels>(
    dev: &D,
    a: MatRef<'_, D>,
    b: MatRef<'_, D>,
    c: MatMut<'_, D>,
    batch: GemmBatch,
    math: GemmMath,
) -> Result<()> {
    for i in 0..batch.count {
        dev.gemm_unchecked(
            MatRef {
                offset: a.offset + i * batch.stride_a,
                ..a
            },
            MatRef {
                offset: b.offset + i * batch.stride_b,
                ..b
            },
            MatMut {
                data: &mut *c.data,
                offset: c.offset + i * batch.stride_c,
                rows: c.rows,
                cols: c.cols,
                ld: c.ld,
            },
            math,
        )?;
    }
    Ok(())
}

/// How many products a batched GEMM computes and how far apart their operands lie (in
/// elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmBatch {
    pub count: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
}
