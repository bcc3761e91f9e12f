// Geometric multigrid on node-major blocks (MultigridKernels): entry (i, c) of an N × nrhs
// block at i·nrhs + c. ELLPACK matrices are slot-major (entry s of row r at s·N + r, the
// diagonal in slot 0), so a warp's rows read one coalesced run per slot.
//
// Every kernel runs a thread per (row, column) in blocks of (cw, 256/cw) threads: cw
// columns (the block's lanes along x, a power of two ≤ 32) times 256/cw rows, block
// (q, t) for columns t·cw… With 32 or more columns a warp reads one row's 32 consecutive
// columns; with one column it reads 32 consecutive rows. Each kernel fuses the statistics
// of what it stores: Σ v², max |v| and the range flag per column, as the triple of chunk q
// (gridDim.x chunks, fixed by the number of rows alone), added up in chunk order by
// stats_reduce. Σ v² is summed in one order for every launch width (canonical_rows), so a
// column's statistics, and the refinement scales taken from them, are bitwise the same
// alone and inside a block of any width, run after run.
// Σ v², max |v| and the range flag of one thread's values of its column.
struct ColumnRecord {
  double sum, largest;
  int flag;
  __device__ ColumnRecord() : sum(0.0), largest(0.0), flag(0) {}
  // Adds a stored value's square and the magnitude the maximum and the limit apply to (a
  // value whose magnitude is NaN or above `limit` flags the block).
  __device__ void add(double square, double magnitude, double limit) {
    sum += square;
    largest = fmax(largest, magnitude);
    flag |= isnan(square) || isnan(magnitude) || magnitude > limit;
  }
  __device__ void add(double v, double limit) {
    double a = fabs(v);
    add(a * a, a, limit);
  }
};

// Runs body(row, record) for this thread's column and rows and writes the column's chunk
// triple part[3·(c·gridDim.x + blockIdx.x)…]. Every thread of the block calls it.
//
// The canonical order of Σ v²: chunk q has 256 virtual lanes; lane v sums rows
// q·256 + v + k·256·gridDim.x for k = 0, 1, … in turn, and the lanes are added in one
// pairwise tree (v += v + s for v < s, s = 128, 64, …, 1). With cw columns a block has
// h = 256/cw threads along the rows and thread y holds lanes y + j·h, j < cw: the tree's
// stages s ≥ h pair lanes of one thread (j with j + s/h), the later ones lanes of two
// threads. The thread takes its lanes in bit-reversed order of j, so that those first
// stages add neighbours in turn: a running pairwise sum with one pending value per level
// (in shared memory, the thread's own slots), and no barrier until the last stages, which
// are write_record's tree of before. The maximum and the flag need no order.
template <typename Body>
__device__ __forceinline__ void canonical_rows(u32 n, u32 nrhs, double *part, const Body &body) {
  __shared__ double pending[6 * REDUCE_THREADS];
  __shared__ double lanes[REDUCE_THREADS];
  __shared__ double maxima[REDUCE_THREADS];
  u32 cw = blockDim.x, height = blockDim.y, x = threadIdx.x, y = threadIdx.y;
  u32 c = blockIdx.y * cw + x, me = y * cw + x, bits = __ffs(cw) - 1;
  // Rows are below 2³¹ and the stride at most 2048 · 256 (the host checks both), so a
  // 32-bit row cannot wrap.
  u32 stride = gridDim.x * REDUCE_THREADS;
  ColumnRecord record;
  for (u32 i = 0; i < cw; i++) {
    u32 j = bits ? __brev(i) >> (32 - bits) : 0;
    record.sum = 0.0;
    // Two rows per trip: the bodies read what the kernel does not write through __ldg, so
    // the second row's loads may start before the first row's stores (one row in flight
    // per thread left the kernels waiting on memory); the rows' order is unchanged.
    if (c < nrhs) {
#pragma unroll 2
      for (u32 row = blockIdx.x * REDUCE_THREADS + j * height + y; row < n; row += stride)
        body(row, record);
    }
    double v = record.sum;
    u32 level = 0;
    for (; (i >> level) & 1; level++) v = pending[level * REDUCE_THREADS + me] + v;
    pending[level * REDUCE_THREADS + me] = v;
  }
  lanes[me] = pending[bits * REDUCE_THREADS + me];
  maxima[me] = record.largest;
  int any = __syncthreads_or(record.flag);
  for (u32 s = height / 2; s > 0; s >>= 1) {
    if (y < s) {
      lanes[me] += lanes[me + s * cw];
      maxima[me] = fmax(maxima[me], maxima[me + s * cw]);
    }
    __syncthreads();
  }
  if (y == 0 && c < nrhs) {
    double *p = part + 3 * ((u64)c * gridDim.x + blockIdx.x);
    p[0] = lanes[x];
    p[1] = maxima[x];
    p[2] = any ? 1.0 : 0.0;
  }
}

