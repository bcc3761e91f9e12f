// Level-1 kernels and per-column reductions (VectorKernels). Blocks are column-major
// (column c at c·rows) or node-major (row r at r·cols); `node_major` says which.
//
// Per-column reductions cut each column into chunks of `chunk` rows (fixed by the
// column length alone); block (q, g) writes the partials of chunk q of the columns of
// group g, and a one-block kernel adds the partials of each column in chunk order. A group
// is COLUMN_GROUP neighbouring columns of a node-major block (a thread reads a row's
// entries of them together instead of one entry every `cols`) and one column of a
// column-major block. Thread t adds rows first + t, first + t + blockDim.x, … of each
// column in that order, and the block adds the threads' sums in one tree: a column's
// partials are the same bits in every layout and beside any other columns.

__device__ __forceinline__ u64 block_index(u64 r, u32 c, u64 rows, u32 cols, u32 node_major) {
  return node_major ? r * cols + c : (u64)c * rows + r;
}

// Columns per group of a per-column reduction (host: launch::column_groups).
__device__ __forceinline__ u32 group_width(u32 node_major) { return node_major ? COLUMN_GROUP : 1; }

template <typename T> __device__ void fill(T *x, u64 n, double value) {
  T v = store<T>(value);
  FOR_EACH(i, n) x[i] = v;
}

template <typename A, typename B> __device__ void convert(const A *src, B *dst, u64 n) {
  FOR_EACH(i, n) dst[i] = store<B>((double)widen(src[i]));
}

template <typename T> __device__ void axpby(u64 n, double alpha, const T *x, double beta, T *y) {
  typedef typename ComputeOf<T>::type C;
  C a = (C)alpha, b = (C)beta;
  FOR_EACH(i, n) y[i] = store_c(a * widen(x[i]) + b * widen(y[i]), (T *)0);
}

template <typename T> __device__ void scale(u64 n, double alpha, T *x) {
  typedef typename ComputeOf<T>::type C;
  C a = (C)alpha;
  FOR_EACH(i, n) x[i] = store_c(a * widen(x[i]), (T *)0);
}

template <typename T> __device__ void shift(u64 n, double value, T *x) {
  typedef typename ComputeOf<T>::type C;
  C v = (C)value;
  FOR_EACH(i, n) x[i] = store_c(widen(x[i]) + v, (T *)0);
}

template <typename T>
__device__ void scaled_product(u64 n, double alpha, const T *d, const T *x, T *y) {
  typedef typename ComputeOf<T>::type C;
  C a = (C)alpha;
  FOR_EACH(i, n) y[i] = store_c(a * widen(d[i]) * widen(x[i]), (T *)0);
}

template <typename T>
__device__ void scaled_product_add(u64 n, double alpha, const T *d, const T *x, const T *z, T *y) {
  typedef typename ComputeOf<T>::type C;
  C a = (C)alpha;
  FOR_EACH(i, n) y[i] = store_c(widen(y[i]) + a * widen(d[i]) * (widen(x[i]) - widen(z[i])), (T *)0);
}

template <typename T>
__device__ void column_axpby(const double *alpha, const T *x, const double *beta, T *y, u64 rows,
                             u32 cols, u32 node_major) {
  typedef typename ComputeOf<T>::type C;
  FOR_EACH(i, rows * (u64)cols) {
    u32 c = node_major ? (u32)(i % cols) : (u32)(i / rows);
    y[i] = store_c((C)alpha[c] * widen(x[i]) + (C)beta[c] * widen(y[i]), (T *)0);
  }
}

template <typename A, typename B>
__device__ void relayout(const A *src, B *dst, u64 rows, u32 cols, u32 src_node_major) {
  FOR_EACH(i, rows * (u64)cols) {
    // dst is in the other layout: i indexes dst.
    u64 r = src_node_major ? i % rows : i / cols;
    u32 c = src_node_major ? (u32)(i / rows) : (u32)(i % cols);
    dst[i] = store<B>((double)widen(src[block_index(r, c, rows, cols, src_node_major)]));
  }
}

// The block's (Σ v², max |v|, out-of-range flag) of each of the w columns from c0 on, from
// each thread's sums, written as triples at part[3·(c·chunks + q)].
__device__ __forceinline__ void write_group_stats(const double *sum, const double *largest, u32 w,
                                                  u32 c0, u64 q, u32 chunks, double limit,
                                                  double *part, double *shared) {
#pragma unroll
  for (u32 j = 0; j < COLUMN_GROUP; ++j) {
    if (j < w) {
      double s = block_sum(sum[j], shared), m = block_max(largest[j], shared);
      if (threadIdx.x == 0) {
        double *p = part + 3 * ((u64)(c0 + j) * chunks + q);
        p[0] = s;
        p[1] = m;
        p[2] = (isnan(s) || m > limit) ? 1.0 : 0.0;
      }
    }
  }
}

