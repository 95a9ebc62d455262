#include "plan/plan.h"

#include <gtest/gtest.h>

#include "env_list_support.h"

using namespace dlaunch;

namespace {

HostEntry host(const std::string& name, int slots, Transport t = Transport::kLocal) {
  HostEntry h;
  h.name = h.host = name;
  h.slots = slots;
  h.transport = t;
  return h;
}

using dltest::get;
using dltest::rank_var;

}  // namespace

TEST(Plan, UnevenSlotsGetConsecutiveRanksInNodeOrder) {
  Hostfile hf;
  hf.hosts = {host("a", 3), host("b", 1), host("c", 2)};
  auto plan = make_plan(hf, {.job_id = "j", .command = {"x"}});
  ASSERT_EQ(plan.nodes.size(), 3u);
  EXPECT_EQ(plan.world_size, 6);
  std::vector<std::pair<int, int>> expect = {{0, 0}, {1, 1}, {2, 2}, {3, 0}, {4, 0}, {5, 1}};
  std::vector<std::pair<int, int>> got;
  for (const auto& n : plan.nodes) {
    for (const auto& r : n.ranks) got.emplace_back(r.rank, r.local_rank);
  }
  EXPECT_EQ(got, expect);
  EXPECT_EQ(rank_var(plan, 2, 1, "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(rank_var(plan, 2, 1, "GROUP_RANK"), "2");
  EXPECT_EQ(rank_var(plan, 2, 1, "NNODES"), "3");
}

TEST(Plan, NpTakesTheFirstSlotsAndDropsEmptyNodes) {
  Hostfile hf;
  hf.hosts = {host("a", 2), host("b", 2), host("c", 2)};
  auto plan = make_plan(hf, {.np = 3, .job_id = "j", .command = {"x"}});
  ASSERT_EQ(plan.nodes.size(), 2u);
  EXPECT_EQ(plan.world_size, 3);
  EXPECT_EQ(plan.nodes[1].ranks.size(), 1u);
  EXPECT_EQ(rank_var(plan, 1, 0, "WORLD_SIZE"), "3");
  EXPECT_EQ(rank_var(plan, 1, 0, "NNODES"), "2");
}

TEST(Plan, NpBeyondTheSlotsIsAnInputError) {
  Hostfile hf;
  hf.source = "hosts.yaml";
  hf.hosts = {host("a", 2)};
  try {
    make_plan(hf, {.np = 5, .job_id = "j", .command = {"x"}});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("5 ranks requested but hosts.yaml has only 2 slots"),
              std::string::npos)
        << e.what();
  }
}

TEST(Plan, TorchrunVariablesAreAllSet) {
  Hostfile hf;
  hf.hosts = {host("a", 1)};
  auto plan = make_plan(hf, {.job_id = "job7", .command = {"x"}});
  const auto env = dlaunch::rank_environment(plan, plan.nodes[0], plan.nodes[0].ranks[0]);
  for (const char* name :
       {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "NODE_RANK", "NNODES", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "DLAUNCH_JOB_ID"}) {
    EXPECT_NE(get(env, name), "<unset>") << name;
  }
  EXPECT_EQ(get(env, "TORCHELASTIC_RUN_ID"), "job7");
  EXPECT_EQ(plan.master_addr, "127.0.0.1");
}

TEST(Plan, GpusBecomeCudaVisibleDevicesAndOmpThreadsDefaultsToOne) {
  Hostfile hf;
  auto h = host("a", 2);
  h.gpus = {4, 6};
  hf.hosts = {h};
  auto plan = make_plan(hf, {.job_id = "j", .command = {"x"}});
  EXPECT_EQ(get(plan.nodes[0].env, "CUDA_VISIBLE_DEVICES"), "4,6");
  EXPECT_EQ(get(plan.nodes[0].env, "OMP_NUM_THREADS"), "1");
  auto chosen = make_plan(hf, {.job_id = "j", .command = {"x"}, .head_env = {"OMP_NUM_THREADS=8"}});
  EXPECT_EQ(get(chosen.nodes[0].env, "OMP_NUM_THREADS"),
            "<unset>");  // the head's value is inherited
  // The default is marked as such: a bound rank gets its cores instead (docs/placement.md).
  EXPECT_TRUE(plan.nodes[0].omp_default);
  EXPECT_FALSE(chosen.nodes[0].omp_default);
}

TEST(Plan, TorchrunsWorkerVariablesUnlessTheUserChose) {
  // local_elastic_agent.py's: the workers host their own TCPStore at
  // MASTER_PORT, and NCCL errors abort a rank (issue 29).
  Hostfile hf;
  hf.hosts = {host("a", 1), host("remote", 1, Transport::kSsh)};
  auto plan = make_plan(hf, {.job_id = "j", .command = {"x"}});
  for (const auto& n : plan.nodes) {
    EXPECT_EQ(get(n.env, "TORCHELASTIC_USE_AGENT_STORE"), "False");
    EXPECT_EQ(get(n.env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
  }
  // The head's value reaches every node as it is (inherited or forwarded);
  // a hostfile's value wins on its node.
  hf.hosts[1].env = {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}};
  auto chosen = make_plan(
      hf, {.job_id = "j", .command = {"x"}, .head_env = {"TORCHELASTIC_USE_AGENT_STORE=True"}});
  EXPECT_EQ(get(chosen.nodes[0].env, "TORCHELASTIC_USE_AGENT_STORE"), "<unset>");
  EXPECT_EQ(get(chosen.nodes[1].env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "0");
  EXPECT_EQ(get(chosen.nodes[0].env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
}

TEST(Plan, HostEnvOverridesHostfileEnvInOrder) {
  Hostfile hf;
  auto h = host("a", 1);
  h.env = {{"X", "host"}};
  hf.hosts = {h};
  hf.env = {{"X", "file"}, {"Y", "file"}};
  auto plan = make_plan(hf, {.job_id = "j", .command = {"x"}});
  EXPECT_EQ(get(plan.nodes[0].env, "X"), "host");
  EXPECT_EQ(get(plan.nodes[0].env, "Y"), "file");
}

TEST(Plan, ForwardedVariablesGoToSshNodesOnly) {
  Hostfile hf;
  hf.hosts = {host("a", 1), host("remote", 1, Transport::kSsh)};
  auto plan = make_plan(hf, {.job_id = "j",
                             .command = {"x"},
                             .head_env = {"NCCL_DEBUG=INFO", "HOME=/root", "PATH=/opt/bin",
                                          "CUDA_VISIBLE_DEVICES=0"}});
  // What a node's ranks get from the plan: the job's forwarded variables
  // (SSH nodes), then the node's own.
  const auto sent = [&](std::size_t i) {
    EnvList env = plan.nodes[i].forwarded ? plan.forwarded : EnvList{};
    env.insert(env.end(), plan.nodes[i].env.begin(), plan.nodes[i].env.end());
    return env;
  };
  EXPECT_EQ(get(sent(0), "NCCL_DEBUG"), "<unset>");  // local nodes inherit everything
  EXPECT_EQ(get(sent(1), "NCCL_DEBUG"), "INFO");
  EXPECT_EQ(get(sent(1), "PATH"), "/opt/bin");
  EXPECT_EQ(get(sent(1), "HOME"), "<unset>");
  EXPECT_EQ(get(sent(1), "CUDA_VISIBLE_DEVICES"), "<unset>");
}

TEST(Plan, ForwardedVariablesGoToSgeAndLsfNodesWhoseTasksStartInTheJobsEnvironment) {
  // qrsh -inherit and blaunch start the agent in the job's environment, not
  // dlaunch's; srun and flux run pass dlaunch's own.
  Hostfile hf;
  hf.hosts = {host("s", 1, Transport::kSge), host("l", 1, Transport::kLsf),
              host("u", 1, Transport::kSlurm), host("f", 1, Transport::kFlux)};
  auto plan = make_plan(hf, {.job_id = "j", .command = {"x"}, .head_env = {"NCCL_DEBUG=INFO"}});
  EXPECT_EQ(get(plan.forwarded, "NCCL_DEBUG"), "INFO");
  EXPECT_TRUE(plan.nodes[0].forwarded);
  EXPECT_TRUE(plan.nodes[1].forwarded);
  EXPECT_FALSE(plan.nodes[2].forwarded);
  EXPECT_FALSE(plan.nodes[3].forwarded);
}

TEST(Plan, MasterAddrComesFromNodeZero) {
  auto a = host("node-a", 1, Transport::kSsh);
  EXPECT_EQ(default_master_addr(a), "node-a");
  a.address = "10.1.2.3";
  EXPECT_EQ(default_master_addr(a), "10.1.2.3");
  EXPECT_EQ(default_master_addr(host("localhost", 1)), "127.0.0.1");
  EXPECT_EQ(default_master_addr(host("127.0.0.3", 1)), "127.0.0.3");
  Hostfile hf;
  hf.hosts = {host("a", 1)};
  EXPECT_EQ(make_plan(hf, {.job_id = "j", .master_addr = "10.9.9.9", .command = {"x"}}).master_addr,
            "10.9.9.9");
}

TEST(Plan, LocalHostfileForNp) {
  auto hf = local_hostfile(4);
  ASSERT_EQ(hf.hosts.size(), 1u);
  EXPECT_EQ(hf.hosts[0].slots, 4);
  EXPECT_EQ(hf.hosts[0].transport, Transport::kLocal);
}

TEST(Plan, CollectiveTimeoutReachesEveryNodeOnlyWhenGiven) {
  Hostfile hf;
  hf.hosts = {host("a", 1), host("b", 1)};
  auto unset = make_plan(hf, {.job_id = "j", .command = {"x"}});
  EXPECT_EQ(get(unset.nodes[1].env, "DLAUNCH_COLLECTIVE_TIMEOUT"), "<unset>");
  PlanOptions po{.job_id = "j", .command = {"x"}};
  po.collective_timeout_s = 2.5;
  auto plan = make_plan(hf, po);
  for (const auto& node : plan.nodes) EXPECT_EQ(get(node.env, "DLAUNCH_COLLECTIVE_TIMEOUT"), "2.5");
  po.collective_timeout_s = 0;
  EXPECT_EQ(get(make_plan(hf, po).nodes[0].env, "DLAUNCH_COLLECTIVE_TIMEOUT"), "0");
}
