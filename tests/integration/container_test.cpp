// Containers (docs/containers.md, agent/runtime/): real jobs on two logical
// nodes of this machine whose ranks run in one podman container per node,
// on a podman of the test's own (tests/testbed/podman.sh: configuration,
// storage and state in a temp folder; an image made here from the static
// busybox of busybox-static, never pulled). Needs root and podman; each test
// says why it is skipped otherwise.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "support.h"

using namespace dltest;

namespace {

const std::string kBed = std::string(SOURCE_DIR) + "/tests/testbed/podman.sh";
const std::string kImage = "localhost/dlaunch-test:latest";
const std::string kRegistryBed = std::string(SOURCE_DIR) + "/tests/testbed/registry.sh";
const std::string kNetnsBed = std::string(SOURCE_DIR) + "/tests/testbed/netns.sh";

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The job's cgroups (dlaunch-JOB-node...) beside this test's own cgroup,
// where the agents it starts make theirs (agent/posix_os.cpp).
std::vector<std::string> job_cgroups(const std::string& job) {
  std::string path;
  std::ifstream self("/proc/self/cgroup");
  for (std::string line; std::getline(self, line);) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  std::string mount;
  std::ifstream info("/proc/self/mountinfo");
  for (std::string line; std::getline(info, line);) {
    const auto dash = line.find(" - cgroup2 ");
    if (dash == std::string::npos) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, dev, root;
    fields >> id >> parent >> dev >> root >> mount;
    if (root == "/") break;
    mount.clear();
  }
  std::vector<std::string> out;
  if (path.empty() || mount.empty()) return out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(mount + path, ec)) {
    if (e.path().filename().string().rfind("dlaunch-" + job + "-node", 0) == 0)
      out.push_back(e.path().string());
  }
  return out;
}

// The job's containers as the bed's podman (env) lists them, stopped ones
// included; and the same once they are gone, or at the timeout.
std::string job_containers(const std::string& job, const std::vector<std::string>& env) {
  auto r = run({"podman", "ps", "-a", "-q", "--filter", "label=dlaunch.job=" + job}, 30, env);
  return r.out + (r.exit_code == 0 ? "" : "(podman ps failed: " + r.err + ")");
}
std::string wait_job_containers_gone(const std::string& job, const std::vector<std::string>& env,
                                     double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string left = job_containers(job, env);
  while (!left.empty() && std::chrono::steady_clock::now() < until) {
    ::usleep(200 * 1000);
    left = job_containers(job, env);
  }
  return left;
}

// A podman bed of a suite's own (tests/testbed/podman.sh start) in a new
// folder `dir` named after `tag`: the variables to run its podman with, or
// why there is none (skip: root or podman missing; failed: its start failed).
std::vector<std::string> start_podman_bed(const std::string& tag, std::string& dir,
                                          std::string& skip, std::string& failed) {
  if (::geteuid() != 0) {
    skip = "needs root: the test bed's podman runs as root (docs/testbeds.md)";
    return {};
  }
  remove_stale_beds("dlaunch-podman-", kBed);
  dir = temp_dir("podman-" + std::to_string(::getpid()) + tag);
  auto r = run({kBed, "start", dir}, 120);
  if (r.exit_code == 3) {
    skip = "no podman test bed: " + r.err;
  } else if (r.exit_code != 0) {
    failed = "tests/testbed/podman.sh start failed (" + std::to_string(r.exit_code) + "): " + r.err;
  }
  return r.exit_code == 0 ? lines_of(r.out) : std::vector<std::string>{};
}

class Containers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { env_ = start_podman_bed("", dir_, skip_, failed_); }
  static void TearDownTestSuite() {
    if (!registry_dir_.empty()) (void)run({kRegistryBed, "stop", registry_dir_}, 30);
    if (!dir_.empty()) (void)run({kBed, "stop", dir_}, 120);
  }
  // A registry of the test's own on a loopback port (tests/testbed/
  // registry.sh), which the bed's podman may reach over plain HTTP, with
  // the bed's image pushed to it as NAME: its address, or "" with `why`
  // (skip) or a failure already added.
  static std::string registry_with(const std::string& name, std::string& why) {
    if (registry_.empty()) {
      registry_dir_ = temp_dir("registry-" + std::to_string(::getpid()));
      auto r = run({kRegistryBed, "start", registry_dir_}, 30);
      if (r.exit_code == 3) {
        why = "no registry test bed: " + r.err;
        return "";
      }
      const auto lines = lines_of(r.out);
      if (r.exit_code != 0 || lines.empty() || lines.back().rfind("REGISTRY=", 0) != 0) {
        ADD_FAILURE() << "registry.sh start: exit " << r.exit_code << ": " << r.err;
        return "";
      }
      registry_ = lines.back().substr(9);
      std::ofstream conf(dir_ + "/registries.conf", std::ios::app);
      conf << "[[registry]]\nlocation = \"" << registry_ << "\"\ninsecure = true\n";
    }
    auto pushed = run({"podman", "push", "-q", kImage, registry_ + "/" + name}, 60, env_);
    if (pushed.exit_code != 0) {
      ADD_FAILURE() << "podman push: " << pushed.err;
      return "";
    }
    return registry_;
  }
  // The bed's podman behind a script that sleeps `seconds` before a pull
  // (whose sleep carries DLAUNCH_TEST_PULL=mark): dlaunch's environment
  // with that script first on PATH. The folder is removed by the caller.
  static std::vector<std::string> slow_pull_env(const std::string& dir, int seconds,
                                                const std::string& mark) {
    const std::string podman = dlaunch::find_program("podman", dlaunch::current_environment(), "");
    {
      std::ofstream w(dir + "/podman");
      w << "#!/bin/sh\nif [ \"$1\" = pull ]; then env DLAUNCH_TEST_PULL=" << mark << " sleep "
        << seconds << "; fi\nexec " << podman << " \"$@\"\n";
    }
    std::filesystem::permissions(dir + "/podman", std::filesystem::perms::owner_all);
    std::vector<std::string> env = env_;
    env.push_back("PATH=" + dir + ":" + std::getenv("PATH"));
    return env;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(failed_.empty()) << failed_;
  }

  static RunResult dlaunch(const std::string& job, std::vector<std::string> args,
                           double timeout_s = 180) {
    std::vector<std::string> all = {"-H", kLocalhost, "--job-id", job};
    all.insert(all.end(), args.begin(), args.end());
    return run(dlaunch_cmd(all), timeout_s, env_);
  }
  static std::string containers_of(const std::string& job) { return job_containers(job, env_); }
  static std::string wait_containers_gone(const std::string& job, double timeout_s) {
    return wait_job_containers_gone(job, env_, timeout_s);
  }

  static inline std::string skip_;
  static inline std::string failed_;
  static inline std::string dir_;
  static inline std::vector<std::string> env_;
  static inline std::string registry_dir_;
  static inline std::string registry_;  // 127.0.0.1:PORT once started
};

TEST_F(Containers, ShellJobRunsInTheImageWithTheUsersIdsAndTheTorchrunEnvironment) {
  // The proof that a rank ran in the image: a file the host does not have.
  ASSERT_FALSE(std::filesystem::exists("/etc/dlaunch-image"));
  const auto job = unique_job_id("ctr-shell");
  auto r = dlaunch(job, {"--container-image", kImage, "sh", "-c",
                         "echo \"rank=$RANK/$WORLD_SIZE local=$LOCAL_RANK master=$MASTER_ADDR:"
                         "$MASTER_PORT img=$(cat /etc/dlaunch-image) uid=$(id -u):$(id -g) "
                         "var=$DLAUNCH_IMAGE_VAR pwd=$(pwd)\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string ids = std::to_string(::geteuid()) + ":" + std::to_string(::getegid());
  const std::string cwd = std::filesystem::current_path().string();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("rank=" + std::to_string(rank) + "/4 local=" + std::to_string(rank % 2)),
              std::string::npos)
        << r.out;
  }
  EXPECT_EQ(count_of(r.out, "img=dlaunch-test-image uid=" + ids), 4) << r.out;
  EXPECT_EQ(count_of(r.out, "master=127.0.0.1:"), 4) << r.out;
  EXPECT_EQ(count_of(r.out, "var=from-image pwd=" + cwd), 4) << r.out;
  EXPECT_EQ(wait_containers_gone(job, 5), "");
  EXPECT_EQ(wait_job_gone(job, 2), std::vector<pid_t>{});
}

// A node's setup longer than --heartbeat-timeout (here a podman whose `run`
// takes 4 s, as vfs's copy of a large image does) is bounded by
// --start-timeout, not taken for a lost node: the agent says nothing until
// it is ready (a pull is another matter: below).
TEST_F(Containers, AContainerStartLongerThanTheHeartbeatTimeoutIsNoLostNode) {
  const std::string dir = temp_dir("slowpodman");
  const std::string podman = dlaunch::find_program("podman", dlaunch::current_environment(), "");
  ASSERT_NE(podman, "");
  {
    std::ofstream w(dir + "/podman");
    w << "#!/bin/sh\nif [ \"$1\" = run ]; then sleep 4; fi\nexec " << podman << " \"$@\"\n";
  }
  std::filesystem::permissions(dir + "/podman", std::filesystem::perms::owner_all);
  const auto job = unique_job_id("ctr-slowstart");
  std::vector<std::string> env = env_;
  env.push_back("PATH=" + dir + ":" + std::getenv("PATH"));
  auto r = run(
      dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--heartbeat-timeout", "1.5",
                   "--start-timeout", "60", "--container-image", kImage, "sh", "-c", "echo ran"}),
      120, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "ran"), 4) << r.out << r.err;
  EXPECT_EQ(wait_containers_gone(job, 20), "");
  std::filesystem::remove_all(dir);
}

