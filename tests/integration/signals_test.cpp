// Signals to dlaunch and what the ranks see (docs/troubleshooting.md,
// "Signals"): --signal before --timeout and on SIGTERM, the forwarded
// SIGUSR1/SIGUSR2/SIGCONT/SIGTSTP, SIGHUP with and without --nohup, and a
// kill grace longer than the heartbeat timeout. Real dlaunch, agents and
// workers (sh scripts that trap signals and write down when each came); each
// test checks that nothing of the job is left.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;

namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A folder for the ranks' records, removed at the end.
class Records {
 public:
  Records() : dir_(temp_dir("signals")) {}
  ~Records() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const std::string& dir() const { return dir_; }
  // Rank r's record: one "EVENT SECONDS" line per trapped signal.
  std::vector<std::pair<std::string, double>> of(int rank) const {
    std::vector<std::pair<std::string, double>> out;
    std::ifstream in(dir_ + "/r" + std::to_string(rank));
    std::string event;
    double t = 0;
    while (in >> event >> t) out.emplace_back(event, t);
    return out;
  }
  bool has(int rank, const std::string& event) const {
    for (const auto& [e, t] : of(rank)) {
      if (e == event) return true;
    }
    return false;
  }
  double when(int rank, const std::string& event) const {
    for (const auto& [e, t] : of(rank)) {
      if (e == event) return t;
    }
    return -1;
  }
  // Creating this file ends the workers' loop (they exit 0).
  void stop() const { std::ofstream(dir_ + "/stop") << "\n"; }

 private:
  std::string dir_;
};

// A worker: writes "pid PID" to stdout, records each signal in `traps` (with
// the given action after recording it), and loops until DIR/stop exists.
std::vector<std::string> worker(const Records& rec, const std::string& traps) {
  const std::string f = rec.dir() + "/r$RANK";
  std::string script = "f=" + f + "; ";
  std::istringstream names(traps);
  std::string t;
  while (names >> t) {
    std::string action;
    if (const auto colon = t.find(':'); colon != std::string::npos) {
      action = "; " + t.substr(colon + 1);
      t = t.substr(0, colon);
    }
    script += "trap 'echo " + t + " $(date +%s.%N) >> $f" + action + "' " + t + "; ";
  }
  script += "echo pid $$; while [ ! -e " + rec.dir() + "/stop ]; do sleep 0.1; done";
  return {"sh", "-c", script};
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& cmd) {
  args.insert(args.end(), cmd.begin(), cmd.end());
  return dlaunch_cmd(args);
}

// The states (/proc/PID/stat) of the processes of process group pgid, one
// letter each, zombies left out.
std::string group_states(pid_t pgid) {
  std::string out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string stat;
    if (!std::getline(f, stat)) continue;
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 1));
    char state = '?';
    pid_t ppid = 0;
    pid_t pgrp = 0;
    if (!(rest >> state >> ppid >> pgrp) || pgrp != pgid || state == 'Z') continue;
    out += state;
  }
  return out;
}

bool eventually(const std::function<bool()>& pred, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

std::vector<pid_t> rank_pids(const std::string& out) {
  std::vector<pid_t> pids;
  for (const auto& l : lines_of(out)) {
    const auto at = l.find("pid ");
    if (at != std::string::npos) pids.push_back(std::atoi(l.c_str() + at + 4));
  }
  return pids;
}

}  // namespace

