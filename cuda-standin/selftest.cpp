// The stand-in's own checks, each case in a child process (an illegal address is sticky
// for the process, as on a GPU): through the driver API, with the PTX NVRTC compiled for
// kernels/vector.cu, each fault must fail with the driver's error code and a report
// naming what the issue is; a barrier not every thread reaches, through the launch
// executor with a kernel of selftest_kernels.cu. Prints one line per case and
// `selftest: N passed, M failed`.
//
// Usage: selftest PTX_DIR   (with the stand-in's libcuda.so on the loader path,
//                            TENSORFEM_CUDA_STANDIN=1, and PTX_DIR/resources.txt the table
//                            `tensorfem kernels --arch sm_90` printed)
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "standin.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
struct Context;
struct Module;
struct Kernel;
extern "C" {
CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(Context **, int);
CUresult cuCtxSetCurrent(Context *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuModuleLoadData(Module **, const void *);
CUresult cuModuleGetFunction(Kernel **, Module *, const char *);
CUresult cuLaunchKernel(Kernel *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);
CUresult cuFuncSetAttribute(Kernel *, int, int);
void return_before_barrier(double *);
void reverse_in_dynamic_shared(double *, double *);
}

namespace {

constexpr CUresult kInvalidValue = 1, kIllegalAddress = 700, kOutOfResources = 701;
constexpr int kMaxDynamicSharedSizeBytes = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
std::string ptx_dir;
Kernel *fill_f64 = nullptr, *column_stats_f64 = nullptr;

// Fails the case (the child exits 1) with what went wrong.
void expect(bool ok, const std::string &what) {
  if (!ok) {
    std::fprintf(stdout, "%s\n", what.c_str());
    std::fflush(stdout);
    _exit(1);
  }
}

void set_up() {
  Context *ctx = nullptr;
  expect(cuInit(0) == 0, "cuInit failed (TENSORFEM_CUDA_STANDIN=1?)");
  expect(cuDevicePrimaryCtxRetain(&ctx, 0) == 0 && cuCtxSetCurrent(ctx) == 0, "no context");
  std::ifstream file(ptx_dir + "/vector.ptx");
  std::stringstream text;
  text << file.rdbuf();
  expect(!text.str().empty(), "no " + ptx_dir + "/vector.ptx");
  Module *vector = nullptr;
  expect(cuModuleLoadData(&vector, text.str().c_str()) == 0, "vector.ptx does not load");
  expect(cuModuleGetFunction(&fill_f64, vector, "fill_f64") == 0, "no fill_f64");
  expect(cuModuleGetFunction(&column_stats_f64, vector, "column_stats_f64") == 0,
         "no column_stats_f64");
}

// Points TENSORFEM_CUDA_STANDIN_RESOURCES at ptxas's report with fill_f64's registers
// replaced by `registers` (before set_up: the stand-in reads it once).
void report_fill_registers(unsigned registers) {
  std::ifstream file(ptx_dir + "/resources.txt");
  expect(file.good(), "no " + ptx_dir + "/resources.txt");
  std::string line, table;
  while (std::getline(file, line)) {
    if (line.rfind("fill_f64 ", 0) == 0) line = "fill_f64 " + std::to_string(registers) + " 0 0";
    table += line + "\n";
  }
  char path[] = "/tmp/selftest-resources-XXXXXX";
  int fd = mkstemp(path);
  expect(fd >= 0 && write(fd, table.data(), table.size()) == (ssize_t)table.size(),
         "cannot write a resources table");
  close(fd);
  setenv("TENSORFEM_CUDA_STANDIN_RESOURCES", path, 1);
}

// Makes `k` what a module load makes of a kernel of selftest_kernels.cu (which are not in
// the registry): `pointers` device pointers as its parameters, its threads run as fibers.
void selftest_kernel(standin::Kernel &k, const char *name, void *function, unsigned pointers) {
  k.name = name;
  k.function = function;
  k.types.assign(pointers, &ffi_type_uint64);
  k.cooperative = true;
  expect(ffi_prep_cif(&k.cif, FFI_DEFAULT_ABI, pointers, &ffi_type_void, k.types.data()) ==
             FFI_OK,
         "libffi cannot call " + k.name);
}

CUdeviceptr allocate(size_t bytes) {
  CUdeviceptr p = 0;
  expect(cuMemAlloc_v2(&p, bytes) == 0, "cuMemAlloc failed");
  return p;
}

// fill_f64(x, n, v) on one block of 256 threads per 256 values.
CUresult fill(CUdeviceptr x, unsigned long long n, double v) {
  void *params[] = {&x, &n, &v};
  unsigned blocks = (unsigned)((n + 255) / 256);
  return cuLaunchKernel(fill_f64, blocks, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr);
}

// A case: its name, what it does (in the child), the words its report must hold, and what
// to do in the child before the driver is set up.
struct Case {
  const char *name;
  std::function<void()> body;
  std::vector<const char *> report;
  std::function<void()> prepare = [] {};
};

const std::vector<Case> cases = {
    {"a kernel's write past the end of its buffer fails the launch",
     [] {
       CUdeviceptr x = allocate(1000 * 8);
       expect(fill(x, 1000, 1.0) == 0, "a fill inside the buffer failed");
       expect(fill(x, 1040, 1.0) == kIllegalAddress, "no CUDA_ERROR_ILLEGAL_ADDRESS");
       expect(fill(x, 1, 1.0) == kIllegalAddress, "the error is not sticky");
     },
     {"a write at 0x", "192 bytes past the end of the device allocation of 8000 bytes",
      "by thread (0,0,0) of block (4,0,0) of kernel fill_f64"}},
    {"a kernel's write before the start of its buffer fails the launch",
     [] {
       CUdeviceptr x = allocate(1 << 16);
       expect(fill(x - 64, 8, 1.0) == kIllegalAddress, "no CUDA_ERROR_ILLEGAL_ADDRESS");
     },
     {"a write at 0x", "64 bytes before the start of the device allocation of 65536 bytes",
      "by thread (0,0,0) of block (0,0,0) of kernel fill_f64"}},
    {"a kernel's use of freed memory fails the launch",
     [] {
       CUdeviceptr x = allocate(4096);
       expect(cuMemFree_v2(x) == 0, "cuMemFree failed");
       expect(fill(x, 16, 1.0) == kIllegalAddress, "no CUDA_ERROR_ILLEGAL_ADDRESS");
     },
     {"inside the device allocation of 4096 bytes at", "freed before (a use after free)",
      "of kernel fill_f64"}},
    {"a double free is refused",
     [] {
       CUdeviceptr x = allocate(512);
       expect(cuMemFree_v2(x) == 0, "cuMemFree failed");
       expect(cuMemFree_v2(x) == kInvalidValue, "no CUDA_ERROR_INVALID_VALUE");
     },
     {"freed a second time"}},
    {"a copy past the end of an allocation is refused",
     [] {
       CUdeviceptr x = allocate(1000);
       std::vector<char> host(1024);
       expect(cuMemcpyHtoD_v2(x, host.data(), 1000) == 0, "a copy inside failed");
       expect(cuMemcpyHtoD_v2(x, host.data(), 1024) == kInvalidValue,
              "no CUDA_ERROR_INVALID_VALUE");
       expect(cuMemcpyDtoH_v2(host.data(), x + 512, 1000) == kInvalidValue,
              "no CUDA_ERROR_INVALID_VALUE");
     },
     {"cuMemcpyHtoD: 1024 bytes at", "run 24 bytes past the end of the device allocation of 1000",
      "cuMemcpyDtoH: 1000 bytes at"}},
    {"a launch over sm_90's limits is refused",
     [] {
       CUdeviceptr x = allocate(1 << 16);
       unsigned long long n = 16;
       double v = 1.0;
       void *params[] = {&x, &n, &v};
       expect(cuLaunchKernel(fill_f64, 1, 1, 1, 2048, 1, 1, 0, nullptr, params, nullptr) ==
                  kInvalidValue,
              "2048 threads a block: no CUDA_ERROR_INVALID_VALUE");
       expect(cuLaunchKernel(fill_f64, 1, 65536, 1, 256, 1, 1, 0, nullptr, params, nullptr) ==
                  kInvalidValue,
              "a grid 65536 blocks high: no CUDA_ERROR_INVALID_VALUE");
       expect(fill(x, 16, 1.0) == 0, "a refused launch is not sticky");
     },
     {}},
    {"a launch over a kernel's launch bounds is refused",
     [] {
       void *params[8] = {};
       expect(cuLaunchKernel(column_stats_f64, 1, 1, 1, 512, 1, 1, 0, nullptr, params,
                             nullptr) == kOutOfResources,
              "512 threads for __launch_bounds__(256): no CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
     },
     {"kernel column_stats_f64: a block of 512 threads is over its launch bounds (256 threads)"}},
    {"a launch over sm_90's registers at ptxas's count is refused",
     [] {
       CUdeviceptr x = allocate(1 << 16);
       unsigned long long n = 512;
       double v = 1.0;
       void *params[] = {&x, &n, &v};
       expect(cuLaunchKernel(fill_f64, 1, 1, 1, 512, 1, 1, 0, nullptr, params, nullptr) ==
                  kOutOfResources,
              "512 threads of 255 registers: no CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
       expect(cuLaunchKernel(fill_f64, 2, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr) == 0,
              "256 threads of 255 registers were refused");
     },
     {"kernel fill_f64: a block of 512 threads is over sm_90's 65536 registers a block: "
      "131072 at 255 a thread (ptxas)"},
     [] { report_fill_registers(255); }},
    {"a barrier that not every thread of a block reaches fails the launch",
     [] {
       standin::Kernel k;
       selftest_kernel(k, "return_before_barrier",
                       reinterpret_cast<void *>(&return_before_barrier), 1);
       CUdeviceptr x = allocate(64 * 8);
       void *params[] = {&x};
       std::string error;
       expect(standin::launch(k, {1, 1, 1}, {64, 1, 1}, 0, params, error) ==
                  standin::Launched::Failed,
              "the launch did not fail");
       std::printf("%s\n", error.c_str());
     },
     {"a barrier that not every thread reaches in block (0,0,0) of kernel "
      "return_before_barrier: 32 threads wait, 32 have returned"}},
    {"dynamic shared memory: fresh in each block, within its limits",
     [] {
       standin::Kernel k;
       selftest_kernel(k, "reverse_in_dynamic_shared",
                       reinterpret_cast<void *>(&reverse_in_dynamic_shared), 2);
       Kernel *f = reinterpret_cast<Kernel *>(&k);
       double values[64];
       for (int i = 0; i < 64; i++) values[i] = i;
       CUdeviceptr x = allocate(sizeof values), fresh = allocate(sizeof values);
       expect(cuMemcpyHtoD_v2(x, values, sizeof values) == 0, "cuMemcpyHtoD failed");
       void *params[] = {&x, &fresh};
       // Reversed twice (the second time with more than the default 48 KiB): as it was.
       for (unsigned bytes : {512u, 100000u}) {
         if (bytes > 48 * 1024) {
           expect(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, bytes, nullptr, params, nullptr) ==
                      kInvalidValue,
                  "a launch over 48 KiB without the attribute was not refused");
           expect(cuFuncSetAttribute(f, kMaxDynamicSharedSizeBytes, bytes) == 0,
                  "cuFuncSetAttribute refused 100000");
         }
         expect(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, bytes, nullptr, params, nullptr) == 0,
                "the launch with " + std::to_string(bytes) + " bytes failed");
         double read[64];
         expect(cuMemcpyDtoH_v2(read, fresh, sizeof read) == 0, "cuMemcpyDtoH failed");
         for (double v : read) expect(std::isnan(v), "fresh shared memory is not NaN");
       }
       double read[64];
       expect(cuMemcpyDtoH_v2(read, x, sizeof read) == 0, "cuMemcpyDtoH failed");
       for (int i = 0; i < 64; i++) expect(read[i] == i, "not reversed twice");
       expect(cuFuncSetAttribute(f, kMaxDynamicSharedSizeBytes, 227 * 1024 + 1) ==
                  kInvalidValue,
              "cuFuncSetAttribute accepted more than 227 KiB");
     },
     {"kernel reverse_in_dynamic_shared: 100000 bytes of dynamic shared memory, over the "
      "49152 it may ask for (0 static",
      "kernel reverse_in_dynamic_shared: 232449 bytes of dynamic shared memory with 0 static "
      "are over sm_90's 232448 a block"}},
    {"fresh device memory reads as NaN in every width",
     [] {
       CUdeviceptr x = allocate(64);
       unsigned char bytes[64];
       expect(cuMemcpyDtoH_v2(bytes, x, 64) == 0, "cuMemcpyDtoH failed");
       double d;
       float f;
       std::memcpy(&d, bytes, 8);
       std::memcpy(&f, bytes + 8, 4);
       unsigned short h;
       std::memcpy(&h, bytes + 12, 2);
       expect(std::isnan(d) && std::isnan(f) && (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0,
              "fresh memory is not NaN");
     },
     {}},
};

// Runs case c in a child; its stdout and stderr come back in `output`.
bool run(const Case &c, std::string &output) {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) return false;
  pid_t child = fork();
  if (child == 0) {
    close(pipe_ends[0]);
    dup2(pipe_ends[1], 1);
    dup2(pipe_ends[1], 2);
    c.prepare();
    set_up();
    c.body();
    std::fflush(stdout);
    _exit(0);
  }
  close(pipe_ends[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = read(pipe_ends[0], buffer, sizeof buffer)) > 0) output.append(buffer, n);
  close(pipe_ends[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return false;
  for (const char *words : c.report) {
    if (output.find(words) == std::string::npos) {
      output += "(the report lacks \"" + std::string(words) + "\")";
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: selftest PTX_DIR\n");
    return 2;
  }
  ptx_dir = argv[1];
  unsigned passed = 0, failed = 0;
  for (const Case &c : cases) {
    std::string output;
    if (run(c, output)) {
      passed++;
      std::printf("selftest: ok: %s\n", c.name);
    } else {
      failed++;
      std::printf("selftest: FAILED: %s\n%s\n", c.name, output.c_str());
    }
  }
  std::printf("selftest: %u passed, %u failed\n", passed, failed);
  return failed ? 1 : 0;
}
