// The single-right-hand-side products for a column-major A in storage precision S, x and y
// in its compute precision C (DenseKernels::gemv and ::symv); products of blocks go to
// cuBLAS.

// y = A x: one pass over A, one thread per row (consecutive threads read consecutive
// entries of a column), sums in column order.
template <typename S, typename C>
__device__ void gemv(const S *a, u64 lda, u32 rows, u32 cols, const C *x, C *y) {
  FOR_EACH(i, (u64)rows) {
    C sum = 0;
    for (u32 j = 0; j < cols; j++) sum += (C)widen(a[i + (u64)j * lda]) * x[j];
    y[i] = sum;
  }
}

// y = A x for a symmetric n×n A, as y_j = (column j of A) · x: one warp per column, so a
// warp streams one contiguous column (16-byte loads where `vectorized`: every column
// starts 16-byte aligned) and every thread has many loads in flight. Each lane sums its
// entries in index order and the warp adds the lanes in a fixed tree: the same result on
// every run.
template <typename S, typename C>
__device__ void symv(const S *a, u64 lda, u32 n, const C *x, C *y, u32 vectorized) {
  const u32 lane = threadIdx.x & 31;
  const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
  for (u64 j = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; j < n; j += warps) {
    const S *col = a + j * lda;
    C sum = 0;
    u32 done = 0;
    if (vectorized) {
      const u32 per = 16 / sizeof(S);
      const u32 vectors = n / per;
      const uint4 *packed = reinterpret_cast<const uint4 *>(col);
      for (u32 v = lane; v < vectors; v += 32) {
        union {
          uint4 raw;
          S e[16 / sizeof(S)];
        } u;
        u.raw = __ldg(packed + v);
#pragma unroll
        for (u32 q = 0; q < per; q++) sum += (C)widen(u.e[q]) * x[v * per + q];
      }
      done = vectors * per;
    }
    for (u32 i = done + lane; i < n; i += 32) sum += (C)widen(col[i]) * x[i];
#pragma unroll
    for (u32 offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) y[j] = sum;
  }
}

#define DENSE_ENTRIES(name, S, C)                                                                 \
  extern "C" __global__ void gemv_##name(const S *a, u64 lda, u32 rows, u32 cols, const C *x,     \
                                         C *y) {                                                  \
    gemv<S, C>(a, lda, rows, cols, x, y);                                                         \
  }                                                                                               \
  extern "C" __global__ void symv_##name(const S *a, u64 lda, u32 n, const C *x, C *y,            \
                                         u32 vectorized) {                                        \
    symv<S, C>(a, lda, n, x, y, vectorized);                                                      \
  }
DENSE_ENTRIES(f16_f32, __half, float)
DENSE_ENTRIES(f32, float, float)
DENSE_ENTRIES(f64, double, double)
