// The bastion test bed (tests/testbed/bastion.sh), checked with OpenSSH and
// the kernel rather than with dlaunch: a later test that fails on it must be
// able to blame dlaunch. One bed of three nodes for the suite:
//   - each alias of the user's ssh config (ProxyJump bastion) reaches its own
//     node, through the bastion, and the ProxyCommand variant does too;
//   - the head has no route to the private network: a connect fails at once
//     with "unreachable" (so no test traffic leaves the machine), while the
//     nodes reach each other and the bastion, and not the head;
//   - a node's sessions see an empty build folder, the rest of the file
//     system as it is; every host has a decoy docker0 (172.17.0.1/16);
//   - a changed host key behind the bastion is refused;
// and, in a suite of its own, that two beds coexist on their own subnets and
// that stop leaves no namespace, bridge, veth, route or process behind.
// Skips (with the reason) unless root with ip, unshare and OpenSSH's client
// and server; fails if the bed cannot start where it could.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kBed = std::string(SOURCE_DIR) + "/tests/testbed/bastion.sh";
const std::string kBuildDir = BUILD_DIR;
constexpr int kNodes = 3;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool on_path(const std::string& tool) {
  std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin";
  std::istringstream dirs(path);
  for (std::string d; std::getline(dirs, d, ':');) {
    if (!d.empty() && ::access((d + "/" + tool).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Why no bed can run here ("" when one can).
std::string why_no_bed() {
  if (::geteuid() != 0) return "needs root: the bastion bed is network namespaces";
  for (const char* tool : {"ip", "unshare", "ssh", "ssh-keygen", "sshd"}) {
    if (!on_path(tool))
      return std::string("needs ") + tool + " (iproute2, util-linux, OpenSSH client and server)";
  }
  return "";
}

// A process that is gone or a zombie (whose parent, not us, must reap it).
bool alive(pid_t p) {
  const auto s = slurp("/proc/" + std::to_string(p) + "/stat");
  const auto close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() && s[close + 2] != 'Z' &&
         s[close + 2] != 'X';
}

// A bed started in DIR: what it wrote to bed.env and nodes.
struct Node {
  int k = 0;
  std::string ns, addr, alias;
};
struct Bed {
  std::string dir;
  std::map<std::string, std::string> env;
  std::vector<Node> nodes;
  double start_seconds = 0;

  std::string config() const { return dir + "/ssh_config"; }
  std::string at(const std::string& key) const {
    const auto it = env.find(key);
    return it == env.end() ? "" : it->second;
  }
};

// Starts a bed of n nodes in dir; "" or what went wrong.
std::string start_bed(Bed& bed, const std::string& dir, int n) {
  bed.dir = dir;
  auto r = run({kBed, "start", dir, std::to_string(n), kBuildDir}, 60);
  bed.start_seconds = r.seconds;
  if (r.exit_code != 0)
    return "bastion.sh start failed (exit " + std::to_string(r.exit_code) + "): " + r.err;
  std::istringstream env(slurp(dir + "/bed.env"));
  for (std::string line; std::getline(env, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) bed.env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  std::istringstream nodes(slurp(dir + "/nodes"));
  for (Node node; nodes >> node.k >> node.ns >> node.addr >> node.alias;) bed.nodes.push_back(node);
  if (static_cast<int>(bed.nodes.size()) != n || bed.at("BED_NET_B").empty())
    return "bastion.sh did not write bed.env and nodes";
  return "";
}

std::string bed_dir(const std::string& tag) {
  return (fs::temp_directory_path() / ("dlaunch-bastion-" + std::to_string(::getpid()) + "-" + tag))
      .string();
}

// The user's keys and known_hosts are the bed's (its ssh_config names them);
// no agent of the machine's.
std::vector<std::string> ssh_env(const Bed& /*bed*/) { return {"SSH_AUTH_SOCK="}; }

std::vector<std::string> ssh_argv(const std::string& config, const std::string& alias,
                                  const std::string& command,
                                  const std::vector<std::string>& options = {}) {
  std::vector<std::string> argv{
      "ssh", "-F", config, "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"};
  for (const auto& o : options) {
    argv.emplace_back("-o");
    argv.push_back(o);
  }
  argv.push_back(alias);
  argv.push_back(command);
  return argv;
}

// connect() from the head to addr:port: 0, or the errno it failed with.
// Non-blocking, so that a test never waits on a route it did not expect.
int connect_errno(const std::string& addr, int port, double* seconds) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  const auto t0 = Clock::now();
  int err = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      // Wait up to 2 s for the answer.
      fd_set w;
      FD_ZERO(&w);
      FD_SET(fd, &w);
      timeval tv{2, 0};
      if (::select(fd + 1, nullptr, &w, nullptr, &tv) == 1) {
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
  }
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  return err;
}

// DIR/config: the bed's ssh config with a known-hosts file of its own
// (DIR/known_hosts) in which gpu-2 is recorded with another key: a man in the
// middle on the private network, or a reinstalled node.
void write_changed_key_config(const Bed& b, const fs::path& dir) {
  fs::create_directories(dir);
  const auto other = dir / "other_key";
  ASSERT_EQ(run({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other.string()}).exit_code,
            0);
  const auto other_key = words(slurp(other.string() + ".pub"));
  const auto& gpu2 = b.nodes.at(1);
  std::string known;
  std::istringstream in(slurp(b.dir + "/home/.ssh/cluster_known_hosts"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(gpu2.addr + " ", 0) == 0)
      line = gpu2.addr + " " + other_key.at(0) + " " + other_key.at(1);
    known += line + "\n";
  }
  std::ofstream(dir / "known_hosts") << known;
  auto config = slurp(b.config());
  const std::string good = b.dir + "/home/.ssh/cluster_known_hosts";
  config.replace(config.find(good), good.size(), (dir / "known_hosts").string());
  std::ofstream(dir / "config") << config;
}

class BastionBed : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto why = why_no_bed();
    if (!why.empty()) {
      skip_ = new std::string(why);
      return;
    }
    remove_stale_beds("dlaunch-bastion-", kBed);
    bed_ = new Bed;
    const auto err = start_bed(*bed_, bed_dir("suite"), kNodes);
    if (!err.empty()) {
      broken_ = new std::string(err);
      return;
    }
    std::printf("bastion bed: %d nodes started in %.2f s (bed %s)\n", kNodes, bed_->start_seconds,
                bed_->at("BED_INDEX").c_str());
  }
  static void TearDownTestSuite() {
    if (bed_ != nullptr) {
      run({kBed, "stop", bed_->dir}, 60);
      std::error_code ignored;  // a daemon may still be removing its own files
      fs::remove_all(bed_->dir, ignored);
    }
  }
  void SetUp() override {
    if (skip_ != nullptr) GTEST_SKIP() << *skip_;
    if (broken_ != nullptr) FAIL() << *broken_;
  }

  static const Bed& bed() { return *bed_; }
  static RunResult ssh(const std::string& alias, const std::string& command,
                       const std::string& config = "") {
    return run(ssh_argv(config.empty() ? bed().config() : config, alias, command), 30,
               ssh_env(bed()));
  }
  static RunResult bed_exec(const std::string& host, const std::string& script) {
    return run({kBed, "exec", bed().dir, host, "bash", "-c", script}, 30);
  }

  static std::string* skip_;
  static std::string* broken_;
  static Bed* bed_;
};

std::string* BastionBed::skip_ = nullptr;
std::string* BastionBed::broken_ = nullptr;
Bed* BastionBed::bed_ = nullptr;

}  // namespace

TEST_F(BastionBed, TheUserSideIsAConfigWithAliasesAKeyOfItsOwnAndItsOwnKnownHosts) {
  const auto ssh_dir = fs::path(bed().dir) / "home/.ssh";
  for (const char* name : {"cluster_key", "cluster_key.pub", "cluster_known_hosts"})
    EXPECT_TRUE(fs::exists(ssh_dir / name)) << name;
  EXPECT_TRUE(fs::exists(bed().config()));
  // Nothing works by accident through OpenSSH's default key names.
  for (const auto& e : fs::directory_iterator(ssh_dir))
    EXPECT_NE(e.path().filename().string().rfind("id_", 0), 0u) << e.path();
  const auto config = slurp(bed().config());
  EXPECT_NE(config.find("Host bastion\n  HostName " + bed().at("BED_BASTION") + "\n"),
            std::string::npos)
      << config;
  EXPECT_NE(config.find("IdentityFile " + ssh_dir.string() + "/cluster_key\n"), std::string::npos);
  EXPECT_NE(config.find("IdentitiesOnly yes\n"), std::string::npos);
  EXPECT_NE(config.find("UserKnownHostsFile " + ssh_dir.string() + "/cluster_known_hosts\n"),
            std::string::npos);
  EXPECT_EQ(config.find('~'), std::string::npos)
      << "ssh and dlaunch expand ~ from passwd, not $HOME";
  // Known hosts under the names OpenSSH checks: the HostName, a private
  // address for a node behind the jump host.
  const auto known = slurp((ssh_dir / "cluster_known_hosts").string());
  EXPECT_NE(known.find(bed().at("BED_BASTION") + " ssh-ed25519 "), std::string::npos) << known;
  for (const auto& n : bed().nodes) {
    EXPECT_EQ(n.alias, "gpu-" + std::to_string(n.k));
    EXPECT_NE(config.find("Host " + n.alias + "\n  HostName " + n.addr + "\n  ProxyJump bastion\n"),
              std::string::npos)
        << config;
    EXPECT_NE(known.find(n.addr + " ssh-ed25519 "), std::string::npos) << known;
  }
}

TEST_F(BastionBed, EachAliasAnswersFromItsOwnPrivateAddressThroughTheBastion) {
  std::vector<std::unique_ptr<Process>> logins;
  for (const auto& n : bed().nodes) {
    logins.push_back(std::make_unique<Process>(
        ssh_argv(bed().config(), n.alias, "hostname; hostname -I; echo $SSH_CONNECTION"),
        ssh_env(bed())));
  }
  for (std::size_t i = 0; i < logins.size(); ++i) {
    const auto& n = bed().nodes[i];
    const auto r = logins[i]->finish(30);
    ASSERT_EQ(r.exit_code, 0) << n.alias << ": " << r.err;
    const auto lines = lines_of(r.out);
    ASSERT_EQ(lines.size(), 3u) << r.out;
    EXPECT_EQ(lines[0], n.alias);
    const auto addrs = words(lines[1]);
    EXPECT_TRUE(contains(addrs, n.addr)) << lines[1];
    EXPECT_TRUE(contains(addrs, "172.17.0.1")) << "the decoy docker0: " << lines[1];
    for (const auto& other : bed().nodes) {
      if (other.k == n.k) continue;
      EXPECT_FALSE(contains(addrs, other.addr)) << lines[1];
    }
    // SSH_CONNECTION: client address, port, server address, port. The client
    // is the bastion's leg on the private network.
    const auto conn = words(lines[2]);
    ASSERT_EQ(conn.size(), 4u) << lines[2];
    EXPECT_EQ(conn[0], bed().at("BED_BASTION_B"));
    EXPECT_EQ(conn[2], n.addr);
    EXPECT_EQ(conn[3], "22");
  }
}

TEST_F(BastionBed, TheProxyCommandVariantReachesANodeThroughTheBastionToo) {
  const auto r =
      ssh("gpu-2", "hostname; echo $SSH_CONNECTION", bed().dir + "/ssh_config.proxycommand");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0], "gpu-2");
  EXPECT_EQ(words(lines[1]).at(0), bed().at("BED_BASTION_B"));
  EXPECT_NE(slurp(bed().dir + "/ssh_config.proxycommand")
                .find("ProxyCommand ssh -F " + bed().dir +
                      "/ssh_config.proxycommand -W %h:%p "
                      "bastion\n"),
            std::string::npos);
}

