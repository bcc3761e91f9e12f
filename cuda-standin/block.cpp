// Runs a kernel launch on the CPU: the grid's blocks are shared out among host threads,
// and each block runs its threads either one after the other (a kernel without barriers or
// warp operations) or as cooperative fibers that switch at every barrier and shuffle.
#include "standin.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "include/cuda_host.h"

STANDIN_INDEX uint3 threadIdx;
STANDIN_INDEX uint3 blockIdx;
STANDIN_INDEX dim3 blockDim;
STANDIN_INDEX dim3 gridDim;

namespace standin {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr unsigned kWarp = 32;
constexpr unsigned kMaxThreads = 1024;
// The stacks' tops are staggered by an odd number of cache lines each over 128 KiB: tops
// kStackBytes apart would all fall into the same cache sets and evict one another at every
// switch.
constexpr size_t kColourSpan = 128 * 1024;
constexpr size_t colour(unsigned fiber) { return (size_t)fiber * 17 * 64 % kColourSpan; }

enum class State { Ready, AtBarrier, AtWarp, Done };

// A host thread's fibers live as long as the thread and run one block's threads after
// another: each loops over "run the kernel for the current block, then yield". A fiber
// that waits or returns hands over directly to the next ready one, with GCC's
// __builtin_setjmp/__builtin_longjmp (stack, frame and resume address only: no signal mask,
// no system call); a context of <ucontext.h> only starts a fiber on its own stack, once.
typedef void *Resume[5];
struct Fiber {
  Resume resume;
  ucontext_t start;
  bool started = false;
  State state = State::Ready;
  unsigned long long slot = 0;  // the value this lane offers to a shuffle
};

// A gathering point of some of a block's fibers (the block, or one warp).
struct Barrier {
  unsigned arrived = 0;
  int accumulated = 0;
  int result = 0;
  unsigned long long generation = 0;
};

// The block a host thread is running.
struct BlockRun {
  const Kernel *kernel = nullptr;
  void **params = nullptr;
  unsigned threads = 0;
  unsigned current = 0;
  bool cooperative = false;
  Fiber *fibers = nullptr;
  Barrier block;
  Barrier warps[kMaxThreads / kWarp];
  std::string error;
  Resume recover;               // where an access fault of the block's threads lands
  bool illegal_address = false;  // it did
};

thread_local BlockRun *running = nullptr;
// Launches under way: while there are none, a fault is not a kernel's.
std::atomic<int> active_launches{0};

void fiber_main();

// This host thread's fibers, their stacks (mapped once, reserved lazily) and the
// scheduler's resume point.
struct Fibers {
  char *stacks = nullptr;
  Fiber fibers[kMaxThreads];
  Resume scheduler;
  ~Fibers() {
    if (stacks) munmap(stacks, kStackBytes * kMaxThreads);
  }
  // Prepares fiber i to start from the beginning of fiber_main.
  void reset(unsigned i) {
    if (!stacks) {
      void *p = mmap(nullptr, kStackBytes * kMaxThreads, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        std::fprintf(stderr, "cuda stand-in: cannot map the fibers' stacks\n");
        std::abort();
      }
      stacks = static_cast<char *>(p);
    }
    Fiber &f = fibers[i];
    getcontext(&f.start);
    f.start.uc_stack.ss_sp = stacks + kStackBytes * i;
    f.start.uc_stack.ss_size = kStackBytes - colour(i);
    f.start.uc_link = nullptr;
    makecontext(&f.start, fiber_main, 0);
    f.started = false;
  }
};
thread_local Fibers fibers;

void set_thread(unsigned t) {
  threadIdx.x = t % blockDim.x;
  threadIdx.y = (t / blockDim.x) % blockDim.y;
  threadIdx.z = t / (blockDim.x * blockDim.y);
}

void call_kernel(const BlockRun &run) {
  ffi_call(const_cast<ffi_cif *>(&run.kernel->cif), FFI_FN(run.kernel->function), nullptr,
           run.params);
}

// Continues fiber t where it stopped (or starts it), saving the caller's place in `from`.
// Kept out of line: __builtin_setjmp needs a frame of its own.
__attribute__((noinline)) void switch_to(Resume &from, unsigned t) {
  BlockRun &run = *running;
  Fiber &f = run.fibers[t];
  run.current = t;
  set_thread(t);
  if (__builtin_setjmp(from) == 0) {
    if (!f.started) {
      f.started = true;
      setcontext(&f.start);
    }
    __builtin_longjmp(f.resume, 1);
  }
}

// The calling fiber waits (or has returned): the next ready fiber of the block runs, or,
// when none is ready, the scheduler (which finds all returned, or a barrier none can pass).
__attribute__((noinline)) void yield() {
  BlockRun &run = *running;
  unsigned me = run.current, n = run.threads;
  Fiber &self = run.fibers[me];
  for (unsigned k = 1; k <= n; k++) {
    unsigned t = me + k < n ? me + k : me + k - n;
    if (run.fibers[t].state == State::Ready) {
      switch_to(self.resume, t);
      return;
    }
  }
  if (__builtin_setjmp(self.resume) == 0) __builtin_longjmp(fibers.scheduler, 1);
}

void fiber_main() {
  for (;;) {
    const BlockRun &run = *running;
    call_kernel(run);
    run.fibers[run.current].state = State::Done;
    yield();
  }
}

std::string block_name(const BlockRun &run) {
  return "block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," +
         std::to_string(blockIdx.z) + ") of kernel " + run.kernel->name;
}

// Every fiber of [first, first + count) that waits in `state` becomes ready.
void release(BlockRun &run, unsigned first, unsigned count, State state) {
  for (unsigned i = first; i < first + count; i++)
    if (run.fibers[i].state == state) run.fibers[i].state = State::Ready;
}

// Arrives at `barrier` of the `count` fibers from `first`; returns the OR of their
// predicates once all have arrived.
int arrive(BlockRun &run, Barrier &barrier, unsigned first, unsigned count, State state,
           int predicate) {
  barrier.accumulated |= predicate;
  if (++barrier.arrived == count) {
    barrier.result = barrier.accumulated;
    barrier.accumulated = 0;
    barrier.arrived = 0;
    barrier.generation++;
    release(run, first, count, state);
    return barrier.result;
  }
  run.fibers[run.current].state = state;
  yield();
  return barrier.result;
}

bool run_block(BlockRun &run);

// Runs the block, or ends it where one of its threads faults (fault() jumps to `recover`):
// the fibers that did not return are abandoned and start afresh next time.
__attribute__((noinline)) bool run_guarded(BlockRun &run) {
  if (__builtin_setjmp(run.recover) != 0) {
    BlockRun &failed = *running;
    if (failed.cooperative)
      for (unsigned t = 0; t < failed.threads; t++)
        if (failed.fibers[t].state != State::Done) fibers.reset(t);
    return false;
  }
  return run_block(run);
}

bool run_block(BlockRun &run) {
  unsigned n = run.threads;
  if (!run.cooperative) {
    for (unsigned t = 0; t < n; t++) {
      set_thread(t);
      call_kernel(run);
    }
    return true;
  }
  run.fibers = fibers.fibers;
  for (unsigned t = 0; t < n; t++) {
    if (!fibers.stacks || fibers.fibers[t].start.uc_stack.ss_size == 0) fibers.reset(t);
    run.fibers[t].state = State::Ready;
  }
  // Fiber 0 starts; the fibers hand over among themselves until none is ready.
  switch_to(fibers.scheduler, 0);
  unsigned returned = 0;
  for (unsigned t = 0; t < n; t++) returned += run.fibers[t].state == State::Done;
  if (returned == n) return true;
  run.error = "a barrier that not every thread reaches in " + block_name(run) + ": " +
              std::to_string(n - returned) + " threads wait, " + std::to_string(returned) +
              " have returned";
  // The waiting fibers are abandoned mid-kernel: each starts afresh next time.
  for (unsigned t = 0; t < n; t++)
    if (run.fibers[t].state != State::Done) fibers.reset(t);
  return false;
}

// Host threads that take blocks of a launch; the launching thread takes blocks too.
class Pool {
 public:
  // Never destroyed: its threads wait on it until the process ends.
  static Pool &get() {
    static Pool *pool = new Pool();
    return *pool;
  }

