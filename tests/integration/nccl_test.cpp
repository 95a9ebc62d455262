// comm's NCCL backend in real dlaunch jobs, one rank per GPU.
//
// Where comm was built without NCCL, or no GPU is visible (CI), the only
// thing to check is that --backend nccl fails at once with a message saying
// why; the GPU tests skip, naming what nccl_worker found. On a machine with
// GPUs every test runs, the multi-rank ones too: with two or more GPUs on one
// node, one rank per GPU; with a single GPU, two logical nodes of this
// machine that both use GPU 0 and that NCCL_HOSTID makes NCCL treat as two
// hosts (NCCL refuses two ranks on one GPU of one host), talking over
// loopback sockets, as two single-GPU hosts would over their network.
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support.h"

using namespace dltest;

namespace {

// ASan's shadow gap must stay unprotected for the CUDA driver in sanitizer
// builds; harmless elsewhere.
std::vector<std::string> cuda_env() { return {"ASAN_OPTIONS=protect_shadow_gap=0"}; }

#ifdef NCCL_WORKER_BIN
// Visible CUDA devices, or 0 with why in `reason`.
int visible_gpus(std::string& reason) {
  auto r = run({NCCL_WORKER_BIN, "devices"}, 60, cuda_env());
  std::string text = r.out;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (r.exit_code != 0) {
    reason = "no GPU visible to CUDA (" + text + ")";
    return 0;
  }
  const int n = std::stoi(text);
  if (n == 0) reason = "no GPU visible to CUDA (0 devices)";
  return n;
}

// dlaunch's arguments for `ranks` ranks, one GPU each: -n on a node with that
// many GPUs, else (one GPU) two logical nodes sharing it as two NCCL hosts.
std::vector<std::string> ranks_args(int gpus, int ranks) {
  if (gpus >= ranks) return {"-n", std::to_string(ranks)};
  if (ranks != 2) throw std::logic_error("one GPU carries two logical nodes, not more");
  static const std::string hostfile = temp_file(
      "hosts:\n"
      "  - {host: localhost, name: gpu-a, slots: 1, gpus: [0],\n"
      "     env: {NCCL_HOSTID: dlaunch-test-gpu-a, NCCL_SOCKET_IFNAME: lo}}\n"
      "  - {host: localhost, name: gpu-b, slots: 1, gpus: [0],\n"
      "     env: {NCCL_HOSTID: dlaunch-test-gpu-b, NCCL_SOCKET_IFNAME: lo}}\n",
      ".yaml");
  return {"-H", hostfile};
}

// Ranks for a multi-rank test: every GPU up to `most`, or 2 on a single GPU.
int multi_ranks(int gpus, int most) { return gpus >= 2 ? std::min(gpus, most) : 2; }

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// PIDs of the processes holding a context on a GPU, as nvidia-smi lists
// them (empty where there is no nvidia-smi).
std::vector<std::string> gpu_processes() {
  auto r = run({"nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"}, 30);
  if (r.exit_code != 0) return {};
  std::vector<std::string> pids;
  for (const auto& line : lines_of(r.out))
    if (!line.empty()) pids.push_back(line);
  return pids;
}

// After a job that failed on the GPU: nothing of it may hold the GPU, so
// every process nvidia-smi lists was there before it (polled for a moment:
// the driver lists a process until its context is torn down).
void expect_gpu_left_as_before(const std::vector<std::string>& before) {
  std::vector<std::string> extra;
  for (int i = 0; i < 50; ++i) {
    extra.clear();
    for (const auto& pid : gpu_processes())
      if (std::find(before.begin(), before.end(), pid) == before.end()) extra.push_back(pid);
    if (extra.empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "processes still on the GPU after the job: " << testing::PrintToString(extra);
}

#define REQUIRE_GPUS(n)                    \
  std::string why_skip;                    \
  const int gpus = visible_gpus(why_skip); \
  if (gpus == 0) GTEST_SKIP() << why_skip; \
  if (gpus < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, " << gpus << " visible to CUDA";
#endif

}  // namespace

TEST(Nccl, BackendWithoutNcclOrGpuFailsAtOnceSayingWhy) {
  // On a GPU machine the ranks are shown none (CUDA_VISIBLE_DEVICES empty),
  // so the refusal is checked there too.
  std::vector<std::string> hide;
#ifdef NCCL_WORKER_BIN
  std::string reason;
  if (visible_gpus(reason) > 0) hide = {"-x", "CUDA_VISIBLE_DEVICES="};
  const std::string expected = "no CUDA device visible";
#else
  const std::string expected = "no NCCL backend";
#endif
  const auto job = unique_job_id("nccl-refused");
  std::vector<std::string> args = {"-n", "2", "--job-id", job};
  args.insert(args.end(), hide.begin(), hide.end());
  args.insert(args.end(), {TRAIN_BIN, "--backend", "nccl"});
  auto r = run(dlaunch_cmd(args), 120, cuda_env());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 30);
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
}

#ifdef NCCL_WORKER_BIN

TEST(Nccl, EveryCollectiveTypeAndOpOnOneGpu) {
  REQUIRE_GPUS(1);
  auto r = run(dlaunch_cmd({"-n", "1", NCCL_WORKER_BIN, "collectives"}), 240, cuda_env());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("checks passed on device 0 of a world of 1"), std::string::npos) << r.out;
}

TEST(Nccl, EveryCollectiveTypeAndOpOnSeveralRanks) {
  REQUIRE_GPUS(1);
  const int n = multi_ranks(gpus, 8);
  auto r = run(dlaunch_cmd(concat(ranks_args(gpus, n), {NCCL_WORKER_BIN, "collectives"})), 280,
               cuda_env());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  int passed = 0;
  for (const auto& line : lines_of(r.out))
    passed += line.find("checks passed") != std::string::npos;
  EXPECT_EQ(passed, n) << r.out;
}

TEST(Nccl, WatchdogEndsASetUpThatAPeerNeverJoins) {
  REQUIRE_GPUS(1);
  // Rank 1 never creates its group: rank 0's ncclCommInitRankConfig waits for
  // it until the collective timeout, then the rank fails and dlaunch stops all.
  const auto job = unique_job_id("nccl-stuck-init");
  auto r = run(dlaunch_cmd({"-n", "2", "--job-id", job, "--collective-timeout", "3",
                            NCCL_WORKER_BIN, "stuck-init"}),
               120, cuda_env());
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("did not complete within the collective timeout of 3.0 s"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 20);
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
}

namespace {

// Two ranks, rank 1 skipping an all_reduce (nccl_worker MODE), a 3 s
// collective timeout: rank 0 ends in time with exit 3 and `message`, the
// communicator aborted, nothing of the job left, on the GPU either.
void expect_watchdog_ends(int gpus, const std::string& mode, const std::string& message) {
  const auto before = gpu_processes();
  const auto job = unique_job_id("nccl-" + mode);
  auto r = run(dlaunch_cmd(concat(ranks_args(gpus, 2), {"--job-id", job, "--collective-timeout",
                                                        "3", NCCL_WORKER_BIN, mode})),
               120, cuda_env());
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("communicator was aborted"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 20);
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
  expect_gpu_left_as_before(before);
}

}  // namespace

TEST(Nccl, WatchdogEndsAFirstCollectiveWhosePeerNeverConnects) {
  REQUIRE_GPUS(1);
  // Rank 1 skips the first all_reduce: NCCL sets up its connections in the
  // background and reports the call in progress for as long as the peer is
  // missing; the watchdog gives up on the set-up.
  expect_watchdog_ends(gpus, "stuck-connect",
                       "ncclAllReduce did not complete within the collective timeout of 3.0 s");
}

TEST(Nccl, WatchdogEndsACollectiveAPeerNeverCalls) {
  REQUIRE_GPUS(1);
  // Connections are up (one all_reduce went through); rank 1 skips the
  // second, so rank 0's kernel waits on the GPU: only an abort ends it.
  expect_watchdog_ends(gpus, "stuck-collective",
                       "rank 0: all_reduce(float32, 1024 elements, sum): not complete after the "
                       "collective timeout of 3.0 s");
}

TEST(Nccl, TrainConvergesWithTheNcclBackend) {
  REQUIRE_GPUS(1);
  const int n = multi_ranks(gpus, 4);
  auto r = run(
      dlaunch_cmd(concat(ranks_args(gpus, n), {TRAIN_BIN, "--backend", "nccl", "--epochs", "5"})),
      240, cuda_env());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("parameters identical on all " + std::to_string(n) + " ranks"),
            std::string::npos)
      << r.out;
}

TEST(Nccl, AllreduceBenchComparesCommWithDirectNccl) {
  REQUIRE_GPUS(1);
  auto r = run(dlaunch_cmd(concat(
                   ranks_args(gpus, multi_ranks(gpus, 8)),
                   {ALLREDUCE_BENCH_BIN, "--backend", "nccl", "--compare", "--check", "--min-bytes",
                    "1M", "--max-bytes", "16M", "--iters", "10", "--rounds", "2"})),
               240, cuda_env());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("direct ncclAllReduce"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Out of bounds values : 0 OK"), std::string::npos) << r.out;
}

#endif  // NCCL_WORKER_BIN