// An image that is not on the node is pulled by its agent before the node's
// container starts, from a registry (Debian's docker-registry on a loopback
// port of the test's own): said per node on stderr (on a terminal, on the
// progress line), the node heartbeating while it pulls and the pull not
// counted against --start-timeout. The pull is made to take 8 s (a podman
// whose `pull` sleeps first), longer than --start-timeout (5 s) and than
// --heartbeat-timeout (1.5 s). A second job finds the image there and
// pulls nothing.
TEST_F(Containers, AnImageNotOnTheNodeIsPulledFirstAndTheStartWaitsForThePull) {
  std::string why;
  const std::string registry = registry_with("dlaunch-pull:1", why);
  if (registry.empty()) {
    if (!why.empty()) GTEST_SKIP() << why;
    return;
  }
  const std::string image = registry + "/dlaunch-pull:1";
  const std::string dir = temp_dir("slowpull");
  const auto job = unique_job_id("ctr-pull");
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--heartbeat-timeout", "1.5",
                            "--start-timeout", "5", "--container-image", image, "sh", "-c",
                            "echo ran $(cat /etc/dlaunch-image)"}),
               120, slow_pull_env(dir, 8, job));
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "ran dlaunch-test-image"), 4) << r.out;
  for (const std::string node : {"node 0 (", "node 1 ("}) {
    EXPECT_EQ(count_of(r.err, "dlaunch: " + node), 2) << r.err;
  }
  EXPECT_EQ(count_of(r.err, "): pulling image " + image + "\n"), 2) << r.err;
  EXPECT_EQ(count_of(r.err, "): pulled image " + image + " in "), 2) << r.err;
  EXPECT_EQ(wait_containers_gone(job, 5), "");

  const auto again = unique_job_id("ctr-pulled");
  auto second = dlaunch(again, {"--container-image", image, "sh", "-c", "echo ran"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(count_of(second.out, "ran"), 4);
  EXPECT_EQ(second.err.find("pulling"), std::string::npos) << second.err;
  EXPECT_EQ(wait_containers_gone(again, 5), "");

  // --check pulls as the job would, and says so on stderr (its table is
  // its output; a node pulling for minutes is not silent).
  auto check = run(dlaunch_cmd({"-H", kLocalhost, "--check", "--container-pull", "always",
                                "--container-image", image, "true"}),
                   120, env_);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_EQ(count_of(check.err, "): pulling image " + image + "\n"), 2) << check.err;
  EXPECT_EQ(count_of(check.err, "): pulled image " + image + " in "), 2) << check.err;
}

TEST_F(Containers, APullThatFailsIsTheNodesFailureNamingTheImageAndWhy) {
  std::string why;
  const std::string registry = registry_with("dlaunch-pull:1", why);
  if (registry.empty()) {
    if (!why.empty()) GTEST_SKIP() << why;
    return;
  }
  const std::string image = registry + "/dlaunch-nothere:1";
  const auto job = unique_job_id("ctr-badpull");
  auto r = dlaunch(job, {"--container-image", image, "sh", "-c", "echo ran"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot pull image " + image + " on "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pull` exited with 125"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("ran"), std::string::npos) << r.out;
  EXPECT_EQ(wait_containers_gone(job, 5), "");
}

// Ctrl-C while the nodes pull: the pulls are stopped with the job (they run
// in the job's cgroup, as children of the agent), nothing is left.
TEST_F(Containers, AJobStoppedWhileItsNodesPullLeavesNoPullBehind) {
  std::string why;
  const std::string registry = registry_with("dlaunch-pull:1", why);
  if (registry.empty()) {
    if (!why.empty()) GTEST_SKIP() << why;
    return;
  }
  const std::string dir = temp_dir("stoppull");
  const auto job = unique_job_id("ctr-stoppull");
  Process p(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--container-image",
                         registry + "/dlaunch-pull:1", "--container-pull", "always", "sh", "-c",
                         "echo ran"}),
            slow_pull_env(dir, 60, job));
  ASSERT_TRUE(p.wait_for_stderr(
      [](const std::string& err) { return count_of(err, "): pulling image ") == 2; }, 60));
  // Both pulls run (the script may not have reached its sleep yet).
  const auto pulls = [&job] { return dlaunch::pids_with_env_entry("DLAUNCH_TEST_PULL=" + job); };
  for (int i = 0; i < 200 && pulls().size() < 2; ++i) ::usleep(50 * 1000);
  ASSERT_EQ(pulls().size(), 2u);
  p.signal(SIGINT);
  auto r = p.finish(30);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_LT(r.seconds, 20);
  EXPECT_EQ(r.out.find("ran"), std::string::npos) << r.out;
  for (int i = 0; i < 100 && !pulls().empty(); ++i) ::usleep(50 * 1000);
  EXPECT_EQ(pulls(), std::vector<pid_t>{});
  EXPECT_EQ(wait_containers_gone(job, 5), "");
}

// --container-shm-size: the ranks of a node share a private /dev/shm of
// that size (what NCCL's shared memory needs), not the host's; what one rank
// writes there the other of its node reads.
TEST_F(Containers, ShmSizeGivesTheNodesRanksAPrivateDevShmOfThatSize) {
  const auto job = unique_job_id("ctr-shm");
  auto r = dlaunch(job, {"--container-image", kImage, "--container-shm-size", "96m", "sh", "-c",
                         "if [ \"$LOCAL_RANK\" = 0 ]; then echo \"$GROUP_RANK\" > /dev/shm/from0; "
                         "fi; sleep 1; echo \"rank=$RANK shm=$(stat -f -c '%b*%S' /dev/shm) "
                         "peer=$(cat /dev/shm/from0)\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string size = "shm=" + std::to_string(96 * 1024 * 1024 / 4096) + "*4096";
  EXPECT_EQ(count_of(r.out, size), 4) << r.out;
  EXPECT_EQ(count_of(r.out, "peer=0"), 2) << r.out;
  EXPECT_EQ(count_of(r.out, "peer=1"), 2) << r.out;
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/from0"));
  EXPECT_EQ(wait_containers_gone(job, 5), "");
  EXPECT_EQ(wait_job_gone(job, 2), std::vector<pid_t>{});
}

// The hostfile's `container:` (docs/containers.md): node0's ranks in the
// image, node1's on the host; a --container-* option then needs no
// --container-image, but does need one of the two.
TEST_F(Containers, AHostfilesContainerKeyPutsThatNodesRanksInTheImage) {
  const std::string hosts =
      temp_file("hosts:\n  - {host: localhost, name: node0, slots: 2, container: " + kImage +
                    "}\n  - {host: localhost, name: node1, slots: 2}\n",
                ".yaml");
  const auto job = unique_job_id("ctr-hostfile");
  auto r = run(dlaunch_cmd({"-H", hosts, "--job-id", job, "--container-pull", "never", "sh", "-c",
                            "echo \"rank=$RANK img=$(cat /etc/dlaunch-image 2>/dev/null || echo "
                            "host)\""}),
               180, env_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank=0 img=dlaunch-test-image"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank=1 img=dlaunch-test-image"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank=2 img=host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank=3 img=host"), std::string::npos) << r.out;
  EXPECT_EQ(wait_containers_gone(job, 5), "");
  auto dry = run(dlaunch_cmd({"-H", hosts, "--dry-run", "true"}), 60, env_);
  EXPECT_NE(dry.out.find("container: node 0 (node0): image " + kImage + " (hostfile)"),
            std::string::npos)
      << dry.out;
  auto alone = run(dlaunch_cmd({"-H", kLocalhost, "--container-pull", "never", "true"}), 60, env_);
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("--container-pull: needs --container-image, a hostfile `container:` or "
                           "an app's --container-image"),
            std::string::npos)
      << alone.err;
  std::filesystem::remove(hosts);
}

// MPMD (docs/mpmd.md): an app's --container-image puts its ranks in that
// image, here on node1, while the first app's run on node0's host; two apps
// that would share a node in different images are refused before anything
// starts.
TEST_F(Containers, AnAppsContainerImagePutsThatAppsRanksInTheImage) {
  const std::string probe =
      "echo \"rank=$RANK role=$ROLE_NAME img=$(cat /etc/dlaunch-image 2>/dev/null || echo host)\"";
  const std::string app_file =
      temp_file("-n 2 --host node0 --role native sh -c '" + probe +
                    "'\n-n 2 --host node1 --role boxed --container-image " + kImage + " sh -c '" +
                    probe + "'\n",
                ".app");
  const auto job = unique_job_id("ctr-app");
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--container-pull", "never", "--app",
                            app_file}),
               180, env_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank=0 role=native img=host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank=1 role=native img=host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank=2 role=boxed img=dlaunch-test-image"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank=3 role=boxed img=dlaunch-test-image"), std::string::npos) << r.out;
  EXPECT_EQ(wait_containers_gone(job, 5), "");
  // The same apps sharing node0 (no --host): refused, nothing started.
  const std::string shared = temp_file(
      "-n 1 sh -c '" + probe + "'\n-n 1 --container-image " + kImage + " sh -c '" + probe + "'\n",
      ".app");
  auto refused = run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--container-pull", "never",
                                  "--app", shared}),
                     60, env_);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find(shared +
                             ":1: --container-image: its ranks run on the host (no "
                             "image) but share node 0 (node0) with those of " +
                             shared + ":2, which run in " + kImage),
            std::string::npos)
      << refused.err;
  EXPECT_EQ(refused.out, "");
  std::filesystem::remove(app_file);
  std::filesystem::remove(shared);
}

