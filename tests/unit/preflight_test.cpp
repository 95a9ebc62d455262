// --check: its reading of a command line (which file an interpreter is given;
// issue 30: `dlaunch --check python3 missing.py` names the missing script),
// and its first columns from how each node's agent was started.
#include "check/preflight.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dlaunch/version.h"

namespace dlaunch {
namespace {

using Cmd = std::vector<std::string>;

TEST(PreflightScript, TheFirstWordThatIsNoOptionIsTheInterpretersScript) {
  EXPECT_EQ(script_argument(Cmd{"python3", "missing.py"}), "missing.py");
  EXPECT_EQ(script_argument(Cmd{"/usr/bin/python3.11", "-u", "-O", "train.py", "--lr", "1"}),
            "train.py");
  EXPECT_EQ(script_argument(Cmd{"python", "-W", "ignore", "-X", "dev", "t.py"}), "t.py");
  EXPECT_EQ(script_argument(Cmd{"bash", "-e", "-o", "pipefail", "run.sh", "x"}), "run.sh");
  EXPECT_EQ(script_argument(Cmd{"sh", "--", "-odd-name.sh"}), "-odd-name.sh");
  EXPECT_EQ(script_argument(Cmd{"perl", "-I", "lib", "x.pl"}), "x.pl");
  EXPECT_EQ(script_argument(Cmd{"Rscript", "fit.R"}), "fit.R");
}

TEST(PreflightScript, CodeModulesStdinAndOtherProgramsHaveNone) {
  EXPECT_EQ(script_argument(Cmd{"python3", "-c", "print(1)"}), "");
  EXPECT_EQ(script_argument(Cmd{"python3", "-cprint(1)"}), "");
  EXPECT_EQ(script_argument(Cmd{"python3", "-m", "torch.distributed.run", "x.py"}), "");
  EXPECT_EQ(script_argument(Cmd{"python3", "-"}), "");
  EXPECT_EQ(script_argument(Cmd{"python3"}), "");
  EXPECT_EQ(script_argument(Cmd{"sh", "-c", "exit 0"}), "");
  EXPECT_EQ(script_argument(Cmd{"./train", "data.py"}), "");  // not an interpreter
  EXPECT_EQ(script_argument(Cmd{"pythonic", "x.py"}), "");
  EXPECT_EQ(script_argument(Cmd{}), "");
}

// --check's first columns come from the job's own start (the link and the
// agent's Hello), one transport as another: where the start failed, which
// agent answered.
HostEntry ssh_node(SshClient client = SshClient::kLibssh2) {
  HostEntry h;
  h.name = h.host = "gpu-1";
  h.transport = Transport::kSsh;
  h.ssh_client = client;
  return h;
}
Controller::NodeCheck said_hello(std::string exe, bool copied = false) {
  Controller::NodeCheck c;
  c.hello = proto::Hello{.agent_version = kVersion, .exe = std::move(exe)};
  c.start.copied = copied;
  return c;
}
std::string cells(const StartCells& c) {
  return c.connect + " " + c.hostkey + " " + c.auth + " " + c.agent;
}

TEST(CheckStart, WhichAgentAnswered) {
  const auto host = ssh_node();
  EXPECT_EQ(cells(start_cells(host, "/opt/a", said_hello("/opt/a"))), "ok ok ok ok");
  EXPECT_EQ(
      cells(start_cells(host, "/opt/a", said_hello("/home/u/.cache/dlaunch/0.1-ab/dlaunch-agent"))),
      "ok ok ok cached");
  EXPECT_EQ(cells(start_cells(host, "/opt/a", said_hello("/home/u/.cache/dlaunch/x", true))),
            "ok ok ok copy");
  auto old = said_hello("/opt/a");
  old.hello->agent_version = "0.0.1";
  const auto v = start_cells(host, "/opt/a", old);
  EXPECT_EQ(v.agent, "VERSION");
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_NE(v.problems[0].find("'/opt/a' reports \"dlaunch-agent 0.0.1 (protocol"),
            std::string::npos)
      << v.problems[0];
  EXPECT_TRUE(start_cells(host, "/opt/a", said_hello("/opt/a")).problems.empty());
}

TEST(CheckStart, WhereTheStartFailed) {
  const auto host = ssh_node();
  const auto failed = [](std::string stage) {
    Controller::NodeCheck c;
    c.start.failed_stage = std::move(stage);
    c.failed = "why";
    return c;
  };
  EXPECT_EQ(cells(start_cells(host, "/a", failed("connect"))), "FAIL - - -");
  EXPECT_EQ(cells(start_cells(host, "/a", failed("handshake"))), "FAIL - - -");
  EXPECT_EQ(cells(start_cells(host, "/a", failed("hostkey"))), "ok FAIL - -");
  EXPECT_EQ(cells(start_cells(host, "/a", failed("auth"))), "ok ok FAIL -");
  EXPECT_EQ(cells(start_cells(host, "/a", failed("exec"))), "ok ok ok -");
  EXPECT_EQ(start_cells(host, "/a", failed("auth")).problems, std::vector<std::string>{"why"});
  const auto missing = start_cells(host, "/a", failed("agent"));
  EXPECT_EQ(cells(missing), "ok ok ok MISSING");
  EXPECT_EQ(missing.problems,
            std::vector<std::string>{"dlaunch-agent not found or not executable at '/a'"});
  // The system's ssh says why itself; a scheduler's task, Slurm's step.
  EXPECT_EQ(cells(start_cells(ssh_node(SshClient::kOpenssh), "/a", failed("ssh"))),
            "FAILED ssh ssh -");
  EXPECT_EQ(cells(start_cells(ssh_node(SshClient::kOpenssh), "/a", said_hello("/a"))),
            "openssh ssh ssh ok");
  HostEntry slurm = ssh_node();
  slurm.transport = Transport::kSlurm;
  EXPECT_EQ(cells(start_cells(slurm, "/a", failed("agent"))), "srun - - MISSING");
  EXPECT_EQ(cells(start_cells(slurm, "/a", failed(""))), "FAILED - - -");
  HostEntry local;
  local.name = local.host = "localhost";
  local.transport = Transport::kLocal;
  EXPECT_EQ(cells(start_cells(local, "/a", said_hello("/a"))), "local local local ok");
  // Nothing said and nothing to say why (stopped at the start's deadline).
  EXPECT_EQ(start_cells(local, "/a", Controller::NodeCheck{}).problems,
            std::vector<std::string>{"its agent did not answer (no Hello)"});
}

}  // namespace
}  // namespace dlaunch
