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

TEST(PreflightScript, TheNodesScriptIsLookedForInTheWorkingDirectory) {
  const std::string s =
      preflight_script("/a/dlaunch-agent", "/work dir", {"python3"}, "", false, "", {"missing.py"});
  const auto cd = s.find("cd '/work dir'");
  const auto look = s.find("if [ -f missing.py ]; then echo script0=ok; else echo script0=missing");
  ASSERT_NE(cd, std::string::npos) << s;
  ASSERT_NE(look, std::string::npos) << s;
  EXPECT_LT(cd, look);
}

}  // namespace
}  // namespace dlaunch