// Partial statistics (Σ v², max |v|, out-of-range flag) of chunk q = blockIdx.x of each
// column, written as triples at part[3·(c·chunks + q)].
template <typename T>
__device__ void column_stats(const T *x, u64 rows, u32 cols, u32 node_major, u64 chunk, u32 chunks,
                             double limit, double *part) {
  __shared__ double shared[REDUCE_THREADS];
  u64 q = blockIdx.x, first = q * chunk, last = min(first + chunk, rows);
  u32 width = group_width(node_major);
  for (u32 c0 = blockIdx.y * width; c0 < cols; c0 += gridDim.y * width) {
    u32 w = min(width, cols - c0);
    double sum[COLUMN_GROUP], largest[COLUMN_GROUP];
#pragma unroll
    for (u32 j = 0; j < COLUMN_GROUP; ++j) sum[j] = largest[j] = 0.0;
    for (u64 r = first + threadIdx.x; r < last; r += blockDim.x) {
#pragma unroll
      for (u32 j = 0; j < COLUMN_GROUP; ++j) {
        if (j < w) {
          double a = fabs((double)widen(x[block_index(r, c0 + j, rows, cols, node_major)]));
          sum[j] += a * a;
          largest[j] = fmax(largest[j], a);
        }
      }
    }
    write_group_stats(sum, largest, w, c0, q, chunks, limit, part, shared);
  }
}

// dst = src / scale_c (a zero scale gives zero), computed in f64 and rounded to B's compute
// precision, with the partial statistics of those values (before rounding to B).
template <typename A, typename B>
__device__ void scale_columns(const A *src, const double *scale, B *dst, u64 rows, u32 cols,
                              u32 node_major, u64 chunk, u32 chunks, double limit, double *part) {
  typedef typename ComputeOf<B>::type C;
  __shared__ double shared[REDUCE_THREADS];
  u64 q = blockIdx.x, first = q * chunk, last = min(first + chunk, rows);
  u32 width = group_width(node_major);
  for (u32 c0 = blockIdx.y * width; c0 < cols; c0 += gridDim.y * width) {
    u32 w = min(width, cols - c0);
    double inverse[COLUMN_GROUP], sum[COLUMN_GROUP], largest[COLUMN_GROUP];
#pragma unroll
    for (u32 j = 0; j < COLUMN_GROUP; ++j) {
      inverse[j] = j < w && scale[c0 + j] > 0.0 ? 1.0 / scale[c0 + j] : 0.0;
      sum[j] = largest[j] = 0.0;
    }
    for (u64 r = first + threadIdx.x; r < last; r += blockDim.x) {
#pragma unroll
      for (u32 j = 0; j < COLUMN_GROUP; ++j) {
        if (j < w) {
          u64 i = block_index(r, c0 + j, rows, cols, node_major);
          C o = (C)((double)widen(src[i]) * inverse[j]);
          double a = fabs((double)o);
          sum[j] += a * a;
          largest[j] = fmax(largest[j], a);
          dst[i] = store_c(o, (B *)0);
        }
      }
    }
    write_group_stats(sum, largest, w, c0, q, chunks, limit, part, shared);
  }
}

// Partial x_c · y_c of chunk q of each column, at part[c·chunks + q]. With one column it
// is the partial dot product of two vectors.
template <typename T>
__device__ void column_dots(const T *x, const T *y, u64 rows, u32 cols, u32 node_major, u64 chunk,
                            u32 chunks, double *part) {
  __shared__ double shared[REDUCE_THREADS];
  u64 q = blockIdx.x, first = q * chunk, last = min(first + chunk, rows);
  u32 width = group_width(node_major);
  for (u32 c0 = blockIdx.y * width; c0 < cols; c0 += gridDim.y * width) {
    u32 w = min(width, cols - c0);
    double sum[COLUMN_GROUP];
#pragma unroll
    for (u32 j = 0; j < COLUMN_GROUP; ++j) sum[j] = 0.0;
    for (u64 r = first + threadIdx.x; r < last; r += blockDim.x) {
#pragma unroll
      for (u32 j = 0; j < COLUMN_GROUP; ++j) {
        if (j < w) {
          u64 i = block_index(r, c0 + j, rows, cols, node_major);
          sum[j] += (double)widen(x[i]) * (double)widen(y[i]);
        }
      }
    }
#pragma unroll
    for (u32 j = 0; j < COLUMN_GROUP; ++j) {
      if (j < w) {
        double s = block_sum(sum[j], shared);
        if (threadIdx.x == 0) part[(u64)(c0 + j) * chunks + q] = s;
      }
    }
  }
}

