// Store throughput: T client threads, each with its own connection, doing N
// rounds of set then get on keys of their own; prints ops/s (set and get each
// count as one op). bench/store.sh runs it next to PyTorch's TCPStore.
//
//   store_bench [--threads 64] [--ops 2000] [--value-bytes 32]
//               [--host H --port P --secret S]   (default: an in-process server)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"

int main(int argc, char** argv) {
  int threads = 64;
  int ops = 2000;
  size_t value_bytes = 32;
  dlaunch::comm::StoreOptions opts;
  opts.host = "127.0.0.1";
  opts.secret = "bench-secret";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "--threads")
      threads = std::atoi(v);
    else if (flag == "--ops")
      ops = std::atoi(v);
    else if (flag == "--value-bytes")
      value_bytes = std::strtoul(v, nullptr, 10);
    else if (flag == "--host")
      opts.host = v;
    else if (flag == "--port")
      opts.port = static_cast<uint16_t>(std::atoi(v));
    else if (flag == "--secret")
      opts.secret = v;
    else {
      std::fprintf(stderr, "store_bench: unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  if (threads < 1 || ops < 1) {
    std::fprintf(stderr, "store_bench: --threads and --ops must be positive\n");
    return 2;
  }

  std::unique_ptr<dlaunch::comm::ThreadedStoreServer> server;
  if (opts.port == 0) {
    dlaunch::comm::StoreServerOptions so;
    so.bind_address = "127.0.0.1";
    so.secret = opts.secret;
    server = std::make_unique<dlaunch::comm::ThreadedStoreServer>(so);
    opts.port = server->port();
  }

  const std::string value(value_bytes, 'v');
  std::latch connected(threads + 1);
  std::latch go(1);
  std::vector<std::thread> workers;
  std::vector<int> bad(static_cast<size_t>(threads), 0);
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      dlaunch::comm::Store store(opts);
      std::string prefix = "bench/" + std::to_string(t) + "/";
      connected.count_down();
      go.wait();
      for (int i = 0; i < ops; ++i) {
        std::string key = prefix + std::to_string(i);
        store.set(key, value);
        if (store.get(key) != value) ++bad[static_cast<size_t>(t)];
      }
    });
  }
  connected.arrive_and_wait();
  auto start = std::chrono::steady_clock::now();
  go.count_down();
  for (auto& w : workers) w.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  int errors = 0;
  for (int b : bad) errors += b;
  double total = 2.0 * threads * ops;
  std::printf("dlaunch store: %d threads x %d (set+get) = %.0f ops in %.3f s: %.0f ops/s\n",
              threads, ops, total, secs, total / secs);
  if (errors != 0) {
    std::fprintf(stderr, "store_bench: %d gets returned a wrong value\n", errors);
    return 1;
  }
  return 0;
}
