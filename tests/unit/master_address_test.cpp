// The choice of MASTER_ADDR among node 0's addresses (launcher/net): the
// order they are tried in, and which one wins given what each other node
// reached. No network.
#include "net/master_address.h"

#include <gtest/gtest.h>

#include "hostfile/hostfile.h"
#include "net/job_network.h"
#include "plan/plan.h"

namespace net = dlaunch::net;
namespace proto = dlaunch::proto;
using proto::AddressFamily;

namespace {

proto::Interface nic(const std::string& name, const std::string& address, bool up = true) {
  const bool v6 = address.find(':') != std::string::npos;
  return {.name = name,
          .address = address,
          .prefix_len = static_cast<std::uint8_t>(v6 ? 64 : 24),
          .family = v6 ? AddressFamily::kIpv6 : AddressFamily::kIpv4,
          .up = up,
          .loopback = name == "lo"};
}

std::vector<std::string> addresses(const std::vector<net::Candidate>& cs) {
  std::vector<std::string> out;
  out.reserve(cs.size());
  for (const auto& c : cs) out.push_back(c.address);
  return out;
}

// Node k reached exactly the addresses in `reached` (of the candidates).
net::NodeReach reach(std::size_t node, const std::vector<net::Candidate>& cs,
                     const std::vector<std::string>& reached) {
  net::NodeReach r{.node = node,
                   .label = "node " + std::to_string(node) + " (h" + std::to_string(node) + ")"};
  for (const auto& c : cs) {
    const bool ok = std::find(reached.begin(), reached.end(), c.address) != reached.end();
    r.outcomes.push_back({.address = c.address,
                          .reached = ok,
                          .error = ok ? "" : "Connection refused",
                          .interface = "eth0"});
  }
  return r;
}

}  // namespace

TEST(MasterCandidates, RealNetworksFirstThenBridgesLinkLocalAndLoopback) {
  const auto cs = net::master_candidates({
      nic("lo", "127.0.0.1"),
      nic("lo", "::1"),
      nic("docker0", "172.17.0.1"),
      nic("eth0", "fe80::1"),
      nic("eth0", "fd00::2"),
      nic("eth0", "192.0.2.2"),
      nic("virbr0", "192.168.122.1"),
      nic("eth1", "169.254.3.4"),
      nic("ib0", "10.1.0.5"),
  });
  // IPv4 before IPv6 within a tier; IPv6 link-local never (it needs a scope of
  // the dialling host's own).
  EXPECT_EQ(addresses(cs),
            (std::vector<std::string>{"192.0.2.2", "10.1.0.5", "fd00::2", "172.17.0.1",
                                      "192.168.122.1", "169.254.3.4", "127.0.0.1", "::1"}));
  EXPECT_EQ(cs[0].interface, "eth0");
  EXPECT_EQ(cs[0].tier, net::Tier::kPreferred);
  EXPECT_EQ(cs[2].family, AddressFamily::kIpv6);
  EXPECT_EQ(cs[3].tier, net::Tier::kContainer);
  EXPECT_EQ(cs[5].tier, net::Tier::kLinkLocal);
  EXPECT_EQ(cs[6].tier, net::Tier::kLoopback);
  EXPECT_STREQ(net::tier_note(cs[3].tier), "container bridge");
}

TEST(MasterCandidates, EveryKindOfContainerBridgeIsKnown) {
  for (const char* name : {"docker0", "docker_gwbridge", "virbr0", "cni0", "veth1a2b3c",
                           "br-0123456789ab", "flannel.1", "cali12345", "podman0"}) {
    EXPECT_TRUE(net::is_container_interface(name)) << name;
  }
  for (const char* name : {"eth0", "ens5", "enp1s0f0", "ib0", "bond0", "wlan0", "extra0"}) {
    EXPECT_FALSE(net::is_container_interface(name)) << name;
  }
}

TEST(MasterCandidates, DownInterfacesAndDuplicatesAreLeftOut) {
  const auto cs = net::master_candidates({nic("eth0", "10.0.0.2", false), nic("eth1", "10.1.0.2"),
                                          nic("eth2", "10.1.0.2"), nic("weird", "not-an-address")});
  EXPECT_EQ(addresses(cs), (std::vector<std::string>{"10.1.0.2"}));
  EXPECT_EQ(cs[0].interface, "eth1");
}

TEST(MasterCandidates, IPv6WorksWhereThereIsNoIPv4) {
  const auto cs = net::master_candidates({nic("lo", "::1"), nic("eth0", "2001:db8::7")});
  EXPECT_EQ(addresses(cs), (std::vector<std::string>{"2001:db8::7", "::1"}));
}

