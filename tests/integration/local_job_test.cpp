// Real jobs through dlaunch on localhost hostfiles: real agents, real workers,
// real signals. Each test checks what a user would see and that nothing of the
// job is left running afterwards.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "support.h"

using namespace dltest;

namespace {

const std::string kWorker = TEST_WORKER_BIN;

int count_lines_with(const std::string& text, const std::string& needle) {
  int n = 0;
  for (const auto& l : lines_of(text)) n += l.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace

TEST(LocalJob, EveryRankRunsOnceWithItsNodeAndLocalRank) {
  auto r = run(dlaunch_cmd({"-H", kLocalhost, HELLO_BIN}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::regex re(
      R"(\[(\d+)\] hello from rank (\d+)/4 \(local rank (\d+)/2, node (\d+)/2\) on \S+, master 127\.0\.0\.1:(\d+))");
  std::set<int> seen;
  std::set<std::string> ports;
  for (const auto& line : lines_of(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << line;
    const int rank = std::stoi(m[2]);
    EXPECT_EQ(std::stoi(m[1]), rank);
    EXPECT_EQ(std::stoi(m[3]), rank % 2);
    EXPECT_EQ(std::stoi(m[4]), rank / 2);
    EXPECT_TRUE(seen.insert(rank).second) << "rank " << rank << " twice";
    ports.insert(m[5]);
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(ports.size(), 1u) << "every rank must see the same MASTER_PORT";
  EXPECT_EQ(r.err, "");
}

TEST(LocalJob, WithoutHostfileNpRunsThatManyRanksHere) {
  auto r = run(dlaunch_cmd({"-n", "3", HELLO_BIN}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines_with(r.out, "/3 (local rank"), 3);
}

TEST(LocalJob, RankExitCodeBecomesDlaunchExitCodeAndOthersStopWithinASecond) {
  const auto job = unique_job_id("exit3");
  auto r =
      run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, kWorker, "fail-rank", "1", "3", "60"}));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  // The failing rank exits at once; everything else is torn down after it
  // (a sanitized dlaunch, two agents and four ranks take longer to start:
  // under TSan on a loaded 2-core machine the whole job took 1.5-2.9 s).
  EXPECT_LT(r.seconds, kSanitizedBuild ? 3.5 : 1.5) << r.err;
  EXPECT_NE(r.err.find("rank 1 exited with code 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("node node0, local rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("| last words of rank 1"), std::string::npos) << r.err;
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST(LocalJob, ShellExit3GivesExit3) {
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "sh", "-c", "exit 3"}));
  EXPECT_EQ(r.exit_code, 3) << r.err;
}

TEST(LocalJob, SegfaultGives139AndTheReportNamesRankAndSignal) {
  const auto job = unique_job_id("segv");
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, kWorker, "segv-rank", "2", "60"}));
  EXPECT_EQ(r.exit_code, 139) << r.err;
  EXPECT_NE(r.err.find("rank 2 was killed by SIGSEGV"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("node node1, local rank 0"), std::string::npos) << r.err;
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST(LocalJob, SigintLeavesNoProcessOfTheJobGrandchildrenIncluded) {
  const auto job = unique_job_id("sigint");
  Process p(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, kWorker, "grandchild", "60"}));
  ASSERT_TRUE(p.wait_for_lines(4, 20));
  // Workers, their children, and the children that left the process group.
  EXPECT_GE(job_processes(job).size(), 12u);
  p.signal(SIGINT);
  auto r = p.finish(20);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("interrupted by SIGINT"), std::string::npos) << r.err;
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST(LocalJob, WorkersIgnoringSigtermAreKilledAfterTheGrace) {
  const auto job = unique_job_id("grace");
  Process p(dlaunch_cmd(
      {"-H", kLocalhost, "--job-id", job, "--kill-grace", "0.5", kWorker, "ignore-term", "60"}));
  ASSERT_TRUE(p.wait_for_lines(4, 20));
  const auto t0 = std::chrono::steady_clock::now();
  p.signal(SIGTERM);
  auto r = p.finish(20);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 1.5);
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST(LocalJob, SecondInterruptKillsAtOnce) {
  const auto job = unique_job_id("twice");
  Process p(dlaunch_cmd(
      {"-H", kLocalhost, "--job-id", job, "--kill-grace", "30", kWorker, "ignore-term", "60"}));
  ASSERT_TRUE(p.wait_for_lines(4, 20));
  p.signal(SIGINT);
  ::usleep(200 * 1000);
  const auto t0 = std::chrono::steady_clock::now();
  p.signal(SIGINT);
  auto r = p.finish(20);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_LT(took, 1.0);
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST(LocalJob, AgentKilledWithSigkillTakesItsWorkersDown) {
  const auto job = unique_job_id("agentkill");
  Process p(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, kWorker, "grandchild", "60"}));
  ASSERT_TRUE(p.wait_for_lines(4, 20));
  pid_t agent = -1;
  for (pid_t c : dlaunch::descendants_of(p.pid())) {
    std::ifstream comm("/proc/" + std::to_string(c) + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name == "dlaunch-agent") {
      agent = c;
      break;
    }
  }
  ASSERT_GT(agent, 0);
  ::kill(agent, SIGKILL);
  auto r = p.finish(20);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("lost contact with the agent"), std::string::npos) << r.err;
  EXPECT_EQ(wait_job_gone(job, 2), std::vector<pid_t>{});
}