// What a sweep computes from a row's A x (device::RowOp).
#define OP_APPLY 0u
#define OP_RESIDUAL 1u
#define OP_JACOBI 2u
// x + μ (x − x_prev) + (ω / a_ii)(b − A x), x_prev read from `out` before it is written.
#define OP_CHEBYSHEV 3u
// The same with x_prev = 0.
#define OP_CHEBYSHEV_FROM_ZERO 4u
// ω A x: A a smoother's preconditioner M, x the right-hand side (the first step from zero).
#define OP_SCALED 5u
// b + μ (b − b_prev) + ω A x: A a smoother's M, x the residual of the iterate b, b_prev read
// from `out` before it is written.
#define OP_CORRECTION 6u
// The same with b_prev = 0.
#define OP_CORRECTION_FROM_ZERO 7u

// Where a row's entries are: entry s of row `row` at values[s·n + row], its column read
// from the ELLPACK's index array ...
struct IndexedRows {
  u32 n, width;
  const u32 *cols;
  // Calls f(s, position of entry s, its column) for the row's slots in order.
  template <typename F> __device__ __forceinline__ void each(u32 row, F f) const {
    for (u32 s = 0; s < width; s++) {
      u64 k = (u64)s * n + row;
      f(s, k, __ldg(&cols[k]));
    }
  }
};

// ... or computed from the row's point of a uniform grid (DIM = 2 or 3, m points per
// direction, x fastest): slot 0 the point itself, then its neighbours inside the grid in
// increasing index order, which is where the ELLPACK holds them (the host checks it before
// dropping the indices). The padding slots after them (value 0) are not visited.
template <int DIM> struct GridRows {
  u32 n, m;
  template <typename F> __device__ __forceinline__ void each(u32 row, F f) const {
    u32 i = row % m, j = (row / m) % m, k = DIM == 3 ? row / (m * m) : 0;
    f(0u, (u64)row, row);
    u32 s = 1;
#pragma unroll
    for (int t = 0; t < (DIM == 3 ? 27 : 9); t++) {
      int dx = t % 3 - 1, dy = (t / 3) % 3 - 1, dz = DIM == 3 ? t / 9 - 1 : 0;
      if (dx == 0 && dy == 0 && dz == 0) continue;
      bool outside = (dx < 0 && i == 0) || (dx > 0 && i + 1 == m) || (dy < 0 && j == 0) ||
                     (dy > 0 && j + 1 == m) || (dz < 0 && k == 0) || (dz > 0 && k + 1 == m);
      if (outside) continue;
      f(s, (u64)s * n + row, (u32)((int)row + dx + dy * (int)m + dz * (int)(m * m)));
      s++;
    }
  }
};

