// Authentication and hostile input: whatever a peer sends, only its own
// connection suffers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "store_test_support.h"

namespace {

using namespace std::chrono_literals;
using dlaunch::comm::detail::Op;
using dlaunch::comm::detail::Writer;
using store_test::client_options;
using store_test::RawClient;
using store_test::server_options;

std::string frame_with_length(uint32_t length, const std::string& body) {
  std::string f(4, '\0');
  for (int i = 0; i < 4; ++i) f[i] = static_cast<char>(length >> (8 * i));  // little-endian
  return f + body;
}

// A peer on a loopback port that greets its first client with `greeting` and
// then only waits for it to hang up: a store of another release, or no store.
class FakeStore {
 public:
  explicit FakeStore(std::string greeting) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a = store_test::loopback(0);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 1) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("FakeStore: cannot listen");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, greeting = std::move(greeting)] {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      (void)::send(c, greeting.data(), greeting.size(), MSG_NOSIGNAL);
      char buf[64];
      while (::recv(c, buf, sizeof buf, 0) > 0) {
      }
      ::close(c);
    });
  }
  FakeStore(const FakeStore&) = delete;
  FakeStore& operator=(const FakeStore&) = delete;
  ~FakeStore() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept() if nobody came
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }

 private:
  int fd_;
  uint16_t port_ = 0;
  std::thread thread_;
};

// What connecting to `greeting` throws (a StoreError, or a test failure).
dlaunch::comm::StoreError connect_to_greeting(const std::string& greeting) {
  FakeStore fake(greeting);
  auto o = client_options(fake.port());
  o.connect_timeout = 10s;
  auto start = std::chrono::steady_clock::now();
  try {
    dlaunch::comm::Store s(o);
  } catch (const dlaunch::comm::StoreError& e) {
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // given up at once, not retried
    return e;
  }
  ADD_FAILURE() << "connected to a fake store";
  return {dlaunch::comm::ErrorKind::kInternal, "", "none", ""};
}

// A server plus one well-behaved client that must keep working throughout.
class StoreHostile : public ::testing::Test {
 protected:
  void expect_bystander_unharmed() {
    bystander.set("still", "fine");
    EXPECT_EQ(bystander.get("still"), "fine");
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (server.connections() != 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(server.connections(), 1u);
  }
  static dlaunch::comm::StoreServerOptions small_limits() {
    auto o = server_options();
    o.max_key_bytes = 64;
    o.max_value_bytes = 1024;
    o.max_frame_bytes = 4096;
    o.auth_timeout = 300ms;
    return o;
  }
  dlaunch::comm::ThreadedStoreServer server{small_limits()};
  dlaunch::comm::Store bystander{client_options(server.port())};
};

}  // namespace

TEST(StoreAuth, ServerRefusesToStartWithoutASecret) {
  auto o = server_options();
  o.secret.clear();
  EXPECT_THROW(dlaunch::comm::ThreadedStoreServer{o}, std::invalid_argument);
}

TEST(StoreAuth, ClientWithTheWrongSecretIsRejectedAtOnce) {
  dlaunch::comm::ThreadedStoreServer server(server_options());
  auto o = client_options(server.port());
  o.secret = "not-the-secret";
  auto start = std::chrono::steady_clock::now();
  try {
    dlaunch::comm::Store s(o);
    FAIL() << "connected with the wrong secret";
  } catch (const dlaunch::comm::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("authentication rejected"), std::string::npos) << e.what();
    EXPECT_EQ(e.kind(), dlaunch::comm::ErrorKind::kUsage);  // the caller's secret
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // not retried until connect_timeout
}

TEST(StoreAuth, ClientWithoutASecretFailsBeforeConnecting) {
  auto o = client_options(1);
  o.secret.clear();
  EXPECT_THROW(dlaunch::comm::Store{o}, dlaunch::comm::StoreError);
}

TEST(StoreAuth, AStoreOfAnotherProtocolVersionIsToldApart) {
  // Version 1 spoke big-endian: a client of version 2 must not misread it.
  auto e = connect_to_greeting("DLSTORE1" + std::string(32, 'n'));
  EXPECT_NE(std::string(e.what()).find("connect failed: the store speaks protocol version \"1\", "
                                       "this client version 2"),
            std::string::npos)
      << e.what();
  EXPECT_EQ(e.kind(), dlaunch::comm::ErrorKind::kUsage);  // mismatched installations
}

