// StoreFence (launcher/pernode/store_fence.h): the MPI fences of per-node
// launchers meeting in a real rendezvous store (comm::ThreadedStoreServer on
// loopback), each over its connection as the per-node driver makes it (the
// TCP network's connect_async: comm::Store behind a ThreadedAsyncStore).
// Each relay answers on its own io_context with every node's data
// in node order; the k-th fences of the nodes meet, whatever order they come
// in; a relay destroyed while it waits for a node that never comes returns;
// so does the adapter under it (ThreadedAsyncStore) destroyed while it
// reconnects to a store that is gone.
#include "pernode/store_fence.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "comm/store.h"
#include "pernode/rdzv_store.h"

using namespace dlaunch;
using namespace std::chrono_literals;

namespace {

constexpr const char* kSecret = "store-fence-test-secret";

comm::StoreServerOptions server_options() {
  comm::StoreServerOptions so;
  so.bind_address = "127.0.0.1";
  so.secret = kSecret;
  return so;
}

// Node `node_rank` of `nnodes`'s relay, answering on `io`.
std::unique_ptr<StoreFence> relay(boost::asio::io_context& io, std::uint16_t port, int nnodes,
                                  int node_rank, const std::string& prefix = "dlaunch/rdzv/r0/",
                                  const std::string& secret = kSecret) {
  comm::StoreOptions co;
  co.host = "127.0.0.1";
  co.port = port;
  co.secret = secret;
  co.connect_timeout = 2s;
  co.timeout = 2s;
  return std::make_unique<StoreFence>(
      rdzv::tcp_rdzv_network().connect_async(io, co),
      StoreFenceOptions{.prefix = prefix, .nnodes = nnodes, .node_rank = node_rank});
}

// Runs io until `done` says so or 10 s pass.
void run_until(boost::asio::io_context& io, const std::function<bool()>& done) {
  auto busy = boost::asio::make_work_guard(io);  // run_for then waits for the relay's answer
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (!done() && std::chrono::steady_clock::now() < end) {
    io.restart();
    io.run_for(20ms);
  }
}

struct Answer {
  std::optional<std::string> all;
  std::string error;
};

}  // namespace

TEST(StoreFence, EveryNodeGetsEveryNodesDataInNodeOrder) {
  comm::ThreadedStoreServer server(server_options());
  constexpr int kNodes = 3;
  std::vector<std::unique_ptr<boost::asio::io_context>> ios;
  std::vector<std::unique_ptr<StoreFence>> relays;
  std::vector<Answer> answers(kNodes);
  for (int j = 0; j < kNodes; ++j) {
    ios.push_back(std::make_unique<boost::asio::io_context>());
    relays.push_back(relay(*ios.back(), server.port(), kNodes, j));
  }
  // Node 2 first, node 0 last: the order of arrival does not matter.
  for (int j = kNodes - 1; j >= 0; --j) {
    relays[static_cast<std::size_t>(j)]->fence(
        0, "<" + std::to_string(j) + ">", [&answers, j](std::string all, std::string error) {
          answers[static_cast<std::size_t>(j)] = {std::move(all), std::move(error)};
        });
  }
  for (int j = 0; j < kNodes; ++j) {
    const auto uj = static_cast<std::size_t>(j);
    run_until(*ios[uj], [&] { return answers[uj].all.has_value(); });
    ASSERT_TRUE(answers[uj].all.has_value()) << "node " << j << " got no answer";
    EXPECT_EQ(*answers[uj].all, "<0><1><2>");
    EXPECT_EQ(answers[uj].error, "");
  }
}

TEST(StoreFence, SuccessiveFencesMeetTheirOwnCounterparts) {
  comm::ThreadedStoreServer server(server_options());
  boost::asio::io_context io0;
  boost::asio::io_context io1;
  auto pa = relay(io0, server.port(), 2, 0);
  auto pb = relay(io1, server.port(), 2, 1);
  StoreFence& a = *pa;
  StoreFence& b = *pb;
  std::vector<std::string> got_a;
  std::vector<std::string> got_b;
  // Node 0 is two fences ahead before node 1 reaches its first.
  a.fence(0, "a0", [&](std::string all, const std::string&) { got_a.push_back(std::move(all)); });
  a.fence(1, "a1", [&](std::string all, const std::string&) { got_a.push_back(std::move(all)); });
  b.fence(0, "b0", [&](std::string all, const std::string&) { got_b.push_back(std::move(all)); });
  b.fence(1, "b1", [&](std::string all, const std::string&) { got_b.push_back(std::move(all)); });
  // Both loops run, as each launcher's does: a relay asks its next fence's
  // part when its loop has taken the answer to the one before.
  const auto end = std::chrono::steady_clock::now() + 10s;
  auto busy0 = boost::asio::make_work_guard(io0);
  auto busy1 = boost::asio::make_work_guard(io1);
  while ((got_a.size() < 2 || got_b.size() < 2) && std::chrono::steady_clock::now() < end) {
    for (auto* io : {&io0, &io1}) {
      io->restart();
      io->run_for(10ms);
    }
  }
  EXPECT_EQ(got_a, (std::vector<std::string>{"a0b0", "a1b1"}));
  EXPECT_EQ(got_b, (std::vector<std::string>{"a0b0", "a1b1"}));
}