// The acceptance case: SIGUSR1 3 s before a 6 s --timeout, on both ranks.
TEST(Signals, SignalBeforeTimeoutReachesEveryRank) {
  Records rec;
  const auto job = unique_job_id("sigwarn");
  // Each rank also notes when it started: the signal is due 3 s into the
  // job, which is later than 3 s after dlaunch started by the start-up's
  // length (1.5 s of it under ASan on a machine slowed down: the bound from
  // dlaunch's start alone failed a clean-clone run).
  auto cmd = worker(rec, "USR1");
  cmd.back() = "echo START $(date +%s.%N) >> " + rec.dir() + "/r$RANK; " + cmd.back();
  const double t0 = wall_now();
  auto r = run(with({"-n", "2", "--job-id", job, "--timeout", "6", "--signal", "USR1@3"}, cmd), 30);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find("sending SIGUSR1 to every rank"), std::string::npos) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const double at = rec.when(rank, "USR1") - t0;
    const double after_start = rec.when(rank, "USR1") - rec.when(rank, "START");
    EXPECT_GE(at, 2.5) << "rank " << rank;
    EXPECT_GT(rec.when(rank, "START"), 0) << "rank " << rank;
    EXPECT_LE(after_start, 3.5) << "rank " << rank;
    std::printf("rank %d got SIGUSR1 %.2f s after dlaunch started, %.2f s after it started\n", rank,
                at, after_start);
  }
  EXPECT_GE(r.seconds, 5.5);
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
}

// SIGTERM to dlaunch with --signal: SIG first, SIGTERM a kill grace later.
TEST(Signals, SigtermWithSignalSendsItFirstThenStopsAfterTheGrace) {
  Records rec;
  const auto job = unique_job_id("sigpreempt");
  Process p(with({"-n", "2", "--job-id", job, "--kill-grace", "2", "--signal", "USR1"},
                 worker(rec, "USR1 TERM:exit")));
  ASSERT_TRUE(p.wait_for_lines(2, 20));
  p.signal(SIGTERM);
  auto r = p.finish(30);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find("SIGTERM: sending SIGUSR1 to every rank"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("interrupted by SIGTERM"), std::string::npos) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const auto events = rec.of(rank);
    ASSERT_EQ(events.size(), 2u) << "rank " << rank;
    EXPECT_EQ(events[0].first, "USR1");
    EXPECT_EQ(events[1].first, "TERM");
    const double gap = events[1].second - events[0].second;
    EXPECT_GE(gap, 1.7) << "rank " << rank;
    EXPECT_LE(gap, 3.5) << "rank " << rank;
  }
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
}

// Without --signal, SIGTERM stops the job as ever: no warning.
TEST(Signals, SigtermWithoutSignalStopsAtOnce) {
  Records rec;
  const auto job = unique_job_id("sigterm");
  Process p(with({"-n", "2", "--job-id", job}, worker(rec, "USR1 TERM:exit")));
  ASSERT_TRUE(p.wait_for_lines(2, 20));
  p.signal(SIGTERM);
  auto r = p.finish(30);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(rec.has(rank, "USR1"));
    EXPECT_TRUE(rec.has(rank, "TERM"));
  }
  EXPECT_LT(r.seconds, 10);
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
}

// SIGUSR1 and SIGUSR2 to dlaunch reach every rank of both nodes; the job
// goes on and ends 0.
TEST(Signals, Usr1AndUsr2AreForwardedToEveryRankOnEveryNode) {
  Records rec;
  const auto job = unique_job_id("sigfwd");
  Process p(with({"-H", kLocalhost, "--job-id", job}, worker(rec, "USR1 USR2")));
  ASSERT_TRUE(p.wait_for_lines(4, 20));
  const auto all_have = [&](const std::string& e) {
    for (int rank = 0; rank < 4; ++rank) {
      if (!rec.has(rank, e)) return false;
    }
    return true;
  };
  p.signal(SIGUSR1);
  EXPECT_TRUE(eventually([&] { return all_have("USR1"); }, 5));
  p.signal(SIGUSR2);
  EXPECT_TRUE(eventually([&] { return all_have("USR2"); }, 5));
  rec.stop();
  auto r = p.finish(20);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("SIGUSR1: forwarded to every rank"), std::string::npos) << r.err;
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
}

