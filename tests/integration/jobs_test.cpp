// Jobs beyond their terminal (issue 32), the parts that are built: every job
// leaves a record that `dlaunch ps`, `status` and `events` read, and its
// events as JSON Lines (docs/events.md), in the record and with --events;
// the verbs that reach a running job from another shell (signal, stop, logs,
// stacks, wait, attach); a job detached from its terminal (-d). Real local
// jobs, on real pseudo-terminals where a terminal matters; each test has a
// state home of its own (XDG_STATE_HOME).
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "dlaunch/process.h"
#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;

namespace {

const std::string kWorker = TEST_WORKER_BIN;

class Jobs : public ::testing::Test {
 protected:
  void SetUp() override { state_ = temp_dir("jobs-state"); }
  void TearDown() override { fs::remove_all(state_); }
  std::vector<std::string> env() const { return {"XDG_STATE_HOME=" + state_}; }
  RunResult dl(std::vector<std::string> args, double timeout_s = 60) {
    return run(dlaunch_cmd(std::move(args)), timeout_s, env());
  }
  std::string state_;
};

// Each line is one JSON object with the common keys; returns them parsed.
std::vector<YAML::Node> parse_events(const std::string& text) {
  std::vector<YAML::Node> out;
  for (const auto& l : lines_of(text)) {
    const YAML::Node n = YAML::Load(l);
    EXPECT_TRUE(n.IsMap()) << l;
    for (const char* key : {"v", "time", "job", "attempt", "type"}) {
      EXPECT_TRUE(n[key].IsDefined()) << key << " missing in " << l;
    }
    EXPECT_EQ(n["v"].as<int>(), 1) << l;
    out.push_back(n);
  }
  return out;
}

std::vector<std::string> types_of(const std::vector<YAML::Node>& events) {
  std::vector<std::string> t;
  t.reserve(events.size());
  for (const auto& e : events) t.push_back(e["type"].as<std::string>());
  return t;
}

// A program on a terminal of its own, as in an interactive shell: its own
// session, the pseudo-terminal its controlling terminal and its stdin,
// stdout and stderr. The test is the terminal: it reads what is shown and
// types; closing it hangs the terminal up (SIGHUP to the session).
class OnTerminal {
 public:
  OnTerminal(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    std::vector<std::string> all = dlaunch::current_environment();
    all.insert(all.end(), env.begin(), env.end());
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<char*> envp;
    envp.reserve(all.size() + 1);
    for (const auto& e : all) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_ = ::forkpty(&master_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      ::execve(args[0], args.data(), envp.data());
      ::_exit(127);
    }
  }
  ~OnTerminal() {
    hang_up();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      (void)exit_status();
    }
  }
  OnTerminal(const OnTerminal&) = delete;
  OnTerminal& operator=(const OnTerminal&) = delete;

  // Reads what the terminal shows until it holds `text`, or timeout_s.
  bool shows(const std::string& text, double timeout_s) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
    while (screen_.find(text) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0 || master_ < 0) return false;
      pollfd p{master_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(master_, buf, sizeof buf);
      if (n <= 0) return screen_.find(text) != std::string::npos;  // the program's side closed
      screen_.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }
  void type(const std::string& keys) { (void)!::write(master_, keys.data(), keys.size()); }
  void hang_up() {
    if (master_ >= 0) ::close(master_);
    master_ = -1;
  }
  // The program's exit status (waits for it); -1 if it did not exit normally.
  int exit_status() {
    if (pid_ <= 0) return -1;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  const std::string& screen() const { return screen_; }

 private:
  pid_t pid_ = -1;
  int master_ = -1;
  std::string screen_;
};

}  // namespace

