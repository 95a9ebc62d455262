// Jobs in a real Grid Engine allocation: a single-node cluster of our own
// (tests/testbed/sge.sh: sge_qmaster and sge_execd of Debian's gridengine
// 8.1.9, a cell in a temp dir, the parallel environment `dlaunch` with
// control_slaves TRUE), with dlaunch run by `qrsh -pe dlaunch N` (hosts from
// PE_HOSTFILE) and with `--transport sge` (every agent a task of the job,
// started by `qrsh -inherit`). Every test checks that each rank ran and that
// nothing is left: no process carrying the test's marker variable (qrsh -V
// exports it to the job, whose tasks, agents and workers all inherit it).
//
// qrsh hands its command to a shell on the node, joined with spaces, so the
// programs run here are scripts without arguments that need quoting.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;

namespace {

const std::string kWorker = TEST_WORKER_BIN;
const std::string kScript = std::string(SOURCE_DIR) + "/tests/testbed/sge.sh";

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

class Sge : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = new std::string("the SGE test bed needs root (sge_execd runs jobs as their users)");
      return;
    }
    remove_stale_beds("dlaunch-sge-", kScript);
    dir_ = new std::string(
        (fs::temp_directory_path() / ("dlaunch-sge-" + std::to_string(::getpid()))).string());
    auto r = run({kScript, "start", *dir_, "4"}, 60);
    if (r.exit_code != 0) {
      skip_ = new std::string(
          (r.exit_code == 3 ? "SGE cannot run here: " : "SGE daemons failed to start: ") +
          trim(r.err));
      return;
    }
    env_ = new std::vector<std::string>(lines_of(trim(r.out)));
    // Each rank says who it is and whether its agent is a task of the job:
    // a qrsh -inherit task's spool dir is in its job's, the job's own in
    // active_jobs (SGE_* is not forwarded from dlaunch, JOB_NAME would be).
    say_ = new std::string(
        temp_file("#!/bin/sh\necho \"rank $RANK of $WORLD_SIZE task "
                  "$(basename \"$(dirname \"$SGE_JOB_SPOOL_DIR\")\") on $(hostname -s)\"\n",
                  ".sh"));
    ::chmod(say_->c_str(), 0755);
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) {
      run({kScript, "stop", *dir_}, 30);
      std::error_code ignored;
      fs::remove_all(*dir_, ignored);
    }
    if (say_ != nullptr) ::unlink(say_->c_str());
  }
  void SetUp() override {
    if (skip_ != nullptr) GTEST_SKIP() << *skip_;
    mark_ = "DLAUNCH_SGE_TEST=" + unique_job_id("sge");
  }
  void TearDown() override {
    if (skip_ != nullptr) return;
    std::vector<pid_t> left;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    do {
      left = alive(dlaunch::pids_with_env_entry(mark_));
      if (left.empty()) break;
      ::usleep(50000);
    } while (std::chrono::steady_clock::now() < deadline);
    EXPECT_TRUE(left.empty()) << left.size() << " process(es) left, e.g. " << cmdline(left.front());
    for (pid_t p : left) ::kill(p, SIGKILL);
  }

  std::vector<std::string> env() const {
    auto e = *env_;
    e.push_back(mark_);
    return e;
  }

  // qrsh -pe dlaunch SLOTS -V dlaunch DLAUNCH_ARGS (waits for the slots).
  std::vector<std::string> qrsh(int slots, const std::vector<std::string>& dl) const {
    std::vector<std::string> argv = {"qrsh", "-now", "no", "-pe", "dlaunch", std::to_string(slots),
                                     "-V"};
    const auto cmd = dlaunch_cmd(dl);
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    return argv;
  }
  RunResult in_job(int slots, const std::vector<std::string>& dl, double timeout = 60) const {
    return run(qrsh(slots, dl), timeout, env());
  }

  static std::vector<pid_t> alive(const std::vector<pid_t>& pids) {
    std::vector<pid_t> out;
    for (pid_t p : pids) {
      const char state = dlaunch::process_state(p);
      if (state != '\0' && state != 'Z') out.push_back(p);
    }
    return out;
  }
  static std::string cmdline(pid_t p) {
    std::string s;
    std::ifstream f("/proc/" + std::to_string(p) + "/cmdline");
    std::getline(f, s, '\0');
    return std::to_string(p) + " " + s;
  }

  // "[r] rank r of n task T on H" lines -> the set of ranks; checks each line.
  static std::set<int> ranks_seen(const std::string& out, int world, bool in_task) {
    std::set<int> seen;
    const std::regex line(R"(\[(\d+)\] rank (\d+) of (\d+) task (\S*) on (\S+))");
    for (const auto& l : lines_of(out)) {
      std::smatch m;
      if (!std::regex_search(l, m, line)) continue;
      EXPECT_EQ(m[1], m[2]) << l;
      EXPECT_EQ(std::stoi(m[3]), world) << l;
      EXPECT_EQ(m[4] != "active_jobs", in_task) << l;
      seen.insert(std::stoi(m[2]));
    }
    return seen;
  }

  static inline std::string* dir_ = nullptr;
  static inline std::vector<std::string>* env_ = nullptr;
  static inline std::string* say_ = nullptr;
  static inline std::string* skip_ = nullptr;
  std::string mark_;
};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(Sge, AllocationGivesTheHostsAndThisNodeRunsLocally) {
  // No -H: the node and its 3 slots come from PE_HOSTFILE; this node's agent
  // is dlaunch's child, not a task.
  auto r = in_job(3, {*say_});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(ranks_seen(r.out, 3, false), (std::set<int>{0, 1, 2})) << r.out;

  r = in_job(3, {"--dry-run", *say_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("3 rank(s) on 1 node(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hosts: the SGE allocation, PE_HOSTFILE="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("other nodes start with qrsh -inherit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", local), ranks 0-2"), std::string::npos) << r.out;

  // -n takes the first N slots.
  r = in_job(2, {"-n", "1", *say_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ranks_seen(r.out, 1, false), (std::set<int>{0})) << r.out;
}

TEST_F(Sge, TransportSgeStartsAgentsWithQrshInherit) {
  auto r = in_job(2, {"--transport", "sge", *say_});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(ranks_seen(r.out, 2, true), (std::set<int>{0, 1})) << r.out;

  // Explicit hosts inside the job, started as tasks too.
  const std::string host = trim(run({"hostname", "-s"}).out);
  r = in_job(2, {"--transport", "sge", "-H", host + ":2", *say_});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(ranks_seen(r.out, 2, true), (std::set<int>{0, 1})) << r.out;
}

TEST_F(Sge, CheckRunsThroughQrshInherit) {
  const auto r = in_job(2, {"--check", "--transport", "sge", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\(sge\)\s+sge\s)"))) << r.out;
  EXPECT_NE(r.out.find("1 of 1 node(s) passed"), std::string::npos) << r.out;
}

TEST_F(Sge, MpiProgramsJoinTheDlaunchWorld) {
  // Open MPI in an SGE job (JOB_ID, PE_HOSTFILE set) must take the agent's
  // PMIx server, with the agent a child of dlaunch or a qrsh -inherit task.
  for (const std::vector<std::string>& how :
       {std::vector<std::string>{}, std::vector<std::string>{"--transport", "sge"}}) {
    auto r = in_job(2, with(with(how, {"--mpi"}), {MPI_HELLO_BIN}));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_NE(r.out.find("mpi rank " + std::to_string(rank) + "/2, RANK=" + std::to_string(rank) +
                           " WORLD_SIZE=2, allreduce(rank)=1"),
                std::string::npos)
          << r.out;
    }
  }
}

TEST_F(Sge, TransportSgeOutsideAJobIsRefused) {
  const auto r = run(dlaunch_cmd({"--transport", "sge", "-H", "localhost:1", "true"}), 20,
                     with(env(), {"JOB_ID=", "PE_HOSTFILE="}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("sge needs an SGE parallel job"), std::string::npos) << r.err;
}

TEST_F(Sge, FailingRankStopsEveryTask) {
  // Rank 1 exits 3 at once; rank 0 would sleep 30 s: dlaunch must stop it
  // through its task and exit 3 (TearDown checks that nothing is left).
  const auto r =
      in_job(2, {"--transport", "sge", "--kill-grace", "1", kWorker, "fail-rank", "1", "3", "30"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_LT(r.seconds, 25) << r.err;
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
}

TEST_F(Sge, KillingDlaunchEndsItsTasksAndWorkers) {
  // dlaunch SIGKILLed while its workers run in qrsh -inherit tasks: the
  // tasks' stdin closes (and qrsh gets SIGTERM), so agents and workers go.
  Process p(qrsh(2, {"--transport", "sge", kWorker, "ready-sleep", "60"}), env());
  ASSERT_TRUE(p.wait_for_lines(2, 30)) << "workers did not start";
  pid_t head = -1;
  for (pid_t q : alive(dlaunch::pids_with_env_entry(mark_))) {
    if (cmdline(q) == std::to_string(q) + " " DLAUNCH_BIN) head = q;
  }
  ASSERT_GT(head, 0) << "no dlaunch process found";
  // The marker reached the agents' tasks: qrsh, two shepherds' children, the
  // agent, its guard, both workers.
  EXPECT_GE(alive(dlaunch::pids_with_env_entry(mark_)).size(), 6u);
  ::kill(head, SIGKILL);
  const auto r = p.finish(40);
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;  // qrsh reports the job's end
  // TearDown checks that no process is left.
}

}  // namespace
