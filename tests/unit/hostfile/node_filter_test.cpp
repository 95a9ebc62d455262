#include <gtest/gtest.h>

#include "hostfile/hostfile.h"
#include "test_support.h"

namespace dlaunch {
namespace {

using testing::catch_input_error;

HostEntry host(const std::string& name, int slots, std::vector<int> gpus = {}) {
  HostEntry h;
  h.name = name;
  h.host = name;
  h.slots = slots;
  h.gpus = std::move(gpus);
  return h;
}

// node1: 4 slots without gpus; node2: 4 slots on gpus 4..7; node3: 2 slots.
Hostfile cluster() {
  Hostfile hf;
  hf.source = "h.yaml";
  hf.hosts = {host("node1", 4), host("node2", 4, {4, 5, 6, 7}), host("node3", 2)};
  return hf;
}

std::vector<std::string> names(const Hostfile& hf) {
  std::vector<std::string> out;
  for (const auto& h : hf.hosts) out.push_back(h.name);
  return out;
}

// Spelled out: GCC warns about designated initializers that skip members.
NodeFilter make_filter(std::string include, std::string exclude, int num_nodes = 0,
                       int nproc_per_node = 0) {
  NodeFilter f;
  f.include = std::move(include);
  f.exclude = std::move(exclude);
  f.num_nodes = num_nodes;
  f.nproc_per_node = nproc_per_node;
  return f;
}

NodeFilter including(std::string spec) { return make_filter(std::move(spec), ""); }
NodeFilter excluding(std::string spec) { return make_filter("", std::move(spec)); }

InputError filter_error(const NodeFilter& filter) {
  return catch_input_error([&] { apply_node_filter(cluster(), filter); });
}

TEST(NodeFilter, EmptyFilterKeepsEverything) {
  const Hostfile hf = apply_node_filter(cluster(), {});
  EXPECT_EQ(names(hf), (std::vector<std::string>{"node1", "node2", "node3"}));
  EXPECT_EQ(hf.hosts[0].slots, 4);
  EXPECT_TRUE(hf.hosts[0].gpus.empty());
}

TEST(NodeFilter, IncludeKeepsHostfileOrder) {
  const Hostfile hf = apply_node_filter(cluster(), including("node3@node1"));
  EXPECT_EQ(names(hf), (std::vector<std::string>{"node1", "node3"}));
  EXPECT_EQ(hf.hosts[0].slots, 4);
  EXPECT_TRUE(hf.hosts[0].gpus.empty());
}

TEST(NodeFilter, IncludeSlotsSelectGpus) {
  const Hostfile hf = apply_node_filter(cluster(), including("node2:3,1"));
  ASSERT_EQ(hf.hosts.size(), 1u);
  EXPECT_EQ(hf.hosts[0].slots, 2);
  EXPECT_EQ(hf.hosts[0].gpus, (std::vector<int>{5, 7}));
}

TEST(NodeFilter, IncludeSlotsWithoutGpusBecomeDeviceIds) {
  const Hostfile hf = apply_node_filter(cluster(), including("node1:0,2@node3"));
  ASSERT_EQ(hf.hosts.size(), 2u);
  EXPECT_EQ(hf.hosts[0].slots, 2);
  EXPECT_EQ(hf.hosts[0].gpus, (std::vector<int>{0, 2}));
  EXPECT_EQ(hf.hosts[1].slots, 2);
  EXPECT_TRUE(hf.hosts[1].gpus.empty());
}

TEST(NodeFilter, ExcludeRemovesWholeHosts) {
  const Hostfile hf = apply_node_filter(cluster(), excluding("node2"));
  EXPECT_EQ(names(hf), (std::vector<std::string>{"node1", "node3"}));
}

TEST(NodeFilter, ExcludeSlotsKeepsTheRest) {
  const Hostfile hf = apply_node_filter(cluster(), excluding("node1:0@node2:1,2@node3:0,1"));
  EXPECT_EQ(names(hf), (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(hf.hosts[0].slots, 3);
  EXPECT_EQ(hf.hosts[0].gpus, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(hf.hosts[1].slots, 2);
  EXPECT_EQ(hf.hosts[1].gpus, (std::vector<int>{4, 7}));
}

TEST(NodeFilter, UnknownHostSuggestsClosest) {
  const InputError e = filter_error(including("node1@nodee2"));
  EXPECT_STREQ(e.what(),
               "--include:1:7: host: unknown host 'nodee2' (hint: did you mean 'node2'?)");
}

TEST(NodeFilter, UnknownHostListsKnownNames) {
  const InputError e = filter_error(excluding("gpu-box:1"));
  EXPECT_EQ(e.pos().source, "--exclude");
  EXPECT_EQ(e.pos().column, 1);
  EXPECT_EQ(e.message(), "unknown host 'gpu-box'");
  EXPECT_EQ(e.hint(), "known hosts: node1, node2, node3");
}

TEST(NodeFilter, SlotIndexOutOfRangeIsError) {
  const InputError e = filter_error(including("node3:0,2"));
  EXPECT_EQ(e.pos().source, "--include");
  EXPECT_EQ(e.pos().column, 9);
  EXPECT_EQ(e.field(), "slots");
  EXPECT_EQ(e.message(), "slot index 2 is out of range for host 'node3'");
  EXPECT_EQ(e.hint(), "'node3' has 2 slot(s): indices 0..1");
}

TEST(NodeFilter, MalformedSlotListIsError) {
  EXPECT_EQ(filter_error(including("node1:")).field(), "slots");
  EXPECT_EQ(filter_error(including("node1:a")).pos().column, 7);
  EXPECT_NE(filter_error(including("node1:1,1")).message().find("listed twice"), std::string::npos);
  EXPECT_EQ(filter_error(including("node1@")).message(), "empty host entry");
  EXPECT_NE(filter_error(including("node1@node1:0")).message().find("listed twice"),
            std::string::npos);
}

TEST(NodeFilter, IncludeAndExcludeTogetherIsError) {
  const InputError e = filter_error(make_filter("node1", "node2"));
  EXPECT_EQ(e.message(), "--include and --exclude cannot be used together");
}

TEST(NodeFilter, NothingLeftIsError) {
  const InputError e = filter_error(excluding("node1@node2@node3:0,1"));
  EXPECT_STREQ(e.what(),
               "--exclude: hosts: no hosts left after filtering "
               "(hint: check --exclude against the hostfile)");
}

TEST(NodeFilter, NumNodesKeepsTheFirst) {
  const Hostfile hf = apply_node_filter(cluster(), make_filter("", "node1", 1));
  EXPECT_EQ(names(hf), (std::vector<std::string>{"node2"}));
}

TEST(NodeFilter, NumNodesBeyondAvailableIsError) {
  const InputError e = filter_error(make_filter("node1@node2", "", 3));
  EXPECT_EQ(e.pos().source, "--num-nodes");
  EXPECT_EQ(e.message(), "asked for 3 nodes but only 2 are available");
}

TEST(NodeFilter, NprocPerNodeSetsSlotsAndTruncatesGpus) {
  const Hostfile hf = apply_node_filter(cluster(), make_filter("node1@node2", "", 0, 2));
  EXPECT_EQ(hf.hosts[0].slots, 2);
  EXPECT_TRUE(hf.hosts[0].gpus.empty());
  EXPECT_EQ(hf.hosts[1].slots, 2);
  EXPECT_EQ(hf.hosts[1].gpus, (std::vector<int>{4, 5}));
}

TEST(NodeFilter, NprocPerNodeBeyondGpusIsError) {
  const InputError e = filter_error(make_filter("", "", 0, 5));
  EXPECT_EQ(e.pos().source, "--nproc-per-node");
  EXPECT_EQ(e.message(), "node 'node2' has 4 gpu(s) but 5 processes per node were asked for");
}

TEST(NodeFilter, NamesWithColonsMatchWholeFirst) {
  Hostfile hf;
  hf.hosts = {host("::1", 2)};
  EXPECT_EQ(apply_node_filter(hf, including("::1")).hosts[0].slots, 2);
  const Hostfile one = apply_node_filter(hf, including("::1:1"));
  EXPECT_EQ(one.hosts[0].gpus, (std::vector<int>{1}));
}

}  // namespace
}  // namespace dlaunch
