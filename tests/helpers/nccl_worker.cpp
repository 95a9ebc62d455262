// A worker for the NCCL backend's tests (tests/integration/nccl_test.cpp),
// started by dlaunch, one rank per GPU. Modes:
//   devices           print the number of visible CUDA devices, or the CUDA
//                     error (exit 1): the test's skip check
//   collectives       every operation x type x op the backend offers, on
//                     device buffers, checked against the values computed on
//                     the host; prints "nccl_worker: rank R: N checks passed"
//   stuck-init        rank 0 creates the group, the other ranks never do: the
//                     watchdog must end rank 0's set-up (exit 3, message)
//   stuck-connect     every rank creates the group, rank 1 then skips the
//                     first all_reduce and sleeps: rank 0's call never gets
//                     its connections set up, the watchdog must end it while
//                     NCCL still reports it in progress (exit 3, message)
//   stuck-collective  every rank creates the group and does one all_reduce
//                     (connections up), then rank 1 skips the second: rank
//                     0's kernel waits on the GPU for a peer that never
//                     comes, the watchdog must abort it (exit 3, message)
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "comm/nccl.h"
#include "comm/process_group.h"

namespace {

using dlaunch::comm::DataType;
using dlaunch::comm::ReduceOp;

int g_checks = 0;
int g_failures = 0;
int g_rank = 0;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "nccl_worker: rank %d: %s: %s\n", g_rank, what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// IEEE binary16 and bfloat16 bits of a float that is exactly representable
// in them (the tests use small integers and halves only).
std::uint16_t to_half(float f) {
  std::uint32_t b = 0;
  std::memcpy(&b, &f, 4);
  const std::uint32_t sign = (b >> 16) & 0x8000u;
  if ((b & 0x7fffffffu) == 0) return static_cast<std::uint16_t>(sign);
  const int exp = static_cast<int>((b >> 23) & 0xff) - 127 + 15;
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exp) << 10) |
                                    ((b >> 13) & 0x3ffu));
}
float from_half(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  if ((h & 0x7fffu) == 0) {
    float z = 0;
    std::uint32_t bits = sign;
    std::memcpy(&z, &bits, 4);
    return z;
  }
  const std::uint32_t exp = ((h >> 10) & 0x1fu) - 15 + 127;
  const std::uint32_t bits = sign | (exp << 23) | (static_cast<std::uint32_t>(h & 0x3ffu) << 13);
  float f = 0;
  std::memcpy(&f, &bits, 4);
  return f;
}
std::uint16_t to_bf16(float f) {
  std::uint32_t b = 0;
  std::memcpy(&b, &f, 4);
  return static_cast<std::uint16_t>(b >> 16);
}
float from_bf16(std::uint16_t h) {
  const std::uint32_t b = static_cast<std::uint32_t>(h) << 16;
  float f = 0;
  std::memcpy(&f, &b, 4);
  return f;
}

