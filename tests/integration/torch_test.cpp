// PyTorch under dlaunch: examples/train.py (DistributedDataParallel through
// env://, gloo on CPU) and torch.distributed.elastic's @record error file in
// the failure report. They run Debian's python3-torch through /usr/bin/python3
// explicitly (another python3 may come first on PATH); without torch there
// they are skipped and say why.
#include <filesystem>
#include <regex>

#include <gtest/gtest.h>

#include "support.h"

using namespace dltest;

namespace {

const std::string kPython = "/usr/bin/python3";

class Torch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto r = run({kPython, "-c", "import torch, torch.distributed"}, 60);
    if (r.exit_code != 0) {
      skip_ = "`" + kPython + " -c 'import torch'` failed (exit " + std::to_string(r.exit_code) +
              "): install python3-torch (scripts/install-deps.sh). " + r.err.substr(0, 300);
    }
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }
  static std::string skip_;
};

std::string Torch::skip_;

}  // namespace

TEST_F(Torch, TrainPyConvergesWithIdenticalParametersOnFourRanksOverTwoNodes) {
  auto r =
      run(dlaunch_cmd({"-H", kLocalhost, kPython, std::string(SOURCE_DIR) + "/examples/train.py"}),
          110);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m,
      std::regex(R"(\[0\] loss (\d+\.\d+) -> (\d+\.\d+) over \d+ steps on 4 ranks \(gloo, cpu\))")))
      << r.out;
  EXPECT_LT(std::stod(m[2]), std::stod(m[1]) / 4) << r.out;
  EXPECT_NE(r.out.find("[0] parameters identical on all 4 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[0] step    0  loss "), std::string::npos) << r.out;
  // Only rank 0 prints.
  for (const auto& line : lines_of(r.out)) EXPECT_EQ(line.rfind("[0] ", 0), 0u) << line;
}

TEST_F(Torch, RecordedExceptionIsInTheReportWithItsTraceback) {
  const auto job = unique_job_id("record");
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--job-id", job, kPython,
                            std::string(SOURCE_DIR) + "/tests/helpers/torch_record_fail.py", "1"}),
               110);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rank 1 exited with code 1"), std::string::npos) << r.err;
  // The message and traceback come from the error file @record wrote on node0.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.err, m,
      std::regex(
          R"(  error at [-0-9: ]+ \(from its error file (/\S+/dlaunch-)" + job +
          R"(-node0-[A-Za-z0-9]{6}/error\.1\.json)\):\n    RuntimeError: rank 1 could not load shard 1\.bin\n  traceback:\n    \| Traceback \(most recent call last\):\n)")))
      << r.err;
  EXPECT_NE(
      r.err.find("in load_shard\n    |     raise RuntimeError(f\"rank {rank} could not load shard"),
      std::string::npos)
      << r.err;
  // The agent removed its error-file folder when it finished.
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(m[1].str()).parent_path())) << m[1];
  EXPECT_EQ(wait_job_gone(job, 5), std::vector<pid_t>{});
}
