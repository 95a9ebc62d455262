// Connecting: retry until the server comes up, give up with a useful error,
// reconnect after a loss, configuration from the environment, and the server
// on a caller's own io_context.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <optional>
#include <system_error>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include "store_test_support.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using store_test::client_options;
using store_test::free_port;
using store_test::server_options;

class StoreFromEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"DLAUNCH_STORE_ADDR", "DLAUNCH_STORE_PORT", "DLAUNCH_STORE_SECRET"}) {
      ::unsetenv(v);
    }
  }
  void TearDown() override { SetUp(); }

  static std::string error() {
    try {
      dlaunch::comm::Store::from_env();
    } catch (const dlaunch::comm::StoreError& e) {
      // What the launcher should have set: the caller's to fix.
      EXPECT_EQ(e.kind(), dlaunch::comm::ErrorKind::kUsage) << e.what();
      return e.what();
    }
    return "(no StoreError)";
  }
};

}  // namespace

TEST(StoreConnect, ClientStartedBeforeTheServerConnectsOnceItComesUp) {
  uint16_t port = free_port();
  std::optional<dlaunch::comm::ThreadedStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    auto o = server_options();
    o.port = port;
    server.emplace(o);
  });
  auto start = Clock::now();
  auto o = client_options(port);
  o.connect_timeout = 10s;
  dlaunch::comm::Store store(o);
  EXPECT_GE(Clock::now() - start, 250ms);
  starter.join();
  store.set("k", "v");
  EXPECT_EQ(store.get("k"), "v");
}

TEST(StoreConnect, GivingUpNamesTheAddressAndTheNumberOfAttempts) {
  uint16_t port = free_port();
  auto o = client_options(port);
  o.connect_timeout = 500ms;
  auto start = Clock::now();
  try {
    dlaunch::comm::Store store(o);
    FAIL() << "connected to nothing";
  } catch (const dlaunch::comm::StoreError& e) {
    std::string what = e.what();
    EXPECT_EQ(e.address(), "127.0.0.1:" + std::to_string(port));
    EXPECT_NE(what.find("store 127.0.0.1:" + std::to_string(port) + ": connect failed after "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(" attempts in 0.5 s: Connection refused"), std::string::npos) << what;
    EXPECT_EQ(e.kind(), dlaunch::comm::ErrorKind::kEnvironment);
  }
  auto took = Clock::now() - start;
  EXPECT_GE(took, 450ms);
  EXPECT_LT(took, 3s);
}

TEST(StoreConnect, AServerAtItsConnectionLimitMakesNewClientsRetry) {
  auto so = server_options();
  so.max_connections = 1;
  dlaunch::comm::ThreadedStoreServer server(so);
  dlaunch::comm::Store first(client_options(server.port()));
  auto o = client_options(server.port());
  o.connect_timeout = 300ms;
  EXPECT_THROW(dlaunch::comm::Store{o}, dlaunch::comm::StoreError);
  first.set("k", "v");
}

TEST(StoreConnect, ReconnectsOnTheNextCallAfterTheServerRestarts) {
  uint16_t port = free_port();
  auto so = server_options();
  so.port = port;
  auto server = std::make_unique<dlaunch::comm::ThreadedStoreServer>(so);
  dlaunch::comm::Store store(client_options(port));
  store.set("k", "v");
  server.reset();
  server = std::make_unique<dlaunch::comm::ThreadedStoreServer>(so);
  // The call that meets the dead connection fails (it may not be safe to repeat);
  // the next one reconnects to the new server, whose table is empty.
  try {
    store.set("k2", "v2");
  } catch (const dlaunch::comm::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("connection lost"), std::string::npos) << e.what();
    EXPECT_EQ(e.kind(), dlaunch::comm::ErrorKind::kEnvironment);
  }
  store.set("k3", "v3");
  EXPECT_EQ(store.get("k3"), "v3");
  EXPECT_FALSE(store.check({"k"}));
}

TEST(StoreServerLoop, RunsOnTheCallersIoContextAndCloseDropsConnections) {
  boost::asio::io_context io;
  dlaunch::comm::StoreServer server(io, server_options());
  std::thread loop([&] { io.run(); });
  {
    dlaunch::comm::Store a(client_options(server.port())), b(client_options(server.port()));
    a.set("k", "v");
    EXPECT_EQ(b.get("k"), "v");
    std::promise<size_t> count;
    boost::asio::post(io, [&] { count.set_value(server.connections()); });
    EXPECT_EQ(count.get_future().get(), 2u);
    boost::asio::post(io, [&] { server.close(); });
    loop.join();  // nothing left to do once closed
    EXPECT_THROW(a.set("k", "w"), dlaunch::comm::StoreError);
  }
  EXPECT_EQ(server.connections(), 0u);
}

TEST(StoreServerLoop, BindingABusyPortNamesThePort) {
  dlaunch::comm::ThreadedStoreServer first(server_options());
  boost::asio::io_context io;
  auto o = server_options();
  o.port = first.port();
  o.bind_address = "127.0.0.1";
  try {
    dlaunch::comm::StoreServer second(io, o);
    // SO_REUSEADDR does not allow two listeners; reaching here means it did.
    FAIL() << "bound a port already listened on";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find(":" + std::to_string(first.port())), std::string::npos)
        << e.what();
  }
}

