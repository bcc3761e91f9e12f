// CUDA's built-ins for the host build of kernels/*.cu (included before every kernel file).
// Each thread of a block runs the kernel function with its own threadIdx; the stand-in's
// runtime (block.cpp) sets the indices and implements the barriers and warp operations.
// Anything a kernel uses that is not defined here is a compile error naming it.
#pragma once
#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_fp16.h"

#define __global__ __attribute__((visibility("default")))
#define __device__ inline
#define __host__
#define __forceinline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
// Shared memory is per block; blocks run one at a time on each host thread (thread_local in
// a function is static). An `extern __shared__` array is the launch's dynamic shared memory:
// every such name is an alias of one buffer per host thread (dynamic-shared.sh).
#define __shared__ thread_local

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};

// Per host thread (each runs one block at a time).
#define STANDIN_INDEX thread_local
extern STANDIN_INDEX uint3 threadIdx;
extern STANDIN_INDEX uint3 blockIdx;
extern STANDIN_INDEX dim3 blockDim;
extern STANDIN_INDEX dim3 gridDim;
static const int warpSize = 32;

extern "C" int standin_syncthreads_or(int predicate);
extern "C" unsigned long long standin_shfl_down(unsigned int mask, unsigned long long bits,
                                                unsigned int delta);

inline void __syncthreads() { standin_syncthreads_or(0); }
inline int __syncthreads_or(int predicate) { return standin_syncthreads_or(predicate != 0); }

template <typename T> inline T __shfl_down_sync(unsigned int mask, T v, unsigned int delta) {
  static_assert(sizeof(T) <= 8, "__shfl_down_sync of a type wider than 64 bits");
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = standin_shfl_down(mask, bits, delta);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}

template <typename T> inline T __ldg(const T *p) { return *p; }

inline unsigned int __brev(unsigned int v) {
  unsigned int r = 0;
  for (int i = 0; i < 32; i++) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}
inline int __ffs(int v) { return __builtin_ffs(v); }
inline double __longlong_as_double(long long v) {
  double d;
  std::memcpy(&d, &v, sizeof d);
  return d;
}

// CUDA's min and max: two numbers in their common type.
template <typename A, typename B> inline typename std::common_type<A, B>::type min(A a, B b) {
  typedef typename std::common_type<A, B>::type T;
  return (T)b < (T)a ? (T)b : (T)a;
}
template <typename A, typename B> inline typename std::common_type<A, B>::type max(A a, B b) {
  typedef typename std::common_type<A, B>::type T;
  return (T)a < (T)b ? (T)b : (T)a;
}