TEST_F(Containers, ContainerEnvKeepsTheHostsValueOverTheImages) {
  const auto job = unique_job_id("ctr-env");
  std::vector<std::string> args = {"--container-image",           kImage, "-x",
                                   "DLAUNCH_IMAGE_VAR=from-host", "sh",   "-c",
                                   "echo var=$DLAUNCH_IMAGE_VAR"};
  // -x is dlaunch's own: it wins over the image like RANK does.
  auto r = dlaunch(job, args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "var=from-host"), 4) << r.out;
}

// Fail-fast: the others sleep for 10 minutes, so a job that ends within the
// run's limit was stopped by the failure. (The bound is loose: podman's own
// start takes seconds, tens of seconds on a loaded machine.)
TEST_F(Containers, FailingRankFailsTheJobFastWithItsCodeAndTheReport) {
  const auto job = unique_job_id("ctr-fail");
  auto r = dlaunch(job,
                   {"--container-image", kImage, "--kill-grace", "2", "sh", "-c",
                    "if [ \"$RANK\" = 1 ]; then echo going >&2; exit 3; fi; exec sleep 600"},
                   300);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("rank 1 exited with code 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("| going"), std::string::npos) << r.err;
  EXPECT_EQ(wait_containers_gone(job, 5), "");
  EXPECT_EQ(wait_job_gone(job, 2), std::vector<pid_t>{});
}

TEST_F(Containers, DlaunchKilledWithSigkillLeavesNoContainerAndNoProcess) {
  const auto job = unique_job_id("ctr-headkill");
  std::vector<std::string> args = {"-H",           kLocalhost, "--job-id",          job,
                                   "--kill-grace", "1",        "--container-image", kImage,
                                   "sh",           "-c",       "echo up; sleep 60"};
  Process p(dlaunch_cmd(args), env_);
  ASSERT_TRUE(p.wait_for_lines(4, 120));
  ASSERT_NE(containers_of(job), "");
  const auto agents = agent_processes(p.pid());
  ASSERT_EQ(agents.size(), 4u);  // two agents, each with its guard
  p.signal(SIGKILL);
  p.finish(10);
  EXPECT_EQ(wait_containers_gone(job, 20), "");
  EXPECT_EQ(wait_job_gone(job, 5), std::vector<pid_t>{});
  // The agents end too (they once idled on after a Done they could not write).
  EXPECT_EQ(wait_agents_gone(agents, 10), std::vector<pid_t>{});
}

// The agents of a dlaunch (not their guards, forks of theirs with the same
// name), and the guards.
struct AgentsAndGuards {
  std::vector<pid_t> agents;
  std::vector<pid_t> guards;
};
AgentsAndGuards agents_of(pid_t dlaunch) {
  AgentsAndGuards out;
  const auto name_of = [](pid_t pid) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    std::getline(comm, name);
    return name;
  };
  for (pid_t c : dlaunch::descendants_of(dlaunch)) {
    if (name_of(c) != "dlaunch-agent") continue;
    std::ifstream stat("/proc/" + std::to_string(c) + "/stat");
    std::string line;
    std::getline(stat, line);
    // pid (comm) state ppid ...
    const auto parent = static_cast<pid_t>(std::atoi(line.c_str() + line.rfind(')') + 4));
    (name_of(parent) == "dlaunch-agent" ? out.guards : out.agents).push_back(c);
  }
  return out;
}

// The agents cannot clean up: their guards remove the containers.
TEST_F(Containers, AgentKilledWithSigkillLeavesNoContainerAndNoProcess) {
  const auto job = unique_job_id("ctr-agentkill");
  std::vector<std::string> args = {
      "-H", kLocalhost, "--job-id",         job, "--container-image", kImage,
      "sh", "-c",       "echo up; sleep 60"};
  Process p(dlaunch_cmd(args), env_);
  ASSERT_TRUE(p.wait_for_lines(4, 120));
  const auto found = agents_of(p.pid());
  ASSERT_EQ(found.agents.size(), 2u);
  ASSERT_EQ(found.guards.size(), 2u);
  for (pid_t a : found.agents) ::kill(a, SIGKILL);
  auto r = p.finish(60);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_EQ(wait_containers_gone(job, 30), "");
  EXPECT_EQ(wait_job_gone(job, 5), std::vector<pid_t>{});
}

// Nothing of dlaunch's is left to clean up: the ranks die with their agent
// (parent-death signal), dlaunch-keepalive sees the agent's pid go, and
// podman removes the container (--rm).
TEST_F(Containers, AgentAndGuardKilledWithSigkillLeaveNoContainerAndNoProcess) {
  const auto job = unique_job_id("ctr-allkill");
  std::vector<std::string> args = {"-H",
                                   kLocalhost,
                                   "--job-id",
                                   job,
                                   "--container-image",
                                   kImage,
                                   "sh",
                                   "-c",
                                   "echo up; exec sleep 60"};
  Process p(dlaunch_cmd(args), env_);
  ASSERT_TRUE(p.wait_for_lines(4, 120));
  const auto found = agents_of(p.pid());
  ASSERT_EQ(found.guards.size(), 2u);
  for (pid_t g : found.guards) ::kill(g, SIGKILL);
  for (pid_t a : found.agents) ::kill(a, SIGKILL);
  p.signal(SIGKILL);
  p.finish(30);
  EXPECT_EQ(wait_containers_gone(job, 30), "");
  EXPECT_EQ(wait_job_gone(job, 5), std::vector<pid_t>{});
  // With its agent and guard killed, the node's job cgroup stays, empty;
  // the next agent to make one beside it removes it.
  const auto left = job_cgroups(job);
  if (left.empty()) return;  // no cgroup for the job on this machine
  auto next = run(dlaunch_cmd({"-H", kLocalhost, "true"}), 60, env_);
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_EQ(job_cgroups(job), std::vector<std::string>{}) << "left before: " << left.front();
}

// A container of the same job and node that an earlier agent left (here one
// made by hand, held by a process that outlives the job) is replaced, and
// gone at the end with the job's own.
TEST_F(Containers, ALeftoverContainerOfTheSameJobIsReplacedAndRemoved) {
  const auto job = unique_job_id("ctr-leftover");
  Process holder({"sleep", "120"});
  auto made =
      run({"podman", "run", "-d", "--rm", "--pid", "host", "--name", "dlaunch-" + job + "-node0",
           "--label", "dlaunch.job=" + job, "--entrypoint", "/.dlaunch/keepalive", "-v",
           std::string(DLAUNCH_KEEPALIVE_BIN) + ":/.dlaunch/keepalive:ro", kImage,
           std::to_string(holder.pid())},
          60, env_);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  ASSERT_NE(containers_of(job), "");
  auto r = dlaunch(job, {"--container-image", kImage, "sh", "-c", "echo ok=$RANK"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "ok="), 4) << r.out;
  EXPECT_EQ(wait_containers_gone(job, 5), "");
  holder.signal(SIGKILL);
  holder.finish(5);
}

// An agent copied to a node alone (as dlaunch's copy to a node without one
// leaves it, docs/portable-agent.md; here the hostfile's agent: a copy of
// the build's in a folder of its own) has no dlaunch-keepalive beside it: it
// writes the copy it carries into the job's private folder.
TEST_F(Containers, AnAgentCopiedAloneStartsTheContainerWithTheKeepaliveItCarries) {
  const std::string dir = temp_dir("lone-agent");
  std::filesystem::copy_file(DLAUNCH_AGENT_BIN, dir + "/dlaunch-agent");
  ASSERT_FALSE(std::filesystem::exists(dir + "/dlaunch-keepalive"));
  const std::string hosts = temp_file(
      "hosts:\n  - {host: localhost, name: node0, slots: 2, agent: " + dir + "/dlaunch-agent}\n",
      ".yaml");
  const auto job = unique_job_id("ctr-lone");
  auto r = run(dlaunch_cmd({"-H", hosts, "--job-id", job, "--container-image", kImage, "sh", "-c",
                            "echo ok=$RANK img=$(cat /etc/dlaunch-image)"}),
               120, env_);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(hosts);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "img=dlaunch-test-image"), 2) << r.out;
  EXPECT_EQ(wait_containers_gone(job, 10), "");
  EXPECT_EQ(wait_job_gone(job, 5), std::vector<pid_t>{});
}

// Two jobs with the same id on one machine (a --job-id given twice): the
// second finds the first's container under its name, held by a running
// agent, and fails saying so; the first job's container stays, and it ends
// as it would have.
TEST_F(Containers, AJobWithTheIdOfARunningOneDoesNotTakeItsContainer) {
  const auto job = unique_job_id("ctr-sameid");
  Process first(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--container-image", kImage, "sh",
                             "-c", "echo up; sleep 4; echo done=$RANK"}),
                env_);
  ASSERT_TRUE(first.wait_for_lines(4, 120)) << first.finish(1).err;
  auto second = dlaunch(job, {"--container-image", kImage, "sh", "-c", "echo second"});
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_NE(second.err.find("is held by a running dlaunch-agent (pid "), std::string::npos)
      << second.err;
  EXPECT_NE(second.err.find("give each job its own --job-id"), std::string::npos) << second.err;
  EXPECT_EQ(second.out.find("second"), std::string::npos) << second.out;
  auto r = first.finish(60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "done="), 4) << r.out;
  EXPECT_EQ(wait_containers_gone(job, 10), "");
}

