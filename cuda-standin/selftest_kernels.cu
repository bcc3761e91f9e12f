// A kernel with a fault put there on purpose, for selftest.cpp: the stand-in must report
// it. Built for the host like kernels/*.cu, but never by NVRTC and not in the registry.

// Every odd thread of the block returns before the barrier the even ones wait at.
extern "C" __global__ void return_before_barrier(double *x) {
  if (threadIdx.x % 2 == 1) return;
  __syncthreads();
  x[threadIdx.x] = 1.0;
}
