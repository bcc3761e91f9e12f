// The stand-in's pieces: kernels of the host build (registry.cpp, generated from the
// objects), PTX entry signatures (driver.cpp) and the launch executor (block.cpp).
#pragma once
#include <ffi.h>

#include <functional>
#include <string>
#include <vector>

namespace standin {

// A kernel of the host build: the kernel file it comes from and its address.
struct HostKernel {
  const char *file;
  const char *name;
  void *function;
};
extern const HostKernel host_kernels[];
extern const unsigned host_kernel_count;

// A kernel ready to launch: its host function called through libffi with the parameters
// its PTX entry declares.
struct Kernel {
  std::string name;
  void *function = nullptr;
  std::vector<ffi_type *> types;
  ffi_cif cif;
  bool cooperative = false;  // has barriers or warp operations: run threads as fibers
};

struct Dim {
  unsigned x, y, z;
};

// Runs the grid; false (and `error` naming kernel and block) when a block failed.
bool launch(const Kernel &kernel, const Dim &grid, const Dim &block, void **params,
            std::string &error);

}  // namespace standin
