// --stall-timeout's progress counters: the agent's ProgressBoard
// (agent/progress_board.h) and comm's side (comm/src/progress.h), which meet
// in a memfd the agent hands each rank (SpawnOptions::keep_fd,
// DLAUNCH_PROGRESS_FD and DLAUNCH_PROGRESS_SLOT).
#include "src/progress.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "progress_board.h"

using dlaunch::ProgressBoard;
using dlaunch::UniqueFd;

namespace {

// A slot's memory as its rank maps it.
std::uint64_t* map_slot(int fd) {
  void* p = ::mmap(nullptr, ProgressBoard::kSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<std::uint64_t*>(p);
}

// A board over one memfd without seals, as a kernel that refused them would
// leave it: what the reads must survive if a rank could resize it.
std::unique_ptr<ProgressBoard> unsealed_board(int& fd) {
  UniqueFd memfd(::memfd_create("test-progress", MFD_CLOEXEC));
  EXPECT_TRUE(memfd);
  EXPECT_EQ(::ftruncate(memfd.get(), ProgressBoard::kSlotBytes), 0);
  fd = memfd.get();
  std::vector<UniqueFd> fds;
  fds.push_back(std::move(memfd));
  return std::make_unique<ProgressBoard>(std::move(fds));
}

}  // namespace

TEST(ProgressBoard, StartsAtZeroAndSumsEverySlot) {
  auto board = ProgressBoard::create(3);
  ASSERT_TRUE(board) << board.error();
  ProgressBoard& b = **board;
  EXPECT_EQ(b.read().total, 0U);
  // Each rank's own memory: one 64-bit counter at the start of it.
  const std::uint64_t counts[] = {2, 5, 7};
  for (std::size_t i = 0; i < 3; ++i) {
    std::uint64_t* counter = map_slot(b.fd(i));
    ASSERT_NE(counter, nullptr);
    *counter = counts[i];
    ::munmap(counter, ProgressBoard::kSlotBytes);
  }
  const auto reading = b.read();
  EXPECT_EQ(reading.total, 14U);
  EXPECT_TRUE(reading.damaged.empty());
}

TEST(ProgressBoard, NoRanksNoBoard) { EXPECT_FALSE(ProgressBoard::create(0)); }

// A process with the variables a rank gets counts its completed calls in its
// own memory; one whose slot lies past that memory's end counts nowhere.
TEST(ProgressBoard, CommCountsARanksCompletedCallsInItsOwnMemory) {
  auto board = ProgressBoard::create(2);
  ASSERT_TRUE(board) << board.error();
  const int fd = (*board)->fd(1);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv("DLAUNCH_PROGRESS_FD", std::to_string(fd).c_str(), 1);
    ::setenv("DLAUNCH_PROGRESS_SLOT", "0", 1);
    for (int i = 0; i < 5; ++i) dlaunch::comm::progress::completed();
    ::_exit(0);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ((*board)->read().total, 5U);

  const pid_t stale = ::fork();
  ASSERT_GE(stale, 0);
  if (stale == 0) {
    ::setenv("DLAUNCH_PROGRESS_FD", std::to_string(fd).c_str(), 1);
    ::setenv("DLAUNCH_PROGRESS_SLOT", "1", 1);
    dlaunch::comm::progress::completed();
    ::_exit(0);
  }
  ::waitpid(stale, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ((*board)->read().total, 5U);
}

// Issue 27 item 7: the size is sealed before any rank has the descriptor.
// Shrinking or growing it fails, and so does taking the seals off; the
// rank's counter still counts.
TEST(ProgressBoard, ARankCanNeitherShrinkNorGrowItsMemory) {
  auto board = ProgressBoard::create(1);
  ASSERT_TRUE(board) << board.error();
  const int fd = (*board)->fd(0);
  std::uint64_t* counter = map_slot(fd);
  ASSERT_NE(counter, nullptr);
  EXPECT_EQ(::ftruncate(fd, 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::ftruncate(fd, 1 << 20), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::fallocate(fd, 0, 0, 1 << 20), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
  EXPECT_EQ(errno, EPERM);
  const int seals = ::fcntl(fd, F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  *counter = 3;
  const auto reading = (*board)->read();
  EXPECT_EQ(reading.total, 3U);
  EXPECT_TRUE(reading.damaged.empty());
  ::munmap(counter, ProgressBoard::kSlotBytes);
}

// Were the memory not sealed, a truncation must still not fault the agent
// (it never maps the memory): the read says what the rank did, once, and
// the rank's last good count stays in the sum.
TEST(ProgressBoard, TruncatedMemoryIsTheRanksDamageAndNeverFaultsTheReader) {
  int fd = -1;
  auto board = unsealed_board(fd);
  std::uint64_t* counter = map_slot(fd);
  ASSERT_NE(counter, nullptr);
  *counter = 3;
  ::munmap(counter, ProgressBoard::kSlotBytes);
  EXPECT_EQ(board->read().total, 3U);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  auto reading = board->read();
  EXPECT_EQ(reading.total, 3U);
  ASSERT_EQ(reading.damaged.size(), 1U);
  EXPECT_EQ(reading.damaged[0].slot, 0U);
  EXPECT_EQ(reading.damaged[0].what, "truncated its progress memory (0 of 64 bytes left)");
  reading = board->read();
  EXPECT_EQ(reading.total, 3U);
  EXPECT_TRUE(reading.damaged.empty()) << "said once";
}

TEST(ProgressBoard, GarbageWhereCommNeverWritesIsTheRanksDamage) {
  auto board = ProgressBoard::create(2);
  ASSERT_TRUE(board) << board.error();
  std::uint64_t* good = map_slot((*board)->fd(0));
  std::uint64_t* bad = map_slot((*board)->fd(1));
  ASSERT_NE(good, nullptr);
  ASSERT_NE(bad, nullptr);
  *bad = 4;
  EXPECT_EQ((*board)->read().total, 4U);
  std::memset(bad + 1, 0xa5, ProgressBoard::kSlotBytes - sizeof *bad);
  *bad = 1000;
  *good = 2;
  auto reading = (*board)->read();
  ASSERT_EQ(reading.damaged.size(), 1U);
  EXPECT_EQ(reading.damaged[0].slot, 1U);
  EXPECT_EQ(reading.damaged[0].what, "wrote into its progress memory where comm never writes");
  EXPECT_EQ(reading.total, 6U) << "the damaged slot keeps its last good count";
  *good = 3;
  EXPECT_EQ((*board)->read().total, 7U) << "the others still count";
  ::munmap(good, ProgressBoard::kSlotBytes);
  ::munmap(bad, ProgressBoard::kSlotBytes);
}

// A counter only grows: one set back (here by a hole punched in the memory,
// which the seals allow and which reads as zeros) is the rank's doing.
TEST(ProgressBoard, ACounterSetBackIsTheRanksDamage) {
  auto board = ProgressBoard::create(1);
  ASSERT_TRUE(board) << board.error();
  const int fd = (*board)->fd(0);
  std::uint64_t* counter = map_slot(fd);
  ASSERT_NE(counter, nullptr);
  *counter = 10;
  EXPECT_EQ((*board)->read().total, 10U);
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                        static_cast<off_t>(ProgressBoard::kSlotBytes)),
            0);
  const auto reading = (*board)->read();
  ASSERT_EQ(reading.damaged.size(), 1U);
  EXPECT_EQ(reading.damaged[0].what, "set its progress counter back from 10 to 0");
  EXPECT_EQ(reading.total, 10U);
  ::munmap(counter, ProgressBoard::kSlotBytes);
}