// One pass over A (values in S, computed in S's compute precision C, entries where `rows`
// says) with the block x: out = A x, b − A x, x + (ω / a_ii)(b − A x), the Chebyshev
// step x + μ (x − x_prev) + (ω / a_ii)(b − A x), or with A a smoother's preconditioner
// ω A x and b + μ (b − b_prev) + ω A x.
template <typename S, typename Rows>
__device__ void sweep(const Rows &rows, u32 n, const S *values, u32 op, double omega,
                      double momentum, const S *x, const S *b, S *out, u32 nrhs, double limit,
                      double *part) {
  typedef typename ComputeOf<S>::type C;
  u32 c = blockIdx.y * blockDim.x + threadIdx.x;
  C w = (C)omega, mu = (C)momentum;
  canonical_rows(n, nrhs, part, [=](u32 row, ColumnRecord &record) {
    C even = 0, odd = 0;
    rows.each(row, [&](u32 s, u64 k, u32 col) {
      C product = (C)widen(__ldg(&values[k])) * (C)widen(__ldg(&x[(u64)col * nrhs + c]));
      if (s & 1)
        odd += product;
      else
        even += product;
    });
    C ax = even + odd;
    u64 own = (u64)row * nrhs + c;
    C o = ax;
    if (op == OP_RESIDUAL) {
      o = (C)widen(__ldg(&b[own])) - ax;
    } else if (op == OP_JACOBI) {
      C diagonal = (C)widen(__ldg(&values[row]));
      o = (C)widen(__ldg(&x[own])) + w / diagonal * ((C)widen(__ldg(&b[own])) - ax);
    } else if (op == OP_CHEBYSHEV || op == OP_CHEBYSHEV_FROM_ZERO) {
      C diagonal = (C)widen(__ldg(&values[row]));
      C mine = (C)widen(__ldg(&x[own]));
      C previous = op == OP_CHEBYSHEV ? (C)widen(out[own]) : (C)0;
      o = mine + mu * (mine - previous) + w / diagonal * ((C)widen(__ldg(&b[own])) - ax);
    } else if (op == OP_SCALED) {
      o = w * ax;
    } else if (op == OP_CORRECTION || op == OP_CORRECTION_FROM_ZERO) {
      C iterate = (C)widen(__ldg(&b[own]));
      C previous = op == OP_CORRECTION ? (C)widen(out[own]) : (C)0;
      o = iterate + mu * (iterate - previous) + w * ax;
    }
    record.add((double)o, limit);
    out[own] = store_c(o, (S *)0);
  });
}

// The first damped Jacobi step from x = 0: out = (ω / d) b, d the stored diagonal.
template <typename S>
__device__ void ell_jacobi_from_zero(u32 n, const S *diagonal, double omega, const S *b, S *out,
                                     u32 nrhs, double limit, double *part) {
  typedef typename ComputeOf<S>::type C;
  u32 c = blockIdx.y * blockDim.x + threadIdx.x;
  C w = (C)omega;
  canonical_rows(n, nrhs, part, [=](u32 row, ColumnRecord &record) {
    u64 own = (u64)row * nrhs + c;
    C o = w / (C)widen(__ldg(&diagonal[row])) * (C)widen(__ldg(&b[own]));
    record.add((double)o, limit);
    out[own] = store_c(o, (S *)0);
  });
}

// The refinement update u_c += α_c c_c, r_c −= α_c (A c_c) (A, u, r f64; the correction in
// T, widened as it is read). Statistics: Σ r² of the new residual, max |c| of the
// correction (no limit).
template <typename T, typename Rows>
__device__ void refine_update(const Rows &rows, u32 n, const double *values, const T *corr,
                              const double *alpha, double *u, double *r, u32 nrhs, double *part) {
  u32 c = blockIdx.y * blockDim.x + threadIdx.x;
  double a = c < nrhs ? alpha[c] : 0.0;
  canonical_rows(n, nrhs, part, [=](u32 row, ColumnRecord &record) {
    double even = 0.0, odd = 0.0;
    rows.each(row, [&](u32 s, u64 k, u32 col) {
      double product = __ldg(&values[k]) * (double)widen(__ldg(&corr[(u64)col * nrhs + c]));
      if (s & 1)
        odd += product;
      else
        even += product;
    });
    u64 own = (u64)row * nrhs + c;
    double mine = (double)widen(__ldg(&corr[own]));
    u[own] += a * mine;
    double residual = r[own] - a * (even + odd);
    r[own] = residual;
    record.add(residual * residual, fabs(mine), __longlong_as_double(0x7ff0000000000000LL));
  });
}