TEST(MasterCandidates, AtMostTheLimit) {
  std::vector<proto::Interface> many;
  many.reserve(100);
  for (int i = 0; i < 100; ++i)
    many.push_back(nic("eth" + std::to_string(i), "10.0.0." + std::to_string(i)));
  EXPECT_EQ(net::master_candidates(many).size(), proto::kMaxProbeAddresses);
  EXPECT_EQ(net::master_candidates(many, 3).size(), 3u);
}

TEST(ChooseMasterAddress, TheFirstCandidateEveryNodeReachedWins) {
  const auto cs = net::master_candidates(
      {nic("extra0", "10.250.1.1"), nic("eth0", "10.201.1.2"), nic("docker0", "172.17.0.1")});
  // extra0 comes first, but node 2 does not reach it; both reach eth0's.
  const auto c = net::choose_master_address(
      cs, {reach(1, cs, {"10.250.1.1", "10.201.1.2"}), reach(2, cs, {"10.201.1.2", "172.17.0.1"})},
      "node 0 (h0)", 29500);
  ASSERT_TRUE(c.chosen.has_value());
  EXPECT_EQ(cs[*c.chosen].address, "10.201.1.2");
  EXPECT_TRUE(c.problems.empty());
}

TEST(ChooseMasterAddress, ABridgeIsTakenOnlyWhenNothingElseWorks) {
  const auto cs = net::master_candidates({nic("docker0", "172.17.0.1"), nic("eth0", "10.201.1.2")});
  ASSERT_EQ(addresses(cs), (std::vector<std::string>{"10.201.1.2", "172.17.0.1"}));
  auto c = net::choose_master_address(cs, {reach(1, cs, {"10.201.1.2", "172.17.0.1"})}, "n0", 1);
  EXPECT_EQ(cs[*c.chosen].address, "10.201.1.2");
  c = net::choose_master_address(cs, {reach(1, cs, {"172.17.0.1"})}, "n0", 1);
  EXPECT_EQ(cs[*c.chosen].address, "172.17.0.1");
}

TEST(ChooseMasterAddress, ASingleNodeTakesItsFirstCandidate) {
  const auto cs = net::master_candidates({nic("lo", "127.0.0.1"), nic("eth0", "10.0.0.2")});
  const auto c = net::choose_master_address(cs, {}, "n0", 1);
  EXPECT_EQ(cs[*c.chosen].address, "10.0.0.2");
}

TEST(ChooseMasterAddress, ANodeThatReachesNothingIsNamedWithWhatItTried) {
  const auto cs = net::master_candidates({nic("eth0", "10.201.1.2"), nic("docker0", "172.17.0.1")});
  auto r2 = reach(2, cs, {});
  r2.outcomes[0].error = "timed out after 2.0 s";
  const auto c =
      net::choose_master_address(cs, {reach(1, cs, {"10.201.1.2"}), r2}, "node 0 (h0)", 29500);
  EXPECT_FALSE(c.chosen.has_value());
  EXPECT_EQ(c.reached_none, (std::vector<std::size_t>{1}));
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_EQ(c.problems[0],
            "node 2 (h2) cannot reach node 0 (h0) at any of its addresses (TCP port 29500): "
            "10.201.1.2 (timed out after 2.0 s), 172.17.0.1 (Connection refused)");
}

TEST(ChooseMasterAddress, EveryNodeThatReachesNothingIsNamed) {
  const auto cs = net::master_candidates({nic("eth0", "10.201.1.2")});
  const auto c = net::choose_master_address(
      cs, {reach(1, cs, {}), reach(2, cs, {"10.201.1.2"}), reach(3, cs, {})}, "n0", 7);
  EXPECT_EQ(c.reached_none, (std::vector<std::size_t>{0, 2}));
  ASSERT_EQ(c.problems.size(), 2u);
  EXPECT_NE(c.problems[0].find("node 1 (h1) cannot reach n0"), std::string::npos);
  EXPECT_NE(c.problems[1].find("node 3 (h3) cannot reach n0"), std::string::npos);
}

