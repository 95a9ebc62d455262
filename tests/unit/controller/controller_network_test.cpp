// Choosing the job's address at start: node 0's addresses are tested from the
// other nodes (Probe), the first every node reached becomes MASTER_ADDR and
// the store's address, and a node that reaches none fails the job before any
// worker starts. A given address, or a job on this machine alone, is not
// tested. No processes, no network.
#include "controller_test_support.h"

using namespace dltest;
using std::chrono::milliseconds;
namespace proto = dlaunch::proto;

namespace {

std::vector<proto::Interface> node0_interfaces() {
  return {{.name = "lo", .address = "127.0.0.1", .prefix_len = 8, .up = true, .loopback = true},
          {.name = "docker0", .address = "172.17.0.1", .prefix_len = 16, .up = true},
          {.name = "eth0", .address = "10.0.0.2", .prefix_len = 24, .up = true},
          {.name = "ib0", .address = "10.9.0.2", .prefix_len = 24, .up = true}};
}

std::string env_value(const proto::Env& env, const std::string& name) {
  for (const auto& [k, v] : env)
    if (k == name) return v;
  return "<unset>";
}

// What a node found: reached exactly `reached`, in the Probe's order.
proto::ProbeResult answer(const proto::Probe& probe, const std::vector<std::string>& reached) {
  proto::ProbeResult r;
  for (const auto& a : probe.addresses) {
    const bool ok = std::find(reached.begin(), reached.end(), a) != reached.end();
    r.outcomes.push_back(
        {.address = a, .reached = ok, .error = ok ? "" : "No route to host", .interface = "eth0"});
  }
  return r;
}

class ControllerNetworkTest : public ControllerTest {
 protected:
  // Every agent says Hello and Ready; node 0 lists its interfaces (every
  // node, with `everywhere`).
  void all_ready(const std::vector<proto::Interface>& interfaces = node0_interfaces(),
                 bool everywhere = false, const std::string& peer = "") {
    controller_->start();
    for (std::size_t i = 0; i < nodes(); ++i) {
      link(i).peer = peer;
      link(i).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
    }
    for (std::size_t i = 0; i < nodes(); ++i) {
      proto::Ready r{.master_port = 29500, .store_port = 29400};
      if (i == 0 || everywhere) r.interfaces = interfaces;
      link(i).deliver(r);
    }
  }
  proto::Probe probe_of(std::size_t node) { return link(node).sent_of<proto::Probe>().at(0); }
};

}  // namespace

TEST_F(ControllerNetworkTest, TheOtherNodesTestNodeZerosAddressesBeforeStart) {
  make(3, 1);
  all_ready();
  EXPECT_TRUE(link(0).sent_of<proto::Setup>().at(0).accept_probes);
  EXPECT_FALSE(link(1).sent_of<proto::Setup>().at(0).accept_probes);
  EXPECT_EQ(link(0).sent_of<proto::Setup>().at(0).store_bind, "::");
  EXPECT_TRUE(link(0).sent_of<proto::Probe>().empty()) << "node 0 reaches itself";
  for (std::size_t i : {1, 2}) {
    ASSERT_EQ(link(i).sent_of<proto::Probe>().size(), 1u);
    const auto p = probe_of(i);
    EXPECT_EQ(p.port, 29500);
    EXPECT_EQ(p.timeout_ms, proto::ms(dlaunch::timing::kProbeConnect));
    // Real networks first (in the order listed), the bridge, loopback last.
    EXPECT_EQ(p.addresses,
              (std::vector<std::string>{"10.0.0.2", "10.9.0.2", "172.17.0.1", "127.0.0.1"}));
    EXPECT_TRUE(link(i).sent_of<proto::Start>().empty());
  }
  link(1).deliver(answer(probe_of(1), {"10.0.0.2", "10.9.0.2"}));
  EXPECT_TRUE(link(0).sent_of<proto::Start>().empty()) << "node 2 has not answered";
  link(2).deliver(answer(probe_of(2), {"10.0.0.2"}));
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(link(i).sent_of<proto::Start>().size(), 1u);
    const auto start = link(i).sent_of<proto::Start>()[0];
    EXPECT_EQ(env_value(start.env, "MASTER_ADDR"), "10.0.0.2");
    EXPECT_EQ(env_value(start.env, "DLAUNCH_STORE_ADDR"), "10.0.0.2");
    EXPECT_EQ(start.net_address, "10.0.0.2");
  }
  EXPECT_EQ(controller_->network().chosen, "10.0.0.2");
}

TEST_F(ControllerNetworkTest, AnAddressSomeNodeCannotReachIsPassedOver) {
  make(3, 1);
  all_ready();
  link(1).deliver(answer(probe_of(1), {"10.0.0.2", "10.9.0.2", "172.17.0.1"}));
  link(2).deliver(answer(probe_of(2), {"10.9.0.2", "172.17.0.1"}));
  const auto start = link(0).sent_of<proto::Start>().at(0);
  EXPECT_EQ(env_value(start.env, "MASTER_ADDR"), "10.9.0.2");
}