// Grid transfers between uniform grids of interior points (dim 2 or 3, m_f = 2·m_c + 1,
// lexicographic with x fastest). 1D restriction: coarse point a gathers fine points 2a,
// 2a + 1, 2a + 2 with weights ½, 1, ½, as ½(f₀ + f₂) + f₁ (the CPU's order; a fused
// multiply-add gives the same bits, ½(f₀ + f₂) being exact).
__device__ __forceinline__ double restrict3(double f0, double f1, double f2) {
  return 0.5 * (f0 + f2) + f1;
}

// The coarse points (index, weight) fine point i interpolates from, in the CPU's order:
// i odd: (i − 1)/2 with 1; i even: i/2 − 1 then i/2 with ½ each, where they are interior.
// Both entries are written at fixed positions (the first of a lone one holds it), so the
// caller's arrays stay in registers rather than local memory.
__device__ __forceinline__ u32 interpolation_1d(u32 i, u32 mc, u32 *index, double *weight) {
  if (i & 1) {
    index[0] = (i - 1) / 2;
    weight[0] = 1.0;
    return 1;
  }
  u32 right = i / 2;
  bool left_inside = right >= 1, right_inside = right < mc;
  index[0] = left_inside ? right - 1 : right;
  index[1] = right;
  weight[0] = weight[1] = 0.5;
  return (u32)left_inside + (u32)right_inside;
}

// coarse = factor_c · Pᵀ fine (factor_c = 1/s_c, or 0 for an inactive column), separable
// in f64 as the CPU does it: at each of the three fine points 2a + dx along x, restricted
// across planes (z, 3D), then across lines (y); then those three along x.
template <typename S, typename T>
__device__ void grid_restrict(const S *fine, T *coarse, u32 dim, u32 mc, u32 nrhs,
                              const double *factor, double limit, double *part) {
  typedef typename ComputeOf<T>::type C;
  u32 c = blockIdx.y * blockDim.x + threadIdx.x, mf = 2 * mc + 1;
  u32 points = dim == 2 ? mc * mc : mc * mc * mc;
  canonical_rows(points, nrhs, part, [=](u32 point, ColumnRecord &record) {
    u32 a = point % mc, rest = point / mc, b = rest % mc, q = dim == 2 ? 0 : rest / mc;
    u64 line = mf, plane = (u64)mf * mf;
    // Fine row of (x = 2a, y = 2b, z = 2q): 2D (2b)·m_f + 2a, 3D ((2q)·m_f + 2b)·m_f + 2a.
    u64 first = dim == 2 ? (u64)(2 * b) * mf + 2 * a : ((u64)(2 * q) * mf + 2 * b) * mf + 2 * a;
    auto at = [=](u64 row) { return (double)widen(__ldg(&fine[row * nrhs + c])); };
    double along[3];
    for (u32 dx = 0; dx < 3; dx++) {
      u64 row = first + dx;
      if (dim == 2) {
        along[dx] = restrict3(at(row), at(row + line), at(row + 2 * line));
      } else {
        double across_planes[3];
        for (u32 dy = 0; dy < 3; dy++) {
          u64 r = row + dy * line;
          across_planes[dy] = restrict3(at(r), at(r + plane), at(r + 2 * plane));
        }
        along[dx] = restrict3(across_planes[0], across_planes[1], across_planes[2]);
      }
    }
    double acc = restrict3(along[0], along[1], along[2]);
    C o = (C)(acc * factor[c]);
    record.add((double)o, limit);
    coarse[(u64)point * nrhs + c] = store_c(o, (T *)0);
  });
}