TEST_F(Jobs, AFinishedJobIsListedWithItsStatusAndEvents) {
  const auto job = unique_job_id("jobs-ok");
  auto r = dl({"-H", kLocalhost, "--job-id", job, kWorker, "exit", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("no record"), std::string::npos) << r.err;

  auto ps = dl({"ps"});
  EXPECT_EQ(ps.exit_code, 0) << ps.err;
  EXPECT_EQ(ps.out.find(job), std::string::npos) << "an ended job in plain ps:\n" << ps.out;
  ps = dl({"ps", "--all"});
  EXPECT_NE(ps.out.find(job), std::string::npos) << ps.out;
  ps = dl({"ps", "--all", "--json"});
  const YAML::Node all = YAML::Load(ps.out);
  ASSERT_TRUE(all.IsSequence()) << ps.out;
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0]["id"].as<std::string>(), job);
  EXPECT_EQ(all[0]["state"].as<std::string>(), "ended");
  EXPECT_EQ(all[0]["exit_status"].as<int>(), 0);
  EXPECT_EQ(all[0]["nodes"].as<int>(), 2);
  EXPECT_EQ(all[0]["ranks"].as<int>(), 4);

  auto st = dl({"status", "last", "--json"});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  EXPECT_EQ(YAML::Load(st.out)["summary"].as<std::string>(), "succeeded");

  auto ev = dl({"events", job});
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  const auto events = parse_events(ev.out);
  const auto types = types_of(events);
  ASSERT_FALSE(types.empty());
  EXPECT_EQ(types.front(), "start");
  EXPECT_EQ(types.back(), "end");
  EXPECT_EQ(std::count(types.begin(), types.end(), "node_ready"), 2);
  EXPECT_EQ(std::count(types.begin(), types.end(), "rank_started"), 4);
  EXPECT_EQ(std::count(types.begin(), types.end(), "rank_exited"), 4);
  std::set<int> ranks;
  for (const auto& e : events) {
    EXPECT_EQ(e["job"].as<std::string>(), job);
    if (e["type"].as<std::string>() == "rank_exited") {
      ranks.insert(e["rank"].as<int>());
      EXPECT_EQ(e["how"].as<std::string>(), "exited");
      EXPECT_EQ(e["code"].as<int>(), 0);
    }
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(events.back()["exit_status"].as<int>(), 0);
}

// A failure and a restart: the events say which rank, why, and the attempt;
// --events FILE gets the same lines as the record.
TEST_F(Jobs, ARestartedJobsEventsCountTheAttempts) {
  const auto job = unique_job_id("jobs-restart");
  const std::string file = state_ + "/events.jsonl";
  auto r = dl({"-H", kLocalhost, "--job-id", job, "--max-restarts", "1", "--events", file, kWorker,
               "fail-rank", "1", "3", "60"});
  ASSERT_EQ(r.exit_code, 3) << r.err;
  const std::string own = slurp(file);
  auto ev = dl({"events", "last"});
  EXPECT_EQ(ev.out, own);
  const auto events = parse_events(own);
  const auto types = types_of(events);
  ASSERT_EQ(std::count(types.begin(), types.end(), "restart"), 1) << own;
  EXPECT_EQ(types.back(), "end");
  bool failed_seen = false;
  for (const auto& e : events) {
    if (e["type"].as<std::string>() == "rank_exited" && e["rank"].as<int>() == 1) {
      EXPECT_EQ(e["code"].as<int>(), 3);
      failed_seen = true;
    }
    if (e["type"].as<std::string>() == "restart") {
      EXPECT_EQ(e["attempt"].as<int>(), 1);
    }
  }
  EXPECT_TRUE(failed_seen);
  EXPECT_EQ(events.back()["attempt"].as<int>(), 1);
  EXPECT_EQ(events.back()["attempts"].as<int>(), 2);
  auto st = dl({"status", job, "--json"});
  const YAML::Node s = YAML::Load(st.out);
  EXPECT_EQ(s["exit_status"].as<int>(), 3);
  EXPECT_EQ(s["attempts"].as<int>(), 2);
  EXPECT_NE(s["summary"].as<std::string>().find("rank 1"), std::string::npos) << st.out;
}

// While the job runs, ps lists it as running; a head killed outright leaves
// it "lost", never "running".
TEST_F(Jobs, ARunningJobIsListedAndAKilledHeadLeavesItLost) {
  const auto job = unique_job_id("jobs-live");
  Process p(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, kWorker, "ready-sleep", "60"}), env());
  ASSERT_TRUE(p.wait_for_lines(4, 30));
  auto ps = dl({"ps", "--json"});
  const YAML::Node live = YAML::Load(ps.out);
  ASSERT_EQ(live.size(), 1u) << ps.out;
  EXPECT_EQ(live[0]["state"].as<std::string>(), "running");
  EXPECT_EQ(live[0]["head_pid"].as<int>(), p.pid());
  p.signal(SIGKILL);
  p.finish(10);
  EXPECT_EQ(wait_job_gone(job, 20), std::vector<pid_t>{});
  auto st = dl({"status", job, "--json"});
  EXPECT_EQ(YAML::Load(st.out)["state"].as<std::string>(), "lost") << st.out;
  EXPECT_EQ(dl({"ps"}).out.find(job), std::string::npos);
}