TEST_F(BastionBed, TheHeadReachesTheBastionButHasNoRouteToThePrivateNetwork) {
  // The route first: without it, the connects below would go out of the machine.
  const auto route = run({"ip", "route", "show", bed().at("BED_NET_B")});
  ASSERT_EQ(trim(route.out), "unreachable " + bed().at("BED_NET_B")) << route.err;
  const auto br = run({"ip", "-o", "addr", "show", "dev", bed().at("BED_BRIDGE_B")});
  ASSERT_EQ(br.exit_code, 0) << br.err;
  EXPECT_EQ(br.out.find("inet"), std::string::npos) << "bridge B has an address: " << br.out;

  double s = 0;
  const int to_bastion = connect_errno(bed().at("BED_BASTION"), 22, &s);
  EXPECT_EQ(to_bastion, 0) << std::strerror(to_bastion);
  for (const auto& n : bed().nodes) {
    const int err = connect_errno(n.addr, 22, &s);
    EXPECT_EQ(err, EHOSTUNREACH) << n.addr << ": " << std::strerror(err);
    EXPECT_LT(s, 0.5) << n.addr;
  }
  // The bastion's private leg too.
  EXPECT_EQ(connect_errno(bed().at("BED_BASTION_B"), 22, &s), EHOSTUNREACH);
}

