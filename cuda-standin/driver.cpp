// The CUDA driver API, as much of it as cudarc and tensorfem call, on the CPU: devices are
// sm_90 stand-ins, device memory is host memory, every stream runs its work in issue order
// at the moment it is issued (so streams and events are trivially ordered; events carry
// host timestamps), modules are the PTX NVRTC produced, and a launch runs the host build
// of the same kernel (block.cpp).
//
// It initialises only when TENSORFEM_CUDA_STANDIN=1, so that nothing but the tests that
// ask for it ever takes it for a GPU.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "standin.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
};

namespace {

using standin::Kernel;

std::mutex lock;
bool initialised = false;
// The error that ended the last failed launch: like a GPU's, it stays until the process ends.
CUresult sticky = CUDA_SUCCESS;

void report(const std::string &what) { std::fprintf(stderr, "cuda stand-in: %s\n", what.c_str()); }

struct Context {
  CUdevice device;
  unsigned retained = 0;
};
struct Stream {
  int unused;
};
struct Event {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};
struct Module {
  std::map<std::string, Kernel *> kernels;
};

std::vector<Context *> contexts;  // the primary context of each device
thread_local Context *current = nullptr;

struct Allocation {
  size_t bytes;
  CUdevice device;
};
std::map<unsigned long long, Allocation> allocations;  // device memory by base address
std::vector<size_t> used;                               // bytes allocated per device
std::set<void *> pinned;

int device_count() {
  const char *env = std::getenv("TENSORFEM_CUDA_STANDIN_DEVICES");
  int n = env ? std::atoi(env) : 1;
  return n < 1 ? 1 : n;
}

size_t device_memory() {
  const char *env = std::getenv("TENSORFEM_CUDA_STANDIN_MEMORY");
  // Default 8 GiB: room for the tests, small enough that "too little memory" is reachable.
  return env ? std::strtoull(env, nullptr, 10) : (size_t)8 << 30;
}

CUresult ready() {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  return sticky;
}

CUresult valid_device(CUdevice d) {
  if (CUresult r = ready()) return r;
  return d >= 0 && d < device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// cuMemAlloc refuses zero bytes; cuMemAllocAsync gives a pointer that can be freed.
CUresult allocate(CUdeviceptr *out, size_t bytes, bool zero_allowed) {
  if (CUresult r = ready()) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!current) return CUDA_ERROR_INVALID_CONTEXT;
  CUdevice d = current->device;
  if (bytes == 0 && !zero_allowed) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(lock);
  if (used[d] + bytes > device_memory()) return CUDA_ERROR_OUT_OF_MEMORY;
  void *p = standin::device_allocate(bytes);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  used[d] += bytes;
  allocations[(unsigned long long)p] = {bytes, d};
  *out = (CUdeviceptr)p;
  return CUDA_SUCCESS;
}

CUresult release(CUdeviceptr p) {
  if (CUresult r = ready()) return r;
  std::lock_guard<std::mutex> guard(lock);
  size_t bytes = 0;
  switch (standin::device_free((void *)p, bytes)) {
    case standin::FreeResult::Freed:
      break;
    case standin::FreeResult::Twice:
      report("device memory at " + standin::describe(p) + " freed a second time");
      return CUDA_ERROR_INVALID_VALUE;
    case standin::FreeResult::Unknown:
      report("cuMemFree of " + standin::describe(p) + ": not an allocation's start");
      return CUDA_ERROR_INVALID_VALUE;
  }
  auto found = allocations.find(p);
  used[found->second.device] -= found->second.bytes;
  allocations.erase(found);
  return CUDA_SUCCESS;
}

// A copy or fill of `bytes` at the device pointers among dst and src: each range must lie
// inside one live allocation.
CUresult checked(const char *call, const void *device_dst, const void *device_src, size_t bytes) {
  if (CUresult r = ready()) return r;
  for (const void *p : {device_dst, device_src}) {
    if (!p) continue;
    std::string wrong = standin::check_range(p, bytes);
    if (!wrong.empty()) {
      report(std::string(call) + ": " + wrong);
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

CUresult copy(const char *call, void *dst, const void *src, size_t bytes, bool dst_on_device,
              bool src_on_device) {
  if (CUresult r = ready()) return r;
  if (bytes && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checked(call, dst_on_device ? dst : nullptr, src_on_device ? src : nullptr,
                           bytes))
    return r;
  std::memmove(dst, src, bytes);
  return CUDA_SUCCESS;
}

// The parameters of entry `name` in `ptx` as libffi types, and whether its body has a
// barrier, a warp operation or a call (then its threads run as fibers).
bool parse_entry(const std::string &ptx, size_t at, Kernel &k, std::string &error) {
  size_t open = ptx.find('(', at), close = ptx.find(')', open);
  if (open == std::string::npos || close == std::string::npos) {
    error = "no parameter list";
    return false;
  }
  std::string params = ptx.substr(open + 1, close - open - 1);
  size_t pos = 0;
  while ((pos = params.find(".param", pos)) != std::string::npos) {
    size_t end = params.find(',', pos);
    std::string p = params.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos += 6;
    ffi_type *t = nullptr;
    if (p.find(".u64") != std::string::npos || p.find(".s64") != std::string::npos ||
        p.find(".b64") != std::string::npos)
      t = &ffi_type_uint64;
    else if (p.find(".u32") != std::string::npos || p.find(".s32") != std::string::npos ||
             p.find(".b32") != std::string::npos)
      t = &ffi_type_uint32;
    else if (p.find(".f64") != std::string::npos)
      t = &ffi_type_double;
    else if (p.find(".f32") != std::string::npos)
      t = &ffi_type_float;
    if (!t || p.find('[') != std::string::npos) {
      error = "parameter `" + p + "` is of a type the stand-in does not pass";
      return false;
    }
    k.types.push_back(t);
  }
  size_t body = ptx.find('{', close);
  // The directives between the parameters and the body: __launch_bounds__ is `.maxntid`.
  std::string directives = ptx.substr(close, body - close);
  for (const char *bound : {".maxntid", ".reqntid"}) {
    size_t at = directives.find(bound);
    if (at == std::string::npos) continue;
    unsigned x = 1, y = 1, z = 1;
    if (std::sscanf(directives.c_str() + at + std::strlen(bound), " %u , %u , %u", &x, &y, &z) < 1) {
      error = std::string("unreadable ") + bound;
      return false;
    }
    k.max_threads = std::min(k.max_threads, x * y * z);
  }
  int depth = 0;
  size_t end = body;
  for (; end < ptx.size(); end++) {
    if (ptx[end] == '{') depth++;
    if (ptx[end] == '}' && --depth == 0) break;
  }
  std::string text = ptx.substr(body, end - body);
  k.cooperative = text.find("bar.") != std::string::npos ||
                  text.find("barrier.") != std::string::npos ||
                  text.find("shfl.") != std::string::npos ||
                  text.find("vote.") != std::string::npos ||
                  text.find("\tcall") != std::string::npos;
  if (ffi_prep_cif(&k.cif, FFI_DEFAULT_ABI, (unsigned)k.types.size(), &ffi_type_void,
                   k.types.data()) != FFI_OK) {
    error = "libffi cannot call it";
    return false;
  }
  return true;
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const char *on = std::getenv("TENSORFEM_CUDA_STANDIN");
  if (!on || std::strcmp(on, "1") != 0) return CUDA_ERROR_NO_DEVICE;
  std::lock_guard<std::mutex> guard(lock);
  if (!initialised) {
    for (int d = 0; d < device_count(); d++) contexts.push_back(new Context{d});
    used.assign(device_count(), 0);
    standin::catch_faults();
    initialised = true;
  }
  return CUDA_SUCCESS;
}

// The driver's private tables (NVRTC asks for them when a driver is loaded): there are none.
CUresult cuGetExportTable(const void **table, const void *) {
  if (table) *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuDriverGetVersion(int *version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult e, const char **name) {
  static const std::map<CUresult, const char *> names = {
      {CUDA_SUCCESS, "CUDA_SUCCESS"},
      {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
      {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
      {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
      {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
      {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
      {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
      {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
      {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX"},
      {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
      {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
      {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
      {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
      {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED"},
      {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
  };
  auto found = names.find(e);
  if (!name || found == names.end()) return CUDA_ERROR_INVALID_VALUE;
  *name = found->second;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult e, const char **text) { return cuGetErrorName(e, text); }

CUresult cuDeviceGetCount(int *count) {
  if (CUresult r = ready()) return r;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = device_count();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (CUresult r = valid_device(ordinal)) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int length, CUdevice d) {
  if (CUresult r = valid_device(d)) return r;
  if (!name || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, length, "CUDA stand-in on the CPU (sm_90)");
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
  if (CUresult r = valid_device(d)) return r;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = device_memory();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice d) {
  if (CUresult r = valid_device(d)) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  // An H100-like sm_90 device.
  static const std::map<int, int> attributes = {
      {1, 1024},        // MAX_THREADS_PER_BLOCK
      {2, 1024},        // MAX_BLOCK_DIM_X
      {3, 1024},        // MAX_BLOCK_DIM_Y
      {4, 64},          // MAX_BLOCK_DIM_Z
      {5, 2147483647},  // MAX_GRID_DIM_X
      {6, 65535},       // MAX_GRID_DIM_Y
      {7, 65535},       // MAX_GRID_DIM_Z
      {8, 49152},       // MAX_SHARED_MEMORY_PER_BLOCK
      {10, 32},         // WARP_SIZE
      {12, 65536},      // MAX_REGISTERS_PER_BLOCK
      {16, 132},        // MULTIPROCESSOR_COUNT
      {39, 2048},       // MAX_THREADS_PER_MULTIPROCESSOR
      {41, 1},          // UNIFIED_ADDRESSING
      {75, 9},          // COMPUTE_CAPABILITY_MAJOR
      {76, 0},          // COMPUTE_CAPABILITY_MINOR
      {97, 232448},     // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
      {115, 1},         // MEMORY_POOLS_SUPPORTED: stream-ordered allocations, as on an H200
  };
  auto found = attributes.find(attribute);
  if (found == attributes.end()) {
    report("device attribute " + std::to_string(attribute) + " is not modelled");
    return CUDA_ERROR_INVALID_VALUE;
  }
  *value = found->second;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(Context **ctx, CUdevice d) {
  if (CUresult r = valid_device(d)) return r;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(lock);
  contexts[d]->retained++;
  *ctx = contexts[d];
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  if (CUresult r = valid_device(d)) return r;
  std::lock_guard<std::mutex> guard(lock);
  if (contexts[d]->retained == 0) return CUDA_ERROR_INVALID_CONTEXT;
  contexts[d]->retained--;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(Context *ctx) {
  if (CUresult r = ready()) return r;
  current = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(Context **ctx) {
  if (CUresult r = ready()) return r;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = current;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *d) {
  if (CUresult r = ready()) return r;
  if (!current) return CUDA_ERROR_INVALID_CONTEXT;
  *d = current->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() { return ready(); }

CUresult cuStreamCreate(Stream **stream, unsigned flags) {
  if (CUresult r = ready()) return r;
  if (!stream) return CUDA_ERROR_INVALID_VALUE;
  (void)flags;
  *stream = new Stream{0};
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(Stream *stream) {
  if (CUresult r = ready()) return r;
  delete stream;
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(Stream *) { return ready(); }
CUresult cuStreamQuery(Stream *) { return ready(); }
CUresult cuStreamWaitEvent(Stream *, Event *, unsigned) { return ready(); }

CUresult cuEventCreate(Event **event, unsigned) {
  if (CUresult r = ready()) return r;
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  *event = new Event();
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(Event *event) {
  if (CUresult r = ready()) return r;
  delete event;
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(Event *event, Stream *) {
  if (CUresult r = ready()) return r;
  if (!event) return CUDA_ERROR_INVALID_HANDLE;
  event->at = std::chrono::steady_clock::now();
  event->recorded = true;
  return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(Event *) { return ready(); }
CUresult cuEventQuery(Event *) { return ready(); }

CUresult cuEventElapsedTime(float *ms, Event *start, Event *end) {
  if (CUresult r = ready()) return r;
  if (!ms || !start || !end || !start->recorded || !end->recorded)
    return CUDA_ERROR_INVALID_HANDLE;
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime_v2(float *ms, Event *start, Event *end) {
  return cuEventElapsedTime(ms, start, end);
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) { return allocate(p, bytes, false); }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, Stream *) {
  return allocate(p, bytes, true);
}
CUresult cuMemFree_v2(CUdeviceptr p) { return release(p); }
CUresult cuMemFreeAsync(CUdeviceptr p, Stream *) { return release(p); }

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
  if (CUresult r = ready()) return r;
  if (!current) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> guard(lock);
  *total = device_memory();
  *free_bytes = device_memory() - used[current->device];
  return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned) {
  if (CUresult r = ready()) return r;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  *p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!*p) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> guard(lock);
  pinned.insert(*p);
  return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void *p) {
  if (CUresult r = ready()) return r;
  std::lock_guard<std::mutex> guard(lock);
  if (!pinned.erase(p)) return CUDA_ERROR_INVALID_VALUE;
  std::free(p);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  return copy("cuMemcpyHtoD", (void *)dst, src, n, true, false);
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  return copy("cuMemcpyDtoH", dst, (const void *)src, n, false, true);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy("cuMemcpyDtoD", (void *)dst, (const void *)src, n, true, true);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, Stream *) {
  return copy("cuMemcpyHtoDAsync", (void *)dst, src, n, true, false);
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, Stream *) {
  return copy("cuMemcpyDtoHAsync", dst, (const void *)src, n, false, true);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, Stream *) {
  return copy("cuMemcpyDtoDAsync", (void *)dst, (const void *)src, n, true, true);
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
  if (CUresult r = checked("cuMemsetD8", (const void *)dst, nullptr, n)) return r;
  std::memset((void *)dst, value, n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, Stream *) {
  return cuMemsetD8_v2(dst, value, n);
}

// Each kernel's registers a thread and static shared bytes from ptxas's report, when
// TENSORFEM_CUDA_STANDIN_RESOURCES names the table `tensorfem kernels --arch sm_90` printed
// (rows: kernel, registers, spill bytes, shared bytes); empty without it. An unreadable
// file is reported and makes every module load fail, rather than launches go unchecked.
struct PtxasResources {
  unsigned registers, shared;
};
struct PtxasReport {
  std::map<std::string, PtxasResources> table;
  std::string failure;
};

const PtxasReport &ptxas_report() {
  static const PtxasReport loaded = [] {
    PtxasReport r;
    const char *path = std::getenv("TENSORFEM_CUDA_STANDIN_RESOURCES");
    if (!path) return r;
    FILE *f = std::fopen(path, "r");
    if (!f) {
      r.failure = std::string("TENSORFEM_CUDA_STANDIN_RESOURCES: cannot read ") + path;
      return r;
    }
    char line[512], name[256];
    unsigned registers, spills, shared;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "%255s %u %u %u", name, &registers, &spills, &shared) == 4)
        r.table[name] = {registers, shared};
    std::fclose(f);
    if (r.table.empty())
      r.failure = std::string("TENSORFEM_CUDA_STANDIN_RESOURCES: no kernel rows in ") + path;
    return r;
  }();
  return loaded;
}

// A module is PTX text; each `.entry` must be a kernel of the host build of the same
// kernel file, and that file's host kernels must all be entries.
CUresult cuModuleLoadData(Module **module, const void *image) {
  if (CUresult r = ready()) return r;
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  std::string ptx(static_cast<const char *>(image));
  if (ptx.find(".target sm_90") == std::string::npos &&
      ptx.find(".target sm_9") == std::string::npos) {
    report("a module not compiled for sm_90 (no `.target sm_90`)");
    return CUDA_ERROR_INVALID_PTX;
  }
  const PtxasReport &ptxas = ptxas_report();
  if (!ptxas.failure.empty()) {
    report(ptxas.failure);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  auto *m = new Module();
  std::string file;
  size_t pos = 0;
  while ((pos = ptx.find(".entry ", pos)) != std::string::npos) {
    size_t name_at = pos + 7, name_end = ptx.find_first_of(" (\n", name_at);
    std::string name = ptx.substr(name_at, name_end - name_at);
    pos = name_end;
    const standin::HostKernel *host = nullptr;
    for (unsigned i = 0; i < standin::host_kernel_count; i++)
      if (name == standin::host_kernels[i].name) host = &standin::host_kernels[i];
    if (!host) {
      report("kernel " + name + " is in the PTX but not in the host build");
      delete m;
      return CUDA_ERROR_NOT_FOUND;
    }
    if (file.empty()) file = host->file;
    if (file != host->file) {
      report("kernel " + name + " of kernels/" + host->file + ".cu is in the module of kernels/" +
             file + ".cu");
      delete m;
      return CUDA_ERROR_INVALID_IMAGE;
    }
    auto *k = new Kernel();
    k->name = name;
    k->function = host->function;
    std::string error;
    if (!parse_entry(ptx, pos, *k, error)) {
      report("kernel " + name + ": " + error);
      delete k;
      delete m;
      return CUDA_ERROR_INVALID_PTX;
    }
    if (!ptxas.table.empty()) {
      auto found = ptxas.table.find(name);
      if (found == ptxas.table.end()) {
        report("kernel " + name + " is not in ptxas's report (TENSORFEM_CUDA_STANDIN_RESOURCES)");
        delete k;
        delete m;
        return CUDA_ERROR_INVALID_IMAGE;
      }
      k->registers = found->second.registers;
      k->static_shared = found->second.shared;
      k->max_dynamic_shared = standin::kDefaultSharedBytes -
                              std::min(found->second.shared, standin::kDefaultSharedBytes);
    }
    m->kernels[name] = k;
  }
  for (unsigned i = 0; i < standin::host_kernel_count; i++) {
    const standin::HostKernel &h = standin::host_kernels[i];
    if (file == h.file && !m->kernels.count(h.name)) {
      report("kernel " + std::string(h.name) + " of the host build of kernels/" + file +
             ".cu is not in its PTX");
      delete m;
      return CUDA_ERROR_INVALID_IMAGE;
    }
  }
  *module = m;
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(Module *module) {
  if (CUresult r = ready()) return r;
  if (!module) return CUDA_ERROR_INVALID_HANDLE;
  for (auto &k : module->kernels) delete k.second;
  delete module;
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(Kernel **function, Module *module, const char *name) {
  if (CUresult r = ready()) return r;
  if (!function || !module || !name) return CUDA_ERROR_INVALID_VALUE;
  auto found = module->kernels.find(name);
  if (found == module->kernels.end()) return CUDA_ERROR_NOT_FOUND;
  *function = found->second;
  return CUDA_SUCCESS;
}

// Only the dynamic shared memory a launch may ask for: up to sm_90's 227 KiB a block with
// the kernel's static shared memory.
CUresult cuFuncSetAttribute(Kernel *f, int attribute, int value) {
  if (CUresult r = ready()) return r;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  const int kMaxDynamicSharedSizeBytes = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  if (attribute != kMaxDynamicSharedSizeBytes) {
    report("kernel " + f->name + ": function attribute " + std::to_string(attribute) +
           " is not supported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (value < 0 || (unsigned long long)value + f->static_shared > standin::kMaxSharedBytes) {
    report("kernel " + f->name + ": " + std::to_string(value) +
           " bytes of dynamic shared memory with " + std::to_string(f->static_shared) +
           " static are over sm_90's " + std::to_string(standin::kMaxSharedBytes) + " a block");
    return CUDA_ERROR_INVALID_VALUE;
  }
  f->max_dynamic_shared = (unsigned)value;
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(Kernel *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared_bytes, Stream *,
                        void **params, void **extra) {
  if (CUresult r = ready()) return r;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (extra) {
    report("kernel " + f->name + ": launch arguments through `extra` are not supported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (!params && !f->types.empty()) return CUDA_ERROR_INVALID_VALUE;
  unsigned long long threads = (unsigned long long)bx * by * bz;
  if (gx == 0 || gy == 0 || gz == 0 || threads == 0 || threads > 1024 || bx > 1024 ||
      by > 1024 || bz > 64 || gy > 65535 || gz > 65535 || gx > 2147483647u)
    return CUDA_ERROR_INVALID_VALUE;
  // Over the kernel's launch bounds, or its registers (allocated per warp, 8 a thread at a
  // time) over sm_90's 65536 a block: the driver refuses "too many resources requested".
  unsigned long long warps = (threads + 31) / 32, per_thread = (f->registers + 7) / 8 * 8;
  if (threads > f->max_threads || warps * 32 * per_thread > 65536) {
    report("kernel " + f->name + ": a block of " + std::to_string(threads) + " threads is over " +
           (threads > f->max_threads
                ? "its launch bounds (" + std::to_string(f->max_threads) + " threads)"
                : "sm_90's 65536 registers a block: " + std::to_string(warps * 32 * per_thread) +
                      " at " + std::to_string(f->registers) + " a thread (ptxas)"));
    return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  }
  if (shared_bytes > f->max_dynamic_shared) {
    report("kernel " + f->name + ": " + std::to_string(shared_bytes) +
           " bytes of dynamic shared memory, over the " + std::to_string(f->max_dynamic_shared) +
           " it may ask for (" + std::to_string(f->static_shared) +
           " static; more needs CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::string error;
  switch (standin::launch(*f, {gx, gy, gz}, {bx, by, bz}, shared_bytes, params, error)) {
    case standin::Launched::Ran:
      return CUDA_SUCCESS;
    case standin::Launched::Failed:
      sticky = CUDA_ERROR_LAUNCH_FAILED;
      break;
    case standin::Launched::IllegalAddress:
      sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
      break;
  }
  report(error);
  return sticky;
}

}  // extern "C"
