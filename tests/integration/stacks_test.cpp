// Hangs are located (issue 17): at --timeout, on SIGQUIT and at a stall
// (--stall-timeout), dlaunch reports every rank's stack, identical ones
// together, the odd ones out first. Real jobs of four ranks on two logical
// local nodes; rank 2 hangs somewhere else than the others
// (tests/helpers/stuck_worker.{cpp,py}).
//
// Needs a stack tool (eu-stack from elfutils, or gdb: scripts/install-deps.sh);
// without one those tests are skipped with the reason. The last ones, on what
// counts as a stall for ranks that use comm (tests/helpers/comm_quiet.cpp,
// Open MPI under --mpi) and on ranks that damage the progress memory their
// agent gives them (tests/helpers/test_worker.cpp), need none.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "support.h"

using namespace dltest;

namespace {

const std::string kPyWorker = std::string(SOURCE_DIR) + "/tests/helpers/stuck_worker.py";

bool have_stack_tool() {
  const auto env = dlaunch::current_environment();
  return !dlaunch::find_program("eu-stack", env, "").empty() ||
         !dlaunch::find_program("gdb", env, "").empty();
}

#define REQUIRE_STACK_TOOL() \
  if (!have_stack_tool())    \
  GTEST_SKIP() << "no eu-stack (elfutils) or gdb on PATH: install them (scripts/install-deps.sh)"

// The report line of a group: "rank 2: ..." or "ranks 0,1,3 (3 ranks): ...".
std::string line_starting(const std::string& text, const std::string& start) {
  for (const auto& l : lines_of(text)) {
    const auto at = l.find(start);
    if (at != std::string::npos && l.find_first_not_of(' ') == at) return l;
  }
  return {};
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST(Stacks, TimeoutReportsNativeStacksGroupedOddOneFirstThenExits124) {
  REQUIRE_STACK_TOOL();
  const auto job = unique_job_id("stacks-native");
  const auto dir = std::filesystem::temp_directory_path() / ("dlaunch-stacks-test-" + job);
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--timeout", "4", "--output-dir",
                            dir.string(), STUCK_WORKER_BIN}),
               60);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_LT(r.seconds, 20) << r.err;
  const auto odd = line_starting(r.err, "rank 2: ");
  const auto rest = line_starting(r.err, "ranks 0,1,3 (3 ranks): ");
  EXPECT_NE(odd.find("stuck_in_data_loader"), std::string::npos) << r.err;
  EXPECT_EQ(odd.find("wait_for_gradients"), std::string::npos) << r.err;
  EXPECT_NE(rest.find("wait_for_gradients"), std::string::npos) << r.err;
  EXPECT_LT(r.err.find(odd), r.err.find(rest)) << "the odd group comes first:\n" << r.err;
  EXPECT_NE(r.err.find("timed out: --timeout of 4.0 s expired"), std::string::npos) << r.err;
  // The full stacks, every thread, in the job's output folder, private.
  const auto file = (dir / job / "stacks.txt").string();
  EXPECT_NE(r.err.find("full stacks: " + file), std::string::npos) << r.err;
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0) << file;
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const auto text = read_all(file);
  EXPECT_NE(text.find("===== rank 2 (node node1"), std::string::npos) << text;
  EXPECT_NE(text.find("stuck_in_data_loader"), std::string::npos) << text;
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
  std::filesystem::remove_all(dir);
}

