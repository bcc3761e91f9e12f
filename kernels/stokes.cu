// The structured Q2-Q1 Stokes kernels (StokesKernels, device/stokes.rs): the stencils L,
// Bᵀ, B and pressure stencils on the lattice and pressure grids of an n×n mesh, the FE grid
// transfers, Vanka's gather / patch products / scatter and the coarsest dense solve.
//
// Velocity lives on the lattice, (2n+1)² nodes lexicographic; pressure on the (n+1)² Q1
// vertices. Flow vectors are flat [ux | uy | p]. Operators store only their coefficients,
// row by row in a fixed window around the row's node (no column indices): lattice rows set
// by set (vertices, x-edges, y-edges, cell centres), pressure rows in one array.
//
// Stencil data is in the storage type S and vectors in its compute type C (f16 computes
// in f32). Every sum follows the CPU kernels (device/cpu/stokes.rs) step for step, and
// the host compiles with --fmad=false, so the two backends round alike: a full window sums
// one accumulator per window row, in order, then adds the rows; a window clipped by the
// boundary sums in one accumulator. Sizes are checked on the host to fit 31 bits.

#define PRESSURE_SLOT 50u
#define PATCH 51u

// A grid-stride loop over [0, n) with 32-bit indices (n < 2³¹, checked on the host).
#define FOR_EACH_U32(i, n) \
  for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

// The node set of lattice node (I, J): 0 vertex, 1 x-edge, 2 y-edge, 3 cell centre.
__device__ __forceinline__ u32 set_of(u32 i, u32 j) { return (i & 1u) + 2u * (j & 1u); }

// Position of lattice node (I, J) within its set.
__device__ __forceinline__ u32 set_row(u32 n, u32 i, u32 j) {
  return (j >> 1) * (n + 1u - (i & 1u)) + (i >> 1);
}

// Lattice node number t of the set-major order: the four node sets one after the other
// (vertices, x-edges, y-edges, cell centres), each lexicographic. Threads of a warp then
// take nodes of one set, so they run the same window shape without diverging.
__device__ __forceinline__ void lattice_node(u32 n, u32 t, u32 *i, u32 *j) {
  u32 even = n + 1, vertices = even * even, edges = n * even;
  u32 s = t < vertices ? 0u : t < vertices + edges ? 1u : t < vertices + 2 * edges ? 2u : 3u;
  u32 first = s == 0 ? 0u : s == 1 ? vertices : s == 2 ? vertices + edges : vertices + 2 * edges;
  u32 r = t - first, extent = even - (s & 1u);
  *i = 2 * (r % extent) + (s & 1u);
  *j = 2 * (r / extent) + (s >> 1);
}

// First pressure index of lattice index I's window: k − 1 for I = 2k, k for I = 2k + 1.
__device__ __forceinline__ u32 pressure_first(u32 index) {
  return (index & 1u) ? index / 2u : index / 2u - 1u;
}

// Σ c[w]·x[window] over a W×H window with corner (i0, j0) in an array of row length m.
template <typename S, int W, int H>
__device__ __forceinline__ typename ComputeOf<S>::type window_dot(const S *c, const typename ComputeOf<S>::type *x,
                                                                  u32 m, u32 i0, u32 j0) {
  typedef typename ComputeOf<S>::type C;
  C total = 0;
#pragma unroll
  for (int dj = 0; dj < H; dj++) {
    const C *row = x + (u64)(j0 + dj) * m + i0;
    C acc = 0;
#pragma unroll
    for (int di = 0; di < W; di++) acc = acc + (C)widen(c[dj * W + di]) * row[di];
    total = total + acc;
  }
  return total;
}

// window_dot of one coefficient window with two vectors (both velocity components).
template <typename S, int W, int H>
__device__ __forceinline__ void window_dot2(const S *c, const typename ComputeOf<S>::type *x,
                                            const typename ComputeOf<S>::type *y, u32 m, u32 i0,
                                            u32 j0, typename ComputeOf<S>::type *ox,
                                            typename ComputeOf<S>::type *oy) {
  typedef typename ComputeOf<S>::type C;
  C tx = 0, ty = 0;
#pragma unroll
  for (int dj = 0; dj < H; dj++) {
    u64 start = (u64)(j0 + dj) * m + i0;
    C ax = 0, ay = 0;
#pragma unroll
    for (int di = 0; di < W; di++) {
      C coefficient = (C)widen(c[dj * W + di]);
      ax = ax + coefficient * x[start + di];
      ay = ay + coefficient * y[start + di];
    }
    tx = tx + ax;
    ty = ty + ay;
  }
  *ox = tx;
  *oy = ty;
}