TEST_F(BastionBed, NodesReachEachOtherAndTheBastionButNotTheHead) {
  std::string targets;
  for (const auto& n : bed().nodes) targets += n.addr + " ";
  targets += bed().at("BED_BASTION_B") + " " + bed().at("BED_HEAD");
  const std::string script = "for a in " + targets +
                             "; do if (exec 3<>/dev/tcp/$a/22) 2>/dev/null; then echo $a open; "
                             "else echo $a closed; fi; done";
  for (const auto& from : bed().nodes) {
    const auto r = bed_exec(std::to_string(from.k), script);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string expected;
    for (const auto& n : bed().nodes) expected += n.addr + " open\n";
    expected += bed().at("BED_BASTION_B") + " open\n" + bed().at("BED_HEAD") + " closed\n";
    EXPECT_EQ(r.out, expected) << "from " << from.alias;
  }
}

TEST_F(BastionBed, ANodeSessionSeesAnEmptyBuildFolderAndTheRestOfTheFileSystem) {
  ASSERT_TRUE(fs::exists(kBuildDir + "/CMakeCache.txt")) << "the head sees the build folder";
  const auto r = ssh(
      "gpu-3", "ls -A " + kBuildDir + "; echo ---; ls " + SOURCE_DIR + "/tests/testbed/bastion.sh");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "---\n" + std::string(SOURCE_DIR) + "/tests/testbed/bastion.sh\n");
  // While the node's namespace, as the head uses it, sees the build folder.
  const auto e = bed_exec("3", "ls " + kBuildDir + "/CMakeCache.txt");
  EXPECT_EQ(e.exit_code, 0) << e.err;
}

