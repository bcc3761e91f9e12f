// cuBLAS on the CPU, for the calls tensorfem makes: handles bound to a stream; the f64
// level-3 routines of the set-up's inverse (GEMM, SYRK, TRMM, TRSM, GEAM) with fused
// multiply-adds; and GEMM in the arithmetic the GPU library applies — f64 and f32 with fused multiply-adds, f16
// operands with exact products summed in f32 (Tensor Cores), f32 operands rounded to TF32
// as cvt.rna.tf32.f32 does (to nearest, ties away from zero) and summed in f32. Device
// memory is host memory (driver.cpp), so the operands are read where they lie.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "include/cuda_fp16.h"

typedef int cublasStatus_t;
enum : cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2 };
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum { CUBLAS_FILL_MODE_LOWER = 0, CUBLAS_FILL_MODE_UPPER = 1 };
enum { CUBLAS_DIAG_NON_UNIT = 0, CUBLAS_DIAG_UNIT = 1 };
enum { CUBLAS_SIDE_LEFT = 0, CUBLAS_SIDE_RIGHT = 1 };
enum {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};

namespace {

struct Handle {
  void *stream = nullptr;
};

float tf32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & ~0x1fffu;
  std::memcpy(&v, &bits, 4);
  return v;
}

// Element (i, j) of op(X) for a column-major X with leading dimension ld.
inline long long at(bool transposed, long long i, long long j, long long ld) {
  return transposed ? i * ld + j : j * ld + i;
}

template <typename T> inline double load(const void *p, long long i);
template <> inline double load<double>(const void *p, long long i) {
  return static_cast<const double *>(p)[i];
}
template <> inline double load<float>(const void *p, long long i) {
  return static_cast<const float *>(p)[i];
}
template <> inline double load<__half>(const void *p, long long i) {
  return __half2float(static_cast<const __half *>(p)[i]);
}

void store(void *p, int type, long long i, double v) {
  if (type == CUDA_R_64F) static_cast<double *>(p)[i] = v;
  if (type == CUDA_R_32F) static_cast<float *>(p)[i] = (float)v;
  if (type == CUDA_R_16F) static_cast<__half *>(p)[i] = __float2half_rn((float)v);
}

double load_any(const void *p, int type, long long i) {
  if (type == CUDA_R_64F) return load<double>(p, i);
  if (type == CUDA_R_32F) return load<float>(p, i);
  return load<__half>(p, i);
}

struct Gemm {
  bool ta, tb;
  long long m, n, k;
  const void *a, *b;
  void *c;
  int ab_type, c_type, compute;
  long long lda, ldb, ldc;
  const void *alpha, *beta;
};

inline float fused(float a, float b, float c) { return std::fmaf(a, b, c); }
inline double fused(double a, double b, double c) { return std::fma(a, b, c); }

// Four dot products of length k, each summed in order with fused multiply-adds (four at
// once hide the adds' latency; each output's order is its own). Built with and without
// FMA instructions, chosen at run time: the results are the same.
template <typename T>
__attribute__((target_clones("fma", "default"))) void dot4(const T *a, long long lda,
                                                             const T *b, long long k, int rows,
                                                             T *out) {
  T s[4] = {0, 0, 0, 0};
  for (long long p = 0; p < k; p++)
    for (int r = 0; r < 4; r++)
      if (r < rows) s[r] = __builtin_fma(a[r * lda + p], b[p], s[r]);
  for (int r = 0; r < rows; r++) out[r] = s[r];
}
template <>
__attribute__((target_clones("fma", "default"))) void dot4<float>(const float *a, long long lda,
                                                                    const float *b, long long k,
                                                                    int rows, float *out) {
  float s[4] = {0, 0, 0, 0};
  for (long long p = 0; p < k; p++)
    for (int r = 0; r < 4; r++)
      if (r < rows) s[r] = __builtin_fmaf(a[r * lda + p], b[p], s[r]);
  for (int r = 0; r < rows; r++) out[r] = s[r];
}

// op(A) as rows and op(B) as columns, each contiguous along k, in the compute type T.
template <typename T, typename S> void pack(const Gemm &g, bool round_tf32, std::vector<T> &a,
                                            std::vector<T> &b) {
  a.resize(g.m * g.k);
  b.resize(g.k * g.n);
  for (long long i = 0; i < g.m; i++)
    for (long long p = 0; p < g.k; p++) {
      T v = (T)load<S>(g.a, at(g.ta, i, p, g.lda));
      a[i * g.k + p] = round_tf32 ? (T)tf32((float)v) : v;
    }
  for (long long j = 0; j < g.n; j++)
    for (long long p = 0; p < g.k; p++) {
      T v = (T)load<S>(g.b, at(g.tb, p, j, g.ldb));
      b[j * g.k + p] = round_tf32 ? (T)tf32((float)v) : v;
    }
}