// Σ c·x over a w×h window with corner (i0, j0) clipped to an m×m array.
template <typename S>
__device__ typename ComputeOf<S>::type window_dot_clipped(const S *c, const typename ComputeOf<S>::type *x,
                                                          u32 m, int i0, int w, int j0, int h) {
  typedef typename ComputeOf<S>::type C;
  C acc = 0;
  for (int dj = 0; dj < h; dj++) {
    int j = j0 + dj;
    if (j < 0 || j >= (int)m) continue;
    for (int di = 0; di < w; di++) {
      int i = i0 + di;
      if (i < 0 || i >= (int)m) continue;
      acc = acc + (C)widen(c[dj * w + di]) * x[(u64)j * m + i];
    }
  }
  return acc;
}

// Lattice rows of one operator: the four sets' coefficients (picked by a select chain, so
// the pointers stay in registers instead of an indexed local array).
template <typename S> struct Sets {
  const S *a, *b, *c, *d;
  __device__ Sets(const S *a, const S *b, const S *c, const S *d) : a(a), b(b), c(c), d(d) {}
  __device__ __forceinline__ const S *set(u32 s) const { return s == 0 ? a : s == 1 ? b : s == 2 ? c : d; }
};

// Coefficients per row of the Laplacian (5×5, 3×5, 5×3, 3×3) and gradient (3×3, 2×3, 3×2,
// 2×2) windows per set.
__device__ __forceinline__ u32 laplacian_width(u32 set) {
  return (set == 0) ? 25u : (set == 3) ? 9u : 15u;
}
__device__ __forceinline__ u32 gradient_width(u32 set) {
  return (set == 0) ? 9u : (set == 3) ? 4u : 6u;
}

// (L x, L y) at interior lattice node (I, J).
template <typename S>
__device__ __forceinline__ void lattice_row2(const Sets<S> &l, u32 n, const typename ComputeOf<S>::type *x,
                                             const typename ComputeOf<S>::type *y, u32 i, u32 j,
                                             typename ComputeOf<S>::type *ox,
                                             typename ComputeOf<S>::type *oy) {
  u32 m = 2 * n + 1, s = set_of(i, j);
  const S *c = l.set(s) + (u64)set_row(n, i, j) * laplacian_width(s);
  switch (s) {
  case 0: window_dot2<S, 5, 5>(c, x, y, m, i - 2, j - 2, ox, oy); break;
  case 1: window_dot2<S, 3, 5>(c, x, y, m, i - 1, j - 2, ox, oy); break;
  case 2: window_dot2<S, 5, 3>(c, x, y, m, i - 2, j - 1, ox, oy); break;
  default: window_dot2<S, 3, 3>(c, x, y, m, i - 1, j - 1, ox, oy); break;
  }
}

// (L x) at interior lattice node (I, J).
template <typename S>
__device__ __forceinline__ typename ComputeOf<S>::type lattice_row(const Sets<S> &l, u32 n,
                                                                   const typename ComputeOf<S>::type *x, u32 i, u32 j) {
  u32 m = 2 * n + 1, s = set_of(i, j);
  const S *c = l.set(s) + (u64)set_row(n, i, j) * laplacian_width(s);
  switch (s) {
  case 0: return window_dot<S, 5, 5>(c, x, m, i - 2, j - 2);
  case 1: return window_dot<S, 3, 5>(c, x, m, i - 1, j - 2);
  case 2: return window_dot<S, 5, 3>(c, x, m, i - 2, j - 1);
  default: return window_dot<S, 3, 3>(c, x, m, i - 1, j - 1);
  }
}

