// The per-node rendezvous against a hostile local user and a hostile peer
// (issue 27, items 1 and 4). Played for real: as root (CI) the squatter is a
// process of an unprivileged user the test creates, bound to the job's port
// before the launchers start, or the moment the launcher that hosted the
// rendezvous is killed. It greets every connection as a store of this
// release would and, since it cannot prove the secret, sends a made-up
// proof; it records every byte each connection sent after its nonce. The
// launchers must never join it: they stop with an error that names it, no
// rank runs, and nobody gives it a proof.
//
// The open rendezvous (no secret, torchrun's own command line) has no proof
// to ask for: there the launchers must check every value they read, and a
// store that holds a bad one (played by the test, as a peer on the network
// could) is refused with the value shown escaped.
#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/store.h"
#include "support.h"

using namespace dltest;
using namespace std::chrono_literals;

namespace {

constexpr const char* kAttacker = "dlaunch-attacker";
// 32 characters: a secret as `openssl rand -hex 16` makes one.
const std::vector<std::string> kEnv = {"DLAUNCH_RDZV_SECRET=0123456789abcdef0123456789abcdef"};
// launcher/drivers/pernode.h's kOpenRendezvousKey: the public key of a
// rendezvous with no secret (pinned here: it is part of the wire protocol).
constexpr const char* kOpenKey = "dlaunch-open-rendezvous-no-secret";

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot find a free port on 127.0.0.1");
  return ntohs(a.sin_port);
}

bool attacker_ids(uid_t& uid, gid_t& gid, std::string& why) {
  if (::geteuid() != 0) {
    why = "needs root, to create the attacking user and run a root job";
    return false;
  }
  if (::getpwnam(kAttacker) == nullptr) {
    auto r = run(
        {"useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", kAttacker}, 30);
    if (r.exit_code != 0) {
      why = "cannot create user " + std::string(kAttacker) + ": " + r.err;
      return false;
    }
  }
  const passwd* pw = ::getpwnam(kAttacker);
  if (pw == nullptr) {
    why = "user " + std::string(kAttacker) + " missing after useradd";
    return false;
  }
  uid = pw->pw_uid;
  gid = pw->pw_gid;
  return true;
}

// The attacker's fake store on 127.0.0.1:port, in a child process running as
// the attacking user. It binds as soon as it can (spinning until the port is
// free), greets each connection as a version-3 store, reads the client's
// nonce, answers a made-up proof, and reports how many more bytes that
// connection sent before it closed ("conn N extra M").
class Squatter {
 public:
  Squatter(uid_t uid, gid_t gid, int port) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 ||
          ::setresuid(uid, uid, uid) != 0) {
        ::_exit(3);
      }
      serve(fds[1], port);
      ::_exit(0);
    }
    ::close(fds[1]);
    out_ = fds[0];
  }
  Squatter(const Squatter&) = delete;
  Squatter& operator=(const Squatter&) = delete;
  ~Squatter() { stop(); }

  // Blocks until the squatter holds the port (or the timeout).
  bool wait_bound(double timeout_s) {
    return read_until([](const std::string& s) { return s.find("bound\n") != std::string::npos; },
                      timeout_s);
  }
  // Stops it; returns everything it reported. The launchers may have ended
  // before the squatter got to run and tell its connections (a loaded
  // machine): it is given until its first one is told, and a moment for the
  // rest, before it is killed.
  std::string stop() {
    if (pid_ > 0) {
      read_until([](const std::string& s) { return s.find("conn 0 extra") != std::string::npos; },
                 10);
      read_until([](const std::string&) { return false; }, 0.3);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      read_until([](const std::string&) { return false; }, 0.5);
      ::close(out_);
    }
    return log_;
  }

 private:
  static void say(int fd, const std::string& s) { (void)::write(fd, s.data(), s.size()); }

  static void serve(int report, int port) {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const auto give_up = std::chrono::steady_clock::now() + 120s;
    while (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      if (std::chrono::steady_clock::now() > give_up) ::_exit(4);
      std::this_thread::sleep_for(200us);
    }
    ::listen(s, 64);
    say(report, "bound\n");
    for (int n = 0;; ++n) {
      const int c = ::accept(s, nullptr, nullptr);
      if (c < 0) continue;
      const std::string greeting = "DLSTORE3" + std::string(32, 'n');
      (void)::send(c, greeting.data(), greeting.size(), MSG_NOSIGNAL);
      char buf[4096];
      size_t got = 0;
      size_t extra = 0;
      bool proved = false;
      for (;;) {
        pollfd p{c, POLLIN, 0};
        if (::poll(&p, 1, 5000) <= 0) break;
        const ssize_t r = ::recv(c, buf, sizeof buf, 0);
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; ++i, ++got) {
          if (got >= 32) ++extra;
        }
        if (got >= 32 && !proved) {
          const std::string proof(32, 'p');  // made up: it has no secret
          (void)::send(c, proof.data(), proof.size(), MSG_NOSIGNAL);
          proved = true;
        }
      }
      ::close(c);
      say(report, "conn " + std::to_string(n) + " extra " + std::to_string(extra) + "\n");
    }
  }

  bool read_until(const std::function<bool(const std::string&)>& done, double timeout_s) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (!done(log_)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[1024];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) return done(log_);
      log_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::string log_;
};

