// -x, --env-file and the default forwarding: what ends up in a node's env.
#include "plan/user_env.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "env_list_support.h"
#include "plan/plan.h"

using namespace dlaunch;

namespace {

std::string env_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no error>";
}

using dltest::get;

}  // namespace

TEST(EnvFile, ValuesAreLiteralExceptOnePairOfSurroundingQuotes) {
  auto env = parse_env_file_text(
      "# comment\n"
      "\n"
      "   # indented comment\n"
      "A=1\n"
      "export B=two words\n"
      "C=\"quoted value\"\n"
      "D='single \"inner\"'\n"
      "E=a=b=c\n"
      "F=\n"
      "G=\"unbalanced\n"
      "H=$HOME not expanded # not a comment\r\n",
      "vars.env");
  EXPECT_EQ(env, (EnvList{{"A", "1"},
                          {"B", "two words"},
                          {"C", "quoted value"},
                          {"D", "single \"inner\""},
                          {"E", "a=b=c"},
                          {"F", ""},
                          {"G", "\"unbalanced"},
                          {"H", "$HOME not expanded # not a comment"}}));
}

TEST(EnvFile, ErrorsNameTheFileAndLine) {
  EXPECT_EQ(env_error_of([] { parse_env_file_text("A=1\n\n  just words\n", "my.env"); }),
            "my.env:3:3: expected NAME=VALUE, got 'just words' (hint: one variable per line; "
            "'#' starts a comment)");
  EXPECT_EQ(env_error_of([] { parse_env_file_text("A=1\n1BAD=x\n", "my.env"); }),
            "my.env:2:1: '1BAD' is not a valid variable name (hint: names are letters, digits and "
            "'_', not starting with a digit)");
  EXPECT_EQ(env_error_of([] { parse_env_file_text("B X=1\n", "my.env"); }),
            "my.env:1:1: 'B X' is not a valid variable name (hint: names are letters, digits and "
            "'_', not starting with a digit)");
}

TEST(EnvFile, MissingFileIsAnInputError) {
  const auto msg = env_error_of([] { parse_env_file("/nonexistent/dir/vars.env"); });
  EXPECT_EQ(msg, "/nonexistent/dir/vars.env: --env-file: file not found");
}

TEST(EnvFile, ReadsAFile) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("dlaunch-envfile-" + std::to_string(::getpid()) + ".env");
  std::ofstream(path) << "X=1\nY=with space\n";
  EXPECT_EQ(parse_env_file(path.string()), (EnvList{{"X", "1"}, {"Y", "with space"}}));
  std::filesystem::remove(path);
}

TEST(Exports, NameTakesTheHeadsValueAndNameValueSetsIt) {
  const std::vector<std::string> head = {"HOME=/root", "NCCL_DEBUG=INFO", "EMPTY="};
  EXPECT_EQ(resolve_exports({"NCCL_DEBUG", "A=b c", "EMPTY", "B=x=y"}, head),
            (EnvList{{"NCCL_DEBUG", "INFO"}, {"A", "b c"}, {"EMPTY", ""}, {"B", "x=y"}}));
}

TEST(Exports, UnsetNameAndBadNameAreErrors) {
  EXPECT_EQ(env_error_of([] { resolve_exports({"NOT_SET_ANYWHERE"}, {"HOME=/root"}); }),
            "-x: NOT_SET_ANYWHERE is not set in dlaunch's environment (hint: set it, or give the "
            "value: -x NOT_SET_ANYWHERE=VALUE)");
  EXPECT_NE(
      env_error_of([] { resolve_exports({"=x"}, {}); }).find("'' is not a valid variable name"),
      std::string::npos);
}

TEST(Exports, EnvFilesComeFirstAndXOverridesThem) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("dlaunch-envfile2-" + std::to_string(::getpid()) + ".env");
  std::ofstream(path) << "A=file\nB=file\n";
  auto env = user_environment({path.string()}, {"A=x"}, {});
  EXPECT_EQ(env, (EnvList{{"A", "file"}, {"B", "file"}, {"A", "x"}}));
  std::filesystem::remove(path);
}

