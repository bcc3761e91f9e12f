// Device memory as a debugging allocator: each allocation is mapped on its own, its end
// against an inaccessible guard page (and one before its first page), filled with 0xFF
// bytes when fresh, and kept inaccessible for a while after it is freed. An access past
// the end, a read of memory never written, a use after free and a double free then show up
// instead of reading some other buffer's values.
//
// 0xFF bytes are a NaN in f16, f32 and f64 (a quiet one: no byte repeated makes a
// signalling NaN of every width, and a NaN of either kind spreads through arithmetic) and
// all ones in every integer width (an index read before it was written points far outside
// any buffer).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "standin.h"

namespace standin {
namespace {

// Freed regions kept inaccessible (their pages returned to the system) before they are
// unmapped and their addresses used again.
constexpr size_t kQuarantine = 4096;

struct Region {
  uintptr_t start;  // the first mapped byte (the guard page before)
  size_t length;    // both guard pages included
  uintptr_t user;   // what the allocation handed out
  size_t bytes;     // what it asked for
};

std::mutex regions_lock;
std::map<uintptr_t, Region> live;   // by `user`
std::map<uintptr_t, Region> freed;  // by `user`, the quarantine
std::deque<uintptr_t> freed_order;

size_t page() {
  static const size_t size = (size_t)sysconf(_SC_PAGESIZE);
  return size;
}

// The region of `map` whose mapping holds address a, if any.
const Region *holding(const std::map<uintptr_t, Region> &map, uintptr_t a) {
  for (const auto &entry : map) {
    const Region &r = entry.second;
    if (a >= r.start && a < r.start + r.length) return &r;
  }
  return nullptr;
}

std::string hex(uintptr_t a) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", (unsigned long long)a);
  return text;
}

std::string allocation(const Region &r) {
  return "the device allocation of " + std::to_string(r.bytes) + " bytes at " + hex(r.user);
}

// Where address a lies (regions_lock held).
std::string describe_locked(uintptr_t a) {
  if (const Region *r = holding(live, a)) {
    if (a >= r->user + r->bytes)
      return hex(a) + ", " + std::to_string(a - r->user - r->bytes) + " bytes past the end of " +
             allocation(*r);
    if (a < r->user)
      return hex(a) + ", " + std::to_string(r->user - a) + " bytes before the start of " +
             allocation(*r);
    return hex(a) + ", inside " + allocation(*r);
  }
  if (const Region *r = holding(freed, a))
    return hex(a) + ", inside " + allocation(*r) + ", freed before (a use after free)";
  return hex(a) + ", in no device allocation";
}

}  // namespace

void *device_allocate(size_t bytes) {
  // A GPU hands out 256-byte aligned allocations; the end of the rounded size touches the
  // guard page, so the last 255 bytes' slack at most goes unnoticed.
  size_t rounded = (bytes + 255) / 256 * 256;
  size_t inside = (rounded + page() - 1) / page() * page();
  size_t length = inside + 2 * page();
  void *map = mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return nullptr;
  uintptr_t start = (uintptr_t)map;
  if (inside && mprotect((void *)(start + page()), inside, PROT_READ | PROT_WRITE) != 0) {
    munmap(map, length);
    return nullptr;
  }
  uintptr_t user = start + page() + inside - rounded;
  std::memset((void *)user, 0xFF, rounded);
  std::lock_guard<std::mutex> guard(regions_lock);
  live[user] = {start, length, user, bytes};
  return (void *)user;
}

FreeResult device_free(void *p, size_t &bytes) {
  uintptr_t user = (uintptr_t)p;
  std::lock_guard<std::mutex> guard(regions_lock);
  auto found = live.find(user);
  if (found == live.end()) return freed.count(user) ? FreeResult::Twice : FreeResult::Unknown;
  Region r = found->second;
  live.erase(found);
  bytes = r.bytes;
  mprotect((void *)r.start, r.length, PROT_NONE);
  madvise((void *)r.start, r.length, MADV_DONTNEED);
  freed[user] = r;
  freed_order.push_back(user);
  if (freed_order.size() > kQuarantine) {
    auto oldest = freed.find(freed_order.front());
    munmap((void *)oldest->second.start, oldest->second.length);
    freed.erase(oldest);
    freed_order.pop_front();
  }
  return FreeResult::Freed;
}

std::string check_range(const void *p, size_t n) {
  if (n == 0) return "";
  uintptr_t a = (uintptr_t)p;
  std::lock_guard<std::mutex> guard(regions_lock);
  auto next = live.upper_bound(a);
  if (next != live.begin()) {
    const Region &r = std::prev(next)->second;
    if (a + n <= r.user + r.bytes) return "";
    if (a < r.user + r.bytes)
      return std::to_string(n) + " bytes at " + hex(a) + " run " +
             std::to_string(a + n - r.user - r.bytes) + " bytes past the end of " +
             allocation(r);
  }
  return describe_locked(a);
}

std::string describe(uintptr_t a) {
  std::lock_guard<std::mutex> guard(regions_lock);
  return describe_locked(a);
}

}  // namespace standin