TEST_F(StoreFromEnv, NamesEachMissingVariable) {
  EXPECT_NE(error().find("DLAUNCH_STORE_ADDR is not set"), std::string::npos) << error();
  ::setenv("DLAUNCH_STORE_ADDR", "127.0.0.1", 1);
  EXPECT_NE(error().find("DLAUNCH_STORE_PORT is not set"), std::string::npos) << error();
  ::setenv("DLAUNCH_STORE_PORT", "29x", 1);
  EXPECT_NE(error().find("DLAUNCH_STORE_PORT='29x' is not a port number"), std::string::npos)
      << error();
  ::setenv("DLAUNCH_STORE_PORT", "70000", 1);
  EXPECT_NE(error().find("DLAUNCH_STORE_PORT='70000'"), std::string::npos) << error();
  ::setenv("DLAUNCH_STORE_PORT", "29400", 1);
  EXPECT_NE(error().find("DLAUNCH_STORE_SECRET is not set"), std::string::npos) << error();
}

TEST_F(StoreFromEnv, ConnectsWithTheEnvironmentsAddressAndSecret) {
  dlaunch::comm::ThreadedStoreServer server(server_options());
  ::setenv("DLAUNCH_STORE_ADDR", "127.0.0.1", 1);
  ::setenv("DLAUNCH_STORE_PORT", std::to_string(server.port()).c_str(), 1);
  ::setenv("DLAUNCH_STORE_SECRET", store_test::kSecret, 1);
  auto store = dlaunch::comm::Store::from_env();
  EXPECT_EQ(store.address(), "127.0.0.1:" + std::to_string(server.port()));
  store.set("k", "v");
  EXPECT_EQ(store.get("k"), "v");
}

// A store that met its clients on one port and moves them to another (the
// per-node static rendezvous, whose meeting port becomes MASTER_PORT): both
// ports serve one table; closing the first keeps its connections and the
// other port, and frees the first for someone else to bind.
TEST(StoreServer, ASecondPortSharesTheTableAndTheFirstCanBeClosedAlone) {
  dlaunch::comm::ThreadedStoreServer server(server_options());
  const uint16_t second = server.listen_also("127.0.0.1", 0);
  ASSERT_NE(second, 0);
  ASSERT_NE(second, server.port());
  dlaunch::comm::Store on_first(client_options(server.port()));
  dlaunch::comm::Store on_second(client_options(second));
  on_first.set("k", "v");
  EXPECT_EQ(on_second.get("k"), "v");
  server.stop_listening_on_first_port();
  on_first.set("k", "w");  // an existing connection stays
  EXPECT_EQ(on_second.get("k"), "w");
  dlaunch::comm::Store again(client_options(second));
  EXPECT_EQ(again.get("k"), "w");
  // The first port is free: another socket binds it (as rank 0's TCPStore will).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = store_test::loopback(server.port());
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  EXPECT_EQ(::listen(fd, 1), 0);
  ::close(fd);
}

// The process hosting a store reads and writes its table without a
// connection (a rendezvous host watching its members): a set wakes a
// client's parked get as a client's set would.
TEST(StoreServer, TheHostReadsAndWritesItsTableInProcess) {
  dlaunch::comm::ThreadedStoreServer server(server_options());
  dlaunch::comm::Store client(client_options(server.port()));
  client.set("a", "1");
  auto got = server.peek({"a", "missing"});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], std::optional<std::string>("1"));
  EXPECT_FALSE(got[1].has_value());
  auto parked = std::async(std::launch::async, [&] { return client.get("b", 10s); });
  std::this_thread::sleep_for(100ms);
  server.set("b", "from the host");
  EXPECT_EQ(parked.get(), "from the host");
}