// Host image of `values` in `type`.
std::vector<unsigned char> encode(const std::vector<double>& values, DataType type) {
  const std::size_t esz = dlaunch::comm::element_size(type);
  std::vector<unsigned char> out(values.size() * esz);
  for (std::size_t i = 0; i < values.size(); ++i) {
    unsigned char* p = out.data() + i * esz;
    const double v = values[i];
    switch (type) {
      case DataType::kFloat32: {
        const auto x = static_cast<float>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(p, &v, 8);
        break;
      case DataType::kInt32: {
        const auto x = static_cast<std::int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kInt64: {
        const auto x = static_cast<std::int64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
      case DataType::kFloat16: {
        const auto x = to_half(static_cast<float>(v));
        std::memcpy(p, &x, 2);
        break;
      }
      case DataType::kBFloat16: {
        const auto x = to_bf16(static_cast<float>(v));
        std::memcpy(p, &x, 2);
        break;
      }
    }
  }
  return out;
}

std::vector<double> decode(const std::vector<unsigned char>& bytes, DataType type) {
  const std::size_t esz = dlaunch::comm::element_size(type);
  std::vector<double> out(bytes.size() / esz);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const unsigned char* p = bytes.data() + i * esz;
    switch (type) {
      case DataType::kFloat32: {
        float x = 0;
        std::memcpy(&x, p, 4);
        out[i] = x;
        break;
      }
      case DataType::kFloat64:
        std::memcpy(&out[i], p, 8);
        break;
      case DataType::kInt32: {
        std::int32_t x = 0;
        std::memcpy(&x, p, 4);
        out[i] = x;
        break;
      }
      case DataType::kInt64: {
        std::int64_t x = 0;
        std::memcpy(&x, p, 8);
        out[i] = static_cast<double>(x);
        break;
      }
      case DataType::kFloat16: {
        std::uint16_t x = 0;
        std::memcpy(&x, p, 2);
        out[i] = from_half(x);
        break;
      }
      case DataType::kBFloat16: {
        std::uint16_t x = 0;
        std::memcpy(&x, p, 2);
        out[i] = from_bf16(x);
        break;
      }
    }
  }
  return out;
}

// A device buffer holding `values` in `type`.
struct DeviceBuffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  DataType type;
  DeviceBuffer(std::size_t count, DataType t)
      : bytes(count * dlaunch::comm::element_size(t)), type(t) {
    cuda_ok(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void put(const std::vector<double>& values) {
    const auto host = encode(values, type);
    cuda_ok(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  std::vector<double> get() const {
    std::vector<unsigned char> host(bytes);
    cuda_ok(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return decode(host, type);
  }
};

void expect_values(const std::string& what, const std::vector<double>& got,
                   const std::vector<double>& want, double tolerance) {
  ++g_checks;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tolerance) {
      ++g_failures;
      std::fprintf(stderr, "nccl_worker: rank %d: %s: element %zu is %.9g, expected %.9g\n", g_rank,
                   what.c_str(), i, got[i], want[i]);
      return;
    }
  }
}

bool is_integer(DataType t) { return t == DataType::kInt32 || t == DataType::kInt64; }

// The value rank r contributes at index i: small integers, exact in every type.
double value(int r, std::size_t i) { return static_cast<double>((r + 1) * (1 + i % 7)); }

void collectives(dlaunch::comm::ProcessGroup& pg) {
  const int n = pg.size();
  const int me = pg.rank();
  const DataType types[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                            DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax};
  // 1027 elements: not a multiple of anything NCCL likes; 1<<20: several chunks.
  for (const std::size_t count : {std::size_t{1027}, std::size_t{1} << 20}) {
    for (DataType type : types) {
      const std::string tname = dlaunch::comm::to_string(type);
      for (ReduceOp op : ops) {
        std::vector<double> mine(count), want(count);
        for (std::size_t i = 0; i < count; ++i) {
          mine[i] = value(me, i);
          double sum = 0, lo = value(0, i), hi = value(0, i);
          for (int r = 0; r < n; ++r) {
            sum += value(r, i);
            lo = std::min(lo, value(r, i));
            hi = std::max(hi, value(r, i));
          }
          switch (op) {
            case ReduceOp::kSum:
              want[i] = sum;
              break;
            case ReduceOp::kAvg:
              want[i] = is_integer(type) ? std::trunc(sum / n) : sum / n;
              break;
            case ReduceOp::kMin:
              want[i] = lo;
              break;
            case ReduceOp::kMax:
              want[i] = hi;
              break;
          }
        }
        DeviceBuffer buf(count, type);
        buf.put(mine);
        pg.all_reduce(buf.p, count, type, op);
        // Averages of the 16-bit types are rounded to their precision.
        const double tol = type == DataType::kFloat16    ? 0.05 * n
                           : type == DataType::kBFloat16 ? 0.3 * n
                           : is_integer(type)            ? 0
                                                         : 1e-3;
        expect_values("all_reduce(" + tname + ", " + std::to_string(count) + ", " +
                          dlaunch::comm::to_string(op) + ")",
                      buf.get(), want, tol);
      }
      // broadcast from the last rank
      {
        std::vector<double> mine(count), want(count);
        for (std::size_t i = 0; i < count; ++i) {
          mine[i] = value(me, i);
          want[i] = value(n - 1, i);
        }
        DeviceBuffer buf(count, type);
        buf.put(mine);
        pg.broadcast(buf.p, count, type, n - 1);
        expect_values("broadcast(" + tname + ", root " + std::to_string(n - 1) + ")", buf.get(),
                      want, 0);
      }
      // all_gather, separate buffers and in place
      for (const bool in_place : {false, true}) {
        std::vector<double> mine(count), want(count * static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < count; ++i) mine[i] = value(me, i);
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < count; ++i)
            want[static_cast<std::size_t>(r) * count + i] = value(r, i);
        DeviceBuffer recv(count * static_cast<std::size_t>(n), type);
        DeviceBuffer send(count, type);
        const std::size_t esz = dlaunch::comm::element_size(type);
        void* own = static_cast<char*>(recv.p) + static_cast<std::size_t>(me) * count * esz;
        if (in_place) {
          const auto host = encode(mine, type);
          cuda_ok(cudaMemcpy(own, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
        } else {
          send.put(mine);
        }
        pg.all_gather(in_place ? own : send.p, recv.p, count, type);
        expect_values("all_gather(" + tname + (in_place ? ", in place)" : ")"), recv.get(), want,
                      0);
      }
      // reduce_scatter (sum): block r of the sum lands on rank r
      {
        const std::size_t total = count * static_cast<std::size_t>(n);
        std::vector<double> mine(total), want(count);
        for (std::size_t i = 0; i < total; ++i) mine[i] = value(me, i);
        for (std::size_t i = 0; i < count; ++i) {
          const std::size_t g = static_cast<std::size_t>(me) * count + i;
          double sum = 0;
          for (int r = 0; r < n; ++r) sum += value(r, g);
          want[i] = sum;
        }
        DeviceBuffer send(total, type), recv(count, type);
        send.put(mine);
        pg.reduce_scatter(send.p, recv.p, count, type, ReduceOp::kSum);
        expect_values("reduce_scatter(" + tname + ", sum)", recv.get(), want, 0);
      }
    }
  }
  pg.barrier();
  ++g_checks;
  // send/recv: even ranks send to the next, odd ones receive first (NCCL's
  // send waits for the matching receive).
  if (n > 1) {
    const std::size_t count = 4099;
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    std::vector<double> mine(count), want(count);
    for (std::size_t i = 0; i < count; ++i) {
      mine[i] = value(me, i);
      want[i] = value(prev, i);
    }
    DeviceBuffer out(count, DataType::kFloat32), in(count, DataType::kFloat32);
    out.put(mine);
    if (me % 2 == 0) {
      pg.send(out.p, count, DataType::kFloat32, next, 0);
      pg.recv(in.p, count, DataType::kFloat32, prev, 0);
    } else {
      pg.recv(in.p, count, DataType::kFloat32, prev, 0);
      pg.send(out.p, count, DataType::kFloat32, next, 0);
    }
    expect_values("send/recv ring", in.get(), want, 0);
  }
  // Host memory is refused with a message, before NCCL sees it.
  std::vector<float> host(16, 1.0f);
  ++g_checks;
  try {
    pg.all_reduce(host.data(), host.size(), DataType::kFloat32, ReduceOp::kSum);
    ++g_failures;
    std::fprintf(stderr, "nccl_worker: rank %d: all_reduce on host memory did not throw\n", me);
  } catch (const dlaunch::comm::CommError& e) {
    if (std::strstr(e.what(), "host memory") == nullptr) {
      ++g_failures;
      std::fprintf(stderr, "nccl_worker: rank %d: unexpected message: %s\n", me, e.what());
    }
  }
  // The direct-NCCL escape hatch is the group's own communicator and stream.
  ++g_checks;
  if (dlaunch::comm::nccl_communicator(pg) == nullptr ||
      dlaunch::comm::cuda_device(pg) != pg.local_rank()) {
    ++g_failures;
    std::fprintf(stderr, "nccl_worker: rank %d: nccl_communicator/cuda_device wrong\n", me);
  }
  // A direct NCCL call on that non-blocking communicator, posted through
  // nccl_check (which waits out ncclInProgress), then comm's calls again.
  {
    const std::size_t count = 1 << 16;
    std::vector<double> mine(count), want(count);
    for (std::size_t i = 0; i < count; ++i) {
      mine[i] = value(me, i);
      double sum = 0;
      for (int r = 0; r < n; ++r) sum += value(r, i);
      want[i] = sum;
    }
    DeviceBuffer buf(count, DataType::kFloat32);
    buf.put(mine);
    dlaunch::comm::nccl_check(
        pg,
        ncclAllReduce(buf.p, buf.p, count, ncclFloat32, ncclSum,
                      dlaunch::comm::nccl_communicator(pg), dlaunch::comm::nccl_stream(pg)),
        "ncclAllReduce");
    cuda_ok(cudaStreamSynchronize(dlaunch::comm::nccl_stream(pg)), "cudaStreamSynchronize");
    expect_values("direct ncclAllReduce through nccl_check", buf.get(), want, 0);
    pg.barrier();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "devices") {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      std::printf("%s: %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
      return 1;
    }
    std::printf("%d\n", count);
    return 0;
  }
  if (mode != "collectives" && mode != "stuck-init" && mode != "stuck-connect" &&
      mode != "stuck-collective") {
    std::fprintf(stderr,
                 "usage: nccl_worker devices|collectives|stuck-init|stuck-connect|"
                 "stuck-collective\n");
    return 2;
  }
  const char* rank_env = std::getenv("RANK");
  g_rank = rank_env != nullptr ? std::atoi(rank_env) : 0;
  if (mode == "stuck-init" && g_rank != 0) {
    std::this_thread::sleep_for(std::chrono::minutes(10));
    return 0;
  }
  try {
    auto pg = dlaunch::comm::ProcessGroup::create(dlaunch::comm::Backend::kNccl);
    if (mode == "collectives") {
      collectives(*pg);
      if (g_failures != 0) {
        std::fprintf(stderr, "nccl_worker: rank %d: %d of %d checks failed\n", g_rank, g_failures,
                     g_checks);
        return 1;
      }
      std::printf("nccl_worker: rank %d: %d checks passed on device %d of a world of %d\n", g_rank,
                  g_checks, dlaunch::comm::cuda_device(*pg), pg->size());
      return 0;
    }
    if (mode == "stuck-connect" || mode == "stuck-collective") {
      float* d = nullptr;
      cuda_ok(cudaMalloc(reinterpret_cast<void**>(&d), 1024 * sizeof(float)), "cudaMalloc");
      if (mode == "stuck-collective") {
        pg->all_reduce(d, 1024, DataType::kFloat32, ReduceOp::kSum);
        std::fprintf(stderr, "nccl_worker: rank %d: the first all_reduce completed\n", g_rank);
      }
      if (g_rank == 1) {
        std::this_thread::sleep_for(std::chrono::minutes(10));
        return 0;
      }
      pg->all_reduce(d, 1024, DataType::kFloat32, ReduceOp::kSum);
      std::fprintf(stderr, "nccl_worker: rank %d: all_reduce returned without rank 1\n", g_rank);
      return 1;
    }
    std::fprintf(stderr, "nccl_worker: rank %d: set-up returned without the other ranks\n", g_rank);
    return 1;
  } catch (const dlaunch::comm::CommError& e) {
    std::fprintf(stderr, "nccl_worker: %s\n", e.what());
    std::fflush(stderr);
    return 3;
  }
}
