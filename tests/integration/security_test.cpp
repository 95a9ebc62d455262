// dlaunch against a hostile local user: nothing dlaunch or its agents create
// in a shared directory may be taken over by someone else.
//
// The attacks are played for real: as root (CI), the test creates an
// unprivileged user and plants, as that user, what an attacker would, then
// runs a root job next to it. Elsewhere the tests skip, saying why.
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;

namespace {

constexpr const char* kAttacker = "dlaunch-attacker";

// The uid and gid of the attacking user, created if missing; false (with
// why) where that cannot be done.
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

// Runs `plant` in a child process that has become the attacker; true if it
// returned true.
template <typename F>
bool as_attacker(uid_t uid, gid_t gid, F plant) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 ||
        ::setresuid(uid, uid, uid) != 0) {
      ::_exit(3);
    }
    ::umask(0);
    ::_exit(plant() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int read_int(const std::string& path) {
  std::ifstream in(path);
  int v = 0;
  in >> v;
  return v;
}

// The next `count` pids the kernel will hand out in this pid namespace, each
// once: after the last one given, up to pid_max - 1, then from 300 on (the
// kernel skips the low pids when it wraps around).
std::vector<int> next_pids(int count) {
  constexpr int kFirstAfterWrap = 300;
  const int pid_max = read_int("/proc/sys/kernel/pid_max");
  int pid = read_int("/proc/sys/kernel/ns_last_pid");
  std::vector<int> out;
  for (int i = 0; i < count && i < pid_max - kFirstAfterWrap; ++i) {
    pid = pid + 1 >= pid_max ? kFirstAfterWrap : std::max(pid + 1, kFirstAfterWrap);
    out.push_back(pid);
  }
  return out;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// Issue 15, item 1. The agent used to run its PMIx server in
// /tmp/dlaunch-pmix-<job>-node<N>-<pid> and took that directory as it found
// it. An attacker who pre-created it for a range of pids, with symbolic links
// named like Open MPI's shared-memory segments inside, made root's ranks
// write 4 MB through them into a root-owned 0600 file. Now the directory is
// made by mkdtemp and checked, so the planted ones are never used.
TEST(Security, PlantedPmixDirectoriesAreNeverUsed) {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string why;
  if (!attacker_ids(uid, gid, why)) GTEST_SKIP() << why;

  // The segment names Open MPI will use for this job id (they depend only on
  // the host name, the job's PMIx namespace and the local rank): the attacker
  // learns them from a run of the same job id, as the original report did.
  const auto job = unique_job_id("pmix-hijack");
  auto learn = run(dlaunch_cmd({"-n", "2", "--mpi", "--job-id", job, MPI_SEGMENTS_BIN}), 120,
                   mpi_worker_env());
  ASSERT_EQ(learn.exit_code, 0) << learn.err;
  std::vector<std::string> segments;
  for (const auto& line : lines_of(learn.out)) {
    const auto name = line.substr(line.find("] ") + 2);
    if (std::find(segments.begin(), segments.end(), name) == segments.end())
      segments.push_back(name);
  }
  ASSERT_EQ(segments.size(), 2u) << learn.out;

  // Root's secret, in a folder only root can enter.
  std::string vault = (fs::temp_directory_path() / "dlaunch-vault.XXXXXX").string();
  ASSERT_NE(::mkdtemp(vault.data()), nullptr);
  const std::string victim = vault + "/secret";
  const std::string secret = "root's secret, 0600\n";
  std::ofstream(victim) << secret;
  ::chmod(victim.c_str(), 0600);

  // The attacker plants, for the next pids, the directories the old agent
  // would have used for node 0, each holding links to the victim named like
  // the segments, and open to everyone.
  const std::string tmp = "/tmp";
  std::vector<std::string> planted;
  for (const int pid : next_pids(3000)) {
    planted.push_back(tmp + "/dlaunch-pmix-" + job + "-node0-" + std::to_string(pid));
  }
  // And Open MPI's own session directory for root, /tmp/ompi.<host>.0, which
  // Open MPI takes as it finds it when it can write there.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string session = tmp + "/ompi." + host + ".0";
  std::error_code ignored;
  fs::remove_all(session, ignored);
  ASSERT_TRUE(as_attacker(uid, gid, [&] {
    if (::mkdir(session.c_str(), 0777) != 0) return false;
    for (const auto& d : planted) {
      if (::mkdir(d.c_str(), 0777) != 0 && errno != EEXIST) return false;
      for (const auto& s : segments) {
        if (::symlink(victim.c_str(), (d + "/" + s).c_str()) != 0 && errno != EEXIST) return false;
      }
    }
    return true;
  }));

  auto r = run(dlaunch_cmd({"-n", "2", "--mpi", "--job-id", job, MPI_SEGMENTS_BIN}), 120,
               mpi_worker_env());
  EXPECT_EQ(r.exit_code, 0) << r.err;

  EXPECT_EQ(read_all(victim), secret) << "root's file was written through a planted link";
  // Root made nothing in any planted folder: only the attacker's links are there.
  int foreign = 0;
  planted.push_back(session);
  for (const auto& d : planted) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      struct stat st {};
      if (::lstat(e.path().c_str(), &st) == 0 && st.st_uid != uid) {
        ++foreign;
        ADD_FAILURE() << "root created " << e.path() << " in a folder of the attacker's";
      }
    }
  }
  EXPECT_EQ(foreign, 0);
  // And the job's own directory is gone.
  for (const auto& e : fs::directory_iterator(tmp)) {
    const auto name = e.path().filename().string();
    if (name.rfind("dlaunch-pmix-" + job + "-", 0) != 0) continue;
    struct stat st {};
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, uid) << e.path() << " left behind by the job";
  }

  for (const auto& d : planted) fs::remove_all(d);
  fs::remove_all(vault);
}

