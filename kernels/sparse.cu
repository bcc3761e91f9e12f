// CSR products on column-major blocks (SparseKernels): PSC's D and Dᵀ (values in the
// storage precision S, blocks in its compute precision C) and the f64 stiffness matrix of
// PSC-IR. A thread per (row, group of CSR_COLUMNS columns): it reads its row's indices and
// values once for the whole group (a thread per (row, column) read them once per column,
// from L2, more bytes than the blocks themselves), and a warp's consecutive rows read each
// column's entries coalesced. Block (q, g) for rows q·blockDim… of group g (32-bit row
// indices); each row's sum runs in index order, so a column's result does not depend on
// the group it is in.
#define CSR_COLUMNS 8

#define FOR_ROWS_AND_COLUMN_GROUPS(row, c0, nrows, cols)                                          \
  for (u32 c0 = blockIdx.y * CSR_COLUMNS; c0 < (cols); c0 += gridDim.y * CSR_COLUMNS)             \
    for (u32 row = blockIdx.x * blockDim.x + threadIdx.x; row < (nrows); row += gridDim.x * blockDim.x)

// sums[g] = Σ_k a_k · v_g[col_k] over the row's entries in index order, for the group's
// columns g < count (v_g = v + g·ld).
template <typename S, typename C, typename V>
__device__ __forceinline__ void csr_row_sums(u64 begin, u64 end, const u32 *col_idx,
                                             const S *values, const V *v, u64 ld, u32 count,
                                             C (&sums)[CSR_COLUMNS]) {
#pragma unroll
  for (u32 g = 0; g < CSR_COLUMNS; g++) sums[g] = 0;
  for (u64 k = begin; k < end; k++) {
    const C a = (C)widen(values[k]);
    const u64 j = col_idx[k];
#pragma unroll
    for (u32 g = 0; g < CSR_COLUMNS; g++)
      if (g < count) sums[g] += a * (C)widen(v[g * ld + j]);
  }
}

template <typename S, typename C>
__device__ void csr_spmm(u64 nrows, const u64 *row_ptr, const u32 *col_idx, const S *values,
                         const C *x, u64 x_rows, C *y, u32 cols) {
  FOR_ROWS_AND_COLUMN_GROUPS(row, c0, nrows, cols) {
    const u32 count = min(cols - c0, (u32)CSR_COLUMNS);
    C sums[CSR_COLUMNS];
    csr_row_sums(row_ptr[row], row_ptr[row + 1], col_idx, values, x + (u64)c0 * x_rows, x_rows,
                 count, sums);
#pragma unroll
    for (u32 g = 0; g < CSR_COLUMNS; g++)
      if (g < count) y[(u64)(c0 + g) * nrows + row] = sums[g];
  }
}

// y = b − A x, y in the compute precision C or rounded once into the storage type S (the
// next product's operand): PSC's b_I − Dᵀ x_E in one pass.
template <typename S, typename C, typename Y>
__device__ void csr_subtract(u64 nrows, const u64 *row_ptr, const u32 *col_idx, const S *values,
                             const C *x, u64 x_rows, const C *b, Y *y, u32 cols) {
  FOR_ROWS_AND_COLUMN_GROUPS(row, c0, nrows, cols) {
    const u32 count = min(cols - c0, (u32)CSR_COLUMNS);
    C sums[CSR_COLUMNS];
    csr_row_sums(row_ptr[row], row_ptr[row + 1], col_idx, values, x + (u64)c0 * x_rows, x_rows,
                 count, sums);
#pragma unroll
    for (u32 g = 0; g < CSR_COLUMNS; g++)
      if (g < count) {
        const u64 at = (u64)(c0 + g) * nrows + row;
        y[at] = store_c(b[at] - sums[g], y);
      }
  }
}

// r = b − A x (f64).
__device__ void csr_residual(u64 n, const u64 *row_ptr, const u32 *col_idx, const double *values,
                             const double *b, const double *x, double *r, u32 cols) {
  FOR_ROWS_AND_COLUMN_GROUPS(row, c0, n, cols) {
    const u32 count = min(cols - c0, (u32)CSR_COLUMNS);
    double ax[CSR_COLUMNS];
    csr_row_sums(row_ptr[row], row_ptr[row + 1], col_idx, values, x + (u64)c0 * n, n, count, ax);
#pragma unroll
    for (u32 g = 0; g < CSR_COLUMNS; g++)
      if (g < count) {
        const u64 at = (u64)(c0 + g) * n + row;
        r[at] = b[at] - ax[g];
      }
  }
}

// x_c += α_c c_c and r_c −= α_c A c_c (A, x, r f64; the correction in any precision).
template <typename T>
__device__ void csr_refine_update(u64 n, const u64 *row_ptr, const u32 *col_idx,
                                  const double *values, const T *corr, const double *alpha,
                                  double *x, double *r, u32 cols) {
  FOR_ROWS_AND_COLUMN_GROUPS(row, c0, n, cols) {
    const u32 count = min(cols - c0, (u32)CSR_COLUMNS);
    double ac[CSR_COLUMNS];
    csr_row_sums(row_ptr[row], row_ptr[row + 1], col_idx, values, corr + (u64)c0 * n, n, count,
                 ac);
#pragma unroll
    for (u32 g = 0; g < CSR_COLUMNS; g++)
      if (g < count) {
        const u64 at = (u64)(c0 + g) * n + row;
        const double a = alpha[c0 + g];
        x[at] += a * (double)widen(corr[at]);
        r[at] -= a * ac[g];
      }
  }
}

#define SPMM_ENTRY(name, S, C)                                                                    \
  extern "C" __global__ void csr_spmm_##name(u64 nrows, const u64 *row_ptr, const u32 *col_idx,   \
                                             const S *values, const C *x, u64 x_rows, C *y,       \
                                             u32 cols) {                                          \
    csr_spmm<S, C>(nrows, row_ptr, col_idx, values, x, x_rows, y, cols);                          \
  }
SPMM_ENTRY(f16_f32, __half, float)
SPMM_ENTRY(f32, float, float)
SPMM_ENTRY(f64, double, double)

#define SUBTRACT_ENTRY(name, S, C, Y)                                                             \
  extern "C" __global__ void csr_subtract_##name(u64 nrows, const u64 *row_ptr,                   \
                                                 const u32 *col_idx, const S *values, const C *x, \
                                                 u64 x_rows, const C *b, Y *y, u32 cols) {        \
    csr_subtract<S, C, Y>(nrows, row_ptr, col_idx, values, x, x_rows, b, y, cols);                \
  }
SUBTRACT_ENTRY(f16_f32, __half, float, float)
SUBTRACT_ENTRY(f16_f32_f16, __half, float, __half)
SUBTRACT_ENTRY(f32, float, float, float)
SUBTRACT_ENTRY(f64, double, double, double)

extern "C" __global__ void csr_residual_f64(u64 n, const u64 *row_ptr, const u32 *col_idx,
                                            const double *values, const double *b,
                                            const double *x, double *r, u32 cols) {
  csr_residual(n, row_ptr, col_idx, values, b, x, r, cols);
}

#define REFINE_ENTRY(name, T)                                                                     \
  extern "C" __global__ void csr_refine_update_##name(u64 n, const u64 *row_ptr,                  \
                                                      const u32 *col_idx, const double *values,   \
                                                      const T *corr, const double *alpha,         \
                                                      double *x, double *r, u32 cols) {           \
    csr_refine_update<T>(n, row_ptr, col_idx, values, corr, alpha, x, r, cols);                   \
  }
FOR_STORAGE(REFINE_ENTRY)
