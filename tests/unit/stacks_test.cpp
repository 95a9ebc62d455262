// Grouping and normalising of rank stacks (launcher/controller/stacks.h).
#include "controller/stacks.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

using dlaunch::group_stacks;
using dlaunch::native_frames;
using dlaunch::python_frames;
using dlaunch::rank_list;
using dlaunch::RankStackText;

namespace {

std::string eu_stack(int pid, const std::string& fn, const std::string& addr) {
  return "PID " + std::to_string(pid) + " - process\nTID " + std::to_string(pid + 1) +
         ":\n#0  0x00007f08e3d34df2 pause\n#1  0x00005631d5dda18d helper_thread\nTID " +
         std::to_string(pid) + ":\n#0  " + addr + " clock_nanosleep@GLIBC_2.2.5\n#1  " + addr +
         " __nanosleep\n#2  " + addr + " sleep\n#3  " + addr + " " + fn + "\n#4  " + addr +
         " main\n#5  " + addr + " __libc_start_call_main\n#6  " + addr +
         " __libc_start_main@@GLIBC_2.34\n#7  " + addr + " _start\n";
}

const char* kGdb = R"(warning: something
Thread 2 (Thread 0x7f08e3c5d6c0 (LWP 9482) "st"):
#0  0x00007f08e3d34df2 in __libc_pause () at ../sysdeps/unix/sysv/linux/pause.c:29
#1  0x00005631d5dda18d in th (a=<optimized out>) at /tmp/st.c:3

Thread 1 (Thread 0x7f08e3c5e740 (LWP 9480) "st"):
#0  0x00007f08e3d30545 in __GI___clock_nanosleep (clock_id=0, flags=0) at clock_nanosleep.c:48
#1  0x00007f08e3d34d8a in __sleep (seconds=0) at ../sysdeps/posix/sleep.c:55
#2  0x00005631d5dda1aa in stuck_in_data_loader () at /tmp/st.c:4
#3  main () at /tmp/st.c:5
[Inferior 1 (process 9480) detached]
)";

std::string py_dump(const std::string& fn, int line) {
  return "Fatal Python error: Aborted\n\nThread 0x00007f64c3ea66c0 (most recent call first):\n"
         "  File \"/tmp/x/train.py\", line 3 in helper\n"
         "  File \"/usr/lib/python3.11/threading.py\", line 982 in run\n\n"
         "Current thread 0x00007f64c4c0ab80 (most recent call first):\n"
         "  File \"/tmp/x/train.py\", line " +
         std::to_string(line) + " in " + fn +
         "\n  File \"/tmp/x/train.py\", line 60 in step\n"
         "  File \"/tmp/x/train.py\", line 70 in <module>\n\n"
         "Extension modules: numpy.core._multiarray_umath (total: 1)\n";
}

}  // namespace

TEST(Stacks, NativeFramesAreTheMainThreadsFunctionNamesWithoutAddressesOrVersions) {
  EXPECT_EQ(
      native_frames(eu_stack(100, "stuck_in_data_loader", "0x1"), 100),
      (std::vector<std::string>{"clock_nanosleep", "__nanosleep", "sleep", "stuck_in_data_loader",
                                "main", "__libc_start_call_main", "__libc_start_main", "_start"}));
  EXPECT_EQ(native_frames(kGdb, 9480),
            (std::vector<std::string>{"__GI___clock_nanosleep", "__sleep", "stuck_in_data_loader",
                                      "main"}));
  // Without a thread of the pid's id: the first thread.
  EXPECT_EQ(native_frames(kGdb, 1), (std::vector<std::string>{"__libc_pause", "th"}));
  EXPECT_TRUE(
      native_frames("eu-stack: dwfl_linux_proc_attach: Operation not permitted", 1).empty());
}

TEST(Stacks, PythonFramesAreTheMainThreadInnermostFirst) {
  EXPECT_EQ(python_frames(py_dump("wait_for_gradients", 41)),
            (std::vector<std::string>{"wait_for_gradients (train.py:41)", "step (train.py:60)",
                                      "<module> (train.py:70)"}));
  EXPECT_TRUE(python_frames("just a line\n").empty());
}