TEST(ChooseMasterAddress, NoAddressCommonToAllIsSaidSo) {
  const auto cs = net::master_candidates({nic("eth0", "10.0.0.2"), nic("ib0", "10.9.0.2")});
  const auto c = net::choose_master_address(
      cs, {reach(1, cs, {"10.0.0.2"}), reach(2, cs, {"10.9.0.2"})}, "node 0 (h0)", 5);
  EXPECT_FALSE(c.chosen.has_value());
  EXPECT_TRUE(c.reached_none.empty());
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_EQ(c.problems[0],
            "no address of node 0 (h0) is reachable from every node (TCP port 5): node 1 (h1) "
            "reached 10.0.0.2; node 2 (h2) reached 10.9.0.2");
}

TEST(ChooseMasterAddress, MissingOutcomesCountAsNotReached) {
  const auto cs = net::master_candidates({nic("eth0", "10.0.0.2"), nic("eth1", "10.0.1.2")});
  net::NodeReach short_answer{.node = 1, .label = "node 1 (h1)"};
  short_answer.outcomes.push_back({.address = "10.0.0.2", .error = "Connection refused"});
  const auto c = net::choose_master_address(cs, {short_answer}, "n0", 1);
  EXPECT_FALSE(c.chosen.has_value());
  EXPECT_NE(c.problems[0].find("10.0.1.2 (no answer)"), std::string::npos) << c.problems[0];
}

TEST(ChooseMasterAddress, NoCandidatesAtAll) {
  const auto c = net::choose_master_address({}, {}, "node 0 (h0)", 1);
  EXPECT_FALSE(c.chosen.has_value());
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("node 0 (h0) reported no address"), std::string::npos);
}

TEST(IsIpAddress, NumericAddressesOnly) {
  EXPECT_TRUE(net::is_ip_address("10.0.0.1"));
  EXPECT_TRUE(net::is_ip_address("fd00::2"));
  EXPECT_FALSE(net::is_ip_address("node0"));
  EXPECT_FALSE(net::is_ip_address(""));
  EXPECT_FALSE(net::is_ip_address("10.0.0.256"));
}

namespace {

dlaunch::JobPlan plan_of(const std::string& hosts) {
  dlaunch::PlanOptions po;
  po.job_id = "t";
  po.command = {"prog"};
  return dlaunch::make_plan(dlaunch::parse_hosts_argument(hosts), po);
}

}  // namespace

TEST(JobNetwork, AProbeOnlyForJobsThatSpanMachinesWithoutAGivenAddress) {
  auto remote = plan_of("h0:1,h1:1");
  EXPECT_FALSE(net::all_local(remote));
  EXPECT_TRUE(net::probe_wanted(remote, false, false));
  EXPECT_FALSE(net::probe_wanted(remote, true, false)) << "--master-addr wins";
  EXPECT_EQ(net::dry_run_master_addr(remote, false),
            "<chosen at start: node 0's first address every node reaches>");
  EXPECT_EQ(net::dry_run_master_addr(remote, true), remote.master_addr);

  auto local = plan_of("localhost:2");
  EXPECT_TRUE(net::all_local(local));
  EXPECT_FALSE(net::probe_wanted(local, false, false));
  EXPECT_EQ(net::dry_run_master_addr(local, false), "127.0.0.1");

  auto one = plan_of("h0:2");
  EXPECT_FALSE(net::probe_wanted(one, false, false)) << "nobody else to test it";
}

TEST(JobNetwork, NodeZerosAddressInTheHostfileWins) {
  auto plan = plan_of("h0:1,h1:1");
  plan.nodes[0].host.address = "10.0.0.7";
  plan.master_addr = "10.0.0.7";
  EXPECT_EQ(net::given_master_addr(plan, false), std::optional<std::string>("10.0.0.7"));
  EXPECT_FALSE(net::probe_wanted(plan, false, false));
  // --check tests it all the same, to report.
  EXPECT_TRUE(net::probe_wanted(plan, false, true));
  plan.master_addr = "node0-ib";
  EXPECT_FALSE(net::probe_wanted(plan, true, true)) << "a name is not tested";
}

TEST(LoopbackAddress, OnlyNumericLoopbackAddressesAre) {
  EXPECT_TRUE(net::is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(net::is_loopback_address("127.3.2.1"));
  EXPECT_TRUE(net::is_loopback_address("::1"));
  EXPECT_FALSE(net::is_loopback_address("10.201.1.2"));
  EXPECT_FALSE(net::is_loopback_address("fe80::1"));
  EXPECT_FALSE(net::is_loopback_address("::ffff:10.0.0.1"));
  // A name says nothing until resolved.
  EXPECT_FALSE(net::is_loopback_address("localhost"));
  EXPECT_FALSE(net::is_loopback_address(""));
}