TEST_F(BastionBed, EveryHostHasADecoyDocker0Up) {
  std::vector<std::string> hosts{"bastion"};
  for (const auto& n : bed().nodes) hosts.push_back(std::to_string(n.k));
  for (const auto& h : hosts) {
    const auto r = bed_exec(h, "ip -4 -o addr show dev docker0; ip -o link show docker0");
    ASSERT_EQ(r.exit_code, 0) << h << ": " << r.err;
    EXPECT_NE(r.out.find("inet 172.17.0.1/16"), std::string::npos) << h << ": " << r.out;
    EXPECT_NE(r.out.find(",UP"), std::string::npos) << h << ": " << r.out;
  }
}

TEST_F(BastionBed, AChangedHostKeyBehindTheBastionIsRefused) {
  const auto dir = fs::path(bed().dir) / "changed-key";
  write_changed_key_config(bed(), dir);
  Process changed(
      ssh_argv((dir / "config").string(), "gpu-2", "echo reached", {"StrictHostKeyChecking=yes"}),
      ssh_env(bed()));
  Process unchanged(
      ssh_argv((dir / "config").string(), "gpu-1", "echo reached", {"StrictHostKeyChecking=yes"}),
      ssh_env(bed()));
  const auto r = changed.finish(30);
  EXPECT_EQ(r.exit_code, 255);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("REMOTE HOST IDENTIFICATION HAS CHANGED"), std::string::npos) << r.err;
  // The same config with the right key for gpu-1: it is the key that is refused.
  const auto u = unchanged.finish(30);
  EXPECT_EQ(u.exit_code, 0) << u.err;
  EXPECT_EQ(u.out, "reached\n");
}

// dlaunch on the bed: with the default options, the user's ssh config is all
// it needs; no node has dlaunch installed.

std::vector<std::string> count_lines(const std::string& text, const std::string& needle,
                                     std::size_t& n) {
  n = 0;
  std::vector<std::string> hits;
  for (const auto& l : lines_of(text)) {
    if (l.find(needle) != std::string::npos) {
      ++n;
      hits.push_back(l);
    }
  }
  return hits;
}

std::string hosts_arg() { return "gpu-1:2,gpu-2:2,gpu-3:2"; }