// The SIGABRT may land on any thread, which faulthandler then calls the
// current one (seen in CI: a rank's helper thread); the rank is still
// described by its main thread, the one that runs <module>.
TEST(Stacks, PythonFramesAreTheMainThreadWhereverTheAbortLanded) {
  const std::string dump =
      "Fatal Python error: Aborted\n\nCurrent thread 0x00007f50277fe6c0 (most recent call first):\n"
      "  File \"/tmp/x/stuck_worker.py\", line 18 in helper\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 975 in run\n\n"
      "Thread 0x00007f505011b040 (most recent call first):\n"
      "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1541 "
      "in all_reduce\n"
      "  File \"/tmp/x/stuck_worker.py\", line 29 in wait_for_gradients\n"
      "  File \"/tmp/x/stuck_worker.py\", line 49 in <module>\n\n";
  EXPECT_EQ(python_frames(dump),
            (std::vector<std::string>{"all_reduce (distributed_c10d.py:1541)",
                                      "wait_for_gradients (stuck_worker.py:29)",
                                      "<module> (stuck_worker.py:49)"}));
  // No <module> anywhere (a dump from a thread-only program): the current thread.
  EXPECT_EQ(python_frames("Current thread 0x1 (most recent call first):\n"
                          "  File \"/a.py\", line 2 in f\n\nThread 0x2 (most recent call first):\n"
                          "  File \"/a.py\", line 3 in g\n"),
            (std::vector<std::string>{"f (a.py:2)"}));
}

TEST(Stacks, IdenticalStacksAreGroupedTheOddOnesFirst) {
  std::vector<RankStackText> s;
  for (int r : {0, 1, 3}) {
    // Addresses and pids differ from rank to rank; the stacks are the same.
    s.push_back({.rank = r,
                 .pid = 100 + r,
                 .native = eu_stack(100 + r, "wait_for_gradients", "0x" + std::to_string(r))});
  }
  s.push_back({.rank = 2, .pid = 102, .native = eu_stack(102, "stuck_in_data_loader", "0x9")});
  const auto groups = group_stacks(s);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].ranks, (std::vector<int>{2}));
  EXPECT_EQ(groups[0].summary, "clock_nanosleep <- sleep <- stuck_in_data_loader <- main");
  EXPECT_EQ(groups[1].ranks, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(dlaunch::format_stack_groups(groups, "  "),
            "  rank 2: clock_nanosleep <- sleep <- stuck_in_data_loader <- main\n"
            "  ranks 0,1,3 (3 ranks): clock_nanosleep <- sleep <- wait_for_gradients <- main\n");
}

TEST(Stacks, PythonTracebacksGroupByFunctionAndLineAndErrorsStandApart) {
  std::vector<RankStackText> s = {
      {.rank = 0,
       .pid = 1,
       .native = eu_stack(1, "_PyEval_EvalFrameDefault", "0x1"),
       .python = py_dump("wait_for_gradients", 41)},
      {.rank = 1, .pid = 2, .python = py_dump("wait_for_gradients", 41)},
      {.rank = 2, .pid = 3, .python = py_dump("stuck_in_data_loader", 88)},
      {.rank = 3, .pid = 4, .error = "eu-stack: Operation not permitted"},
      {.rank = 4, .pid = 5, .python = py_dump("wait_for_gradients", 41)},
  };
  const auto groups = group_stacks(s);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].ranks, (std::vector<int>{2}));
  EXPECT_EQ(groups[0].summary,
            "stuck_in_data_loader (train.py:88) <- step (train.py:60) <- <module> (train.py:70)");
  EXPECT_EQ(groups[1].ranks, (std::vector<int>{3}));
  EXPECT_EQ(groups[1].summary, "no stack: eu-stack: Operation not permitted");
  EXPECT_EQ(groups[2].ranks, (std::vector<int>{0, 1, 4}));
}

TEST(Stacks, SummariesStopAtFourFrames) {
  std::string text = "TID 7:\n";
  for (int i = 0; i < 6; ++i)
    text += "#" + std::to_string(i) + "  0x1 f" + std::to_string(i) + "\n";
  const auto groups = group_stacks({{.rank = 0, .pid = 7, .native = text}});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].summary, "f0 <- f1 <- f2 <- f3 <- ...");
}

TEST(Stacks, RankListsUseRangesForRunsOfThree) {
  EXPECT_EQ(rank_list({0, 1, 3}), "0,1,3");
  EXPECT_EQ(rank_list({0, 1, 2, 3, 7, 9, 10}), "0-3,7,9,10");
  EXPECT_EQ(rank_list({5}), "5");
}