// Issue 29: torchrun's --signals-to-handle. A signal dlaunch has no meaning
// of its own for (SIGALRM here) is forwarded to every rank when listed, as
// SIGUSR1 always is; SIGTERM keeps its meaning (the job stops).
TEST(Signals, SignalsToHandleForwardsTheListedOnesDlaunchHasNoMeaningFor) {
  Records rec;
  const auto job = unique_job_id("sighandle");
  Process p(with({"-H", kLocalhost, "--job-id", job, "--signals-to-handle",
                  "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGALRM"},
                 worker(rec, "ALRM")));
  ASSERT_TRUE(p.wait_for_lines(4, 20));
  p.signal(SIGALRM);
  EXPECT_TRUE(eventually(
      [&] {
        for (int rank = 0; rank < 4; ++rank) {
          if (!rec.has(rank, "ALRM")) return false;
        }
        return true;
      },
      5));
  rec.stop();
  auto r = p.finish(20);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("SIGALRM: forwarded to every rank"), std::string::npos) << r.err;
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
  // A name that is no signal is refused before anything starts.
  r = run(dlaunch_cmd({"-n", "1", "--signals-to-handle", "SIGTERM,SIGFOO", "true"}), 20);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'SIGFOO' is not a signal dlaunch can handle"), std::string::npos) << r.err;
}

// SIGTSTP stops every rank (dlaunch runs on, heartbeats flow), for longer
// than the heartbeat timeout; SIGCONT resumes them; the job ends 0.
TEST(Signals, TstpStopsTheRanksAndContResumesThem) {
  Records rec;
  const auto job = unique_job_id("sigtstp");
  Process p(
      with({"-H", kLocalhost, "--job-id", job, "--heartbeat-timeout", "1.5"}, worker(rec, "")));
  std::vector<pid_t> pids;
  ASSERT_TRUE(p.wait_for_output(
      [&](const std::string& out) {
        pids = rank_pids(out);
        return pids.size() >= 4;
      },
      20));
  ASSERT_EQ(pids.size(), 4u);
  // A rank is its process group (the shell and the `sleep` it runs): stopped
  // when each of its processes is, but for one in D, which is dash waiting in
  // vfork for a child that SIGTSTP stopped before it could exec.
  const auto all_in = [&](bool stopped) {
    for (pid_t pid : pids) {
      const std::string st = group_states(pid);
      const bool is_stopped =
          st.find('T') != std::string::npos && st.find_first_of("RS") == std::string::npos;
      if (is_stopped != stopped) return false;
    }
    return true;
  };
  const auto states = [&] {
    std::string s;
    for (pid_t pid : pids) s += std::to_string(pid) + ":" + group_states(pid) + " ";
    return s;
  };
  p.signal(SIGTSTP);
  EXPECT_TRUE(eventually([&] { return all_in(true); }, 5)) << states();
  EXPECT_EQ(dlaunch::process_state(p.pid()) == 'T', false);      // dlaunch itself runs on
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));  // twice the heartbeat timeout
  EXPECT_TRUE(all_in(true));
  p.signal(SIGCONT);
  EXPECT_TRUE(eventually([&] { return all_in(false); }, 5));
  rec.stop();
  auto r = p.finish(20);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("heartbeat"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIGTSTP: stopping every rank"), std::string::npos) << r.err;
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
}

// Stopped ranks are continued when the job is stopped, and so use the grace.
TEST(Signals, StoppedRanksGetTheirGraceWhenTheJobIsStopped) {
  Records rec;
  const auto job = unique_job_id("sigtstpterm");
  Process p(with({"-n", "2", "--job-id", job, "--kill-grace", "20"}, worker(rec, "TERM:exit")));
  ASSERT_TRUE(p.wait_for_lines(2, 20));
  p.signal(SIGTSTP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  p.signal(SIGINT);
  auto r = p.finish(40);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  // Not killed at the end of the grace (20 s); the bound leaves room for a
  // sanitized job's slow start on two cores.
  EXPECT_LT(r.seconds, 10);
  for (int rank = 0; rank < 2; ++rank) EXPECT_TRUE(rec.has(rank, "TERM")) << "rank " << rank;
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
}

TEST(Signals, SighupUnderNohupIsIgnored) {
  Records rec;
  const auto job = unique_job_id("signohup");
  Process p(with({"-n", "2", "--job-id", job, "--nohup"}, worker(rec, "HUP TERM")));
  ASSERT_TRUE(p.wait_for_lines(2, 20));
  p.signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(job_processes(job).empty(), false);
  rec.stop();
  auto r = p.finish(20);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) EXPECT_TRUE(rec.of(rank).empty()) << "rank " << rank;
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
}

