// --stall-timeout's progress counters: the agent's ProgressBoard
// (agent/progress_board.h) and comm's side (comm/src/progress.h), which meet
// in a memfd the agent hands each rank (SpawnOptions::keep_fd,
// DLAUNCH_PROGRESS_FD and DLAUNCH_PROGRESS_SLOT).
#include "src/progress.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "progress_board.h"

using dlaunch::ProgressBoard;

TEST(ProgressBoard, StartsAtZeroAndSumsEverySlot) {
  auto board = ProgressBoard::create(3);
  ASSERT_TRUE(board) << board.error();
  ProgressBoard& b = **board;
  EXPECT_EQ(b.total(), 0U);
  // The same memory as a rank maps it: one 64-bit counter per 64-byte slot.
  const std::size_t bytes = 3 * ProgressBoard::kSlotBytes;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, b.fd(), 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* words = static_cast<std::uint64_t*>(p);
  words[0] = 2;
  words[8] = 5;
  words[16] = 7;
  EXPECT_EQ(b.total(), 14U);
  ::munmap(p, bytes);
}

TEST(ProgressBoard, NoRanksNoBoard) { EXPECT_FALSE(ProgressBoard::create(0)); }

// A process with the variables a rank gets counts its completed calls in its
// own slot; one whose slot lies past the board's end counts nowhere.
TEST(ProgressBoard, CommCountsARanksCompletedCallsInItsSlot) {
  auto board = ProgressBoard::create(2);
  ASSERT_TRUE(board) << board.error();
  const int fd = (*board)->fd();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv("DLAUNCH_PROGRESS_FD", std::to_string(fd).c_str(), 1);
    ::setenv("DLAUNCH_PROGRESS_SLOT", "1", 1);
    for (int i = 0; i < 5; ++i) dlaunch::comm::progress::completed();
    ::_exit(0);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ((*board)->total(), 5U);

  const pid_t stale = ::fork();
  ASSERT_GE(stale, 0);
  if (stale == 0) {
    ::setenv("DLAUNCH_PROGRESS_FD", std::to_string(fd).c_str(), 1);
    ::setenv("DLAUNCH_PROGRESS_SLOT", "2", 1);
    dlaunch::comm::progress::completed();
    ::_exit(0);
  }
  ::waitpid(stale, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ((*board)->total(), 5U);
}
