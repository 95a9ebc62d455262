// Jobs in a real Slurm allocation: a single-node cluster of our own
// (tests/testbed/slurm.sh: munged, slurmctld, slurmd, files in a temp dir,
// node name = `hostname -s`, NodeAddr 127.0.0.1), with dlaunch run by
// `salloc` (hosts from the allocation) and with `--transport slurm` (every
// agent a job step started by srun). Every test checks that each rank ran and
// that nothing is left: no process carrying the test's marker variable
// (srun, agents and workers all inherit it) and no job step.
#include <signal.h>
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
const std::string kScript = std::string(SOURCE_DIR) + "/tests/testbed/slurm.sh";

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

class Slurm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = new std::string("the Slurm test bed needs root (slurmd runs jobs as their users)");
      return;
    }
    dir_ = new std::string(
        (fs::temp_directory_path() / ("dlaunch-slurm-" + std::to_string(::getpid()))).string());
    // 4 CPUs: enough slots for 3 ranks plus the agents' steps (--overlap).
    auto r = run({kScript, "start", *dir_, "4"}, 40);
    if (r.exit_code != 0) {
      skip_ = new std::string(
          (r.exit_code == 3 ? "Slurm cannot run here: " : "Slurm daemons failed to start: ") +
          trim(r.err));
      return;
    }
    conf_ = new std::string(*dir_ + "/slurm.conf");
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) {
      run({kScript, "stop", *dir_}, 30);
      std::error_code ignored;  // a daemon may still be removing its own files
      fs::remove_all(*dir_, ignored);
    }
  }
  void SetUp() override {
    if (skip_ != nullptr) GTEST_SKIP() << *skip_;
    mark_ = "DLAUNCH_SLURM_TEST=" + unique_job_id("slurm");
  }
  void TearDown() override {
    if (skip_ != nullptr) return;
    // Nothing of this test may outlive it: processes, then steps and jobs.
    std::vector<pid_t> left;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    do {
      left = alive(dlaunch::pids_with_env_entry(mark_));
      if (left.empty()) break;
      ::usleep(50000);
    } while (std::chrono::steady_clock::now() < deadline);
    EXPECT_TRUE(left.empty()) << left.size() << " process(es) left, e.g. " << cmdline(left.front());
    for (pid_t p : left) ::kill(p, SIGKILL);
    EXPECT_EQ(wait_no_steps(10), "") << "job steps left";
  }

  std::vector<std::string> env() const { return {"SLURM_CONF=" + *conf_, mark_}; }

  // salloc ARGS -- dlaunch DLAUNCH_ARGS
  RunResult salloc(std::vector<std::string> alloc, const std::vector<std::string>& dl,
                   double timeout = 40) {
    std::vector<std::string> argv = {"salloc", "--quiet"};
    argv.insert(argv.end(), alloc.begin(), alloc.end());
    const auto cmd = dlaunch_cmd(dl);
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    return run(argv, timeout, env());
  }

  static std::vector<pid_t> alive(const std::vector<pid_t>& pids) {
    std::vector<pid_t> out;
    for (pid_t p : pids) {
      std::string stat;
      std::ifstream f("/proc/" + std::to_string(p) + "/stat");
      std::getline(f, stat);
      const auto close = stat.rfind(')');
      if (stat.empty() ||
          (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z')) {
        continue;
      }
      out.push_back(p);
    }
    return out;
  }
  static std::string cmdline(pid_t p) {
    std::string s;
    std::ifstream f("/proc/" + std::to_string(p) + "/cmdline");
    std::getline(f, s, '\0');
    return std::to_string(p) + " " + s;
  }
  // squeue's steps, polled until there are none or timeout; returns what is left.
  std::string wait_no_steps(double timeout_s) const {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    std::string steps;
    do {
      steps = trim(run({"squeue", "-h", "-s", "-o", "%i %j"}, 10, env()).out);
      if (steps.empty()) break;
      ::usleep(100000);
    } while (std::chrono::steady_clock::now() < deadline);
    return steps;
  }

  // "[r] rank r of n step S" lines -> the set of ranks, and checks each line.
  static std::set<int> ranks_seen(const std::string& out, int world, const std::string& step) {
    std::set<int> seen;
    const std::regex line(R"(\[(\d+)\] rank (\d+) of (\d+) step (\S*) on (\S+))");
    for (const auto& l : lines_of(out)) {
      std::smatch m;
      if (!std::regex_search(l, m, line)) continue;
      EXPECT_EQ(m[1], m[2]) << l;
      EXPECT_EQ(std::stoi(m[3]), world) << l;
      EXPECT_EQ(m[4], step) << l;
      seen.insert(std::stoi(m[2]));
    }
    return seen;
  }

  static inline std::string* dir_ = nullptr;
  static inline std::string* conf_ = nullptr;
  static inline std::string* skip_ = nullptr;
  std::string mark_;
};