// Partial Σ x of chunk q = blockIdx.x, at part[q].
template <typename T> __device__ void sum_partials(const T *x, u64 n, u64 chunk, double *part) {
  __shared__ double shared[REDUCE_THREADS];
  u64 q = blockIdx.x, first = q * chunk, last = min(first + chunk, n);
  double sum = 0.0;
  for (u64 r = first + threadIdx.x; r < last; r += blockDim.x) sum += (double)widen(x[r]);
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) part[q] = sum;
}

#define VECTOR_ENTRIES(name, T)                                                                   \
  extern "C" __global__ void fill_##name(T *x, u64 n, double v) { fill<T>(x, n, v); }            \
  extern "C" __global__ void axpby_##name(u64 n, double a, const T *x, double b, T *y) {         \
    axpby<T>(n, a, x, b, y);                                                                      \
  }                                                                                               \
  extern "C" __global__ void scale_##name(u64 n, double a, T *x) { scale<T>(n, a, x); }          \
  extern "C" __global__ void shift_##name(u64 n, double v, T *x) { shift<T>(n, v, x); }          \
  extern "C" __global__ void scaled_product_##name(u64 n, double a, const T *d, const T *x,       \
                                                   T *y) {                                        \
    scaled_product<T>(n, a, d, x, y);                                                             \
  }                                                                                               \
  extern "C" __global__ void scaled_product_add_##name(u64 n, double a, const T *d, const T *x,   \
                                                       const T *z, T *y) {                        \
    scaled_product_add<T>(n, a, d, x, z, y);                                                      \
  }                                                                                               \
  extern "C" __global__ void column_axpby_##name(const double *a, const T *x, const double *b,    \
                                                 T *y, u64 rows, u32 cols, u32 node_major) {      \
    column_axpby<T>(a, x, b, y, rows, cols, node_major);                                          \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS) column_stats_##name(               \
      const T *x, u64 rows, u32 cols, u32 node_major, u64 chunk, u32 chunks, double limit,        \
      double *part) {                                                                             \
    column_stats<T>(x, rows, cols, node_major, chunk, chunks, limit, part);                       \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS) column_dots_##name(                \
      const T *x, const T *y, u64 rows, u32 cols, u32 node_major, u64 chunk, u32 chunks,          \
      double *part) {                                                                             \
    column_dots<T>(x, y, rows, cols, node_major, chunk, chunks, part);                            \
  }
FOR_STORAGE(VECTOR_ENTRIES)

// Sums run in f32 and f64 only (as on the CPU).
#define SUM_ENTRY(name, T)                                                                        \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS) sum_partials_##name(               \
      const T *x, u64 n, u64 chunk, double *part) {                                               \
    sum_partials<T>(x, n, chunk, part);                                                           \
  }
SUM_ENTRY(f32, float)
SUM_ENTRY(f64, double)

// Copies between equal precisions are plain device copies.
#define CONVERT_ENTRY(an, A, bn, B)                                                               \
  extern "C" __global__ void convert_##an##_##bn(const A *src, B *dst, u64 n) {                   \
    convert<A, B>(src, dst, n);                                                                   \
  }
FOR_DISTINCT_PAIRS(CONVERT_ENTRY)

// Named `<op>_<a>_<b>`, or `<op>_<a>` where both precisions are the same (kernel_name).
#define PAIR_ENTRIES(suffix, A, B)                                                                \
  extern "C" __global__ void relayout_##suffix(const A *src, B *dst, u64 rows, u32 cols,          \
                                               u32 src_node_major) {                              \
    relayout<A, B>(src, dst, rows, cols, src_node_major);                                         \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS) scale_columns_##suffix(            \
      const A *src, const double *scale, B *dst, u64 rows, u32 cols, u32 node_major, u64 chunk,   \
      u32 chunks, double limit, double *part) {                                                   \
    scale_columns<A, B>(src, scale, dst, rows, cols, node_major, chunk, chunks, limit, part);     \
  }
