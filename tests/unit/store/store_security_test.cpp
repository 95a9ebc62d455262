// Authentication and hostile input: whatever a peer sends, only its own
// connection suffers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
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

// A peer on a loopback port that plays `script` on its first connection
// (blocking socket), then hangs up: an impostor, a relay, a hostile store.
class ScriptedPeer {
 public:
  explicit ScriptedPeer(std::function<void(int)> script) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a = store_test::loopback(0);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 1) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("ScriptedPeer: cannot listen");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, script = std::move(script)] {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      script(c);
      ::close(c);
    });
  }
  ScriptedPeer(const ScriptedPeer&) = delete;
  ScriptedPeer& operator=(const ScriptedPeer&) = delete;
  ~ScriptedPeer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }

 private:
  int fd_;
  uint16_t port_ = 0;
  std::thread thread_;
};

// Blocking I/O for the scripts: exactly n bytes, or what came before EOF.
std::string read_n(int fd, size_t n) {
  std::string out;
  char buf[4096];
  while (out.size() < n) {
    const ssize_t got = ::recv(fd, buf, std::min(sizeof buf, n - out.size()), 0);
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}
void write_all(int fd, const std::string& bytes) {
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
}
std::string mac_bytes(const dlaunch::comm::detail::Mac& m) {
  return {reinterpret_cast<const char*>(m.data()), m.size()};
}
std::string tag_bytes(const dlaunch::comm::detail::Tag& t) {
  return {reinterpret_cast<const char*>(t.data()), t.size()};
}

// Plays a store that knows `secret` through the handshake, then hands the
// connection and its taggers to `then`.
std::function<void(int)> knowing_store(std::string secret,
                                       std::function<void(int, dlaunch::comm::detail::FrameTagger&,
                                                          dlaunch::comm::detail::FrameTagger&)>
                                           then) {
  return [secret = std::move(secret), then = std::move(then)](int fd) {
    namespace d = dlaunch::comm::detail;
    const d::Nonce ns = d::fresh_nonce();
    write_all(fd, std::string(d::kGreetingMagic) +
                      std::string(reinterpret_cast<const char*>(ns.data()), ns.size()));
    const std::string nc_bytes = read_n(fd, d::kNonceBytes);
    if (nc_bytes.size() != d::kNonceBytes) return;
    d::Nonce nc{};
    std::copy(nc_bytes.begin(), nc_bytes.end(), nc.begin());
    const d::Handshake h = d::handshake_values(secret, ns, nc);
    write_all(fd, mac_bytes(h.server_proof));
    if (read_n(fd, d::kMacBytes) != mac_bytes(h.client_proof)) return;
    d::FrameTagger to_server(h.to_server);
    d::FrameTagger to_client(h.to_client);
    const std::string ok = Writer(0).u64(4096).u64(1 << 20).u64(1 << 21).finish();
    write_all(fd, ok + tag_bytes(to_client.next(ok)));
    then(fd, to_server, to_client);
  };
}

size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  size_t resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

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
    // The store proves its secret first: the client sees that it is not its own.
    EXPECT_NE(std::string(e.what()).find("could not prove that it knows the job's secret"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(e.kind(), dlaunch::comm::ErrorKind::kUsage);  // the caller's secret
    EXPECT_EQ(e.cause(), dlaunch::comm::StoreError::Cause::kPeerUnproven);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // not retried until connect_timeout
}

TEST(StoreAuth, ClientWithoutASecretFailsBeforeConnecting) {
  auto o = client_options(1);
  o.secret.clear();
  EXPECT_THROW(dlaunch::comm::Store{o}, dlaunch::comm::StoreError);
}

TEST(StoreAuth, AStoreOfAnotherProtocolVersionIsToldApart) {
  // Version 1 spoke big-endian, version 2 proved nothing to its clients: a
  // client of version 3 must use neither.
  for (const char* version : {"1", "2"}) {
    auto e = connect_to_greeting("DLSTORE" + std::string(version) + std::string(32, 'n'));
    EXPECT_NE(std::string(e.what()).find("connect failed: the store speaks protocol version \"" +
                                         std::string(version) + "\", this client version 3"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(e.kind(), dlaunch::comm::ErrorKind::kUsage);  // mismatched installations
    EXPECT_EQ(e.cause(), dlaunch::comm::StoreError::Cause::kOtherVersion);
  }
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
  EXPECT_EQ(ga.substr(0, 8), "DLSTORE3");  // protocol version 3
  EXPECT_NE(ga.substr(8), gb.substr(8));
  EXPECT_EQ(ga.find(store_test::kSecret), std::string::npos);
}

TEST_F(StoreHostile, GarbageInsteadOfTheAnswerIsDisconnectedAndReadsNothing) {
  bystander.set("private", "data");
  RawClient raw(server.port());
  raw.greeting();
  ASSERT_TRUE(raw.send_nonce());
  raw.send(std::string(32, 'x') + Writer(uint8_t(Op::get)).u64(0).str("private").finish());
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, AnswerComputedWithTheWrongSecretIsDisconnected) {
  bystander.set("private", "data");
  RawClient raw(server.port());
  raw.greeting();
  ASSERT_TRUE(raw.send_nonce());
  auto wrong = raw.values("wrong-secret").client_proof;
  raw.send(std::string(reinterpret_cast<const char*>(wrong.data()), wrong.size()) +
           Writer(uint8_t(Op::get)).u64(0).str("private").finish());
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, AReplayedAnswerIsRejected) {
  RawClient first(server.port());
  first.greeting();
  ASSERT_TRUE(first.send_nonce());
  auto old = first.values(store_test::kSecret).client_proof;  // valid for those nonces only
  RawClient second(server.port());
  second.greeting();
  ASSERT_TRUE(second.send_nonce());
  second.send(std::string(reinterpret_cast<const char*>(old.data()), old.size()));
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
  raw.send_frame(frame_with_length(1, std::string(1, '\x63')));
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, TruncatedFieldClosesOnlyThatConnection) {
  RawClient raw(server.port());
  raw.authenticate();
  // set whose key claims 50 bytes inside a 9-byte body.
  std::string body = Writer(uint8_t(Op::set)).u32(50).u32(0).finish().substr(4);
  raw.send_frame(frame_with_length(static_cast<uint32_t>(body.size()), body));
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, TrailingBytesCloseTheConnection) {
  RawClient raw(server.port());
  raw.authenticate();
  std::string body = Writer(uint8_t(Op::num_keys)).finish().substr(4) + "junk";
  raw.send_frame(frame_with_length(static_cast<uint32_t>(body.size()), body));
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
  raw.send_frame(Writer(uint8_t(Op::set)).str(std::string(65, 'k')).str("v").finish());
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, OversizedValueClosesTheConnection) {
  RawClient raw(server.port());
  raw.authenticate();
  raw.send_frame(Writer(uint8_t(Op::set)).str("k").str(std::string(1025, 'v')).finish());
  EXPECT_TRUE(raw.hung_up_silently());
  EXPECT_FALSE(bystander.check({"k"}));
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, HugeListCountClosesTheConnection) {
  RawClient raw(server.port());
  raw.authenticate();
  raw.send_frame(Writer(uint8_t(Op::check)).u32(0xffffffff).finish());
  EXPECT_TRUE(raw.hung_up_silently());
  expect_bystander_unharmed();
}

TEST_F(StoreHostile, FramesSplitIntoSingleBytesAreStillParsed) {
  RawClient raw(server.port());
  raw.authenticate();
  std::string f = raw.tagged(Writer(uint8_t(Op::set)).str("slow").str("drip").finish());
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
  EXPECT_EQ(mine.greeting().substr(0, 8), "DLSTORE3");
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

// Issue 27 item 1: the store proves the secret to its clients. Something
// that holds the address and cannot prove it (a process that bound the port
// first) learns nothing but a fresh nonce, and the client says who it is.
TEST(StoreMutualAuth, AnImpostorThatCannotProveTheSecretGetsNothingButANonce) {
  std::string received;
  {
    ScriptedPeer impostor([&](int fd) {
      write_all(fd, std::string(dlaunch::comm::detail::kGreetingMagic) + std::string(32, 'n'));
      received = read_n(fd, 32);
      write_all(fd, std::string(32, 'p'));  // a "proof" made without the secret
      received += read_n(fd, 1 << 16);      // whatever else the client sends, until it hangs up
    });
    auto o = client_options(impostor.port());
    const auto start = std::chrono::steady_clock::now();
    try {
      dlaunch::comm::Store s(o);
      ADD_FAILURE() << "the client accepted an impostor";
    } catch (const dlaunch::comm::StoreError& e) {
      EXPECT_EQ(e.cause(), dlaunch::comm::StoreError::Cause::kPeerUnproven) << e.what();
      EXPECT_EQ(e.kind(), dlaunch::comm::ErrorKind::kUsage);
      const std::string what = e.what();
      EXPECT_NE(what.find("could not prove that it knows the job's secret"), std::string::npos)
          << what;
      // The impostor is this test's own thread: the kernel says who holds it.
      EXPECT_NE(what.find("pid " + std::to_string(::getpid())), std::string::npos) << what;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // not retried
  }
  // Its nonce and nothing else: no proof of the client's, no request.
  EXPECT_EQ(received.size(), 32u);
}

// A relay between a client and the real store (an impostor at the job's
// address that forwards the handshake both ways) gets a connection the store
// accepted, and can still say nothing on it: every frame is tagged with a key
// of that handshake, which the relay never sees. A frame of its own, or one
// of the client's sent twice, closes the connection and changes nothing.
TEST(StoreMutualAuth, ARelayedHandshakeLetsTheRelayNeitherInjectNorReplay) {
  namespace d = dlaunch::comm::detail;
  dlaunch::comm::ThreadedStoreServer real(server_options());
  for (const bool replay : {false, true}) {
    // The relay's verdict, from its thread: set once, waited for.
    std::promise<std::string> verdict;
    std::future<std::string> relay_saw = verdict.get_future();
    ScriptedPeer relay([&](int client) {
      RawClient upstream(real.port());
      write_all(client, upstream.greeting());  // the real store's nonce
      const std::string nc = read_n(client, d::kNonceBytes);
      upstream.send(nc);
      write_all(client, *upstream.read(d::kMacBytes));  // the real store's proof
      upstream.send(read_n(client, d::kMacBytes));      // the client's proof
      // The acceptance: header, 25 bytes, tag.
      write_all(client, *upstream.read(4 + 25 + d::kTagBytes));
      // The client's first request, an add("n", 1): forwarded.
      const std::string header = read_n(client, 4);
      const std::string request =
          header + read_n(client, d::frame_length(header.data()) + d::kTagBytes);
      upstream.send(request);
      write_all(client, *upstream.read(4 + 9 + d::kTagBytes));  // its answer, to the client
      if (replay) {
        upstream.send(request);  // the same frame again
      } else {
        const std::string mine = Writer(uint8_t(d::Op::set)).str("owned").str("by-relay").finish();
        upstream.send(mine + std::string(d::kTagBytes, 't'));
      }
      verdict.set_value(upstream.hung_up_silently() ? "closed" : "served");
    });
    dlaunch::comm::Store victim(client_options(relay.port()));
    EXPECT_EQ(victim.add("n", 1), 1);
    // The relay's own request, or the replay, was not served.
    dlaunch::comm::Store bystander(client_options(real.port()));
    ASSERT_EQ(relay_saw.wait_for(5s), std::future_status::ready)
        << (replay ? "replay" : "injection");
    EXPECT_EQ(relay_saw.get(), "closed") << (replay ? "replay" : "injection");
    EXPECT_FALSE(bystander.check({"owned"}));
    EXPECT_EQ(bystander.add("n", 0), 1);  // the replayed add counted nothing
    bystander.delete_key("n");
  }
}

// The client trusts no length from the wire: an answer announced over its
// limit fails the call at once, and one within the limit that does not come
// costs the client only what arrived, not what the header promised.
TEST(StoreMutualAuth, AnAnswerLengthFromTheWireIsBoundedAndNeverAllocatedAhead) {
  namespace d = dlaunch::comm::detail;
  for (const uint32_t announced : {0xFFFFFF00u, 512u << 20}) {
    ScriptedPeer hostile(
        knowing_store(store_test::kSecret, [&](int fd, d::FrameTagger&, d::FrameTagger&) {
          const std::string header = read_n(fd, 4);
          read_n(fd, d::frame_length(header.data()) + d::kTagBytes);
          std::string answer(4, '\0');
          for (int i = 0; i < 4; ++i) answer[i] = static_cast<char>(announced >> (8 * i));
          write_all(fd, answer + std::string(10, 'x'));
          read_n(fd, 1);  // until the client hangs up
        }));
    auto o = client_options(hostile.port());
    o.max_answer_bytes = 256 << 20;
    o.timeout = 1s;
    dlaunch::comm::Store s(o);
    const size_t before = resident_bytes();
    try {
      (void)s.num_keys();
      ADD_FAILURE() << "an answer of " << announced << " bytes was accepted";
    } catch (const dlaunch::comm::StoreError& e) {
      const std::string what = e.what();
      if (announced > o.max_answer_bytes) {
        EXPECT_NE(what.find("over this client's limit"), std::string::npos) << what;
      } else {
        EXPECT_NE(what.find("timed out"), std::string::npos) << what;
      }
    }
    EXPECT_LT(resident_bytes(), before + (64u << 20)) << "announced " << announced;
  }
}