// fine += s_c · P coarse, the interpolation summed in f64 over the coarse planes, lines
// and points each fine point reads (interpolation_1d's order in z, y, x), then added to
// the fine value in f64 and rounded once.
template <typename S, typename T>
__device__ void grid_prolongate_add(const S *coarse, T *fine, u32 dim, u32 mc, u32 nrhs,
                                    const double *factor, double limit, double *part) {
  typedef typename ComputeOf<T>::type C;
  u32 c = blockIdx.y * blockDim.x + threadIdx.x, mf = 2 * mc + 1;
  u32 points = dim == 2 ? mf * mf : mf * mf * mf;
  canonical_rows(points, nrhs, part, [=](u32 point, ColumnRecord &record) {
    u32 i = point % mf, rest = point / mf, j = rest % mf, p = dim == 2 ? 0 : rest / mf;
    u32 zi[2] = {0, 0}, yi[2] = {0, 0}, xi[2] = {0, 0};
    double zw[2] = {1.0, 0.0}, yw[2] = {0.0, 0.0}, xw[2] = {0.0, 0.0};
    u32 nz = 1;
    if (dim == 3) nz = interpolation_1d(p, mc, zi, zw);
    u32 ny = interpolation_1d(j, mc, yi, yw), nx = interpolation_1d(i, mc, xi, xw);
    double acc = 0.0;
    // Fixed trip counts with the entries past the count skipped: constant indices, the
    // arrays in registers.
#pragma unroll
    for (u32 kz = 0; kz < 2; kz++) {
      if (kz >= nz) continue;
      u64 plane = (u64)zi[kz] * mc * mc;
#pragma unroll
      for (u32 ky = 0; ky < 2; ky++) {
        if (ky >= ny) continue;
        double w = dim == 2 ? yw[ky] : zw[kz] * yw[ky];
        u64 line = plane + (u64)yi[ky] * mc;
#pragma unroll
        for (u32 kx = 0; kx < 2; kx++)
          if (kx < nx)
            acc += (xw[kx] * w) * (double)widen(__ldg(&coarse[(line + xi[kx]) * nrhs + c]));
      }
    }
    u64 own = (u64)point * nrhs + c;
    C o = (C)((double)widen(fine[own]) + factor[c] * acc);
    record.add((double)o, limit);
    fine[own] = store_c(o, (T *)0);
  });
}

// dst = factor_c · M src, or dst += factor_c · M src when `keep` (M a CSR matrix of f64
// weights, rows × src rows: the restriction R or the prolongation P of a refined mesh's
// hierarchy); each row's sum in index order, in f64.
template <typename S, typename T>
__device__ void matrix_transfer(u32 rows, const u64 *row_ptr, const u32 *col_idx,
                                const double *weights, const S *src, T *dst, u32 keep, u32 nrhs,
                                const double *factor, double limit, double *part) {
  typedef typename ComputeOf<T>::type C;
  u32 c = blockIdx.y * blockDim.x + threadIdx.x;
  canonical_rows(rows, nrhs, part, [=](u32 row, ColumnRecord &record) {
    double acc = 0.0;
    for (u64 e = __ldg(&row_ptr[row]); e < __ldg(&row_ptr[row + 1]); e++)
      acc += __ldg(&weights[e]) * (double)widen(__ldg(&src[(u64)__ldg(&col_idx[e]) * nrhs + c]));
    u64 own = (u64)row * nrhs + c;
    double kept = keep ? (double)widen(dst[own]) : 0.0;
    C o = (C)(kept + factor[c] * acc);
    record.add((double)o, limit);
    dst[own] = store_c(o, (T *)0);
  });
}

// Appends to a log whether a restriction flushed an active column to zero: 1 + the first
// column whose fine statistics' largest magnitude is above zero and whose coarse one is
// below `half_tiny` (0 if none), then that magnitude. `fine` and `coarse` are reduced
// statistics (Σ v² per column, then max |v| per column). One thread: a handful of columns.
extern "C" __global__ void flushed_column(const double *fine, const double *coarse, u32 cols,
                                          double half_tiny, double *log) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double column = 0.0, largest = 0.0;
  for (u32 c = 0; c < cols; c++) {
    double f = fine[cols + c], m = coarse[cols + c];
    if (f > 0.0 && m < half_tiny) {
      column = (double)c + 1.0;
      largest = m;
      break;
    }
  }
  log[0] = column;
  log[1] = largest;
}