TEST(LocalJob, DlaunchKilledWithSigkillLeavesNothingBehind) {
  const auto job = unique_job_id("headkill");
  Process p(dlaunch_cmd(
      {"-H", kLocalhost, "--job-id", job, "--kill-grace", "1", kWorker, "grandchild", "60"}));
  ASSERT_TRUE(p.wait_for_lines(4, 20));
  const auto agents = agent_processes(p.pid());
  ASSERT_EQ(agents.size(), 4u);  // two agents, each with its guard
  p.signal(SIGKILL);
  p.finish(10);
  // The agents read EOF on their control channel, stop everything and end.
  EXPECT_EQ(wait_job_gone(job, 3), std::vector<pid_t>{});
  EXPECT_EQ(wait_agents_gone(agents, 3), std::vector<pid_t>{});
}

// Many logical nodes on one machine (bench/run's controller scale): every
// agent ends by itself once its rank has, none is left for the exit deadline
// to kill, and DLAUNCH_DEBUG=stats reports the head's and each agent's use.
TEST(LocalJob, SixtyFourLocalNodesEachAgentExitsByItselfAndReportsItsStats) {
  std::string yaml = "hosts:\n";
  for (int i = 0; i < 64; ++i)
    yaml += "  - {host: localhost, name: n" + std::to_string(i) + ", slots: 1}\n";
  const auto hostfile = temp_file(yaml, ".yaml");
  auto r = run(dlaunch_cmd({"-H", hostfile, "true"}), 120, {"DLAUNCH_DEBUG=stats"});
  std::filesystem::remove(hostfile);
  if (r.exit_code != 0) {
    // Why, without the 64 agents' stats lines before it (a clean-clone run
    // under ASan failed here once and showed only those).
    std::string why;
    for (const auto& l : lines_of(r.err)) {
      if (l.rfind("dlaunch-agent: stats:", 0) != 0) why += l + "\n";
    }
    FAIL() << "exit " << r.exit_code << ":\n" << why.substr(0, 4000);
  }
  const std::regex head(
      R"(dlaunch: stats: nodes=64 ranks=64 connected_s=[0-9.]+ ready_s=[0-9.]+ running_s=[0-9.]+ )"
      R"(end_s=[0-9.]+ cpu_user_s=[0-9.]+ cpu_sys_s=[0-9.]+ maxrss_kib=([0-9]+))");
  const std::regex agent(
      R"(dlaunch-agent: stats: pid=[0-9]+ cpu_user_s=[0-9.]+ cpu_sys_s=[0-9.]+ maxrss_kib=([0-9]+))");
  int heads = 0, agents = 0;
  for (const auto& line : lines_of(r.err)) {
    std::smatch m;
    if (std::regex_match(line, m, head)) {
      ++heads;
    } else if (std::regex_match(line, m, agent)) {
      ++agents;
    } else {
      ADD_FAILURE() << "unexpected line on stderr: " << line;
      continue;
    }
    EXPECT_GT(std::stol(m[1]), 0) << line;
  }
  EXPECT_EQ(heads, 1);
  EXPECT_EQ(agents, 64) << "an agent that printed no stats was killed instead of exiting";
}