// The same class of bug for the workers' error-file folder
// (TORCHELASTIC_ERROR_FILE): a planted folder is neither used nor a way to
// deny the job its error files.
TEST(Security, PlantedErrorFileFoldersAreNeverUsed) {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string why;
  if (!attacker_ids(uid, gid, why)) GTEST_SKIP() << why;
  const auto job = unique_job_id("errdir-hijack");
  std::vector<std::string> planted;
  for (const int pid : next_pids(1000)) {
    planted.push_back("/tmp/dlaunch-" + job + "-node0-" + std::to_string(pid));
  }
  ASSERT_TRUE(as_attacker(uid, gid, [&] {
    for (const auto& d : planted) {
      if (::mkdir(d.c_str(), 0777) != 0 && errno != EEXIST) return false;
    }
    return true;
  }));
  // The worker reports where its error file would go, and who owns that folder.
  auto r = run(dlaunch_cmd({"-n", "1", "--job-id", job, "sh", "-c",
                            "d=$(dirname \"$TORCHELASTIC_ERROR_FILE\"); stat -c '%u %a' \"$d\""}),
               60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] 0 700\n") << r.err;
  for (const auto& d : planted) {
    std::error_code ec;
    EXPECT_TRUE(fs::is_empty(d, ec)) << d;
    fs::remove_all(d);
  }
}

namespace {
// Pids whose command line is exactly `argv` (the test's own marker process).
std::vector<pid_t> pids_running(const std::vector<std::string>& argv) {
  std::string want;
  for (const auto& a : argv) want += a + '\0';
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (read_all(e.path().string() + "/cmdline") == want) out.push_back(std::stoi(name));
  }
  return out;
}
}  // namespace

// Issue 15, item 3. A worker's child that leaves its process group and the
// process tree and clears its environment (setsid env -i ... &) used to
// survive an agent killed by SIGKILL (the OOM killer): the guard finds
// leftovers by the environment token. Now every worker starts in a cgroup of
// the job's, and the guard kills the whole cgroup.
TEST(Security, AProcessThatEscapesGroupTreeAndTokenDiesWithItsAgent) {
  auto probe = run(dlaunch_cmd({"-n", "1", "sh", "-c", "grep '^0::' /proc/self/cgroup"}), 60);
  if (probe.out.find("/dlaunch-") == std::string::npos) {
    GTEST_SKIP() << "no cgroup v2 the agent may create cgroups in here (" << probe.out << probe.err
                 << ")";
  }
  const std::string marker = "4000." + std::to_string(::getpid());
  const auto job = unique_job_id("escape");
  Process p(dlaunch_cmd(
      {"-n", "1", "--job-id", job, "sh", "-c",
       "setsid env -i sh -c 'exec sleep " + marker + "' & echo started; exec sleep 60"}));
  ASSERT_TRUE(p.wait_for_lines(1, 20));
  std::vector<pid_t> escaped;
  for (int i = 0; i < 100 && escaped.empty(); ++i) {
    escaped = pids_running({"sleep", marker});
    ::usleep(20 * 1000);
  }
  ASSERT_EQ(escaped.size(), 1u) << "the escaping process did not start";
  // Kill the agent (dlaunch's child), as the OOM killer would.
  for (pid_t c : dlaunch::descendants_of(p.pid())) {
    if (read_all("/proc/" + std::to_string(c) + "/comm") == "dlaunch-agent\n" &&
        read_all("/proc/" + std::to_string(c) + "/stat").find(") S " + std::to_string(p.pid())) !=
            std::string::npos) {
      ::kill(c, SIGKILL);
    }
  }
  auto r = p.finish(20);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  for (int i = 0; i < 100 && !pids_running({"sleep", marker}).empty(); ++i) ::usleep(20 * 1000);
  const auto left = pids_running({"sleep", marker});
  EXPECT_TRUE(left.empty()) << "the escaped process outlived its agent";
  for (pid_t pid : left) ::kill(pid, SIGKILL);  // by pid: ours, just found
}