// Each rank says who it is and in which Slurm step its agent runs ("none"
// when the agent is not a step).
const std::vector<std::string> kSayRank = {
    "sh", "-c", "echo \"rank $RANK of $WORLD_SIZE step ${SLURM_STEP_ID:-none} on $(hostname -s)\""};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(Slurm, AllocationGivesTheHosts) {
  // No -H: the nodes and slots (SLURM_TASKS_PER_NODE=3) come from salloc's
  // allocation; this node's agent runs locally, not as a step.
  auto r = salloc({"-N1", "-n3"}, kSayRank);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(ranks_seen(r.out, 3, "none"), (std::set<int>{0, 1, 2})) << r.out;

  r = salloc({"-N1", "-n3"}, with({"--dry-run"}, kSayRank));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("3 rank(s) on 1 node(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", local), ranks 0-2"), std::string::npos) << r.out;
  // --ntasks-per-node wins; -n takes the first N slots.
  r = salloc({"-N1", "--ntasks-per-node=2"}, with({"-n", "1"}, kSayRank));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ranks_seen(r.out, 1, "none"), (std::set<int>{0})) << r.out;
}

TEST_F(Slurm, TransportSlurmStartsAgentsWithSrun) {
  auto r = salloc({"-N1", "-n2"}, with({"--transport", "slurm"}, kSayRank));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // The agent is the job's first step (0), both ranks ran in it.
  EXPECT_EQ(ranks_seen(r.out, 2, "0"), (std::set<int>{0, 1})) << r.out;

  // Explicit hosts inside the allocation, started as steps too.
  const std::string host = trim(run({"hostname", "-s"}).out);
  r = salloc({"-N1", "-n2"}, with({"--transport", "slurm", "-H", host + ":2"}, kSayRank));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(ranks_seen(r.out, 2, "0"), (std::set<int>{0, 1})) << r.out;
}

TEST_F(Slurm, MpiProgramsJoinTheDlaunchWorld) {
  // Open MPI inside an allocation but outside a job step calls itself a
  // "managed singleton" unless told otherwise (the agents' PMIx environment
  // does); in a step it must still take the agent's PMIx server, not Slurm's.
  for (const std::vector<std::string>& how :
       {std::vector<std::string>{}, std::vector<std::string>{"--transport", "slurm"}}) {
    auto r = salloc({"-N1", "-n2"}, with(with(how, {"--mpi"}), {MPI_HELLO_BIN}));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_NE(r.out.find("mpi rank " + std::to_string(rank) + "/2, RANK=" + std::to_string(rank) +
                           " WORLD_SIZE=2, allreduce(rank)=1"),
                std::string::npos)
          << r.out;
    }
  }
}

TEST_F(Slurm, FailingRankStopsEveryStep) {
  // Rank 1 exits 3 at once; rank 0 would sleep 30 s: dlaunch must stop it,
  // exit 3, and leave no step behind (TearDown checks).
  auto r = salloc({"-N1", "-n2"}, {"--transport", "slurm", "--kill-grace", "1", kWorker,
                                   "fail-rank", "1", "3", "30"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_LT(r.seconds, 20) << r.err;
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
}

TEST_F(Slurm, KillingDlaunchKillsStepsAndWorkers) {
  // An allocation without a shell; dlaunch then runs in it as a batch script
  // would (the allocation's variables in its environment), and is SIGKILLed
  // while its workers run.
  auto alloc = run({"salloc", "--no-shell", "-N1", "-n2", "-J", "dlaunch-kill-test"}, 20, env());
  std::smatch m;
  const std::regex granted(R"(Granted job allocation (\d+))");
  ASSERT_TRUE(std::regex_search(alloc.err, m, granted)) << alloc.err;
  const std::string job = m[1];
  const std::string host = trim(run({"hostname", "-s"}).out);
  auto e = env();
  e.insert(e.end(), {"SLURM_JOB_ID=" + job, "SLURM_JOBID=" + job, "SLURM_JOB_NODELIST=" + host,
                     "SLURM_NTASKS=2", "SLURM_TASKS_PER_NODE=2"});
  {
    Process p(dlaunch_cmd({"--transport", "slurm", kWorker, "ready-sleep", "60"}), e);
    ASSERT_TRUE(p.wait_for_lines(2, 20)) << "workers did not start";
    const std::string steps =
        trim(run({"squeue", "-h", "-s", "-j", job, "-o", "%j"}, 10, env()).out);
    EXPECT_EQ(steps, "dlaunch-agent");
    // The marker reached everything there is to find afterwards: dlaunch,
    // srun (two processes), the agent (and its guard) and both workers.
    EXPECT_GE(alive(dlaunch::pids_with_env_entry(mark_)).size(), 6u);
    p.signal(SIGKILL);
    const auto r = p.finish(10);
    EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  }
  // TearDown checks that no process and no step is left.
  run({"scancel", job}, 10, env());
}

}  // namespace
