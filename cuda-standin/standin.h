// The stand-in's pieces: kernels of the host build (registry.cpp, generated from the
// objects), PTX entry signatures (driver.cpp) and the launch executor (block.cpp).
#pragma once
#include <ffi.h>

#include <cstdint>
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

// sm_90's shared memory a block: 48 KiB unless the kernel opts in to more
// (cuFuncSetAttribute), up to 227 KiB.
constexpr unsigned kDefaultSharedBytes = 48 * 1024;
constexpr unsigned kMaxSharedBytes = 227 * 1024;
// A launch's dynamic shared memory on this host thread (dynamic-shared.sh defines it, and
// every kernel's `extern __shared__` array as an alias of it).
extern thread_local unsigned char dynamic_shared[kMaxSharedBytes];

// A kernel ready to launch: its host function called through libffi with the parameters
// its PTX entry declares.
struct Kernel {
  std::string name;
  void *function = nullptr;
  std::vector<ffi_type *> types;
  ffi_cif cif;
  bool cooperative = false;  // has barriers or warp operations: run threads as fibers
  unsigned max_threads = 1024;  // its launch bounds (.maxntid or .reqntid), else sm_90's
  unsigned registers = 0;       // a thread's registers as ptxas reported them (0: not known)
  unsigned static_shared = 0;   // its __shared__ arrays' bytes as ptxas reported them
  // The dynamic shared memory a launch may ask for (cuFuncSetAttribute raises it).
  unsigned max_dynamic_shared = kDefaultSharedBytes;
};

struct Dim {
  unsigned x, y, z;
};

// How a launch ended: its blocks ran, a block failed (a barrier not every thread reached)
// or a thread touched memory outside every live device allocation.
enum class Launched { Ran, Failed, IllegalAddress };

// Runs the grid with `shared_bytes` of dynamic shared memory a block (filled with 0xFF when
// each block starts, as fresh device memory is); on failure `error` names kernel, block
// (and thread and address).
Launched launch(const Kernel &kernel, const Dim &grid, const Dim &block, unsigned shared_bytes,
                void **params, std::string &error);

// Installs the handler that turns a kernel thread's access fault into a failed launch
// (other faults go on to the handler before it).
void catch_faults();

// Device memory (memory.cpp): guarded, filled with 0xFF when fresh, quarantined when freed.
void *device_allocate(size_t bytes);
enum class FreeResult { Freed, Unknown, Twice };
FreeResult device_free(void *p, size_t &bytes);
// "" when the n bytes from p lie in one live allocation, else what is wrong with them.
std::string check_range(const void *p, size_t n);
// Where address a lies: in, before or past which allocation, or freed, or none.
std::string describe(uintptr_t a);

}  // namespace standin
