// dlaunch inside the allocations of schedulers that cannot be installed here
// (PBS/Torque, LSF and Flux are not packaged for Debian 12): their real
// variables and node files, in the formats they document, pointing at this
// machine, run real jobs; nodes elsewhere are only planned (--dry-run shows
// the command that would start them), so no traffic leaves this machine.
// `flux resource R` is stood in for by a script printing an R document, the
// remote starts by programs named with DLAUNCH_BLAUNCH / DLAUNCH_FLUX.
// (SGE runs for real in sge_test.cpp.)
#include <sys/stat.h>
#include <unistd.h>

#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "support.h"

using namespace dltest;

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

const std::vector<std::string> kSayRank = {"sh", "-c", "echo \"rank $RANK of $WORLD_SIZE\""};

std::set<int> ranks_seen(const std::string& out, int world) {
  std::set<int> seen;
  const std::regex line(R"(\[(\d+)\] rank (\d+) of (\d+))");
  for (const auto& l : lines_of(out)) {
    std::smatch m;
    if (!std::regex_search(l, m, line)) continue;
    EXPECT_EQ(m[1], m[2]) << l;
    EXPECT_EQ(std::stoi(m[3]), world) << l;
    seen.insert(std::stoi(m[2]));
  }
  return seen;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class Allocation : public ::testing::Test {
 protected:
  void SetUp() override { host_ = trim(run({"hostname", "-s"}).out); }
  void TearDown() override {
    for (const auto& f : files_) ::unlink(f.c_str());
  }
  std::string file(const std::string& text, const std::string& suffix = ".txt", bool exec = false) {
    files_.push_back(temp_file(text, suffix));
    if (exec) ::chmod(files_.back().c_str(), 0755);
    return files_.back();
  }
  // dlaunch with this environment and no other scheduler's variables.
  RunResult dl(const std::vector<std::string>& args, const std::vector<std::string>& env) {
    return run(dlaunch_cmd(args), 30,
               with({"SLURM_JOB_NODELIST=", "SLURM_NODELIST=", "FLUX_URI=", "PBS_NODEFILE=",
                     "LSB_DJOB_HOSTFILE=", "LSB_MCPU_HOSTS=", "PE_HOSTFILE="},
                    env));
  }
  std::string host_;
  std::vector<std::string> files_;
};

TEST_F(Allocation, PbsNodefileOfThisMachineRunsTheJob) {
  // Torque/PBS Pro: a host once per slot; PBS_ENVIRONMENT and PBS_JOBID as
  // in a batch job.
  const auto nf = file(host_ + "\n" + host_ + "\n");
  const auto r =
      dl(kSayRank, {"PBS_NODEFILE=" + nf, "PBS_JOBID=7.server", "PBS_ENVIRONMENT=PBS_BATCH"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(ranks_seen(r.out, 2), (std::set<int>{0, 1})) << r.out;
}

TEST_F(Allocation, PbsNodesElsewhereAreReachedOverSsh) {
  const auto nf = file(host_ + "\n" + host_ + "\nnode02.example\nnode02.example\n");
  const auto r = dl(with({"--dry-run"}, kSayRank), {"PBS_NODEFILE=" + nf});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("4 rank(s) on 2 node(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hosts: the PBS allocation, PBS_NODEFILE=" + nf), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("node 0: " + host_ + " (" + host_ + ", local), ranks 0-1"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("node 1: node02.example (node02.example, ssh), ranks 2-3"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("tm_spawn"), std::string::npos) << r.out;
}

TEST_F(Allocation, MalformedNodeFileStopsBeforeAnythingStarts) {
  const auto nf = file(host_ + "\n" + host_ + " extra\n");
  auto r = dl(kSayRank, {"PBS_NODEFILE=" + nf});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(nf + ":2:" + std::to_string(host_.size() + 2) +
                       ": host: expected one host name per line"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");

  const auto pe = file(host_ + " two all.q@" + host_ + " UNDEFINED\n");
  r = dl(kSayRank, {"PE_HOSTFILE=" + pe, "JOB_ID=3"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(pe + ":1:" + std::to_string(host_.size() + 2) +
                       ": slots: expected a positive slot count, got 'two'"),
            std::string::npos)
      << r.err;

  r = dl(kSayRank, {"PBS_NODEFILE=/nonexistent/aux/7.server"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/aux/7.server"), std::string::npos) << r.err;
}

TEST_F(Allocation, ExplicitHostsWinOverTheAllocation) {
  // -H, --hostfile and -n decide; the node file is not even read.
  const auto r = dl(with({"-H", "localhost:1"}, kSayRank), {"PBS_NODEFILE=/nonexistent/nf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ranks_seen(r.out, 1), (std::set<int>{0})) << r.out;
}

TEST_F(Allocation, LsfHostfileRunsTheJobAndBlaunchStartsTheOtherNodes) {
  const auto hf = file(host_ + "\n" + host_ + "\n" + host_ + "\n");
  auto r =
      dl(kSayRank, {"LSB_DJOB_HOSTFILE=" + hf, "LSB_MCPU_HOSTS=" + host_ + " 3", "LSB_JOBID=12"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(ranks_seen(r.out, 3), (std::set<int>{0, 1, 2})) << r.out;

  // LSB_MCPU_HOSTS alone; blaunch is not installed: the other node over SSH.
  const std::vector<std::string> lsf = {"LSB_MCPU_HOSTS=" + host_ + " 2 hostb 4", "LSB_JOBID=12",
                                        "DLAUNCH_BLAUNCH=blaunch-not-here"};
  r = dl(with({"--dry-run"}, kSayRank), lsf);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("6 rank(s) on 2 node(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("node 1: hostb (hostb, ssh), ranks 2-5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("start with ssh (blaunch-not-here is not on PATH)"), std::string::npos)
      << r.out;
  // With a blaunch: `blaunch HOST AGENT`.
  const auto blaunch = file("#!/bin/sh\nexit 1\n", ".sh", true);
  r = dl(with({"--dry-run"}, kSayRank), with(lsf, {"DLAUNCH_BLAUNCH=" + blaunch}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("node 1: hostb (hostb, lsf), ranks 2-5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  start: " + blaunch + " hostb " DLAUNCH_AGENT_BIN "\n"), std::string::npos)
      << r.out;
}

TEST_F(Allocation, FluxResourceSetGivesTheHostsAndFluxRunStartsTheOthers) {
  // `flux resource R` inside a `flux alloc -N2`: R of two nodes, 2 cores on
  // this one and 4 cores and 2 GPUs on the other.
  const std::string r_doc =
      R"({"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0-1"}}, )"
      R"({"rank": "1", "children": {"core": "0-3", "gpu": "0-1"}}], "starttime": 0.0, )"
      R"("expiration": 0.0, "nodelist": [")" +
      host_ + R"(,gpunode1"]}})";
  const auto flux =
      file("#!/bin/sh\n[ \"$1 $2\" = \"resource R\" ] || exit 3\ncat <<'EOF'\n" + r_doc + "\nEOF\n",
           ".sh", true);
  const std::vector<std::string> env = {"FLUX_URI=local:///tmp/flux-test/local-0",
                                        "FLUX_JOB_ID=f2AbC", "DLAUNCH_FLUX=" + flux,
                                        // Flux started by Slurm: its variables are inherited.
                                        "SLURM_JOB_NODELIST=other[1-4]", "SLURM_JOB_ID=9"};
  auto r = dl(with({"--dry-run"}, kSayRank), env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("hosts from the Flux allocation"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("also set, ignored: SLURM_JOB_NODELIST (Slurm)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("node 0: " + host_ + " (" + host_ + ", local), ranks 0-1"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("node 1: gpunode1 (gpunode1, flux), ranks 2-3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  start: " + flux +
                       " run --nodes=1 --ntasks=1 --exclusive --requires=host:gpunode1 "
                       "--unbuffered --setopt=cpu-affinity=off --setopt=gpu-affinity=off " +
                       DLAUNCH_AGENT_BIN + "\n"),
            std::string::npos)
      << r.out;
  // The ranks of this node run for real.
  r = dl(with({"--include", host_}, kSayRank), env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(ranks_seen(r.out, 2), (std::set<int>{0, 1})) << r.out;

  // flux failing is an input error naming it.
  const auto broken = file(
      "#!/bin/sh\necho 'flux-resource: ERROR: Connection refused' >&2\n"
      "exit 1\n",
      ".sh", true);
  r = dl(kSayRank, {"FLUX_URI=local:///nonexistent", "DLAUNCH_FLUX=" + broken});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("resource R' failed (exit status 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Connection refused"), std::string::npos) << r.err;
}

TEST_F(Allocation, SeveralSchedulersTakeTheFirstByPrecedenceAndSaySo) {
  const auto nf = file(host_ + "\n");
  const auto pe = file(host_ + " 3 all.q@" + host_ + " UNDEFINED\n");
  const auto r = dl(kSayRank, {"PBS_NODEFILE=" + nf, "PE_HOSTFILE=" + pe, "JOB_ID=4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ranks_seen(r.out, 1), (std::set<int>{0})) << r.out;
  EXPECT_NE(r.err.find("dlaunch: hosts from the PBS allocation (PBS_NODEFILE=" + nf +
                       "); also set, ignored: PE_HOSTFILE (SGE)"),
            std::string::npos)
      << r.err;
}

}  // namespace
