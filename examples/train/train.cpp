// train: data-parallel training of a tiny 2-layer MLP (tanh hidden layer) on
// synthetic regression data, over dlaunch::comm::ProcessGroup.
//
//   mpirun -np 4 build/release/bin/train [--backend mpi] [--epochs 10] [--lr 0.05] [--batch 64]
//
// Every rank generates the same data set and the same initial parameters from
// --seed (its own generator, so every platform gets the same numbers), walks
// the same shuffled order, and takes its shard of every global batch. The
// gradient is all-reduced (kAvg) every step, then every rank takes the same
// SGD step. Rank 0 prints the loss over the whole data set per epoch. At the
// end every rank all-gathers the parameters and checks that each rank's equal
// rank 0's bit for bit; exit 1 if not, 2 on a usage or communication error.
//
// The model lives on the CPU whatever the backend. With --backend nccl (one
// GPU per rank, dlaunch -n <gpus>) every collective goes through a device
// copy of the host buffer: the nccl backend takes device memory only.
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

#include "comm/process_group.h"
#ifdef DLAUNCH_WITH_NCCL
#include <cuda_runtime_api.h>
#endif

namespace {

// The collectives this program uses, on host buffers; staged through device
// memory when the group's backend needs it.
class Collectives {
 public:
  explicit Collectives(dlaunch::comm::ProcessGroup& pg) : pg_(pg) {}
  ~Collectives() {
#ifdef DLAUNCH_WITH_NCCL
    if (dev_ != nullptr) cudaFree(dev_);
#endif
  }
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  int rank() const { return pg_.rank(); }
  int size() const { return pg_.size(); }

  template <dlaunch::comm::CommElement T>
  void all_reduce(std::span<T> buf, dlaunch::comm::ReduceOp op) {
    if (!on_device()) return pg_.all_reduce(buf, op);
    void* d = stage(buf.data(), buf.size_bytes(), buf.size_bytes());
    pg_.all_reduce(d, buf.size(), dlaunch::comm::data_type_of<T>(), op);
    unstage(buf.data(), d, buf.size_bytes());
  }

  template <dlaunch::comm::CommElement T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    if (!on_device()) return pg_.all_gather(send, recv);
    // recv's own block is the input: all_gather in place on the device.
    const std::size_t own = static_cast<std::size_t>(rank()) * send.size_bytes();
    char* d = static_cast<char*>(stage(nullptr, 0, recv.size_bytes()));
    copy(d + own, send.data(), send.size_bytes(), true);
    pg_.all_gather(d + own, d, send.size(), dlaunch::comm::data_type_of<T>());
    unstage(recv.data(), d, recv.size_bytes());
  }

 private:
  bool on_device() const { return pg_.backend() == dlaunch::comm::Backend::kNccl; }

#ifdef DLAUNCH_WITH_NCCL
  static void copy(void* to, const void* from, std::size_t bytes, bool to_device) {
    const cudaError_t e =
        cudaMemcpy(to, from, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("cudaMemcpy: ") + cudaGetErrorString(e));
  }
  // A device buffer of at least `capacity` bytes holding `bytes` of host.
  void* stage(const void* host, std::size_t bytes, std::size_t capacity) {
    if (capacity > dev_bytes_) {
      if (dev_ != nullptr) cudaFree(dev_);
      dev_ = nullptr;
      if (const cudaError_t e = cudaMalloc(&dev_, capacity); e != cudaSuccess)
        throw std::runtime_error(std::string("cudaMalloc: ") + cudaGetErrorString(e));
      dev_bytes_ = capacity;
    }
    if (bytes != 0) copy(dev_, host, bytes, true);
    return dev_;
  }
  void unstage(void* host, const void* dev, std::size_t bytes) { copy(host, dev, bytes, false); }
  void* dev_ = nullptr;
  std::size_t dev_bytes_ = 0;
#else
  // Never reached: without NCCL no group has a device backend.
  static void copy(void*, const void*, std::size_t, bool) {}
  void* stage(const void*, std::size_t, std::size_t) { return nullptr; }
  void unstage(void*, const void*, std::size_t) {}
#endif

  dlaunch::comm::ProcessGroup& pg_;
};

struct Options {
  std::string backend = "mpi";
  int epochs = 10;
  float lr = 0.05f;
  int batch = 64;      // global batch, split over the ranks
  int samples = 4096;  // data set size
  int hidden = 16;     // hidden units
  std::uint64_t seed = 1234;
};

