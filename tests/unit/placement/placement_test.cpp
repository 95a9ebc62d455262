// The placement module (dlaunch/placement): topologies read by hwloc from
// synthetic descriptions and a hand-written XML GPU node, the mapping of
// ranks to CPUs for every policy, oversubscription, and the binding a spawn
// applies in the child.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dlaunch/placement/binding.h"
#include "dlaunch/placement/mapping.h"
#include "dlaunch/placement/topology.h"
#include "dlaunch/process.h"

namespace pl = dlaunch::placement;

namespace {

// 2 packages x 2 NUMA nodes x 8 cores x 2 hardware threads: core k has PUs
// 2k and 2k+1; NUMA node j has cores 8j..8j+7, PUs 16j..16j+15.
const char* const kBig = "package:2 numa:2 core:8 pu:2";

pl::Topology synthetic(const std::string& desc) {
  auto t = pl::load_synthetic_topology(desc);
  EXPECT_TRUE(t.ok()) << t.error();
  return t.take();
}

pl::Policy policy(const std::string& bind_to, const std::string& map_by = {},
                  bool oversubscribe = false, int ranks = 4, bool mpi = false) {
  auto p = pl::resolve_policy(
      {.bind_to = bind_to, .map_by = map_by, .oversubscribe = oversubscribe, .mpi = mpi}, ranks);
  EXPECT_TRUE(p.ok()) << p.error();
  return p.take();
}

// Each rank's CPU list.
std::vector<std::string> lists(const pl::Topology& t, const pl::Policy& p, int ranks,
                               const std::vector<int>& gpus = {}) {
  auto placed = pl::map_ranks(t, p, ranks, gpus);
  EXPECT_TRUE(placed.ok()) << placed.error();
  std::vector<std::string> out;
  if (!placed.ok()) return out;
  for (const auto& r : placed->ranks) out.push_back(pl::cpu_list(r.cpus));
  return out;
}

using Lists = std::vector<std::string>;

}  // namespace

TEST(PlacementTopology, SyntheticTopologyIsReadAndIsNotThisMachine) {
  const auto t = synthetic(kBig);
  EXPECT_EQ(t.packages, 2);
  EXPECT_EQ(t.numa.size(), 4u);
  EXPECT_EQ(t.cores.size(), 32u);
  EXPECT_EQ(t.pu_count(), 64);
  EXPECT_FALSE(t.this_system);
  EXPECT_EQ(t.cores[9].pus, (std::vector<int>{18, 19}));
  EXPECT_EQ(t.cores[9].numa, 1);
  EXPECT_EQ(t.cores[17].package, 1);
  EXPECT_NE(pl::summary(t).find("2 packages, 4 NUMA nodes, 32 cores, 64 hardware threads"),
            std::string::npos)
      << pl::summary(t);
}

TEST(PlacementTopology, ABadSyntheticDescriptionIsAnInputError) {
  auto t = pl::load_synthetic_topology("package:two");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.kind(), dlaunch::ErrorKind::kInput);
  EXPECT_NE(t.error().find("package:two"), std::string::npos);
}

TEST(PlacementTopology, ThisMachineIsThisSystem) {
  if (std::getenv("HWLOC_SYNTHETIC") != nullptr || std::getenv("HWLOC_XMLFILE") != nullptr)
    GTEST_SKIP() << "HWLOC_SYNTHETIC or HWLOC_XMLFILE is set";
  auto t = pl::load_topology();
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_TRUE(t->this_system);
  cpu_set_t allowed;
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  std::string cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus += " " + std::to_string(c);
  }
  // Exactly the CPUs this process may use, each once.
  std::vector<int> seen;
  for (const auto& core : t->cores) seen.insert(seen.end(), core.pus.begin(), core.pus.end());
  std::sort(seen.begin(), seen.end());
  std::string shown;
  for (int c : seen) shown += " " + std::to_string(c);
  EXPECT_EQ(shown, cpus) << "the topology: " << pl::summary(*t);
}