TEST(StoreFence, ARoundsFencesAreItsOwn) {
  comm::ThreadedStoreServer server(server_options());
  boost::asio::io_context io;
  // Round 0's node 1 set its data, then the round ended (a restart).
  {
    comm::Store st({.host = "127.0.0.1", .port = server.port(), .secret = kSecret});
    st.set("dlaunch/rdzv/r0/fence/0/1", "old");
  }
  auto a = relay(io, server.port(), 2, 0, "dlaunch/rdzv/r1/");
  std::optional<std::string> got;
  a->fence(0, "new0", [&](std::string all, const std::string&) { got = std::move(all); });
  auto busy = boost::asio::make_work_guard(io);
  io.run_for(700ms);
  EXPECT_FALSE(got.has_value()) << "round 1 must not take round 0's data: " << *got;
}

TEST(StoreFence, ARelayWaitingForANodeThatNeverComesStopsWhenDestroyed) {
  comm::ThreadedStoreServer server(server_options());
  boost::asio::io_context io;
  bool answered = false;
  const auto start = std::chrono::steady_clock::now();
  {
    auto a = relay(io, server.port(), 2, 0);
    a->fence(0, "alone", [&](const std::string&, const std::string&) { answered = true; });
    auto busy = boost::asio::make_work_guard(io);
    io.run_for(300ms);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  io.restart();
  io.poll();
  EXPECT_FALSE(answered);
  EXPECT_LT(took, 3s) << "the destructor waited for the missing node";
}

TEST(StoreFence, AStoreThatRefusesTheSecretIsAnError) {
  comm::ThreadedStoreServer server(server_options());
  boost::asio::io_context io;
  auto a = relay(io, server.port(), 1, 0, "dlaunch/rdzv/r0/", "not-the-secret");
  Answer got;
  a->fence(0, "x", [&](std::string all, std::string error) {
    got = {std::move(all), std::move(error)};
  });
  run_until(io, [&] { return got.all.has_value(); });
  ASSERT_TRUE(got.all.has_value());
  EXPECT_NE(got.error, "") << "a refused secret must be said";
}

// The launcher hosting the store dies while another's watch heartbeats: the
// call that sees the loss fails, and the next one retries its connect for
// connect_timeout. Destroying the adapter (the round's end) ends that connect
// at once. It waited out the timeout before, and a per-node launcher whose
// rendezvous host was killed took 30 s and more to exit under load.
TEST(ThreadedAsyncStore, DestroyedWhileItReconnectsToALostStoreReturnsAtOnce) {
  std::optional<comm::ThreadedStoreServer> server(std::in_place, server_options());
  boost::asio::io_context io;
  comm::StoreOptions co;
  co.host = "127.0.0.1";
  co.port = server->port();
  co.secret = kSecret;
  co.connect_timeout = 60s;
  co.timeout = 60s;
  auto store = rdzv::tcp_rdzv_network().connect_async(io, co);
  std::optional<bool> first;
  store->add("hb", 1, [&](const rdzv::StoreFailure& f, std::int64_t) { first = !f; });
  run_until(io, [&] { return first.has_value(); });
  ASSERT_EQ(first, true);
  server.reset();  // the store is gone
  std::optional<std::string> lost;
  store->add("hb", 1,
             [&](const rdzv::StoreFailure& f, std::int64_t) { lost = f ? f->what() : "answered"; });
  run_until(io, [&] { return lost.has_value(); });
  ASSERT_TRUE(lost.has_value());
  EXPECT_NE(*lost, "answered");
  bool answered = false;
  store->add("hb", 1, [&](const rdzv::StoreFailure&, std::int64_t) { answered = true; });
  std::this_thread::sleep_for(300ms);  // the thread retries its connect
  const auto t0 = std::chrono::steady_clock::now();
  store.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "the destructor waited for the connect";
  io.restart();
  io.poll();
  EXPECT_FALSE(answered);
}