// C ← α op(A) op(B) + β C with sums in T (C not read where β = 0), columns shared out among
// host threads.
template <typename T, typename S> void gemm(const Gemm &g, bool round_tf32) {
  std::vector<T> a, b;
  pack<T, S>(g, round_tf32, a, b);
  T alpha = *static_cast<const T *>(g.alpha), beta = *static_cast<const T *>(g.beta);
  auto columns = [&](long long first, long long last) {
    T sums[4];
    for (long long j = first; j < last; j++)
      for (long long i = 0; i < g.m; i += 4) {
        int rows = (int)std::min<long long>(4, g.m - i);
        dot4<T>(&a[i * g.k], g.k, &b[j * g.k], g.k, rows, sums);
        for (int r = 0; r < rows; r++) {
          long long o = j * g.ldc + i + r;
          T v = alpha * sums[r];
          if (beta != 0) v = fused(beta, (T)load_any(g.c, g.c_type, o), v);
          store(g.c, g.c_type, o, v);
        }
      }
  };
  unsigned threads = std::max(1u, std::min(std::thread::hardware_concurrency(), 16u));
  if ((double)g.m * g.n * g.k < 1e6 || threads == 1 || g.n == 1) {
    columns(0, g.n);
    return;
  }
  std::vector<std::thread> pool;
  long long per = (g.n + threads - 1) / threads;
  for (unsigned t = 0; t < threads; t++) {
    long long first = t * per, last = std::min(g.n, first + per);
    if (first < last) pool.emplace_back(columns, first, last);
  }
  for (auto &t : pool) t.join();
}

