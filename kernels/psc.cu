// The PSC passes between the dense products (PscKernels), in the compute precision T
// (f32 or f64) on column-major blocks of (n−1)² interior unknowns per column.

// Value at interior grid point (i, j) of a column: unknown (i−1) + (j−1)(n−1).
#define AT(x, i, j) (x)[((i) - 1) + (u64)((j) - 1) * (n - 1)]

// Value at grid point (i, j), zero on the boundary (i or j is 0 or n: Dirichlet nodes,
// not stored).
template <typename T> __device__ __forceinline__ T grid_at(const T *x, u32 n, u32 i, u32 j) {
  return (i == 0 || j == 0 || i >= n || j >= n) ? (T)0 : AT(x, i, j);
}

// One level of the hierarchical-basis transform S, nodes of spacing s: every node new on
// the level gets the weighted values of its parents (edge midpoints 1/2 each; cell
// midpoints the four corners 1/4 each, or the two ends of the "/" diagonal 1/2 each). A
// thread per cell of the coarse grid (spacing 2s; block (q, c): cells q·blockDim… of column
// c, a row of cells after another) sets the cell's new nodes: its centre, the midpoint of
// its lower edge and of its left edge (those two unless on the boundary). Threads read
// only old nodes, write only their own new ones, and do the same work (no branch on the
// node's kind).
template <typename T>
__device__ void hierarchical_forward(T *x, u32 n, u32 s, u64 ld, u32 cols, u32 corners) {
  const T half = (T)0.5, quarter = (T)0.25;
  const u32 cells = n / (2 * s);
  for (u32 c = blockIdx.y; c < cols; c += gridDim.y)
  for (u32 p = blockIdx.x * blockDim.x + threadIdx.x; p < cells * cells; p += gridDim.x * blockDim.x) {
    T *col = x + (u64)c * ld;
    const u32 b = p / cells, a = p - b * cells;
    const u32 i0 = 2 * a * s, j0 = 2 * b * s, i1 = i0 + s, j1 = j0 + s, i2 = i0 + 2 * s, j2 = j0 + 2 * s;
    const T ll = grid_at(col, n, i0, j0), lr = grid_at(col, n, i2, j0);
    const T ul = grid_at(col, n, i0, j2), ur = grid_at(col, n, i2, j2);
    AT(col, i1, j1) += corners ? quarter * (((ll + lr) + ul) + ur) : half * (ll + ur);
    if (j0 > 0) AT(col, i1, j0) += half * (ll + lr);
    if (i0 > 0) AT(col, i0, j1) += half * (ll + ul);
  }
}

// One level of Sᵀ: every interior node old on the level (spacing 2s) adds the weighted
// values of its children (the transposed weights of S). A thread per old node (block
// (q, c) as above); it writes that node and reads only new ones.
template <typename T>
__device__ void hierarchical_transpose(T *x, u32 n, u32 s, u64 ld, u32 cols, u32 corners) {
  const T half = (T)0.5, quarter = (T)0.25;
  const u32 m = n / (2 * s) - 1;  // interior old nodes per direction
  for (u32 c = blockIdx.y; c < cols; c += gridDim.y)
  for (u32 p = blockIdx.x * blockDim.x + threadIdx.x; p < m * m; p += gridDim.x * blockDim.x) {
    T *col = x + (u64)c * ld;
    const u32 b = p / m, a = p - b * m;
    const u32 i = 2 * s * (a + 1), j = 2 * s * (b + 1);
    T y = AT(col, i, j);
    y += half * grid_at(col, n, i - s, j);
    y += half * grid_at(col, n, i + s, j);
    y += half * grid_at(col, n, i, j - s);
    y += half * grid_at(col, n, i, j + s);
    if (corners) {
      y += quarter * grid_at(col, n, i - s, j - s);
      y += quarter * grid_at(col, n, i + s, j - s);
      y += quarter * grid_at(col, n, i - s, j + s);
      y += quarter * grid_at(col, n, i + s, j + s);
    } else {
      y += half * grid_at(col, n, i - s, j - s);
      y += half * grid_at(col, n, i + s, j + s);
    }
    AT(col, i, j) = y;
  }
}

