// The agent taking the stacks of its ranks when the head stops the job
// (CollectStacks::python_abort), without processes: in what order a Python
// rank gets SIGSTOP, SIGABRT and SIGCONT (agent/stacks.h). The stack tool is
// an executable file of that name on PATH that the fake never runs (and so is
// "python3"); its
// "exit" closes the pipe the agent reads.
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "agent_test_support.h"

using namespace dltest;
using std::chrono::milliseconds;

namespace {

class AgentStacksTest : public AgentTest {
 protected:
  void SetUp() override {
    // A stack tool to find, whatever this machine has, and a "python3".
    tools_ = std::filesystem::temp_directory_path() /
             ("dlaunch-agent-stacks-" + std::to_string(::getpid()));
    std::filesystem::create_directories(tools_);
    for (const char* name : {"eu-stack", "python3"}) {
      const auto file = tools_ / name;
      std::ofstream(file) << "#!/bin/sh\nexit 1\n";
      ::chmod(file.c_str(), 0755);
    }
    const char* path = ::getenv("PATH");
    old_path_ = path != nullptr ? path : "";
    ::setenv("PATH", tools_.c_str(), 1);
    AgentTest::SetUp();
  }
  void TearDown() override {
    AgentTest::TearDown();
    ::setenv("PATH", old_path_.c_str(), 1);
    std::filesystem::remove_all(tools_);
  }

  // Two ranks: rank 0 runs Python, rank 1 does not.
  void start_python_and_native() {
    auto s = setup_for(2);
    s.workers[0].argv = {"python3", "train.py"};
    s.workers[1].argv = {"/bin/true"};
    start_workers(2, s);
  }
  // The signals a process got, in order.
  std::vector<int> signals_to(pid_t pid) const {
    std::vector<int> out;
    for (const auto& s : os_.signals)
      if (s.target == pid && !s.group) out.push_back(s.sig);
    return out;
  }
  // The stack tools the agent started so far end (their pipes close).
  void tools_exit() {
    for (std::size_t i = 2; i < os_.procs.size(); ++i) os_.exit(os_.proc(i).pid, 1, false);
    sigchld();
  }

  std::filesystem::path tools_;
  std::string old_path_;
};

}  // namespace

TEST_F(AgentStacksTest, APythonRankIsStoppedBeforeAnyToolAndAbortedBeforeItRunsAgain) {
  start_python_and_native();
  const pid_t py = os_.proc(0).pid;
  const pid_t native = os_.proc(1).pid;
  send(proto::CollectStacks{.request_id = 1, .timeout_ms = 10000, .python_abort = true});
  // Stopped at once: no peer's death can reach it while the tools work.
  EXPECT_EQ(signals_to(py), std::vector<int>{SIGSTOP});
  EXPECT_TRUE(signals_to(native).empty());
  ASSERT_EQ(os_.procs.size(), 4u) << "one stack tool per rank";
  EXPECT_EQ(os_.proc(2).argv[0], (tools_ / "eu-stack").string());
  tools_exit();
  // SIGABRT while stopped, then SIGCONT: faulthandler's dump comes first.
  EXPECT_EQ(signals_to(py), (std::vector<int>{SIGSTOP, SIGABRT, SIGCONT}));
  EXPECT_TRUE(signals_to(native).empty());
  EXPECT_TRUE(got<proto::Stacks>().empty()) << "it waits for the dump";
  os_.exit(py, SIGABRT, true);
  sigchld();
  ASSERT_EQ(got<proto::Stacks>().size(), 1u);
  EXPECT_EQ(got<proto::Stacks>()[0].ranks.size(), 2u);
  EXPECT_EQ(signals_to(py).size(), 3u) << "nothing more for a rank that is gone";
}

TEST_F(AgentStacksTest, OnlyAStoppingJobsPythonRanksAreStopped) {
  start_python_and_native();
  send(proto::CollectStacks{.request_id = 1, .timeout_ms = 10000, .python_abort = false});
  tools_exit();
  EXPECT_TRUE(signals_to(os_.proc(0).pid).empty());
  ASSERT_EQ(got<proto::Stacks>().size(), 1u);
}

TEST_F(AgentStacksTest, ARunEndedBeforeItsPythonPhaseContinuesTheRanksItStopped) {
  start_python_and_native();
  const pid_t py = os_.proc(0).pid;
  send(proto::CollectStacks{.request_id = 1, .timeout_ms = 10000, .python_abort = true});
  EXPECT_EQ(signals_to(py), std::vector<int>{SIGSTOP});
  // A new request ends the one in progress; the tools it started are killed.
  send(proto::CollectStacks{.request_id = 2, .timeout_ms = 10000, .python_abort = false});
  EXPECT_EQ(signals_to(py), (std::vector<int>{SIGSTOP, SIGCONT}));
  ASSERT_EQ(got<proto::Stacks>().size(), 1u);
  EXPECT_EQ(got<proto::Stacks>()[0].request_id, 1u);
  EXPECT_EQ(signals_to(os_.proc(2).pid), std::vector<int>{SIGKILL});
  EXPECT_EQ(signals_to(os_.proc(3).pid), std::vector<int>{SIGKILL});
  tools_exit();
  ASSERT_EQ(got<proto::Stacks>().size(), 2u);
  EXPECT_EQ(signals_to(py), (std::vector<int>{SIGSTOP, SIGCONT}));
}

TEST_F(AgentStacksTest, ARankThatExitedWhileStoppedGetsNoSignalAfterwards) {
  start_python_and_native();
  const pid_t py = os_.proc(0).pid;
  send(proto::CollectStacks{.request_id = 1, .timeout_ms = 10000, .python_abort = true});
  os_.exit(py, SIGKILL, true);  // say, the OOM killer
  sigchld();
  tools_exit();
  EXPECT_EQ(signals_to(py), std::vector<int>{SIGSTOP});
  ASSERT_EQ(got<proto::Stacks>().size(), 1u);
}
