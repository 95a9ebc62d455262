// Jobs over real SSH: our own sshd on loopback (tests/testbed/sshd.sh), one
// address per "host" (127.0.0.2 ...), generated host and user keys. dlaunch
// gets the bed's ssh config (-F DIR/ssh_config, which names the bed's key and
// known_hosts) as a user gives a cluster's: like ssh, dlaunch takes ~ from the
// passwd entry, so no HOME can point it at the bed.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;

namespace {

const std::string kWorker = TEST_WORKER_BIN;

class Ssh : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(
        (fs::temp_directory_path() / ("dlaunch-sshd-" + std::to_string(::getpid()))).string());
    auto r = run(
        {std::string(SOURCE_DIR) + "/tests/testbed/sshd.sh", "start", *dir_, "8", "0", "2"}, 60);
    if (r.exit_code != 0) {
      skip_ = new std::string("cannot start a loopback sshd (exit " + std::to_string(r.exit_code) +
                              "): " + r.err);
      return;
    }
    port_ = std::stoi(r.out);
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) {
      run({std::string(SOURCE_DIR) + "/tests/testbed/sshd.sh", "stop", *dir_}, 30);
      std::error_code ignored;  // a daemon may still be removing its own files
      fs::remove_all(*dir_, ignored);
    }
  }
  void SetUp() override {
    if (skip_ != nullptr) GTEST_SKIP() << *skip_;
  }

  // The bed's user files (.ssh/id_ed25519, .ssh/known_hosts), which its
  // ssh_config names; or a copy whose known_hosts the test may change, with a
  // config of its own (config_of) naming its key (or `identity`) and
  // known_hosts.
  static std::string home() { return *dir_ + "/home"; }
  std::string private_home(const std::string& known_hosts, const std::string& identity = "") {
    const auto h = fs::path(*dir_) / ("home-" + std::to_string(counter_++));
    fs::create_directories(h / ".ssh");
    fs::copy_file(fs::path(home()) / ".ssh/id_ed25519", h / ".ssh/id_ed25519");
    std::ofstream(h / ".ssh/known_hosts") << known_hosts;
    std::ofstream(h / "ssh_config")
        << "Host *\n  IdentityFile "
        << (identity.empty() ? (h / ".ssh/id_ed25519").string() : identity)
        << "\n  UserKnownHostsFile " << (h / ".ssh/known_hosts").string() << "\n";
    return h.string();
  }
  static std::string config_of(const std::string& private_home) {
    return private_home + "/ssh_config";
  }
  // dlaunch with the bed's ssh config, unless the arguments give another (-F).
  static std::vector<std::string> bed_cmd(std::vector<std::string> args) {
    if (std::find(args.begin(), args.end(), "-F") == args.end())
      args.insert(args.begin(), {"-F", *dir_ + "/ssh_config"});
    return dlaunch_cmd(std::move(args));
  }
  // No ssh-agent of the machine's: the keys are the ones the config names.
  static std::vector<std::string> env() { return {"SSH_AUTH_SOCK="}; }
  // A hostfile of n SSH hosts from the test bed, plus extra YAML host lines.
  static std::string hostfile(int n, int slots, const std::string& extra = "") {
    std::string y = "defaults: {transport: ssh, port: " + std::to_string(port_) +
                    ", slots: " + std::to_string(slots) + "}\nhosts:\n";
    for (int i = 0; i < n; ++i) y += "  - 127.0.0." + std::to_string(i + 2) + "\n";
    return temp_file(y + extra, ".yaml");
  }
  static std::string known_hosts_text() {
    std::ifstream in(home() + "/.ssh/known_hosts");
    return {std::istreambuf_iterator<char>(in), {}};
  }

  static std::string* dir_;
  static std::string* skip_;
  static int port_;
  static int counter_;
};

std::string* Ssh::dir_ = nullptr;
std::string* Ssh::skip_ = nullptr;
int Ssh::port_ = 0;
int Ssh::counter_ = 0;

}  // namespace

