// Kernels for selftest.cpp's cases, one with a fault put there on purpose that the stand-in
// must report. Built for the host like kernels/*.cu, but never by NVRTC and not in the
// registry.

// Every odd thread of the block returns before the barrier the even ones wait at.
extern "C" __global__ void return_before_barrier(double *x) {
  if (threadIdx.x % 2 == 1) return;
  __syncthreads();
  x[threadIdx.x] = 1.0;
}

// Reverses x[0, blockDim.x) through the launch's dynamic shared memory; `fresh` gets what
// that memory held before the block wrote it.
extern "C" __global__ void reverse_in_dynamic_shared(double *x, double *fresh) {
  extern __shared__ double staged[];
  unsigned t = threadIdx.x;
  fresh[t] = staged[t];
  __syncthreads();
  staged[t] = x[t];
  __syncthreads();
  x[t] = staged[blockDim.x - 1 - t];
}
