// CSR products on column-major blocks (SparseKernels): PSC's D and Dᵀ (values in the
// storage precision S, blocks in its compute precision C) and the f64 stiffness matrix of
// PSC-IR. One thread per (row, column), block (q, c) for rows q·blockDim… of column c
// (32-bit row indices, no 64-bit division); each row's sum runs in index order.

#define FOR_ROWS_AND_COLUMNS(row, c, nrows, cols)                                                 \
  for (u32 c = blockIdx.y; c < (cols); c += gridDim.y)                                            \
    for (u32 row = blockIdx.x * blockDim.x + threadIdx.x; row < (nrows); row += gridDim.x * blockDim.x)

template <typename S, typename C>
__device__ void csr_spmm(u64 nrows, const u64 *row_ptr, const u32 *col_idx, const S *values,
                         const C *x, u64 x_rows, C *y, u32 cols) {
  FOR_ROWS_AND_COLUMNS(row, c, nrows, cols) {
    const C *xc = x + (u64)c * x_rows;
    C sum = 0;
    for (u64 k = row_ptr[row]; k < row_ptr[row + 1]; k++) sum += (C)widen(values[k]) * xc[col_idx[k]];
    y[(u64)c * nrows + row] = sum;
  }
}

// r = b − A x (f64).
__device__ void csr_residual(u64 n, const u64 *row_ptr, const u32 *col_idx, const double *values,
                             const double *b, const double *x, double *r, u32 cols) {
  FOR_ROWS_AND_COLUMNS(row, c, n, cols) {
    u64 base = (u64)c * n;
    double ax = 0.0;
    for (u64 k = row_ptr[row]; k < row_ptr[row + 1]; k++) ax += values[k] * x[base + col_idx[k]];
    r[base + row] = b[base + row] - ax;
  }
}

// x_c += α_c c_c and r_c −= α_c A c_c (A, x, r f64; the correction in any precision).
template <typename T>
__device__ void csr_refine_update(u64 n, const u64 *row_ptr, const u32 *col_idx,
                                  const double *values, const T *corr, const double *alpha,
                                  double *x, double *r, u32 cols) {
  FOR_ROWS_AND_COLUMNS(row, c, n, cols) {
    u64 base = (u64)c * n;
    double ac = 0.0;
    for (u64 k = row_ptr[row]; k < row_ptr[row + 1]; k++)
      ac += values[k] * (double)widen(corr[base + col_idx[k]]);
    x[base + row] += alpha[c] * (double)widen(corr[base + row]);
    r[base + row] -= alpha[c] * ac;
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