// (Bᵀ p) at interior lattice node (I, J), times the operator's unit.
template <typename S>
__device__ __forceinline__ typename ComputeOf<S>::type gradient_row(const Sets<S> &bt, double scale, u32 n,
                                                                    const typename ComputeOf<S>::type *p, u32 i, u32 j) {
  typedef typename ComputeOf<S>::type C;
  u32 np = n + 1, s = set_of(i, j);
  const S *c = bt.set(s) + (u64)set_row(n, i, j) * gradient_width(s);
  u32 i0 = pressure_first(i), j0 = pressure_first(j);
  C sum;
  switch (s) {
  case 0: sum = window_dot<S, 3, 3>(c, p, np, i0, j0); break;
  case 1: sum = window_dot<S, 2, 3>(c, p, np, i0, j0); break;
  case 2: sum = window_dot<S, 3, 2>(c, p, np, i0, j0); break;
  default: sum = window_dot<S, 2, 2>(c, p, np, i0, j0); break;
  }
  return sum * (C)scale;
}

// (B u) at pressure node (i, j): 5×5 lattice windows of both components, times the unit.
template <typename S>
__device__ __forceinline__ typename ComputeOf<S>::type divergence_row(const S *bx, const S *by, double scale, u32 n,
                                                                      const typename ComputeOf<S>::type *ux,
                                                                      const typename ComputeOf<S>::type *uy, u32 i, u32 j) {
  typedef typename ComputeOf<S>::type C;
  u32 m = 2 * n + 1, np = n + 1;
  u64 row = ((u64)j * np + i) * 25;
  const S *cx = bx + row, *cy = by + row;
  C sum;
  if (i > 0 && j > 0 && i + 1 < np && j + 1 < np) {
    sum = window_dot<S, 5, 5>(cx, ux, m, 2 * i - 2, 2 * j - 2) + window_dot<S, 5, 5>(cy, uy, m, 2 * i - 2, 2 * j - 2);
  } else {
    int i0 = 2 * (int)i - 2, j0 = 2 * (int)j - 2;
    sum = window_dot_clipped<S>(cx, ux, m, i0, 5, j0, 5) + window_dot_clipped<S>(cy, uy, m, i0, 5, j0, 5);
  }
  return sum * (C)scale;
}

// (P p) at pressure node (i, j) of a pressure stencil with a W×W window centred there.
template <typename S, int W>
__device__ __forceinline__ typename ComputeOf<S>::type pressure_row(const S *rows, double scale, u32 np,
                                                                    const typename ComputeOf<S>::type *p, u32 i, u32 j) {
  typedef typename ComputeOf<S>::type C;
  const u32 reach = W / 2;
  const S *c = rows + ((u64)j * np + i) * (W * W);
  C sum;
  if (i >= reach && j >= reach && i + reach < np && j + reach < np) {
    sum = window_dot<S, W, W>(c, p, np, i - reach, j - reach);
  } else {
    sum = window_dot_clipped<S>(c, p, np, (int)i - (int)reach, W, (int)j - (int)reach, W);
  }
  return sum * (C)scale;
}

// out = A x, or b − A x where `has_b`, on flat [ux | uy | p] vectors: a thread per lattice
// node in set-major order (both velocity rows; boundary rows zero), then a thread per
// pressure node.
template <typename S>
__device__ void stokes_apply(u32 n, const S *l0, const S *l1, const S *l2, const S *l3, const S *gx0,
                             const S *gx1, const S *gx2, const S *gx3, const S *gy0, const S *gy1,
                             const S *gy2, const S *gy3, double gx_scale, double gy_scale, const S *dx,
                             const S *dy, double d_scale, const typename ComputeOf<S>::type *x,
                             const typename ComputeOf<S>::type *b, u32 has_b,
                             typename ComputeOf<S>::type *out) {
  typedef typename ComputeOf<S>::type C;
  Sets<S> l(l0, l1, l2, l3), gx(gx0, gx1, gx2, gx3), gy(gy0, gy1, gy2, gy3);
  u32 m = 2 * n + 1, np = n + 1, len = m * m;
  const C *ux = x, *uy = x + len, *p = x + 2 * (u64)len;
  FOR_EACH_U32(t, len + np * np) {
    if (t < len) {
      u32 i, j;
      lattice_node(n, t, &i, &j);
      u64 node = (u64)j * m + i;
      C ox = 0, oy = 0;
      if (i > 0 && j > 0 && i + 1 < m && j + 1 < m) {
        C lx, ly;
        lattice_row2<S>(l, n, ux, uy, i, j, &lx, &ly);
        C ax = lx + gradient_row<S>(gx, gx_scale, n, p, i, j);
        C ay = ly + gradient_row<S>(gy, gy_scale, n, p, i, j);
        ox = has_b ? b[node] - ax : ax;
        oy = has_b ? b[len + node] - ay : ay;
      }
      out[node] = ox;
      out[len + node] = oy;
    } else {
      u32 k = t - len, i = k % np, j = k / np;
      C d = divergence_row<S>(dx, dy, d_scale, n, ux, uy, i, j);
      u64 row = 2 * (u64)len + k;
      out[row] = has_b ? b[row] - d : d;
    }
  }
}