constexpr int kInputs = 8;

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(stderr,
               "train: %s\nusage: train [--backend mpi|nccl] [--epochs N] [--lr X] [--batch N] "
               "[--samples N] [--hidden N] [--seed N]\n",
               error.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") usage("data-parallel MLP training over comm");
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    char* end = nullptr;
    auto integer = [&](long min) {
      const long v = std::strtol(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || v < min || v > (1L << 30)) {
        usage(flag + ": '" + value + "' is not an integer >= " + std::to_string(min));
      }
      return static_cast<int>(v);
    };
    if (flag == "--backend") {
      o.backend = value;
    } else if (flag == "--epochs") {
      o.epochs = integer(1);
    } else if (flag == "--batch") {
      o.batch = integer(1);
    } else if (flag == "--samples") {
      o.samples = integer(1);
    } else if (flag == "--hidden") {
      o.hidden = integer(1);
    } else if (flag == "--seed") {
      o.seed = static_cast<std::uint64_t>(integer(0));
    } else if (flag == "--lr") {
      o.lr = std::strtof(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(o.lr > 0)) usage("--lr: '" + value + "'");
    } else {
      usage("unknown flag " + flag);
    }
  }
  return o;
}

// splitmix64: small, fast, and the same everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {                                                           // Box-Muller
    const double u = 1.0 - uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * uniform());
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t state_;
};

struct Data {
  std::vector<float> x;  // samples * kInputs
  std::vector<float> y;  // samples
};

// y = a.x + 0.5 tanh(b.x) + noise: mostly linear, a little bent.
Data make_data(int samples, std::uint64_t seed) {
  Rng rng(seed);
  float a[kInputs], b[kInputs];
  for (float& j : a) j = static_cast<float>(rng.normal() * 0.5);
  for (float& j : b) j = static_cast<float>(rng.normal() * 0.5);
  Data d;
  d.x.resize(static_cast<std::size_t>(samples) * kInputs);
  d.y.resize(static_cast<std::size_t>(samples));
  for (int i = 0; i < samples; ++i) {
    float* x = &d.x[static_cast<std::size_t>(i) * kInputs];
    float lin = 0, bent = 0;
    for (int j = 0; j < kInputs; ++j) {
      x[j] = static_cast<float>(rng.normal());
      lin += a[j] * x[j];
      bent += b[j] * x[j];
    }
    d.y[static_cast<std::size_t>(i)] =
        lin + 0.5f * std::tanh(bent) + static_cast<float>(rng.normal() * 0.01);
  }
  return d;
}

// Parameters in one contiguous vector, so that one all_reduce carries the
// whole gradient: W1 (hidden x inputs), b1 (hidden), w2 (hidden), b2 (1).
class Mlp {
 public:
  Mlp(int hidden, std::uint64_t seed) : h_(hidden), p_(size(hidden)) {
    Rng rng(seed ^ 0x5eedULL);
    const double s1 = 1.0 / std::sqrt(static_cast<double>(kInputs));
    const double s2 = 1.0 / std::sqrt(static_cast<double>(hidden));
    for (int k = 0; k < h_ * kInputs; ++k)
      p_[static_cast<std::size_t>(k)] = static_cast<float>(rng.normal() * s1);
    for (int k = 0; k < h_; ++k) w2()[k] = static_cast<float>(rng.normal() * s2);
  }
  static std::size_t size(int hidden) {
    return static_cast<std::size_t>(hidden) * (kInputs + 2) + 1;
  }
  std::span<float> params() { return p_; }

  // Squared error / 2 of one sample; with grad != null adds scale * its gradient.
  float loss(const float* x, float y, float* grad, float scale) {
    float hid[256];
    float out = b2();
    for (int k = 0; k < h_; ++k) {
      const float* w = &p_[static_cast<std::size_t>(k) * kInputs];
      float z = b1()[k];
      for (int j = 0; j < kInputs; ++j) z += w[j] * x[j];
      hid[k] = std::tanh(z);
      out += w2()[k] * hid[k];
    }
    const float err = out - y;
    if (grad != nullptr) {
      const float g = err * scale;
      float* gw1 = grad;
      float* gb1 = grad + h_ * kInputs;
      float* gw2 = gb1 + h_;
      float* gb2 = gw2 + h_;
      *gb2 += g;
      for (int k = 0; k < h_; ++k) {
        gw2[k] += g * hid[k];
        const float gz = g * w2()[k] * (1 - hid[k] * hid[k]);
        gb1[k] += gz;
        for (int j = 0; j < kInputs; ++j) gw1[k * kInputs + j] += gz * x[j];
      }
    }
    return 0.5f * err * err;
  }

  void sgd(std::span<const float> grad, float lr) {
    for (std::size_t i = 0; i < p_.size(); ++i) p_[i] -= lr * grad[i];
  }

 private:
  float* b1() { return &p_[static_cast<std::size_t>(h_) * kInputs]; }
  float* w2() { return b1() + h_; }
  float& b2() { return p_.back(); }

  int h_;
  std::vector<float> p_;
};

// [begin, end) of part `part` of n when `total` items are split as evenly as possible.
std::pair<int, int> shard(int total, int part, int n) {
  const auto t = static_cast<long long>(total);
  return {static_cast<int>(t * part / n), static_cast<int>(t * (part + 1) / n)};
}

