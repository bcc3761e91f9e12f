// Shared by every kernel file (the host prepends it before NVRTC compiles a file).
//
// Storage types f16 (__half), f32, f64; arithmetic on f16 data runs in f32, its compute
// precision, as on the CPU backend. Entry points are `extern "C"` and named
// `<op>_<dtype>` or `<op>_<storage>_<compute>`, like the CPU kernels. Reductions write
// one partial per thread block in a fixed order and are added up by a second kernel in
// that order: results are the same run to run (no atomics).
#include <cuda_fp16.h>

typedef unsigned int u32;
typedef unsigned long long u64;

// Threads per block of every kernel that reduces in shared memory.
#define REDUCE_THREADS 256
// Columns of a node-major block one thread block of a per-column reduction takes together
// (a row's entries of them lie side by side, so each thread reads whole sectors).
#define COLUMN_GROUP 8

template <typename T> struct ComputeOf { typedef T type; };
template <> struct ComputeOf<__half> { typedef float type; };

__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ double widen(double v) { return v; }

// A value rounded to nearest into the storage type T.
template <typename T> __device__ __forceinline__ T store(double v);
// f64 → f16 rounded once to nearest (as precision::f16_from_f64 on the host).
template <> __device__ __forceinline__ __half store<__half>(double v) { return __double2half(v); }
template <> __device__ __forceinline__ float store<float>(double v) { return (float)v; }
template <> __device__ __forceinline__ double store<double>(double v) { return v; }
template <typename T> __device__ __forceinline__ T store_f32(float v);
template <> __device__ __forceinline__ __half store_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ float store_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ double store_f32<double>(float v) { return (double)v; }
__device__ __forceinline__ __half store_c(float v, __half *) { return __float2half_rn(v); }
__device__ __forceinline__ float store_c(float v, float *) { return v; }
__device__ __forceinline__ double store_c(double v, double *) { return v; }

// Grid-stride loop over [0, n).
#define FOR_EACH(i, n) \
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

// The block's sum of `v` (every thread gets it); the tree order is fixed by blockDim.
__device__ __forceinline__ double block_sum(double v, double *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  double total = shared[0];
  __syncthreads();
  return total;
}

// The block's maximum of `v` (NaN-free inputs; every thread gets it).
__device__ __forceinline__ double block_max(double v, double *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] = fmax(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  double total = shared[0];
  __syncthreads();
  return total;
}

// Instantiates `MACRO(dtype_name, type)` for the three storage types.
#define FOR_STORAGE(MACRO) MACRO(f16, __half) MACRO(f32, float) MACRO(f64, double)
// ... for every ordered pair of two different storage types.
#define FOR_DISTINCT_PAIRS(MACRO) \
  MACRO(f16, __half, f32, float) MACRO(f16, __half, f64, double) MACRO(f32, float, f16, __half) \
  MACRO(f32, float, f64, double) MACRO(f64, double, f16, __half) MACRO(f64, double, f32, float)
