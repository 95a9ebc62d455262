// The agent's side of the job's network: it lists its interfaces in Ready,
// node 0 accepts the other nodes' test connections on its reserved port until
// Start, the other nodes test node 0's addresses (real sockets on loopback),
// and the workers get the interface toward the job's address unless the user
// chose one.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "agent_test_support.h"
#include "dlaunch/unique_fd.h"
#include "net.h"

using namespace dltest;
using dlaunch::UniqueFd;
using std::chrono::milliseconds;

namespace {

bool has_name(const std::vector<std::string>& env, const std::string& name) {
  return std::any_of(env.begin(), env.end(),
                     [&](const std::string& e) { return e.rfind(name + "=", 0) == 0; });
}

// A TCP socket on 127.0.0.1, listening with the given backlog; its port.
std::pair<UniqueFd, std::uint16_t> listener(int backlog) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(fd.get(), backlog), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  return {std::move(fd), ntohs(a.sin_port)};
}

// connect(2) to 127.0.0.1:port, blocking (loopback answers at once): 0 or errno.
int connect_loopback(std::uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
}

}  // namespace

// Issue 34: 1024 jobs on one machine got the same MASTER_PORT twice. A
// reserved free port must keep every other bind off it, an SO_REUSEADDR one
// (another job's reservation, its rank 0's TCPStore) included, until it is
// released; then it is free.
TEST(ReservePort, AReservedFreePortKeepsEveryOtherBindOffIt) {
  for (int round = 0; round < 64; ++round) {
    auto reserved = dlaunch::agent::reserve_port(0);
    ASSERT_TRUE(reserved) << reserved.error();
    const auto bind_again = [&](bool reuse) {
      UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      int one = reuse ? 1 : 0;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(reserved->port);
      return ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    };
    EXPECT_FALSE(bind_again(true)) << "port " << reserved->port;
    EXPECT_FALSE(bind_again(false)) << "port " << reserved->port;
    // Another free-port reservation never gets the same one.
    auto other = dlaunch::agent::reserve_port(0);
    ASSERT_TRUE(other) << other.error();
    EXPECT_NE(other->port, reserved->port);
    reserved->fd.reset();
    EXPECT_TRUE(bind_again(true)) << "port " << reserved->port;  // released: rank 0 may bind
  }
}

TEST_F(AgentTest, ReadyListsTheMachinesInterfaces) {
  os_.ifaces = {
      {.name = "lo", .address = "127.0.0.1", .prefix_len = 8, .up = true, .loopback = true},
      {.name = "eth0",
       .address = "fd00::2",
       .prefix_len = 64,
       .family = proto::AddressFamily::kIpv6,
       .up = true}};
  send(setup_for(1));
  ASSERT_EQ(got<proto::Ready>().size(), 1u);
  const auto listed = got<proto::Ready>()[0].interfaces;
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].name, "lo");
  EXPECT_EQ(listed[1].address, "fd00::2");
}

TEST_F(AgentTest, WorkersGetTheInterfaceTowardTheJobsAddress) {
  os_.route = "eth0";
  send(setup_for(2));
  send(proto::Start{.env = {{"MASTER_ADDR", "10.0.0.2"}}, .net_address = "10.0.0.2"});
  ASSERT_EQ(os_.procs.size(), 2u);
  EXPECT_EQ(os_.routed, std::vector<std::string>{"10.0.0.2"});
  for (const auto& p : os_.procs) {
    EXPECT_TRUE(has_entry(p.env, "GLOO_SOCKET_IFNAME=eth0"));
    EXPECT_TRUE(has_entry(p.env, "NCCL_SOCKET_IFNAME==eth0"));
    EXPECT_FALSE(has_name(p.env, "OMPI_MCA_btl_tcp_if_include")) << "only under --mpi";
  }
}

TEST_F(AgentTest, AnInterfaceTheUserChoseIsKept) {
  os_.route = "eth0";
  auto setup = setup_for(1);
  setup.workers[0].env = {{"GLOO_SOCKET_IFNAME", "ib0"}};
  send(setup);
  send(proto::Start{.net_address = "10.0.0.2"});
  ASSERT_EQ(os_.procs.size(), 1u);
  EXPECT_TRUE(has_entry(os_.procs[0].env, "GLOO_SOCKET_IFNAME=ib0"));
  EXPECT_FALSE(has_entry(os_.procs[0].env, "GLOO_SOCKET_IFNAME=eth0"));
  EXPECT_TRUE(has_entry(os_.procs[0].env, "NCCL_SOCKET_IFNAME==eth0"));
}

TEST_F(AgentTest, WithoutAnAddressOrARouteNoInterfaceIsSet) {
  send(setup_for(1));
  send(proto::Start{});  // an all-local job
  ASSERT_EQ(os_.procs.size(), 1u);
  EXPECT_TRUE(os_.routed.empty());
  EXPECT_FALSE(has_name(os_.procs[0].env, "NCCL_SOCKET_IFNAME"));
}

