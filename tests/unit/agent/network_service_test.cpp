// The agent's network service (agent/network_service.h) alone, without an
// agent: node 0's reserved MASTER_PORT from Setup to Start, its probe
// listener, a reach probe answered to the head, --check's listener. Real
// sockets on loopback, the test's io_context and a ManualClock.
#include "network_service.h"

#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "../seams/manual_clock.h"
#include "fake_node.h"
#include "loopback.h"

namespace {

namespace proto = dlaunch::proto;
using dlaunch::agent::NetworkService;

class NetworkServiceTest : public ::testing::Test {
 protected:
  boost::asio::io_context io_;
  dltest::ManualClock clock_;
  dltest::FakeNode head_;
  NetworkService service_{io_, clock_, [](const std::string&) { return std::string("lo"); }, head_};
};

TEST_F(NetworkServiceTest, NodeZeroHoldsItsPortFromSetupToStart) {
  proto::Ready ready;
  ASSERT_EQ(service_.prepare(proto::Setup{.reserve_master_port = true}, ready), std::nullopt);
  ASSERT_NE(ready.master_port, 0);
  EXPECT_FALSE(dltest::loopback_port_free(ready.master_port));  // no other bind takes it meanwhile
  EXPECT_FALSE(dltest::loopback_accepts(ready.master_port));    // held, not listening
  service_.on_start(dlaunch::proto::Start{});
  EXPECT_TRUE(dltest::loopback_port_free(ready.master_port));  // rank 0 binds it now
  EXPECT_TRUE(head_.sent.empty());
}

TEST_F(NetworkServiceTest, WithProbesTheReservedPortListensUntilStart) {
  proto::Ready ready;
  ASSERT_EQ(
      service_.prepare(proto::Setup{.reserve_master_port = true, .accept_probes = true}, ready),
      std::nullopt);
  ASSERT_NE(ready.master_port, 0);
  EXPECT_TRUE(dltest::loopback_accepts(ready.master_port));
  service_.on_start(dlaunch::proto::Start{});
  EXPECT_FALSE(dltest::loopback_accepts(ready.master_port));
}

TEST_F(NetworkServiceTest, AnotherNodeReservesNothing) {
  proto::Ready ready;
  EXPECT_EQ(service_.prepare(proto::Setup{}, ready), std::nullopt);
  EXPECT_EQ(ready.master_port, 0);
}

TEST_F(NetworkServiceTest, APortThatIsTakenFailsTheNodeWithTheReason) {
  proto::Ready first;
  ASSERT_EQ(service_.prepare(proto::Setup{.reserve_master_port = true}, first), std::nullopt);
  NetworkService other(
      io_, clock_, [](const std::string&) { return std::string(); }, head_);
  proto::Ready second;
  const auto refused = other.prepare(
      proto::Setup{.reserve_master_port = true, .master_port = first.master_port}, second);
  ASSERT_TRUE(refused.has_value());
  EXPECT_NE(refused->find(std::to_string(first.master_port) + " is not free on node 0"),
            std::string::npos)
      << *refused;
}

TEST_F(NetworkServiceTest, AProbeIsAnsweredWithAnOutcomePerAddress) {
  proto::Ready ready;
  ASSERT_EQ(
      service_.prepare(proto::Setup{.reserve_master_port = true, .accept_probes = true}, ready),
      std::nullopt);
  const proto::Message probe =
      proto::Probe{.port = ready.master_port, .timeout_ms = 2000, .addresses = {"127.0.0.1"}};
  ASSERT_TRUE(service_.handle(probe));
  for (int i = 0; i < 200 && head_.sent.empty(); ++i)
    io_.run_one_for(std::chrono::milliseconds(10));
  ASSERT_EQ(head_.sent.size(), 1u);
  const auto* result = std::get_if<proto::ProbeResult>(&head_.sent[0]);
  ASSERT_NE(result, nullptr);
  ASSERT_EQ(result->outcomes.size(), 1u);
  EXPECT_TRUE(result->outcomes[0].reached) << result->outcomes[0].error;
  EXPECT_EQ(result->outcomes[0].interface, "lo");
}

TEST_F(NetworkServiceTest, ChecksListenerWantsAFullTokenAndOtherMessagesAreNotItsOwn) {
  ASSERT_TRUE(service_.handle(proto::Message{proto::NetListen{.token = "short"}}));
  ASSERT_EQ(head_.sent.size(), 1u);
  const auto* refused = std::get_if<proto::NetListening>(&head_.sent[0]);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->port, 0);
  EXPECT_EQ(refused->error, "the test's token is too short");
  ASSERT_TRUE(service_.handle(
      proto::Message{proto::NetListen{.token = std::string(proto::kMinNetTokenBytes, 'k')}}));
  ASSERT_EQ(head_.sent.size(), 2u);
  const auto* listening = std::get_if<proto::NetListening>(&head_.sent[1]);
  ASSERT_NE(listening, nullptr);
  EXPECT_NE(listening->port, 0);
  EXPECT_TRUE(listening->error.empty()) << listening->error;
  EXPECT_FALSE(service_.handle(proto::Message{proto::Heartbeat{}}));
  EXPECT_FALSE(service_.handle(proto::Message{proto::Start{}}));
  EXPECT_EQ(head_.sent.size(), 2u);
}

}  // namespace
