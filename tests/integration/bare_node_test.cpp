// Nodes with nothing installed (issue 30): each node an sshd chrooted into a
// minimal Debian (tests/testbed/bare-root.sh: mmdebstrap --variant=minbase
// with openssh-server, no Open MPI, PMIx, hwloc, libevent) in its own network
// and mount namespace (netns.sh with TB_NODE_ROOT). dlaunch must copy its
// packed agent there and run:
//   - a shell job, `--check`, and the copied agent's version check, on
//     Debian 12 (glibc 2.36) and on Debian 11 (glibc 2.31);
//   - `--mpi` refused on the node that has no PMIx, in one line that names
//     the node and the library, without a hang;
//   - `python3 examples/train.py` with python3 and python3-torch in the root
//     (a root of 400+ packages: made only when DLAUNCH_BED_TORCH=1, run
//     whenever it is in the cache).
// Skips, with the reason, without root, netns tools, sshd or mmdebstrap, or
// when a root cannot be fetched (no network); the roots are kept in
// /var/cache/dlaunch-testbed (DLAUNCH_TESTBED_CACHE) so CI pays once.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;

namespace {

const std::string kScripts = std::string(SOURCE_DIR) + "/tests/testbed/";
constexpr int kNodes = 2;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

bool on_path(const std::string& tool) {
  for (const char* d : {"/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/"}) {
    if (::access((std::string(d) + tool).c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string why_no_bed() {
  if (::geteuid() != 0) return "needs root: the nodes are network namespaces and chroots";
  for (const char* tool : {"ip", "unshare", "chroot", "sshd", "ssh-keygen", "mmdebstrap"}) {
    if (!on_path(tool)) {
      return std::string("needs ") + tool +
             " (iproute2, util-linux, openssh-server, mmdebstrap: scripts/install-deps.sh)";
    }
  }
  return "";
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// One bed of kNodes bare nodes on a root of `release` with `packages`.
class BareBed {
 public:
  BareBed(const std::string& release, const std::vector<std::string>& packages,
          const std::string& tag) {
    skip_ = why_no_bed();
    if (kSanitizedBuild) {
      // The portable agent is off under sanitizers: this build's agent needs
      // the sanitizer runtimes, which a bare node has not.
      skip_ = "a sanitizer build: its agent needs libasan/libtsan, which a bare node lacks";
    }
    if (!skip_.empty()) return;
    std::vector<std::string> argv = {kScripts + "bare-root.sh", release};
    argv.insert(argv.end(), packages.begin(), packages.end());
    auto r = run(argv, 1800);
    root_seconds_ = r.seconds;
    if (r.exit_code == 4) {
      skip_ = "no " + release + " root: " + trim(r.err);
      return;
    }
    if (r.exit_code != 0) {
      error_ = "bare-root.sh " + release + " failed: " + r.err;
      return;
    }
    root_ = trim(r.out);
    dir_ = (fs::temp_directory_path() / ("dlaunch-bare-" + std::to_string(::getpid()) + "-" + tag))
               .string();
    auto s = run({kScripts + "netns.sh", "start", dir_, std::to_string(kNodes), "1"}, 120,
                 {"TB_NODE_ROOT=" + root_});
    if (s.exit_code != 0) error_ = "netns.sh start failed: " + s.err;
  }
  ~BareBed() {
    if (!dir_.empty()) {
      run({kScripts + "netns.sh", "stop", dir_}, 60);
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }
  BareBed(const BareBed&) = delete;
  BareBed& operator=(const BareBed&) = delete;

  const std::string& skip() const { return skip_; }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }
  double root_seconds() const { return root_seconds_; }

  // dlaunch on the bed's nodes, as the bed's user, working in /tmp (the
  // head's folder is not on the nodes).
  RunResult dlaunch(std::vector<std::string> args, double timeout_s = 120,
                    const std::string& wdir = "/tmp") const {
    args.insert(args.begin(),
                {"-F", dir_ + "/ssh_config", "-H", dir_ + "/hosts.yaml", "--wdir", wdir});
    return run(dlaunch_cmd(std::move(args)), timeout_s, env());
  }
  // A command on node k over OpenSSH (the bed's config).
  RunResult ssh(int k, const std::string& command) const {
    const std::string addr = address(k);
    return run({"ssh", "-F", dir_ + "/ssh_config", addr, command}, 60, env());
  }
  std::string address(int k) const {
    std::ifstream in(dir_ + "/nodes");
    int kk = 0;
    std::string ns, addr, veth;
    while (in >> kk >> ns >> addr >> veth) {
      if (kk == k) return addr;
    }
    return "";
  }
  // The bed's ssh config (-F) names its key and known_hosts: no HOME points
  // there, since dlaunch, like ssh, takes ~ from the passwd entry.
  std::vector<std::string> env() const { return {"SSH_AUTH_SOCK="}; }

 private:
  std::string skip_, error_, root_, dir_;
  double root_seconds_ = 0;
};

// The checks both releases get: a shell job that copies the agent, --check,
// and the copied agent's own answers on the node.
void shell_job_check_and_version(const BareBed& bed, const std::string& glibc_prefix) {
  auto job = bed.dlaunch({"sh", "-c",
                          "echo rank=$RANK of $WORLD_SIZE on $(cat /etc/os-release "
                          "| sed -n s/^VERSION_CODENAME=//p)"});
  ASSERT_EQ(job.exit_code, 0) << job.out << job.err;
  EXPECT_EQ(count(job.out, "rank="), 2u) << job.out;
  EXPECT_NE(job.out.find("rank=1 of 2"), std::string::npos) << job.out;
  // Each node got the packed agent: well under 3 MB on the wire.
  EXPECT_EQ(count(job.err, "copied this one"), 2u) << job.err;
  const auto sent = job.err.find(" bytes sent");
  ASSERT_NE(sent, std::string::npos) << job.err;
  const auto from = job.err.rfind(' ', sent - 1);
  const long bytes = std::atol(job.err.substr(from + 1, sent - from - 1).c_str());
  EXPECT_GT(bytes, 100000) << job.err;
  EXPECT_LE(bytes, 3L << 20) << job.err;
  std::cout << "agent bytes sent per node: " << bytes << "\n";

  // A second job finds the copy in the cache: nothing copied again.
  auto again = bed.dlaunch({"true"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(count(again.err, "copied this one"), 0u) << again.err;

  auto check = bed.dlaunch({"--check", "sh", "-c", "true"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_EQ(count(check.out + check.err, "cached"), 2u) << check.out << check.err;

  // On the node: the copy answers its version, and its loader finds every
  // library it needs in this root (nothing but the C library's).
  for (int k = 0; k < kNodes; ++k) {
    auto v = bed.ssh(k,
                     "for a in $HOME/.cache/dlaunch/*/dlaunch-agent; do \"$a\" --version; "
                     "ldd \"$a\"; done; ldd --version | head -n 1");
    ASSERT_EQ(v.exit_code, 0) << v.err;
    EXPECT_NE(v.out.find("dlaunch-agent "), std::string::npos) << v.out;
    EXPECT_EQ(v.out.find("not found"), std::string::npos) << v.out;
    EXPECT_EQ(v.out.find("libpmix"), std::string::npos) << v.out;
    EXPECT_EQ(v.out.find("libhwloc"), std::string::npos) << v.out;
    EXPECT_EQ(v.out.find("libstdc++"), std::string::npos) << v.out;
    EXPECT_NE(v.out.find(glibc_prefix), std::string::npos) << v.out;
  }
}

class BareBookworm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    bed_ = std::make_unique<BareBed>("bookworm", std::vector<std::string>{}, "bookworm");
  }
  static void TearDownTestSuite() { bed_.reset(); }
  void SetUp() override {
    if (!bed_->skip().empty()) GTEST_SKIP() << bed_->skip();
    ASSERT_TRUE(bed_->error().empty()) << bed_->error();
  }
  static std::unique_ptr<BareBed> bed_;
};
std::unique_ptr<BareBed> BareBookworm::bed_;

TEST_F(BareBookworm, AShellJobCheckAndVersionRunOnTheCopiedAgent) {
  shell_job_check_and_version(*bed_, "GLIBC 2.36");
}

// No PMIx on the node: the job ends at once, with one line that names the
// node and the library (the agent loads libpmix only for --mpi).
TEST_F(BareBookworm, MpiIsRefusedWhereThereIsNoPmixNamingTheNode) {
  auto r = bed_->dlaunch({"--mpi", "sh", "-c", "true"}, 60);
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_LT(r.seconds, 30) << r.err;
  EXPECT_NE(r.err.find("libpmix.so.2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--mpi needs the PMIx library"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(bed_->address(0)), std::string::npos) << r.err;
}

class BareBullseye : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    bed_ = std::make_unique<BareBed>("bullseye", std::vector<std::string>{}, "bullseye");
  }
  static void TearDownTestSuite() { bed_.reset(); }
  void SetUp() override {
    if (!bed_->skip().empty()) GTEST_SKIP() << bed_->skip();
    ASSERT_TRUE(bed_->error().empty()) << bed_->error();
  }
  static std::unique_ptr<BareBed> bed_;
};
std::unique_ptr<BareBed> BareBullseye::bed_;

// Debian 11's glibc 2.31: older than the one the agent was built with.
TEST_F(BareBullseye, AShellJobCheckAndVersionRunOnAnOlderGlibc) {
  shell_job_check_and_version(*bed_, "GLIBC 2.31");
}

// PyTorch's DDP on bare nodes that have python3 and torch from Debian.
TEST(BareTorch, TrainPyRunsWithTheCopiedAgent) {
  const char* want = std::getenv("DLAUNCH_BED_TORCH");
  const std::string cache = std::getenv("DLAUNCH_TESTBED_CACHE") != nullptr
                                ? std::getenv("DLAUNCH_TESTBED_CACHE")
                                : "/var/cache/dlaunch-testbed";
  bool cached = false;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache, ec)) {
    cached = cached ||
             slurp(e.path().string() + "/.packages").find("python3-torch") != std::string::npos;
  }
  if (!cached && (want == nullptr || std::string(want) != "1")) {
    GTEST_SKIP() << "no bookworm root with python3-torch in " << cache
                 << " (400+ packages: DLAUNCH_BED_TORCH=1 makes it once)";
  }
  BareBed bed("bookworm", {"python3", "python3-torch"}, "torch");
  if (!bed.skip().empty()) GTEST_SKIP() << bed.skip();
  ASSERT_TRUE(bed.error().empty()) << bed.error();
  fs::copy_file(std::string(SOURCE_DIR) + "/examples/train.py", bed.dir() + "/share/train.py",
                fs::copy_options::overwrite_existing);
  auto r = bed.dlaunch({"python3", "train.py"}, 600, "/srv/share");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count(r.err, "copied this one"), 2u) << r.err;
  EXPECT_NE(r.out.find("parameters identical on all 2 ranks"), std::string::npos) << r.out;
}

}  // namespace
