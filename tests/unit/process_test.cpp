#include "dlaunch/process.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>

#include <gtest/gtest.h>

#include "dlaunch/debug.h"
#include "dlaunch/random.h"
#include "worker.h"

using namespace dlaunch;

namespace {

// A shell script run with a minimal PATH and nothing else in its environment.
SpawnResult spawn_sh(const std::string& script) {
  SpawnOptions o;
  o.argv = {"sh", "-c", script};
  o.env = {"PATH=/usr/bin:/bin"};
  return spawn(o);
}

}  // namespace

TEST(Spawn, MissingProgramIsReportedByTheSpawnItself) {
  SpawnOptions o;
  o.argv = {"definitely-not-a-program-xyz"};
  o.env = {"PATH=/usr/bin:/bin"};
  auto r = spawn(o);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "cannot execute 'definitely-not-a-program-xyz': No such file or directory");
}

TEST(Spawn, BadWorkdirIsReported) {
  SpawnOptions o;
  o.argv = {"true"};
  o.env = {"PATH=/usr/bin:/bin"};
  o.workdir = "/nonexistent-dir";
  auto r = spawn(o);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("/nonexistent-dir"), std::string::npos);
}

TEST(Spawn, ChildGetsItsOwnProcessGroupAndOnlyTheGivenEnvironment) {
  auto [r, w] = make_pipe();
  SpawnOptions o;
  o.argv = {"sh", "-c", "echo $$ $(cut -d' ' -f5 /proc/$$/stat) \"$ONLY\" \"$HOME\""};
  o.env = {"PATH=/usr/bin:/bin", "ONLY=yes"};
  o.stdout_fd = w.get();
  auto res = spawn(o);
  ASSERT_TRUE(res.ok()) << res.error();
  w.reset();
  int st;
  ::waitpid(*res, &st, 0);
  char buf[256] = {};
  auto n = ::read(r.get(), buf, sizeof buf - 1);
  ASSERT_GT(n, 0);
  int pid = 0, pgid = 0;
  char only[16] = {};
  ASSERT_GE(std::sscanf(buf, "%d %d %15s", &pid, &pgid, only), 3) << buf;
  EXPECT_EQ(pid, pgid);
  EXPECT_STREQ(only, "yes");
}

TEST(Spawn, KeepFdStaysOpenAtItsNumberAndNothingElseDoes) {
  auto [keep_r, keep_w] = make_pipe();  // both close-on-exec here
  // Not close-on-exec: only the spawn's own clean-up can close it.
  const int stray = ::fcntl(keep_r.get(), F_DUPFD, 20);
  ASSERT_GE(stray, 0);
  SpawnOptions o;
  const std::string kept = std::to_string(keep_w.get());
  o.argv = {"sh", "-c",
            "[ -e /proc/self/fd/" + kept + " ] && [ ! -e /proc/self/fd/" + std::to_string(stray) +
                " ] && echo ok >&" + kept};
  o.env = {"PATH=/usr/bin:/bin"};
  o.keep_fd = keep_w.get();
  auto res = spawn(o);
  ::close(stray);
  ASSERT_TRUE(res.ok()) << res.error();
  keep_w.reset();
  int st = 0;
  ::waitpid(*res, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  char buf[16] = {};
  EXPECT_EQ(::read(keep_r.get(), buf, sizeof buf - 1), 3);
  EXPECT_STREQ(buf, "ok\n");
}

namespace {
void count_usr1(int) {}
}  // namespace

// The child may share the spawner's memory until its exec (spawn's clone):
// it starts with no signal blocked and none ignored, and the spawner's own
// mask and handlers are as they were, whichever way the child was made (one
// that moves itself into a cgroup is forked).
TEST(Spawn, TheChildStartsWithDefaultSignalsAndTheSpawnersAreLeftAsTheyWere) {
  struct sigaction on_usr1 {};
  on_usr1.sa_handler = count_usr1;
  struct sigaction usr1_before {};
  ASSERT_EQ(::sigaction(SIGUSR1, &on_usr1, &usr1_before), 0);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction pipe_before {};
  ASSERT_EQ(::sigaction(SIGPIPE, &ignore, &pipe_before), 0);  // as the head does
  sigset_t usr2;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  sigset_t mask_before;
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &usr2, &mask_before), 0);
  for (const bool forked : {false, true}) {
    auto [cg_r, cg_w] = make_pipe();  // stands in for a cgroup.procs: the child writes "0"
    auto [r, w] = make_pipe();
    SpawnOptions o;
    o.argv = {"grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"};
    o.env = {"PATH=/usr/bin:/bin"};
    o.stdout_fd = w.get();
    if (forked) o.cgroup_procs_fd = cg_w.get();
    auto res = spawn(o);
    ASSERT_TRUE(res.ok()) << res.error();
    w.reset();
    int st = 0;
    ::waitpid(*res, &st, 0);
    char buf[256] = {};
    ASSERT_GT(::read(r.get(), buf, sizeof buf - 1), 0);
    EXPECT_STREQ(buf, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n") << forked;
    sigset_t mask_now;
    ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, nullptr, &mask_now), 0);
    EXPECT_EQ(sigismember(&mask_now, SIGUSR2), 1);
    EXPECT_EQ(sigismember(&mask_now, SIGUSR1), 0);
    struct sigaction now {};
    ASSERT_EQ(::sigaction(SIGUSR1, nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, count_usr1);
    ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, SIG_IGN);
  }
  ::pthread_sigmask(SIG_SETMASK, &mask_before, nullptr);
  ::sigaction(SIGUSR1, &usr1_before, nullptr);
  ::sigaction(SIGPIPE, &pipe_before, nullptr);
}