// What the squatter saw: connections, and whether any sent more than its nonce.
void expect_only_nonces(const std::string& log) {
  EXPECT_NE(log.find("conn 0 extra"), std::string::npos) << "nobody connected:\n" << log;
  EXPECT_EQ(log.find("extra "), log.find("extra 0")) << log;
  for (const auto& line : lines_of(log)) {
    if (line.rfind("conn ", 0) == 0) {
      EXPECT_NE(line.find(" extra 0"), std::string::npos) << line;
    }
  }
}

std::vector<std::string> static_launcher(int nnodes, int rank, int port, const std::string& job,
                                         const std::vector<std::string>& program) {
  std::vector<std::string> args = {
      "--nnodes",      std::to_string(nnodes), "--nproc-per-node", "1",
      "--node-rank",   std::to_string(rank),   "--master-addr",    "127.0.0.1",
      "--master-port", std::to_string(port),   "--rdzv-id",        job,
      "--rdzv-conf",   "join_timeout=20"};
  args.insert(args.end(), program.begin(), program.end());
  return dlaunch_cmd(args);
}

std::vector<std::string> c10d_launcher(const std::string& nnodes, int port, const std::string& job,
                                       const std::vector<std::string>& program,
                                       const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {"--nnodes",
                                   nnodes,
                                   "--nproc-per-node",
                                   "1",
                                   "--rdzv-backend",
                                   "c10d",
                                   "--rdzv-endpoint",
                                   "127.0.0.1:" + std::to_string(port),
                                   "--rdzv-id",
                                   job,
                                   "--rdzv-conf",
                                   "join_timeout=20,last_call_timeout=1",
                                   "--heartbeat-timeout",
                                   "4",
                                   "--kill-grace",
                                   "1"};
  args.insert(args.end(), more.begin(), more.end());
  args.insert(args.end(), program.begin(), program.end());
  return dlaunch_cmd(args);
}

