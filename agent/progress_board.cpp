#include "progress_board.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace dlaunch {

Result<std::unique_ptr<ProgressBoard>> ProgressBoard::create(std::size_t slots) {
  using R = Result<std::unique_ptr<ProgressBoard>>;
  if (slots == 0) return R::failure("no ranks to watch");
  UniqueFd fd(::memfd_create("dlaunch-progress", MFD_CLOEXEC));
  if (!fd) return R::failure(std::string("memfd_create: ") + std::strerror(errno));
  const std::size_t bytes = slots * kSlotBytes;
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return R::failure(std::string("ftruncate: ") + std::strerror(errno));
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return R::failure(std::string("mmap: ") + std::strerror(errno));
  return std::make_unique<ProgressBoard>(std::move(fd), base, slots);
}

ProgressBoard::ProgressBoard(UniqueFd fd, void* base, std::size_t slots)
    : fd_(std::move(fd)), base_(base), slots_(slots) {}

ProgressBoard::~ProgressBoard() { ::munmap(base_, slots_ * kSlotBytes); }

std::uint64_t ProgressBoard::total() const {
  std::uint64_t sum = 0;
  auto* bytes = static_cast<unsigned char*>(base_);
  for (std::size_t i = 0; i < slots_; ++i) {
    auto& counter = *reinterpret_cast<std::uint64_t*>(bytes + i * kSlotBytes);
    sum += std::atomic_ref<std::uint64_t>(counter).load(std::memory_order_relaxed);
  }
  return sum;
}

}  // namespace dlaunch
