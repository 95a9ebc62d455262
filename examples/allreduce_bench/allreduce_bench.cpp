// allreduce_bench: float32 sum all_reduce bandwidth, in the table style of
// nccl-tests (all_reduce_perf), through dlaunch::comm::ProcessGroup or, with --raw,
// directly (same world, same buffer, same loop: the difference is what comm
// costs): MPI_Allreduce on MPI_COMM_WORLD for --backend mpi; for --backend
// nccl, ncclAllReduce on the group's own communicator and stream followed by
// cudaStreamSynchronize (comm's call also returns only when the op is done).
// With nccl the buffer is device memory on the rank's GPU (LOCAL_RANK).
//
//   mpirun -np 4 build/release/bin/allreduce_bench [--min-bytes 8] [--max-bytes 256M]
//          [--iters 20] [--warmup 5] [--check] [--raw | --compare [--rounds 4]]
//          [--backend mpi|nccl]
//
// Sizes double from --min-bytes to --max-bytes (suffixes K, M, G: powers of
// 1024). Each size: --warmup ops, a barrier, --iters timed ops; time is the
// mean per op, the largest over the ranks. All ops are in place. algbw =
// bytes / time, busbw = algbw * 2(n-1)/n (what each link carries in a ring,
// comparable across world sizes). --check runs one more op per size on
// known data and counts wrong elements over all ranks (#wrong); the exit
// status is 1 if any. Rank 0 prints.
//
// --compare: both in the same processes, per size --rounds rounds of one
// timed block each (comm first in even rounds, raw first in odd ones), the
// median block of each, and ratio = raw time / comm time (= comm busbw / raw
// busbw where the world has more than one rank). Less noisy than
// comparing separate runs where the machine is shared or oversubscribed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <climits>
#include <mpi.h>

#include "comm/process_group.h"
#ifdef DLAUNCH_WITH_NCCL
#include <cuda_runtime_api.h>

#include "comm/nccl.h"
#endif

namespace {

struct Options {
  std::string backend = "mpi";
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{256} << 20;
  int iters = 20;
  int warmup = 5;
  bool check = false;
  bool raw = false;
  bool compare = false;
  int rounds = 4;
};

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(
      stderr,
      "allreduce_bench: %s\nusage: allreduce_bench [--backend mpi|nccl] [--min-bytes N] "
      "[--max-bytes N] [--iters N] [--warmup N] [--check] [--raw | --compare [--rounds N]]\n",
      error.c_str());
  std::exit(2);
}

std::size_t parse_bytes(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) usage(flag + ": '" + text + "' is not a size");
  unsigned shift = 0;
  const std::string suffix = end;
  if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else if (!suffix.empty() && suffix != "B") {
    usage(flag + ": '" + text + "' has an unknown suffix (K, M, G)");
  }
  if (v == 0 || v > (1ULL << 40) >> shift) usage(flag + ": '" + text + "' is out of range");
  return static_cast<std::size_t>(v << shift);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--check") {
      o.check = true;
      continue;
    }
    if (flag == "--raw") {
      o.raw = true;
      continue;
    }
    if (flag == "--compare") {
      o.compare = true;
      continue;
    }
    if (flag == "-h" || flag == "--help") usage("all_reduce bandwidth, comm or raw MPI");
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--backend") {
      o.backend = value;
    } else if (flag == "--min-bytes") {
      o.min_bytes = parse_bytes(flag, value);
    } else if (flag == "--max-bytes") {
      o.max_bytes = parse_bytes(flag, value);
    } else if (flag == "--iters" || flag == "--warmup" || flag == "--rounds") {
      char* end = nullptr;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || v < (flag == "--warmup" ? 0 : 1) || v > 1000000) {
        usage(flag + ": '" + value + "' is out of range");
      }
      (flag == "--iters"    ? o.iters
       : flag == "--warmup" ? o.warmup
                            : o.rounds) = static_cast<int>(v);
    } else {
      usage("unknown flag " + flag);
    }
  }
  if (o.min_bytes > o.max_bytes) usage("--min-bytes is above --max-bytes");
  if (o.max_bytes < sizeof(float)) usage("--max-bytes is below one float");
  if (o.raw && o.compare) usage("--raw and --compare exclude each other");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#ifdef DLAUNCH_WITH_NCCL
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
#endif

