#include "transport/ssh/session_memory.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
      const std::size_t len = (kStructureOffset + n + page_size() - 1) / page_size() * page_size();
      void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p != MAP_FAILED) {
        self->block_ = p;
        self->mapped_ = len;
        self->structure_ = static_cast<unsigned char*>(p) + kStructureOffset;
        return self->structure_;
      }
    }
  }
  return std::malloc(n);
}

void SessionPages::free(void* p, void** abstract) {
  auto* self = static_cast<SessionPages*>(*abstract);
  if (self != nullptr && p != nullptr && p == self->structure_) {
    ::munmap(self->block_, self->mapped_);
    self->block_ = nullptr;
    self->structure_ = nullptr;
    self->mapped_ = 0;
    return;
  }
  std::free(p);
}

void* SessionPages::realloc(void* p, std::size_t n, void** abstract) {
  auto* self = static_cast<SessionPages*>(*abstract);
  if (self == nullptr || p == nullptr || p != self->structure_) return std::realloc(p, n);
  // libssh2 does not resize its session structure; should it, the block
  // leaves its pages for malloc.
  void* q = std::malloc(n);
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, std::min(n, self->mapped_ - kStructureOffset));
  ::munmap(self->block_, self->mapped_);
  self->block_ = nullptr;
  self->structure_ = nullptr;
  self->mapped_ = 0;
  return q;
}

void SessionPages::install(LIBSSH2_SESSION* session) {
  // NOLINTBEGIN(cppcoreguidelines-pro-type-reinterpret-cast): libssh2's API
  libssh2_session_callback_set(session, LIBSSH2_CALLBACK_RECV,
                               reinterpret_cast<void*>(&SessionPages::recv));
  libssh2_session_callback_set(session, LIBSSH2_CALLBACK_SEND,
                               reinterpret_cast<void*>(&SessionPages::send));
  // NOLINTEND(cppcoreguidelines-pro-type-reinterpret-cast)
}

void SessionPages::mark(const void* p, std::size_t n, std::uint64_t& pages) const {
  if (block_ == nullptr || n == 0) return;
  const auto base = reinterpret_cast<std::uintptr_t>(block_);
  const auto from = reinterpret_cast<std::uintptr_t>(p);
  if (from < base || from + n > base + mapped_) return;
  for (std::size_t i = (from - base) / page_size();
       i <= (from + n - 1 - base) / page_size() && i < 64; ++i) {
    pages |= std::uint64_t{1} << i;
  }
}

void SessionPages::give_back(const void* p, std::size_t n, std::uint64_t& pages) {
  if (block_ == nullptr || pages == 0) return;
  const auto base = reinterpret_cast<std::uintptr_t>(block_);
  const auto from = reinterpret_cast<std::uintptr_t>(p);
  if (from < base || from + n > base + mapped_) return;
  const std::size_t page = page_size();
  // Only pages wholly inside: the ones at either end hold live bytes too.
  const std::size_t first = (from - base + page - 1) / page;
  const std::size_t end = std::min<std::size_t>((from + n - base) / page, 64);
  for (std::size_t i = first; i < end;) {
    if ((pages & (std::uint64_t{1} << i)) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < end && (pages & (std::uint64_t{1} << j)) != 0) {
      pages &= ~(std::uint64_t{1} << j);
      ++j;
    }
    ::madvise(static_cast<unsigned char*>(block_) + i * page, (j - i) * page, MADV_DONTNEED);
    i = j;
  }
}

// As libssh2's own: -errno on failure, -EAGAIN when nothing is there yet.
ssize_t SessionPages::recv(libssh2_socket_t fd, void* buf, std::size_t len, int flags,
                           void** abstract) {
  auto* self = static_cast<SessionPages*>(*abstract);
  const ssize_t n = ::recv(fd, buf, len, flags);
  if (n < 0) {
    const int e = errno;
    // All of [buf, buf + len) was offered to fill and nothing came: what
    // earlier packets left there is dead. Given back only now, when the
    // connection has gone quiet: while data keeps coming, each page would
    // be given back and faulted in again (measured: 8% of an output flood's
    // rate over SSH).
    if (self != nullptr && (e == EAGAIN || e == EWOULDBLOCK)) {
      self->give_back(buf, len, self->received_);
    }
    return e == EWOULDBLOCK ? -EAGAIN : -e;
  }
  if (self != nullptr) self->mark(buf, static_cast<std::size_t>(n), self->received_);
  return n;
}

ssize_t SessionPages::send(libssh2_socket_t fd, const void* buf, std::size_t len, int flags,
                           void** abstract) {
  auto* self = static_cast<SessionPages*>(*abstract);
  const ssize_t n = ::send(fd, buf, len, flags);
  if (n < 0) return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  // What went out is not sent again (libssh2 goes on from buf + n).
  if (self != nullptr && n > 0) {
    std::uint64_t every_page = ~std::uint64_t{0};
    self->give_back(buf, static_cast<std::size_t>(n), every_page);
  }
  return n;
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