TEST(PlacementTopology, OnlyTheCpusTheKernelAllowsAreShown) {
  if (std::getenv("HWLOC_SYNTHETIC") != nullptr || std::getenv("HWLOC_XMLFILE") != nullptr)
    GTEST_SKIP() << "HWLOC_SYNTHETIC or HWLOC_XMLFILE is set";
  cpu_set_t before;
  ASSERT_EQ(::sched_getaffinity(0, sizeof before, &before), 0);
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &before)) last = c;
  }
  if (CPU_COUNT(&before) < 2) GTEST_SKIP() << "this process may use only one CPU";
  // As under `taskset -c LAST`: one CPU, whatever hwloc reads of the cgroup.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(last, &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  auto t = pl::load_topology();
  ASSERT_EQ(::sched_setaffinity(0, sizeof before, &before), 0);
  ASSERT_TRUE(t.ok()) << t.error();
  ASSERT_EQ(t->cores.size(), 1U) << pl::summary(*t);
  EXPECT_EQ(t->cores[0].pus, (std::vector<int>{last}));
  std::size_t in_numa = 0;
  for (const auto& n : t->numa) in_numa += n.pus.size();
  EXPECT_EQ(in_numa, 1U) << pl::summary(*t);
}

TEST(PlacementMapping, BindToCoreGivesEachRankTheNextCore) {
  const auto t = synthetic(kBig);
  EXPECT_EQ(lists(t, policy("core"), 4), (Lists{"0-1", "2-3", "4-5", "6-7"}));
  auto placed = pl::map_ranks(t, policy("core"), 2);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->ranks[1].cores, 1);
  EXPECT_EQ(placed->ranks[1].numa, (std::vector<int>{0}));
}

TEST(PlacementMapping, BindToHwthreadGivesEachRankOneThread) {
  const auto t = synthetic(kBig);
  EXPECT_EQ(lists(t, policy("hwthread"), 3), (Lists{"0", "1", "2"}));
}

TEST(PlacementMapping, BindToNumaSpreadsRanksOverTheNumaNodes) {
  const auto t = synthetic(kBig);
  EXPECT_EQ(lists(t, policy("numa"), 5), (Lists{"0-15", "16-31", "32-47", "48-63", "0-15"}));
}

TEST(PlacementMapping, BindToPackageSpreadsRanksOverThePackages) {
  const auto t = synthetic(kBig);
  EXPECT_EQ(lists(t, policy("package"), 4), (Lists{"0-31", "32-63", "0-31", "32-63"}));
}

TEST(PlacementMapping, MapByPackageBindToCoreAlternatesPackages) {
  const auto t = synthetic(kBig);
  EXPECT_EQ(lists(t, policy("core", "package"), 3), (Lists{"0-1", "32-33", "2-3"}));
}

TEST(PlacementMapping, MapByNumaWithPeGivesEachRankItsCoresInOneNumaNode) {
  const auto t = synthetic(kBig);
  const auto p = policy("", "numa:PE=4");
  EXPECT_EQ(p.bind_to, pl::BindTo::kCore);  // PE=n binds to the rank's n cores
  EXPECT_EQ(p.pe, 4);
  EXPECT_EQ(lists(t, p, 5), (Lists{"0-7", "16-23", "32-39", "48-55", "8-15"}));
  auto placed = pl::map_ranks(t, p, 1);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->ranks[0].cores, 4);
}

TEST(PlacementMapping, MapByAloneBindsToItsObject) {
  EXPECT_EQ(policy("", "numa").bind_to, pl::BindTo::kNuma);
  EXPECT_EQ(policy("", "slot").bind_to, pl::BindTo::kCore);
  EXPECT_EQ(policy("", "package").bind_to, pl::BindTo::kPackage);
  EXPECT_EQ(policy("numa").map_by, pl::MapBy::kNuma);
  EXPECT_EQ(policy("core").map_by, pl::MapBy::kSlot);
}

TEST(PlacementMapping, L3CacheGroupsTheCoresThatShareOne) {
  const auto t = synthetic("package:2 l3:2 core:4 pu:1");
  EXPECT_EQ(t.l3caches, 4);
  EXPECT_EQ(lists(t, policy("l3cache"), 4), (Lists{"0-3", "4-7", "8-11", "12-15"}));
  // Without L3 caches, l3cache means the package, and the note says so.
  const auto flat = synthetic("package:2 core:2 pu:1");
  auto placed = pl::map_ranks(flat, policy("l3cache"), 2);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(pl::cpu_list(placed->ranks[1].cpus), "2-3");
  EXPECT_NE(placed->note.find("no L3"), std::string::npos);
}

TEST(PlacementMapping, TheAcceptanceTopologyGivesTwoNumaSets) {
  const auto t = synthetic("package:2 numa:1 core:4 pu:1");
  EXPECT_EQ(lists(t, policy("numa"), 4), (Lists{"0-3", "4-7", "0-3", "4-7"}));
}