// y = L x for one velocity component (boundary rows zero).
template <typename S>
__device__ void stokes_laplacian(u32 n, const S *l0, const S *l1, const S *l2, const S *l3,
                                 const typename ComputeOf<S>::type *x, typename ComputeOf<S>::type *y) {
  Sets<S> l(l0, l1, l2, l3);
  u32 m = 2 * n + 1;
  FOR_EACH_U32(t, m * m) {
    u32 i, j;
    lattice_node(n, t, &i, &j);
    y[(u64)j * m + i] = (i > 0 && j > 0 && i + 1 < m && j + 1 < m) ? lattice_row<S>(l, n, x, i, j) : 0;
  }
}

// The velocity parts of `flow` = Bᵀ p (boundary rows zero).
template <typename S>
__device__ void stokes_gradient(u32 n, const S *gx0, const S *gx1, const S *gx2, const S *gx3, const S *gy0,
                                const S *gy1, const S *gy2, const S *gy3, double gx_scale, double gy_scale,
                                const typename ComputeOf<S>::type *p, typename ComputeOf<S>::type *flow) {
  Sets<S> gx(gx0, gx1, gx2, gx3), gy(gy0, gy1, gy2, gy3);
  u32 m = 2 * n + 1, len = m * m;
  FOR_EACH_U32(t, len) {
    u32 i, j;
    lattice_node(n, t, &i, &j);
    u64 node = (u64)j * m + i;
    bool interior = i > 0 && j > 0 && i + 1 < m && j + 1 < m;
    flow[node] = interior ? gradient_row<S>(gx, gx_scale, n, p, i, j) : 0;
    flow[len + node] = interior ? gradient_row<S>(gy, gy_scale, n, p, i, j) : 0;
  }
}

// p = B u for the velocity parts of `flow`.
template <typename S>
__device__ void stokes_divergence(u32 n, const S *dx, const S *dy, double scale,
                                  const typename ComputeOf<S>::type *flow, typename ComputeOf<S>::type *p) {
  u32 m = 2 * n + 1, np = n + 1, len = m * m;
  FOR_EACH_U32(t, np * np) {
    p[t] = divergence_row<S>(dx, dy, scale, n, flow, flow + len, t % np, t / np);
  }
}

// y = P p for a pressure stencil 3×3 or 5×5 (`width` 9 or 25) wide.
template <typename S>
__device__ void pressure_stencil(u32 np, u32 width, const S *rows, double scale,
                                 const typename ComputeOf<S>::type *p, typename ComputeOf<S>::type *y) {
  FOR_EACH_U32(t, np * np) {
    u32 i = t % np, j = t / np;
    y[t] = width == 9 ? pressure_row<S, 3>(rows, scale, np, p, i, j) : pressure_row<S, 5>(rows, scale, np, p, i, j);
  }
}

