// The stand-in's own checks, each case in a child process (an illegal address is sticky
// for the process, as on a GPU): through the driver API, with the PTX NVRTC compiled for
// kernels/vector.cu, each fault must fail with the driver's error code and a report
// naming what the issue is. Prints one line per case and `selftest: N passed, M failed`.
//
// Usage: selftest PTX_DIR   (with the stand-in's libcuda.so on the loader path and
//                            TENSORFEM_CUDA_STANDIN=1)
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
}

namespace {

constexpr CUresult kInvalidValue = 1, kIllegalAddress = 700;
std::string ptx_dir;
Kernel *fill_f64 = nullptr;

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

// A case: its name, what it does (in the child), the words its report must hold.
struct Case {
  const char *name;
  std::function<void()> body;
  std::vector<const char *> report;
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
