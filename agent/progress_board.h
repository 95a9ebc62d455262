// ProgressBoard: how an agent sees its ranks' comm calls complete, for
// --stall-timeout (docs/troubleshooting.md, "Hangs"). A small shared memory
// object (memfd) holds one 64-bit counter per rank, each on its own cache
// line; every rank gets the descriptor open (DLAUNCH_PROGRESS_FD) and its
// slot (DLAUNCH_PROGRESS_SLOT), and comm adds one to its counter after each
// completed collective, send or receive (comm/src/progress.cpp). The agent
// reads the sum now and then and tells the head when it moved.
//
// The memory is anonymous: nothing in a shared directory, and no other user
// can open it (a memfd is reached only through a descriptor, or /proc of a
// process one may ptrace). A rank can only move its own job's counters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "dlaunch/error.h"
#include "dlaunch/unique_fd.h"

namespace dlaunch {

class ProgressBoard {
 public:
  // The bytes of one slot: comm's side must agree (comm/src/progress.cpp).
  static constexpr std::size_t kSlotBytes = 64;

  // A board of `slots` zeroed counters; the error says what failed.
  static Result<std::unique_ptr<ProgressBoard>> create(std::size_t slots);
  // Takes a mapping of slots * kSlotBytes of fd (create() makes them).
  ProgressBoard(UniqueFd fd, void* base, std::size_t slots);
  ~ProgressBoard();
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;

  // Close-on-exec here; SpawnOptions::keep_fd hands it to a rank.
  int fd() const { return fd_.get(); }
  std::size_t slots() const { return slots_; }
  // The sum of every slot.
  std::uint64_t total() const;

 private:
  UniqueFd fd_;
  void* base_;
  std::size_t slots_;
};

}  // namespace dlaunch
