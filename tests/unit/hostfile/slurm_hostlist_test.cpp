// Slurm hostlists (SLURM_JOB_NODELIST), task layouts (SLURM_TASKS_PER_NODE)
// and the Hostfile dlaunch builds from an allocation's environment.
#include <gtest/gtest.h>

#include "hostfile/slurm.h"
#include "test_support.h"

namespace dlaunch {
namespace {

using testing::catch_input_error;
using V = std::vector<std::string>;

V expand(const std::string& text) { return expand_hostlist(text, "SLURM_JOB_NODELIST"); }

InputError expand_error(const std::string& text) {
  return catch_input_error([&] { expand(text); });
}

TEST(SlurmHostlist, PlainNamesAndCommas) {
  EXPECT_EQ(expand("vm"), V{"vm"});
  EXPECT_EQ(expand("a,b.example.com,c_1"), (V{"a", "b.example.com", "c_1"}));
}

TEST(SlurmHostlist, RangesKeepZeroPadding) {
  EXPECT_EQ(expand("node[01-04,07]"), (V{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand("n[8-11]"), (V{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand("n[098-101]"), (V{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand("n[007]"), V{"n007"});
}

TEST(SlurmHostlist, SeveralGroupsAtTopLevel) {
  EXPECT_EQ(expand("node[01-02,07],gpu-a[1-2]"),
            (V{"node01", "node02", "node07", "gpu-a1", "gpu-a2"}));
  EXPECT_EQ(expand("login,c[1-2],gpu[10-11]x"), (V{"login", "c1", "c2", "gpu10x", "gpu11x"}));
}

TEST(SlurmHostlist, SeveralBracketsInOneNameGiveEveryCombination) {
  EXPECT_EQ(expand("r[1-2]n[01-02]"), (V{"r1n01", "r1n02", "r2n01", "r2n02"}));
  EXPECT_EQ(expand("[1-2]-x"), (V{"1-x", "2-x"}));
}

TEST(SlurmHostlist, ErrorsNameTheVariableAndThePosition) {
  struct Case {
    std::string text;
    int column;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"node[01-04", 5, "unclosed '['"},
      {"node01-04]", 10, "']' without '['"},
      {"node[01-[2]]", 9, "'[' inside brackets"},
      {"node[]", 5, "empty brackets"},
      {"node[1,]", 8, "empty range after ','"},
      {"node[,1]", 6, "empty range"},
      {"node[a-3]", 6, "expected a number, got 'a'"},
      {"node[1-]", 8, "expected a number after '-', got ']'"},
      {"node[5-3]", 6, "decreasing range 5-3"},
      {"node[1-3x]", 9, "unexpected 'x' in a range"},
      {"a,,b", 3, "empty host name after ','"},
      {",a", 1, "empty host name before ','"},
      {"a,", 2, "trailing ','"},
      {"a b", 2, "' ' is not allowed in a host name"},
      {"n[1-2],n1", 8, "host 'n1' listed twice"},
      {"", 1, "empty host list"},
      {"n[1-2000000]", 3, "range too large"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    const InputError e = expand_error(c.text);
    EXPECT_EQ(e.pos().source, "SLURM_JOB_NODELIST");
    EXPECT_EQ(e.pos().line, 1);
    EXPECT_EQ(e.pos().column, c.column);
    EXPECT_NE(e.message().find(c.message), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("'" + c.text + "'"), std::string::npos) << e.what();
    EXPECT_EQ(
        std::string(e.what()).rfind("SLURM_JOB_NODELIST:1:" + std::to_string(c.column) + ": ", 0),
        0u)
        << e.what();
  }
}

TEST(SlurmTasksPerNode, CountsAndRepeats) {
  EXPECT_EQ(parse_tasks_per_node("2", "T"), (std::vector<int>{2}));
  EXPECT_EQ(parse_tasks_per_node("2(x3),1", "T"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(parse_tasks_per_node("4,1(x2),8", "T"), (std::vector<int>{4, 1, 1, 8}));
}

TEST(SlurmTasksPerNode, Errors) {
  struct Case {
    std::string text;
    int column;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"2(3)", 3, "expected '(xN)'"}, {"2(x)", 4, "expected a repeat count"},
      {"2(x3", 5, "expected ')'"},    {"2,", 3, "expected a task count at the end"},
      {"0", 1, "task count must be"}, {"2;1", 2, "unexpected ';'"},
      {"", 1, "empty task list"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    const InputError e =
        catch_input_error([&] { parse_tasks_per_node(c.text, "SLURM_TASKS_PER_NODE"); });
    EXPECT_EQ(e.pos().source, "SLURM_TASKS_PER_NODE");
    EXPECT_EQ(e.pos().column, c.column);
    EXPECT_NE(e.message().find(c.message), std::string::npos) << e.what();
  }
}

TEST(SlurmGpuCount, Forms) {
  EXPECT_EQ(parse_gpu_count("4", "G"), 4);
  EXPECT_EQ(parse_gpu_count("a100:4", "G"), 4);
  EXPECT_EQ(parse_gpu_count("gpu:a100:2,gpu:v100:1", "G"), 3);
  const InputError e = catch_input_error([] { parse_gpu_count("a100:x", "SLURM_GPUS_PER_NODE"); });
  EXPECT_EQ(e.pos().column, 6);
}

std::vector<int> hostlist_slots(const Hostfile& hf) {
  std::vector<int> s;
  for (const auto& h : hf.hosts) s.push_back(h.slots);
  return s;
}

TEST(SlurmAllocation, NoneOutsideAnAllocation) {
  EXPECT_FALSE(slurm_allocation_hostfile({"PATH=/bin", "SLURM_JOB_NODELIST="}, "vm"));
  EXPECT_FALSE(slurm_allocation_hostfile({}, "vm"));
}

TEST(SlurmAllocation, NodesInOrderAndTransports) {
  std::string from;
  const auto hf = slurm_allocation_hostfile(
      {"SLURM_JOB_NODELIST=node[01-02],gpu-a1", "SLURM_JOB_ID=7"}, "node02.cluster", &from);
  ASSERT_TRUE(hf);
  EXPECT_EQ(hf->source, "SLURM_JOB_NODELIST");
  ASSERT_EQ(hf->hosts.size(), 3u);
  EXPECT_EQ(hf->hosts[0].name, "node01");
  EXPECT_EQ(hf->hosts[0].transport, Transport::kSlurm);
  EXPECT_EQ(hf->hosts[1].name, "node02");
  EXPECT_EQ(hf->hosts[1].transport, Transport::kLocal) << "the node dlaunch runs on";
  EXPECT_EQ(hf->hosts[1].address, "node02") << "others must reach it by name, not 127.0.0.1";
  EXPECT_EQ(hf->hosts[2].transport, Transport::kSlurm);
  EXPECT_TRUE(hf->hosts[0].gpus.empty());
  EXPECT_EQ(hostlist_slots(*hf), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(from, "default (1 per node)");
}

TEST(SlurmAllocation, OlderNodelistVariable) {
  const auto hf = slurm_allocation_hostfile({"SLURM_NODELIST=a,b"}, "x");
  ASSERT_TRUE(hf);
  EXPECT_EQ(hf->source, "SLURM_NODELIST");
  EXPECT_EQ(hf->hosts.size(), 2u);
}

TEST(SlurmAllocation, SlotsPrecedence) {
  const V base = {"SLURM_JOB_NODELIST=n[1-3]"};
  auto slots = [&](V extra, std::string* from = nullptr) {
    V env = base;
    env.insert(env.end(), extra.begin(), extra.end());
    return hostlist_slots(*slurm_allocation_hostfile(env, "elsewhere", from));
  };
  std::string from;
  // 1. --ntasks-per-node wins over everything.
  EXPECT_EQ(slots({"SLURM_NTASKS_PER_NODE=4", "SLURM_NTASKS=12", "SLURM_TASKS_PER_NODE=4(x3)",
                   "SLURM_GPUS_ON_NODE=8"},
                  &from),
            (std::vector<int>{4, 4, 4}));
  EXPECT_EQ(from, "SLURM_NTASKS_PER_NODE");
  // 2. An explicit task count: Slurm's layout, node by node.
  EXPECT_EQ(
      slots({"SLURM_NTASKS=5", "SLURM_TASKS_PER_NODE=2(x2),1", "SLURM_GPUS_ON_NODE=8"}, &from),
      (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(from, "SLURM_TASKS_PER_NODE");
  // 3. No task count asked for: the GPUs per node.
  EXPECT_EQ(slots({"SLURM_TASKS_PER_NODE=1(x3)", "SLURM_GPUS_ON_NODE=4"}, &from),
            (std::vector<int>{4, 4, 4}));
  EXPECT_EQ(from, "SLURM_GPUS_ON_NODE");
  EXPECT_EQ(slots({"SLURM_TASKS_PER_NODE=1(x3)", "SLURM_GPUS_PER_NODE=a100:2"}, &from),
            (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(from, "SLURM_GPUS_PER_NODE");
  EXPECT_EQ(slots({"SLURM_GPUS_ON_NODE=0", "SLURM_GPUS_PER_NODE=3"}), (std::vector<int>{3, 3, 3}));
  // 4. Slurm's default layout.
  EXPECT_EQ(slots({"SLURM_TASKS_PER_NODE=2,1(x2)"}, &from), (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(from, "SLURM_TASKS_PER_NODE");
}

TEST(SlurmAllocation, ErrorsNameTheVariable) {
  InputError e = catch_input_error([] {
    slurm_allocation_hostfile({"SLURM_JOB_NODELIST=n[1-3", "SLURM_JOB_ID=1"}, "x");
  });
  EXPECT_EQ(e.pos().source, "SLURM_JOB_NODELIST");
  EXPECT_EQ(e.pos().column, 2);
  e = catch_input_error([] {
    slurm_allocation_hostfile({"SLURM_JOB_NODELIST=n[1-3]", "SLURM_TASKS_PER_NODE=2(x2)"}, "x");
  });
  EXPECT_EQ(e.pos().source, "SLURM_TASKS_PER_NODE");
  EXPECT_NE(e.message().find("describes 2 node(s), but SLURM_JOB_NODELIST lists 3"),
            std::string::npos)
      << e.what();
  e = catch_input_error([] {
    slurm_allocation_hostfile({"SLURM_JOB_NODELIST=n1", "SLURM_NTASKS_PER_NODE=x"}, "x");
  });
  EXPECT_EQ(e.pos().source, "SLURM_NTASKS_PER_NODE");
}

}  // namespace
}  // namespace dlaunch