  // Runs block i for every i < blocks on the pool and the caller; the first error wins.
  bool run(unsigned long long blocks, const std::function<bool(unsigned long long)> &body) {
    std::lock_guard<std::mutex> one_launch(launch_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = &body;
      next_ = 0;
      total_ = blocks;
      failed_ = false;
      working_ = workers_.size();
      round_++;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return working_ == 0; });
    body_ = nullptr;
    return !failed_;
  }

 private:
  Pool() {
    unsigned n = std::thread::hardware_concurrency();
    if (const char *env = std::getenv("TENSORFEM_CUDA_STANDIN_THREADS")) n = std::atoi(env);
    for (unsigned i = 1; i < n; i++) workers_.emplace_back([this] { serve(); });
    for (auto &w : workers_) w.detach();
  }

  void work() {
    for (;;) {
      unsigned long long i = next_.fetch_add(1);
      if (i >= total_ || failed_.load()) return;
      if (!(*body_)(i)) failed_ = true;
    }
  }

  void serve() {
    unsigned long long seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return round_ != seen; });
        seen = round_;
      }
      work();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--working_ == 0) idle_.notify_all();
    }
  }

  std::mutex launch_, mutex_;
  std::condition_variable wake_, idle_;
  std::vector<std::thread> workers_;
  const std::function<bool(unsigned long long)> *body_ = nullptr;
  std::atomic<unsigned long long> next_{0};
  unsigned long long total_ = 0;
  std::atomic<bool> failed_{false};
  size_t working_ = 0;
  unsigned long long round_ = 0;
};

}  // namespace