// One level of S or Sᵀ on a mesh without a grid, as sparse rows: x[rows[r]] += Σ weights[p]
// x[col_idx[p]], p in row_ptr[r] .. row_ptr[r+1], one thread per row and column. No row
// reads a row that is written, so threads run in any order.
template <typename T>
__device__ void row_update(T *x, u64 ld, u32 cols, const u32 *rows, const u32 *row_ptr,
                           const u32 *col_idx, const T *weights, u32 nrows) {
  FOR_EACH(t, (u64)nrows * cols) {
    u32 c = (u32)(t / nrows), r = (u32)(t % nrows);
    T *col = x + (u64)c * ld;
    T v = 0;
    for (u32 p = row_ptr[r]; p < row_ptr[r + 1]; p++) v += weights[p] * col[col_idx[p]];
    col[rows[r]] += v;
  }
}

// An I slot holding no unknown (device::psc::PADDING_SLOT): the gather writes 0 there and
// the scatter skips it.
#define PADDING_SLOT 0xffffffffu

// From `nodal` (Sᵀ b): b_C = L_C⁻¹ b[C] (L_C⁻¹ column-major, lower), b_E = b[E] ∘ scale_E,
// b_I = b[I] ∘ scale_I (0 in padding slots), each column then divided by its largest
// magnitude (kept in column_scale; 1 for a zero column). Two launches over blocks of
// (entries, column), entries in the order C, E, I: psc_gather writes the values and each
// block's largest magnitude in partial[c·gridDim.x + block], psc_gather_scale takes each
// column's maximum of those (exact in any order) and divides.
template <typename T>
__device__ T *class_entry(T *bc, T *be, T *bi, u32 nc, u32 ne, u32 k) {
  return k < nc ? bc + k : k < nc + ne ? be + (k - nc) : bi + (k - nc - ne);
}

template <typename T>
__device__ void psc_gather(const T *nodal, u64 n, const u32 *c_dofs, u32 nc, const u32 *e_dofs,
                           u32 ne, const u32 *i_dofs, u32 ni, const T *l_c_inv, const T *scale_e,
                           const T *scale_i, T *bc, T *be, T *bi, double *partial, u32 cols) {
  __shared__ double shared[REDUCE_THREADS];
  for (u32 c = blockIdx.y; c < cols; c += gridDim.y) {
    const T *col = nodal + (u64)c * n;
    T *xc = bc + (u64)c * nc, *xe = be + (u64)c * ne, *xi = bi + (u64)c * ni;
    double largest = 0;
    for (u32 k = blockIdx.x * blockDim.x + threadIdx.x; k < nc + ne + ni; k += gridDim.x * blockDim.x) {
      T v;
      if (k < nc) {
        v = 0;
        for (u32 l = 0; l <= k; l++) v += l_c_inv[k + (u64)l * nc] * col[c_dofs[l]];
      } else if (k < nc + ne) {
        v = col[e_dofs[k - nc]] * scale_e[k - nc];
      } else {
        u32 i = k - nc - ne, d = i_dofs[i];
        v = d == PADDING_SLOT ? (T)0 : col[d] * scale_i[i];
      }
      *class_entry(xc, xe, xi, nc, ne, k) = v;
      largest = fmax(largest, (double)fabs(v));
    }
    double m = block_max(largest, shared);
    if (threadIdx.x == 0) partial[(u64)c * gridDim.x + blockIdx.x] = m;
  }
}

template <typename T>
__device__ void psc_gather_scale(T *bc, T *be, T *bi, u32 nc, u32 ne, u32 ni, const double *partial,
                                 u32 parts, T *column_scale, u32 cols) {
  __shared__ double shared[REDUCE_THREADS];
  for (u32 c = blockIdx.y; c < cols; c += gridDim.y) {
    T *xc = bc + (u64)c * nc, *xe = be + (u64)c * ne, *xi = bi + (u64)c * ni;
    double largest = 0;
    for (u32 t = threadIdx.x; t < parts; t += blockDim.x) largest = fmax(largest, partial[(u64)c * parts + t]);
    T m = (T)block_max(largest, shared);
    T scale = m > (T)0 ? m : (T)1;
    T inverse = (T)1 / scale;
    if (blockIdx.x == 0 && threadIdx.x == 0) column_scale[c] = scale;
    for (u32 k = blockIdx.x * blockDim.x + threadIdx.x; k < nc + ne + ni; k += gridDim.x * blockDim.x)
      *class_entry(xc, xe, xi, nc, ne, k) *= inverse;
  }
}

