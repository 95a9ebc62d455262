// The GPU test's kernels (agent/health/gpu_test.h) where no GPU is: their
// PTX compiled by the CUDA toolkit's ptxas for each GPU generation the
// driver JIT serves (skipped without the toolkit), and what the agent
// reports on a node without the CUDA driver. The kernels themselves run only
// on a real GPU (docs/health.md, "The GPU test").
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "health/gpu_test.h"

namespace {

namespace h = dlaunch::agent::health;

// The CUDA toolkit's ptxas: $DLAUNCH_PTXAS, on PATH, or in /usr/local/cuda
// (found when the test runs, not when it is built: the build's flags stay
// the same on machines with and without the toolkit). Empty: none.
std::string find_ptxas() {
  std::vector<std::string> places;
  if (const char* given = std::getenv("DLAUNCH_PTXAS")) places.emplace_back(given);
  if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    for (std::size_t start = 0; start <= dirs.size();) {
      const auto colon = std::min(dirs.find(':', start), dirs.size());
      if (colon > start) places.push_back(dirs.substr(start, colon - start) + "/ptxas");
      start = colon + 1;
    }
  }
  places.emplace_back("/usr/local/cuda/bin/ptxas");
  for (const auto& p : places) {
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

TEST(GpuKernels, ThePtxCompilesForEveryGenerationFromTuringToBlackwell) {
  const std::string ptxas = find_ptxas();
  if (ptxas.empty()) GTEST_SKIP() << "no ptxas (the CUDA toolkit) on this machine";
  const auto dir =
      std::filesystem::temp_directory_path() / ("dlaunch-ptx-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto ptx = (dir / "gpu_test.ptx").string();
  std::ofstream(ptx) << h::gpu_test_ptx();
  for (const char* arch : {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100"}) {
    const std::string cmd = ptxas + " -arch=" + arch + " " + ptx + " -o " +
                            (dir / "out.cubin").string() + " 2>" + (dir / "err").string();
    const int rc = std::system(cmd.c_str());
    std::ifstream err(dir / "err");
    const std::string why((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    // A toolkit too old to know a generation says so; anything else fails.
    if (rc != 0 && why.find("Unsupported") != std::string::npos) continue;
    EXPECT_EQ(rc, 0) << arch << ": " << why;
  }
  std::filesystem::remove_all(dir);
}

// The host's copy of the compute kernel's arithmetic: an LCG step and an
// fma per round, from the thread's number.
TEST(GpuKernels, TheHostsResultsAreTheKernelsArithmetic) {
  EXPECT_EQ(h::expected_compute(5, 0).integer, 5u);
  EXPECT_EQ(h::expected_compute(5, 0).float_bits, std::bit_cast<unsigned>(5.0F));
  const auto one = h::expected_compute(1030, 1);
  EXPECT_EQ(one.integer, 1030u * 1664525u + 1013904223u);
  EXPECT_EQ(one.float_bits, std::bit_cast<unsigned>(std::fma(6.0F, 0.999F, 0.5F)));
  EXPECT_EQ(h::fill_pattern(0, 7), 7u);
  EXPECT_EQ(h::fill_pattern((1ULL << 32U) + 1, 0), 0x9E3779B1u);
  // The second pass writes the complement's pattern: every bit is seen at both values.
  EXPECT_NE(h::fill_pattern(3, 0x5A3C96E1U), h::fill_pattern(3, ~0x5A3C96E1U));
}

TEST(GpuKernels, ANodeWithoutTheCudaDriverSaysSo) {
  if (void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); lib != nullptr) {
    ::dlclose(lib);
    GTEST_SKIP() << "this machine has a CUDA driver";
  }
  const auto facts = h::run_gpu_test(16);
  ASSERT_EQ(facts.size(), 1u);
  EXPECT_EQ(facts[0].first, "cuda");
  EXPECT_TRUE(facts[0].second.starts_with("not loaded: libcuda.so.1")) << facts[0].second;
}

}  // namespace
