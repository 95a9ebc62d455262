// Placement with real jobs (docs/placement.md): --bind-to core on this
// machine, seen from inside the ranks (/proc/self/status); --report-bindings;
// logical nodes of one machine sharing its cores; a synthetic topology
// (HWLOC_SYNTHETIC) in --dry-run and in a real run, where nothing is bound;
// oversubscription and bad spellings refused with exit 2.
#include <sched.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support.h"

using dltest::dlaunch_cmd;
using dltest::kLocalhost;
using dltest::lines_of;
using dltest::run;

namespace {

const std::string kShowCpus =
    "grep Cpus_allowed_list /proc/self/status; echo \"omp=$OMP_NUM_THREADS\"";

int allowed_cpus() {
  cpu_set_t set;
  return ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

std::string own_cpu_list() {
  const std::string status = dltest::slurp("/proc/self/status");
  std::smatch m;
  static const std::regex kLine("Cpus_allowed_list:\\s*(\\S+)");
  return std::regex_search(status, m, kLine) ? m[1].str() : "";
}

// rank -> what it printed after "Cpus_allowed_list:" and "omp=".
struct Seen {
  std::map<int, std::string> cpus;
  std::map<int, std::string> omp;
};
Seen seen_by_ranks(const std::string& out) {
  Seen s;
  static const std::regex kCpus("^\\[(\\d+)\\] Cpus_allowed_list:\\s*(\\S+)$");
  static const std::regex kOmp("^\\[(\\d+)\\] omp=(.*)$");
  for (const auto& line : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(line, m, kCpus)) s.cpus[std::stoi(m[1])] = m[2];
    if (std::regex_match(line, m, kOmp)) s.omp[std::stoi(m[1])] = m[2];
  }
  return s;
}

// rank -> the cpu list of its --report-bindings line.
std::map<int, std::string> reported(const std::string& err) {
  std::map<int, std::string> out;
  static const std::regex kLine("^dlaunch: binding: host \\S+ rank (\\d+): cpus (\\S+) \\[.*$");
  for (const auto& line : lines_of(err)) {
    std::smatch m;
    if (std::regex_match(line, m, kLine)) out[std::stoi(m[1])] = m[2];
  }
  return out;
}

}  // namespace

// The tests that bind for real need this machine's topology.
bool topology_overridden() {
  return std::getenv("HWLOC_SYNTHETIC") != nullptr || std::getenv("HWLOC_XMLFILE") != nullptr;
}