// A node with NVIDIA GPUs gives them to the container through podman's CDI
// spec. No GPU here: the node's /dev/nvidiactl comes from a test root
// (DLAUNCH_HEALTH_ROOT), and the spec, which podman reads from /etc/cdi,
// names /dev/null as the device and sets a variable; /etc/cdi exists only
// in the job's private mount namespace (an overlay over /etc), never on
// this machine. The ranks see the device and the variable, that is, podman
// applied the spec; on a node without the driver, nothing is asked.
TEST_F(Containers, TheNodesGpusReachTheContainerThroughTheCdiSpec) {
  if (run({"sh", "-c", "command -v unshare"}, 10).exit_code != 0)
    GTEST_SKIP() << "unshare(1) is not installed";
  const std::string dir = temp_dir("cdi");
  const std::string root = dir + "/root";
  std::filesystem::create_directories(root + "/dev");
  std::filesystem::create_directories(root + "/etc/cdi");
  std::filesystem::create_directories(dir + "/upper");
  std::filesystem::create_directories(dir + "/work");
  std::ofstream(root + "/dev/nvidiactl").close();
  std::ofstream(root + "/etc/cdi/nvidia.yaml") << "cdiVersion: \"0.5.0\"\n"
                                                  "kind: nvidia.com/gpu\n"
                                                  "devices:\n"
                                                  "- name: all\n"
                                                  "  containerEdits:\n"
                                                  "    deviceNodes:\n"
                                                  "    - path: /dev/nvidia-fake0\n"
                                                  "      hostPath: /dev/null\n"
                                                  "containerEdits:\n"
                                                  "  env:\n"
                                                  "  - DLAUNCH_CDI_EDITS=applied\n";
  const auto job_in_namespace = [&](const std::string& job, bool gpus) {
    std::vector<std::string> argv = {
        "unshare",
        "-m",
        "sh",
        "-c",
        "mount -t overlay overlay -o lowerdir=/etc,upperdir=\"$0\"/upper,workdir=\"$0\"/work "
        "/etc && mkdir -p /etc/cdi && cp \"$0\"/root/etc/cdi/nvidia.yaml /etc/cdi/ && exec \"$@\"",
        dir};
    const auto cmd =
        dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--container-image", kImage, "sh", "-c",
                     "echo gpu=$RANK:$DLAUNCH_CDI_EDITS:$(test -c /dev/nvidia-fake0 "
                     "&& echo device)"});
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    std::vector<std::string> env = env_;
    if (gpus) env.push_back("DLAUNCH_HEALTH_ROOT=" + root);
    return run(argv, 180, env);
  };
  const auto job = unique_job_id("ctr-gpus");
  auto r = job_in_namespace(job, true);
  if (r.exit_code != 0 && r.err.find("overlay") != std::string::npos)
    GTEST_SKIP() << "no overlay mount over /etc here: " << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(count_of(r.out, "gpu=" + std::to_string(rank) + ":applied:device"), 1) << r.out;
  EXPECT_EQ(wait_containers_gone(job, 5), "");

  const auto plain = unique_job_id("ctr-nogpus");
  r = job_in_namespace(plain, false);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "gpu="), 4) << r.out;
  EXPECT_EQ(count_of(r.out, "applied"), 0) << r.out;
  EXPECT_EQ(count_of(r.out, "device"), 0) << r.out;
  EXPECT_EQ(wait_containers_gone(plain, 5), "");
  EXPECT_FALSE(std::filesystem::exists("/etc/cdi/nvidia.yaml"));
  std::filesystem::remove_all(dir);
}