#define STENCIL_ENTRIES(name, S)                                                                            \
  extern "C" __global__ void stokes_apply_##name(                                                           \
      u32 n, const S *l0, const S *l1, const S *l2, const S *l3, const S *gx0, const S *gx1, const S *gx2,    \
      const S *gx3, const S *gy0, const S *gy1, const S *gy2, const S *gy3, double gx_scale, double gy_scale, \
      const S *dx, const S *dy, double d_scale, const ComputeOf<S>::type *x, const ComputeOf<S>::type *b,     \
      u32 has_b, ComputeOf<S>::type *out) {                                                                   \
    stokes_apply<S>(n, l0, l1, l2, l3, gx0, gx1, gx2, gx3, gy0, gy1, gy2, gy3, gx_scale, gy_scale, dx, dy,    \
                    d_scale, x, b, has_b, out);                                                               \
  }                                                                                                         \
  extern "C" __global__ void stokes_laplacian_##name(u32 n, const S *l0, const S *l1, const S *l2,           \
                                                     const S *l3, const ComputeOf<S>::type *x,               \
                                                     ComputeOf<S>::type *y) {                                 \
    stokes_laplacian<S>(n, l0, l1, l2, l3, x, y);                                                           \
  }                                                                                                         \
  extern "C" __global__ void stokes_gradient_##name(                                                        \
      u32 n, const S *gx0, const S *gx1, const S *gx2, const S *gx3, const S *gy0, const S *gy1,             \
      const S *gy2, const S *gy3, double gx_scale, double gy_scale, const ComputeOf<S>::type *p,             \
      ComputeOf<S>::type *flow) {                                                                           \
    stokes_gradient<S>(n, gx0, gx1, gx2, gx3, gy0, gy1, gy2, gy3, gx_scale, gy_scale, p, flow);             \
  }                                                                                                         \
  extern "C" __global__ void stokes_divergence_##name(u32 n, const S *dx, const S *dy, double scale,        \
                                                      const ComputeOf<S>::type *flow,                       \
                                                      ComputeOf<S>::type *p) {                              \
    stokes_divergence<S>(n, dx, dy, scale, flow, p);                                                        \
  }                                                                                                         \
  extern "C" __global__ void pressure_stencil_##name(u32 np, u32 width, const S *rows, double scale,        \
                                                     const ComputeOf<S>::type *p, ComputeOf<S>::type *y) {  \
    pressure_stencil<S>(np, width, rows, scale, p, y);                                                      \
  }
FOR_STORAGE(STENCIL_ENTRIES)

#define TRANSFER_Q2_PROLONG 0u
#define TRANSFER_Q2_RESTRICT 1u
#define TRANSFER_Q1_PROLONG 2u
#define TRANSFER_Q1_RESTRICT 3u

// Tap k (0 ≤ k < 5) of output index f's 1D taps (device/cpu/stokes.rs: q2_prolong_taps …
// q1_restrict_taps): true with its input index and weight where the tap exists and lies in
// [0, in_len). Taps in the CPU's order; unrolled over k, so nothing goes to local memory.
__device__ __forceinline__ bool transfer_tap(u32 kind, int f, int k, int in_len, int *index, double *weight) {
  int centre, offset;
  double w;
  switch (kind) {
  case TRANSFER_Q2_PROLONG: {
    // Fine 4e+2k copies coarse 2e+k; 4e+1 takes (3/8, 3/4, −1/8), 4e+3 (−1/8, 3/4, 3/8).
    centre = 2 * (f / 4);
    int r = f % 4;
    if (r == 0 || r == 2) {
      if (k > 0) return false;
      offset = r / 2;
      w = 1.0;
    } else {
      if (k > 2) return false;
      offset = k;
      w = k == 1 ? 0.75 : (k == 0) == (r == 1) ? 0.375 : -0.125;
    }
    break;
  }
  case TRANSFER_Q2_RESTRICT:
    centre = 2 * f;
    if (f % 2 == 0) {
      const int offsets[5] = {-3, -1, 0, 1, 3};
      const double weights[5] = {-0.125, 0.375, 1.0, 0.375, -0.125};
      offset = offsets[k];
      w = weights[k];
    } else {
      if (k > 2) return false;
      offset = k - 1;
      w = k == 1 ? 1.0 : 0.75;
    }
    break;
  case TRANSFER_Q1_PROLONG:
    // Fine 2k copies coarse k; 2k+1 averages k and k+1.
    centre = f / 2;
    if (f % 2 == 0) {
      if (k > 0) return false;
      offset = 0;
      w = 1.0;
    } else {
      if (k > 1) return false;
      offset = k;
      w = 0.5;
    }
    break;
  default:
    if (k > 2) return false;
    centre = 2 * f;
    offset = k - 1;
    w = k == 1 ? 1.0 : 0.5;
    break;
  }
  int i = centre + offset;
  *index = i;
  *weight = w;
  return i >= 0 && i < in_len;
}

