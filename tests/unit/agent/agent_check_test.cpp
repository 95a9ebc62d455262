// --check as a job stopped at Ready (Setup.check): the agent looks at
// everything and says each problem in Ready, in the words of --check's
// table, with the node's facts, instead of refusing at the first; a job's
// Setup still refuses at the first (Fatal). No process starts.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent_test_support.h"
#include "dlaunch/process.h"

using namespace dltest;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> columns(const proto::Ready& r) {
  std::vector<std::string> out;
  for (const auto& p : r.problems) out.push_back(p.column + ": " + p.message);
  return out;
}

class AgentCheck : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    dir_ = fs::temp_directory_path() / ("agent-check-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "train.py") << "print(1)\n";
  }
  void TearDown() override {
    fs::remove_all(dir_);
    AgentTest::TearDown();
  }
  proto::Setup check_setup(std::vector<std::string> programs) {
    auto s = setup_for(static_cast<int>(programs.size()));
    s.check = true;
    s.workdir = dir_.string();
    for (std::size_t i = 0; i < programs.size(); ++i) s.workers[i].argv = {programs[i]};
    return s;
  }
  fs::path dir_;
};

}  // namespace

TEST_F(AgentCheck, EveryProblemIsSaidInReadyWithTheNodesFacts) {
  os_.node.facts = {{"kernel", "6.1.0-test"}, {"time_ns", "123"}};
  os_.node.topology = "1 package, 2 cores";
  os_.node.gpus = 3;
  auto s = check_setup({"/bin/true", "no-such-program-a", "no-such-program-b", "/bin/true"});
  s.workers[3].workdir = "/";  // another app's folder: its program is looked for there
  s.check_scripts = {"train.py", "missing.py", "/abs/missing.py"};
  s.count_gpus = true;
  s.gpu_test_mb = 64;
  advance(std::chrono::milliseconds(250));  // no time passes while it checks
  send(s);
  EXPECT_TRUE(got<proto::Fatal>().empty());
  ASSERT_EQ(got<proto::Ready>().size(), 1u);
  const auto ready = got<proto::Ready>()[0];
  const std::vector<std::string> want = {
      "program: script 'missing.py' not found in '" + dir_.string() + "'",
      "program: script '/abs/missing.py' not found",
      "program: program 'no-such-program-a' not found on PATH",
      "program: program 'no-such-program-b' not found on PATH"};
  EXPECT_EQ(columns(ready), want);
  ASSERT_EQ(os_.facts_asked.size(), 1u);
  EXPECT_EQ(os_.facts_asked[0], std::make_pair(dir_.string(), true));
  EXPECT_EQ(os_.gpu_test_asked, std::vector<std::uint32_t>{64});  // Setup.gpu_test_mb
  EXPECT_EQ(ready.topology, "1 package, 2 cores");
  EXPECT_EQ(ready.gpus, 3);
  ASSERT_EQ(ready.facts.size(), 3u);
  EXPECT_EQ(ready.facts[0], std::make_pair(std::string("kernel"), std::string("6.1.0-test")));
  // The node's clock read again at the Ready (the head's wall clock is the
  // real one), and how long after the Setup: on the manual clock, none.
  EXPECT_EQ(ready.facts[1].first, "time_ns");
  EXPECT_NEAR(std::stod(ready.facts[1].second), static_cast<double>(dlaunch::wall_clock_ns()),
              60e9);
  EXPECT_EQ(ready.facts[2], std::make_pair(std::string("since_setup_ns"), std::string("0")));
  EXPECT_TRUE(os_.procs.empty());
  // The head ends a check with Shutdown: nothing ever started.
  send(proto::Shutdown{});
  EXPECT_TRUE(os_.procs.empty());
  EXPECT_TRUE(got<proto::Started>().empty());
}

TEST_F(AgentCheck, AMissingWorkingDirectoryHasItsOwnLineAndTheProgramsAreStillLookedFor) {
  auto s = check_setup({"/bin/true", "no-such-program-c"});
  s.workdir = dir_.string() + "/gone";
  send(s);
  ASSERT_EQ(got<proto::Ready>().size(), 1u);
  const auto cols = columns(got<proto::Ready>()[0]);
  ASSERT_GE(cols.size(), 2u);
  EXPECT_EQ(cols[0], "wdir: working directory '" + dir_.string() + "/gone' does not exist");
  EXPECT_EQ(cols.back(), "program: program 'no-such-program-c' not found on PATH");
}

TEST_F(AgentCheck, AHealthyNodeIsReadyWithoutProblemsAndWithoutGpusCountedUnlessAsked) {
  send(check_setup({"/bin/true"}));
  ASSERT_EQ(got<proto::Ready>().size(), 1u);
  EXPECT_TRUE(got<proto::Ready>()[0].problems.empty());
  EXPECT_EQ(got<proto::Ready>()[0].gpus, -1);
  ASSERT_EQ(os_.facts_asked.size(), 1u);
  EXPECT_FALSE(os_.facts_asked[0].second);
  EXPECT_EQ(os_.gpu_test_asked, std::vector<std::uint32_t>{0});  // no GPU test unless asked
}

TEST_F(AgentCheck, AJobsSetupStillRefusesAtTheFirstProblemAndReadsNoFacts) {
  auto s = check_setup({"no-such-program-d", "no-such-program-e"});
  s.check = false;
  send(s);
  EXPECT_TRUE(got<proto::Ready>().empty());
  ASSERT_EQ(got<proto::Fatal>().size(), 1u);
  EXPECT_NE(got<proto::Fatal>()[0].message.find("program 'no-such-program-d' not found on"),
            std::string::npos);
  EXPECT_TRUE(os_.facts_asked.empty());
}

// A node whose container cannot be had (no such runtime there) is Ready at
// once with that in its PROGRAM column; its working directory was looked at
// first, and no program is claimed found.
TEST_F(AgentCheck, NoRuntimeForTheContainerIsSaidWithTheWorkingDirectory) {
  if (!dlaunch::find_program("enroot", dlaunch::current_environment(), "/").empty())
    GTEST_SKIP() << "enroot is installed here";
  auto s = check_setup({"/bin/true"});
  s.workdir = dir_.string() + "/gone";
  s.container.image = "localhost/x:1";
  s.container.runtime = "enroot";
  send(s);
  ASSERT_EQ(got<proto::Ready>().size(), 1u);
  const auto cols = columns(got<proto::Ready>()[0]);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[0], "wdir: working directory '" + dir_.string() + "/gone' does not exist");
  EXPECT_EQ(cols[1].rfind("program: container runtime 'enroot' not found", 0), 0u) << cols[1];
  EXPECT_TRUE(os_.procs.empty());
}