// Mean loss over the whole data set: each rank evaluates its shard.
double full_loss(Collectives& pg, Mlp& model, const Data& d, int samples) {
  const auto [begin, end] = shard(samples, pg.rank(), pg.size());
  double sum = 0;
  for (int i = begin; i < end; ++i) {
    sum += model.loss(&d.x[static_cast<std::size_t>(i) * kInputs], d.y[static_cast<std::size_t>(i)],
                      nullptr, 0);
  }
  pg.all_reduce(std::span<double>(&sum, 1), dlaunch::comm::ReduceOp::kSum);
  return sum / samples;
}

int train(Collectives* pg, const Options& o) {
  const int rank = pg->rank();
  const int world = pg->size();
  if (o.hidden > 256) usage("--hidden is at most 256");
  if (o.batch < world) usage("--batch must be at least the number of ranks");
  if (o.batch > o.samples) usage("--batch must not exceed --samples");

  const Data data = make_data(o.samples, o.seed);
  Mlp model(o.hidden, o.seed);
  std::vector<float> grad(Mlp::size(o.hidden));
  std::vector<std::size_t> order(static_cast<std::size_t>(o.samples));
  Rng shuffle(o.seed + 1);
  const int steps = o.samples / o.batch;

  const double initial = full_loss(*pg, model, data, o.samples);
  if (rank == 0) {
    std::printf(
        "train: %d ranks (backend %s), %d samples, global batch %d, %d steps/epoch, "
        "lr %g, %zu parameters\n",
        world, o.backend.c_str(), o.samples, o.batch, steps, static_cast<double>(o.lr),
        grad.size());
    std::printf("epoch %3d  loss %.6e\n", 0, initial);
    std::fflush(stdout);
  }
  const auto start = std::chrono::steady_clock::now();
  double loss = initial;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (std::size_t i = order.size() - 1; i > 0; --i)
      std::swap(order[i], order[shuffle.below(i + 1)]);
    for (int step = 0; step < steps; ++step) {
      std::fill(grad.begin(), grad.end(), 0.0f);
      const auto [begin, end] = shard(o.batch, rank, world);
      // Scaled so that the average over the ranks is the global batch mean,
      // whether or not the batch splits evenly.
      const float scale = static_cast<float>(world) / static_cast<float>(o.batch);
      for (int b = begin; b < end; ++b) {
        const std::size_t i = order[static_cast<std::size_t>(step) * o.batch + b];
        model.loss(&data.x[i * kInputs], data.y[i], grad.data(), scale);
      }
      pg->all_reduce(std::span<float>(grad), dlaunch::comm::ReduceOp::kAvg);
      model.sgd(grad, o.lr);
    }
    loss = full_loss(*pg, model, data, o.samples);
    if (rank == 0) {
      const std::chrono::duration<double> t = std::chrono::steady_clock::now() - start;
      std::printf("epoch %3d  loss %.6e  (%.2f s)\n", epoch, loss, t.count());
      std::fflush(stdout);
    }
  }

  // Every rank must hold exactly rank 0's parameters.
  const auto params = model.params();
  std::vector<float> all(params.size() * static_cast<std::size_t>(world));
  pg->all_gather(std::span<const float>(params), std::span<float>(all));
  int differing = 0;
  for (int r = 1; r < world; ++r) {
    const float* theirs = &all[params.size() * static_cast<std::size_t>(r)];
    // Bit for bit on purpose: replicas must agree exactly, NaNs included.
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
    if (std::memcmp(theirs, all.data(), params.size() * sizeof(float)) != 0) {
      ++differing;
      if (rank == 0 || rank == r) {
        std::size_t i = 0;
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
        while (std::memcmp(&theirs[i], &all[i], sizeof(float)) == 0) ++i;
        std::fprintf(stderr,
                     "train: rank %d: parameters of rank %d differ from rank 0's (first at index "
                     "%zu: %.9g vs %.9g)\n",
                     rank, r, i, static_cast<double>(theirs[i]), static_cast<double>(all[i]));
      }
    }
  }
  if (differing != 0) return 1;
  if (rank == 0) {
    std::printf(
        "train: loss %.6e -> %.6e (fell %.1fx); parameters identical on all %d ranks "
        "(%zu floats, bitwise)\n",
        initial, loss, initial / loss, world, params.size());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  std::unique_ptr<dlaunch::comm::ProcessGroup> pg;
  try {
    pg = dlaunch::comm::ProcessGroup::create(dlaunch::comm::parse_backend(options.backend));
  } catch (const dlaunch::comm::CommError& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return 2;
  }
  int rc = 0;
  try {
    Collectives collectives(*pg);
    rc = train(&collectives, options);
  } catch (const std::exception& e) {
    // The other ranks may wait in a collective for this one: leave without
    // finalising MPI, so that the launcher ends the whole job.
    std::fprintf(stderr, "train: %s\n", e.what());
    std::fflush(nullptr);
    std::_Exit(2);
  }
  pg.reset();
  return rc;
}