// A grid transfer between the meshes of `coarse_n` and 2·coarse_n cells as the tensor
// product of 1D taps: out[j][i] (+)= Σ_y Σ_x (w_x w_y) in[y][x]. Prolongations add to
// `output`; the Q2 restriction keeps the coarse lattice's boundary at zero.
template <typename T>
__device__ void stokes_transfer(u32 kind, u32 coarse_n, const T *input, T *output) {
  bool q2 = kind == TRANSFER_Q2_PROLONG || kind == TRANSFER_Q2_RESTRICT;
  bool prolong = kind == TRANSFER_Q2_PROLONG || kind == TRANSFER_Q1_PROLONG;
  u32 coarse = q2 ? 2 * coarse_n + 1 : coarse_n + 1;
  u32 fine = q2 ? 4 * coarse_n + 1 : 2 * coarse_n + 1;
  u32 m_in = prolong ? coarse : fine, m_out = prolong ? fine : coarse;
  FOR_EACH_U32(t, m_out * m_out) {
    u32 i = t % m_out, j = t / m_out;
    if (kind == TRANSFER_Q2_RESTRICT && (i == 0 || j == 0 || i + 1 == m_out || j + 1 == m_out)) {
      output[t] = 0;
      continue;
    }
    T v = 0;
#pragma unroll
    for (int ky = 0; ky < 5; ky++) {
      int y;
      double wy;
      if (!transfer_tap(kind, (int)j, ky, (int)m_in, &y, &wy)) continue;
#pragma unroll
      for (int kx = 0; kx < 5; kx++) {
        int x;
        double wx;
        if (!transfer_tap(kind, (int)i, kx, (int)m_in, &x, &wx)) continue;
        v = v + (T)(wx * wy) * input[(u64)y * m_in + x];
      }
    }
    output[t] = prolong ? output[t] + v : v;
  }
}

// Vanka's gather: column k of `gathered` = the residual in the 51 slots of patch
// patch_of_column[k] (pi, pj) (velocity slot 25c + 5(dJ+2) + (dI+2) at lattice node
// (2pi + dI, 2pj + dJ), zero off the interior lattice), its pressure slot times
// `pressure_scale`. A thread per (column, slot).
template <typename T>
__device__ void vanka_gather(u32 n, const T *r, const u32 *patch_of_column, u32 patches, double pressure_scale,
                             T *gathered) {
  u32 m = 2 * n + 1, np = n + 1, len = m * m;
  FOR_EACH_U32(t, patches * PATCH) {
    u32 k = t / PATCH, s = t % PATCH;
    u32 patch = patch_of_column[k], pi = patch % np, pj = patch / np;
    T v = 0;
    if (s == PRESSURE_SLOT) {
      v = (T)pressure_scale * r[2 * (u64)len + patch];
    } else {
      u32 c = s / 25, w = s % 25;
      int i = 2 * (int)pi - 2 + (int)(w % 5), j = 2 * (int)pj - 2 + (int)(w / 5);
      if (i > 0 && j > 0 && i < (int)m - 1 && j < (int)m - 1) v = r[c * (u64)len + (u64)j * m + i];
    }
    gathered[t] = v;
  }
}

// corrections column k = inverse number inverse_of_column[k] (51 × 51 column-major, in S)
// times gathered column k, for columns first … columns − 1: a block per column, a thread
// per row, the column in shared memory; zero entries skipped as on the CPU.
template <typename S>
__device__ void vanka_products(const S *inverses, const u32 *inverse_of_column, u32 first, u32 columns,
                               const typename ComputeOf<S>::type *gathered,
                               typename ComputeOf<S>::type *corrections) {
  typedef typename ComputeOf<S>::type C;
  __shared__ C v[PATCH];
  for (u32 k = first + blockIdx.x; k < columns; k += gridDim.x) {
    const C *g = gathered + (u64)k * PATCH;
    if (threadIdx.x < PATCH) v[threadIdx.x] = g[threadIdx.x];
    __syncthreads();
    if (threadIdx.x < PATCH) {
      const S *a = inverses + (u64)inverse_of_column[k] * (PATCH * PATCH);
      C acc = 0;
      for (u32 c = 0; c < PATCH; c++) {
        if (v[c] != (C)0) acc = acc + (C)widen(a[c * PATCH + threadIdx.x]) * v[c];
      }
      corrections[(u64)k * PATCH + threadIdx.x] = acc;
    }
    __syncthreads();
  }
}