// A watcher of its own table wakes on a change, a client's or its own, and
// on its deadline when nothing changes; a change between its look and its
// wait is not lost. A read changes nothing.
TEST(StoreServer, AWatcherWakesOnAChangeNotOnAPeriod) {
  dlaunch::comm::ThreadedStoreServer server(server_options());
  dlaunch::comm::Store client(client_options(server.port()));
  uint64_t seen = server.changes();
  auto start = Clock::now();
  EXPECT_EQ(server.wait_change(seen, start + 150ms), seen);  // nothing: the deadline
  EXPECT_GE(Clock::now() - start, 150ms);
  (void)client.check({"nothing"});
  (void)server.peek({"nothing"});
  EXPECT_EQ(server.changes(), seen);
  auto woken = std::async(std::launch::async, [&] {
    const auto t0 = Clock::now();
    const uint64_t now = server.wait_change(seen, t0 + 30s);
    return std::make_pair(now, Clock::now() - t0);
  });
  std::this_thread::sleep_for(100ms);
  client.set("k", "v");
  const auto [after, took] = woken.get();
  EXPECT_GT(after, seen);
  EXPECT_LT(took, 10s);
  seen = after;
  // Changed before the wait began: it returns at once.
  server.set("k", "w");
  start = Clock::now();
  EXPECT_GT(server.wait_change(seen, start + 30s), seen);
  EXPECT_LT(Clock::now() - start, 10s);
  // add, compare_set that stores, erase each count; a compare_set that does not store does not.
  seen = server.changes();
  (void)client.add("n", 1);
  EXPECT_EQ(server.changes(), seen + 1);
  (void)client.compare_set("k", "other", "x");
  EXPECT_EQ(server.changes(), seen + 1);
  (void)client.compare_set("k", "w", "x");
  EXPECT_EQ(server.changes(), seen + 2);
  EXPECT_TRUE(client.delete_key("k"));
  EXPECT_EQ(server.changes(), seen + 3);
  // A set of the value a key has is no change; keys under a quiet prefix
  // (counters read at the watcher's own deadlines) do not count; a wake does.
  client.set("same", "1");
  seen = server.changes();
  client.set("same", "1");
  EXPECT_EQ(server.changes(), seen);
  server.quiet_prefixes({"hb/"});
  (void)client.add("hb/3", 1);
  client.set("hb/4", "x");
  EXPECT_EQ(server.changes(), seen);
  client.set("hb", "not under the prefix");
  EXPECT_EQ(server.changes(), seen + 1);
  server.wake_watchers();
  EXPECT_EQ(server.changes(), seen + 2);
}

// A get parked on another thread fails at once when the Store is
// interrupted, and the Store connects again for the next call; a get whose
// key does not come says so with its own cause, the connection intact.
TEST(StoreConnect, InterruptEndsAParkedCallAndATimeoutIsToldFromALoss) {
  dlaunch::comm::ThreadedStoreServer server(server_options());
  dlaunch::comm::Store client(client_options(server.port()));
  try {
    (void)client.get("never", 100ms);
    ADD_FAILURE() << "no timeout";
  } catch (const dlaunch::comm::StoreError& e) {
    EXPECT_EQ(e.cause(), dlaunch::comm::StoreError::Cause::kTimedOut) << e.what();
  }
  const auto start = Clock::now();
  auto parked = std::async(std::launch::async, [&]() -> std::string {
    try {
      return client.get("never", 60s);
    } catch (const dlaunch::comm::StoreError& e) {
      EXPECT_NE(e.cause(), dlaunch::comm::StoreError::Cause::kTimedOut) << e.what();
      return "interrupted";
    }
  });
  std::this_thread::sleep_for(200ms);
  client.interrupt();
  EXPECT_EQ(parked.get(), "interrupted");
  EXPECT_LT(Clock::now() - start, 5s);
  client.set("after", "ok");  // connected again
  EXPECT_EQ(client.get("after"), "ok");
}

// A connect that waits for a store not there yet (retrying until
// connect_timeout, a minute here) ends at once when interrupted, in its
// pause between attempts as in an attempt, and the next call tries again;
// close() ends it too, and every call after it fails at once. What a Store
// on a thread of its own needs when its owner goes (the per-node
// rendezvous's watch when the launcher hosting the store died).
TEST(StoreConnect, InterruptAndCloseEndAConnectThatWaitsForAStoreThatIsNotThere) {
  auto o = client_options(free_port());
  o.connect_timeout = 60s;
  o.connect_at_construction = false;
  dlaunch::comm::Store client(o);  // nothing listens there: no connect yet
  const auto ends_at_once = [&](const std::function<void()>& stop, const std::string& said) {
    auto waiting = std::async(std::launch::async, [&]() -> std::string {
      try {
        client.set("k", "v");
        return "connected";
      } catch (const dlaunch::comm::StoreError& e) {
        return e.what();
      }
    });
    std::this_thread::sleep_for(300ms);  // a few attempts and pauses
    const auto t0 = Clock::now();
    stop();
    ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready) << "the connect went on";
    EXPECT_LT(Clock::now() - t0, 1s);
    const std::string what = waiting.get();
    EXPECT_NE(what.find(said), std::string::npos) << what;
  };
  ends_at_once([&] { client.interrupt(); }, "connect interrupted");
  // The next call tries again (and is interrupted again): an interrupt is
  // the call's, not the client's.
  ends_at_once([&] { client.interrupt(); }, "connect interrupted");
  ends_at_once([&] { client.close(); }, "connect interrupted");
  const auto t0 = Clock::now();
  try {
    client.connect();
    ADD_FAILURE() << "a closed client connected";
  } catch (const dlaunch::comm::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("this client was closed"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, 1s);
}

// An interrupt that comes between two calls is forgotten: the next call
// runs as usual.
TEST(StoreConnect, AnInterruptBetweenCallsIsForgotten) {
  dlaunch::comm::ThreadedStoreServer server(server_options());
  dlaunch::comm::Store client(client_options(server.port()));
  client.set("k", "1");
  client.interrupt();
  EXPECT_EQ(client.get("k"), "1");
  EXPECT_EQ(client.add("n", 2), 2);
}