TEST(NetworkInterfaceEnv, MpiAddsOpenMpisAndTheUsersOwnStay) {
  using dlaunch::agent::network_interface_env;
  EXPECT_TRUE(network_interface_env("", true, {}, {}).empty());
  EXPECT_EQ(network_interface_env("eth0", true, {}, {}),
            (proto::Env{{"GLOO_SOCKET_IFNAME", "eth0"},
                        {"NCCL_SOCKET_IFNAME", "=eth0"},
                        {"OMPI_MCA_btl_tcp_if_include", "eth0"},
                        {"OMPI_MCA_oob_tcp_if_include", "eth0"}}));
  // Set in the agent's own environment, or for the worker: kept.
  EXPECT_EQ(network_interface_env("eth0", true, {"NCCL_SOCKET_IFNAME=ib", "PATH=/bin"},
                                  {{"OMPI_MCA_btl_tcp_if_include", "ib0"}}),
            (proto::Env{{"GLOO_SOCKET_IFNAME", "eth0"}, {"OMPI_MCA_oob_tcp_if_include", "eth0"}}));
  // A name that only starts the same is another variable.
  EXPECT_EQ(network_interface_env("eth0", false, {"GLOO_SOCKET_IFNAME_X=1"}, {}).size(), 2u);
}

TEST_F(AgentTest, NodeZeroAcceptsProbesOnItsReservedPortUntilStart) {
  auto setup = setup_for(1);
  setup.node_rank = 0;
  setup.reserve_master_port = true;
  setup.accept_probes = true;
  send(setup);
  ASSERT_EQ(got<proto::Ready>().size(), 1u);
  const std::uint16_t port = got<proto::Ready>()[0].master_port;
  ASSERT_NE(port, 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(connect_loopback(port), 0);
    pump();  // accepted and dropped
  }
  send(proto::Start{});
  EXPECT_EQ(connect_loopback(port), ECONNREFUSED) << "released for rank 0 at Start";
}

TEST_F(AgentTest, WithoutProbesTheReservedPortOnlyHoldsThePort) {
  auto setup = setup_for(1);
  setup.node_rank = 0;
  setup.reserve_master_port = true;
  send(setup);
  const std::uint16_t port = got<proto::Ready>().at(0).master_port;
  EXPECT_EQ(connect_loopback(port), ECONNREFUSED);
}

TEST_F(AgentTest, AProbeAnswersForEveryAddressInOrder) {
  auto [fd, port] = listener(16);
  os_.route = "lo";
  send(setup_for(1));
  send(proto::Probe{
      .port = port, .timeout_ms = 2000, .addresses = {"127.0.0.1", "127.0.0.2", "node0"}});
  for (int i = 0; i < 200 && got<proto::ProbeResult>().empty(); ++i) {
    std::this_thread::sleep_for(milliseconds(5));
    pump();
  }
  ASSERT_EQ(got<proto::ProbeResult>().size(), 1u);
  const auto o = got<proto::ProbeResult>()[0].outcomes;
  ASSERT_EQ(o.size(), 3u);
  EXPECT_EQ(o[0].address, "127.0.0.1");
  EXPECT_TRUE(o[0].reached) << o[0].error;
  EXPECT_EQ(o[0].interface, "lo");
  EXPECT_EQ(o[1].address, "127.0.0.2");  // bound to 127.0.0.1 only
  EXPECT_FALSE(o[1].reached);
  EXPECT_EQ(o[1].error, "Connection refused");
  EXPECT_FALSE(o[2].reached);
  EXPECT_EQ(o[2].error, "not an IP address");
}

TEST_F(AgentTest, AProbeThatGetsNoAnswerTimesOut) {
  // A full backlog: the kernel drops further SYNs, as a firewall would.
  auto [fd, port] = listener(0);
  UniqueFd filler(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  // Non-blocking: in progress (or done); the handshake completes meanwhile.
  static_cast<void>(::connect(filler.get(), reinterpret_cast<sockaddr*>(&a), sizeof a));
  std::this_thread::sleep_for(milliseconds(20));
  send(setup_for(1));
  send(proto::Probe{.port = port, .timeout_ms = 1500, .addresses = {"127.0.0.1"}});
  std::this_thread::sleep_for(milliseconds(20));
  pump();
  if (!got<proto::ProbeResult>().empty() && got<proto::ProbeResult>()[0].outcomes[0].reached) {
    GTEST_SKIP() << "this kernel completed a connect beyond the backlog";
  }
  EXPECT_TRUE(got<proto::ProbeResult>().empty());
  advance(milliseconds(1500));
  ASSERT_EQ(got<proto::ProbeResult>().size(), 1u);
  const auto o = got<proto::ProbeResult>()[0].outcomes.at(0);
  EXPECT_FALSE(o.reached);
  EXPECT_EQ(o.error, "timed out after 1.5 s");
}

TEST(AgentNet, TheMachinesOwnAddressesAndTheWayToThem) {
  const auto list = dlaunch::proto::list_interfaces();
  const auto lo = std::find_if(list.begin(), list.end(), [](const proto::Interface& i) {
    return i.loopback && i.address == "127.0.0.1";
  });
  ASSERT_NE(lo, list.end()) << "no loopback address listed";
  EXPECT_EQ(lo->prefix_len, 8);
  EXPECT_TRUE(lo->up);
  // Toward an address of its own the route is the interface that owns it.
  EXPECT_EQ(dlaunch::agent::interface_toward("127.0.0.1", list), lo->name);
  EXPECT_EQ(dlaunch::agent::interface_toward("not-an-address", list), "");
  // The same list in another order is the same machine; one address more is not.
  auto reversed = list;
  std::reverse(reversed.begin(), reversed.end());
  EXPECT_TRUE(dlaunch::proto::same_interfaces(list, reversed));
  reversed.push_back({.name = "eth9", .address = "10.99.0.1"});
  EXPECT_FALSE(dlaunch::proto::same_interfaces(list, reversed));
}
