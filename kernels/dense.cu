// The single-right-hand-side product y = A x for a column-major A in storage precision S,
// x and y in its compute precision C (DenseKernels::gemv): one pass over A, one thread per
// row (consecutive threads read consecutive entries of a column), sums in column order.
// Products of blocks go to cuBLAS.

template <typename S, typename C>
__device__ void gemv(const S *a, u64 lda, u32 rows, u32 cols, const C *x, C *y) {
  FOR_EACH(i, (u64)rows) {
    C sum = 0;
    for (u32 j = 0; j < cols; j++) sum += (C)widen(a[i + (u64)j * lda]) * x[j];
    y[i] = sum;
  }
}

#define GEMV_ENTRY(name, S, C)                                                                    \
  extern "C" __global__ void gemv_##name(const S *a, u64 lda, u32 rows, u32 cols, const C *x,     \
                                         C *y) {                                                  \
    gemv<S, C>(a, lda, rows, cols, x, y);                                                         \
  }
GEMV_ENTRY(f16_f32, __half, float)
GEMV_ENTRY(f32, float, float)
GEMV_ENTRY(f64, double, double)