// The way back: nodal[C] = L_C⁻ᵀ x_C, nodal[E] = x_E ∘ scale_E, nodal[I] = x_I ∘ scale_I,
// each times the column's scale. Block (q, c) (per_item_and_column over |C| + |E| + I
// slots): entries q·blockDim… of column c in the order C, E, I.
template <typename T>
__device__ void psc_scatter(const T *bc, const T *be, const T *bi, const T *column_scale,
                            const u32 *c_dofs, u32 nc, const u32 *e_dofs, u32 ne, const u32 *i_dofs,
                            u32 ni, const T *l_c_inv, const T *scale_e, const T *scale_i, T *nodal,
                            u64 n, u32 cols) {
  for (u32 c = blockIdx.y; c < cols; c += gridDim.y) {
    T *col = nodal + (u64)c * n;
    const T *xc = bc + (u64)c * nc, *xe = be + (u64)c * ne, *xi = bi + (u64)c * ni;
    T scale = column_scale[c];
    for (u32 k = blockIdx.x * blockDim.x + threadIdx.x; k < nc + ne + ni; k += gridDim.x * blockDim.x) {
      if (k < nc) {
        T s = 0;
        for (u32 l = k; l < nc; l++) s += l_c_inv[l + (u64)k * nc] * xc[l];
        col[c_dofs[k]] = s * scale;
      } else if (k < nc + ne) {
        u32 e = k - nc;
        col[e_dofs[e]] = xe[e] * scale_e[e] * scale;
      } else {
        u32 i = k - nc - ne, d = i_dofs[i];
        if (d != PADDING_SLOT) col[d] = xi[i] * scale_i[i] * scale;
      }
    }
  }
}

#define PSC_ENTRIES(name, T)                                                                      \
  extern "C" __global__ void hierarchical_forward_##name(T *x, u32 n, u32 s, u64 ld, u32 cols,    \
                                                         u32 corners) {                           \
    hierarchical_forward<T>(x, n, s, ld, cols, corners);                                          \
  }                                                                                               \
  extern "C" __global__ void hierarchical_transpose_##name(T *x, u32 n, u32 s, u64 ld, u32 cols,  \
                                                           u32 corners) {                         \
    hierarchical_transpose<T>(x, n, s, ld, cols, corners);                                        \
  }                                                                                               \
  extern "C" __global__ void row_update_##name(T *x, u64 ld, u32 cols, const u32 *rows,           \
                                               const u32 *row_ptr, const u32 *col_idx,            \
                                               const T *weights, u32 nrows) {                     \
    row_update<T>(x, ld, cols, rows, row_ptr, col_idx, weights, nrows);                           \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS) psc_gather_##name(                 \
      const T *nodal, u64 n, const u32 *c_dofs, u32 nc, const u32 *e_dofs, u32 ne,                \
      const u32 *i_dofs, u32 ni, const T *l_c_inv, const T *scale_e, const T *scale_i, T *bc,     \
      T *be, T *bi, double *partial, u32 cols) {                                                  \
    psc_gather<T>(nodal, n, c_dofs, nc, e_dofs, ne, i_dofs, ni, l_c_inv, scale_e, scale_i, bc,    \
                  be, bi, partial, cols);                                                         \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(REDUCE_THREADS) psc_gather_scale_##name(           \
      T *bc, T *be, T *bi, u32 nc, u32 ne, u32 ni, const double *partial, u32 parts,              \
      T *column_scale, u32 cols) {                                                                \
    psc_gather_scale<T>(bc, be, bi, nc, ne, ni, partial, parts, column_scale, cols);              \
  }                                                                                               \
  extern "C" __global__ void psc_scatter_##name(                                                  \
      const T *bc, const T *be, const T *bi, const T *column_scale, const u32 *c_dofs, u32 nc,    \
      const u32 *e_dofs, u32 ne, const u32 *i_dofs, u32 ni, const T *l_c_inv, const T *scale_e,   \
      const T *scale_i, T *nodal, u64 n, u32 cols) {                                              \
    psc_scatter<T>(bc, be, bi, column_scale, c_dofs, nc, e_dofs, ne, i_dofs, ni, l_c_inv,         \
                   scale_e, scale_i, nodal, n, cols);                                             \
  }
PSC_ENTRIES(f32, float)
PSC_ENTRIES(f64, double)
