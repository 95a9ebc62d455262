#include "plan/node_pool.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace dlaunch;

namespace {

HostEntry node(const std::string& name, const std::string& host, Transport t = Transport::kSsh) {
  HostEntry h;
  h.name = name;
  h.host = host;
  h.slots = 2;
  h.transport = t;
  return h;
}

Hostfile hosts(std::vector<HostEntry> entries) {
  Hostfile hf;
  hf.hosts = std::move(entries);
  return hf;
}

std::vector<std::string> names(const Hostfile& hf) {
  std::vector<std::string> out;
  for (const auto& h : hf.hosts) out.push_back(h.name);
  return out;
}

using Names = std::vector<std::string>;

}  // namespace

TEST(NodePool, WithoutMinNodesOrSparesNothingIsDropped) {
  NodePool m(hosts({node("a", "a"), node("b", "b")}), {});
  EXPECT_FALSE(m.elastic());
  const auto c = m.node_lost(1, "gone");
  EXPECT_TRUE(c.restart);
  EXPECT_EQ(names(m.active()), (Names{"a", "b"}));
  EXPECT_TRUE(m.excluded().empty());
}

TEST(NodePool, SparesWaitAtTheEndAndTakeTheLostNodesPlace) {
  NodePool m(hosts({node("a", "a"), node("b", "b"), node("c", "c"), node("d", "d")}),
             {.min_nodes = 0, .spares = 2});
  EXPECT_EQ(names(m.active()), (Names{"a", "b"}));
  EXPECT_EQ(m.spares_left(), 2);
  auto c = m.node_lost(0, "lost contact");
  EXPECT_TRUE(c.restart);
  // The spare is node 0 now: node order (and so rank order) is kept.
  EXPECT_EQ(names(m.active()), (Names{"c", "b"}));
  EXPECT_NE(c.message.find("spare c"), std::string::npos) << c.message;
  c = m.node_lost(1, "no heartbeat");
  EXPECT_EQ(names(m.active()), (Names{"c", "d"}));
  EXPECT_EQ(m.spares_left(), 0);
  // Spares only, no --min-nodes: the job never shrinks below what it started on.
  c = m.node_lost(0, "lost again");
  EXPECT_FALSE(c.restart);
  EXPECT_NE(c.message.find("fewer than --min-nodes 2"), std::string::npos) << c.message;
  EXPECT_EQ(m.excluded(), (Names{"a: lost contact", "b: no heartbeat", "c: lost again"}));
}

TEST(NodePool, MinNodesShrinksTheJobUntilTooFewRemain) {
  NodePool m(hosts({node("a", "a"), node("b", "b"), node("c", "c")}),
             {.min_nodes = 2, .spares = 0});
  EXPECT_TRUE(m.elastic());
  auto c = m.node_lost(1, "gone");
  EXPECT_TRUE(c.restart) << c.message;
  EXPECT_EQ(names(m.active()), (Names{"a", "c"}));
  c = m.node_lost(0, "gone");
  EXPECT_FALSE(c.restart);
  EXPECT_EQ(names(m.active()), (Names{"c"}));
}

TEST(NodePool, ALostHostTakesAllItsLogicalNodesButLocalNodesGoOneByOne) {
  NodePool ssh(
      hosts({node("a0", "a"), node("a1", "a"), node("b", "b"), node("a2", "a"), node("s", "s")}),
      {.min_nodes = 1, .spares = 2});
  // a2 is a spare on the lost host: it goes too; s replaces a0, a1 is dropped.
  auto c = ssh.node_lost(1, "host unreachable");
  EXPECT_TRUE(c.restart);
  EXPECT_EQ(names(ssh.active()), (Names{"s", "b"}));
  EXPECT_EQ(ssh.spares_left(), 0);
  EXPECT_EQ(ssh.excluded().size(), 2u);

  NodePool local(
      hosts({node("n0", "localhost", Transport::kLocal), node("n1", "localhost", Transport::kLocal),
             node("n2", "localhost", Transport::kLocal)}),
      {.min_nodes = 1, .spares = 1});
  c = local.node_lost(0, "agent killed");
  EXPECT_EQ(names(local.active()), (Names{"n2", "n1"}));
}

TEST(NodePool, NumbersThatDoNotFitTheHostfileAreRefused) {
  const auto two = hosts({node("a", "a"), node("b", "b")});
  EXPECT_THROW(NodePool(two, {.min_nodes = 0, .spares = 2}), InputError);
  EXPECT_THROW(NodePool(two, {.min_nodes = 2, .spares = 1}), InputError);
  EXPECT_THROW(NodePool(two, {.min_nodes = 3, .spares = 0}), InputError);
  try {
    NodePool(two, {.min_nodes = 2, .spares = 1});
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--min-nodes"), std::string::npos) << e.what();
  }
}

// --preflight: a spare that failed its check is no spare; the next lost node
// takes the spare after it, and the summary names both.
TEST(NodePool, ASpareThatFailedItsCheckIsNoSpare) {
  NodePool m(hosts({node("a", "a"), node("b", "b"), node("s1", "s1"), node("s2", "s2")}),
             {.spares = 2});
  EXPECT_FALSE(m.drop_spare("a", "x"));  // running, not a spare
  EXPECT_FALSE(m.drop_spare("nope", "x"));
  EXPECT_TRUE(m.drop_spare("s1", "preflight: disk full"));
  EXPECT_EQ(m.spares_left(), 1);
  EXPECT_FALSE(m.drop_spare("s1", "again"));
  const auto c = m.node_lost(0, "preflight: GPU lost");
  EXPECT_TRUE(c.restart);
  EXPECT_EQ(names(m.active()), (Names{"s2", "b"}));  // in its place
  EXPECT_EQ(m.excluded(), (Names{"s1 (spare): preflight: disk full", "a: preflight: GPU lost"}));
}