// --timeout's stacks of ranks in a container: the stack tool reads the
// image's programs and libraries (gdb, through /proc/PID/root), so a hang in
// a program that only the image holds is named (eu-stack, which reads the
// host's files, gave bare addresses). The image: that static program alone.
TEST_F(Containers, TheStacksOfHungRanksNameTheFramesOfAProgramOnlyTheImageHolds) {
  if (dlaunch::find_program("gdb", dlaunch::current_environment(), "").empty()) {
    GTEST_SKIP() << "no gdb (scripts/install-deps.sh): the stack tool for ranks in a container";
  }
  const std::string program = "/opt/dlaunch-image-only/hang";
  ASSERT_FALSE(std::filesystem::exists(program));
  const std::string root = temp_dir("hangroot");
  std::filesystem::create_directories(root + "/opt/dlaunch-image-only");
  std::filesystem::copy_file(IMAGE_HANG_BIN, root + program);
  const std::string image = "localhost/dlaunch-hang:1";
  auto imported =
      run({"sh", "-c", "tar -C \"$0\" -c . | podman import -q - \"$1\"", root, image}, 60, env_);
  std::filesystem::remove_all(root);
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const auto job = unique_job_id("ctr-stacks");
  auto r = dlaunch(job, {"--container-image", image, "--timeout", "4", program});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find("ranks 0-3 (4 ranks): "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dlaunch_image_only_wait"), std::string::npos) << r.err;
  EXPECT_EQ(wait_containers_gone(job, 10), "");
  EXPECT_EQ(wait_job_gone(job, 5), std::vector<pid_t>{});
}

TEST_F(Containers, MissingImageIsAClearErrorAndNoRankStarts) {
  const auto job = unique_job_id("ctr-noimage");
  auto r = dlaunch(job, {"--container-image", "localhost/dlaunch-missing:none", "--container-pull",
                         "never", "sh", "-c", "echo ran"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot start the podman container of image localhost/dlaunch-missing:none"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("ran"), std::string::npos) << r.out;
  EXPECT_EQ(wait_containers_gone(job, 5), "");
}

TEST_F(Containers, ProgramMissingInTheImageIsRefusedBeforeAnyRankStarts) {
  // /bin/true is on the host, not in the image's /bin: looked for inside.
  const auto job = unique_job_id("ctr-noprog");
  auto r = dlaunch(job, {"--container-image", kImage, "nproc"}, 120);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("program 'nproc' not found in the container (image " + kImage),
            std::string::npos)
      << r.err;
  EXPECT_EQ(wait_containers_gone(job, 5), "");
}

// --check starts each node's container as the job would, stopped before any
// rank: the program is looked for in the image (not on the host), a missing
// image is named per node, and no container is left.
TEST_F(Containers, CheckStartsEachNodesContainerAndLooksForTheProgramsInIt) {
  // A script only the image has: on the host it is missing, in the image not.
  const auto good = unique_job_id("ctr-check");
  auto r = dlaunch(good, {"--check", "--container-image", kImage, "sh", "/etc/dlaunch-image"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 of 2 node(s) passed"), std::string::npos) << r.out;
  EXPECT_EQ(wait_containers_gone(good, 5), "");

  // nproc is on the host, not in the image.
  const auto noprog = unique_job_id("ctr-check-noprog");
  r = dlaunch(noprog, {"--check", "--container-image", kImage, "nproc"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(count_of(r.out, "program 'nproc' not found in the container (image " + kImage), 2)
      << r.out;
  EXPECT_NE(r.out.find("0 of 2 node(s) passed"), std::string::npos) << r.out;
  EXPECT_EQ(wait_containers_gone(noprog, 5), "");

  const auto noimage = unique_job_id("ctr-check-noimage");
  r = dlaunch(noimage, {"--check", "--json", "--container-image", "localhost/dlaunch-missing:none",
                        "--container-pull", "never", "true"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(count_of(r.out,
                     "cannot start the podman container of image "
                     "localhost/dlaunch-missing:none"),
            2)
      << r.out;
  EXPECT_EQ(count_of(r.out, "\"program\":\"FAILED\""), 2) << r.out;
  EXPECT_EQ(wait_containers_gone(noimage, 5), "");
}

// torchrun's per-node mode (docs/per-node.md) takes the same options.
TEST_F(Containers, PerNodeModeRunsTheRanksInTheImage) {
  const auto job = unique_job_id("ctr-pernode");
  auto r = run(dlaunch_cmd({"--nnodes", "1", "--nproc-per-node", "2", "--standalone", "--job-id",
                            job, "--container-image", kImage, "sh", "-c",
                            "echo rank=$RANK img=$(cat /etc/dlaunch-image)"}),
               180, env_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "img=dlaunch-test-image"), 2) << r.out;
  EXPECT_EQ(wait_containers_gone(job, 5), "");
}

// docker, where a docker daemon answers (none is started here: docker.io's
// dockerd is not part of the test bed); the bed's image imported into it.
TEST_F(Containers, DockerRunsTheRanksInTheImageWhereADaemonAnswers) {
  if (dlaunch::find_program("docker", dlaunch::current_environment(), "").empty()) {
    GTEST_SKIP() << "no docker on PATH";
  }
  if (run({"docker", "info"}, 20).exit_code != 0) {
    GTEST_SKIP() << "no docker daemon answers `docker info` on this machine";
  }
  auto imported = run({"docker", "import", "--change", "ENV PATH=/bin", dir_ + "/rootfs.tar",
                       "localhost/dlaunch-test:docker"},
                      120);
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const auto job = unique_job_id("ctr-docker");
  auto r = dlaunch(job, {"--container-image", "localhost/dlaunch-test:docker",
                         "--container-runtime", "docker", "--container-pull", "never", "sh", "-c",
                         "echo img=$(cat /etc/dlaunch-image) uid=$(id -u)"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "img=dlaunch-test-image uid=" + std::to_string(::geteuid())), 4)
      << r.out;
  auto left = run({"docker", "ps", "-a", "-q", "--filter", "label=dlaunch.job=" + job}, 30);
  EXPECT_EQ(left.out, "");
  (void)run({"docker", "rmi", "localhost/dlaunch-test:docker"}, 60);
}

// Containers on SSH nodes (issue 31's acceptance): two nodes of the loopback
// sshd bed (tests/testbed/sshd.sh), whose sessions get the test podman's
// configuration as a node's own would give it (sshd's SetEnv); dlaunch's own
// environment has none. The images are Debian roots (tests/testbed/
// bare-root.sh: mmdebstrap, made once and cached) imported into that podman:
// one with python3-torch (400+ packages: made only where one is cached, or
// with DLAUNCH_BED_TORCH=1), one with Open MPI's library. The host's own
// python3 and torch play no part.
const std::string kTorchImage = "localhost/dlaunch-torch:test";
const std::string kMpiImage = "localhost/dlaunch-mpi:test";
// Debian 11's Open MPI 4.1.0 with its PMIx 4.0.0, and mpi4py built on them.
const std::string kOtherPmixImage = "localhost/dlaunch-bullseye-mpi:test";

class ContainersOverSsh : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env_ = start_podman_bed("-ssh", podman_, skip_, failed_);
    if (env_.empty()) return;
    std::string setenv;
    for (const auto& e : env_) setenv += (setenv.empty() ? "" : " ") + e;
    const std::string sshd = std::string(SOURCE_DIR) + "/tests/testbed/sshd.sh";
    remove_stale_beds("dlaunch-ctrsshd-", sshd);
    sshd_ = temp_dir("ctrsshd-" + std::to_string(::getpid()));
    auto bed = run({sshd, "start", sshd_, "2", "0", "2"}, 60, {"TB_SSHD_SETENV=" + setenv});
    if (bed.exit_code != 0) {
      skip_ =
          "cannot start a loopback sshd (exit " + std::to_string(bed.exit_code) + "): " + bed.err;
    }
  }
  static void TearDownTestSuite() {
    if (!sshd_.empty()) {
      (void)run({std::string(SOURCE_DIR) + "/tests/testbed/sshd.sh", "stop", sshd_}, 30);
      std::error_code ec;
      std::filesystem::remove_all(sshd_, ec);
    }
    if (!podman_.empty()) (void)run({kBed, "stop", podman_}, 300);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(failed_.empty()) << failed_;
  }

  // The image `name` of a bookworm root with `packages`, imported once into
  // the bed's podman. False, with the reason in `why` (empty: a failure the
  // test reports), where none can be made here. `large`: made only where a
  // root with the last package is cached, or with DLAUNCH_BED_TORCH=1.
  static bool image(const std::string& name, const std::vector<std::string>& packages, bool large,
                    std::string& why, const std::string& release = "bookworm") {
    if (auto it = images_.find(name); it != images_.end()) {
      why = it->second;
      return why == "ok";
    }
    why = make_image(name, packages, large, release);
    images_[name] = why;
    return why == "ok";
  }
  static std::string make_image(const std::string& name, const std::vector<std::string>& packages,
                                bool large, const std::string& release) {
    if (large) {
      const char* cache_env = std::getenv("DLAUNCH_TESTBED_CACHE");
      const std::string cache = cache_env != nullptr ? cache_env : "/var/cache/dlaunch-testbed";
      const char* want = std::getenv("DLAUNCH_BED_TORCH");
      bool cached = false;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(cache, ec)) {
        cached = cached ||
                 slurp(e.path().string() + "/.packages").find(packages.back()) != std::string::npos;
      }
      if (!cached && (want == nullptr || std::string(want) != "1")) {
        return "no bookworm root with " + packages.back() + " in " + cache +
               " to make the image of (400+ packages: DLAUNCH_BED_TORCH=1 makes it once)";
      }
    }
    std::vector<std::string> argv = {std::string(SOURCE_DIR) + "/tests/testbed/bare-root.sh",
                                     release};
    argv.insert(argv.end(), packages.begin(), packages.end());
    auto root = run(argv, 1800);
    if (root.exit_code == 3 || root.exit_code == 4) return "no root for the image: " + root.err;
    if (root.exit_code != 0) {
      ADD_FAILURE() << "tests/testbed/bare-root.sh: exit " << root.exit_code << ": " << root.err;
      return "";
    }
    const auto lines = lines_of(root.out);
    auto imported = run({kBed, "import", podman_, lines.empty() ? "" : lines.back(), name}, 600);
    if (imported.exit_code != 0) {
      ADD_FAILURE() << "podman.sh import: exit " << imported.exit_code << ": " << imported.err;
      return "";
    }
    return "ok";
  }

  // dlaunch on the bed's two SSH nodes x 2 slots, with the examples folder
  // mounted where it is on the host (over SSH the ranks' working directory
  // is the node's home).
  // `mounts`: more of them, SRC:DST[:ro],...
  static std::vector<std::string> cmd(const std::string& job, std::vector<std::string> args,
                                      const std::string& mounts = "") {
    const std::string examples = std::string(SOURCE_DIR) + "/examples";
    std::vector<std::string> all = {
        "-F",
        sshd_ + "/ssh_config",
        "-H",
        sshd_ + "/hosts.yaml",
        "--job-id",
        job,
        "--container-mounts",
        examples + ":" + examples + ":ro" + (mounts.empty() ? "" : "," + mounts)};
    all.insert(all.end(), args.begin(), args.end());
    return dlaunch_cmd(all);
  }
  static std::string containers_of(const std::string& job) { return job_containers(job, env_); }
  static std::string wait_containers_gone(const std::string& job, double timeout_s) {
    return wait_job_containers_gone(job, env_, timeout_s);
  }

  static inline std::string skip_;
  static inline std::string failed_;
  static inline std::string podman_;
  static inline std::string sshd_;
  static inline std::vector<std::string> env_;
  static inline std::map<std::string, std::string> images_;  // name -> "ok" or why not
};

TEST_F(ContainersOverSsh, TrainPyRunsInTheTorchImageOnTwoSshNodes) {
  std::string why;
  if (!image(kTorchImage, {"python3", "python3-torch"}, true, why)) {
    ASSERT_FALSE(why.empty());
    GTEST_SKIP() << why;
  }
  const auto job = unique_job_id("ctr-ssh-torch");
  auto r = run(cmd(job, {"--container-image", kTorchImage, "sh", "-c",
                         "echo img=$(cat /etc/dlaunch-image) uid=$(id -u); exec python3 " +
                             std::string(SOURCE_DIR) + "/examples/train.py"}),
               600, {"SSH_AUTH_SOCK="});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Every rank in the image (a file only it has), with the user's uid.
  EXPECT_EQ(count_of(r.out, "img=" + kTorchImage + " uid=" + std::to_string(::geteuid())), 4)
      << r.out;
  EXPECT_NE(r.out.find("parameters identical on all 4 ranks"), std::string::npos) << r.out;
  EXPECT_EQ(wait_containers_gone(job, 30), "");
}

TEST_F(ContainersOverSsh, DlaunchKilledWithSigkillLeavesNoContainerAndNoProcessOnTheNodes) {
  std::string why;
  if (!image(kTorchImage, {"python3", "python3-torch"}, true, why)) {
    ASSERT_FALSE(why.empty());
    GTEST_SKIP() << why;
  }
  const auto job = unique_job_id("ctr-ssh-kill");
  Process p(cmd(job, {"--kill-grace", "1", "--container-image", kTorchImage, "python3", "-c",
                      "import time; print('up', flush=True); time.sleep(600)"}),
            {"SSH_AUTH_SOCK="});
  if (!p.wait_for_lines(4, 300)) {
    auto f = p.finish(10);
    FAIL() << "no 4 lines: " << f.out << f.err;
  }
  ASSERT_NE(containers_of(job), "");
  p.signal(SIGKILL);
  p.finish(10);
  EXPECT_EQ(wait_containers_gone(job, 60), "");
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
}

// --mpi in a container: the image's Open MPI (Debian's libopenmpi3, with the
// PMIx of the host's release) direct-launched through each node's PMIx
// server, whose folder is mounted into the node's container. The program is
// the host's build, mounted at its own path.
TEST_F(ContainersOverSsh, AnOpenMpiProgramInTheImageIsDirectLaunchedByTheAgentsPmixServers) {
  std::string why;
  if (!image(kMpiImage, {"libopenmpi3"}, false, why)) {
    ASSERT_FALSE(why.empty());
    GTEST_SKIP() << why;
  }
  const auto job = unique_job_id("ctr-ssh-mpi");
  const std::string bin = std::filesystem::path(MPI_HELLO_BIN).parent_path().string();
  auto r = run(
      cmd(job, {"--mpi", "--container-image", kMpiImage, MPI_HELLO_BIN}, bin + ":" + bin + ":ro"),
      300, {"SSH_AUTH_SOCK="});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("mpi rank " + std::to_string(rank) + "/4, RANK=" + std::to_string(rank) +
                         " WORLD_SIZE=4, allreduce(rank)=6"),
              std::string::npos)
        << r.out;
  }
  EXPECT_EQ(wait_containers_gone(job, 30), "");
  // Open MPI's shared memory between a node's ranks (vader's backing files)
  // and its session directory are in the PMIx server's folder: without it in
  // the container Open MPI falls back to TCP between them, quietly.
  const auto job2 = unique_job_id("ctr-ssh-mpidir");
  auto seen = run(cmd(job2, {"--mpi", "--container-image", kMpiImage, "sh", "-c",
                             "test -d \"$OMPI_MCA_btl_vader_backing_directory\" && "
                             "test -w \"$OMPI_MCA_orte_tmpdir_base\" && echo pmix-folder-here"}),
                  120, {"SSH_AUTH_SOCK="});
  EXPECT_EQ(seen.exit_code, 0) << seen.out << seen.err;
  EXPECT_EQ(count_of(seen.out, "pmix-folder-here"), 4) << seen.out << seen.err;
}

// The image's PMIx is another release's (Debian 11's Open MPI 4.1.0 with
// PMIx 4.0.0; the host's server is Debian 12's 4.2.2): before any rank
// starts each agent names both, and its ranks get PMIx's own store
// (PMIX_MCA_gds=hash): with the store the two versions would share
// (PMIX_MCA_gds=ds21, tried by hand: docs/containers.md) their MPI_Init fails
// with "OPAL ERROR: Not supported".
TEST_F(ContainersOverSsh, AnImagesOtherPmixIsNamedAndItsRanksGetAStoreBothVersionsServe) {
  std::string why;
  if (!image(kOtherPmixImage, {"python3-mpi4py"}, false, why, "bullseye")) {
    ASSERT_FALSE(why.empty());
    GTEST_SKIP() << why;
  }
  const std::string program =
      "from mpi4py import MPI; c = MPI.COMM_WORLD; c.Barrier(); "
      "print('rank', c.Get_rank(), 'of', c.Get_size(), MPI.Get_library_version().split(',')[0])";
  const auto job = unique_job_id("ctr-ssh-pmix");
  auto r = run(cmd(job, {"--mpi", "--container-image", kOtherPmixImage, "python3", "-c", program}),
               300, {"SSH_AUTH_SOCK="});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("rank " + std::to_string(rank) + " of 4 Open MPI v4.1.0"),
              std::string::npos)
        << r.out;
  }
  for (const char* node : {"node 0: ", "node 1: "}) {
    EXPECT_NE(r.err.find(std::string(node) + "the image " + kOtherPmixImage + " has PMIx 4.0."),
              std::string::npos)
        << r.err;
  }
  EXPECT_NE(r.err.find("this node's PMIx server is 4.2."), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("PMIX_MCA_gds=hash"), std::string::npos) << r.err;
  EXPECT_EQ(wait_containers_gone(job, 30), "");
}