TEST(PlacementMapping, MoreRanksThanCoresIsAnErrorNamingTheOptions) {
  const auto t = synthetic(kBig);
  auto placed = pl::map_ranks(t, policy("core"), 33);
  ASSERT_FALSE(placed.ok());
  EXPECT_EQ(placed.kind(), dlaunch::ErrorKind::kInput);
  EXPECT_NE(placed.error().find("--bind-to core"), std::string::npos) << placed.error();
  EXPECT_NE(placed.error().find("--oversubscribe"), std::string::npos) << placed.error();
  EXPECT_NE(placed.error().find("32"), std::string::npos) << placed.error();
  EXPECT_TRUE(pl::map_ranks(t, policy("core"), 32).ok());
  EXPECT_TRUE(pl::map_ranks(t, policy("hwthread"), 64).ok());
  EXPECT_FALSE(pl::map_ranks(t, policy("hwthread"), 65).ok());
  // PE=4: 8 ranks fit in 32 cores, 9 do not.
  EXPECT_TRUE(pl::map_ranks(t, policy("core", "core:PE=4"), 8).ok());
  EXPECT_FALSE(pl::map_ranks(t, policy("core", "core:PE=4"), 9).ok());
  // Binding to bigger objects still counts cores: 4 ranks on 2 NUMA nodes is fine.
  EXPECT_TRUE(pl::map_ranks(t, policy("numa"), 32).ok());
  EXPECT_FALSE(pl::map_ranks(t, policy("numa"), 33).ok());
}

TEST(PlacementMapping, OversubscribeBindsRoundRobinFromTheFirstCore) {
  const auto t = synthetic("package:1 core:2 pu:1");
  auto placed = pl::map_ranks(t, policy("core", "", true), 5);
  ASSERT_TRUE(placed.ok()) << placed.error();
  Lists got;
  for (const auto& r : placed->ranks) got.push_back(pl::cpu_list(r.cpus));
  EXPECT_EQ(got, (Lists{"0", "1", "0", "1", "0"}));
  EXPECT_FALSE(placed->ranks[1].oversubscribed);
  EXPECT_TRUE(placed->ranks[2].oversubscribed);
  EXPECT_NE(placed->note.find("oversubscribed"), std::string::npos);
}

TEST(PlacementMapping, DefaultsFollowTorchrunAndUnderMpiMpirun) {
  EXPECT_EQ(policy("", "", false, 4).bind_to, pl::BindTo::kNone);
  EXPECT_EQ(policy("", "", false, 2, true).bind_to, pl::BindTo::kCore);
  const auto p = policy("", "", false, 3, true);
  EXPECT_EQ(p.bind_to, pl::BindTo::kPackage);
  EXPECT_TRUE(p.defaulted);
  // The default is dropped, not refused, on an oversubscribed node.
  const auto t = synthetic("package:1 core:2 pu:1");
  auto placed = pl::map_ranks(t, p, 3);
  ASSERT_TRUE(placed.ok()) << placed.error();
  EXPECT_TRUE(placed->ranks[0].cpus.empty());
  EXPECT_NE(placed->note.find("not bound"), std::string::npos) << placed->note;
  // Asked for, the same is an error.
  EXPECT_FALSE(pl::map_ranks(t, policy("package"), 3).ok());
}

TEST(PlacementMapping, BindToNoneBindsNothing) {
  const auto t = synthetic(kBig);
  EXPECT_EQ(lists(t, policy("none"), 2), (Lists{"", ""}));
}

TEST(PlacementPolicy, BadSpellingsNameTheOption) {
  struct Case {
    std::string bind, map, want;
  };
  for (const auto& c : std::vector<Case>{{"cores", "", "--bind-to 'cores'"},
                                         {"", "numa:PE=0", "--map-by 'numa:PE=0'"},
                                         {"", "numa:XY", "--map-by 'numa:XY'"},
                                         {"", "board", "--map-by 'board'"},
                                         {"gpu", "numa", "--map-by does not apply"}}) {
    auto p = pl::parse_policy({.bind_to = c.bind, .map_by = c.map});
    ASSERT_FALSE(p.ok()) << c.bind << " " << c.map;
    EXPECT_EQ(p.kind(), dlaunch::ErrorKind::kInput);
    EXPECT_NE(p.error().find(c.want), std::string::npos) << p.error();
  }
  EXPECT_EQ(pl::parse_policy({.bind_to = "socket"})->bind_to, pl::BindTo::kPackage);
}