TEST(StoreAuth, APeerThatIsNoStoreIsRefusedAtOnce) {
  auto e = connect_to_greeting("HTTP/1.1 400 Bad Request\r\n\r\n" + std::string(20, ' '));
  EXPECT_NE(std::string(e.what()).find(
                "connect failed: the peer is not a dlaunch store (unexpected greeting)"),
            std::string::npos)
      << e.what();
  EXPECT_EQ(e.kind(), dlaunch::comm::ErrorKind::kEnvironment);
}

TEST(StoreAuth, TheGreetingCarriesAFreshNonceAndNotTheSecret) {
  dlaunch::comm::ThreadedStoreServer server(server_options());
  RawClient a(server.port()), b(server.port());
  std::string ga = a.greeting(), gb = b.greeting();
  EXPECT_EQ(ga.substr(0, 8), "DLSTORE2");  // protocol version 2
  EXPECT_NE(ga.substr(8), gb.substr(8));
  EXPECT_EQ(ga.find(store_test::kSecret), std::string::npos);
}

TEST_F(StoreHostile, GarbageInsteadOfTheAnswerIsDisconnectedAndReadsNothing) {
  bystander.set("private", "data");
  RawClient raw(server.port());
  raw.greeting();
  raw.send(std::string(32, 'x') + Writer(uint8_t(Op::get)).u64(0).str("private").finish());
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, AnswerComputedWithTheWrongSecretIsDisconnected) {
  bystander.set("private", "data");
  RawClient raw(server.port());
  raw.answer(raw.greeting(), "wrong-secret");
  raw.send(Writer(uint8_t(Op::get)).u64(0).str("private").finish());
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, AReplayedAnswerIsRejected) {
  RawClient first(server.port());
  std::string old_greeting = first.greeting();
  RawClient second(server.port());
  second.greeting();
  second.answer(old_greeting, store_test::kSecret);  // valid for the other nonce only
  EXPECT_TRUE(second.hung_up_silently());
}

TEST_F(StoreHostile, RequestsBeforeAuthenticationAreNotServed) {
  bystander.set("private", "data");
  RawClient raw(server.port());
  raw.greeting();
  raw.send(Writer(uint8_t(Op::get)).u64(0).str("private").finish());  // 25 bytes: short of 32
  EXPECT_TRUE(raw.hung_up_silently(2s));  // dropped by auth_timeout, nothing served
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, UnknownOperationClosesOnlyThatConnection) {
  RawClient raw(server.port());
  raw.authenticate();
  raw.send(frame_with_length(1, std::string(1, '\x63')));
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, TruncatedFieldClosesOnlyThatConnection) {
  RawClient raw(server.port());
  raw.authenticate();
  // set whose key claims 50 bytes inside a 9-byte body.
  std::string body = Writer(uint8_t(Op::set)).u32(50).u32(0).finish().substr(4);
  raw.send(frame_with_length(static_cast<uint32_t>(body.size()), body));
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, TrailingBytesCloseTheConnection) {
  RawClient raw(server.port());
  raw.authenticate();
  std::string body = Writer(uint8_t(Op::num_keys)).finish().substr(4) + "junk";
  raw.send(frame_with_length(static_cast<uint32_t>(body.size()), body));
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, ZeroLengthFrameClosesTheConnection) {
  RawClient raw(server.port());
  raw.authenticate();
  raw.send(frame_with_length(0, ""));
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, OversizedFrameIsRefusedFromItsHeaderAlone) {
  RawClient raw(server.port());
  raw.authenticate();
  raw.send(frame_with_length(1u << 30, "\x01"));  // promises 1 GiB, sends 1 byte
  EXPECT_TRUE(raw.hung_up_silently(2s));
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, OversizedKeyClosesTheConnection) {
  RawClient raw(server.port());
  raw.authenticate();
  raw.send(Writer(uint8_t(Op::set)).str(std::string(65, 'k')).str("v").finish());
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, OversizedValueClosesTheConnection) {
  RawClient raw(server.port());
  raw.authenticate();
  raw.send(Writer(uint8_t(Op::set)).str("k").str(std::string(1025, 'v')).finish());
  EXPECT_TRUE(raw.hung_up_silently());
  EXPECT_FALSE(bystander.check({"k"}));
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, HugeListCountClosesTheConnection) {
  RawClient raw(server.port());
  raw.authenticate();
  raw.send(Writer(uint8_t(Op::check)).u32(0xffffffff).finish());
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, FramesSplitIntoSingleBytesAreStillParsed) {
  RawClient raw(server.port());
  raw.authenticate();
  std::string f = Writer(uint8_t(Op::set)).str("slow").str("drip").finish();
  for (char c : f) {
    raw.send(std::string(1, c));
    std::this_thread::sleep_for(1ms);
  }
  auto answer = raw.read_frame();
  ASSERT_TRUE(answer);
  EXPECT_EQ(*answer, std::string(1, '\0'));
  EXPECT_EQ(bystander.get("slow"), "drip");
}