TEST_F(Ssh, FourNodesTimesTwoSlotsRunEveryRankOnceWithItsNodeRank) {
  auto r = run(bed_cmd({"-H", hostfile(4, 2), HELLO_BIN}), 60, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::regex re(
      R"(\[(\d+)\] hello from rank (\d+)/8 \(local rank (\d+)/2, node (\d+)/4\) on \S+, master 127\.0\.0\.2:\d+)");
  std::set<int> seen;
  for (const auto& line : lines_of(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << line;
    const int rank = std::stoi(m[2]);
    EXPECT_EQ(std::stoi(m[4]), rank / 2);
    EXPECT_EQ(std::stoi(m[3]), rank % 2);
    EXPECT_TRUE(seen.insert(rank).second);
  }
  EXPECT_EQ(seen.size(), 8u);
}

TEST_F(Ssh, WorkersRunOverSshInTheHeadsWorkingDirectory) {
  auto r = run(
      bed_cmd({"-H", hostfile(1, 1), "--wdir", "/tmp", "sh", "-c", "echo $SSH_CONNECTION; pwd"}),
      60, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_NE(lines[0].find(" 127.0.0.2 " + std::to_string(port_)), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1], "[0] /tmp");
}

TEST_F(Ssh, ChangedHostKeyIsRefusedUnderStrictAndNothingStartsAnywhere) {
  // Node 127.0.0.3 is recorded with another key: a man in the middle, or a reinstall.
  const auto other = fs::path(*dir_) / "other_key";
  if (!fs::exists(other))
    run({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other.string()});
  std::ifstream pub(other.string() + ".pub");
  std::string type, key;
  pub >> type >> key;
  std::string kh;
  for (const auto& line : lines_of(known_hosts_text())) {
    kh += line.rfind("[127.0.0.3]", 0) == 0
              ? "[127.0.0.3]:" + std::to_string(port_) + " " + type + " " + key
              : line;
    kh += "\n";
  }
  const auto job = unique_job_id("hostkey");
  const auto h = private_home(kh);
  auto r = run(bed_cmd({"-F", config_of(h), "-H", hostfile(4, 2), "--job-id", job, kWorker,
                        "ready-sleep", "30"}),
               60, env());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("host key for [127.0.0.3]:" + std::to_string(port_) + " has CHANGED"),
            std::string::npos)
      << r.err;
  // The fingerprint shown is the one ssh-keygen prints for the server's key.
  auto fp = run({"ssh-keygen", "-l", "-f", *dir_ + "/host_key.pub"});
  const std::string sha = fp.out.substr(
      fp.out.find("SHA256:"), fp.out.find(' ', fp.out.find("SHA256:")) - fp.out.find("SHA256:"));
  EXPECT_NE(r.err.find(sha), std::string::npos) << sha << "\n" << r.err;
  EXPECT_EQ(r.out, "") << "no worker may start anywhere";
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST_F(Ssh, UnknownHostIsRefusedUnderStrictAndRecordedUnderAcceptNew) {
  const auto h = private_home("");
  const auto hosts = hostfile(2, 1);
  auto strict = run(bed_cmd({"-F", config_of(h), "-H", hosts, "true"}), 60, env());
  EXPECT_EQ(strict.exit_code, 1);
  EXPECT_NE(strict.err.find("no host key for [127.0.0.2]:" + std::to_string(port_)),
            std::string::npos)
      << strict.err;
  auto accept =
      run(bed_cmd({"-F", config_of(h), "-H", hosts, "--host-key-check", "accept-new", "true"}), 60,
          env());
  ASSERT_EQ(accept.exit_code, 0) << accept.err;
  std::ifstream in(h + "/.ssh/known_hosts");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("[127.0.0.2]:" + std::to_string(port_) + " ssh-ed25519 "), std::string::npos)
      << text;
  EXPECT_NE(text.find("[127.0.0.3]:" + std::to_string(port_) + " ssh-ed25519 "), std::string::npos)
      << text;
  auto again = run(bed_cmd({"-F", config_of(h), "-H", hosts, "true"}), 60, env());  // strict
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

// Issue 27 item 3: the known_hosts line of 127.0.0.3 holds an ECDSA key, the
// server offers its ed25519 one (a man in the middle with a key of another
// type). OpenSSH 9.2 calls that a changed key even under accept-new; so must
// dlaunch, and record nothing.
TEST_F(Ssh, AKeyOfAnotherTypeForAHostKnownByEcdsaIsRefusedAsChangedUnderAcceptNew) {
  const auto ecdsa = fs::path(*dir_) / "ecdsa_key";
  if (!fs::exists(ecdsa)) run({"ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", ecdsa.string()});
  std::ifstream pub(ecdsa.string() + ".pub");
  std::string type, key;
  pub >> type >> key;
  std::string kh;
  int line = 0;
  int n = 0;
  for (const auto& l : lines_of(known_hosts_text())) {
    ++n;
    const bool node1 = l.rfind("[127.0.0.3]", 0) == 0;
    if (node1) line = n;
    kh += (node1 ? "[127.0.0.3]:" + std::to_string(port_) + " " + type + " " + key : l) + "\n";
  }
  const auto h = private_home(kh);
  const std::string file = h + "/.ssh/known_hosts";
  const std::string where = "[127.0.0.3]:" + std::to_string(port_);
  // What OpenSSH says about the same file.
  auto ssh = run({"ssh", "-F", "/dev/null", "-o", "UserKnownHostsFile=" + file, "-o",
                  "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=accept-new", "-o",
                  "BatchMode=yes", "-i", h + "/.ssh/id_ed25519", "-p", std::to_string(port_),
                  "127.0.0.3", "true"},
                 30);
  EXPECT_EQ(ssh.exit_code, 255);
  EXPECT_NE(ssh.err.find("REMOTE HOST IDENTIFICATION HAS CHANGED"), std::string::npos) << ssh.err;

  const auto job = unique_job_id("keytype");
  auto r = run(bed_cmd({"-F", config_of(h), "-H", hostfile(4, 2), "--host-key-check", "accept-new",
                        "--job-id", job, kWorker, "ready-sleep", "30"}),
               60, env());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("host key for " + where + " has CHANGED: the server offers ssh-ed25519 "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(file + ":" + std::to_string(line) + " holds another ECDSA key for it"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("remove the old key with: ssh-keygen -R '" + where + "' -f " + file),
            std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(file), kh) << "nothing may be recorded";
  EXPECT_EQ(r.out, "") << "no worker may start anywhere";
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST_F(Ssh, ARevokedHostKeyIsRefusedUnderStrictAndAcceptNew) {
  const std::string host_key = slurp(*dir_ + "/host_key.pub");
  const std::string where = "[127.0.0.3]:" + std::to_string(port_);
  const std::string kh = known_hosts_text() + "@revoked " + where + " " +
                         host_key.substr(0, host_key.find(' ', host_key.find(' ') + 1)) + "\n";
  const int line = static_cast<int>(lines_of(kh).size());
  const auto h = private_home(kh);
  for (const char* policy : {"strict", "accept-new"}) {
    auto r =
        run(bed_cmd({"-F", config_of(h), "-H", hostfile(2, 1), "--host-key-check", policy, "true"}),
            60, env());
    EXPECT_EQ(r.exit_code, 1) << policy << "\n" << r.err;
    EXPECT_NE(r.err.find("the ED25519 host key of " + where + " (ssh-ed25519 SHA256:"),
              std::string::npos)
        << r.err;
    EXPECT_NE(
        r.err.find(") is marked as revoked in " + h + "/.ssh/known_hosts:" + std::to_string(line)),
        std::string::npos)
        << r.err;
  }
  auto ssh = run({"ssh", "-F", "/dev/null", "-o", "UserKnownHostsFile=" + h + "/.ssh/known_hosts",
                  "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=accept-new",
                  "-o", "BatchMode=yes", "-i", h + "/.ssh/id_ed25519", "-p", std::to_string(port_),
                  "127.0.0.3", "true"},
                 30);
  EXPECT_EQ(ssh.exit_code, 255);
  EXPECT_NE(ssh.err.find("is marked as revoked"), std::string::npos) << ssh.err;
}

// libssh2 1.10 cannot check host certificates: a host that a @cert-authority
// line vouches for is refused with the way out, never recorded by accept-new.
TEST_F(Ssh, AHostVouchedForByACertificateAuthorityIsRefusedNamingTheWayOut) {
  const std::string host_key = slurp(*dir_ + "/host_key.pub");
  const auto h =
      private_home("@cert-authority [127.0.0.*]:* " +
                   host_key.substr(0, host_key.find(' ', host_key.find(' ') + 1)) + "\n");
  auto r = run(
      bed_cmd({"-F", config_of(h), "-H", hostfile(1, 1), "--host-key-check", "accept-new", "true"}),
      60, env());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(h +
                       "/.ssh/known_hosts:1 says a certificate authority signs the keys of "
                       "[127.0.0.2]:" +
                       std::to_string(port_)),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--ssh openssh"), std::string::npos) << r.err;
  EXPECT_EQ(lines_of(slurp(h + "/.ssh/known_hosts")).size(), 1u);
}

// A server with an ECDSA and an ed25519 host key (most have several): the
// key type on record is asked for first, as ssh does, so either record works.
TEST_F(Ssh, AHostWithKeysOfSeveralTypesIsCheckedWithTheTypeOnRecord) {
  const auto dir = fs::path(*dir_) / ("twokeys-" + std::to_string(counter_++));
  fs::create_directories(dir);
  const std::string ecdsa = (dir / "ecdsa_host").string();
  ASSERT_EQ(run({"ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", ecdsa}).exit_code, 0);
  std::string conf;
  for (const auto& l : lines_of(slurp(*dir_ + "/sshd_config.0"))) {
    if (l.rfind("ListenAddress", 0) == 0 || l.rfind("HostKey", 0) == 0 ||
        l.rfind("PidFile", 0) == 0)
      continue;
    conf += l + "\n";
  }
  conf += "ListenAddress 127.0.0.10\nHostKey " + ecdsa + "\nHostKey " + *dir_ +
          "/host_key\nPidFile " + (dir / "sshd.pid").string() + "\n";
  std::ofstream((dir / "sshd_config").string()) << conf;
  Process sshd({"/usr/sbin/sshd", "-D", "-f", (dir / "sshd_config").string(), "-E",
                (dir / "sshd.log").string()});
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    up = run({"bash", "-c", "exec 3<>/dev/tcp/127.0.0.10/" + std::to_string(port_)}, 5).exit_code ==
         0;
    if (!up) ::usleep(50000);
  }
  ASSERT_TRUE(up) << slurp((dir / "sshd.log").string());
  const std::string where = "[127.0.0.10]:" + std::to_string(port_) + " ";
  const auto hosts = temp_file(
      "hosts:\n  - {host: 127.0.0.10, transport: ssh, port: " + std::to_string(port_) + "}\n",
      ".yaml");
  const std::string host_key = slurp(*dir_ + "/host_key.pub");
  const std::string ecdsa_key = slurp(ecdsa + ".pub");
  for (const std::string& on_record : {host_key, ecdsa_key}) {
    const auto h = private_home(
        where + on_record.substr(0, on_record.find(' ', on_record.find(' ') + 1)) + "\n");
    auto e = env();
    e.emplace_back("DLAUNCH_DEBUG=ssh");
    auto r = run(bed_cmd({"-F", config_of(h), "-H", hosts, "true"}), 60, e);
    EXPECT_EQ(r.exit_code, 0) << on_record << r.err;
    EXPECT_NE(r.err.find("hostkey=" + on_record.substr(0, on_record.find(' '))), std::string::npos)
        << r.err;
  }
  sshd.signal(SIGTERM);
  sshd.finish(10);
}

TEST_F(Ssh, HostThatNeverAnswersFailsWithinTheConnectTimeoutAndNothingIsLeft) {
  // A port that accepts TCP but never speaks SSH: the handshake must time out.
  int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(0x7f000009);  // 127.0.0.9
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::listen(silent, 8);
  socklen_t len = sizeof a;
  ::getsockname(silent, reinterpret_cast<sockaddr*>(&a), &len);
  const auto hosts =
      hostfile(2, 2, "  - {host: 127.0.0.9, port: " + std::to_string(ntohs(a.sin_port)) + "}\n");
  const auto job = unique_job_id("silent");
  auto r = run(bed_cmd({"-H", hosts, "--connect-timeout", "1", "--job-id", job, kWorker,
                        "ready-sleep", "30"}),
               60, env());
  ::close(silent);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // Fail-fast: far from the 30 s the ranks sleep. (Not 3 s: logins to the
  // bed's nodes run root's shell rc files here, and a busy machine, CI's
  // with the sanitizer builds in the background, stretches them.)
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(r.err.find("node 2 (127.0.0.9): timed out after 1.0 s"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST_F(Ssh, RefusedConnectionNamesTheHost) {
  const auto hosts = hostfile(1, 1, "  - {host: 127.0.0.8, port: 1}\n");
  auto r = run(bed_cmd({"-H", hosts, "true"}), 60, env());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("node 1 (127.0.0.8): cannot connect to 127.0.0.8:1: Connection refused"),
            std::string::npos)
      << r.err;
}

TEST_F(Ssh, FailingRankOnAnSshNodeStopsEveryNode) {
  const auto job = unique_job_id("sshfail");
  auto r =
      run(bed_cmd({"-H", hostfile(3, 2), "--job-id", job, kWorker, "fail-rank", "3", "7", "60"}),
          60, env());
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("rank 3 exited with code 7"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("| last words of rank 3"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 10.0);  // the other ranks sleep 60 s (the bound above: why not 3 s)
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST_F(Ssh, KillingDlaunchLeavesNoWorkerOnAnyNode) {
  const auto job = unique_job_id("sshkill");
  Process p(bed_cmd({"-H", hostfile(3, 2), "--job-id", job, "--kill-grace", "1", kWorker,
                     "grandchild", "60"}),
            env());
  ASSERT_TRUE(p.wait_for_lines(6, 30));
  EXPECT_GE(job_processes(job).size(), 18u);
  p.signal(SIGKILL);
  p.finish(10);
  // sshd closes each agent's channel; every agent stops its workers.
  EXPECT_EQ(wait_job_gone(job, 5), std::vector<pid_t>{});
}

TEST_F(Ssh, CheckReportsAMissingAgentOnOneHost) {
  const auto hosts = hostfile(2, 1, "  - {host: 127.0.0.4, agent: /nonexistent/dlaunch-agent}\n");
  auto r = run(bed_cmd({"--check", "-H", hosts, HELLO_BIN}), 60, env());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("dlaunch-agent not found or not executable at '/nonexistent/dlaunch-agent'"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("2 of 3 node(s) passed"), std::string::npos) << r.out;
  auto ok = run(bed_cmd({"--check", "-H", hostfile(3, 1), HELLO_BIN}), 60, env());
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
}

TEST_F(Ssh, MissingAgentIsReportedPerHostBeforeAnythingStarts) {
  const auto hosts = hostfile(2, 1, "  - {host: 127.0.0.4, agent: /nonexistent/dlaunch-agent}\n");
  const auto job = unique_job_id("noagent");
  auto r = run(bed_cmd({"-H", hosts, "--job-id", job, kWorker, "ready-sleep", "30"}), 60, env());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(
      r.err.find("node 2 (127.0.0.4): dlaunch-agent not found at '/nonexistent/dlaunch-agent'"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

// MPMD (docs/mpmd.md) over a local and an SSH node: app 2 only on the SSH
// node, and stdin to one of its ranks through that node's agent.
TEST_F(Ssh, MpmdAppsOnLocalAndSshNodesWithStdinToAnSshRank) {
  const auto hosts = temp_file(
      "hosts:\n  - {host: localhost, name: here, slots: 2}\n  - {host: 127.0.0.2, name: there, "
      "transport: ssh, port: " +
          std::to_string(port_) + ", slots: 2}\n",
      ".yaml");
  const std::string show = "echo $ROLE_NAME $RANK $ROLE_RANK $NODE_RANK ${SSH_CONNECTION:+ssh}";
  auto r = run({"/bin/sh",
                "-c",
                "printf 'in\\n' | \"$0\" \"$@\"",
                DLAUNCH_BIN,
                "-F",
                *dir_ + "/ssh_config",
                "-H",
                hosts,
                "--stdin",
                "2",
                "-n",
                "1",
                "--role",
                "server",
                "sh",
                "-c",
                show,
                ":",
                "-n",
                "2",
                "--host",
                "there",
                "sh",
                "-c",
                "read line; " + show + " $line",
                ":",
                "-n",
                "1",
                "sh",
                "-c",
                show},
               60, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  EXPECT_EQ((std::multiset<std::string>(lines.begin(), lines.end())),
            (std::multiset<std::string>{"[0] server 0 0 0", "[1] sh 1 0 1 ssh",
                                        "[2] sh 2 1 1 ssh in", "[3] sh 3 2 0"}));
}

TEST_F(Ssh, LocalAndSshNodesInOneJob) {
  const auto hosts = temp_file(
      "hosts:\n  - {host: localhost, slots: 2}\n  - {host: 127.0.0.2, transport: ssh, port: " +
          std::to_string(port_) + ", slots: 2}\n",
      ".yaml");
  // Issue 29: EPOCHS=1 dlaunch ... gives every rank EPOCHS=1, whatever its
  // node (the local ranks inherit it, the SSH ranks get it forwarded).
  auto e = env();
  e.emplace_back("EPOCHS=1");
  auto r = run(
      bed_cmd({"-H", hosts, "sh", "-c", "echo $NODE_RANK ${SSH_CONNECTION:+ssh} epochs=$EPOCHS"}),
      60, e);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::multiset<std::string> got;
  for (const auto& l : lines_of(r.out)) got.insert(l.substr(l.find(']') + 2));
  EXPECT_EQ(got, (std::multiset<std::string>{"0 epochs=1", "0 epochs=1", "1 ssh epochs=1",
                                             "1 ssh epochs=1"}));
}

TEST_F(Ssh, HashedKnownHostsEntriesAreHonoured) {
  const auto h = private_home(known_hosts_text());
  auto hash = run({"ssh-keygen", "-H", "-f", h + "/.ssh/known_hosts"});
  ASSERT_EQ(hash.exit_code, 0) << hash.err;
  std::ifstream in(h + "/.ssh/known_hosts");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(text.find("127.0.0.2"), std::string::npos) << "entries should be hashed";
  auto r = run(bed_cmd({"-F", config_of(h), "-H", hostfile(2, 1), "true"}), 60, env());
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(Ssh, RejectedKeysNameTheHostTheUserAndTheOfferedMethods) {
  // A config that names no key (IdentityFile none: nor does dlaunch look for
  // default ones), and a hostfile identity the server does not know: that
  // one key is tried, and refused.
  const auto h = private_home(known_hosts_text(), "none");
  const auto stranger = fs::path(*dir_) / "stranger_key";
  if (!fs::exists(stranger))
    run({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger.string()});
  const auto hosts = temp_file("defaults: {transport: ssh, port: " + std::to_string(port_) +
                                   ", identity: " + stranger.string() + "}\nhosts: [127.0.0.2]\n",
                               ".yaml");
  auto r = run(bed_cmd({"-F", config_of(h), "-H", hosts, "true"}), 60, env());
  EXPECT_EQ(r.exit_code, 1);
  auto who = run({"id", "-un"});
  const std::string user = who.out.substr(0, who.out.find('\n'));
  EXPECT_NE(r.err.find("authentication failed for " + user + "@127.0.0.2:" + std::to_string(port_) +
                       ": the server offers [publickey]; tried [" + stranger.string() + "]"),
            std::string::npos)
      << r.err;
}

TEST_F(Ssh, MpiProgramOverSshNodesSeesTheWholeWorld) {
  auto r = run(bed_cmd({"-H", hostfile(3, 2), "--mpi", MPI_HELLO_BIN}), 120, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 6u) << r.out;
  for (const auto& l : lines) EXPECT_NE(l.find("/6, RANK="), std::string::npos) << l;
  for (const auto& l : lines) EXPECT_NE(l.find("allreduce(rank)=15"), std::string::npos) << l;
}

// MPI_Comm_connect/accept between ranks of two SSH nodes (issue 35): the
// port names and the connect meet in the job's store, which each node's agent
// reaches over TCP with the job's secret.
TEST_F(Ssh, MpiConnectAndAcceptAcrossSshNodes) {
  auto e = env();
  for (const auto& x : mpi_worker_env()) e.push_back(x);
  auto r = run(bed_cmd({"-H", hostfile(2, 2), "--mpi", MPI_DYNPROC_BIN, "connect"}), 120, e);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;
  EXPECT_EQ(r.out.find("failed"), std::string::npos) << r.out;
  for (const char* side : {"accepted: remote size 2, remote ranks sum 5",
                           "connected: remote size 2, remote ranks sum 1"}) {
    EXPECT_NE(r.out.find(side), std::string::npos) << side << "\n" << r.out;
  }
}

TEST_F(Ssh, TrainOverSshNodesConverges) {
  auto e = env();
  for (const auto& x : mpi_worker_env()) e.push_back(x);
  auto r = run(bed_cmd({"-H", hostfile(2, 2), "--mpi", TRAIN_BIN, "--backend", "mpi"}), 120, e);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("parameters identical on all 4 ranks"), std::string::npos) << r.out;
}

TEST_F(Ssh, MpiAbortOverSshEndsTheJobWithItsCode) {
  const auto job = unique_job_id("sshabort");
  auto r = run(bed_cmd({"-H", hostfile(2, 2), "--mpi", "--job-id", job, MPI_HELLO_BIN, "3"}), 120,
               env());
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
}

TEST_F(Ssh, CommCollectivesGiveTheRightValuesOverSshNodes) {
  // comm's whole MPI test suite, every rank checking every collective, in the
  // world the agents' PMIx servers built across SSH nodes.
  auto e = env();
  for (const auto& x : mpi_worker_env()) e.push_back(x);
  auto r = run(bed_cmd({"-H", hostfile(2, 2), "--mpi", COMM_MPI_TESTS_BIN}), 300, e);
  ASSERT_EQ(r.exit_code, 0) << r.out.substr(r.out.size() > 3000 ? r.out.size() - 3000 : 0) << r.err;
  EXPECT_NE(r.out.find("[  PASSED  ]"), std::string::npos);
}

TEST_F(Ssh, ValuesWithSpacesAndQuotesSurviveTheTrip) {
  // -x, an env file and the hostfile's env: none of it passes through a shell.
  const std::string tricky = "a  b 'single' \"double\" $HOME `id` \\ ; & | * ~ !x";
  const auto envfile = temp_file("FROM_FILE=" + tricky + " (file)\n", ".env");
  const auto hosts =
      hostfile(2, 1, "env:\n  FROM_HOSTFILE: '" + std::string("it''s \"yaml\" $X") + "'\n");
  auto r = run(bed_cmd({"-H", hosts, "--env-file", envfile, "-x", "FROM_X=" + tricky, "-x",
                        "HEAD_VAR", "sh", "-c",
                        "printf '%s|%s|%s|%s\\n' \"$FROM_X\" \"$FROM_FILE\" \"$FROM_HOSTFILE\" "
                        "\"$HEAD_VAR\""}),
               60, [&] {
                 auto e = env();
                 e.push_back("HEAD_VAR=" + tricky + " (head)");
                 return e;
               }());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (const auto& l : lines) {
    EXPECT_EQ(l.substr(4), tricky + "|" + tricky + " (file)|it's \"yaml\" $X|" + tricky + " (head)")
        << l;
  }
}

TEST_F(Ssh, ErrorFileOnAnSshNodeReachesTheReport) {
  const auto job = unique_job_id("ssherr");
  auto r = run(bed_cmd({"-H", hostfile(2, 2), "--job-id", job, "sh", "-c",
                        "if [ $RANK = 3 ]; then printf '{\"message\": {\"message\": \"ValueError: "
                        "bad batch\", \"extraInfo\": {\"py_callstack\": \"Traceback\\\\n  line "
                        "1\\\\n\", \"timestamp\": \"1700000000\"}}}' > $TORCHELASTIC_ERROR_FILE; "
                        "exit 1; fi; sleep 30"}),
               60, env());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("-node1-"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/error.3.json):\n    ValueError: bad batch\n  traceback:\n    | "
                       "Traceback\n    |   line 1\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST_F(Ssh, TorchTrainPyOverSshNodes) {
  if (run({"/usr/bin/python3", "-c", "import torch"}, 60).exit_code != 0) {
    GTEST_SKIP() << "/usr/bin/python3 -c 'import torch' failed: install python3-torch";
  }
  auto r = run(bed_cmd({"-H", hostfile(2, 2), "/usr/bin/python3",
                        std::string(SOURCE_DIR) + "/examples/train.py", "--steps", "30"}),
               110, env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("on 4 ranks (gloo, cpu)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[0] parameters identical on all 4 ranks"), std::string::npos) << r.out;
}

// A job that survives its head (issue 32's test): SIGKILL of the head of a
// detached 3-node SSH job running examples/train.py; `dlaunch attach
// --recover` within the grace takes it over over new SSH sessions; the job
// finishes with the checksum an undisturbed run gives, and no rank started
// twice. Then the same with the grace expired: every node clean.
TEST_F(Ssh, AJobWhoseHeadIsKilledIsTakenOverOverSshAndFinishesAsIfNothingHappened) {
  if (run({"/usr/bin/python3", "-c", "import torch"}, 60).exit_code != 0) {
    GTEST_SKIP() << "/usr/bin/python3 -c 'import torch' failed: install python3-torch";
  }
  const std::string state = temp_dir("ssh-takeover-state");
  std::vector<std::string> e = env();
  e.push_back("XDG_STATE_HOME=" + state);
  const std::string hosts = hostfile(3, 2);
  const std::vector<std::string> train = {
      "/usr/bin/python3", std::string(SOURCE_DIR) + "/examples/train.py",
      "--steps",          "300",
      "--print-every",    "50"};
  const auto checksum = [](const std::string& out) {
    const auto at = out.find("(checksum ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find(')', at) - at);
  };
  // The undisturbed run.
  std::vector<std::string> args = {"-H", hosts};
  args.insert(args.end(), train.begin(), train.end());
  const auto plain = run(bed_cmd(args), 200, e);
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  ASSERT_FALSE(checksum(plain.out).empty()) << plain.out;

  const auto job = unique_job_id("sshtakeover");
  args = {"-d", "-H", hosts, "--job-id", job, "--head-grace", "60"};
  args.insert(args.end(), train.begin(), train.end());
  const auto d = run(bed_cmd(args), 100, e);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const auto status = [&] {
    return YAML::Load(run(dlaunch_cmd({"status", job, "--json"}), 30, e).out);
  };
  // Rank 0 is past its first steps: then its head goes, as a crash takes it.
  for (int k = 0; k < 1200; ++k) {
    if (run(dlaunch_cmd({"logs", job, "--rank", "0"}), 30, e).out.find("step  100") !=
        std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto head = static_cast<pid_t>(status()["head_pid"].as<long>());
  ASSERT_EQ(::kill(head, SIGKILL), 0);
  for (int k = 0; k < 200 && status()["state"].as<std::string>() != "lost"; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(status()["state"].as<std::string>(), "lost");
  EXPECT_EQ(job_processes(job).size(), 6u) << "the ranks stopped with their head";

  const auto r = run(dlaunch_cmd({"attach", "--recover", job}), 200, e);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(checksum(r.out), checksum(plain.out)) << r.out;
  EXPECT_NE(r.out.find("parameters identical on all 6 ranks"), std::string::npos) << r.out;
  // No rank started twice: each rank's pid, before and after, is the one
  // Started said at the job's start.
  std::map<long, long> first_pid;
  int replayed = 0;
  for (const auto& l : lines_of(run(dlaunch_cmd({"events", job}), 30, e).out)) {
    const auto ev = YAML::Load(l);
    if (ev["type"].as<std::string>() != "rank_started") continue;
    const long rank = ev["rank"].as<long>();
    const long pid = ev["pid"].as<long>();
    if (first_pid.emplace(rank, pid).second) continue;
    EXPECT_EQ(first_pid[rank], pid) << "rank " << rank << " started again";
    ++replayed;
  }
  EXPECT_EQ(first_pid.size(), 6u);
  EXPECT_EQ(replayed, 6);
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});

  // The grace passes with no new head: every node's agent stops its ranks.
  const auto job2 = unique_job_id("sshgrace");
  ASSERT_EQ(run(bed_cmd({"-d", "-H", hosts, "--job-id", job2, "--head-grace", "2", "--kill-grace",
                         "1", kWorker, "ready-sleep", "60"}),
                100, e)
                .exit_code,
            0);
  for (int k = 0; k < 600 && job_processes(job2).size() < 6; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(
      ::kill(static_cast<pid_t>(
                 YAML::Load(run(dlaunch_cmd({"status", job2, "--json"}), 30, e).out)["head_pid"]
                     .as<long>()),
             SIGKILL),
      0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(job_processes(job2).size(), 6u);
  EXPECT_EQ(wait_job_gone(job2, 2 + 1 + 5), std::vector<pid_t>{});
  fs::remove_all(state);
}

// Issue 15 item 14: a program missing on every host is reported for every
// host, also those whose SSH login finished after the first report came in.
TEST_F(Ssh, AMissingProgramIsReportedForEveryHost) {
  const auto job = unique_job_id("noprog");
  auto r = run(bed_cmd({"-H", hostfile(3, 1), "--job-id", job, "/nonexistent/prog"}), 60, env());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  for (const char* node : {"node 0 (127.0.0.2)", "node 1 (127.0.0.3)", "node 2 (127.0.0.4)"}) {
    EXPECT_NE(r.err.find(std::string(node) + ": program '/nonexistent/prog' not found"),
              std::string::npos)
        << node << "\n"
        << r.err;
  }
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

// The user's ssh config on the loopback bed: a chain of two jump hosts
// (hop2 is itself reached through hop1) in front of two nodes; each jump
// host is connected once for every node behind it.
TEST_F(Ssh, AChainOfJumpHostsFromTheSshConfigCarriesEveryNode) {
  const auto dir = fs::path(*dir_) / ("chain-" + std::to_string(counter_++));
  fs::create_directories(dir);
  fs::copy_file(fs::path(home()) / ".ssh/id_ed25519", dir / "cluster_key");
  const std::string config = (dir / "config").string();
  std::ofstream(config) << "Host hop1\n  HostName 127.0.0.2\n"
                        << "Host hop2\n  HostName 127.0.0.3\n  ProxyJump hop1\n"
                        << "Host n1\n  HostName 127.0.0.4\n  ProxyJump hop2\n"
                        << "Host n2\n  HostName 127.0.0.5\n  ProxyJump hop2\n"
                        << "Host *\n  Port " << port_ << "\n  IdentityFile "
                        << (dir / "cluster_key").string()
                        << "\n  IdentitiesOnly yes\n  UserKnownHostsFile " << home()
                        << "/.ssh/known_hosts\n";
  auto e = env();
  e.emplace_back("DLAUNCH_DEBUG=ssh");
  auto r = run(bed_cmd({"-F", config, "-H", "n1:2,n2:1", "sh", "-c", "echo R=$RANK"}), 60, e);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.out.find("R=" + std::to_string(rank) + "\n"), std::string::npos) << r.out;
  std::size_t hop1 = 0, hop2 = 0;
  for (const auto& l : lines_of(r.err)) {
    if (l.find("ssh hop1 (127.0.0.2:") != std::string::npos &&
        l.find("jump host connected") != std::string::npos)
      ++hop1;
    if (l.find("ssh hop2 (127.0.0.3:") != std::string::npos &&
        l.find("jump host connected") != std::string::npos)
      ++hop2;
  }
  EXPECT_EQ(hop1, 1u) << r.err;
  EXPECT_EQ(hop2, 1u) << r.err;
}

TEST_F(Ssh, AJumpHostThatCannotBeReachedFailsEveryNodeBehindItNamingIt) {
  const auto dir = fs::path(*dir_) / ("deadjump-" + std::to_string(counter_++));
  fs::create_directories(dir);
  const std::string config = (dir / "config").string();
  std::ofstream(config) << "Host gate\n  HostName 127.0.0.9\n  Port 1\n"
                        << "Host n*\n  ProxyJump gate\n  Port " << port_ << "\n";
  auto r = run(bed_cmd({"-F", config, "-H", "n1,n2", "true"}), 60, env());
  EXPECT_EQ(r.exit_code, 1);
  for (const char* node : {"node 0 (n1)", "node 1 (n2)"}) {
    EXPECT_NE(r.err.find(std::string(node) + ": jump host gate (127.0.0.9:1): cannot connect"),
              std::string::npos)
        << r.err;
  }
}
