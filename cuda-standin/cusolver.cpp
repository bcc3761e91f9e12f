// cuSOLVER on the CPU, for the calls of the set-up's inverse: handles, parameters, and the
// 64-bit Cholesky (Xpotrf, lower) and triangular inverse (Xtrtri, lower, non-unit) in f64,
// with `info` written where the GPU library writes it (device memory is host memory).
#include <cmath>

typedef int cusolverStatus_t;
enum : cusolverStatus_t {
  CUSOLVER_STATUS_SUCCESS = 0,
  CUSOLVER_STATUS_NOT_INITIALIZED = 1,
  CUSOLVER_STATUS_INVALID_VALUE = 3,
  CUSOLVER_STATUS_NOT_SUPPORTED = 9,
};
enum { CUDA_R_64F = 1 };
enum { CUBLAS_FILL_MODE_LOWER = 0 };
enum { CUBLAS_DIAG_NON_UNIT = 0 };

namespace {
struct Handle {
  void *stream = nullptr;
};
struct Params {
  int unused = 0;
};
}  // namespace

extern "C" {

cusolverStatus_t cusolverDnCreate(Handle **handle) {
  if (!handle) return CUSOLVER_STATUS_INVALID_VALUE;
  *handle = new Handle();
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnDestroy(Handle *handle) {
  if (!handle) return CUSOLVER_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSetStream(Handle *handle, void *stream) {
  if (!handle) return CUSOLVER_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnCreateParams(Params **params) {
  if (!params) return CUSOLVER_STATUS_INVALID_VALUE;
  *params = new Params();
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnDestroyParams(Params *params) {
  delete params;
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnXpotrf_bufferSize(Handle *handle, Params *, int uplo, long long n,
                                             int type, const void *, long long lda, int compute,
                                             size_t *device_bytes, size_t *host_bytes) {
  if (!handle) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (uplo != CUBLAS_FILL_MODE_LOWER || type != CUDA_R_64F || compute != CUDA_R_64F)
    return CUSOLVER_STATUS_NOT_SUPPORTED;
  if (n < 0 || lda < (n > 1 ? n : 1) || !device_bytes || !host_bytes)
    return CUSOLVER_STATUS_INVALID_VALUE;
  *device_bytes = 0;
  *host_bytes = 0;
  return CUSOLVER_STATUS_SUCCESS;
}

// A = L Lᵀ in A's lower triangle; info = 0, or the 1-based column of the first pivot that is
// not positive (the factorization stops there, as LAPACK's does).
cusolverStatus_t cusolverDnXpotrf(Handle *handle, Params *, int uplo, long long n, int type,
                                  void *matrix, long long lda, int compute, void *, size_t,
                                  void *, size_t, int *info) {
  if (!handle) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (uplo != CUBLAS_FILL_MODE_LOWER || type != CUDA_R_64F || compute != CUDA_R_64F)
    return CUSOLVER_STATUS_NOT_SUPPORTED;
  if (n < 0 || lda < (n > 1 ? n : 1) || !matrix || !info) return CUSOLVER_STATUS_INVALID_VALUE;
  double *a = static_cast<double *>(matrix);
  *info = 0;
  for (long long j = 0; j < n; j++) {
    double d = a[j * lda + j];
    for (long long p = 0; p < j; p++) d = std::fma(-a[p * lda + j], a[p * lda + j], d);
    if (!(d > 0.0)) {
      *info = (int)(j + 1);
      return CUSOLVER_STATUS_SUCCESS;
    }
    d = std::sqrt(d);
    a[j * lda + j] = d;
    for (long long i = j + 1; i < n; i++) {
      double v = a[j * lda + i];
      for (long long p = 0; p < j; p++) v = std::fma(-a[p * lda + i], a[p * lda + j], v);
      a[j * lda + i] = v / d;
    }
  }
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnXtrtri_bufferSize(Handle *handle, int uplo, int diag, long long n,
                                             int type, void *, long long lda,
                                             size_t *device_bytes, size_t *host_bytes) {
  if (!handle) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (uplo != CUBLAS_FILL_MODE_LOWER || diag != CUBLAS_DIAG_NON_UNIT || type != CUDA_R_64F)
    return CUSOLVER_STATUS_NOT_SUPPORTED;
  if (n < 0 || lda < (n > 1 ? n : 1) || !device_bytes || !host_bytes)
    return CUSOLVER_STATUS_INVALID_VALUE;
  *device_bytes = 0;
  *host_bytes = 0;
  return CUSOLVER_STATUS_SUCCESS;
}

// L ← L⁻¹ in place (lower, non-unit); info = the 1-based index of a zero diagonal entry.
cusolverStatus_t cusolverDnXtrtri(Handle *handle, int uplo, int diag, long long n, int type,
                                  void *matrix, long long lda, void *, size_t, void *, size_t,
                                  int *info) {
  if (!handle) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (uplo != CUBLAS_FILL_MODE_LOWER || diag != CUBLAS_DIAG_NON_UNIT || type != CUDA_R_64F)
    return CUSOLVER_STATUS_NOT_SUPPORTED;
  if (n < 0 || lda < (n > 1 ? n : 1) || !matrix || !info) return CUSOLVER_STATUS_INVALID_VALUE;
  double *a = static_cast<double *>(matrix);
  *info = 0;
  for (long long j = 0; j < n; j++)
    if (a[j * lda + j] == 0.0) {
      *info = (int)(j + 1);
      return CUSOLVER_STATUS_SUCCESS;
    }
  // Column j of L⁻¹, from the last column backwards so that the columns to its right are
  // already inverted: X[j][j] = 1/L[j][j]; X[i][j] = −(Σ_{j≤p<i} L[i][p] X[p][j]) / L[i][i],
  // computed in place as in LAPACK's dtrti2 (lower).
  for (long long j = n - 1; j >= 0; j--) {
    double ajj = 1.0 / a[j * lda + j];
    a[j * lda + j] = ajj;
    // x = L[j+1.., j+1..]⁻¹ (already inverted) · L[j+1.., j], then scaled by −ajj.
    for (long long i = n - 1; i > j; i--) {
      double sum = 0.0;
      for (long long p = j + 1; p <= i; p++) sum = std::fma(a[p * lda + i], a[j * lda + p], sum);
      a[j * lda + i] = sum;
    }
    for (long long i = j + 1; i < n; i++) a[j * lda + i] *= -ajj;
  }
  return CUSOLVER_STATUS_SUCCESS;
}

}  // extern "C"
