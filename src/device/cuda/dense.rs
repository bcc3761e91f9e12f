//! DenseKernels on CUDA: block products on cuBLAS (GemmEx: f16 operands on Tensor Cores
//! with f32 accumulation, f32, f64), the single-right-hand-side products as passes over the
//! matrix (kernels/dense.cu: GEMV by column slices, SYMV a warp per column), and
//! Gram-Schmidt from the reduction kernels.

use std::ffi::c_void;

use cudarc::cublas::{result as cublas, sys};

use super::device::{grow, Cuda};
use super::launch::{self, Arg};
use super::vector::address;
use crate::device::{
    kernel_name, Block, DenseKernels, GemmBatch, MatMut, MatRef, Scratch, VectorKernels, View,
    ViewMut,
};
use crate::error::{Error, Result};
use crate::precision::{GemmMath, Precision};

/// cuBLAS's operation and leading dimension for an operand: column-major as is, or the
/// transpose of a column-major matrix (row stride is its leading dimension).
pub fn blas_operand(
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
) -> Result<(bool, usize)> {
    if row_stride == 1 && (cols <= 1 || col_stride >= rows.max(1)) {
        Ok((false, col_stride.max(rows.max(1))))
    } else if col_stride == 1 && (rows <= 1 || row_stride >= cols.max(1)) {
        Ok((true, row_stride.max(cols.max(1))))
    } else {
        Err(Error::Backend(format!(
            "GEMM operand {rows}×{cols} with strides ({row_stride}, {col_stride}) is neither column- nor row-major"
        )))
    }
}

fn data_type(p: Precision) -> sys::cudaDataType {
    match p {
        Precision::F16 => sys::cudaDataType::CUDA_R_16F,
        Precision::F32 | Precision::Tf32 => sys::cudaDataType::CUDA_R_32F,
        Precision::F64 => sys::cudaDataType::CUDA_R_64F,
    }
}

fn int(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v)
        .map_err(|_| Error::Backend(format!("GEMM {what} {v} exceeds cuBLAS's 32-bit sizes")))
}

/// Columns per slice of the two-pass GEMV (kernels/dense.cu): 64 keeps a |C| × |E| matrix
/// (225 × 14,880) in 233 blocks while the partial sums stay 1/8 of an f64 matrix.
const GEMV_SLICE: usize = 64;