// dlaunch with these arguments, its workers in the bed's folder: the nodes
// do not see the build folder, where the tests themselves run under ctest.
// The bed's ssh config (-F) unless the arguments name another, as a user
// whose cluster config is not ~/.ssh/config gives it.
std::vector<std::string> bed_job(const Bed& b, std::vector<std::string> args) {
  if (std::find(args.begin(), args.end(), "-F") == args.end())
    args.insert(args.begin(), {"-F", b.config()});
  args.insert(args.begin(), {"--wdir", b.dir});
  return dlaunch_cmd(std::move(args));
}

TEST_F(BastionBed, DlaunchRunsAJobOnEveryNodeThroughTheBastionCopyingItsAgentOnce) {
  auto env = ssh_env(bed());
  env.emplace_back("DLAUNCH_DEBUG=ssh");
  const auto r = run(
      bed_job(bed(), {"-H", hosts_arg(), "sh", "-c", "echo R=$RANK M=$MASTER_ADDR H=$(hostname)"}),
      120, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto& gpu1 = bed().nodes.at(0);
  for (int rank = 0; rank < 6; ++rank) {
    const std::string host = "gpu-" + std::to_string(rank / 2 + 1);
    EXPECT_NE(r.out.find("R=" + std::to_string(rank) + " M=" + gpu1.addr + " H=" + host + "\n"),
              std::string::npos)
        << "rank " << rank << ":\n"
        << r.out;
  }
  std::size_t n = 0;
  count_lines(r.err, "no usable dlaunch-agent (none at", n);
  EXPECT_EQ(n, 3u) << "each node gets the agent copied once:\n" << r.err;
  count_lines(r.err, "jump host connected", n);
  EXPECT_EQ(n, 1u) << "one connection to the bastion carries every node:\n" << r.err;
  count_lines(r.err, "cluster_known_hosts: read", n);
  EXPECT_EQ(n, 1u) << "the known_hosts file is read once per job:\n" << r.err;

  // The next job uses the copies.
  const auto again = run(bed_job(bed(), {"-H", hosts_arg(), "true"}), 120, ssh_env(bed()));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.err.find("no usable dlaunch-agent"), std::string::npos) << again.err;
}