TEST_F(ControllerNetworkTest, ANodeThatReachesNothingFailsTheJobBeforeAnyWorkerStarts) {
  make(3, 1);
  all_ready();
  link(1).deliver(answer(probe_of(1), {"10.0.0.2"}));
  link(2).deliver(answer(probe_of(2), {}));
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_EQ(controller_->cause().message,
            "node 2 (host2) cannot reach node 0 (host0) at any of its addresses (TCP port 29500): "
            "10.0.0.2 (No route to host), 10.9.0.2 (No route to host), 172.17.0.1 (No route to "
            "host), 127.0.0.1 (No route to host)");
  EXPECT_EQ(controller_->exit_status(), 1);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(link(i).sent_of<proto::Start>().empty());
    EXPECT_EQ(link(i).sent_of<proto::Abort>().size(), 1u);
  }
  agents_stop_everything();
  EXPECT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->ranks_stopped(), 0);
}

TEST_F(ControllerNetworkTest, ANodeThatNeverAnswersIsNamedAtTheDeadline) {
  make(3, 1, {.heartbeat_timeout = milliseconds(0)});
  all_ready();
  link(1).deliver(answer(probe_of(1), {"10.0.0.2"}));
  clock_.advance(dlaunch::timing::kProbeConnect + dlaunch::timing::kReportMargin);
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_EQ(controller_->cause().message,
            "gave up waiting 7.0 s for every node to test which of node 0's addresses it reaches; "
            "no answer from: node 2 (host2)");
  EXPECT_TRUE(link(0).sent_of<proto::Start>().empty());
}

TEST_F(ControllerNetworkTest, AGivenAddressIsUsedUntested) {
  make(2, 1, {.master_addr_explicit = true});
  plan_.master_addr = "10.7.7.7";  // --master-addr 10.7.7.7
  all_ready();
  EXPECT_FALSE(link(0).sent_of<proto::Setup>().at(0).accept_probes);
  EXPECT_TRUE(link(1).sent_of<proto::Probe>().empty());
  const auto start = link(1).sent_of<proto::Start>().at(0);
  EXPECT_EQ(env_value(start.env, "MASTER_ADDR"), "10.7.7.7");
  EXPECT_EQ(start.net_address, "10.7.7.7") << "workers still get the interface toward it";
}

TEST_F(ControllerNetworkTest, AGivenHostNameGetsNoInterface) {
  make(2, 1, {.master_addr_explicit = true});
  plan_.master_addr = "node0-ib";
  all_ready();
  const auto start = link(1).sent_of<proto::Start>().at(0);
  EXPECT_EQ(env_value(start.env, "MASTER_ADDR"), "node0-ib");
  EXPECT_EQ(start.net_address, "");
}