// Every launcher stopped, refusing the squatter by name; nothing ran.
void expect_refused(const std::vector<RunResult>& rs, const std::string& marker) {
  for (const auto& r : rs) {
    EXPECT_NE(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("not this job's rendezvous"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(std::string("held by user ") + kAttacker), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(marker)) << "a rank ran under the squatter";
}

}  // namespace

TEST(RendezvousSquat, AStaticEndpointTakenBeforeTheJobIsNeverJoined) {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string why;
  if (!attacker_ids(uid, gid, why)) GTEST_SKIP() << why;
  const int port = free_port();
  Squatter squatter(uid, gid, port);
  ASSERT_TRUE(squatter.wait_bound(10));
  const auto job = unique_job_id("squat-static");
  const std::string marker = temp_dir("squat") + "/ran";
  const std::vector<std::string> program = {"sh", "-c", "touch " + marker};
  Process n0(static_launcher(2, 0, port, job, program), kEnv);
  Process n1(static_launcher(2, 1, port, job, program), kEnv);
  const std::vector<RunResult> rs = {n0.finish(30), n1.finish(30)};
  for (const auto& r : rs) EXPECT_EQ(r.exit_code, 2) << r.err;
  expect_refused(rs, marker);
  expect_only_nonces(squatter.stop());
}

TEST(RendezvousSquat, AC10dEndpointTakenBeforeTheJobIsNeverJoined) {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string why;
  if (!attacker_ids(uid, gid, why)) GTEST_SKIP() << why;
  const int port = free_port();
  Squatter squatter(uid, gid, port);
  ASSERT_TRUE(squatter.wait_bound(10));
  const auto job = unique_job_id("squat-c10d");
  const std::string marker = temp_dir("squat") + "/ran";
  const std::vector<std::string> program = {"sh", "-c", "touch " + marker};
  Process a(c10d_launcher("2", port, job, program), kEnv);
  Process b(c10d_launcher("2", port, job, program), kEnv);
  const std::vector<RunResult> rs = {a.finish(30), b.finish(30)};
  expect_refused(rs, marker);
  expect_only_nonces(squatter.stop());
}

// The launcher hosting the rendezvous of an elastic job is SIGKILLed and the
// squatter, spinning on bind, takes the freed port within a millisecond,
// long before any survivor could host it anew. The survivors try the old
// endpoint first: they must pass it over, never take it for the old host
// back, and never restart a rank under it.
TEST(RendezvousSquat, TheEndpointTakenAfterTheHostIsLostIsNeverJoined) {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string why;
  if (!attacker_ids(uid, gid, why)) GTEST_SKIP() << why;
  const int port = free_port();
  const auto job = unique_job_id("squat-takeover");
  const std::vector<std::string> program = {
      "sh", "-c", "echo rank $RANK restart $TORCHELASTIC_RESTART_COUNT; sleep 60"};
  std::vector<std::unique_ptr<Process>> ls;
  ls.reserve(3);
  for (int i = 0; i < 3; ++i) {
    ls.push_back(std::make_unique<Process>(
        c10d_launcher("2:3", port, job, program, {"--max-restarts", "1"}), kEnv));
  }
  for (auto& l : ls) {
    ASSERT_TRUE(l->wait_for_output(
        [](const std::string& o) { return o.find("restart 0") != std::string::npos; }, 30));
  }
  // Which one hosts says so in its banner.
  int host = -1;
  for (int i = 0; i < 3 && host < 0; ++i) {
    ls[i]->wait_for_stderr(
        [&](const std::string& e) {
          if (e.find("hosting the rendezvous") != std::string::npos) host = i;
          return true;
        },
        0.1);
  }
  ASSERT_GE(host, 0);
  Squatter squatter(uid, gid, port);  // spins until the port is free
  ls[static_cast<size_t>(host)]->signal(SIGKILL);
  ASSERT_TRUE(squatter.wait_bound(10));
  for (int i = 0; i < 3; ++i) {
    if (i == host) continue;
    const RunResult r = ls[static_cast<size_t>(i)]->finish(60);
    EXPECT_NE(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("answers again"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("restart 1"), std::string::npos) << "a rank restarted:\n" << r.out;
    EXPECT_NE(r.err.find("not this job's rendezvous"), std::string::npos) << r.err;
  }
  const std::string log = squatter.stop();
  EXPECT_EQ(log.find("extra "), log.find("extra 0")) << log;
  for (const auto& line : lines_of(log)) {
    if (line.rfind("conn ", 0) == 0) {
      EXPECT_NE(line.find(" extra 0"), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(wait_job_gone(job, 10).empty());
}

namespace {

// A store the test holds at 127.0.0.1:port with the open rendezvous's key
// (anyone can, as a peer on the network could), with `keys` set before any
// launcher comes.
std::unique_ptr<dlaunch::comm::ThreadedStoreServer> hostile_open_store(
    int port, std::vector<std::pair<std::string, std::string>> keys) {
  dlaunch::comm::StoreServerOptions so;
  so.bind_address = "127.0.0.1";
  so.port = static_cast<uint16_t>(port);
  so.secret = kOpenKey;
  so.initial_keys = std::move(keys);
  return std::make_unique<dlaunch::comm::ThreadedStoreServer>(so);
}

}  // namespace

// An open rendezvous: node 0's "launcher" (the test) publishes a MASTER_ADDR
// with a terminal escape sequence, or a port that is no number. Node 1 must
// refuse it, show it escaped, and start nothing.
TEST(RendezvousValues, AHostileMasterAddressOrPortIsRefusedAndShownEscaped) {
  const struct {
    std::string master;
    std::string shown;  // how the refusal shows it
  } cases[] = {
      {"\x1b]0;owned\x07"
       "10.0.0.1\n29500",
       "\\e]0;owned\\x0710.0.0.1\\n29500"},
      {"127.0.0.1\nnot-a-port", "127.0.0.1\\nnot-a-port"},
      {"127.0.0.1\n99999999", "127.0.0.1\\n99999999"},
  };
  for (const auto& c : cases) {
    const int port = free_port();
    const auto job = unique_job_id("hostile-master");
    const std::string marker = temp_dir("hostile") + "/ran";
    // Node 0 (the test) says its store is where it met the launcher.
    auto store = hostile_open_store(port, {{"dlaunch/rdzv/r0/static/0", "node0 pid 1"},
                                           {"dlaunch/rdzv/store_port", std::to_string(port)},
                                           {"dlaunch/rdzv/r0/master", c.master}});
    const RunResult r = run(static_launcher(2, 1, port, job, {"sh", "-c", "touch " + marker}), 30,
                            {"DLAUNCH_RDZV_SECRET="});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("malformed value at dlaunch/rdzv/r0/master: " + c.shown),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "a raw escape reached the console";
    EXPECT_NE(r.err.find("is open: no secret was given"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(marker)) << "a rank ran";
  }
}

// Issue 27 item 4: a static rendezvous listens on --master-addr, not on every
// address of the machine.
TEST(RendezvousValues, AStaticRendezvousListensOnTheMasterAddressOnly) {
  const int port = free_port();
  const auto job = unique_job_id("bind-master");
  Process n0(static_launcher(2, 0, port, job, {"true"}), kEnv);
  // Node 0 waits for node 1 in the rendezvous: its socket is listening.
  std::string listening;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  char hex_port[8];
  std::snprintf(hex_port, sizeof hex_port, ":%04X", port);
  while (listening.empty() && std::chrono::steady_clock::now() < deadline) {
    std::ifstream tcp("/proc/net/tcp");
    std::string line;
    while (std::getline(tcp, line)) {
      // sl local_address rem_address st ...: st 0A is LISTEN.
      std::istringstream in(line);
      std::string sl, local, remote, st;
      in >> sl >> local >> remote >> st;
      if (st == "0A" && local.size() > 5 && local.substr(local.size() - 5) == hex_port)
        listening = local;
    }
    if (listening.empty()) std::this_thread::sleep_for(50ms);
  }
  n0.signal(SIGTERM);
  n0.finish(20);
  EXPECT_EQ(listening, std::string("0100007F") + hex_port)  // 127.0.0.1, not 0.0.0.0
      << "listening on " << listening;
}