// Rootless podman (tests/testbed/rootless.sh): dlaunch run by a user who is
// not root, whose podman gives the container a user namespace of its own.
// Each rank enters it as well as the container's mounts, and runs with the
// user's own uid: the files it writes into a mounted folder are the user's.
// dlaunch SIGKILLed mid-job leaves no container and no process.
class RootlessContainers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = "needs root to make the test bed's unprivileged user (tests/testbed/rootless.sh)";
      return;
    }
    const std::string bed = std::string(SOURCE_DIR) + "/tests/testbed/rootless.sh";
    remove_stale_beds("dlaunch-rootless-", bed);
    dir_ = temp_dir("rootless-" + std::to_string(::getpid()));
    auto r = run({bed, "start", dir_}, 180);
    if (r.exit_code == 3) {
      skip_ = "no rootless podman here: " + r.err;
      return;
    }
    if (r.exit_code != 0) {
      failed_ =
          "tests/testbed/rootless.sh start: exit " + std::to_string(r.exit_code) + ": " + r.err;
      return;
    }
    for (const auto& l : lines_of(r.out)) {
      if (l.starts_with("USER=")) {
        user_ = l.substr(5);
      } else if (l.starts_with("UID=")) {
        uid_ = l.substr(4);
      } else if (l.find('=') != std::string::npos) {
        env_.push_back(l);
      }
    }
    env_.push_back("TMPDIR=" + dir_ + "/tmp");
    // The user runs this build: its folders must let others in.
    if (as_user({"test", "-x", DLAUNCH_BIN}).exit_code != 0 ||
        as_user({"test", "-x", DLAUNCH_AGENT_BIN}).exit_code != 0) {
      skip_ = "user " + user_ + " cannot run " + DLAUNCH_BIN +
              " (a folder above it lets no other user in)";
    }
  }
  static void TearDownTestSuite() {
    if (!dir_.empty())
      (void)run({std::string(SOURCE_DIR) + "/tests/testbed/rootless.sh", "stop", dir_}, 120);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(failed_.empty()) << failed_;
  }
  static std::vector<std::string> as_user_argv(const std::vector<std::string>& argv) {
    std::vector<std::string> all = {"runuser",           "-u", user_, "--", "env", "-i",
                                    "PATH=/usr/bin:/bin"};
    all.insert(all.end(), env_.begin(), env_.end());
    all.insert(all.end(), argv.begin(), argv.end());
    return all;
  }
  static RunResult as_user(const std::vector<std::string>& argv, double timeout_s = 60) {
    return run(as_user_argv(argv), timeout_s);
  }
  // dlaunch as the user, from a working folder of the user's, on two local
  // nodes x 2 ranks.
  static std::vector<std::string> dlaunch_as_user(const std::string& job,
                                                  const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"sh",        "-c", "cd \"$0\" && exec \"$@\"", dir_ + "/home",
                                     DLAUNCH_BIN, "-H", dir_ + "/hosts.yaml",       "--job-id",
                                     job};
    argv.insert(argv.end(), args.begin(), args.end());
    return as_user_argv(argv);
  }
  static std::string containers_of(const std::string& job) {
    auto r = as_user({"podman", "ps", "-a", "-q", "--filter", "label=dlaunch.job=" + job}, 30);
    return r.out + (r.exit_code == 0 ? "" : "(podman ps failed: " + r.err + ")");
  }

  static inline std::string skip_;
  static inline std::string failed_;
  static inline std::string dir_;
  static inline std::string user_;
  static inline std::string uid_;
  static inline std::vector<std::string> env_;
};

TEST_F(RootlessContainers, TheRanksRunInTheImageAsTheUserAndTheirFilesAreTheUsers) {
  std::ofstream(dir_ + "/hosts.yaml") << "hosts:\n  - {host: localhost, name: node0, slots: 2}\n"
                                         "  - {host: localhost, name: node1, slots: 2}\n";
  const std::string out = dir_ + "/home/out";
  ASSERT_EQ(as_user({"mkdir", "-p", out}).exit_code, 0);
  const auto job = unique_job_id("ctr-rootless");
  auto r = run(dlaunch_as_user(job, {"--container-image", "localhost/dlaunch-rootless:test",
                                     "--container-mounts", out + ":" + out, "sh", "-c",
                                     "echo uid=$(id -u) img=$(cat /etc/dlaunch-image); touch " +
                                         out + "/rank.$RANK"}),
               180);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count_of(r.out, "uid=" + uid_ + " img=dlaunch-rootless-image"), 4) << r.out;
  for (int rank = 0; rank < 4; ++rank) {
    struct stat st {};
    ASSERT_EQ(::stat((out + "/rank." + std::to_string(rank)).c_str(), &st), 0) << rank;
    EXPECT_EQ(std::to_string(st.st_uid), uid_) << "rank " << rank << "'s file";
  }
  EXPECT_EQ(containers_of(job), "");

  // dlaunch killed mid-job: the agents stop the ranks and remove the containers.
  const auto job2 = unique_job_id("ctr-rootless-kill");
  Process p(dlaunch_as_user(
                job2, {"--kill-grace", "1", "--container-image", "localhost/dlaunch-rootless:test",
                       "sh", "-c", "echo up; exec sleep 600"}),
            {});
  ASSERT_TRUE(p.wait_for_lines(4, 120)) << p.finish(5).err;
  ASSERT_NE(containers_of(job2), "");
  // dlaunch itself (runuser waits for it as its parent).
  pid_t head = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string cmdline = slurp(e.path().string() + "/cmdline");
    if (cmdline.starts_with(std::string(DLAUNCH_BIN) + '\0') &&
        cmdline.find(job2) != std::string::npos) {
      head = static_cast<pid_t>(std::stol(e.path().filename().string()));
    }
  }
  ASSERT_GT(head, 0);
  ASSERT_EQ(::kill(head, SIGKILL), 0);
  p.finish(10);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!containers_of(job2).empty() && std::chrono::steady_clock::now() < until) {
    ::usleep(200 * 1000);
  }
  EXPECT_EQ(containers_of(job2), "");
  EXPECT_EQ(wait_job_gone(job2, 10), std::vector<pid_t>{});
}