TEST_F(StoreHostile, TheClientReportsOversizedRequestsWithoutLosingItsConnection) {
  EXPECT_THROW(bystander.set(std::string(65, 'k'), "v"), dlaunch::comm::StoreError);
  EXPECT_THROW(bystander.set("k", std::string(1025, 'v')), dlaunch::comm::StoreError);
  std::vector<std::string> keys(100, "key"), values(100, std::string(100, 'v'));
  EXPECT_THROW(bystander.multi_set(keys, values), dlaunch::comm::StoreError);  // frame over 4096
  expect_bystander_unharmed();
}

// Issue 15 item 2: a flood of connections that never authenticate is capped:
// the oldest are dropped for new ones, so the job's own clients still get in.
TEST(StoreFlood, ConnectionsThatNeverAuthenticateCannotStarveTheJobsClients) {
  auto o = server_options();
  o.max_unauthenticated = 32;
  o.auth_timeout = 60s;  // the cap, not the timeout, must do the work
  dlaunch::comm::ThreadedStoreServer server{o};
  std::vector<std::unique_ptr<RawClient>> flood;
  flood.reserve(400);
  for (int i = 0; i < 400; ++i) flood.push_back(std::make_unique<RawClient>(server.port()));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server.connections() > 32 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_LE(server.connections(), 32u);
  // The oldest got its challenge, then was dropped.
  flood.front()->greeting();
  EXPECT_TRUE(flood.front()->hung_up_silently(5s));
  // A client of the job, in the middle of the flood, is served.
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 40; ++i) flood.push_back(std::make_unique<RawClient>(server.port()));
    const auto start = std::chrono::steady_clock::now();
    dlaunch::comm::Store client(client_options(server.port()));
    client.set("k" + std::to_string(round), "v");
    EXPECT_EQ(client.get("k" + std::to_string(round)), "v");
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  }
}

// Another user of the machine gets not even the challenge: the connection is
// closed at once, whatever the caps.
TEST(StoreFlood, AnotherLocalUsersConnectionIsClosedAtOnce) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another user";
  dlaunch::comm::ThreadedStoreServer server{server_options()};
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(3);
    RawClient raw(server.port());
    ::_exit(raw.hung_up_silently(5s) ? 0 : 1);  // EOF before a single byte
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // This user's own connection gets its challenge.
  RawClient mine(server.port());
  EXPECT_EQ(mine.greeting().substr(0, 8), "DLSTORE2");
}

// Issue 15 item 2: this user's processes on the store's machine connect over
// a Unix socket in a private folder; a flood at the TCP port is not in front
// of them, and other users cannot reach it at all.
TEST(StoreFlood, TheUnixSocketIsOutOfTheFloodsWay) {
  std::string dir = "/tmp/store-unix-test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  auto o = server_options();
  o.unix_path = dir + "/store.sock";
  o.refuse_other_local_users = false;  // the flood below is this user's: let it in
  dlaunch::comm::ThreadedStoreServer server{o};
  std::vector<std::unique_ptr<RawClient>> flood;
  flood.reserve(300);
  for (int i = 0; i < 300; ++i) flood.push_back(std::make_unique<RawClient>(server.port()));
  auto co = client_options(server.port());
  co.unix_path = o.unix_path;
  co.port = 1;  // nothing there: only the Unix socket can serve
  co.connect_timeout = 3s;
  dlaunch::comm::Store client(co);
  client.set("via", "unix");
  EXPECT_EQ(client.get("via"), "unix");
  // A path that is not there: the client goes on to TCP.
  auto fallback = client_options(server.port());
  fallback.unix_path = dir + "/missing.sock";
  dlaunch::comm::Store tcp(fallback);
  EXPECT_EQ(tcp.get("via"), "unix");
  flood.clear();
  std::filesystem::remove_all(dir);
}