Launched launch(const Kernel &kernel, const Dim &grid, const Dim &block, unsigned shared_bytes,
                void **params, std::string &error) {
  unsigned threads = block.x * block.y * block.z;
  unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
  std::mutex error_mutex;
  bool illegal_address = false;
  auto body = [&](unsigned long long i) {
    BlockRun run;
    run.kernel = &kernel;
    run.params = params;
    run.threads = threads;
    run.cooperative = kernel.cooperative;
    gridDim = {grid.x, grid.y, grid.z};
    blockDim = {block.x, block.y, block.z};
    blockIdx.x = (unsigned)(i % grid.x);
    blockIdx.y = (unsigned)((i / grid.x) % grid.y);
    blockIdx.z = (unsigned)(i / ((unsigned long long)grid.x * grid.y));
    running = &run;
    std::memset(dynamic_shared, 0xFF, shared_bytes);
    bool ok = run_guarded(run);
    running = nullptr;
    if (!ok) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (error.empty()) {
        error = run.error;
        illegal_address = run.illegal_address;
      }
    }
    return ok;
  };
  active_launches++;
  bool ran = Pool::get().run(blocks, body);
  active_launches--;
  if (ran) return Launched::Ran;
  return illegal_address ? Launched::IllegalAddress : Launched::Failed;
}

namespace {

struct sigaction before_segv, before_bus;

// An access fault: in a kernel's thread, the launch fails naming kernel, block, thread and
// address (a write when the page fault's error code says so); anywhere else, the handler
// that was there before ours takes it.
void fault(int signal, siginfo_t *info, void *context) {
  BlockRun *run = active_launches.load() ? running : nullptr;
  if (!run) {
    const struct sigaction &before = signal == SIGSEGV ? before_segv : before_bus;
    if (before.sa_flags & SA_SIGINFO) {
      before.sa_sigaction(signal, info, context);
    } else if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
      before.sa_handler(signal);
    } else {
      // Returning re-runs the access, which the default action then ends.
      ::signal(signal, SIG_DFL);
    }
    return;
  }
  bool write = (static_cast<ucontext_t *>(context)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
  run->error = std::string(write ? "a write" : "a read") + " at " +
               describe((uintptr_t)info->si_addr) + " by thread (" +
               std::to_string(threadIdx.x) + "," + std::to_string(threadIdx.y) + "," +
               std::to_string(threadIdx.z) + ") of " + block_name(*run);
  run->illegal_address = true;
  __builtin_longjmp(run->recover, 1);
}

}  // namespace

void catch_faults() {
  struct sigaction action {};
  action.sa_sigaction = fault;
  // SA_NODEFER: fault() leaves by a jump, so the signal must not stay blocked.
  action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &before_segv);
  sigaction(SIGBUS, &action, &before_bus);
}

}  // namespace standin

using standin::BlockRun;
using standin::running;

extern "C" int standin_syncthreads_or(int predicate) {
  BlockRun *run = running;
  if (!run->cooperative) {
    std::fprintf(stderr, "cuda stand-in: kernel %s reached a barrier in a plain launch\n",
                 run->kernel->name.c_str());
    std::abort();
  }
  return standin::arrive(*run, run->block, 0, run->threads, standin::State::AtBarrier,
                         predicate);
}

extern "C" unsigned long long standin_shfl_down(unsigned int mask, unsigned long long bits,
                                                unsigned int delta) {
  BlockRun *run = running;
  if (!run->cooperative || mask != 0xffffffffu) {
    std::fprintf(stderr, "cuda stand-in: kernel %s: a shuffle %s\n", run->kernel->name.c_str(),
                 mask != 0xffffffffu ? "over part of a warp is not supported"
                                     : "in a plain launch");
    std::abort();
  }
  unsigned me = run->current, warp = me / standin::kWarp, first = warp * standin::kWarp;
  unsigned lanes = std::min(standin::kWarp, run->threads - first);
  run->fibers[me].slot = bits;
  standin::Barrier &barrier = run->warps[warp];
  standin::arrive(*run, barrier, first, lanes, standin::State::AtWarp, 0);
  unsigned from = me - first + delta;
  unsigned long long value = from < lanes ? run->fibers[first + from].slot : bits;
  // A second gathering, so that no lane offers its next value before all have read.
  standin::arrive(*run, barrier, first, lanes, standin::State::AtWarp, 0);
  return value;
}
