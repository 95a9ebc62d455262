// MPMD jobs (the colon syntax, --app FILE, roles, per-app options, --mpi with
// two programs in one MPI_COMM_WORLD) and --stdin, with real dlaunch, agents
// and workers (docs/mpmd.md).
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;

namespace {

// The lines of out, sorted (ranks print in any order).
std::multiset<std::string> line_set(const std::string& out) {
  const auto lines = lines_of(out);
  return {lines.begin(), lines.end()};
}

// `sh -c SCRIPT` where $DLAUNCH is the dlaunch binary: for jobs fed on stdin.
RunResult shell(const std::string& script, double timeout_s = 60) {
  return run({"/bin/sh", "-c", script}, timeout_s,
             {std::string("DLAUNCH=") + DLAUNCH_BIN, std::string("MPI_HELLO=") + MPI_HELLO_BIN});
}

}  // namespace

TEST(Mpmd, ColonSyntaxGivesOneWorldInAppOrderWithRoles) {
  auto r = run(dlaunch_cmd({"-n", "1", "sh", "-c", "echo $ROLE_NAME $RANK", ":", "-n", "2", "sh",
                            "-c", "echo $ROLE_NAME $RANK"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] sh 0", "[1] sh 1", "[2] sh 2"}));

  // Roles by --role: ROLE_RANK and ROLE_WORLD_SIZE count within the role.
  const std::string show = "echo $ROLE_NAME $RANK $ROLE_RANK $ROLE_WORLD_SIZE $WORLD_SIZE";
  r = run(
      dlaunch_cmd({"-n", "1",  "--role", "server", "sh", "-c",     show, ":",       "-n", "2", "sh",
                   "-c", show, ":",      "-n",     "1",  "--role", "sh", "/bin/sh", "-c", show}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] server 0 0 1 4", "[1] sh 1 0 3 4",
                                                         "[2] sh 2 1 3 4", "[3] sh 3 2 3 4"}));
}

