#include "transport/ssh/session_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace dlaunch::ssh {

namespace {

std::size_t page_size() {
  static const auto n = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return n;
}

// Smaller first allocations are not worth pages of their own.
constexpr std::size_t kOwnPagesFrom = 8192;

bool all_zero(const unsigned char* p, std::size_t n) {
  // Word at a time: the scan of a 56 KB structure takes a few microseconds.
  const auto* w = reinterpret_cast<const std::uint64_t*>(p);
  for (std::size_t i = 0; i < n / sizeof *w; ++i) {
    if (w[i] != 0) return false;
  }
  return true;
}

}  // namespace

SessionPages::~SessionPages() {
  if (block_ != nullptr) ::munmap(block_, mapped_);
}

void* SessionPages::alloc(std::size_t n, void** abstract) {
  auto* self = static_cast<SessionPages*>(*abstract);
  if (self != nullptr && self->first_) {
    self->first_ = false;
    if (n >= kOwnPagesFrom) {
      const std::size_t len = (n + page_size() - 1) / page_size() * page_size();
      void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p != MAP_FAILED) {
        self->block_ = p;
        self->mapped_ = len;
        return p;
      }
    }
  }
  return std::malloc(n);
}

void SessionPages::free(void* p, void** abstract) {
  auto* self = static_cast<SessionPages*>(*abstract);
  if (self != nullptr && p != nullptr && p == self->block_) {
    ::munmap(self->block_, self->mapped_);
    self->block_ = nullptr;
    self->mapped_ = 0;
    return;
  }
  std::free(p);
}

void* SessionPages::realloc(void* p, std::size_t n, void** abstract) {
  auto* self = static_cast<SessionPages*>(*abstract);
  if (self == nullptr || p == nullptr || p != self->block_) return std::realloc(p, n);
  // libssh2 does not resize its session structure; should it, the block
  // leaves its pages for malloc.
  void* q = std::malloc(n);
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, std::min(n, self->mapped_));
  ::munmap(self->block_, self->mapped_);
  self->block_ = nullptr;
  self->mapped_ = 0;
  return q;
}

std::size_t SessionPages::release_zero_pages() {
  if (block_ == nullptr) return 0;
  const std::size_t page = page_size();
  std::vector<unsigned char> resident(mapped_ / page);
  if (::mincore(block_, mapped_, resident.data()) != 0) return 0;
  auto* base = static_cast<unsigned char*>(block_);
  std::size_t released = 0;
  for (std::size_t i = 0; i < resident.size(); ++i) {
    // A page not resident reads as zero already; scanning it would map it.
    if ((resident[i] & 1) == 0) continue;
    unsigned char* p = base + i * page;
    if (!all_zero(p, page)) continue;
    if (::madvise(p, page, MADV_DONTNEED) == 0) released += page;
  }
  return released;
}

std::size_t SessionPages::resident_bytes() const {
  if (block_ == nullptr) return 0;
  const std::size_t page = page_size();
  std::vector<unsigned char> resident(mapped_ / page);
  if (::mincore(block_, mapped_, resident.data()) != 0) return 0;
  return static_cast<std::size_t>(std::count_if(resident.begin(), resident.end(),
                                                [](unsigned char r) { return (r & 1) != 0; })) *
         page;
}

}  // namespace dlaunch::ssh