// x += ω Σ_i V_iᵀ (corrections of patch i): a thread per interior lattice node (set-major)
// sums the patches (pi, pj) with |I − 2pi| ≤ 2 and |J − 2pj| ≤ 2 (pj outer, pi inner, as on
// the CPU), then a thread per pressure node; pressure corrections times `pressure_scale`.
template <typename T>
__device__ void vanka_scatter(u32 n, const T *corrections, const u32 *column_of, double omega,
                              double pressure_scale, T *x) {
  u32 m = 2 * n + 1, np = n + 1, len = m * m;
  T w = (T)omega, ps = (T)pressure_scale;
  FOR_EACH_U32(t, len + np * np) {
    if (t < len) {
      u32 i, j;
      lattice_node(n, t, &i, &j);
      u64 node = (u64)j * m + i;
      if (i == 0 || j == 0 || i + 1 == m || j + 1 == m) continue;
      T sx = 0, sy = 0;
      // pj from ⌈(J − 2)⁺ / 2⌉ to min(⌊(J + 2) / 2⌋, n), likewise pi.
      u32 pj_first = j >= 2 ? (j - 1) / 2 : 0, pi_first = i >= 2 ? (i - 1) / 2 : 0;
      u32 pj_end = min((j + 2) / 2, np - 1), pi_end = min((i + 2) / 2, np - 1);
      for (u32 pj = pj_first; pj <= pj_end; pj++) {
        for (u32 pi = pi_first; pi <= pi_end; pi++) {
          u64 col = column_of[pj * np + pi];
          u32 slot = (j + 2 - 2 * pj) * 5 + (i + 2 - 2 * pi);
          sx = sx + corrections[col * PATCH + slot];
          sy = sy + corrections[col * PATCH + 25 + slot];
        }
      }
      x[node] = x[node] + w * sx;
      x[len + node] = x[len + node] + w * sy;
    } else {
      u32 k = t - len;
      u64 col = column_of[k];
      u64 row = 2 * (u64)len + k;
      x[row] = x[row] + w * ps * corrections[col * PATCH + PRESSURE_SLOT];
    }
  }
}

// x[positions[r]] = Σ_c A⁻¹[r, c] b[positions[c]] in f64 (the inverse `size` × `size`
// column-major; the host zeroed x first): a thread per row, c in order.
template <typename T>
__device__ void coarse_solve(const u32 *positions, u32 unknowns, u32 size, const double *inverse, const T *b, T *x) {
  FOR_EACH_U32(r, unknowns) {
    double v = 0.0;
    for (u32 c = 0; c < unknowns; c++) v += inverse[(u64)c * size + r] * (double)b[positions[c]];
    x[positions[r]] = (T)v;
  }
}

#define VECTOR_ENTRIES(name, T)                                                                              \
  extern "C" __global__ void stokes_transfer_##name(u32 kind, u32 coarse_n, const T *input, T *output) {    \
    stokes_transfer<T>(kind, coarse_n, input, output);                                                       \
  }                                                                                                          \
  extern "C" __global__ void vanka_gather_##name(u32 n, const T *r, const u32 *patch_of_column, u32 patches, \
                                                 double pressure_scale, T *gathered) {                       \
    vanka_gather<T>(n, r, patch_of_column, patches, pressure_scale, gathered);                              \
  }                                                                                                          \
  extern "C" __global__ void vanka_scatter_##name(u32 n, const T *corrections, const u32 *column_of,         \
                                                  double omega, double pressure_scale, T *x) {               \
    vanka_scatter<T>(n, corrections, column_of, omega, pressure_scale, x);                                  \
  }                                                                                                          \
  extern "C" __global__ void coarse_solve_##name(const u32 *positions, u32 unknowns, u32 size,               \
                                                 const double *inverse, const T *b, T *x) {                  \
    coarse_solve<T>(positions, unknowns, size, inverse, b, x);                                               \
  }
VECTOR_ENTRIES(f32, float)
VECTOR_ENTRIES(f64, double)

#define PRODUCT_ENTRIES(name, S)                                                                     \
  extern "C" __global__ void vanka_products_##name(const S *inverses, const u32 *inverse_of_column, \
                                                   u32 first, u32 columns,                          \
                                                   const ComputeOf<S>::type *gathered,              \
                                                   ComputeOf<S>::type *corrections) {               \
    vanka_products<S>(inverses, inverse_of_column, first, columns, gathered, corrections);          \
  }
FOR_STORAGE(PRODUCT_ENTRIES)