TEST(Mpmd, ColonAsAnArgumentIsNotASeparator) {
  auto r = run(dlaunch_cmd({"-n", "1", "sh", "-c", "echo \"$0\" \"$1\"", ":", "x"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] : x\n");
}

TEST(Mpmd, PerAppEnvironmentAndWorkingDirectory) {
  const auto env_file = temp_file("COLOR=blue\nSHAPE=round\n", ".env");
  auto r = run(dlaunch_cmd({"-x",
                            "COMMON=1",
                            "-x",
                            "SHAPE=flat",
                            "--wdir",
                            "/",
                            "-n",
                            "1",
                            "sh",
                            "-c",
                            "echo $COMMON ${COLOR:-none} $SHAPE $(pwd)",
                            ":",
                            "-n",
                            "1",
                            "--env-file",
                            env_file,
                            "-x",
                            "COLOR=red",
                            "--wdir",
                            "/tmp",
                            "sh",
                            "-c",
                            "echo $COMMON $COLOR $SHAPE $(pwd)"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out),
            (std::multiset<std::string>{"[0] 1 none flat /", "[1] 1 red round /tmp"}));
  fs::remove(env_file);
}

TEST(Mpmd, AppFileWithCommentsQuotesAndOptions) {
  const auto file = temp_file(
      "# a server and its workers\n"
      "\n"
      "-n 1 --role server sh -c 'echo server $RANK $ROLE_RANK/$ROLE_WORLD_SIZE'\n"
      "   # indented comment\n"
      "-n 2 -x \"GREETING=hello world\" sh -c \"echo \\\"\\$GREETING\\\" \\$RANK \\$ROLE_NAME\"\n",
      ".app");
  auto r = run(dlaunch_cmd({"--app", file}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] server 0 0/1", "[1] hello world 1 sh",
                                                         "[2] hello world 2 sh"}));
  fs::remove(file);
}

TEST(Mpmd, BadAppFileNamesFileLineAndFieldAndStartsNothing) {
  const auto file = temp_file("-n 1 true\n# fine\n-n two true\n", ".app");
  auto r = run(dlaunch_cmd({"--app", file}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(file + ":3: -n: expected a positive integer, got 'two'"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
  fs::remove(file);

  const auto quote = temp_file("-n 1 sh -c 'echo\n", ".app");
  r = run(dlaunch_cmd({"--app", quote}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(quote + ":1: quote: unterminated ' quote"), std::string::npos) << r.err;
  fs::remove(quote);

  r = run(dlaunch_cmd({"-n", "1", "true", ":", "--bogus", "1", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("app 2: --bogus: '--bogus' is not an option of an app"), std::string::npos)
      << r.err;
  r = run(dlaunch_cmd({"-n", "1", "true", ":", "-x", "A=1", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("app 2: -n: no number of ranks for this app"), std::string::npos) << r.err;
}

TEST(Mpmd, AppsOnLogicalNodesFillFreeSlotsInOrder) {
  // node0 and node1 have 2 slots each: app 1 takes node0's first slot, app 2
  // (node1 only) both of node1's, app 3 what is left on node0.
  const std::string show = "echo $ROLE_NAME $RANK $NODE_RANK $LOCAL_RANK $LOCAL_WORLD_SIZE";
  const std::vector<std::string> args = {
      "-H", kLocalhost, "-n", "1",      "--role", "a",      "sh", "-c", show,
      ":",  "-n",       "2",  "--host", "node1",  "--role", "b",  "sh", "-c",
      show, ":",        "-n", "1",      "--role", "c",      "sh", "-c", show};
  auto r = run(dlaunch_cmd(args));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] a 0 0 0 2", "[1] b 1 1 0 2",
                                                         "[2] b 2 1 1 2", "[3] c 3 0 1 2"}));
  // --dry-run shows the apps and node 0's ranks apart.
  auto dry = args;
  dry.insert(dry.begin(), "--dry-run");
  r = run(dlaunch_cmd(dry));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("app 2: ranks 1-2, ROLE_NAME=b, hosts node1: sh -c"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("node 0: node0 (localhost, local), ranks 0-0,3-3"), std::string::npos)
      << r.out;

  // Per-app --nproc-per-node spreads an app (without it, app 2 would take
  // both of node0's slots); too few free slots is an error.
  r = run(dlaunch_cmd(
      {"-H", kLocalhost,         "-n", "1",  "--host", "node1", "sh", "-c", show, ":",  "-n",
       "2",  "--nproc-per-node", "1",  "sh", "-c",     show,    ":",  "-n", "1",  "sh", "-c",
       show}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] sh 0 1 0 2", "[1] sh 1 0 0 2",
                                                         "[2] sh 2 1 1 2", "[3] sh 3 0 1 2"}));
  r = run(dlaunch_cmd(
      {"-H", kLocalhost, "-n", "1", "true", ":", "-n", "2", "--host", "node0", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("app 2: -n: 2 ranks requested but the slots left for this app on"),
            std::string::npos)
      << r.err;
  // --host alone: one program on the chosen nodes, torchrun's ROLE_NAME.
  r = run(dlaunch_cmd({"-H", kLocalhost, "--host", "node1", "-n", "2", "sh", "-c", show}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out),
            (std::multiset<std::string>{"[0] default 0 0 0 2", "[1] default 1 0 1 2"}));
  r = run(dlaunch_cmd({"-H", kLocalhost, "-n", "1", "--host", "node7", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no node named 'node7'"), std::string::npos) << r.err;
}

// --check looks for every app's program on the nodes that run its ranks:
// one missing only for the second app is named, and the check fails.
TEST(Mpmd, CheckLooksForEveryAppsProgram) {
  auto ok = run(dlaunch_cmd(
      {"--check", "-H", kLocalhost, "-n", "2", "true", ":", "-n", "2", "sh", "-c", "exit 0"}));
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  auto bad = run(dlaunch_cmd({"--check", "-H", kLocalhost, "-n", "2", "true", ":", "-n", "2",
                              "no-such-program-dlaunch-test"}));
  EXPECT_NE(bad.exit_code, 0) << bad.out << bad.err;
  const std::string all = bad.out + bad.err;
  EXPECT_NE(all.find("program 'no-such-program-dlaunch-test' not found on PATH"), std::string::npos)
      << all;
  // The first app's program is found on both nodes; only node1 runs the second.
  EXPECT_EQ(all.find("program 'true' not found"), std::string::npos) << all;
}

// Issue 30: the script an interpreter is given is looked for on every node,
// in the working directory, as the worker would open it.
TEST(Mpmd, CheckLooksForTheScriptAnInterpreterIsGiven) {
  auto bad = run(dlaunch_cmd({"--check", "-H", kLocalhost, "python3", "missing-dlaunch-test.py"}));
  EXPECT_NE(bad.exit_code, 0) << bad.out << bad.err;
  const std::string all = bad.out + bad.err;
  const std::string said = "script 'missing-dlaunch-test.py' not found in";
  std::size_t times = 0;
  for (auto at = all.find(said); at != std::string::npos; at = all.find(said, at + 1)) ++times;
  EXPECT_EQ(times, 2u) << all;  // both nodes of the hostfile
  EXPECT_EQ(all.find("2 of 2 passed"), std::string::npos) << all;
  // A script that is there, and code given with -c, pass.
  auto ok = run(dlaunch_cmd(
      {"--check", "-H", kLocalhost, "sh", std::string(SOURCE_DIR) + "/tests/testbed/lib.sh"}));
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  auto code = run(dlaunch_cmd({"--check", "-H", kLocalhost, "python3", "-c", "pass"}));
  EXPECT_EQ(code.exit_code, 0) << code.out << code.err;
}

TEST(Mpmd, TwoMpiProgramsFormOneWorld) {
  auto r = run(dlaunch_cmd({"--mpi", "-n", "1", MPI_HELLO_BIN, ":", "-n", "2", MPI_ROLE_BIN}), 120,
               mpi_worker_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out),
            (std::multiset<std::string>{
                "[0] mpi rank 0/3, RANK=0 WORLD_SIZE=3, allreduce(rank)=3",
                "[1] mpi_role: mpi rank 1/3, ROLE_NAME=mpi_role ROLE_RANK=0 ROLE_WORLD_SIZE=2, "
                "allreduce(rank)=3",
                "[2] mpi_role: mpi rank 2/3, ROLE_NAME=mpi_role ROLE_RANK=1 ROLE_WORLD_SIZE=2, "
                "allreduce(rank)=3"}));
}

TEST(Mpmd, MpiWorldAcrossLogicalNodesWithANodesRanksApart) {
  // Ranks 0 and 2 on node0, rank 1 on node1: PMIx gets the process map as is.
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--mpi", "-n", "1", MPI_HELLO_BIN, ":", "-n", "1",
                            "--host", "node1", MPI_ROLE_BIN, ":", "-n", "1", MPI_HELLO_BIN}),
               120, mpi_worker_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out),
            (std::multiset<std::string>{
                "[0] mpi rank 0/3, RANK=0 WORLD_SIZE=3, allreduce(rank)=3",
                "[1] mpi_role: mpi rank 1/3, ROLE_NAME=mpi_role ROLE_RANK=0 ROLE_WORLD_SIZE=1, "
                "allreduce(rank)=3",
                "[2] mpi rank 2/3, RANK=2 WORLD_SIZE=3, allreduce(rank)=3"}));
}

TEST(Stdin, GoesToRankZeroByDefault) {
  auto r = shell("printf 'a\\nb\\n' | \"$DLAUNCH\" -n 2 sh -c 'cat; echo done $RANK'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  // Rank 0's lines in order; rank 1 read EOF (/dev/null).
  std::vector<std::string> rank0;
  for (const auto& l : lines) {
    if (l.rfind("[0] ", 0) == 0) rank0.push_back(l);
  }
  EXPECT_EQ(rank0, (std::vector<std::string>{"[0] a", "[0] b", "[0] done 0"})) << r.out;
  EXPECT_EQ(line_set(r.out),
            (std::multiset<std::string>{"[0] a", "[0] b", "[0] done 0", "[1] done 1"}));
}

TEST(Stdin, AllNoneAndOneRankOnAnotherNode) {
  auto r = shell("printf 'a\\nb\\n' | \"$DLAUNCH\" -n 2 --stdin all sh -c 'cat; echo done $RANK'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] a", "[0] b", "[0] done 0", "[1] a",
                                                         "[1] b", "[1] done 1"}));
  r = shell("printf 'a\\nb\\n' | \"$DLAUNCH\" -n 2 --stdin none sh -c 'cat; echo done $RANK'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] done 0", "[1] done 1"}));
  // Rank 3 is on node1 (its own agent).
  r = shell("printf 'x\\n' | \"$DLAUNCH\" -H " + dlaunch::shell_quote(kLocalhost) +
            " --stdin 3 sh -c 'cat; echo done $RANK $NODE_RANK'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] done 0 0", "[1] done 1 0",
                                                         "[2] done 2 1", "[3] x", "[3] done 3 1"}));
  r = run(dlaunch_cmd({"-n", "2", "--stdin", "2", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--stdin: rank 2 is not in the job (it has 2 rank(s))"), std::string::npos)
      << r.err;
  r = run(dlaunch_cmd({"-n", "2", "--stdin", "first", "true"}));
  EXPECT_EQ(r.exit_code, 2);
}

TEST(Stdin, EofComesAtOnceFromDevNullAClosedStdinAndAFile) {
  auto r = shell("\"$DLAUNCH\" -n 1 sh -c 'wc -c' < /dev/null", 20);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] 0\n");
  r = shell("\"$DLAUNCH\" -n 1 sh -c 'wc -c' <&-", 20);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] 0\n");
  const auto file = temp_file(std::string(300000, 'z'), ".in");
  r = shell("\"$DLAUNCH\" -n 1 sh -c 'wc -c' < " + file, 20);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] 300000\n");
  fs::remove(file);
}