TEST(LocalJob, HundredMegabytesOfOutputLoseNoLineAndMixNone) {
  // Rank 0 writes 100 MB in 100-byte lines while the others write alongside.
  const long big = 1'000'000;
  const long small = 20'000;
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "sh", "-c",
                            std::string("if [ \"$RANK\" = 0 ]; then exec ") + kWorker + " lines " +
                                std::to_string(big) + " 100; else exec " + kWorker + " lines " +
                                std::to_string(small) + " 100; fi"}),
               300);
  ASSERT_EQ(r.exit_code, 0) << r.err.substr(0, 2000);
  std::map<int, long> next;  // rank -> next expected seq
  std::string_view out = r.out;
  std::size_t pos = 0;
  long bad = 0;
  while (pos < out.size()) {
    auto nl = out.find('\n', pos);
    ASSERT_NE(nl, std::string_view::npos) << "output does not end with a newline";
    std::string_view line = out.substr(pos, nl - pos);
    pos = nl + 1;
    // "[R] R SEQ payload": prefix rank equals the rank the worker wrote.
    auto close = line.find("] ");
    int prefix_rank = -1, rank = -1;
    long seq = -1;
    std::from_chars(line.data() + 1, line.data() + close, prefix_rank);
    auto body = line.substr(close + 2);
    auto sp1 = body.find(' ');
    auto sp2 = body.find(' ', sp1 + 1);
    std::from_chars(body.data(), body.data() + sp1, rank);
    std::from_chars(body.data() + sp1 + 1, body.data() + sp2, seq);
    if (prefix_rank != rank || body.size() != 99 || seq != next[rank]) {
      if (++bad < 5) ADD_FAILURE() << "bad line: " << std::string(line.substr(0, 120));
    }
    next[rank] = seq + 1;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(next[0], big);
  for (int k = 1; k < 4; ++k) EXPECT_EQ(next[k], small) << "rank " << k;
}

TEST(LocalJob, StdoutStaysStdoutAndStderrStaysStderr) {
  auto r = run(dlaunch_cmd({"-n", "1", "sh", "-c", "echo to-out; echo to-err >&2"}));
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "[0] to-out\n");
  EXPECT_EQ(r.err, "[0] to-err\n");
}

TEST(LocalJob, PartialLineIsFlushedAfterAShortWhile) {
  // Well before the worker ends (its exit would flush the piece anyway).
  Process p(dlaunch_cmd({"-n", "1", "sh", "-c", "printf no-newline; sleep 10"}));
  EXPECT_TRUE(p.wait_for_output([](const std::string& out) { return out == "[0] no-newline\n"; },
                                kSanitizedBuild ? 5 : 2));
  p.signal(SIGTERM);
  p.finish(10);
}

// Between its two writes the worker keeps a CPU busy, as a worker preempted
// in the middle of a stream of output on an overloaded machine is runnable
// without writing: it is not quiet, and its line must not be cut in two. The
// same pause spent sleeping is quiet: the piece leaves on its own.
TEST(LocalJob, PartialLineOfARunnableWorkerIsNotCutButASleepingOnesLeaves) {
  auto busy = run(dlaunch_cmd({"-n", "1", kWorker, "partial-spin", "600"}));
  ASSERT_EQ(busy.exit_code, 0) << busy.err;
  EXPECT_EQ(busy.out, "[0] begin-end\n");
  auto quiet = run(dlaunch_cmd({"-n", "1", kWorker, "partial-sleep", "600"}));
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.out, "[0] prompt> \n[0] answer\n");
}