TEST(Plan, UserEnvReachesEveryNodeAfterTheHostfileAndBeforeDevices) {
  Hostfile hf;
  HostEntry a;
  a.name = a.host = "a";
  a.slots = 2;
  a.transport = Transport::kLocal;
  a.env = {{"X", "host"}, {"Z", "host"}};
  a.gpus = {0, 1};
  HostEntry b = a;
  b.name = b.host = "b";
  b.transport = Transport::kSsh;
  hf.hosts = {a, b};
  auto plan = make_plan(hf, {.job_id = "j",
                             .command = {"x"},
                             .user_env = {{"X", "cli"},
                                          {"CUDA_VISIBLE_DEVICES", "7"},
                                          {"OMP_NUM_THREADS", "4"},
                                          {"Q", "a 'b' \"c\""}}});
  for (const auto& n : plan.nodes) {
    EXPECT_EQ(get(n.env, "X"), "cli");
    EXPECT_EQ(get(n.env, "Z"), "host");
    EXPECT_EQ(get(n.env, "Q"), "a 'b' \"c\"");
    EXPECT_EQ(get(n.env, "CUDA_VISIBLE_DEVICES"), "0,1");  // the host's gpus win
    EXPECT_EQ(get(n.env, "OMP_NUM_THREADS"), "4");         // the user chose: no default
  }
}

TEST(Plan, DefaultForwardingCoversTheDocumentedNames) {
  // Issue 29: every variable the user exported, as local ranks inherit them.
  for (const char* name : {"NCCL_DEBUG",
                           "NCCL_SOCKET_IFNAME",
                           "CUDA_HOME",
                           "OMP_NUM_THREADS",
                           "PYTHONPATH",
                           "PYTHONUNBUFFERED",
                           "PATH",
                           "LD_LIBRARY_PATH",
                           "VIRTUAL_ENV",
                           "CONDA_PREFIX",
                           "CONDA_DEFAULT_ENV",
                           "UCX_TLS",
                           "TORCH_DISTRIBUTED_DEBUG",
                           "GLOO_SOCKET_IFNAME",
                           "HF_HOME",
                           "MKL_NUM_THREADS",
                           "OMPI_MCA_btl",
                           "EPOCHS",
                           "WANDB_PROJECT",
                           "LANG",
                           "LC_ALL",
                           "DLAUNCH_DEBUG",
                           "MY_TRAINING_FLAG"}) {
    EXPECT_TRUE(is_forwarded_variable(name)) << name;
  }
  // What belongs to this machine, this session, a scheduler or dlaunch itself.
  for (const char* name : {"CUDA_VISIBLE_DEVICES",
                           "HOME",
                           "USER",
                           "SSH_AUTH_SOCK",
                           "DISPLAY",
                           "LD_PRELOAD",
                           "TERM",
                           "PWD",
                           "OLDPWD",
                           "SHLVL",
                           "_",
                           "TMPDIR",
                           "XDG_RUNTIME_DIR",
                           "SLURM_JOB_ID",
                           "PMIX_NAMESPACE",
                           "OMPI_COMM_WORLD_RANK",
                           "DLAUNCH_RDZV_SECRET",
                           "DLAUNCH_STORE_SECRET",
                           "BASH_FUNC_f%%",
                           "HISTFILE"}) {
    EXPECT_FALSE(is_forwarded_variable(name)) << name;
  }
}

TEST(Plan, TheForwardedVariablesAreKeptOnceForTheJobAndGoToSshNodesOnly) {
  Hostfile hf;
  HostEntry local;
  local.name = local.host = "localhost";
  local.transport = Transport::kLocal;
  local.slots = 1;
  HostEntry remote;
  remote.name = remote.host = "10.0.0.2";
  remote.transport = Transport::kSsh;
  remote.slots = 1;
  hf.hosts = {local, remote, remote};
  hf.hosts[2].name = hf.hosts[2].host = "10.0.0.3";
  PlanOptions po;
  po.command = {"./prog"};
  po.head_env = {"EPOCHS=1", "HOME=/root", "PATH=/usr/bin"};
  const JobPlan plan = make_plan(hf, po);
  EXPECT_EQ(plan.forwarded, (EnvList{{"EPOCHS", "1"}, {"PATH", "/usr/bin"}}));
  EXPECT_FALSE(plan.nodes[0].forwarded);
  EXPECT_TRUE(plan.nodes[1].forwarded);
  EXPECT_TRUE(plan.nodes[2].forwarded);
  EXPECT_EQ(get(plan.nodes[1].env, "EPOCHS"), "<unset>");  // not copied per node
}