TEST(Stdin, TwentyMegabytesToEveryRankArriveWhole) {
  auto r = shell("head -c 20000000 /dev/urandom | \"$DLAUNCH\" -n 2 --stdin all sh -c 'wc -c'", 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] 20000000", "[1] 20000000"}));
}

TEST(Stdin, ARankThatDoesNotReadStopsDlaunchReading) {
  // The producer notes how many 64 KiB chunks it has written; the rank looks
  // after 2 s of not reading. Without flow control all 200 would be gone
  // (13 MB into dlaunch's and the agent's memory); with it, about the window
  // (1 MiB) and the pipes' buffers.
  const auto dir = temp_dir("stdinbp");
  const std::string progress = dir + "/progress";
  auto r = shell("i=0; while [ $i -lt 200 ]; do head -c 65536 /dev/zero; i=$((i+1)); echo $i > " +
                     progress + "; done | \"$DLAUNCH\" -n 1 sh -c 'sleep 2; cat " + progress +
                     "; wc -c'",
                 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  const int written = std::stoi(lines[0].substr(4));
  EXPECT_LT(written, 40) << r.out;
  EXPECT_EQ(lines[1], "[0] 13107200");
  fs::remove_all(dir);
}

TEST(Stdin, ARankThatStopsReadingOrExitsDoesNotHoldTheJob) {
  // Rank 0 reads 10 bytes and exits; what follows is dropped.
  auto r = shell(
      "yes | head -c 5000000 | \"$DLAUNCH\" -n 2 sh -c 'head -c 10 >/dev/null; echo ok $RANK'", 30);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] ok 0", "[1] ok 1"}));
  // Endless input: the job still ends when its ranks do.
  r = shell("yes | \"$DLAUNCH\" -n 1 sh -c 'head -c 100000 | wc -c'", 30);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] 100000\n");
}