TEST(Stacks, TimeoutReportsPythonTracebacksFromFaulthandler) {
  REQUIRE_STACK_TOOL();
  // With PyTorch (Debian's python3-torch is for /usr/bin/python3) the
  // others wait in a gloo all_reduce for rank 2; else in a plain wait.
  const bool torch = run({"/usr/bin/python3", "-c", "import torch"}).exit_code == 0;
  const std::string python = torch ? "/usr/bin/python3" : "python3";
  if (run({python, "-c", "pass"}).exit_code != 0) GTEST_SKIP() << "no python3";
  std::printf("stacks_test: Python ranks %s\n",
              torch ? "wait in a torch all_reduce (gloo)" : "wait in threading (no torch)");
  const auto job = unique_job_id("stacks-python");
  auto r =
      run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--timeout", torch ? "12" : "5", "-x",
                       torch ? "STUCK_WORKER_TORCH=1" : "STUCK_WORKER_TORCH=0", python, kPyWorker}),
          90);
  if (torch) {
    EXPECT_NE(line_starting(r.err, "ranks 0,1,3 (3 ranks): ").find("all_reduce ("),
              std::string::npos)
        << r.err;
  }
  EXPECT_EQ(r.exit_code, 124) << r.err;
  const auto odd = line_starting(r.err, "rank 2: ");
  const auto rest = line_starting(r.err, "ranks 0,1,3 (3 ranks): ");
  EXPECT_NE(odd.find("stuck_in_data_loader (stuck_worker.py:"), std::string::npos) << r.err;
  EXPECT_NE(rest.find("wait_for_gradients (stuck_worker.py:"), std::string::npos) << r.err;
  EXPECT_LT(r.err.find(odd), r.err.find(rest)) << r.err;
  // Without --output-dir the full stacks go to the job's record (a private folder),
  // which the report names.
  const auto at = r.err.find("full stacks: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const auto path = r.err.substr(at + 13, r.err.find(')', at) - at - 13);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const auto folder = std::filesystem::path(path).parent_path();
  ASSERT_EQ(::stat(folder.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_NE(read_all(path).find("Current thread 0x"), std::string::npos);
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
  std::filesystem::remove_all(folder);
}

TEST(Stacks, SigquitReportsStacksAndTheJobGoesOn) {
  REQUIRE_STACK_TOOL();
  const auto job = unique_job_id("stacks-sigquit");
  const std::string out_dir = temp_dir("stacks-sigquit");
  Process p(dlaunch_cmd(
      {"-H", kLocalhost, "--job-id", job, "--output-dir", out_dir, STUCK_WORKER_BIN, "8"}));
  ASSERT_TRUE(p.wait_for_lines(4, 20));
  p.signal(SIGQUIT);
  // The report's last group line ends it: the largest group comes last.
  EXPECT_TRUE(p.wait_for_stderr(
      [](const std::string& e) {
        const auto at = e.find("stacks on SIGQUIT (the job goes on)");
        return at != std::string::npos &&
               e.find("ranks 0,1,3 (3 ranks): ", at) != std::string::npos;
      },
      15));
  auto r = p.finish(40);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("stacks on SIGQUIT (the job goes on)"), std::string::npos) << r.err;
  EXPECT_NE(line_starting(r.err, "ranks 0,1,3 (3 ranks): ").find("wait_for_gradients"),
            std::string::npos)
      << r.err;
  EXPECT_NE(line_starting(r.err, "rank 2: ").find("stuck_in_data_loader"), std::string::npos)
      << r.err;
  int done = 0;
  for (const auto& l : lines_of(r.out)) done += l.ends_with("done") ? 1 : 0;
  EXPECT_EQ(done, 4) << r.out;
  std::filesystem::remove_all(out_dir);
}

TEST(Stacks, StallTimeoutReportsOnceAndTheJobGoesOn) {
  REQUIRE_STACK_TOOL();
  const auto job = unique_job_id("stacks-stall");
  const auto dir = std::filesystem::temp_directory_path() / ("dlaunch-stacks-test-" + job);
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--stall-timeout", "2",
                            "--output-dir", dir.string(), STUCK_WORKER_BIN, "7"}),
               60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("no rank wrote a line or completed a comm call for 2.0 s (--stall-timeout)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(line_starting(r.err, "rank 2: ").find("stuck_in_data_loader"), std::string::npos)
      << r.err;
  // Once per stall: one report in the 5 quiet seconds.
  std::size_t reports = 0;
  for (const auto& l : lines_of(r.err)) reports += l.find("rank 2: ") != std::string::npos;
  EXPECT_EQ(reports, 1u) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(Stacks, StallActionAbortStopsTheJobWithItsOwnExitStatus) {
  REQUIRE_STACK_TOOL();
  const auto job = unique_job_id("stacks-stall-abort");
  const auto dir = std::filesystem::temp_directory_path() / ("dlaunch-stacks-test-" + job);
  auto r =
      run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--stall-timeout", "2", "--stall-action",
                       "abort", "--output-dir", dir.string(), STUCK_WORKER_BIN}),
          60);
  EXPECT_EQ(r.exit_code, 123) << r.err;
  EXPECT_NE(r.err.find("stalled: no rank wrote a line or completed a comm call for 2.0 s"),
            std::string::npos)
      << r.err;
  EXPECT_NE(line_starting(r.err, "ranks 0,1,3 (3 ranks): ").find("wait_for_gradients"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
  std::filesystem::remove_all(dir);
}

// Ranks that all-reduce every 20 ms for 6 s and write nothing meanwhile:
// their comm calls are activity, so --stall-timeout 2 (abort) never fires.
TEST(Stacks, CommCallsWithoutOutputAreNoStall) {
  const auto job = unique_job_id("stacks-comm-quiet");
  auto r = run(dlaunch_cmd({"-n", "2", "--mpi", "--job-id", job, "--stall-timeout", "2",
                            "--stall-action", "abort", COMM_QUIET_BIN, "6"}),
               60, mpi_worker_env());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("stall"), std::string::npos) << r.err;
  int done = 0;
  for (const auto& l : lines_of(r.out)) done += l.ends_with("done") ? 1 : 0;
  EXPECT_EQ(done, 2) << r.out;
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
}

