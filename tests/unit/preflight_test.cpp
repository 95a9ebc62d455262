// --check's reading of a command line: which file an interpreter is given
// (issue 30: `dlaunch --check python3 missing.py` names the missing script).
#include "check/preflight.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

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

// The first look asks only for the agent (the script's own file, the working
// directory and the programs are the agent's to look for at Setup:
// tests/unit/agent/agent_check_test.cpp).
TEST(PreflightScript, TheFirstLookAsksForTheAgentAndItsCachedCopyOnly) {
  const std::string s = preflight_script("/a b/dlaunch-agent", "0.1.0-abc");
  EXPECT_NE(s.find("if [ -x '/a b/dlaunch-agent' ] && v=$('/a b/dlaunch-agent' --version"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("/.cache/dlaunch/\"0.1.0-abc/dlaunch-agent"), std::string::npos) << s;
  EXPECT_EQ(preflight_script("/a/dlaunch-agent").find("agent_cache"), std::string::npos);
  EXPECT_EQ(s.find("cd "), std::string::npos) << s;
}

}  // namespace
}  // namespace dlaunch