impl Cuda {
    /// One GEMM (`batch.count` 1) or a strided batch of them on cuBLAS.
    fn cublas_gemm(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        batch: GemmBatch,
        math: GemmMath,
    ) -> Result<()> {
        let (m, k, n) = (a.rows, a.cols, b.cols);
        let (sp, cp) = (a.precision(), c.precision());
        if m == 0 || n == 0 || batch.count == 0 {
            return Ok(());
        }
        let (ta, lda) = blas_operand(a.rows, a.cols, a.row_stride, a.col_stride)?;
        let (tb, ldb) = blas_operand(b.rows, b.cols, b.row_stride, b.col_stride)?;
        let op = |t: bool| {
            if t {
                sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (pa, pb, pc) = (
            address(self.data_ptr(a.data, a.offset)),
            address(self.data_ptr(b.data, b.offset)),
            address(self.data_ptr(c.data, c.offset)),
        );
        // Scalars in the compute type: f32 for f16 and f32 data (TF32 too), f64 for f64.
        let (one32, zero32, one64, zero64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
        let (alpha, beta, compute) = if sp == Precision::F64 {
            (
                &one64 as *const f64 as *const c_void,
                &zero64 as *const f64 as *const c_void,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_64F,
            )
        } else {
            (
                &one32 as *const f32 as *const c_void,
                &zero32 as *const f32 as *const c_void,
                match math {
                    // Tensor Cores, the f32 operands rounded to TF32, sums in f32.
                    GemmMath::Tf32 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
                    GemmMath::Full => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                },
            )
        };
        let stride = |v: usize| v as i64;
        let what = |e| {
            Error::Backend(format!(
                "cuBLAS GEMM ({m}×{k})·({k}×{n}) in {sp}, batch of {}: {e:?}",
                batch.count
            ))
        };
        let handle = *self.blas()?.handle();
        // SAFETY: the operands (and, batched, every one of them at its stride) lie inside
        // live device buffers of the stated precisions (shapes checked above and by the
        // callers' blocks), the handle is bound to the rank's stream, and alpha/beta are host
        // scalars of the compute type that live through the call.
        unsafe {
            if batch.count == 1 {
                cublas::gemm_ex(
                    handle,
                    op(ta),
                    op(tb),
                    int(m, "rows")?,
                    int(n, "columns")?,
                    int(k, "inner dimension")?,
                    alpha,
                    pa as *const c_void,
                    data_type(sp),
                    int(lda, "leading dimension")?,
                    pb as *const c_void,
                    data_type(sp),
                    int(ldb, "leading dimension")?,
                    beta,
                    pc as *mut c_void,
                    data_type(cp),
                    int(c.ld, "leading dimension")?,
                    compute,
                    sys::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
                )
            } else {
                cublas::gemm_strided_batched_ex(
                    handle,
                    op(ta),
                    op(tb),
                    int(m, "rows")?,
                    int(n, "columns")?,
                    int(k, "inner dimension")?,
                    alpha,
                    pa as *const c_void,
                    data_type(sp),
                    int(lda, "leading dimension")?,
                    stride(batch.stride_a),
                    pb as *const c_void,
                    data_type(sp),
                    int(ldb, "leading dimension")?,
                    stride(batch.stride_b),
                    beta,
                    pc as *mut c_void,
                    data_type(cp),
                    int(c.ld, "leading dimension")?,
                    stride(batch.stride_c),
                    int(batch.count, "batch")?,
                    compute,
                    sys::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
                )
            }
        }
        .map_err(what)
    }
}

impl DenseKernels for Cuda {
    fn gemm_unchecked(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        math: GemmMath,
    ) -> Result<()> {
        let one = GemmBatch {
            count: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        };
        self.cublas_gemm(a, b, c, one, math)
    }

    fn gemm_batched_unchecked(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        batch: GemmBatch,
        math: GemmMath,
    ) -> Result<()> {
        self.cublas_gemm(a, b, c, batch, math)
    }

    fn gemv_unchecked(
        &self,
        a: MatRef<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (rows, cols) = (a.rows, a.cols);
        let s = a.precision();
        if rows == 0 {
            return Ok(());
        }
        // Column slices of GEMV_SLICE, their partial sums in the device's reduction scratch.
        let slices = cols.div_ceil(GEMV_SLICE).max(1);
        self.with_reduce(|partial| {
            grow(self, partial, slices * rows)?;
            self.launch(
                &kernel_name("gemv_partial", &[s, s.compute()]),
                launch::per_item_and_column(rows as u64, slices as u32),
                &[
                    self.data_ptr(a.data, a.offset),
                    Arg::U64(a.col_stride as u64),
                    Arg::U32(rows as u32),
                    Arg::U32(cols as u32),
                    self.data_ptr(x.data, x.offset),
                    self.ptr(partial, 0),
                    Arg::U32(GEMV_SLICE as u32),
                ],
            )?;
            self.launch(
                &kernel_name("gemv_reduce", &[s.compute()]),
                launch::elementwise(rows as u64),
                &[
                    self.ptr(partial, 0),
                    Arg::U32(rows as u32),
                    Arg::U32(slices as u32),
                    self.data_ptr(y.data, y.offset),
                ],
            )
        })
    }

    /// y = A x for a symmetric A as Aᵀ x: a warp streams [`launch::SYMV_COLUMNS`] columns
    /// at once (kernels/dense.cu), the whole matrix read once at full width.
    fn symv_unchecked(
        &self,
        a: MatRef<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let n = a.rows;
        let s = a.precision();
        if n == 0 {
            return Ok(());
        }
        let matrix = self.data_ptr(a.data, a.offset);
        let vectorized =
            address(matrix).is_multiple_of(16) && (a.col_stride * s.bytes()).is_multiple_of(16);
        self.launch(
            &kernel_name("symv", &[s, s.compute()]),
            launch::warp_per_item((n as u64).div_ceil(launch::SYMV_COLUMNS)),
            &[
                matrix,
                Arg::U64(a.col_stride as u64),
                Arg::U32(n as u32),
                self.data_ptr(x.data, x.offset),
                self.data_ptr(y.data, y.offset),
                Arg::U32(u32::from(vectorized)),
            ],
        )
    }

    /// Classical Gram-Schmidt from the reduction kernels: c_j = v_j · w, w −= Σ c_j v_j and
    /// h_j += c_j (f64 vectors).
    fn orthogonalize_unchecked(
        &self,
        basis: &[Block<Self>],
        w: &mut Block<Self>,
        h: &mut [f64],
        _scratch: &mut Scratch<Self>,
    ) -> Result<(f64, f64)> {
        let before = self.nrm2(w.view())?;
        let coefficients = basis
            .iter()
            .map(|v| self.dot(v.view(), w.view()))
            .collect::<Result<Vec<f64>>>()?;
        for ((hj, &cj), v) in h.iter_mut().zip(&coefficients).zip(basis) {
            self.axpby(-cj, v.view(), 1.0, w.view_mut())?;
            *hj += cj;
        }
        let after = self.nrm2(w.view())?;
        Ok((before, after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_map_to_cublas_transposes() {
        // A column-major 4×3 block with leading dimension 5.
        assert_eq!(blas_operand(4, 3, 1, 5).unwrap(), (false, 5));
        // Bᵀ of a column-major 3×4 B (ld 3): 4×3 with row stride 3.
        assert_eq!(blas_operand(4, 3, 3, 1).unwrap(), (true, 3));
        // A single column.
        assert_eq!(blas_operand(7, 1, 1, 7).unwrap(), (false, 7));
        assert!(blas_operand(4, 3, 2, 2).is_err());
    }
}
