// The agent's placement (docs/placement.md): from Setup's policy it maps the
// ranks of its machine on the machine's topology (hwloc, real), binds its own
// slice (the CPUs the fake OS is asked to bind to), sets OMP_NUM_THREADS,
// reports each rank's CPUs in Started, and refuses a policy the machine
// cannot meet before Ready.
#include <cstdlib>

#include "agent_test_support.h"
#include "dlaunch/placement/mapping.h"
#include "dlaunch/placement/topology.h"

using namespace dltest;
namespace pl = dlaunch::placement;

namespace {

// This machine's topology, or why a test cannot use it.
std::optional<pl::Topology> machine(std::string& why) {
  if (std::getenv("HWLOC_SYNTHETIC") != nullptr || std::getenv("HWLOC_XMLFILE") != nullptr) {
    why = "HWLOC_SYNTHETIC or HWLOC_XMLFILE is set";
    return std::nullopt;
  }
  auto t = pl::load_topology(false);
  if (!t) {
    why = t.error();
    return std::nullopt;
  }
  return t.take();
}

}  // namespace

TEST_F(AgentTest, NothingIsBoundByDefault) {
  start_workers(1);
  ASSERT_EQ(os_.procs.size(), 1u);
  EXPECT_TRUE(os_.procs[0].cpus.empty());
  EXPECT_EQ(got<proto::Started>()[0].cpus, "");
}

TEST_F(AgentTest, BindToCoreBindsThisNodesSliceOfTheMachine) {
  std::string why;
  auto topo = machine(why);
  if (!topo) GTEST_SKIP() << why;
  if (topo->cores.size() < 2) GTEST_SKIP() << "needs 2 cores";
  // The second logical node of a machine running 2 ranks: its rank gets core 1.
  auto s = setup_for(1);
  s.bind_to = "core";
  s.ranks_on_host = 2;
  s.host_rank_offset = 1;
  s.omp_default = true;
  s.workers[0].env = {{"OMP_NUM_THREADS", "1"}};
  start_workers(1, s);
  ASSERT_EQ(os_.procs.size(), 1u);
  EXPECT_EQ(os_.procs[0].cpus, topo->cores[1].pus);
  const auto started = got<proto::Started>()[0];
  EXPECT_EQ(started.cpus, pl::cpu_list(topo->cores[1].pus));
  EXPECT_EQ(started.cpu_picture, pl::cpu_picture(*topo, topo->cores[1].pus));
  EXPECT_TRUE(has_entry(os_.procs[0].env, "OMP_NUM_THREADS=1"));  // one core
}

TEST_F(AgentTest, BindToPackageGivesOmpNumThreadsItsCoresUnlessTheUserSetIt) {
  std::string why;
  auto topo = machine(why);
  if (!topo) GTEST_SKIP() << why;
  auto s = setup_for(2);
  s.bind_to = "package";
  s.oversubscribe = true;
  s.omp_default = false;  // the user's OMP_NUM_THREADS=3 stays
  s.workers[1].env = {{"OMP_NUM_THREADS", "3"}};
  start_workers(2, s);
  ASSERT_EQ(os_.procs.size(), 2u);
  EXPECT_FALSE(os_.procs[0].cpus.empty());
  int package0_cores = 0;
  for (const auto& c : topo->cores) package0_cores += c.package == 0 ? 1 : 0;
  EXPECT_TRUE(has_entry(os_.procs[0].env, "OMP_NUM_THREADS=" + std::to_string(package0_cores)));
  EXPECT_TRUE(has_entry(os_.procs[1].env, "OMP_NUM_THREADS=3"));
}

TEST_F(AgentTest, OversubscriptionFailsTheNodeBeforeReady) {
  std::string why;
  auto topo = machine(why);
  if (!topo) GTEST_SKIP() << why;
  auto s = setup_for(1);
  s.bind_to = "core";
  s.ranks_on_host = static_cast<std::int32_t>(topo->cores.size()) + 1;
  send(s);
  EXPECT_TRUE(got<proto::Ready>().empty());
  ASSERT_EQ(got<proto::Fatal>().size(), 1u);
  EXPECT_NE(got<proto::Fatal>()[0].message.find("--oversubscribe"), std::string::npos);
  EXPECT_TRUE(os_.procs.empty());
}

TEST_F(AgentTest, ASyntheticTopologyIsMappedAndReportedButNotBound) {
  if (std::getenv("HWLOC_SYNTHETIC") != nullptr || std::getenv("HWLOC_XMLFILE") != nullptr)
    GTEST_SKIP() << "HWLOC_SYNTHETIC or HWLOC_XMLFILE is set";
  ::setenv("HWLOC_SYNTHETIC", "package:2 numa:1 core:4 pu:1", 1);
  auto s = setup_for(2);
  s.bind_to = "numa";
  start_workers(2, s);
  ::unsetenv("HWLOC_SYNTHETIC");
  ASSERT_EQ(os_.procs.size(), 2u);
  EXPECT_TRUE(os_.procs[1].cpus.empty());
  const auto started = got<proto::Started>();
  EXPECT_EQ(started[1].cpus, "4-7");
  EXPECT_NE(started[1].binding_note.find("not bound: synthetic topology"), std::string::npos)
      << started[1].binding_note;
}