TEST(LocalJob, PrefixModes) {
  auto tag = run(dlaunch_cmd(
      {"-H", kLocalhost, "--tag-output", "--include", "node1:1", "sh", "-c", "echo hi"}));
  ASSERT_EQ(tag.exit_code, 0) << tag.err;
  EXPECT_EQ(tag.out, "[node1:0] hi\n");
  auto none = run(dlaunch_cmd({"-n", "2", "--no-prefix", "sh", "-c", "echo hi"}));
  EXPECT_EQ(none.out, "hi\nhi\n");
}

TEST(LocalJob, OutputDirKeepsEveryRanksStreams) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("dlaunch-out-" + std::to_string(::getpid()));
  const auto job = unique_job_id("outdir");
  auto r = run(dlaunch_cmd({"-n", "2", "--job-id", job, "--output-dir", dir.string(), "sh", "-c",
                            "echo out $RANK; echo err $RANK >&2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream out(dir / job / ("rank." + std::to_string(rank) + ".out"));
    std::ifstream err(dir / job / ("rank." + std::to_string(rank) + ".err"));
    std::string o, e;
    std::getline(out, o);
    std::getline(err, e);
    EXPECT_EQ(o, "out " + std::to_string(rank));
    EXPECT_EQ(e, "err " + std::to_string(rank));
  }
  std::filesystem::remove_all(dir);
}

TEST(LocalJob, WorkersGetTheTorchrunEnvironment) {
  auto r = run(
      dlaunch_cmd({"-H", kLocalhost, "--job-id", "envjob", "--include", "node1:1", "sh", "-c",
                   "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK "
                   "$GROUP_WORLD_SIZE $ROLE_RANK $ROLE_WORLD_SIZE $ROLE_NAME $NODE_RANK $NNODES "
                   "$TORCHELASTIC_RUN_ID $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS "
                   "$DLAUNCH_JOB_ID $MASTER_ADDR"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] 0 0 1 1 0 1 0 1 default 0 1 envjob 0 0 envjob 127.0.0.1\n");
}

TEST(LocalJob, MasterPortIsFreeForRankZeroToBind) {
  // Rank 0 binds MASTER_PORT the way PyTorch's TCPStore does.
  auto r = run(dlaunch_cmd({"-n", "2", kWorker, "bind-master-port"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] bound\n");
}

TEST(LocalJob, ProgramThatFailsToExecIsReportedWithTheExecError) {
  // Executable, found on every node, but exec fails: its interpreter is missing.
  const auto script = temp_file("#!/nonexistent/interpreter\n", ".sh");
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  const auto job = unique_job_id("noexec");
  auto r = run(dlaunch_cmd({"-n", "2", "--job-id", job, script}));
  EXPECT_EQ(r.exit_code, 127) << r.err;
  EXPECT_NE(r.err.find("could not be started: cannot execute '" + script +
                       "': No such file or directory"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
  std::filesystem::remove(script);
}

TEST(LocalJob, MissingWorkingDirectoryIsRefused) {
  auto r = run(dlaunch_cmd({"-n", "1", "--wdir", "/nonexistent-dir", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent-dir"), std::string::npos) << r.err;
}

TEST(LocalJob, WorkersFindTheJobsStoreThroughTheirEnvironment) {
  auto r = run(dlaunch_cmd({"-H", kLocalhost, kWorker, "store-exchange"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 4u) << r.out;
  for (const auto& l : lines_of(r.out)) EXPECT_NE(l.find("read 4 keys"), std::string::npos) << l;
}

TEST(LocalJob, TimeoutStopsAHangingJobWith124AndNamesTheRanksStillRunning) {
  const auto job = unique_job_id("timeout");
  // Rank 1 finishes at once; the others hang. The ranks end on the stop's
  // SIGTERM: a job that waited for its ranks (60 s) or the kill grace (20 s)
  // would take far longer than the bound, which leaves room for a slow
  // machine (3.03 s once under ASan on CI's two cores).
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--timeout", "1", "--kill-grace",
                            "20", "sh", "-c", "[ \"$RANK\" = 1 ] || sleep 60"}));
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_GE(r.seconds, 0.9);
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(
      r.err.find(
          "--timeout of 1.0 s expired; 3 rank(s) still running: 0 (node0), 2 (node1), 3 (node1)"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST(LocalJob, MaxRestartsStartsTheWholeJobAgainWithTheCountUp) {
  // Every rank fails on the first attempt and succeeds on the second.
  auto r =
      run(dlaunch_cmd({"-H", kLocalhost, "--max-restarts", "2", "sh", "-c",
                       "echo attempt $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS; "
                       "sleep 0.3; [ \"$DLAUNCH_RESTART_COUNT\" -ge 1 ] || exit 3"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines_with(r.out, "attempt 0 of 2"), 4) << r.out;
  EXPECT_EQ(count_lines_with(r.out, "attempt 1 of 2"), 4) << r.out;
  EXPECT_NE(r.err.find("attempt 0: failed, exit status 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("attempt 1: succeeded"), std::string::npos) << r.err;
}

TEST(LocalJob, MaxRestartsGivesUpWithTheLastFailure) {
  auto r = run(dlaunch_cmd({"-n", "2", "--max-restarts", "1", "sh", "-c", "exit 5"}));
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("attempt 0: failed, exit status 5"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("attempt 1: failed, exit status 5"), std::string::npos) << r.err;
}

TEST(LocalJob, EachRankGetsItsOwnErrorFileInAFolderRemovedAtTheEnd) {
  const auto job = unique_job_id("errfiles");
  auto r = run(dlaunch_cmd(
      {"-H", kLocalhost, "--job-id", job, "sh", "-c",
       "echo $TORCHELASTIC_ERROR_FILE; test -d \"$(dirname $TORCHELASTIC_ERROR_FILE)\""}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> files;
  for (const auto& l : lines_of(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m,
                                 std::regex(R"(\[(\d)\] ((/\S+/dlaunch-)" + job +
                                            R"(-node(\d)-[A-Za-z0-9]{6})/error\.(\d)\.json))")))
        << l;
    EXPECT_EQ(m[1], m[5]);
    EXPECT_EQ(std::stoi(m[4]), std::stoi(m[1]) / 2);
    files.insert(m[2]);
    EXPECT_FALSE(std::filesystem::exists(m[3].str())) << m[3];
  }
  EXPECT_EQ(files.size(), 4u);
}

TEST(LocalJob, ErrorFileWithAPlainMessageIsInTheReport) {
  const auto job = unique_job_id("errplain");
  auto r = run(dlaunch_cmd(
      {"-H", kLocalhost, "--job-id", job, "sh", "-c",
       "if [ $RANK = 2 ]; then printf '{\"message\": \"disk full on %s\"}' $DLAUNCH_NODE_NAME "
       "> $TORCHELASTIC_ERROR_FILE; exit 4; fi; sleep 30"}));
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("rank 2 exited with code 4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/error.2.json):\n    disk full on node1\n"), std::string::npos) << r.err;
  EXPECT_EQ(job_processes(job), std::vector<pid_t>{});
}

TEST(LocalJob, ErrorFileTheUserChoseIsKeptAndReported) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("dlaunch-user-errfile-" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(path);
  auto r = run(dlaunch_cmd({"-n", "1", "-x", "TORCHELASTIC_ERROR_FILE=" + path.string(), "sh", "-c",
                            "echo $TORCHELASTIC_ERROR_FILE; echo '{\"message\": \"mine\"}' > "
                            "$TORCHELASTIC_ERROR_FILE; exit 9"}));
  EXPECT_EQ(r.exit_code, 9) << r.err;
  EXPECT_EQ(r.out, "[0] " + path.string() + "\n");
  EXPECT_NE(r.err.find("(from its error file " + path.string() + "):\n    mine\n"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(std::filesystem::exists(path)) << "the user's file is theirs to remove";
  std::filesystem::remove(path);
}

TEST(LocalJob, ExportAndEnvFileReachEveryRankAndXWins) {
  const auto envfile =
      temp_file("# job settings\nA=from file\nB='quoted \"x\" y'\nC=file\n", ".env");
  auto r = run(
      dlaunch_cmd({"-H", kLocalhost, "--env-file", envfile, "-x", "C=from -x", "-x", "HEAD_ONLY",
                   "-x", "SPACES=a  b\tc", "sh", "-c",
                   "printf '%s|%s|%s|%s|%s\\n' \"$A\" \"$B\" \"$C\" \"$HEAD_ONLY\" \"$SPACES\""}),
      60, {"HEAD_ONLY=head value"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  for (const auto& l : lines) {
    EXPECT_EQ(l.substr(4), "from file|quoted \"x\" y|from -x|head value|a  b\tc") << l;
  }
}

TEST(LocalJob, RanksFilterShowsOnlyThoseRanksButTheReportStillNamesAnyRank) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("dlaunch-ranks-" + std::to_string(::getpid()));
  const auto job = unique_job_id("ranks");
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, "--ranks", "0,2-3", "--output-dir",
                            dir.string(), "sh", "-c",
                            "echo out $RANK; echo err $RANK >&2; [ $RANK != 1 ] || { sleep 0.5; "
                            "echo dying >&2; exit 6; }"}));
  EXPECT_EQ(r.exit_code, 6) << r.err;
  const auto lines = lines_of(r.out);
  const std::multiset<std::string> out(lines.begin(), lines.end());
  EXPECT_EQ(out, (std::multiset<std::string>{"[0] out 0", "[2] out 2", "[3] out 3"}));
  EXPECT_EQ(r.err.find("[1] "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[2] err 2"), std::string::npos) << r.err;
  // Hidden from the console, not from the report or the files.
  EXPECT_NE(r.err.find("rank 1 exited with code 6"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("    | dying"), std::string::npos) << r.err;
  std::ifstream f(dir / job / "rank.1.out");
  std::string o;
  std::getline(f, o);
  EXPECT_EQ(o, "out 1");
  std::filesystem::remove_all(dir);
}

TEST(LocalJob, TimestampsAndColourPrefixTheLines) {
  auto r = run(dlaunch_cmd({"-n", "2", "--timestamps", "sh", "-c", "echo hi"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& l : lines_of(r.out)) {
    EXPECT_TRUE(std::regex_match(l, std::regex(R"(\d\d:\d\d:\d\d\.\d\d\d \[[01]\] hi)"))) << l;
  }
  // Not a terminal: no colour unless asked; NO_COLOR does not beat --color=always.
  auto plain = run(dlaunch_cmd({"-n", "1", "sh", "-c", "echo hi"}));
  EXPECT_EQ(plain.out, "[0] hi\n");
  auto always =
      run(dlaunch_cmd({"-n", "1", "--color=always", "sh", "-c", "echo hi"}), 60, {"NO_COLOR=1"});
  EXPECT_EQ(always.out, "\033[36m[0]\033[0m hi\n");
  auto never = run(dlaunch_cmd({"-n", "1", "--color", "never", "sh", "-c", "echo hi"}));
  EXPECT_EQ(never.out, "[0] hi\n");
}

TEST(LocalJob, PrefixesAreColouredOnATerminalUnlessNoColor) {
  // dlaunch's stdout on a pseudo-terminal, as in an interactive shell.
  auto on_tty = [](const std::vector<std::string>& extra_env) {
    int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    EXPECT_GE(master, 0);
    EXPECT_EQ(::grantpt(master), 0);
    EXPECT_EQ(::unlockpt(master), 0);
    dlaunch::UniqueFd slave(::open(::ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC));
    dlaunch::SpawnOptions o;
    o.argv = dlaunch_cmd({"-n", "1", "sh", "-c", "echo hi"});
    o.env = dlaunch::current_environment();
    std::erase_if(o.env, [](const std::string& e) {
      return e.rfind("NO_COLOR=", 0) == 0 || e.rfind("TERM=", 0) == 0;
    });
    o.env.emplace_back("TERM=xterm");
    for (const auto& e : extra_env) o.env.push_back(e);
    o.new_process_group = false;
    o.stdout_fd = slave.get();
    auto child = dlaunch::spawn(o);
    EXPECT_TRUE(child.ok()) << child.error();
    if (!child.ok()) return std::string();
    slave.reset();
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(master, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
    int status = 0;
    ::waitpid(*child, &status, 0);
    ::close(master);
    EXPECT_EQ(dlaunch::exit_code_of(status), 0);
    return text;
  };
  EXPECT_EQ(on_tty({}), "\033[36m[0]\033[0m hi\r\n");
  EXPECT_EQ(on_tty({"NO_COLOR=1"}), "[0] hi\r\n");
}

TEST(LocalJob, AgentKilledWithSigkillLeavesNoErrorFileFolder) {
  const auto job = unique_job_id("errdirkill");
  auto folders = [&] {
    std::vector<std::string> out;
    for (const auto& e :
         std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
      const auto name = e.path().filename().string();
      if (name.rfind("dlaunch-" + job + "-node", 0) == 0) out.push_back(name);
    }
    return out;
  };
  Process p(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, kWorker, "ready-sleep", "60"}));
  ASSERT_TRUE(p.wait_for_lines(4, 20));
  EXPECT_EQ(folders().size(), 2u);
  // Both agents (dlaunch's children), not their guards (the agents' children).
  for (pid_t c : dlaunch::descendants_of(p.pid())) {
    std::ifstream stat("/proc/" + std::to_string(c) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (line.find("(dlaunch-agent)") == std::string::npos || close == std::string::npos) continue;
    if (std::stoi(line.substr(close + 4)) == p.pid()) ::kill(c, SIGKILL);
  }
  auto r = p.finish(20);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // Said as it happened (issue 15 item 14: it used to read "exit status 0").
  EXPECT_NE(r.err.find("(the agent was killed by SIGKILL)"), std::string::npos) << r.err;
  EXPECT_EQ(wait_job_gone(job, 2), std::vector<pid_t>{});
  // The agents' guards remove them.
  for (int i = 0; i < 100 && !folders().empty(); ++i) ::usleep(20 * 1000);
  EXPECT_EQ(folders(), std::vector<std::string>{});
}

// Issue 15 ("Also"): --no-prefix passes a rank's bytes through unchanged: a
// line longer than the agent's 64 KiB pieces stays one line, and nothing is
// added at the end.
TEST(LocalJob, NoPrefixIsByteTransparent) {
  auto r = run(dlaunch_cmd({"-n", "1", "--no-prefix", "sh", "-c",
                            "head -c 300000 /dev/zero | tr '\\0' x; printf 'end'"}),
               60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string(300000, 'x') + "end");
  // With a prefix: 64 KiB pieces on lines of their own, and a final newline.
  r = run(dlaunch_cmd({"-n", "1", "sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"}), 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::size_t x = 0;
  for (const auto& line : lines_of(r.out)) {
    ASSERT_EQ(line.rfind("[0] ", 0), 0u) << line.substr(0, 40);
    x += line.size() - 4;
  }
  EXPECT_EQ(x, 300000u);
  EXPECT_EQ(r.out.back(), '\n');
}