#define DISTINCT_PAIR_ENTRIES(an, A, bn, B) PAIR_ENTRIES(an##_##bn, A, B)
#define SAME_PAIR_ENTRIES(name, T) PAIR_ENTRIES(name, T, T)
FOR_DISTINCT_PAIRS(DISTINCT_PAIR_ENTRIES)
FOR_STORAGE(SAME_PAIR_ENTRIES)

// The reduced statistics of `cols` columns from their chunk triples: Σ v² from `sums`,
// max from `maxima` (the same triples, or those of another block, as in the refinement
// update), and the flag of either; written as out[0..cols), out[cols..2·cols), out[2·cols].
// One block, a warp per column: lane l adds chunks l, l + 32, … in turn, then the lanes are
// added in a fixed shuffle tree, so the order depends on the number of chunks alone. (A
// thread per column, adding 2048 chunks one after the other, took 0.3 ms on an H200: most
// of a multigrid kernel's time with one column.)
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
    stats_reduce(const double *sums, const double *maxima, u32 cols, u32 chunks, double *out) {
  int flag = 0;
  u32 lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (u32 c = threadIdx.x / 32; c < cols; c += warps) {
    double sum = 0.0, largest = 0.0;
    for (u32 q = lane; q < chunks; q += 32) {
      u64 t = 3 * ((u64)c * chunks + q);
      sum += sums[t];
      largest = fmax(largest, maxima[t + 1]);
      flag |= sums[t + 2] != 0.0 || maxima[t + 2] != 0.0;
    }
    for (u32 s = 16; s > 0; s >>= 1) {
      sum += __shfl_down_sync(0xffffffffu, sum, s);
      largest = fmax(largest, __shfl_down_sync(0xffffffffu, largest, s));
    }
    if (lane == 0) {
      out[c] = sum;
      out[cols + c] = largest;
    }
  }
  flag = __syncthreads_or(flag);
  if (threadIdx.x == 0) out[2 * (u64)cols] = flag ? 1.0 : 0.0;
}

// out[c] = Σ_q part[c·chunks + q] in chunk order. One block.
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
    sums_reduce(const double *part, u32 cols, u32 chunks, double *out) {
  for (u32 c = threadIdx.x; c < cols; c += blockDim.x) {
    double sum = 0.0;
    for (u32 q = 0; q < chunks; q++) sum += part[(u64)c * chunks + q];
    out[c] = sum;
  }
}

// Block CG's per-column scalars on the device (device/cg.rs: the layout, and the same
// logic on the host): s[slot·k + c] for the slots ALPHA 0, ONES 1, MINUS_ALPHA 2, BETA 3,
// RR 4, RR_NEW 5, PQ 6, TARGET 7, ACTIVE 8, then s[9k] the iterations counted. Step 0
// starts (targets, flags, ones, count), 1 forms α (counting the iteration if any column is
// active), 2 forms β. One block.
extern "C" __global__ void cg_scalars(double *s, u32 k, u32 step, double tolerance, u32 relative,
                                      double unit_roundoff) {
  __shared__ int any;
  if (threadIdx.x == 0) any = 0;
  __syncthreads();
  for (u32 c = threadIdx.x; c < k; c += blockDim.x) {
    double *alpha = s + c, *ones = s + k + c, *minus_alpha = s + 2 * k + c, *beta = s + 3 * k + c;
    double *rr = s + 4 * k + c, *rr_new = s + 5 * k + c, *pq = s + 6 * k + c;
    double *target = s + 7 * k + c, *active = s + 8 * k + c;
    if (step == 0) {
      double b_norm = sqrt(*rr);
      double wanted = relative ? tolerance * b_norm : tolerance;
      double floor = 10.0 * unit_roundoff * b_norm;
      *target = wanted > floor ? wanted : floor;
      *active = b_norm > *target ? 1.0 : 0.0;
      *ones = 1.0;
    } else if (step == 1) {
      if (*active != 0.0) any = 1;
      bool on = *active != 0.0 && *pq > 0.0 && isfinite(*pq);
      double a = on ? *rr / *pq : 0.0;
      *active = on ? 1.0 : 0.0;
      *alpha = a;
      *minus_alpha = -a;
    } else {
      bool on = *active != 0.0;
      *beta = on ? *rr_new / *rr : 0.0;
      *active = on && sqrt(*rr_new) > *target ? 1.0 : 0.0;
      *rr = *rr_new;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (step == 0) s[9 * (u64)k] = 0.0;
    if (step == 1 && any) s[9 * (u64)k] += 1.0;
  }
}
