#include "progress_board.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace dlaunch {
namespace {

struct SlotRead {
  std::uint64_t count = 0;
  std::string damage;  // empty: the slot is as comm leaves it
};

SlotRead read_slot(int fd) {
  unsigned char bytes[ProgressBoard::kSlotBytes];
  ssize_t n = 0;
  do {
    n = ::pread(fd, bytes, sizeof bytes, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0)
    return {0, std::string("made its progress memory unreadable: ") + std::strerror(errno)};
  if (static_cast<std::size_t>(n) < sizeof bytes) {
    return {0, "truncated its progress memory (" + std::to_string(n) + " of " +
                   std::to_string(sizeof bytes) + " bytes left)"};
  }
  SlotRead r;
  std::memcpy(&r.count, bytes, sizeof r.count);
  if (std::any_of(bytes + sizeof r.count, bytes + sizeof bytes, [](unsigned char b) { return b; }))
    r.damage = "wrote into its progress memory where comm never writes";
  return r;
}

}  // namespace

Result<std::unique_ptr<ProgressBoard>> ProgressBoard::create(std::size_t slots) {
  using R = Result<std::unique_ptr<ProgressBoard>>;
  if (slots == 0) return R::failure("no ranks to watch");
  std::vector<UniqueFd> fds;
  for (std::size_t i = 0; i < slots; ++i) {
    UniqueFd fd(::memfd_create("dlaunch-progress", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd) return R::failure(std::string("memfd_create: ") + std::strerror(errno));
    if (::ftruncate(fd.get(), static_cast<off_t>(kSlotBytes)) != 0)
      return R::failure(std::string("ftruncate: ") + std::strerror(errno));
    // Its size fixed for good: a rank cannot shrink it under the agent's reads.
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
      return R::failure(std::string("sealing the progress memory: ") + std::strerror(errno));
    fds.push_back(std::move(fd));
  }
  return std::make_unique<ProgressBoard>(std::move(fds));
}

ProgressBoard::ProgressBoard(std::vector<UniqueFd> fds) {
  slots_.reserve(fds.size());
  for (auto& fd : fds) slots_.push_back({.fd = std::move(fd)});
}

ProgressBoard::Reading ProgressBoard::read() {
  Reading out;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.damaged) {
      // pread copies bytes, not one 64-bit load: a read that races an
      // increment can see a torn count. Two reads that agree saw none.
      SlotRead r = read_slot(s.fd.get());
      bool agreed = false;
      for (int tries = 0; tries < 3 && r.damage.empty() && !agreed; ++tries) {
        SlotRead again = read_slot(s.fd.get());
        agreed = again.damage.empty() && again.count == r.count;
        r = std::move(again);
      }
      if (r.damage.empty() && agreed && r.count < s.last) {
        r.damage = "set its progress counter back from " + std::to_string(s.last) + " to " +
                   std::to_string(r.count);
      }
      if (!r.damage.empty()) {
        s.damaged = true;
        out.damaged.push_back({.slot = i, .what = std::move(r.damage)});
      } else if (agreed) {
        s.last = r.count;
      } else {
        ++moving_;  // it changed under every look: calls are completing
      }
    }
    out.total += s.last;
  }
  out.total += moving_;
  return out;
}

}  // namespace dlaunch