TEST_F(ControllerNetworkTest, AJobOnThisMachineAloneKeepsItsAddressAndSetsNoInterface) {
  make(2, 1);
  for (auto& n : plan_.nodes) n.host.transport = dlaunch::Transport::kLocal;
  plan_.master_addr = "127.0.0.1";
  all_ready();
  EXPECT_FALSE(link(0).sent_of<proto::Setup>().at(0).accept_probes);
  EXPECT_EQ(link(0).sent_of<proto::Setup>().at(0).store_bind, "127.0.0.1");
  EXPECT_TRUE(link(1).sent_of<proto::Probe>().empty());
  const auto start = link(1).sent_of<proto::Start>().at(0);
  EXPECT_EQ(env_value(start.env, "MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(start.net_address, "");
}

TEST_F(ControllerNetworkTest, SshNodesOnThisMachineKeepTheAddressTheHeadReachedNodeZeroAt) {
  // SSH to 127.0.0.2 and 127.0.0.3: both agents list this machine's interfaces.
  make(2, 1, {.head_interfaces = node0_interfaces()});
  all_ready(node0_interfaces(), true, "127.0.0.2");
  EXPECT_TRUE(link(1).sent_of<proto::Probe>().empty());
  EXPECT_EQ(controller_->network().untested,
            "every node is on this machine: MASTER_ADDR=127.0.0.2, no address to test");
  const auto start = link(1).sent_of<proto::Start>().at(0);
  EXPECT_EQ(env_value(start.env, "MASTER_ADDR"), "127.0.0.2");
  EXPECT_EQ(start.net_address, "") << "one machine: no interface is set";
}

TEST_F(ControllerNetworkTest, ATunnelToAnotherMachineIsNotTakenForThisOne) {
  // The head reaches the nodes through a port forwarded on its loopback: the
  // agents list other interfaces than the head's, so they are tested.
  make(2, 1, {.head_interfaces = std::vector<proto::Interface>{node0_interfaces().front()}});
  all_ready(node0_interfaces(), true, "127.0.0.1");
  ASSERT_EQ(link(1).sent_of<proto::Probe>().size(), 1u);
  link(1).deliver(answer(probe_of(1), {"10.0.0.2"}));
  EXPECT_EQ(env_value(link(1).sent_of<proto::Start>().at(0).env, "MASTER_ADDR"), "10.0.0.2");
}

TEST_F(ControllerNetworkTest, ASingleRemoteNodeTakesItsFirstAddressNotTheOneTheHeadUsed) {
  make(1, 2);
  all_ready(node0_interfaces(), false, "192.0.2.99");  // through a jump host at .99
  EXPECT_TRUE(link(0).sent_of<proto::Probe>().empty());
  const auto start = link(0).sent_of<proto::Start>().at(0);
  EXPECT_EQ(env_value(start.env, "MASTER_ADDR"), "10.0.0.2");
}

TEST_F(ControllerNetworkTest, NodeZeroWithoutAnyUsableAddressFailsTheJob) {
  make(2, 1);
  all_ready({{.name = "eth0", .address = "10.0.0.2", .up = false}});
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_NE(controller_->cause().message.find("node 0 (host0) reported no address"),
            std::string::npos)
      << controller_->cause().message;
  EXPECT_TRUE(link(1).sent_of<proto::Start>().empty());
}

TEST_F(ControllerNetworkTest, ProbeOnlyTestsAndShutsDownWithoutStartingAnything) {
  make(3, 2, {.probe_only = true});
  all_ready();
  // The workers are described for the agent to check (Setup.check), and
  // never started: no Start below.
  const auto setup = link(1).sent_of<proto::Setup>().at(0);
  EXPECT_TRUE(setup.check);
  EXPECT_EQ(setup.workers.size(), 2u);
  link(1).deliver(answer(probe_of(1), {"10.0.0.2"}));
  link(2).deliver(answer(probe_of(2), {}));
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(link(i).sent_of<proto::Start>().empty());
    EXPECT_EQ(link(i).sent_of<proto::Shutdown>().size(), 1u);
  }
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone) << "the check reports it";
  const auto& net = controller_->network();
  EXPECT_EQ(net.chosen, "");
  ASSERT_EQ(net.problems.size(), 1u);
  EXPECT_NE(net.problems[0].find("node 2 (host2) cannot reach node 0 (host0)"), std::string::npos);
  ASSERT_EQ(net.reach.size(), 2u);
  EXPECT_TRUE(net.reach[0].outcomes.at(0).reached);
  for (std::size_t i = 0; i < 3; ++i) {
    link(i).deliver(proto::Done{});
    link(i).drop("EOF");
  }
  EXPECT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 0);
}

// --check: a node that found problems (Ready.problems) keeps the network from
// being tested; every agent is shut down, nothing started, and what each
// node's Ready said is there for the table, with when its Setup left and its
// Ready came.
TEST_F(ControllerNetworkTest, ProbeOnlyWithAProblemOnANodeShutsDownWithoutTestingTheNetwork) {
  make(3, 1, {.probe_only = true});
  controller_->start();
  for (std::size_t i = 0; i < nodes(); ++i)
    link(i).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  for (std::size_t i = 0; i < nodes(); ++i) {
    proto::Ready r{.master_port = 29500};
    if (i == 0) r.interfaces = node0_interfaces();
    if (i == 1)
      r.problems = {{.column = "wdir", .message = "working directory '/x' does not exist"}};
    r.facts = {{"kernel", "k" + std::to_string(i)}};
    link(i).deliver(r);
  }
  for (std::size_t i = 0; i < nodes(); ++i) {
    EXPECT_TRUE(link(i).sent_of<proto::Probe>().empty());
    EXPECT_TRUE(link(i).sent_of<proto::Start>().empty());
    EXPECT_EQ(link(i).sent_of<proto::Shutdown>().size(), 1u);
  }
  const auto checks = controller_->checks();
  ASSERT_EQ(checks.size(), 3u);
  for (std::size_t i = 0; i < nodes(); ++i) {
    ASSERT_TRUE(checks[i].ready) << i;
    EXPECT_EQ(checks[i].ready->facts.at(0).second, "k" + std::to_string(i));
    EXPECT_GT(checks[i].setup_sent_ns, 0);
    EXPECT_GE(checks[i].ready_read_ns, checks[i].setup_sent_ns);
  }
  ASSERT_EQ(checks[1].ready->problems.size(), 1u);
  EXPECT_EQ(checks[1].ready->problems[0].column, "wdir");
  EXPECT_TRUE(controller_->network().reach.empty());
  for (std::size_t i = 0; i < 3; ++i) {
    link(i).deliver(proto::Done{});
    link(i).drop("EOF");
  }
  EXPECT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 0) << "the check reports it";
}
