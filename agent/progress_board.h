// ProgressBoard: how an agent sees its ranks' comm calls complete, for
// --stall-timeout (docs/troubleshooting.md, "Hangs"). Each rank gets a small
// shared memory object of its own (a memfd of one 64-byte slot) that holds a
// 64-bit counter: the descriptor open (DLAUNCH_PROGRESS_FD, slot 0 in
// DLAUNCH_PROGRESS_SLOT), and comm adds one to the counter after each
// completed collective, send or receive (comm/src/progress.cpp). The agent
// reads the sum now and then and tells the head when it moved.
//
// The memory is anonymous: nothing in a shared directory, and no other user
// can open it (a memfd is reached only through a descriptor, or /proc of a
// process one may ptrace). One object per rank: a rank reaches no other
// rank's counter, so what is wrong with one is that rank's doing.
//
// Nothing a rank does to its object can fault the agent: the size is sealed
// (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL; a rank's ftruncate fails with
// EPERM, its writes through its own mapping still work), and the agent never
// maps it: it reads with pread(2), which returns short where a mapping would
// raise SIGBUS (so even an object without the seals cannot). A counter found
// damaged (short, bytes comm never writes set, going back) is said once, with
// its slot, and counts no more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dlaunch/error.h"
#include "dlaunch/unique_fd.h"

namespace dlaunch {

class ProgressBoard {
 public:
  // The bytes of one slot: comm's side must agree (comm/src/progress.cpp).
  static constexpr std::size_t kSlotBytes = 64;

  // `slots` sealed objects, each one zeroed counter; the error says what failed.
  static Result<std::unique_ptr<ProgressBoard>> create(std::size_t slots);
  // Takes one object of at least kSlotBytes per slot (create() makes them).
  explicit ProgressBoard(std::vector<UniqueFd> fds);

  // Slot i's descriptor, close-on-exec here; SpawnOptions::keep_fd hands it
  // to its rank.
  int fd(std::size_t slot) const { return slots_.at(slot).fd.get(); }
  std::size_t slots() const { return slots_.size(); }

  // A slot found damaged, and what was wrong ("truncated its progress
  // memory ..."), for "rank N <what>".
  struct Damage {
    std::size_t slot = 0;
    std::string what;
  };
  struct Reading {
    // Moves whenever a counter did: every slot's count (a damaged one's last
    // good one), plus the reads that caught one changing.
    std::uint64_t total = 0;
    std::vector<Damage> damaged;  // found damaged by this read, each once
  };
  // Reads every slot that is not damaged yet.
  Reading read();

 private:
  struct Slot {
    UniqueFd fd;
    std::uint64_t last = 0;  // the last good count
    bool damaged = false;
  };
  std::vector<Slot> slots_;
  std::uint64_t moving_ = 0;  // reads that found a counter changing too fast to agree
};

}  // namespace dlaunch