// No runtime: said before anything starts (no root or podman needed).
// Containers on the network-namespace bed (tests/testbed/netns.sh): two
// hosts, each a network namespace with its own address and sshd, whose
// sessions get the test podman's configuration as on the SSH bed; each
// node's container is in its node's namespace (--network host there). A
// job across them, then the faults of the fault matrix that concern a node,
// with containers: a rank that fails, the agent killed, the node cut off,
// dlaunch killed. After each, no container and no process of the job is
// left on any node.
class ContainersInNetns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env_ = start_podman_bed("-netns", podman_, skip_, failed_);
    if (env_.empty()) return;
    // One SetEnv line (sshd takes the first only): the podman's variables,
    // and no shell startup file (netns.sh's own SHLVL=1).
    std::string setenv = "SHLVL=1";
    for (const auto& e : env_) setenv += " " + e;
    remove_stale_beds("dlaunch-ctrnetns-", kNetnsBed);
    bed_ = temp_dir("ctrnetns-" + std::to_string(::getpid()));
    auto r = run({kNetnsBed, "start", bed_, "2", "2", DLAUNCH_AGENT_BIN}, 60,
                 {"TB_SSHD_SETENV=" + setenv, "TB_NETNS_HOST_SYS=1"});
    if (r.exit_code != 0) {
      skip_ =
          "cannot start the netns test bed (exit " + std::to_string(r.exit_code) + "): " + r.err;
      return;
    }
    std::istringstream nodes(slurp(bed_ + "/nodes"));
    int k;
    std::string ns, addr, veth;
    while (nodes >> k >> ns >> addr >> veth) {
      struct stat st {};
      if (::stat(("/run/netns/" + ns).c_str(), &st) == 0) ns_inodes_.push_back(st.st_ino);
      addrs_.push_back(addr);
    }
    if (addrs_.size() != 2 || ns_inodes_.size() != 2) failed_ = "the netns bed listed no hosts";
  }
  static void TearDownTestSuite() {
    if (!bed_.empty()) {
      (void)run({kNetnsBed, "stop", bed_}, 60);
      std::error_code ec;
      std::filesystem::remove_all(bed_, ec);
    }
    if (!podman_.empty()) (void)run({kBed, "stop", podman_}, 120);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(failed_.empty()) << failed_;
  }
  void TearDown() override {
    if (!bed_.empty() && skip_.empty()) {
      for (int k = 0; k < 2; ++k) (void)node_exec(k, {"ip", "link", "set", "eth0", "up"});
    }
  }

  // A command in node k's network namespace.
  static RunResult node_exec(int k, std::vector<std::string> cmd) {
    cmd.insert(cmd.begin(), {kNetnsBed, "exec", bed_, std::to_string(k)});
    return run(cmd, 30);
  }
  // dlaunch on the bed's two nodes x 2 slots, the ranks in the test image.
  static std::vector<std::string> cmd(const std::string& job, std::vector<std::string> args) {
    std::vector<std::string> all = {
        "-F", bed_ + "/ssh_config", "-H",  bed_ + "/hosts.yaml", "--job-id",
        job,  "--container-image",  kImage};
    all.insert(all.end(), args.begin(), args.end());
    return dlaunch_cmd(all);
  }
  // dlaunch's environment: no podman configuration (the nodes' sessions
  // have theirs), no ssh-agent of the machine's.
  static std::vector<std::string> head_env() { return {"SSH_AUTH_SOCK="}; }
  // The processes in the bed's namespaces other than its sshd: agents,
  // guards, ranks, the containers' keep-alives and monitors.
  static std::vector<pid_t> node_processes() {
    std::vector<pid_t> out;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      struct stat st {};
      if (::stat(("/proc/" + name + "/ns/net").c_str(), &st) != 0) continue;
      if (std::find(ns_inodes_.begin(), ns_inodes_.end(), st.st_ino) == ns_inodes_.end()) continue;
      const std::string stat = slurp("/proc/" + name + "/stat");
      const auto open = stat.find('(');
      const auto close = stat.rfind(')');
      if (open == std::string::npos || close == std::string::npos || close + 2 >= stat.size())
        continue;
      if (stat[close + 2] == 'Z' || stat.substr(open + 1, close - open - 1) == "sshd") continue;
      out.push_back(std::stoi(name));
    }
    return out;
  }
  // Waits until no container of the job and no process on the nodes is
  // left, or the timeout; what is left, for the failure's message.
  static std::string wait_clean(const std::string& job, double timeout_s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      const std::string containers = job_containers(job, env_);
      const auto procs = node_processes();
      const auto ranks = job_processes(job);
      if (containers.empty() && procs.empty() && ranks.empty()) return "";
      if (std::chrono::steady_clock::now() >= until) {
        std::string left = "containers: " + containers + " processes on the nodes:";
        for (pid_t p : procs) left += " " + std::to_string(p);
        left += " ranks:";
        for (pid_t p : ranks) left += " " + std::to_string(p);
        return left;
      }
      ::usleep(100 * 1000);
    }
  }
  static pid_t agent_of_node(int k) {
    const auto procs = node_processes();
    for (pid_t p : procs) {
      const std::string stat = slurp("/proc/" + std::to_string(p) + "/stat");
      if (stat.find("(dlaunch-agent)") == std::string::npos) continue;
      struct stat st {};
      if (::stat(("/proc/" + std::to_string(p) + "/ns/net").c_str(), &st) != 0 ||
          st.st_ino != ns_inodes_.at(static_cast<std::size_t>(k)))
        continue;
      // The agent, not its guard: the guard's parent is the agent.
      const auto ppid = static_cast<pid_t>(std::atoi(stat.c_str() + stat.rfind(')') + 4));
      if (slurp("/proc/" + std::to_string(ppid) + "/comm") != "dlaunch-agent\n") return p;
    }
    return -1;
  }

  static inline std::string skip_;
  static inline std::string failed_;
  static inline std::string podman_;
  static inline std::string bed_;
  static inline std::vector<std::string> env_;
  static inline std::vector<std::string> addrs_;
  static inline std::vector<ino_t> ns_inodes_;
};

TEST_F(ContainersInNetns, EachNodesRanksRunInItsContainerOnItsOwnNetwork) {
  const auto job = unique_job_id("ctr-netns");
  // Each rank: its node's address is one of its own (the container shares
  // its node's namespace), and node 0's address is the job's.
  auto r = run(cmd(job, {"sh", "-c",
                         "echo rank=$RANK master=$MASTER_ADDR img=$(cat /etc/dlaunch-image) "
                         "own=$(grep -o '10\\.201\\.[0-9]*\\.[0-9]*' /proc/net/fib_trie | "
                         "grep -v '\\.255$' | grep -v '\\.0$' | sort -u | tr '\\n' ,)"}),
               180, head_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string own = addrs_.at(static_cast<std::size_t>(rank / 2));
    EXPECT_NE(r.out.find("rank=" + std::to_string(rank) + " master=" + addrs_.at(0) +
                         " img=dlaunch-test-image own=" + own + ","),
              std::string::npos)
        << r.out;
  }
  EXPECT_EQ(wait_clean(job, 20), "");
}

TEST_F(ContainersInNetns, ARankThatFailsStopsEveryContainerAndTheJobExitsWithItsCode) {
  const auto job = unique_job_id("ctr-netns-fail");
  auto r = run(cmd(job, {"--kill-grace", "1", "sh", "-c",
                         "echo up; if [ \"$RANK\" = 3 ]; then sleep 1; exit 7; fi; sleep 60"}),
               120, head_env());
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_LT(r.seconds, 30) << r.err;
  EXPECT_NE(r.err.find("rank 3"), std::string::npos) << r.err;
  EXPECT_EQ(wait_clean(job, 20), "");
}

TEST_F(ContainersInNetns, AnAgentKilledLeavesNoContainerOnItsNode) {
  const auto job = unique_job_id("ctr-netns-agent");
  Process p(cmd(job, {"--kill-grace", "1", "sh", "-c", "echo up; sleep 60"}), head_env());
  ASSERT_TRUE(p.wait_for_lines(4, 120)) << p.finish(1).err;
  const pid_t agent = agent_of_node(1);
  ASSERT_GT(agent, 0);
  ::kill(agent, SIGKILL);
  auto r = p.finish(60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("lost contact with the agent on node 1"), std::string::npos) << r.err;
  EXPECT_EQ(wait_clean(job, 30), "");
}

// Node 1's link goes down: the head hears nothing from it past the
// heartbeat timeout, and node 1's agent nothing from the head; each side
// stops, node 1's container is removed by its own agent.
TEST_F(ContainersInNetns, ANodeCutOffLeavesNoContainerOnEitherSide) {
  const auto job = unique_job_id("ctr-netns-cut");
  Process p(
      cmd(job, {"--kill-grace", "1", "--heartbeat-timeout", "3", "sh", "-c", "echo up; sleep 60"}),
      head_env());
  ASSERT_TRUE(p.wait_for_lines(4, 120)) << p.finish(1).err;
  auto down = node_exec(1, {"ip", "link", "set", "eth0", "down"});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  auto r = p.finish(60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("node 1"), std::string::npos) << r.err;
  EXPECT_EQ(wait_clean(job, 30), "");
}

TEST_F(ContainersInNetns, DlaunchKilledLeavesNoContainerAndNoProcessOnAnyNode) {
  const auto job = unique_job_id("ctr-netns-head");
  Process p(cmd(job, {"--kill-grace", "1", "sh", "-c", "echo up; sleep 60"}), head_env());
  ASSERT_TRUE(p.wait_for_lines(4, 120)) << p.finish(1).err;
  ASSERT_NE(job_containers(job, env_), "");
  p.signal(SIGKILL);
  p.finish(10);
  EXPECT_EQ(wait_clean(job, 30), "");
}