// The same ranks, but after 2 s rank 0 stops calling: rank 1 waits in an
// all_reduce that never completes (busy in MPI, yet no call completes), and
// the stall is found 2 s later.
TEST(Stacks, RanksWaitingInACollectiveThatNeverCompletesAreAStall) {
  const auto job = unique_job_id("stacks-comm-hang");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run(
      dlaunch_cmd({"-n", "2", "--mpi", "--job-id", job, "--stall-timeout", "2", "--stall-action",
                   "abort", "--stack-timeout", "5", COMM_QUIET_BIN, "60", "2"}),
      60, mpi_worker_env());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 123) << r.err;
  EXPECT_NE(r.err.find("stalled: no rank wrote a line or completed a comm call for 2.0 s"),
            std::string::npos)
      << r.err;
  EXPECT_LT(s, 30.0) << r.err;
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
}

// Issue 27 item 7: a rank that truncates the progress memory its agent reads
// killed the agent (SIGBUS), and the report blamed the agent. The memory is
// sealed now: the rank's ftruncate fails, its counter still counts (rank 1
// writes no line for 3 s, only its counter moves, and --stall-action abort
// never fires), the agent lives and the job succeeds.
TEST(StallProgress, ARankCannotTruncateItsProgressMemoryAndItsCallsStillCount) {
  const auto job = unique_job_id("progress-truncate");
  auto r = run(dlaunch_cmd({"-n", "2", "--job-id", job, "--stall-timeout", "1", "--stall-action",
                            "abort", TEST_WORKER_BIN, "progress-truncate", "1", "3"}),
               60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 1: truncate: Operation not permitted; grow: Operation not permitted"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("done 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done 1"), std::string::npos) << r.out;
  for (const char* bad : {"SIGBUS", "stall", "agent", "lost"})
    EXPECT_EQ(r.err.find(bad), std::string::npos) << bad << "\n" << r.err;
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
}

// A rank that writes garbage into its progress memory is named at once and
// in the failure report, as the one who did it; the agent lives on.
TEST(StallProgress, ARankThatScribblesOnItsProgressMemoryIsNamedNotItsAgent) {
  const auto job = unique_job_id("progress-scribble");
  auto r = run(dlaunch_cmd({"-n", "2", "--job-id", job, "--stall-timeout", "2", TEST_WORKER_BIN,
                            "progress-scribble", "1", "1.5", "7"}),
               60);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  const std::string note =
      "rank 1 on node 0 (localhost) wrote into its progress memory where comm never writes: its "
      "comm calls no longer count as activity for --stall-timeout";
  EXPECT_NE(r.err.find("dlaunch: " + note), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("failed: rank 1 exited with code 7"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  note: " + note), std::string::npos) << r.err;
  for (const char* bad : {"SIGBUS", "agent", "lost"})
    EXPECT_EQ(r.err.find(bad), std::string::npos) << bad << "\n" << r.err;
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
}