cublasStatus_t check(const Gemm &g, int transa, int transb) {
  if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) ||
      (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T) || g.m < 0 || g.n < 0 || g.k < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  long long rows_a = g.ta ? g.k : g.m, rows_b = g.tb ? g.n : g.k;
  if (g.lda < std::max(1LL, rows_a) || g.ldb < std::max(1LL, rows_b) ||
      g.ldc < std::max(1LL, g.m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!g.alpha || !g.beta) return CUBLAS_STATUS_INVALID_VALUE;
  bool f64 = g.compute == CUBLAS_COMPUTE_64F;
  if (f64 && (g.ab_type != CUDA_R_64F || g.c_type != CUDA_R_64F))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!f64) {
    bool f32 = g.compute == CUBLAS_COMPUTE_32F || g.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    if (!f32 || g.ab_type == CUDA_R_64F || g.c_type == CUDA_R_64F)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    if (g.ab_type == CUDA_R_32F && g.c_type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

void run(const Gemm &g) {
  if (g.m == 0 || g.n == 0) return;
  if (g.compute == CUBLAS_COMPUTE_64F)
    gemm<double, double>(g, false);
  else if (g.ab_type == CUDA_R_16F)
    gemm<float, __half>(g, false);
  else
    gemm<float, float>(g, g.compute == CUBLAS_COMPUTE_32F_FAST_TF32);
}

long long element_bytes(int type) { return type == CUDA_R_64F ? 8 : type == CUDA_R_32F ? 4 : 2; }

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(Handle **handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new Handle();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(Handle *handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(Handle *handle, void *stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(Handle *handle, int transa, int transb, int m, int n, int k,
                            const void *alpha, const void *a, int atype, int lda, const void *b,
                            int btype, int ldb, const void *beta, void *c, int ctype, int ldc,
                            int compute, int algo) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (atype != btype) return CUBLAS_STATUS_NOT_SUPPORTED;
  Gemm g{transa == CUBLAS_OP_T, transb == CUBLAS_OP_T, m, n, k, a, b, c, atype, ctype, compute,
         lda, ldb, ldc, alpha, beta};
  if (cublasStatus_t s = check(g, transa, transb)) return s;
  run(g);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(Handle *handle, int transa, int transb, int m, int n,
                                          int k, const void *alpha, const void *a, int atype,
                                          int lda, long long stride_a, const void *b, int btype,
                                          int ldb, long long stride_b, const void *beta, void *c,
                                          int ctype, int ldc, long long stride_c, int count,
                                          int compute, int algo) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (atype != btype || count < 0) return count < 0 ? CUBLAS_STATUS_INVALID_VALUE
                                                     : CUBLAS_STATUS_NOT_SUPPORTED;
  Gemm g{transa == CUBLAS_OP_T, transb == CUBLAS_OP_T, m, n, k, a, b, c, atype, ctype, compute,
         lda, ldb, ldc, alpha, beta};
  if (cublasStatus_t s = check(g, transa, transb)) return s;
  long long ab = element_bytes(atype), cb = element_bytes(ctype);
  for (int i = 0; i < count; i++) {
    Gemm one = g;
    one.a = static_cast<const char *>(a) + i * stride_a * ab;
    one.b = static_cast<const char *>(b) + i * stride_b * ab;
    one.c = static_cast<char *>(c) + i * stride_c * cb;
    run(one);
  }
  return CUBLAS_STATUS_SUCCESS;
}


// f64 with 64-bit sizes: the calls of the set-up's inverse. Modes the inverse does not use
// are refused as CUBLAS_STATUS_NOT_SUPPORTED rather than computed untested.
cublasStatus_t cublasDgemm_v2_64(Handle *handle, int transa, int transb, long long m,
                                 long long n, long long k, const double *alpha, const double *a,
                                 long long lda, const double *b, long long ldb,
                                 const double *beta, double *c, long long ldc) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  Gemm g{transa == CUBLAS_OP_T, transb == CUBLAS_OP_T, m, n, k, a, b, c, CUDA_R_64F, CUDA_R_64F,
         CUBLAS_COMPUTE_64F, lda, ldb, ldc, alpha, beta};
  if (cublasStatus_t s = check(g, transa, transb)) return s;
  run(g);
  return CUBLAS_STATUS_SUCCESS;
}

// C ← α op(A) + β op(B); C may be A or B (then with the same leading dimension).
cublasStatus_t cublasDgeam_64(Handle *handle, int transa, int transb, long long m, long long n,
                              const double *alpha, const double *a, long long lda,
                              const double *beta, const double *b, long long ldb, double *c,
                              long long ldc) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (transa != CUBLAS_OP_N || transb != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m < 0 || n < 0 || lda < std::max(1LL, m) || ldb < std::max(1LL, m) ||
      ldc < std::max(1LL, m) || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (long long j = 0; j < n; j++)
    for (long long i = 0; i < m; i++) {
      double v = *alpha == 0.0 ? 0.0 : *alpha * a[j * lda + i];
      if (*beta != 0.0) v = std::fma(*beta, b[j * ldb + i], v);
      c[j * ldc + i] = v;
    }
  return CUBLAS_STATUS_SUCCESS;
}

// C ← α AᵀA + β C on C's lower triangle (A k × n).
cublasStatus_t cublasDsyrk_v2_64(Handle *handle, int uplo, int trans, long long n, long long k,
                                 const double *alpha, const double *a, long long lda,
                                 const double *beta, double *c, long long ldc) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (uplo != CUBLAS_FILL_MODE_LOWER || trans != CUBLAS_OP_T) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (n < 0 || k < 0 || lda < std::max(1LL, k) || ldc < std::max(1LL, n) || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (long long j = 0; j < n; j++)
    for (long long i = j; i < n; i++) {
      double sum = 0.0;
      for (long long p = 0; p < k; p++) sum = std::fma(a[i * lda + p], a[j * lda + p], sum);
      double v = *alpha * sum;
      if (*beta != 0.0) v = std::fma(*beta, c[j * ldc + i], v);
      c[j * ldc + i] = v;
    }
  return CUBLAS_STATUS_SUCCESS;
}

// C ← α L B for a lower-triangular, non-unit L (m × m) on the left; C may be B.
cublasStatus_t cublasDtrmm_v2_64(Handle *handle, int side, int uplo, int trans, int diag,
                                 long long m, long long n, const double *alpha, const double *l,
                                 long long lda, const double *b, long long ldb, double *c,
                                 long long ldc) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (side != CUBLAS_SIDE_LEFT || uplo != CUBLAS_FILL_MODE_LOWER || trans != CUBLAS_OP_N ||
      diag != CUBLAS_DIAG_NON_UNIT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m < 0 || n < 0 || lda < std::max(1LL, m) || ldb < std::max(1LL, m) ||
      ldc < std::max(1LL, m) || !alpha)
    return CUBLAS_STATUS_INVALID_VALUE;
  std::vector<double> column(m);
  for (long long j = 0; j < n; j++) {
    for (long long i = 0; i < m; i++) {
      double sum = 0.0;
      for (long long p = 0; p <= i; p++) sum = std::fma(l[p * lda + i], b[j * ldb + p], sum);
      column[i] = *alpha * sum;
    }
    for (long long i = 0; i < m; i++) c[j * ldc + i] = column[i];
  }
  return CUBLAS_STATUS_SUCCESS;
}

// B ← α B L⁻¹ for a lower-triangular, non-unit L (n × n) on the right.
cublasStatus_t cublasDtrsm_v2_64(Handle *handle, int side, int uplo, int trans, int diag,
                                 long long m, long long n, const double *alpha, const double *l,
                                 long long lda, double *b, long long ldb) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (side != CUBLAS_SIDE_RIGHT || uplo != CUBLAS_FILL_MODE_LOWER || trans != CUBLAS_OP_N ||
      diag != CUBLAS_DIAG_NON_UNIT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m < 0 || n < 0 || lda < std::max(1LL, n) || ldb < std::max(1LL, m) || !alpha)
    return CUBLAS_STATUS_INVALID_VALUE;
  // X L = α B, column by column from the last: x_j = (α b_j − Σ_{p>j} x_p L[p][j]) / L[j][j].
  for (long long i = 0; i < m; i++)
    for (long long j = n - 1; j >= 0; j--) {
      double v = *alpha * b[j * ldb + i];
      for (long long p = j + 1; p < n; p++) v = std::fma(-b[p * ldb + i], l[j * lda + p], v);
      b[j * ldb + i] = v / l[j * lda + j];
    }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
