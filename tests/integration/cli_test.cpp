// dlaunch's command line as a user meets it: bad input is refused before
// anything starts, with the place and a hint.
#include <gtest/gtest.h>
#include <unistd.h>

#include "support.h"

using namespace dltest;

TEST(Cli, HelpAndVersionExitZero) {
  auto help = run(dlaunch_cmd({"--help"}));
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--hostfile"), std::string::npos);
  EXPECT_NE(help.out.find("--kill-grace"), std::string::npos);
  auto version = run(dlaunch_cmd({"--version"}));
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.out.find("dlaunch "), std::string::npos);
}

TEST(Cli, UnknownOptionIsAUsageError) {
  auto r = run(dlaunch_cmd({"--no-such-option", "-n", "1", "true"}));
  EXPECT_EQ(r.exit_code, 2);
}

TEST(Cli, NoHostsIsAnErrorNeverASilentLocalRun) {
  auto r = run(dlaunch_cmd({"true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no hosts given"), std::string::npos) << r.err;
}

TEST(Cli, MissingHostfileIsAnError) {
  auto r = run(dlaunch_cmd({"-H", "/nonexistent/hosts.yaml", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent/hosts.yaml"), std::string::npos) << r.err;
  auto r2 = run(dlaunch_cmd({"-H", "missing-hosts.yaml", "true"}));
  EXPECT_EQ(r2.exit_code, 2);
  EXPECT_NE(r2.err.find("missing-hosts.yaml"), std::string::npos) << r2.err;
}

TEST(Cli, TypoInAHostfileKeyNamesLineColumnAndTheKeyItMeant) {
  auto path = temp_file("hosts:\n  - host: localhost\n    slot: 2\n", ".yaml");
  auto r = run(dlaunch_cmd({"-H", path, "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(path + ":3:5:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean 'slots'"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(Cli, UnknownProgramIsRefusedBeforeAnythingStarts) {
  auto r = run(dlaunch_cmd({"-n", "2", "no-such-program-xyz"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("program 'no-such-program-xyz' not found"), std::string::npos) << r.err;
}

TEST(Cli, TooManyRanksForTheSlotsIsAnError) {
  auto r = run(dlaunch_cmd({"-H", "localhost:2", "-n", "3", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("3 ranks requested"), std::string::npos) << r.err;
}

TEST(Cli, IncludeNamingAnUnknownHostIsAnError) {
  auto r = run(dlaunch_cmd(
      {"-H", std::string(SOURCE_DIR) + "/hostfiles/localhost.yaml", "--include", "node7", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--include"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("node7"), std::string::npos) << r.err;
}

TEST(Cli, InlineHostsRunLocally) {
  auto r = run(dlaunch_cmd({"-H", "localhost:2,127.0.0.2:1", "sh", "-c", "echo $NODE_RANK"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 3u);
}

TEST(Cli, DryRunPrintsEveryRanksEnvironmentAndRunsNothing) {
  auto r = run(
      dlaunch_cmd({"-H", std::string(SOURCE_DIR) + "/hostfiles/localhost.yaml", "--dry-run",
                   "--job-id", "dry", "sh", "-c", "touch /tmp/dlaunch-dry-run-must-not-exist"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("node 1: node1 (localhost, local), ranks 2-3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 3: RANK=3 LOCAL_RANK=1 WORLD_SIZE=4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sh -c 'touch /tmp/dlaunch-dry-run-must-not-exist'"), std::string::npos)
      << r.out;
  EXPECT_NE(::access("/tmp/dlaunch-dry-run-must-not-exist", F_OK), 0);
}