// The chaos test's container variant (tests/integration/fault_matrix_test.cpp
// has the native one): jobs of 2 nodes x 2 ranks in containers on the netns
// bed, each hit at a random moment by one fault drawn from a shuffled round
// of every kind. Each must end with the fault's exit status within its bound,
// with no container and no process left on any node. Prints a line per run
// (CTR-CHAOS|...). Bounded by DLAUNCH_CHAOS_SECONDS (40 by default) of new
// runs; DLAUNCH_CHAOS_SEED replays one's choices.
TEST_F(ContainersInNetns, Chaos) {
  enum Fault {
    kRankKill,
    kAgentKill,
    kAgentStop,
    kHeadStop,
    kLinkFlap,
    kSshReset,
    kSigint,
    kHeadKill,
    kFaults
  };
  const char* names[] = {"rank-sigkill",
                         "agent-sigkill",
                         "agent-sigstop-past-heartbeat",
                         "dlaunch-sigstop-past-heartbeat",
                         "link-down-then-up",
                         "ssh-connection-reset",
                         "sigint",
                         "dlaunch-sigkill"};
  constexpr double kHeartbeat = 3.0;
  constexpr double kOutage = kHeartbeat + 1.5;
  constexpr double kGrace = 1.0;
  constexpr double kRemoval = 4.0;  // each node's podman rm, on a loaded machine
  const char* budget_env = std::getenv("DLAUNCH_CHAOS_SECONDS");
  const double budget = budget_env != nullptr && *budget_env != '\0' ? std::atof(budget_env) : 40;
  const char* seed_env = std::getenv("DLAUNCH_CHAOS_SEED");
  const unsigned seed = seed_env != nullptr
                            ? static_cast<unsigned>(std::strtoul(seed_env, nullptr, 10))
                            : std::random_device{}();
  std::printf("CTR-CHAOS|seed=%u|budget=%.0fs (replay: DLAUNCH_CHAOS_SEED=%u)\n", seed, budget,
              seed);
  std::mt19937 rng(seed);
  std::vector<int> round;
  std::vector<std::string> problems;
  const auto began = std::chrono::steady_clock::now();
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  int runs = 0;
  while (since(began) < budget) {
    if (round.empty()) {
      for (int f = 0; f < kFaults; ++f) round.push_back(f);
      std::shuffle(round.begin(), round.end(), rng);
    }
    const int fault = round.back();
    round.pop_back();
    ++runs;
    const int node = std::uniform_int_distribution<>(0, 1)(rng);
    const int rank = std::uniform_int_distribution<>(0, 3)(rng);
    const double delay = std::uniform_real_distribution<>(0.0, 1.0)(rng);
    const auto job = unique_job_id("ctr-chaos" + std::to_string(runs));
    Process p(cmd(job, {"--kill-grace", "1", "--heartbeat-timeout", "3", "--stack-timeout", "2",
                        "sh", "-c", "echo up; sleep 60"}),
              head_env());
    std::string detail;
    if (!p.wait_for_lines(4, 60)) detail = "the job did not start; ";
    ::usleep(static_cast<useconds_t>(delay * 1e6));
    const auto t0 = std::chrono::steady_clock::now();
    int expected = 1;
    double bound = kGrace + kRemoval + 2.0;
    const auto link = [&](const char* state) {
      (void)node_exec(node, {"ip", "link", "set", "eth0", state});
    };
    // Something stopped (or cut) for longer than the heartbeat timeout, then
    // resumed; the bound grows by that time.
    const auto outage = [&](const std::function<void()>& stop,
                            const std::function<void()>& resume) {
      stop();
      ::usleep(static_cast<useconds_t>(kOutage * 1e6));
      resume();
      bound += kOutage;
    };
    switch (fault) {
      case kRankKill: {
        const auto with_rank = dlaunch::pids_with_env_entry("RANK=" + std::to_string(rank));
        for (pid_t w : job_processes(job)) {
          if (std::find(with_rank.begin(), with_rank.end(), w) == with_rank.end()) continue;
          ::kill(w, SIGKILL);
          break;
        }
        expected = 128 + SIGKILL;
        break;
      }
      case kAgentKill:
        if (const pid_t a = agent_of_node(node); a > 0) ::kill(a, SIGKILL);
        break;
      case kAgentStop:
        if (const pid_t a = agent_of_node(node); a > 0) {
          outage([a] { ::kill(a, SIGSTOP); }, [a] { ::kill(a, SIGCONT); });
        } else {
          bound += kOutage;
        }
        break;
      case kHeadStop:
        outage([&p] { p.signal(SIGSTOP); }, [&p] { p.signal(SIGCONT); });
        break;
      case kLinkFlap:
        outage([&] { link("down"); }, [&] { link("up"); });
        break;
      case kSshReset:
        (void)node_exec(node, {"ss", "-K", "-t", "-n", "state", "established", "( sport = :22 )"});
        break;
      case kSigint:
        p.signal(SIGINT);
        expected = 130;
        break;
      case kHeadKill:
        p.signal(SIGKILL);
        expected = 128 + SIGKILL;
        break;
      default:
        break;
    }
    auto r = p.finish(90);
    if (fault == kLinkFlap) link("up");
    const std::string left = wait_clean(job, 30);
    const double took = since(t0);
    const bool wrong = r.exit_code != expected || !detail.empty();
    const bool late = took > bound;
    std::printf(
        "CTR-CHAOS|run=%d|%s|node=%d|rank=%d|delay=%.2f|exit=%d (expected %d)|seconds=%.2f "
        "(bound %.1f)|%s\n",
        runs, names[fault], node, rank, delay, r.exit_code, expected, took, bound,
        left.empty() ? "clean" : left.c_str());
    std::fflush(stdout);
    if (wrong || late || !left.empty()) {
      problems.push_back("run " + std::to_string(runs) + " " + names[fault] + ": exit " +
                         std::to_string(r.exit_code) + " (expected " + std::to_string(expected) +
                         "), " + std::to_string(took) + " s (bound " + std::to_string(bound) +
                         "), left: " + left + " " + detail +
                         "\n  stderr: " + r.err.substr(0, 1500));
    }
  }
  EXPECT_GE(runs, 1);
  for (const auto& pr : problems) ADD_FAILURE() << pr;
}

TEST(ContainerRuntime, MissingRuntimeIsAClearErrorBeforeAnythingStarts) {
  const std::string empty = temp_dir("noruntime");
  const auto job = unique_job_id("ctr-noruntime");
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--container-image", kImage,
                            "/bin/sh", "-c", "echo ran"}),
               60, {"PATH=" + empty});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no container runtime on"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("looked for podman, docker, apptainer and enroot on PATH"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("ran"), std::string::npos) << r.out;
  if (dlaunch::find_program("enroot", dlaunch::current_environment(), "").empty()) {
    auto named = run(dlaunch_cmd({"-H", kLocalhost, "--container-image", kImage,
                                  "--container-runtime", "enroot", "/bin/sh", "-c", "echo ran"}));
    EXPECT_NE(named.exit_code, 0);
    EXPECT_NE(named.err.find("container runtime 'enroot' not found on"), std::string::npos)
        << named.err;
    EXPECT_EQ(named.out.find("ran"), std::string::npos) << named.out;
  }
  std::filesystem::remove_all(empty);
}

TEST(ContainerOptions, DryRunShowsTheContainer) {
  auto r = run(
      dlaunch_cmd({"-H", kLocalhost, "--dry-run", "--container-image", kImage, "--container-mounts",
                   "/data:/d:ro", "--container-env", "A,B", "--container-pull", "never", "sh"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("container: one per node of image " + kImage +
                       ", runtime auto, pull never, mounts /data:/d:ro, host values of A,B"),
            std::string::npos)
      << r.out;
  auto plain = run(dlaunch_cmd({"-H", kLocalhost, "--dry-run", "sh"}));
  EXPECT_EQ(plain.out.find("container:"), std::string::npos) << plain.out;
}

// Bad values: exit 2, the option named, nothing started.
TEST(ContainerOptions, BadValuesExit2NamingTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--container-image", kImage, "--container-pull", "sometimes"}, "--container-pull"},
      {{"--container-image", kImage, "--container-runtime", "lxc"}, "--container-runtime"},
      {{"--container-image", kImage, "--container-mounts", "data:/data"}, "--container-mounts"},
      {{"--container-image", kImage, "--container-mounts", "/a:/b:rx"}, "--container-mounts"},
      {{"--container-image", kImage, "--container-mounts", "/a,,/b"}, "--container-mounts"},
      {{"--container-image", kImage, "--container-env", "A-B"}, "--container-env"},
      {{"--container-image", kImage, "--container-workdir", "rel"}, "--container-workdir"},
      {{"--container-mounts", "/a:/b"}, "--container-mounts"},
      {{"--container-image", ""}, "--container-image"},
      {{"--container-image", kImage, "--container-shm-size", "16t"}, "--container-shm-size"},
      {{"--container-image", kImage, "--container-shm-size", "1k"}, "--container-shm-size"},
  };
  for (const auto& [args, option] : cases) {
    std::vector<std::string> all = {"-H", kLocalhost};
    all.insert(all.end(), args.begin(), args.end());
    all.insert(all.end(), {"sh", "-c", "echo ran"});
    auto r = run(dlaunch_cmd(all));
    EXPECT_EQ(r.exit_code, 2) << option << ": " << r.err;
    EXPECT_NE(r.err.find(option), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("ran"), std::string::npos) << r.out;
  }
}

}  // namespace