TEST(Process, SignalNamesAndExitCodes) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(exit_code_of(3 << 8), 3);
  EXPECT_EQ(exit_code_of(SIGSEGV), 139);
}

TEST(Process, ShellQuoteLeavesPlainWordsAndQuotesTheRest) {
  EXPECT_EQ(shell_quote("abc-1.2/x=y"), "abc-1.2/x=y");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(Process, DescendantsIncludeGrandchildren) {
  auto r = spawn_sh("sleep 5 & sleep 5");
  ASSERT_TRUE(r.ok());
  std::vector<pid_t> d;
  for (int i = 0; i < 100 && d.size() < 2; ++i) {
    ::usleep(10000);
    d = descendants_of(*r);
  }
  EXPECT_EQ(d.size(), 2u);
  ::kill(-*r, SIGKILL);
  int st;
  ::waitpid(*r, &st, 0);
}

TEST(Process, DescendantsLeaveOutZombies) {
  // sh starts `true` in the background, then becomes `sleep`, which never
  // reaps it: a zombie child, which holds nothing and must not be listed.
  auto r = spawn_sh("true & exec sleep 5");
  ASSERT_TRUE(r.ok());
  bool zombie_seen = false;
  for (int i = 0; i < 200 && !zombie_seen; ++i) {
    ::usleep(10000);
    std::ifstream children("/proc/" + std::to_string(*r) + "/task/" + std::to_string(*r) +
                           "/children");
    pid_t c;
    while (children >> c) {
      std::ifstream stat("/proc/" + std::to_string(c) + "/stat");
      std::string line;
      std::getline(stat, line);
      zombie_seen = zombie_seen || line.find(") Z ") != std::string::npos;
    }
  }
  if (zombie_seen) {
    EXPECT_EQ(descendants_of(*r), std::vector<pid_t>{});
  }
  ::kill(-*r, SIGKILL);
  int st;
  ::waitpid(*r, &st, 0);
  if (!zombie_seen) GTEST_SKIP() << "no /proc/PID/task/TID/children here, or no zombie seen";
}

TEST(DebugTopics, CommaSeparatedWordsOnly) {
  EXPECT_TRUE(debug_topic_in("ssh", "ssh"));
  EXPECT_TRUE(debug_topic_in("ssh,stats", "stats"));
  EXPECT_TRUE(debug_topic_in("stats,ssh", "ssh"));
  EXPECT_FALSE(debug_topic_in("", "ssh"));
  EXPECT_FALSE(debug_topic_in("sshx", "ssh"));
  EXPECT_FALSE(debug_topic_in("ss", "ssh"));
  EXPECT_FALSE(debug_topic_in("stats,", "ssh"));
  EXPECT_TRUE(debug_topic_in(",ssh", "ssh"));
}

TEST(DebugTopics, SelfUsageNamesCpuAndPeakMemory) {
  const std::string u = self_usage();
  EXPECT_TRUE(std::regex_match(
      u, std::regex(R"(cpu_user_s=[0-9.]+ cpu_sys_s=[0-9.]+ maxrss_kib=[1-9][0-9]*)")))
      << u;
}

TEST(WorkerEnvironment, LaterLayersOverrideEarlierOnesInPlace) {
  auto env =
      agent::worker_environment({"PATH=/bin", "RANK=9", "HOME=/root"}, {{"RANK", "1"}, {"X", "a"}},
                                {{"MASTER_PORT", "5"}, {"X", "b"}}, "DLAUNCH_AGENT_TOKEN=t");
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/bin", "RANK=1", "HOME=/root", "X=b",
                                           "MASTER_PORT=5", "DLAUNCH_AGENT_TOKEN=t"}));
}

TEST(Random, HexHasTheLengthAndAlphabetAndDiffersEachTime) {
  const auto a = random_hex(32);
  const auto b = random_hex(32);
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

TEST(Process, StateTellsRunningFromSleepingAndGone) {
  EXPECT_EQ(process_state(::getpid()), 'R');  // this thread, reading the file
  auto r = spawn_sh("exec sleep 5");
  ASSERT_TRUE(r.ok());
  char state = 0;
  for (int i = 0; i < 200 && state != 'S'; ++i) {
    ::usleep(10000);
    state = process_state(*r);
  }
  EXPECT_EQ(state, 'S');
  ::kill(*r, SIGKILL);
  int st;
  ::waitpid(*r, &st, 0);
  EXPECT_EQ(process_state(*r), '\0');
}