TEST(Placement, BindToCoreGivesTwoRanksDistinctCoresSeenFromInside) {
  if (topology_overridden()) GTEST_SKIP() << "HWLOC_SYNTHETIC or HWLOC_XMLFILE is set";
  if (allowed_cpus() < 2) GTEST_SKIP() << "needs 2 CPUs, this process may use " << allowed_cpus();
  auto r = run(
      dlaunch_cmd({"-n", "2", "--bind-to", "core", "--report-bindings", "sh", "-c", kShowCpus}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto s = seen_by_ranks(r.out);
  ASSERT_EQ(s.cpus.size(), 2u) << r.out;
  EXPECT_NE(s.cpus.at(0), s.cpus.at(1)) << r.out;
  EXPECT_NE(s.cpus.at(0), own_cpu_list()) << "rank 0 was not bound: " << r.out;
  // One core each: OMP_NUM_THREADS follows (torchrun's default of 1 would too;
  // the report below checks the rest).
  EXPECT_EQ(s.omp.at(0), "1");
  // --report-bindings: one line per rank, saying what the rank saw.
  const auto rep = reported(r.err);
  ASSERT_EQ(rep.size(), 2u) << r.err;
  EXPECT_EQ(rep.at(0), s.cpus.at(0)) << r.err;
  EXPECT_EQ(rep.at(1), s.cpus.at(1)) << r.err;
}

TEST(Placement, BindToPackageSetsOmpNumThreadsToTheCoresUnlessTheUserDid) {
  if (topology_overridden()) GTEST_SKIP() << "HWLOC_SYNTHETIC or HWLOC_XMLFILE is set";
  if (allowed_cpus() < 2) GTEST_SKIP() << "needs 2 CPUs, this process may use " << allowed_cpus();
  auto r = run(
      dlaunch_cmd({"-n", "2", "--bind-to", "package", "--oversubscribe", "sh", "-c", kShowCpus}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto s = seen_by_ranks(r.out);
  ASSERT_EQ(s.omp.size(), 2u) << r.out;
  EXPECT_NE(s.omp.at(0), "1") << "the package's cores, not torchrun's 1: " << r.out;
  auto mine = run(dlaunch_cmd(
      {"-n", "2", "-x", "OMP_NUM_THREADS=7", "--bind-to", "core", "sh", "-c", kShowCpus}));
  ASSERT_EQ(mine.exit_code, 0) << mine.out << mine.err;
  EXPECT_EQ(seen_by_ranks(mine.out).omp.at(1), "7") << mine.out;
}

// Under taskset (or srun --cpu-bind, a cpuset) ranks are placed only on the
// CPUs dlaunch may use.
TEST(Placement, OnlyTheCpusDlaunchMayUseAreGiven) {
  if (topology_overridden()) GTEST_SKIP() << "HWLOC_SYNTHETIC or HWLOC_XMLFILE is set";
  if (allowed_cpus() < 2) GTEST_SKIP() << "needs 2 CPUs, this process may use " << allowed_cpus();
  cpu_set_t set;
  ASSERT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) last = c;
  }
  std::vector<std::string> cmd = {"taskset", "-c", std::to_string(last)};
  for (auto& a :
       dlaunch_cmd({"-n", "1", "--bind-to", "core", "--report-bindings", "sh", "-c", kShowCpus})) {
    cmd.push_back(std::move(a));
  }
  auto r = run(cmd);
  if (r.exit_code == 127) GTEST_SKIP() << "no taskset: " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(seen_by_ranks(r.out).cpus.at(0), std::to_string(last)) << r.out << r.err;
}

TEST(Placement, LogicalNodesOfOneMachineShareItsCores) {
  if (topology_overridden()) GTEST_SKIP() << "HWLOC_SYNTHETIC or HWLOC_XMLFILE is set";
  if (allowed_cpus() < 2) GTEST_SKIP() << "needs 2 CPUs, this process may use " << allowed_cpus();
  auto r = run(dlaunch_cmd(
      {"-H", kLocalhost, "--nproc-per-node", "1", "--bind-to", "core", "sh", "-c", kShowCpus}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto s = seen_by_ranks(r.out);
  ASSERT_EQ(s.cpus.size(), 2u) << r.out;
  EXPECT_NE(s.cpus.at(0), s.cpus.at(1)) << "node1 bound its rank where node0 did: " << r.out;
}

TEST(Placement, SyntheticTopologyDryRunShowsTheCpuSets) {
  auto r = run(dlaunch_cmd({"-n", "4", "--bind-to", "numa", "--dry-run", "true"}), 60,
               {"HWLOC_SYNTHETIC=package:2 numa:1 core:4 pu:1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 0: cpus 0-3 [B/B/B/B][./././.]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1: cpus 4-7 [./././.][B/B/B/B]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 2: cpus 0-3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nothing will be bound"), std::string::npos) << r.out;
}

TEST(Placement, SyntheticTopologyInARealRunBindsNothingAndSaysSo) {
  auto r =
      run(dlaunch_cmd({"-n", "2", "--bind-to", "numa", "--report-bindings", "sh", "-c", kShowCpus}),
          60, {"HWLOC_SYNTHETIC=package:2 numa:1 core:4 pu:1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto s = seen_by_ranks(r.out);
  ASSERT_EQ(s.cpus.size(), 2u) << r.out;
  EXPECT_EQ(s.cpus.at(1), own_cpu_list()) << r.out;  // not bound
  EXPECT_EQ(reported(r.err).at(1), "4-7") << r.err;  // what the mapping chose
  EXPECT_NE(r.err.find("not bound: synthetic topology"), std::string::npos) << r.err;
}

TEST(Placement, OversubscriptionIsRefusedUnlessAllowed) {
  if (topology_overridden()) GTEST_SKIP() << "HWLOC_SYNTHETIC or HWLOC_XMLFILE is set";
  const int n = allowed_cpus() + 1;
  auto r = run(dlaunch_cmd({"-n", std::to_string(n), "--bind-to", "core", "true"}));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--bind-to core"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--oversubscribe"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");  // nothing started
  auto ok = run(dlaunch_cmd({"-n", std::to_string(n), "--bind-to", "core", "--oversubscribe",
                             "--report-bindings", "true"}));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.err.find("oversubscribed"), std::string::npos) << ok.err;
}

TEST(Placement, BadPoliciesNameTheOption) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--bind-to", "cores"}, {"--map-by", "numa:PE=x"}, {"--map-by", "board"}}) {
    std::vector<std::string> cmd = {"-n", "1"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    cmd.emplace_back("true");
    auto r = run(dlaunch_cmd(cmd));
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << args[1] << ": " << r.err;
    EXPECT_NE(r.err.find(args[0] + " '" + args[1] + "'"), std::string::npos) << r.err;
  }
}

TEST(Placement, XmlGpuNodeDryRunBindsEachRankNearItsGpu) {
  const std::string xml = std::string(SOURCE_DIR) + "/tests/unit/placement/gpu_node.xml";
  auto r = run(dlaunch_cmd({"-n", "2", "--bind-to", "gpu", "--dry-run", "true"}), 60,
               {"HWLOC_XMLFILE=" + xml, "CUDA_VISIBLE_DEVICES=1,0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 0: cpus 2-3,6-7 [../..][BB/BB] (2 core(s), NUMA 1, GPU 0000:b3:00.0)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("rank 1: cpus 0-1,4-5 [BB/BB][../..] (2 core(s), NUMA 0, GPU 0000:17:00.0)"),
            std::string::npos)
      << r.out;
}

TEST(Placement, XmlGpuNodeRealRunReportsEachRanksGpu) {
  const std::string xml = std::string(SOURCE_DIR) + "/tests/unit/placement/gpu_node.xml";
  auto r = run(dlaunch_cmd({"-n", "2", "--bind-to", "gpu", "--report-bindings", "true"}), 60,
               {"HWLOC_XMLFILE=" + xml, "CUDA_VISIBLE_DEVICES=1,0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(reported(r.err).at(0), "2-3,6-7") << r.err;
  EXPECT_NE(r.err.find("near GPU 0000:b3:00.0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not bound: XML topology"), std::string::npos) << r.err;
}

TEST(Placement, CheckShowsEachNodesTopology) {
  auto r = run(dlaunch_cmd({"--check", "-n", "1", "true"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  static const std::regex kLine(
      "node 0 \\(\\S+\\): topology: \\d+ packages?, \\d+ NUMA nodes?, "
      "\\d+ cores?, \\d+ hardware threads?.*GPUs: .*NICs: .*");
  bool found = false;
  for (const auto& line : lines_of(r.out)) found = found || std::regex_match(line, kLine);
  EXPECT_TRUE(found) << r.out;
}