TEST(PlacementFormat, CpuListAndPicture) {
  EXPECT_EQ(pl::cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(pl::cpu_list({}), "");
  const auto t = synthetic("package:2 core:3 pu:2");
  EXPECT_EQ(pl::cpu_picture(t, {0, 1}), "[BB/../..][../../..]");
  EXPECT_EQ(pl::cpu_picture(t, {7}), "[../../..][.B/../..]");
}

namespace {
// gpu_node.xml, a GPU node written by hand: 2 packages, one NUMA node each,
// 2 cores x 2 hardware threads each (siblings numbered like Linux: core 0 =
// PUs 0 and 4), a GPU (3D controller with a CUDA device) under each package
// and an InfiniBand NIC next to GPU 1. (No XML comment in the file: the
// portable agent's static hwloc reads XML with hwloc's own parser, which
// refuses comments; files lstopo writes have none.)
pl::Topology gpu_node() {
  auto t = pl::load_xml_topology(PLACEMENT_DATA_DIR "/gpu_node.xml");
  EXPECT_TRUE(t.ok()) << t.error();
  return t.take();
}
}  // namespace

TEST(PlacementGpu, TheXmlNodeShowsItsGpusAndNicWithTheirNumaNodes) {
  const auto t = gpu_node();
  EXPECT_FALSE(t.this_system);
  ASSERT_EQ(t.cores.size(), 4u);
  EXPECT_EQ(t.cores[0].pus, (std::vector<int>{0, 4}));
  ASSERT_EQ(t.gpus.size(), 2u);
  EXPECT_EQ(t.gpus[0].pci_bus_id, "0000:17:00.0");
  EXPECT_EQ(t.gpus[0].name, "cuda0");
  EXPECT_EQ(t.gpus[0].numa, 0);
  EXPECT_EQ(t.gpus[1].pci_bus_id, "0000:b3:00.0");
  EXPECT_EQ(t.gpus[1].numa, 1);
  ASSERT_EQ(t.nics.size(), 1u);
  EXPECT_EQ(t.nics[0].name, "ib0 mlx5_0");
  EXPECT_EQ(t.nics[0].numa, 1);
  EXPECT_NE(pl::summary(t).find("GPUs: cuda0 (0000:17:00.0) NUMA 0, cuda1 (0000:b3:00.0) NUMA 1"),
            std::string::npos)
      << pl::summary(t);
}

TEST(PlacementGpu, BindToGpuGivesTheCoresOfTheGpusNumaNode) {
  const auto t = gpu_node();
  EXPECT_EQ(lists(t, policy("gpu"), 2), (Lists{"0-1,4-5", "2-3,6-7"}));
  // CUDA_VISIBLE_DEVICES=1,0: local rank 0 drives GPU 1.
  const std::vector<int> gpus = {pl::visible_gpu_index("1,0", 0), pl::visible_gpu_index("1,0", 1)};
  EXPECT_EQ(gpus, (std::vector<int>{1, 0}));
  EXPECT_EQ(lists(t, policy("gpu"), 2, gpus), (Lists{"2-3,6-7", "0-1,4-5"}));
  EXPECT_EQ(pl::visible_gpu_index("GPU-4b5c1e2a", 0), -1);  // a UUID: unknown
  EXPECT_EQ(pl::visible_gpu_index("", 3), 3);
}

// torchrun's --numa-binding node, socket, core-complex and exclusive, as
// dlaunch's gpu, gpu-package, gpu-l3cache and gpu-exclusive: 2 packages x 2
// NUMA nodes x 2 L3 caches x 4 cores x 2 threads (NUMA node j: cores
// 8j..8j+7, PUs 16j..16j+15; its L3 caches hold 4 cores each), three GPUs
// near NUMA node 0 and one near node 3.
TEST(PlacementGpu, TorchrunsNumaBindingsBindEachRankNearItsGpu) {
  auto t = synthetic("package:2 numa:2 l3cache:2 core:4 pu:2");
  ASSERT_EQ(t.cores.size(), 32u);
  t.gpus = {{"cuda0", "0000:01:00.0", 0},
            {"cuda1", "0000:02:00.0", 0},
            {"cuda2", "0000:03:00.0", 0},
            {"cuda3", "0000:04:00.0", 3}};
  EXPECT_EQ(lists(t, policy("gpu"), 4), (Lists{"0-15", "0-15", "0-15", "48-63"}));
  EXPECT_EQ(lists(t, policy("gpu-package"), 4), (Lists{"0-31", "0-31", "0-31", "32-63"}));
  // The node's L3 caches dealt among its ranks (the third shares the first).
  EXPECT_EQ(lists(t, policy("gpu-l3cache"), 4), (Lists{"0-7", "8-15", "0-7", "48-55"}));
  // Cores of their own: 8 cores for 3 ranks, 2, 3 and 3.
  EXPECT_EQ(lists(t, policy("gpu-exclusive"), 4), (Lists{"0-3", "4-9", "10-15", "48-63"}));
  EXPECT_EQ(lists(t, policy("gpu-socket"), 1), (Lists{"0-31"}));
}

TEST(PlacementGpu, BindToCoreFollowsLinuxSiblingNumbering) {
  const auto t = gpu_node();
  auto placed = pl::map_ranks(t, policy("core"), 2);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(pl::cpu_list(placed->ranks[0].cpus), "0,4");
  EXPECT_EQ(pl::cpu_picture(t, placed->ranks[1].cpus), "[../BB][../..]");
}

TEST(PlacementGpu, NoGpuIsAnError) {
  auto placed = pl::map_ranks(synthetic(kBig), policy("gpu"), 1);
  ASSERT_FALSE(placed.ok());
  EXPECT_NE(placed.error().find("--bind-to gpu"), std::string::npos);
}

TEST(PlacementBinding, NothingIsBoundOnATopologyThatIsNotThisMachine) {
  const auto t = synthetic(kBig);
  auto placed = pl::map_ranks(t, policy("core"), 1);
  ASSERT_TRUE(placed.ok());
  dlaunch::SpawnOptions opts;
  EXPECT_FALSE(pl::apply(t, placed->ranks[0], opts));
  EXPECT_TRUE(opts.cpus.empty());
  EXPECT_TRUE(pl::binding_env(placed->ranks[0], false, {}, {}).empty());
}

TEST(PlacementBinding, OmpNumThreadsFollowsTheCoresUnlessSet) {
  pl::RankPlacement p{.cpus = {0, 1, 2, 3}, .numa = {0}, .cores = 2};
  EXPECT_EQ(pl::binding_env(p, true, {}, {"PATH=/bin"}),
            (std::vector<std::pair<std::string, std::string>>{{"OMP_NUM_THREADS", "2"}}));
  EXPECT_TRUE(pl::binding_env(p, true, {{"OMP_NUM_THREADS", "8"}}, {}).empty());
  EXPECT_TRUE(pl::binding_env(p, true, {}, {"OMP_NUM_THREADS=1"}).empty());
  // The head's default of 1 (torchrun's rule) gives way to the cores.
  EXPECT_EQ(pl::binding_env(p, true, {{"OMP_NUM_THREADS", "1"}}, {}, true).size(), 1u);
  EXPECT_TRUE(pl::binding_env(p, false, {{"OMP_NUM_THREADS", "1"}}, {}, true).empty());
}

// The child binds itself before exec: what it sees in /proc is the CPU set.
TEST(PlacementBinding, SpawnBindsTheChildBeforeExec) {
  if (std::getenv("HWLOC_SYNTHETIC") != nullptr || std::getenv("HWLOC_XMLFILE") != nullptr)
    GTEST_SKIP() << "HWLOC_SYNTHETIC or HWLOC_XMLFILE is set";
  auto t = pl::load_topology(false);
  ASSERT_TRUE(t.ok()) << t.error();
  auto placed = pl::map_ranks(*t, policy("core", "", true), static_cast<int>(t->cores.size()));
  ASSERT_TRUE(placed.ok()) << placed.error();
  const auto& last = placed->ranks.back();  // the last core: not where we run by default
  dlaunch::SpawnOptions opts;
  ASSERT_TRUE(pl::apply(*t, last, opts));
  auto [r, w] = dlaunch::make_pipe();
  opts.argv = {"/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"};
  opts.env = dlaunch::current_environment();
  opts.stdout_fd = w.get();
  auto pid = dlaunch::spawn(opts);
  ASSERT_TRUE(pid.ok()) << pid.error();
  w.reset();
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(r.get(), buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  int status = 0;
  ::waitpid(*pid, &status, 0);
  EXPECT_EQ(out, "Cpus_allowed_list:\t" + pl::cpu_list(last.cpus) + "\n");
}
