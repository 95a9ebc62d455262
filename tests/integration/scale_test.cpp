// Jobs wider than the head's descriptor limit: dlaunch counts what it needs
// (one socket per SSH node, two pipe ends per local node) and refuses before
// it connects anything, with a message that says how to raise the limit.
// The limit is set with util-linux's prlimit (skips without it). The hosts
// are loopback addresses: one port where the test listens (so a connection,
// had dlaunch made one, would be seen), the rest where nothing listens.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "support.h"

using namespace dltest;

namespace {

std::string find_prlimit() {
  for (const char* p : {"/usr/bin/prlimit", "/bin/prlimit"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return {};
}

// A TCP listener on 127.0.0.1 that never accepts: a connection shows as a
// pending one (readable).
class Listener {
 public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("cannot listen on 127.0.0.1");
    }
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd_); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  int port() const { return port_; }
  bool connected(int wait_ms) const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, wait_ms) == 1;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// n SSH hosts on `port`: 127.0.0.1 (the listener) first, then 127.3.0.x,
// where nothing listens.
std::string ssh_hosts(int n, int port) {
  std::string y = "defaults: {transport: ssh, port: " + std::to_string(port) + "}\nhosts:\n";
  y += "  - 127.0.0.1\n";
  for (int i = 1; i < n; ++i) {
    y += "  - 127.3." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1) + "\n";
  }
  return temp_file(y, ".yaml");
}

class Scale : public ::testing::Test {
 protected:
  void SetUp() override {
    prlimit_ = find_prlimit();
    if (prlimit_.empty()) GTEST_SKIP() << "prlimit (util-linux) not installed";
  }
  // dlaunch without the machine's ssh config (-F none): no SSH login ever
  // gets that far here, and none may change what is connected to.
  static std::vector<std::string> cmd(std::vector<std::string> args) {
    args.insert(args.begin(), {"-F", "none"});
    return dlaunch_cmd(std::move(args));
  }
  // dlaunch under a descriptor limit of `nofile` (soft and hard).
  std::vector<std::string> limited(int nofile, std::vector<std::string> args) const {
    auto cmd = Scale::cmd(std::move(args));
    const std::string lim = std::to_string(nofile);
    cmd.insert(cmd.begin(), {prlimit_, "--nofile=" + lim + ":" + lim, "--"});
    return cmd;
  }
  static std::vector<std::string> env() { return {"SSH_AUTH_SOCK="}; }

  std::string prlimit_;
};

TEST_F(Scale, MoreSshNodesThanDescriptorsIsRefusedBeforeAnyConnection) {
  Listener l;
  const auto hf = ssh_hosts(100, l.port());
  auto r =
      run(limited(64, {"-H", hf, "--connect-timeout", "2", "--wdir", "/tmp", "true"}), 30, env());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("dlaunch: error: this job needs about"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("100 SSH node(s) x 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("limit of 64 open files"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ulimit -n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/etc/security/limits.conf"), std::string::npos) << r.err;
  // The refusal is all it printed: no connection was tried.
  EXPECT_EQ(r.err.find("cannot connect"), std::string::npos) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1U) << r.err;
  EXPECT_FALSE(l.connected(0)) << "dlaunch connected to the listening host";
  EXPECT_LT(r.seconds, 5.0);
}

TEST_F(Scale, TheSameHostsUnderTheUsualLimitAreConnectedTo) {
  // The control: what the refusal prevents does happen without it.
  Listener l;
  const auto hf = ssh_hosts(100, l.port());
  Process p(cmd({"-H", hf, "--connect-timeout", "1", "--wdir", "/tmp", "true"}), env());
  EXPECT_TRUE(l.connected(20000));
  auto r = p.finish(60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.find("open files"), std::string::npos) << r.err;
}

TEST_F(Scale, AJobThatFitsUnderALowLimitIsNotRefused) {
  Listener l;
  const auto hf = ssh_hosts(10, l.port());
  auto r =
      run(limited(64, {"-H", hf, "--connect-timeout", "1", "--wdir", "/tmp", "true"}), 60, env());
  EXPECT_EQ(r.exit_code, 1) << r.err;  // the hosts are not SSH servers
  EXPECT_EQ(r.err.find("open files"), std::string::npos) << r.err;
  EXPECT_TRUE(l.connected(0));
}

TEST_F(Scale, MoreLocalNodesThanDescriptorsIsRefusedBeforeAnyAgentStarts) {
  std::string y = "hosts:\n";
  for (int i = 0; i < 40; ++i) y += "  - {host: localhost, name: n" + std::to_string(i) + "}\n";
  const auto hf = temp_file(y, ".yaml");
  const auto job = unique_job_id("fdlocal");
  auto r = run(limited(64, {"-H", hf, "--job-id", job, "echo", "started"}), 30, env());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("40 local or Slurm node(s) x 2"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(job_processes(job).empty());
}

}  // namespace
