// The single-right-hand-side products for a column-major A in storage precision S, x and y
// in its compute precision C (DenseKernels::gemv and ::symv); products of blocks go to
// cuBLAS.

// y = A x in two passes, so that a short and wide A (B: |C| × |E|) spreads over the GPU:
// block (q, s) sums rows q·blockDim… over the `slice` columns of slice s (consecutive
// threads read consecutive entries of a column) into partial[s·rows + row] in f64, then
// gemv_reduce adds each row's slices in order. The slices depend on the shape alone: the
// same sums for any launch.
template <typename S, typename C>
__device__ void gemv_partial(const S *a, u64 lda, u32 rows, u32 cols, const C *x, double *partial,
                             u32 slice) {
  const u32 slices = (cols + slice - 1) / slice;
  for (u32 s = blockIdx.y; s < slices; s += gridDim.y) {
    const u32 first = s * slice, end = min(cols, first + slice);
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += gridDim.x * blockDim.x) {
      C sum = 0;
#pragma unroll 8
      for (u32 j = first; j < end; j++) sum += (C)widen(a[i + (u64)j * lda]) * x[j];
      partial[(u64)s * rows + i] = (double)sum;
    }
  }
}

template <typename C>
__device__ void gemv_reduce(const double *partial, u32 rows, u32 slices, C *y) {
  FOR_EACH(i, (u64)rows) {
    double sum = 0;
    for (u32 s = 0; s < slices; s++) sum += partial[(u64)s * rows + i];
    y[i] = (C)sum;
  }
}

// y = A x for a symmetric n×n A, as y_j = (column j of A) · x: a warp takes SYMV_COLUMNS
// neighbouring columns, so each chunk of x it loads serves all of them (with one column per
// warp, an f16 matrix made the warps read twice as many bytes of x from L2 as of A), and
// streams them with 16-byte loads where `vectorized` (every column starts 16-byte aligned),
// SYMV_COLUMNS loads in flight per lane. Each lane sums its entries of a column in index
// order and the warp adds the lanes in a fixed tree: the same result on every run, for any
// grid.
#define SYMV_COLUMNS 4
template <typename S, typename C>
__device__ void symv(const S *a, u64 lda, u32 n, const C *x, C *y, u32 vectorized) {
  const u32 lane = threadIdx.x & 31;
  const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
  const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  for (u64 first = warp * SYMV_COLUMNS; first < n; first += warps * SYMV_COLUMNS) {
    const u32 count = (u32)min((u64)SYMV_COLUMNS, (u64)n - first);
    const S *col = a + first * lda;
    C sum[SYMV_COLUMNS];
#pragma unroll
    for (u32 t = 0; t < SYMV_COLUMNS; t++) sum[t] = 0;
    u32 done = 0;
    if (vectorized) {
      const u32 per = 16 / sizeof(S);
      const u32 vectors = n / per;
      for (u32 v = lane; v < vectors; v += 32) {
        C xs[16 / sizeof(S)];
#pragma unroll
        for (u32 q = 0; q < per; q++) xs[q] = x[v * per + q];
#pragma unroll
        for (u32 t = 0; t < SYMV_COLUMNS; t++) {
          if (t < count) {
            union {
              uint4 raw;
              S e[16 / sizeof(S)];
            } u;
            u.raw = __ldg(reinterpret_cast<const uint4 *>(col + t * lda) + v);
#pragma unroll
            for (u32 q = 0; q < per; q++) sum[t] += (C)widen(u.e[q]) * xs[q];
          }
        }
      }
      done = vectors * per;
    }
    for (u32 i = done + lane; i < n; i += 32) {
      const C xi = x[i];
#pragma unroll
      for (u32 t = 0; t < SYMV_COLUMNS; t++)
        if (t < count) sum[t] += (C)widen(col[t * lda + i]) * xi;
    }
#pragma unroll
    for (u32 t = 0; t < SYMV_COLUMNS; t++) {
#pragma unroll
      for (u32 offset = 16; offset > 0; offset >>= 1)
        sum[t] += __shfl_down_sync(0xffffffffu, sum[t], offset);
      if (lane == 0 && t < count) y[first + t] = sum[t];
    }
  }
}

#define DENSE_ENTRIES(name, S, C)                                                                 \
  extern "C" __global__ void gemv_partial_##name(const S *a, u64 lda, u32 rows, u32 cols,         \
                                                 const C *x, double *partial, u32 slice) {        \
    gemv_partial<S, C>(a, lda, rows, cols, x, partial, slice);                                    \
  }                                                                                               \
  extern "C" __global__ void symv_##name(const S *a, u64 lda, u32 n, const C *x, C *y,            \
                                         u32 vectorized) {                                        \
    symv<S, C>(a, lda, n, x, y, vectorized);                                                      \
  }
DENSE_ENTRIES(f16_f32, __half, float)
DENSE_ENTRIES(f32, float, float)
DENSE_ENTRIES(f64, double, double)

#define GEMV_REDUCE_ENTRY(name, C)                                                                \
  extern "C" __global__ void gemv_reduce_##name(const double *partial, u32 rows, u32 slices,      \
                                                C *y) {                                           \
    gemv_reduce<C>(partial, rows, slices, y);                                                     \
  }
GEMV_REDUCE_ENTRY(f32, float)
GEMV_REDUCE_ENTRY(f64, double)