TEST(Signals, SighupWithoutNohupStopsTheJob) {
  Records rec;
  const auto job = unique_job_id("sighup");
  Process p(with({"-n", "2", "--job-id", job}, worker(rec, "TERM:exit")));
  ASSERT_TRUE(p.wait_for_lines(2, 20));
  p.signal(SIGHUP);
  auto r = p.finish(20);
  EXPECT_EQ(r.exit_code, 128 + SIGHUP) << r.err;
  EXPECT_NE(r.err.find("interrupted by SIGHUP"), std::string::npos) << r.err;
  for (int rank = 0; rank < 2; ++rank) EXPECT_TRUE(rec.has(rank, "TERM")) << "rank " << rank;
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
}

// A kill grace longer than the heartbeat timeout: while rank 0's SIGTERM
// trap takes 5 s, head and agent keep hearing each other, the trap runs to
// its end, and the job ends with the failed rank's code.
TEST(Signals, GraceLongerThanTheHeartbeatTimeoutEndsCleanly) {
  Records rec;
  const auto job = unique_job_id("siglonggrace");
  const std::string f = rec.dir() + "/r$RANK";
  const std::string script =
      "f=" + f +
      "; trap 'echo TERM $(date +%s.%N) >> $f; sleep 5; echo DONE $(date +%s.%N) "
      ">> $f; exit 0' TERM; echo pid $$; if [ \"$RANK\" = 1 ]; then sleep 1; exit 3; fi; "
      "while :; do sleep 0.1; done";
  auto r = run(dlaunch_cmd({"-n", "2", "--job-id", job, "--kill-grace", "8", "--heartbeat-timeout",
                            "3", "sh", "-c", script}),
               60);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("rank 1 exited with code 3"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("heartbeat"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("gave up waiting"), std::string::npos) << r.err;
  ASSERT_TRUE(rec.has(0, "DONE")) << r.err;
  const double trap = rec.when(0, "DONE") - rec.when(0, "TERM");
  EXPECT_GE(trap, 4.8);
  EXPECT_LT(r.seconds, 12);
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
}

TEST(Signals, BadSignalSpecsAreInputErrors) {
  const std::vector<std::vector<std::string>> bad = {
      {"--signal", "FOO"},
      {"--signal", "USR1@"},
      {"--signal", "USR1@abc"},
      {"--signal", "USR1@0"},
      {"--signal", "USR1@1.5"},
      {"--signal", "KILL"},
      {"--signal", "99"},
      {"--signal", "@10"},
      {"--signal", "USR1@70000"},
      {"--timeout", "30", "--signal", "USR1@30"},
      {"--timeout", "10", "--signal", "USR1"},  // the default 60 s
  };
  for (const auto& args : bad) {
    auto cmd = args;
    cmd.insert(cmd.end(), {"-n", "1", "true"});
    auto r = run(dlaunch_cmd(cmd), 20);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.err;
    EXPECT_NE(r.err.find("--signal"), std::string::npos) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  }
  for (const std::string good : {"USR1", "SIGUSR2@5", "usr1@9", "10@2", "sigterm@1"}) {
    auto r = run(dlaunch_cmd({"--timeout", "100", "--signal", good, "-n", "1", "true"}), 20);
    EXPECT_EQ(r.exit_code, 0) << good << ": " << r.err;
  }
}