// grid_refine_update and ell_sweep ask for one block per multiprocessor at least (not the
// default's occupancy target): with grid_refine_update's 27-point neighbourhood in 3D, and
// with ell_sweep's two rows per trip in f64, ptxas otherwise spilled a few bytes.
#define MULTIGRID_ENTRIES(name, S)                                                                \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS, 1)                                 \
      ell_sweep_##name(u32 n, u32 width, const u32 *cols, const S *values, u32 op, double omega,  \
                       double momentum, const S *x, const S *b, S *out, u32 nrhs, double limit,   \
                       double *part) {                                                            \
    sweep<S>(IndexedRows{n, width, cols}, n, values, op, omega, momentum, x, b, out, nrhs, limit, \
             part);                                                                               \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)                                    \
      grid_sweep_##name(u32 n, u32 dim, u32 m, const S *values, u32 op, double omega,             \
                        double momentum, const S *x, const S *b, S *out, u32 nrhs, double limit,  \
                        double *part) {                                                           \
    if (dim == 3)                                                                                 \
      sweep<S>(GridRows<3>{n, m}, n, values, op, omega, momentum, x, b, out, nrhs, limit, part);  \
    else                                                                                          \
      sweep<S>(GridRows<2>{n, m}, n, values, op, omega, momentum, x, b, out, nrhs, limit, part);  \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)                                    \
      ell_jacobi_from_zero_##name(u32 n, const S *diagonal, double omega, const S *b, S *out,     \
                                  u32 nrhs, double limit, double *part) {                         \
    ell_jacobi_from_zero<S>(n, diagonal, omega, b, out, nrhs, limit, part);                       \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS) ell_refine_update_##name(          \
      u32 n, u32 width, const u32 *cols, const double *values, const S *corr,                     \
      const double *alpha, double *u, double *r, u32 nrhs, double *part) {                        \
    refine_update<S>(IndexedRows{n, width, cols}, n, values, corr, alpha, u, r, nrhs, part);      \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS, 1) grid_refine_update_##name(         \
      u32 n, u32 dim, u32 m, const double *values, const S *corr, const double *alpha, double *u, \
      double *r, u32 nrhs, double *part) {                                                        \
    if (dim == 3)                                                                                 \
      refine_update<S>(GridRows<3>{n, m}, n, values, corr, alpha, u, r, nrhs, part);              \
    else                                                                                          \
      refine_update<S>(GridRows<2>{n, m}, n, values, corr, alpha, u, r, nrhs, part);              \
  }
FOR_STORAGE(MULTIGRID_ENTRIES)

// Named `<op>_<source>_<target>`, or `<op>_<p>` where both precisions are the same.
#define TRANSFER_ENTRIES(suffix, S, T)                                                            \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)                                    \
      grid_restrict_##suffix(const S *fine, T *coarse, u32 dim, u32 mc, u32 nrhs,                 \
                             const double *factor, double limit, double *part) {                  \
    grid_restrict<S, T>(fine, coarse, dim, mc, nrhs, factor, limit, part);                        \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)                                    \
      grid_prolongate_add_##suffix(const S *coarse, T *fine, u32 dim, u32 mc, u32 nrhs,           \
                                   const double *factor, double limit, double *part) {            \
    grid_prolongate_add<S, T>(coarse, fine, dim, mc, nrhs, factor, limit, part);                  \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS) matrix_transfer_##suffix(          \
      u32 rows, const u64 *row_ptr, const u32 *col_idx, const double *weights, const S *src,      \
      T *dst, u32 keep, u32 nrhs, const double *factor, double limit, double *part) {             \
    matrix_transfer<S, T>(rows, row_ptr, col_idx, weights, src, dst, keep, nrhs, factor, limit,   \
                          part);                                                                  \
  }
#define DISTINCT_TRANSFER_ENTRIES(sn, S, tn, T) TRANSFER_ENTRIES(sn##_##tn, S, T)
#define SAME_TRANSFER_ENTRIES(name, T) TRANSFER_ENTRIES(name, T, T)
FOR_DISTINCT_PAIRS(DISTINCT_TRANSFER_ENTRIES)
FOR_STORAGE(SAME_TRANSFER_ENTRIES)