TEST_F(BastionBed, DlaunchDryRunShowsEachHostsResolvedUserAddressKeyAndJumpHost) {
  const auto r = run(bed_job(bed(), {"-H", hosts_arg(), "--dry-run", "true"}), 60, ssh_env(bed()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& node : bed().nodes) {
    EXPECT_NE(r.out.find("  ssh: root@" + node.addr + ":22\n"), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find("  keys: " + bed().dir + "/home/.ssh/cluster_key\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  via: root@" + bed().at("BED_BASTION") + ":22\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("known_hosts: " + bed().dir + "/home/.ssh/cluster_known_hosts"),
            std::string::npos)
      << r.out;
}

TEST_F(BastionBed, DlaunchReachesTheNodesThroughAProxyCommandToo) {
  const auto r = run(bed_job(bed(), {"-F", bed().dir + "/ssh_config.proxycommand", "-H",
                                     hosts_arg(), "sh", "-c", "echo R=$RANK H=$(hostname)"}),
                     120, ssh_env(bed()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("R=5 H=gpu-3\n"), std::string::npos) << r.out;
}

TEST_F(BastionBed, DlaunchRefusesAChangedHostKeyBehindTheBastionAndStartsNothing) {
  const fs::path dir = fs::path(bed().dir) / "dlaunch-changed-key";
  write_changed_key_config(bed(), dir);
  const auto& gpu2 = bed().nodes.at(1);
  const auto r = run(bed_job(bed(), {"-F", (dir / "config").string(), "-H", hosts_arg(), "sh", "-c",
                                     "echo STARTED $RANK"}),
                     120, ssh_env(bed()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out.find("STARTED"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("host key for " + gpu2.addr + " has CHANGED"), std::string::npos) << r.err;
}

TEST_F(BastionBed, DlaunchWithoutAgentUploadSaysTheAgentIsMissingOnEachNode) {
  const auto r =
      run(bed_job(bed(), {"--no-agent-upload", "-H", hosts_arg(), "true"}), 120, ssh_env(bed()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("dlaunch-agent not found at"), std::string::npos) << r.err;
}

TEST_F(BastionBed, DlaunchCheckSaysWhichNodesGetTheAgentCopied) {
  const auto r = run(bed_job(bed(), {"-H", hosts_arg(), "--check", "true"}), 120, ssh_env(bed()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  int rows = 0;
  // The check's table: up to the first blank line (the health figures
  // follow; the nodes that get the agent copied have theirs too).
  for (const auto& l : lines_of(r.out.substr(0, r.out.find("\n\n")))) {
    const auto w = words(l);
    if (w.size() < 7 || w[1].rfind("gpu-", 0) != 0) continue;
    ++rows;
    // AGENT: none installed there; "copy" before the first job, "cached" after.
    EXPECT_TRUE(w[6] == "copy" || w[6] == "cached") << l;
  }
  EXPECT_EQ(rows, 3) << r.out;
}

TEST_F(BastionBed, DlaunchWithTheSystemSshClientRunsTheJobToo) {
  const auto r = run(bed_job(bed(), {"--ssh", "openssh", "-F", bed().config(), "-H", hosts_arg(),
                                     "sh", "-c", "echo R=$RANK H=$(hostname)"}),
                     120, ssh_env(bed()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_NE(r.out.find("R=" + std::to_string(rank) + " H=gpu-" + std::to_string(rank / 2 + 1)),
              std::string::npos)
        << r.out;
  }
  const auto check = run(bed_job(bed(), {"--ssh", "openssh", "-F", bed().config(), "-H",
                                         hosts_arg(), "--check", "true"}),
                         120, ssh_env(bed()));
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_NE(check.out.find("openssh"), std::string::npos) << check.out;
}

// The lifeline through the bastion, with either client: dlaunch killed, every
// node's agent sees its channel end and stops the workers.
void expect_no_orphans(const Bed& b, const std::vector<std::string>& client) {
  const auto job = unique_job_id("bastionkill");
  std::vector<std::string> args = client;
  args.insert(args.end(), {"-H", hosts_arg(), "--job-id", job, "--kill-grace", "1", "sh", "-c",
                           "echo up; exec sleep 120"});
  Process p(bed_job(b, args), ssh_env(b));
  ASSERT_TRUE(p.wait_for_lines(6, 60)) << "the six ranks did not start";
  // A rank prints before its shell execs sleep: while it execs, it can be
  // missed (a full run saw 5 of 6 once); wait until all six are seen, and
  // judge that count, not another look (a clean-clone run saw 6, then 5).
  const auto seen_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::size_t seen = job_processes(job).size();
  while (seen < 6 && std::chrono::steady_clock::now() < seen_by) {
    ::usleep(50 * 1000);
    seen = job_processes(job).size();
  }
  EXPECT_GE(seen, 6u);
  p.signal(SIGKILL);
  p.finish(10);
  EXPECT_EQ(wait_job_gone(job, 15), std::vector<pid_t>{});
}

TEST_F(BastionBed, KillingDlaunchLeavesNoWorkerBehindTheBastion) {
  expect_no_orphans(bed(), {});
  expect_no_orphans(bed(), {"--ssh", "openssh", "-F", bed().config()});
}

// The jobs users run: PyTorch over gloo and a plain Open MPI program under
// --mpi, with each SSH client. The programs live outside the build folder
// (which the nodes do not see): train.py in the source tree, mpi_hello
// copied into the bed's folder.
std::vector<std::vector<std::string>> both_clients(const Bed& b) {
  return {{}, {"--ssh", "openssh", "-F", b.config()}};
}

TEST_F(BastionBed, TorchTrainingRunsOnThreeNodesBehindTheBastion) {
  if (run({"/usr/bin/python3", "-c", "import torch"}, 60).exit_code != 0)
    GTEST_SKIP() << "/usr/bin/python3 -c 'import torch' failed: install python3-torch";
  auto env = ssh_env(bed());
  env.emplace_back("PATH=/usr/bin:/bin:/usr/sbin:/sbin");  // Debian's python3, with torch
  for (const auto& client : both_clients(bed())) {
    std::vector<std::string> args = client;
    args.insert(args.end(),
                {"-H", hosts_arg(), "python3", std::string(SOURCE_DIR) + "/examples/train.py"});
    const auto r = run(bed_job(bed(), args), 300, env);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("parameters identical on all 6 ranks"), std::string::npos) << r.out;
  }
}

TEST_F(BastionBed, AnOpenMpiProgramRunsUnderMpiOnThreeNodesBehindTheBastion) {
  const std::string program = bed().dir + "/mpi_hello";
  fs::copy_file(MPI_HELLO_BIN, program, fs::copy_options::overwrite_existing);
  for (const auto& client : both_clients(bed())) {
    std::vector<std::string> args = client;
    args.insert(args.end(), {"--mpi", "-H", hosts_arg(), program});
    const auto r = run(bed_job(bed(), args), 300, ssh_env(bed()));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    for (int rank = 0; rank < 6; ++rank) {
      EXPECT_NE(r.out.find("mpi rank " + std::to_string(rank) + "/6, RANK=" + std::to_string(rank) +
                           " WORLD_SIZE=6, allreduce(rank)=15"),
                std::string::npos)
          << r.out;
    }
  }
}

// Beds of their own: two at once, then stopped.
TEST(BastionBedLifecycle, TwoBedsCoexistAndStopLeavesNothingBehind) {
  const auto why = why_no_bed();
  if (!why.empty()) GTEST_SKIP() << why;
  remove_stale_beds("dlaunch-bastion-", kBed);
  Bed a, b;
  std::string err_a, err_b;
  {
    // Started at once: each must claim its own index.
    std::thread ta([&] { err_a = start_bed(a, bed_dir("a"), 1); });
    err_b = start_bed(b, bed_dir("b"), 2);
    ta.join();
  }
  struct Cleanup {
    std::vector<std::string> dirs;
    ~Cleanup() {
      for (const auto& d : dirs) {
        run({kBed, "stop", d}, 60);
        std::error_code ignored;
        fs::remove_all(d, ignored);
      }
    }
  } cleanup{{a.dir, b.dir}};
  ASSERT_EQ(err_a, "");
  ASSERT_EQ(err_b, "");
  EXPECT_NE(a.at("BED_INDEX"), b.at("BED_INDEX"));
  EXPECT_NE(a.at("BED_NET_A"), b.at("BED_NET_A"));
  EXPECT_NE(a.at("BED_NET_B"), b.at("BED_NET_B"));
  std::printf("bastion beds: 1 node started in %.2f s, 2 nodes in %.2f s, at once\n",
              a.start_seconds, b.start_seconds);

  for (Bed* bed : {&a, &b}) {
    // What the bed made, as the kernel lists it, before stop.
    std::vector<std::string> links, namespaces;
    std::vector<pid_t> pids;
    std::istringstream state(slurp(bed->dir + "/bastion.state"));
    for (std::string kind, name; state >> kind >> name;) {
      if (kind == "bridge" || kind == "veth") links.push_back(name);
      if (kind == "ns") {
        namespaces.push_back(name);
        for (const auto& p : words(run({"ip", "netns", "pids", name}).out))
          pids.push_back(std::stoi(p));
      }
    }
    EXPECT_EQ(namespaces.size(), bed->nodes.size() + 1);
    EXPECT_EQ(links.size(), 2 + 2 + bed->nodes.size());  // bridges, bastion legs, nodes
    EXPECT_GE(pids.size(), namespaces.size()) << "an sshd in each namespace";
    for (const auto& l : links)
      EXPECT_EQ(run({"ip", "link", "show", l}).exit_code, 0) << l << " before stop";

    const auto r = run({kBed, "stop", bed->dir}, 60);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::printf("bastion bed %s: stopped in %.2f s\n", bed->at("BED_INDEX").c_str(), r.seconds);
    for (const auto& ns : namespaces)
      EXPECT_FALSE(fs::exists("/run/netns/" + ns)) << ns << " after stop";
    for (const auto& l : links)
      EXPECT_NE(run({"ip", "link", "show", l}).exit_code, 0) << l << " after stop";
    for (const auto& net : {bed->at("BED_NET_A"), bed->at("BED_NET_B")}) {
      const auto routes = run({"ip", "-4", "route", "show", "table", "all", "root", net});
      EXPECT_EQ(routes.out, "") << net << " still routed after stop";
    }
    for (pid_t p : pids) EXPECT_FALSE(alive(p)) << "pid " << p << " after stop";
    EXPECT_FALSE(fs::exists(bed->dir + "/bastion.state"));
    // Safe to repeat.
    const auto again = run({kBed, "stop", bed->dir}, 60);
    EXPECT_EQ(again.exit_code, 0) << again.err;
  }
}