// `dlaunch signal JOB SIG` from another shell reaches every rank through the
// head; `dlaunch stop JOB` stops the job as SIGTERM to the head would and
// returns once the head has ended; the record says how.
TEST_F(Jobs, SignalAndStopFromAnotherShell) {
  const auto job = unique_job_id("jobs-stop");
  Process p(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, kWorker, "usr1-exit", "7", "60"}),
            env());
  ASSERT_TRUE(p.wait_for_lines(4, 30));
  auto r = dl({"signal", job, "USR1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("sent SIGUSR1 to job " + job), std::string::npos) << r.err;
  // Every rank exits 7 on it, and the job with it.
  EXPECT_EQ(p.finish(30).exit_code, 7);
  EXPECT_EQ(YAML::Load(dl({"status", job, "--json"}).out)["exit_status"].as<int>(), 7);

  const auto job2 = unique_job_id("jobs-stop2");
  Process q(dlaunch_cmd({"-H", kLocalhost, "--job-id", job2, kWorker, "ready-sleep", "60"}), env());
  ASSERT_TRUE(q.wait_for_lines(4, 30));
  r = dl({"stop", "last"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("job " + job2 + " ended, exit status 143"), std::string::npos) << r.err;
  // When stop returns, the head has ended and left no rank behind.
  EXPECT_EQ(q.finish(1).exit_code, 143);
  EXPECT_EQ(wait_job_gone(job2, 20), std::vector<pid_t>{});
  r = dl({"stop", job2});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is not running (ended)"), std::string::npos) << r.err;
}

// A signal the head does not act on, or one that does not stop the job given
// to stop, is refused before anything is sent.
TEST_F(Jobs, StopAndSignalRefuseSignalsTheHeadDoesNotActOn) {
  const auto job = unique_job_id("jobs-badsig");
  Process p(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, kWorker, "ready-sleep", "60"}), env());
  ASSERT_TRUE(p.wait_for_lines(4, 30));
  auto r = dl({"signal", job, "KILL"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'KILL' is not a signal the job's head acts on"), std::string::npos)
      << r.err;
  r = dl({"stop", job, "--signal", "USR1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("SIGUSR1 does not stop the job"), std::string::npos) << r.err;
  r = dl({"signal", job});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("and a signal"), std::string::npos) << r.err;
  // Still running after all that; an interrupt stops it with 130.
  EXPECT_EQ(YAML::Load(dl({"status", job, "--json"}).out)["state"].as<std::string>(), "running");
  r = dl({"stop", job, "--signal=INT"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(p.finish(10).exit_code, 130);
}

TEST_F(Jobs, BadUseIsAnInputError) {
  auto r = dl({"status"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("give one job"), std::string::npos) << r.err;
  r = dl({"status", "nosuchjob"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no job 'nosuchjob'"), std::string::npos) << r.err;
  r = dl({"ps", "--bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown option '--bogus'"), std::string::npos) << r.err;
  // An --events file that cannot be opened: nothing runs.
  const auto job = unique_job_id("jobs-bad-events");
  r = dl({"-H", kLocalhost, "--job-id", job, "--events", state_ + "/no/such/dir/e.jsonl", kWorker,
          "exit", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--events"), std::string::npos) << r.err;
  EXPECT_EQ(dl({"ps", "--all"}).out.find(job), std::string::npos);
}

// A program called like a verb still runs, after `--`.
TEST_F(Jobs, AProgramNamedLikeAVerbRunsAfterTheDoubleDash) {
  auto r = dl({"-n", "1", "--no-prefix", "--", "ps", "-o", "comm=", "-p", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
}

// The record keeps each rank's output (OutputSink::keep_rank_logs): `dlaunch
// logs` shows one rank's as it wrote it, or every rank's with its prefix,
// and the failure report names the failing rank's file. Private to the user.
TEST_F(Jobs, TheRecordKeepsEachRanksOutputForLogs) {
  const auto job = unique_job_id("jobs-logs");
  auto r = dl({"-H", kLocalhost, "--job-id", job, "sh", "-c",
               "for i in 1 2 3 4 5; do echo \"rank $RANK line $i\"; done; "
               "echo \"to stderr $RANK\" >&2; sleep 1; [ $RANK = 2 ] && exit 3; sleep 5"});
  ASSERT_EQ(r.exit_code, 3) << r.err;
  const std::string folder = state_ + "/dlaunch/jobs/" + job + "/output/0";
  EXPECT_NE(
      r.err.find("its whole output: " + folder + "/rank-2.log (dlaunch logs " + job + " --rank 2)"),
      std::string::npos)
      << r.err;
  auto logs = dl({"logs", "last", "--rank", "1"});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  for (int i = 1; i <= 5; ++i)
    EXPECT_NE(logs.out.find("rank 1 line " + std::to_string(i) + "\n"), std::string::npos)
        << logs.out;
  EXPECT_NE(logs.out.find("to stderr 1\n"), std::string::npos) << logs.out;
  EXPECT_EQ(logs.out.find("rank 0"), std::string::npos) << logs.out;
  // stdout alone keeps its order: the last lines of it are the last lines.
  logs = dl({"logs", job, "--rank=3", "--tail", "2"});
  EXPECT_TRUE(logs.out == "rank 3 line 5\nto stderr 3\n" ||
              logs.out == "rank 3 line 4\nrank 3 line 5\n")
      << logs.out;
  // Every rank, prefixed, rank after rank.
  logs = dl({"logs", "last"});
  const auto lines = lines_of(logs.out);
  ASSERT_EQ(lines.size(), 24u) << logs.out;
  for (int rank = 0; rank < 4; ++rank) {
    for (int k = 0; k < 6; ++k) {
      EXPECT_EQ(
          lines[static_cast<std::size_t>(rank * 6 + k)].rfind("[" + std::to_string(rank) + "] ", 0),
          0u)
          << logs.out;
    }
  }
  EXPECT_EQ(fs::status(folder).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(folder + "/rank-0.log").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  // What is not there is said.
  // A rank the job does not have is bad input (exit 2).
  r = dl({"logs", "last", "--rank", "9"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("has 4 rank(s), 0 to 3"), std::string::npos) << r.err;
  r = dl({"logs", "last", "--attempt", "4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("has no attempt 4 (attempts 0 to 0)"), std::string::npos) << r.err;
  r = dl({"logs", "last", "--tail", "x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--tail takes a whole number"), std::string::npos) << r.err;
  // --log-size 0: nothing kept, and logs says so.
  const auto none = unique_job_id("jobs-nologs");
  ASSERT_EQ(dl({"-H", kLocalhost, "--job-id", none, "--log-size", "0", "true"}).exit_code, 0);
  r = dl({"logs", none});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("keeps none of its ranks' output"), std::string::npos) << r.err;
}

// Each rank's file stays within --log-size (two halves: the newest output
// and the half before it), whatever the rank writes; each attempt of a
// restarted job has its own.
TEST_F(Jobs, RankLogsAreBoundedAndEachAttemptHasItsOwn) {
  const auto job = unique_job_id("jobs-logsize");
  auto r = dl({"-H", kLocalhost, "--job-id", job, "-n", "1", "--log-size", "2K", "sh", "-c",
               "i=0; while [ $i -lt 40 ]; do j=0; while [ $j -lt 5 ]; do "
               "echo \"line $i.$j of a rank that writes far more than it may keep\"; "
               "j=$((j+1)); done; sleep 0.02; i=$((i+1)); done"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string folder = state_ + "/dlaunch/jobs/" + job + "/output/0";
  ASSERT_TRUE(fs::exists(folder + "/rank-0.log.1"));
  // Half the budget each, give or take the last piece the agent sent.
  EXPECT_LE(fs::file_size(folder + "/rank-0.log"), 1024u + 4096u);
  EXPECT_LE(fs::file_size(folder + "/rank-0.log.1"), 1024u + 4096u);
  auto logs = dl({"logs", "last", "--tail", "1"});
  EXPECT_EQ(logs.out, "[0] line 39.4 of a rank that writes far more than it may keep\n");
  logs = dl({"logs", "last", "--rank", "0"});
  EXPECT_EQ(logs.out.find("line 0.0 "), std::string::npos) << "the oldest output is gone";

  const auto restarted = unique_job_id("jobs-logattempts");
  r = dl({"-H", kLocalhost, "--job-id", restarted, "--max-restarts", "1", "sh", "-c",
          "echo \"attempt $TORCHELASTIC_RESTART_COUNT rank $RANK\"; [ $RANK = 1 ] && exit 5; "
          "sleep 1"});
  ASSERT_EQ(r.exit_code, 5) << r.err;
  EXPECT_EQ(dl({"logs", "last", "--rank", "1"}).out, "attempt 1 rank 1\n");
  EXPECT_EQ(dl({"logs", "last", "--rank", "1", "--attempt", "0"}).out, "attempt 0 rank 1\n");
  EXPECT_NE(r.err.find("/output/1/rank-1.log"), std::string::npos) << r.err;
}

// --follow prints what comes while the job runs, and returns once it ended.
TEST_F(Jobs, LogsFollowsARunningJobToItsEnd) {
  const auto job = unique_job_id("jobs-follow");
  Process p(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "sh", "-c",
                         "echo started; i=0; while [ $i -lt 10 ]; do sleep 0.2; "
                         "echo \"tick $i\"; i=$((i+1)); done"}),
            env());
  ASSERT_TRUE(p.wait_for_lines(4, 30));
  auto f = dl({"logs", job, "--rank", "2", "--follow"}, 30);
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(p.finish(30).exit_code, 0);
  std::string want = "started\n";
  for (int i = 0; i < 10; ++i) want += "tick " + std::to_string(i) + "\n";
  EXPECT_EQ(f.out, want);
}

// `dlaunch stacks JOB` from another shell: the head collects every rank's
// stack (the job goes on) and answers in the job's record; a job that is
// not running is refused.
TEST_F(Jobs, StacksFromAnotherShell) {
  if (std::system("command -v gdb >/dev/null 2>&1 || command -v eu-stack >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no stack tool (gdb or eu-stack) installed";
  const auto job = unique_job_id("jobs-stacks");
  Process p(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, kWorker, "ready-sleep", "60"}), env());
  ASSERT_TRUE(p.wait_for_lines(4, 30));
  auto r = dl({"stacks", "last"}, 90);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dlaunch: job " + job + ": stacks on SIGQUIT (the job goes on)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("stacks of 4 rank(s) on SIGQUIT"), std::string::npos) << r.out;
  // The full stacks are in the record too.
  const std::string full = state_ + "/dlaunch/jobs/" + job + "/stacks.txt";
  EXPECT_NE(r.out.find("full stacks: " + full), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(full));
  // The job went on: it still runs, and stops as asked.
  EXPECT_EQ(YAML::Load(dl({"status", job, "--json"}).out)["state"].as<std::string>(), "running");
  EXPECT_EQ(dl({"stop", job}).exit_code, 0);
  EXPECT_EQ(p.finish(30).exit_code, 143);
  r = dl({"stacks", job});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is not running (ended)"), std::string::npos) << r.err;
}

// `dlaunch wait JOB` returns with the job's exit status once it has ended,
// at once for one that ended already; a lost job has none.
TEST_F(Jobs, WaitReturnsTheJobsExitStatus) {
  const auto job = unique_job_id("jobs-wait");
  Process p(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "sh", "-c",
                         "echo up; sleep 1; [ $RANK = 3 ] && exit 6; sleep 30"}),
            env());
  ASSERT_TRUE(p.wait_for_lines(4, 30));
  auto r = dl({"wait", job}, 60);
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_EQ(p.finish(10).exit_code, 6);
  EXPECT_EQ(dl({"wait", "last"}).exit_code, 6);
  const auto lost = unique_job_id("jobs-wait-lost");
  Process q(dlaunch_cmd({"-H", kLocalhost, "--job-id", lost, kWorker, "ready-sleep", "60"}), env());
  ASSERT_TRUE(q.wait_for_lines(4, 30));
  q.signal(SIGKILL);
  q.finish(10);
  EXPECT_EQ(wait_job_gone(lost, 20), std::vector<pid_t>{});
  r = dl({"wait", lost});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ended without an exit status (lost"), std::string::npos) << r.err;
}

// dlaunch -d: the command returns once every node is ready, with the job's
// name on stdout; the job goes on without it, and `wait` gives its status.
// Started from a shell on a terminal that then hangs up (a laptop's SSH
// session closing): the shell dies of the SIGHUP, the job does not.
TEST_F(Jobs, ADetachedJobOutlivesItsTerminal) {
  const auto job = unique_job_id("jobs-detach");
  // The ranks end only when the test says so (a file appears): the command
  // must have returned while they run, however slow the machine.
  const std::string go = state_ + "/go";
  const std::string cmd = fmt::format(
      "{} -d -H {} --job-id {} sh -c 'echo up; while [ ! -e {} ]; do sleep 0.1; done; "
      "echo \"done $RANK\"'; echo returned $?; sleep 60",
      dlaunch_cmd({}).front(), kLocalhost, job, go);
  {
    OnTerminal shell({"/bin/sh", "-c", cmd}, env());
    ASSERT_TRUE(shell.shows("returned 0", 60)) << shell.screen();
    EXPECT_NE(shell.screen().find(job + "\r\n"), std::string::npos) << shell.screen();
    EXPECT_NE(shell.screen().find("dlaunch: job " + job + " runs detached"), std::string::npos)
        << shell.screen();
    EXPECT_EQ(YAML::Load(dl({"status", job, "--json"}).out)["state"].as<std::string>(), "running");
    shell.hang_up();
    EXPECT_EQ(shell.exit_status(), -1);  // the shell: killed by the hang-up
  }
  EXPECT_EQ(YAML::Load(dl({"status", job, "--json"}).out)["state"].as<std::string>(), "running");
  std::ofstream(go).put('\n');
  auto w = dl({"wait", job}, 60);
  EXPECT_EQ(w.exit_code, 0) << w.err;
  auto logs = dl({"logs", job});
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(logs.out.find(fmt::format("[{}] done {}", r, r)), std::string::npos) << logs.out;
  }
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
}

// A detached job that cannot start: the command says why (the report, as
// without -d) and exits with the job's status; bad input is refused before.
TEST_F(Jobs, ADetachedJobThatCannotStartFailsTheCommand) {
  const std::string hosts = temp_file(
      "hosts:\n  - host: 127.0.0.1\n    name: gone\n    port: 1\n    transport: ssh\n", ".yaml");
  auto r = dl({"-d", "-H", hosts, "--connect-timeout", "2", "hostname"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("could not start the agent on node 0 (gone, 127.0.0.1)"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
  auto c = dl({"-d", "--check", "-H", kLocalhost});
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.err.find("--detach"), std::string::npos) << c.err;
  auto s = dl({"-d", "--stdin", "all", "-H", kLocalhost, "cat"});
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_NE(s.err.find("a detached job has no terminal to read"), std::string::npos) << s.err;
  fs::remove(hosts);
}

// dlaunch attach: the ranks' output from the last lines before it on, the
// detached head's own lines (the report), and the job's exit status.
TEST_F(Jobs, AttachFollowsADetachedJobToItsEndAndReturnsItsStatus) {
  const auto job = unique_job_id("jobs-attach");
  // Rank 1 fails once attach is following (a file appears).
  const std::string go = state_ + "/go";
  auto d = dl({"-d", "-H", kLocalhost, "--job-id", job, "sh", "-c",
               "echo \"up $RANK\"; touch " + state_ + "/up.$RANK; while [ ! -e " + go +
                   " ]; do sleep 0.1; done; [ $RANK = 1 ] && exit 5; sleep 30"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(d.out, job + "\n");
  Process a(dlaunch_cmd({"attach", job}), env());
  ASSERT_TRUE(a.wait_for_stderr(
      [](const std::string& err) { return err.find("leaves it running") != std::string::npos; },
      60));
  // Every rank has said it is up (a rank the failure stops before its
  // first line has nothing to show).
  for (int k = 0; k < 600; ++k) {
    bool all = true;
    for (int rank = 0; rank < 4; ++rank)
      all = all && fs::exists(state_ + "/up." + std::to_string(rank));
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::ofstream(go).put('\n');
  const auto r = a.finish(60);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find(fmt::format("[{}] up {}", rank, rank)), std::string::npos) << r.out;
  }
  // The head's report, from its log in the record.
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dlaunch attach: job " + job + " ended, exit status 5"), std::string::npos)
      << r.err;
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
  auto again = dl({"attach", job});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("has ended (exit status 5)"), std::string::npos) << again.err;
}

// On a terminal: the detach keys (ctrl-p,ctrl-q, or --detach-keys) leave the
// job running; Ctrl-C is SIGINT to the job, which stops it (130).
TEST_F(Jobs, AttachDetachesOnItsKeysAndPassesCtrlCToTheJob) {
  const auto job = unique_job_id("jobs-keys");
  ASSERT_EQ(dl({"-d", "-H", kLocalhost, "--job-id", job, kWorker, "ready-sleep", "60"}).exit_code,
            0);
  {
    OnTerminal t(dlaunch_cmd({"attach", job}), env());
    ASSERT_TRUE(t.shows("leaves it running", 20)) << t.screen();
    ASSERT_TRUE(t.shows("ready 3", 20)) << t.screen();
    // The progress line at the bottom of the terminal, from the job's events.
    ASSERT_TRUE(t.shows("attempt 0: 2/2 nodes ready, 4/4 ranks running", 20)) << t.screen();
    t.type("\x10\x11");
    ASSERT_TRUE(t.shows("detached; job " + job + " runs on", 20)) << t.screen();
    EXPECT_EQ(t.exit_status(), 0);
  }
  EXPECT_EQ(YAML::Load(dl({"status", job, "--json"}).out)["state"].as<std::string>(), "running");
  {
    OnTerminal t(dlaunch_cmd({"attach", "--detach-keys", "ctrl-x", job}), env());
    ASSERT_TRUE(t.shows("ctrl-x leaves it running", 20)) << t.screen();
    t.type("\x03");  // Ctrl-C
    ASSERT_TRUE(t.shows("sent SIGINT to job " + job, 20)) << t.screen();
    // The head's own lines, from its log in the record, as it stops the job.
    ASSERT_TRUE(t.shows("dlaunch: SIGINT: stopping the job", 20)) << t.screen();
    EXPECT_EQ(t.exit_status(), 130) << t.screen();
  }
  EXPECT_EQ(YAML::Load(dl({"status", job, "--json"}).out)["exit_status"].as<int>(), 130);
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
}

// A job that survives its head (docs/events.md): the pid of a job's head
// (its record's), and that head killed as a machine's failure would.
long head_pid_of(const std::string& status_json) {
  return YAML::Load(status_json)["head_pid"].as<long>();
}
void kill_head(long pid) {
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  // Not this process's child (a daemon): gone once /proc says so.
  for (int k = 0; k < 200 && fs::exists("/proc/" + std::to_string(pid) + "/cmdline"); ++k) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}
// "up RANK PID" and "done RANK PID" lines of the ranks, by rank.
std::map<int, std::string> rank_pids(const std::string& out, const std::string& word) {
  std::map<int, std::string> pids;
  for (const auto& l : lines_of(out)) {
    const auto at = l.find("] " + word + " ");
    if (at == std::string::npos) continue;
    std::istringstream in(l.substr(at + word.size() + 3));
    int rank = -1;
    std::string pid;
    if (in >> rank >> pid) pids[rank] = pid;
  }
  return pids;
}

// SIGKILL of a detached job's head: its ranks run on, and `dlaunch attach
// --recover` takes the job over; it ends as it would have, every rank having
// run once (the same process before and after), its exit status kept.
TEST_F(Jobs, AKilledHeadsJobIsTakenOverByANewHeadAndEndsAsItWouldHave) {
  const auto job = unique_job_id("jobs-recover");
  const std::string go = state_ + "/go";
  auto d = dl({"-d", "-H", kLocalhost, "--job-id", job, "sh", "-c",
               "echo \"up $RANK $$\"; touch " + state_ + "/up.$RANK; while [ ! -e " + go +
                   " ]; do sleep 0.1; done; echo \"done $RANK $$\"; touch " + state_ +
                   "/done.$RANK; [ $RANK = 2 ] || exit 0; while [ $(ls " + state_ +
                   "/done.* | wc -l) -lt 4 ]; do sleep 0.05; done; exit 4"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  for (int k = 0; k < 600; ++k) {
    bool all = true;
    for (int rank = 0; rank < 4; ++rank)
      all = all && fs::exists(state_ + "/up." + std::to_string(rank));
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const long old_head = head_pid_of(dl({"status", job, "--json"}).out);
  kill_head(old_head);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(YAML::Load(dl({"status", job, "--json"}).out)["state"].as<std::string>(), "lost");
  EXPECT_GE(job_processes(job).size(), 4u) << "the ranks stopped with their head";

  Process a(dlaunch_cmd({"attach", "--recover", job}), env());
  ASSERT_TRUE(a.wait_for_stderr(
      [](const std::string& err) { return err.find("leaves it running") != std::string::npos; },
      60))
      << a.finish(5).err;
  const long new_head = head_pid_of(dl({"status", job, "--json"}).out);
  EXPECT_NE(new_head, old_head);
  std::ofstream(go).put('\n');
  const auto r = a.finish(60);
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_NE(r.err.find("taking job " + job + " over"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("taken over: its ranks ran"), std::string::npos) << r.err;
  // Every rank ran once: its line before the head's loss and its last one
  // came from the same process.
  const auto logs = dl({"logs", job});
  const auto up = rank_pids(logs.out, "up");
  const auto done = rank_pids(logs.out, "done");
  ASSERT_EQ(up.size(), 4u) << logs.out;
  EXPECT_EQ(up, done) << logs.out;
  const auto st = YAML::Load(dl({"status", job, "--json"}).out);
  EXPECT_EQ(st["state"].as<std::string>(), "ended");
  EXPECT_EQ(st["exit_status"].as<int>(), 4);
  const auto types = types_of(parse_events(dl({"events", job}).out));
  EXPECT_EQ(std::count(types.begin(), types.end(), "head_recovered"), 1);
  EXPECT_EQ(std::count(types.begin(), types.end(), "node_resumed"), 2);
  EXPECT_EQ(types.back(), "end");
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
}

// With no new head, every node stops its ranks at the end of --head-grace;
// a take-over after it finds nothing to take and leaves the record lost.
TEST_F(Jobs, WithoutANewHeadTheRanksStopAtTheEndOfTheGrace) {
  const auto job = unique_job_id("jobs-grace");
  auto d = dl({"-d", "--head-grace", "2", "--kill-grace", "1", "-H", kLocalhost, "--job-id", job,
               kWorker, "ready-sleep", "60"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  for (int k = 0; k < 600 && job_processes(job).size() < 4; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill_head(head_pid_of(dl({"status", job, "--json"}).out));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_GE(job_processes(job).size(), 4u);
  // The grace, the kill grace and a margin.
  EXPECT_EQ(wait_job_gone(job, 2 + 1 + 5), std::vector<pid_t>{});
  auto r = dl({"attach", "--recover", job});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("no agent of job " + job + " runs node 0 here"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the job's record stays as it was"), std::string::npos) << r.err;
  EXPECT_EQ(YAML::Load(dl({"status", job, "--json"}).out)["state"].as<std::string>(), "lost");
  // Neither agent's door nor its folder is left.
  const char* tmp = std::getenv("TMPDIR");
  for (const auto& e : fs::directory_iterator(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp")) {
    EXPECT_FALSE(e.path().filename().string().starts_with("dlaunch-" + job + "-")) << e.path();
  }
}

// A new head that cannot prove the job's secret is turned away at every
// door: the job waits on, and one that can then takes it over.
TEST_F(Jobs, ANewHeadThatCannotProveTheJobsSecretTakesNothingOver) {
  const auto job = unique_job_id("jobs-secret");
  auto d = dl({"-d", "--head-grace", "60", "-H", kLocalhost, "--job-id", job, kWorker,
               "ready-sleep", "60"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  for (int k = 0; k < 600 && job_processes(job).size() < 4; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto st = YAML::Load(dl({"status", job, "--json"}).out);
  kill_head(st["head_pid"].as<long>());
  const std::string takeover = st["record"].as<std::string>() + "/takeover.json";
  std::string text;
  {
    std::ifstream in(takeover);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto at = text.find("\"secret\":\"");
  ASSERT_NE(at, std::string::npos) << text;
  std::string forged = text;
  forged.replace(at + 10, 8, "00000000");
  std::ofstream(takeover, std::ios::trunc) << forged;
  auto r = dl({"attach", "--recover", job});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("could not prove the job's secret"), std::string::npos) << r.err;
  EXPECT_GE(job_processes(job).size(), 4u) << "a head without the secret stopped the job";
  std::ofstream(takeover, std::ios::trunc) << text;
  Process a(dlaunch_cmd({"attach", "--recover", job}), env());
  ASSERT_TRUE(a.wait_for_stderr(
      [](const std::string& err) { return err.find("leaves it running") != std::string::npos; },
      60))
      << a.finish(5).err;
  EXPECT_EQ(dl({"stop", job}).exit_code, 0);
  const auto end = a.finish(60);
  EXPECT_EQ(end.exit_code, 143) << end.err;
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
}

// dlaunch events JOB --follow: each event as the head writes it, until the
// end event of a job that is running when it starts.
TEST_F(Jobs, EventsFollowARunningJobToItsEnd) {
  const auto job = unique_job_id("jobs-events-f");
  ASSERT_EQ(dl({"-d", "-H", kLocalhost, "--job-id", job, "sh", "-c", "sleep 1; exit 3"}).exit_code,
            0);
  auto f = dl({"events", job, "--follow"}, 60);
  EXPECT_EQ(f.exit_code, 0) << f.err;
  const auto events = parse_events(f.out);
  const auto types = types_of(events);
  ASSERT_FALSE(types.empty());
  EXPECT_EQ(types.front(), "start");
  EXPECT_EQ(types.back(), "end");
  EXPECT_EQ(std::count(types.begin(), types.end(), "rank_exited"), 4);
  EXPECT_EQ(events.back()["exit_status"].as<int>(), 3);
}

// The report's error file outlives the job: a copy in the record, named in
// the report (the node's copy goes with the job's private folder).
TEST_F(Jobs, TheErrorFileTheReportQuotesIsKeptInTheRecord) {
  const auto job = unique_job_id("jobs-errfile");
  auto r = dl({"-H", kLocalhost, "--job-id", job, "sh", "-c",
               "if [ $RANK = 2 ]; then printf '{\"message\": \"disk full\"}' > "
               "$TORCHELASTIC_ERROR_FILE; exit 4; fi; sleep 30"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  const std::string kept = state_ + "/dlaunch/jobs/" + job + "/error-file-0-rank-2.json";
  EXPECT_NE(r.err.find("note: rank 2's error file is kept in the job's record: " + kept),
            std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(kept), "{\"message\": \"disk full\"}");
  EXPECT_EQ(fs::status(kept).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}
