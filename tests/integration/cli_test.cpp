// dlaunch's command line as a user meets it: bad input is refused before
// anything starts, with the place and a hint.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

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

// Issue 29: a .py runs under Python (PYTHON_EXEC, else python3 on PATH),
// and when that Python lacks a module the program needs, the report says
// which interpreter ran and how to choose another.
TEST(Cli, ADotPyRunsUnderPythonAndAMissingModuleNamesTheInterpreter) {
  const std::string ok = temp_file("import os\nprint('rank', os.environ['RANK'])\n", ".py");
  auto r = run(dlaunch_cmd({"-n", "2", ok}), 60, {"PYTHON_EXEC=/usr/bin/python3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[1] rank 1"), std::string::npos) << r.out;
  const std::string bad = temp_file("import no_such_module_for_dlaunch_tests\n", ".py");
  r = run(dlaunch_cmd({"-n", "2", bad}), 60, {"PYTHON_EXEC=/usr/bin/python3"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("No module named 'no_such_module_for_dlaunch_tests'"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("note: dlaunch ran the program under `/usr/bin/python3` (here: "
                       "/usr/bin/python3)"),
            std::string::npos)
      << r.err;
  // --no-python: the file is the program.
  r = run(dlaunch_cmd({"-n", "1", "--no-python", ok}), 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.find("dlaunch ran the program under"), std::string::npos) << r.err;
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

TEST(Cli, HelpIsGroupedTheWayMpirunUsersLookForIt) {
  auto help = run(dlaunch_cmd({"--help"}));
  ASSERT_EQ(help.exit_code, 0);
  std::size_t last = 0;
  for (const char* section :
       {"Hosts and placement", "Environment", "Output", "Fault handling", "SSH", "Miscellaneous"}) {
    const auto at = help.out.find(std::string("\n") + section + ":");
    ASSERT_NE(at, std::string::npos) << section << "\n" << help.out;
    EXPECT_GT(at, last) << section << " out of order\n" << help.out;
    last = at;
  }
  // Each option in its section.
  auto section_of = [&](const std::string& opt) {
    const auto at = help.out.find(opt);
    std::string name;
    for (const char* s : {"Hosts and placement", "Environment", "Output", "Fault handling", "SSH",
                          "Miscellaneous"}) {
      const auto p = help.out.find(std::string("\n") + s + ":");
      if (p != std::string::npos && p < at) name = s;
    }
    return name;
  };
  EXPECT_EQ(section_of("--include"), "Hosts and placement");
  EXPECT_EQ(section_of("--env-file"), "Environment");
  EXPECT_EQ(section_of("--ranks"), "Output");
  EXPECT_EQ(section_of("--timestamps"), "Output");
  EXPECT_EQ(section_of("--kill-grace"), "Fault handling");
  EXPECT_EQ(section_of("--max-restarts"), "Fault handling");
  EXPECT_EQ(section_of("--host-key-check"), "SSH");
  EXPECT_EQ(section_of("--dry-run"), "Miscellaneous");
}

TEST(Cli, ExportOfAVariableThatIsNotSetIsAnError) {
  auto r = run(dlaunch_cmd({"-n", "1", "-x", "DLAUNCH_TEST_SURELY_UNSET", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(
      r.err.find(
          "dlaunch: error: -x: DLAUNCH_TEST_SURELY_UNSET is not set in dlaunch's "
          "environment (hint: set it, or give the value: -x DLAUNCH_TEST_SURELY_UNSET=VALUE)"),
      std::string::npos)
      << r.err;
}

TEST(Cli, ExportTakesOneValueSoTheProgramIsNotSwallowed) {
  auto r = run(dlaunch_cmd({"-n", "1", "-x", "A=1", "-x", "B=2", "sh", "-c", "echo $A$B"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] 12\n");
  auto joined = run(dlaunch_cmd({"-n", "1", "-xC=3", "sh", "-c", "echo $C"}));
  ASSERT_EQ(joined.exit_code, 0) << joined.err;
  EXPECT_EQ(joined.out, "[0] 3\n");
}

TEST(Cli, BadEnvFileLineIsNamedByFileAndLine) {
  const auto path = temp_file("A=1\n# fine\nnot a pair\n", ".env");
  auto r = run(dlaunch_cmd({"-n", "1", "--env-file", path, "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(path + ":3:1: expected NAME=VALUE, got 'not a pair'"), std::string::npos)
      << r.err;
  auto missing = run(dlaunch_cmd({"-n", "1", "--env-file", "/nonexistent/x.env", "true"}));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/nonexistent/x.env: --env-file: file not found"), std::string::npos)
      << missing.err;
}

TEST(Cli, RanksOutsideTheJobAreAnError) {
  auto r = run(dlaunch_cmd(
      {"-H", std::string(SOURCE_DIR) + "/hostfiles/localhost.yaml", "--ranks", "1,4", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--ranks: rank 4 is not in this job (ranks 0-3)"), std::string::npos)
      << r.err;
  auto bad = run(dlaunch_cmd({"-n", "1", "--color", "sometimes", "true"}));
  EXPECT_EQ(bad.exit_code, 2);
}

TEST(Cli, DryRunShowsTheEnvironmentFromXAndEnvFilesQuoted) {
  const auto path = temp_file("FROM_FILE=a b\n", ".env");
  auto r = run(dlaunch_cmd({"-H", std::string(SOURCE_DIR) + "/hostfiles/localhost.yaml",
                            "--dry-run", "--env-file", path, "-x", "Q=it's \"quoted\"", "true"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  inherits: dlaunch's whole environment\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  node env: FROM_FILE='a b' Q='it'\\''s \"quoted\"' OMP_NUM_THREADS=1"),
            std::string::npos)
      << r.out;
}

TEST(Cli, TheTunablesPageIsTheTable) {
  auto r = run(dlaunch_cmd({"--help-tunables"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream page(std::string(SOURCE_DIR) + "/docs/tunables.md");
  std::stringstream text;
  text << page.rdbuf();
  EXPECT_EQ(text.str(), r.out) << "regenerate: build/release/bin/dlaunch --help-tunables > "
                                  "docs/tunables.md";
}

// Issue 15 item 5: a few zeros too many must not eat the head's memory.
TEST(Cli, HugeCountsAreRefusedAtOnceWithExit2) {
  const std::string yaml =
      temp_file("hosts:\n  - host: localhost\n    slots: 1000000000\n", ".yaml");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"-n", "1000000000", "--dry-run", "true"},
           {"-H", "localhost:1000000000", "--dry-run", "true"},
           {"-H", yaml, "--dry-run", "true"},
           {"-n", "5000", "true"},
           {"-H", "localhost:4,other:4", "--nproc-per-node", "100000", "--dry-run", "true"}}) {
    auto r = run(dlaunch_cmd(args), 30);
    EXPECT_EQ(r.exit_code, 2) << args[1] << ": " << r.err;
    EXPECT_LT(r.seconds, 5) << args[1];
    EXPECT_NE(r.err.find("over the limit of"), std::string::npos) << r.err;
  }
}

// Issue 15 item 6: devices and endless pipes are not read without bound.
TEST(Cli, DevicesAsInputFilesAreRefused) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"-H", "/dev/zero", "true"},
                                             {"-H", "/dev/urandom", "true"},
                                             {"-n", "1", "--env-file", "/dev/zero", "true"}}) {
    auto r = run(dlaunch_cmd(args), 30);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_LT(r.seconds, 5);
    EXPECT_NE(r.err.find("is not a regular file or a pipe"), std::string::npos) << r.err;
  }
}

// Issue 15 item 7: what cannot fit through execve or one protocol frame is
// refused before anything starts, naming the variable or the limit.
TEST(Cli, EnvironmentsThatCannotFitAreRefusedUpFront) {
  const std::string big = temp_file("A=1\nBIG=" + std::string(200000, 'x') + "\n", ".env");
  auto r = run(dlaunch_cmd({"-n", "1", "--env-file", big, "true"}), 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(big + ":2:1: BIG is 200004 bytes, over Linux's limit of 131072"),
            std::string::npos)
      << r.err;

  std::string many;
  for (int i = 0; i < 20; ++i)
    many += "V" + std::to_string(i) + "=" + std::string(120000, 'x') + "\n";
  r = run(dlaunch_cmd({"-n", "1", "--env-file", temp_file(many, ".env"), "true"}), 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("over this system's limit of"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(ARG_MAX)"), std::string::npos) << r.err;

  // 4000 ranks of 5 KB environment each: a 20 MB set-up for one node.
  const std::string fat =
      temp_file("hosts:\n  - host: localhost\n    slots: 4000\n    env: {PAD: \"" +
                    std::string(5000, 'p') + "\"}\n",
                ".yaml");
  const auto job = unique_job_id("frame");
  r = run(dlaunch_cmd({"-H", fat, "--job-id", job, "true"}), 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("over the control protocol's frame limit"), std::string::npos) << r.err;
  EXPECT_TRUE(job_processes(job).empty());
}

TEST(Cli, TheLogicalNodesOfThisMachineShareItsRankLimit) {
  std::string yaml = "hosts:\n";
  for (int i = 0; i < 50; ++i)
    yaml += "  - {host: localhost, name: n" + std::to_string(i) + ", slots: 100}\n";
  auto r = run(dlaunch_cmd({"-H", temp_file(yaml, ".yaml"), "true"}), 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("5000 ranks on this machine (its logical nodes together) is over the limit"),
            std::string::npos)
      << r.err;
}

// Issue 15 item 9: a missing identity file is bad input, found before connecting.
TEST(Cli, AMissingIdentityFileIsRefusedUpFront) {
  const auto yaml = temp_file("hosts:\n  - host: n1\n    identity: /nonexistent/key\n", ".yaml");
  auto r = run(dlaunch_cmd({"-H", yaml, "true"}), 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(":2:5: identity: identity file '/nonexistent/key' of host 'n1' cannot be "
                       "read"),
            std::string::npos)
      << r.err;
}

// `identity: ~/KEY` is the passwd entry's home, as ssh reads ~ in IdentityFile,
// not $HOME.
TEST(Cli, AnIdentityUnderTildeIsInThePasswdHome) {
  const auto yaml =
      temp_file("hosts:\n  - host: n1\n    identity: ~/.dlaunch-no-such-key\n", ".yaml");
  auto r = run(dlaunch_cmd({"-H", yaml, "true"}), 30, {"HOME=/nonexistent/home-from-env"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const passwd* pw = ::getpwuid(::getuid());
  ASSERT_NE(pw, nullptr);
  EXPECT_NE(r.err.find("identity file '" + std::string(pw->pw_dir) +
                       "/.dlaunch-no-such-key' of host 'n1'"),
            std::string::npos)
      << r.err;
}

// Issue 15 item 12: one error format for every option, and a misspelt option
// is an option, not a program.
TEST(Cli, AMisspeltOptionBeforeTheProgramIsNamedWithASuggestion) {
  auto r = run(dlaunch_cmd({"-n", "2", "--tag-ouput", "true"}), 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(
      r.err.rfind("dlaunch: error: unknown option --tag-ouput (did you mean --tag-output?)", 0), 0u)
      << r.err;
  // `--` makes a program of anything.
  r = run(dlaunch_cmd({"-n", "1", "--", "-no-such-program"}), 30);
  EXPECT_NE(r.err.find("program '-no-such-program' not found"), std::string::npos) << r.err;
}

TEST(Cli, BadOptionValuesAreSaidTheSameWayAsEveryOtherError) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-n", "0", "true"}, "--np: expected a positive integer, got '0'"},
      {{"-n", "abc", "true"}, "--np: expected a positive integer, got 'abc'"},
      {{"--kill-grace", "-1", "-n", "1", "true"},
       "--kill-grace: expected a number of seconds >= 0, got '-1'"},
      {{"--master-port", "70000", "-n", "1", "true"},
       "--master-port: expected a port number (1..65535), got '70000'"},
      {{"-n"}, "--np needs a value"}};
  for (const auto& [args, message] : cases) {
    auto r = run(dlaunch_cmd(args), 30);
    EXPECT_EQ(r.exit_code, 2) << message;
    EXPECT_EQ(r.err.rfind("dlaunch: error: " + message + " (hint:", 0), 0u) << r.err;
  }
}

// Issue 15 item 10.
TEST(Cli, TheSamePortForMasterAndStoreIsRefused) {
  auto r =
      run(dlaunch_cmd({"--master-port", "29555", "--store-port", "29555", "-n", "2", "true"}), 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--store-port: 29555 is the port given to --master-port too"),
            std::string::npos)
      << r.err;
}

// Issue 15 item 11: a job id is a folder name under --output-dir.
TEST(Cli, JobIdsThatArePathsOrTakenFoldersAreRefused) {
  for (const char* id : {".", "..", "a/b"}) {
    auto r = run(dlaunch_cmd({"--job-id", id, "-n", "1", "true"}), 30);
    EXPECT_EQ(r.exit_code, 2) << id;
    EXPECT_NE(r.err.find("is not a valid job id"), std::string::npos) << r.err;
  }
  const std::string dir = temp_file("", ".d");
  std::filesystem::remove(dir);
  const auto job = unique_job_id("samedir");
  auto first =
      run(dlaunch_cmd({"--job-id", job, "--output-dir", dir, "-n", "1", "echo", "one"}), 30);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto second =
      run(dlaunch_cmd({"--job-id", job, "--output-dir", dir, "-n", "1", "echo", "two"}), 30);
  EXPECT_EQ(second.exit_code, 2) << second.err;
  EXPECT_NE(second.err.find("exists already (a job with the same id?)"), std::string::npos)
      << second.err;
  std::ifstream out(dir + "/" + job + "/rank.0.out");
  std::string line;
  std::getline(out, line);
  EXPECT_EQ(line, "one") << "the first job's output must be kept";
  std::filesystem::remove_all(dir);
}

// Issue 15 item 13: control bytes from a hostfile, an env file or a program
// name are escaped in dlaunch's messages.
TEST(Cli, ControlBytesFromInputAreEscapedInMessages) {
  const auto yaml = temp_file("hosts:\n  - host: \"a\\e[2Jb\"\n", ".yaml");
  auto r = run(dlaunch_cmd({"-H", yaml, "true"}), 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unexpected byte 0x1b in host name"), std::string::npos) << r.err;
  r = run(dlaunch_cmd({"-n", "1", "prog\x1b[31mred"}), 30);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("program 'prog\\e[31mred' not found"), std::string::npos) << r.err;
  r = run(dlaunch_cmd({"-n", "1", "--env-file", temp_file("\x1b[2J=3\n", ".env"), "true"}), 30);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
}

namespace {
std::vector<std::string> concat_args(std::vector<std::string> a,
                                     const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
}  // namespace

// Issue 15 item 4: --dry-run output lands in logs; secrets stay out of it.
TEST(Cli, DryRunHidesValuesOfVariablesNamedLikeSecrets) {
  auto r =
      run(dlaunch_cmd({"-n", "1", "-x", "HF_TOKEN=hf_abc", "-x", "DB_PASSWORD=pw", "-x",
                       "AWS_SECRET_ACCESS_KEY=s3", "-x", "PLAIN=visible", "--dry-run", "true"}),
          30);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* value : {"hf_abc", "=pw", "s3"})
    EXPECT_EQ(r.out.find(value), std::string::npos) << value << "\n" << r.out;
  EXPECT_NE(r.out.find("HF_TOKEN=<hidden: named like a secret, 6 chars>"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("PLAIN=visible"), std::string::npos) << r.out;
  r = run(dlaunch_cmd({"-n", "1", "-x", "HF_TOKEN=hf_abc", "--show-secrets", "--dry-run", "true"}),
          30);
  EXPECT_NE(r.out.find("HF_TOKEN=hf_abc"), std::string::npos) << r.out;
}

// Issue 27 item 6: names the old rule missed, values whose shape gives them
// away under any name, and the program's arguments; one line says how many
// were hidden and how to see them, and a name merely close to a secret's
// stays visible.
TEST(Cli, DryRunHidesValuesShapedLikeSecretsAndSaysHowToSeeThem) {
  const std::vector<std::string> env = {
      "-x", "MYSQL_PWD=pw1",
      "-x", "SENTRY_DSN=https://k@o1.ingest.sentry.io/2",
      "-x", "STORE=postgres://app:hunter2@db.internal/train",
      "-x", "NOTIFY=https://hooks.slack.com/services/T0/B0/slackpart",
      "-x", "TOKENIZERS_PARALLELISM=false",
      "-x", "MAX_NEW_TOKENS=512"};
  const std::vector<std::string> program = {"true", "--api-key", "k3y"};
  auto r = run(
      dlaunch_cmd(concat_args(concat_args({"-n", "1"}, env), concat_args({"--dry-run"}, program))),
      30);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* secret : {"pw1", "o1.ingest", "hunter2", "slackpart", "k3y"})
    EXPECT_EQ(r.out.find(secret), std::string::npos) << secret << "\n" << r.out;
  EXPECT_NE(r.out.find("MYSQL_PWD=<hidden: named like a secret, 3 chars>"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("STORE=<hidden: URL with a password, 40 chars>"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("NOTIFY=<hidden: Slack webhook URL, 48 chars>"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("true --api-key <hidden: secret after --api-key, 3 chars>"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("TOKENIZERS_PARALLELISM=false"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MAX_NEW_TOKENS=512"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("5 value(s) hidden as possible secrets (by name or shape); --show-secrets "
                       "shows them"),
            std::string::npos)
      << r.out;
  r = run(dlaunch_cmd(concat_args(concat_args({"-n", "1"}, env),
                                  concat_args({"--show-secrets", "--dry-run"}, program))),
          30);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* secret : {"pw1", "o1.ingest", "hunter2", "slackpart", "k3y"})
    EXPECT_NE(r.out.find(secret), std::string::npos) << secret << "\n" << r.out;
  EXPECT_EQ(r.out.find("hidden"), std::string::npos) << r.out;
}

namespace {
// A "host" that accepts TCP connections (the kernel completes them) and never
// says a word of SSH. Returns its port; the socket lives as long as `fd`.
int silent_listener(int& fd) {
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return -1;
  }
  return ntohs(a.sin_port);
}
}  // namespace

// Issue 15 item 15: SIGINT, the start deadline and --timeout do not wait out
// a connection attempt to a host that never answers (10 s here).
TEST(Cli, AHostThatNeverAnswersDoesNotDelayInterruptsOrDeadlines) {
  int fd = -1;
  const int port = silent_listener(fd);
  ASSERT_GT(port, 0);
  const std::string hosts = temp_file(
      "hosts:\n  - {host: 127.0.0.1, port: " + std::to_string(port) + ", transport: ssh}\n",
      ".yaml");
  const std::vector<std::string> base = {"-H", hosts, "--connect-timeout", "10"};
  {
    Process p(dlaunch_cmd(concat_args(base, {"true"})));
    ::usleep(1500 * 1000);
    p.signal(SIGINT);
    auto r = p.finish(20);
    EXPECT_EQ(r.exit_code, 130) << r.err;
    EXPECT_LT(r.seconds, 3.0) << r.err;
  }
  {
    auto r = run(dlaunch_cmd(concat_args(base, {"--start-timeout", "2", "true"})), 30);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_LT(r.seconds, 3.5) << r.err;
    EXPECT_NE(r.err.find("gave up waiting 2.0 s for every agent to become ready"),
              std::string::npos)
        << r.err;
  }
  {
    auto r = run(dlaunch_cmd(concat_args(base, {"--timeout", "2", "true"})), 30);
    EXPECT_EQ(r.exit_code, 124) << r.err;
    EXPECT_LT(r.seconds, 3.5) << r.err;
    EXPECT_NE(r.err.find("--timeout of 2.0 s expired while the job was starting"),
              std::string::npos)
        << r.err;
  }
  ::close(fd);
}

// Issue 15 item 1 (the audit): an --output-dir others may write to, and that
// is not sticky, could have the job's folder swapped for theirs: refused.
TEST(Cli, AnOutputDirOthersMayReplaceThingsInIsRefused) {
  std::string dir = (std::filesystem::temp_directory_path() / "dlaunch-out-shared.XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  ::chmod(dir.c_str(), 0777);
  auto r = run(dlaunch_cmd({"-n", "1", "--output-dir", dir, "true"}), 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("others may write to it (mode 0777) and it is not sticky"),
            std::string::npos)
      << r.err;
  ::chmod(dir.c_str(), 01777);  // sticky, like /tmp: fine
  r = run(dlaunch_cmd({"-n", "1", "--output-dir", dir, "true"}), 30);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::filesystem::remove_all(dir);
}