class Bench {
 public:
  Bench(dlaunch::comm::ProcessGroup& pg, const Options& o)
      : pg_(pg), o_(o), device_(pg.backend() == dlaunch::comm::Backend::kNccl) {}
  ~Bench() {
#ifdef DLAUNCH_WITH_NCCL
    if (dev_ != nullptr) cudaFree(dev_);
    if (scratch_ != nullptr) cudaFree(scratch_);
#endif
  }
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  int run() {
    const std::size_t max_count = o_.max_bytes / sizeof(float);
    buf_.assign(max_count, 0.0f);  // touches every page before timing
#ifdef DLAUNCH_WITH_NCCL
    if (device_) {
      cuda_check(cudaMalloc(reinterpret_cast<void**>(&dev_), max_count * sizeof(float)),
                 "cudaMalloc");
      cuda_check(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(double)), "cudaMalloc");
    }
#endif
    header();
    double busbw_sum = 0;
    int sizes = 0;
    long long wrong_total = 0;
    for (std::size_t bytes = std::max(o_.min_bytes, sizeof(float)); bytes <= o_.max_bytes;
         bytes *= 2) {
      const std::size_t count = bytes / sizeof(float);
      zero(count);  // sums of zeros stay zeros: no inf, no denormals
      double comm_s = 0, raw_s = 0;
      if (!o_.compare) {
        for (int i = 0; i < o_.warmup; ++i) op(count, o_.raw);
        (o_.raw ? raw_s : comm_s) = time_block(count, o_.raw);
      } else {
        for (int i = 0; i < o_.warmup; ++i) op(count, false), op(count, true);
        std::vector<double> c, r;
        for (int round = 0; round < o_.rounds; ++round) {
          const bool raw_first = round % 2 == 1;
          (raw_first ? r : c).push_back(time_block(count, raw_first));
          (raw_first ? c : r).push_back(time_block(count, !raw_first));
        }
        comm_s = median(c);
        raw_s = median(r);
      }
      long long wrong = -1;
      if (o_.check) {
        wrong = 0;
        wrong += check(count, o_.raw);  // comm, or raw under --raw
        if (o_.compare) wrong += check(count, true);
        wrong = static_cast<long long>(
            reduce_scalar(static_cast<double>(wrong), dlaunch::comm::ReduceOp::kSum));
        wrong_total += wrong;
      }
      busbw_sum += busbw(count, o_.raw ? raw_s : comm_s);
      ++sizes;
      if (pg_.rank() == 0) row(count, comm_s, raw_s, wrong);
    }
    if (pg_.rank() == 0) {
      if (o_.check) {
        std::printf("# Out of bounds values : %lld %s\n", wrong_total,
                    wrong_total ? "FAILED" : "OK");
      }
      std::printf("# Avg bus bandwidth    : %.3f GB/s%s\n", sizes ? busbw_sum / sizes : 0.0,
                  o_.compare ? " (comm)" : "");
    }
    return wrong_total == 0 ? 0 : 1;
  }

 private:
  double busbw(std::size_t count, double seconds) const {
    const int n = pg_.size();
    const double algbw = static_cast<double>(count * sizeof(float)) / seconds / 1e9;
    return algbw * 2.0 * (n - 1) / n;
  }

  void header() const {
    if (pg_.rank() != 0) return;
    const std::string raw = device_ ? "direct ncclAllReduce on the group's communicator"
                                    : "raw MPI_Allreduce on MPI_COMM_WORLD";
    const std::string what = o_.compare ? "dlaunch::comm::ProcessGroup (" + o_.backend +
                                              " backend) and " + raw + ", interleaved"
                             : o_.raw ? raw
                                      : "dlaunch::comm::ProcessGroup (" + o_.backend + " backend)";
    std::printf("# dlaunch allreduce_bench: %s, world size %d, float32 sum, in place\n",
                what.c_str(), pg_.size());
    if (o_.compare) {
      std::printf(
          "# per size %d rounds of %d timed ops per mode after %d warm-up; time = median "
          "round of the mean per op, max over ranks\n#\n",
          o_.rounds, o_.iters, o_.warmup);
      std::printf("# %10s  %12s  %8s  %6s  %10s  %8s  %10s  %8s  %6s  %6s\n", "size", "count",
                  "type", "redop", "comm time", "busbw", "raw time", "busbw", "ratio", "#wrong");
      std::printf("# %10s  %12s  %8s  %6s  %10s  %8s  %10s  %8s  %6s  %6s\n", "(B)", "(elements)",
                  "", "", "(us)", "(GB/s)", "(us)", "(GB/s)", "", "");
    } else {
      std::printf(
          "# %d iterations after %d warm-up per size; time = mean per op, max over ranks\n#\n",
          o_.iters, o_.warmup);
      std::printf("# %10s  %12s  %8s  %6s  %10s  %8s  %8s  %6s\n", "size", "count", "type", "redop",
                  "time", "algbw", "busbw", "#wrong");
      std::printf("# %10s  %12s  %8s  %6s  %10s  %8s  %8s  %6s\n", "(B)", "(elements)", "", "",
                  "(us)", "(GB/s)", "(GB/s)", "");
    }
    std::fflush(stdout);
  }

  void row(std::size_t count, double comm_s, double raw_s, long long wrong) const {
    char wrong_text[32] = "N/A";
    if (wrong >= 0) std::snprintf(wrong_text, sizeof wrong_text, "%lld", wrong);
    const std::size_t bytes = count * sizeof(float);
    if (o_.compare) {
      const double c = busbw(count, comm_s), r = busbw(count, raw_s);
      std::printf("  %10zu  %12zu  %8s  %6s  %10.2f  %8.3f  %10.2f  %8.3f  %6.3f  %6s\n", bytes,
                  count, "float", "sum", comm_s * 1e6, c, raw_s * 1e6, r, raw_s / comm_s,
                  wrong_text);
    } else {
      const double s = o_.raw ? raw_s : comm_s;
      const double algbw = static_cast<double>(bytes) / s / 1e9;
      std::printf("  %10zu  %12zu  %8s  %6s  %10.2f  %8.3f  %8.3f  %6s\n", bytes, count, "float",
                  "sum", s * 1e6, algbw, busbw(count, s), wrong_text);
    }
    std::fflush(stdout);
  }

  // --iters ops after a barrier: mean seconds per op, the largest over the ranks.
  double time_block(std::size_t count, bool raw) {
    pg_.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o_.iters; ++i) op(count, raw);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    return reduce_scalar(dt.count() / o_.iters, dlaunch::comm::ReduceOp::kMax);
  }

  // One double reduced over the ranks (through device memory for nccl).
  double reduce_scalar(double value, dlaunch::comm::ReduceOp how) {
    if (!device_) {
      pg_.all_reduce(std::span<double>(&value, 1), how);
      return value;
    }
#ifdef DLAUNCH_WITH_NCCL
    cuda_check(cudaMemcpy(scratch_, &value, sizeof value, cudaMemcpyHostToDevice), "cudaMemcpy");
    pg_.all_reduce(scratch_, 1, dlaunch::comm::DataType::kFloat64, how);
    cuda_check(cudaMemcpy(&value, scratch_, sizeof value, cudaMemcpyDeviceToHost), "cudaMemcpy");
#endif
    return value;
  }

  float* data() {
#ifdef DLAUNCH_WITH_NCCL
    if (device_) return dev_;
#endif
    return buf_.data();
  }

  void zero(std::size_t count) {
    std::fill_n(buf_.begin(), count, 0.0f);
#ifdef DLAUNCH_WITH_NCCL
    if (device_) cuda_check(cudaMemset(dev_, 0, count * sizeof(float)), "cudaMemset");
#endif
  }

  void op(std::size_t count, bool raw) {
    if (!raw) {
      pg_.all_reduce(data(), count, dlaunch::comm::DataType::kFloat32,
                     dlaunch::comm::ReduceOp::kSum);
      return;
    }
#ifdef DLAUNCH_WITH_NCCL
    if (device_) {
      // The group's communicator is non-blocking: nccl_check waits out
      // ncclInProgress as NCCL requires (and returns at once on success).
      dlaunch::comm::nccl_check(
          pg_,
          ncclAllReduce(dev_, dev_, count, ncclFloat, ncclSum,
                        dlaunch::comm::nccl_communicator(pg_), dlaunch::comm::nccl_stream(pg_)),
          "ncclAllReduce");
      cuda_check(cudaStreamSynchronize(dlaunch::comm::nccl_stream(pg_)), "cudaStreamSynchronize");
      return;
    }
#endif
    if (count > INT_MAX) throw std::runtime_error("--raw: more than INT_MAX elements");
    const int rc = MPI_Allreduce(MPI_IN_PLACE, buf_.data(), static_cast<int>(count), MPI_FLOAT,
                                 MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING] = {};
      int len = 0;
      MPI_Error_string(rc, text, &len);
      throw std::runtime_error(std::string("MPI_Allreduce failed: ") + text);
    }
  }

  // Rank r contributes (r + 1) * (i % 13 + 1) at element i: every sum is a
  // small integer, exact in float32. Leaves zeros behind for the timing.
  long long check(std::size_t count, bool raw) {
    const int n = pg_.size();
    const auto mine = static_cast<float>(pg_.rank() + 1);
    for (std::size_t i = 0; i < count; ++i) buf_[i] = mine * static_cast<float>(i % 13 + 1);
#ifdef DLAUNCH_WITH_NCCL
    if (device_)
      cuda_check(cudaMemcpy(dev_, buf_.data(), count * sizeof(float), cudaMemcpyHostToDevice),
                 "cudaMemcpy");
#endif
    op(count, raw);
#ifdef DLAUNCH_WITH_NCCL
    if (device_)
      cuda_check(cudaMemcpy(buf_.data(), dev_, count * sizeof(float), cudaMemcpyDeviceToHost),
                 "cudaMemcpy");
#endif
    const float ranks = static_cast<float>(n) * static_cast<float>(n + 1) / 2;
    long long wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (buf_[i] != ranks * static_cast<float>(i % 13 + 1)) ++wrong;
    }
    zero(count);
    return wrong;
  }

  dlaunch::comm::ProcessGroup& pg_;
  const Options& o_;
  const bool device_;  // nccl: the timed buffer lives on the GPU
  std::vector<float> buf_;
#ifdef DLAUNCH_WITH_NCCL
  float* dev_ = nullptr;
  double* scratch_ = nullptr;
#endif
};

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  std::unique_ptr<dlaunch::comm::ProcessGroup> pg;
  try {
    const dlaunch::comm::Backend backend = dlaunch::comm::parse_backend(options.backend);
    pg = dlaunch::comm::ProcessGroup::create(backend);
  } catch (const dlaunch::comm::CommError& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 2;
  }
  int rc = 0;
  try {
    rc = Bench(*pg, options).run();
  } catch (const std::exception& e) {
    // Other ranks may wait in a collective for this one: leave without
    // finalising MPI, so that the launcher ends the whole job.
    std::fprintf(stderr, "allreduce_bench: rank %d: %s\n", pg->rank(), e.what());
    std::fflush(nullptr);
    std::_Exit(2);
  }
  pg.reset();
  return rc;
}
