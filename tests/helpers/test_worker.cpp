// test_worker: a worker with scripted behaviour for the integration tests.
// Every mode reads RANK from the environment.
//   lines N WIDTH   print N lines "<rank> <seq> <payload>" (line = WIDTH bytes)
//   ready-sleep S   print "ready <rank>" then sleep S seconds
//   exit CODE       exit with CODE
//   fail-rank R CODE SLEEP   rank R writes to stderr and exits CODE, others sleep
//   segv-rank R SLEEP        rank R dies of SIGSEGV, others sleep
//   grandchild S    fork a child that sleeps S s (and one that leaves the
//                   process group), print "ready <rank>", sleep S
//   ignore-term S   ignore SIGTERM, print "ready <rank>", sleep S
//   store-exchange  every rank publishes a key in the job's comm store, waits
//                   at a barrier and reads every other rank's key
//   bind-master-port  rank 0 binds and listens on MASTER_PORT as PyTorch's
//                     TCPStore does, prints "bound"
//   usr1-exit CODE S  print "ready <rank>", sleep S; on SIGUSR1 say so on
//                     stderr and exit CODE (a fault the test triggers at a known time)
//   stubborn-child S  fork a child that ignores SIGTERM (in the worker's
//                     process group), print "ready <rank>", sleep S; on SIGUSR1
//                     exit 3
//   partial-spin MS   print "begin-" (no newline), keep a CPU busy for MS ms,
//                     then print "end\n": runnable all along, never quiet
//   partial-sleep MS  print "prompt> " (no newline), sleep MS ms, print
//                     "answer\n": quiet, as a program waiting for input is
//   paced N RATE      print N lines "<rank> <seq>" at about RATE lines/s (a
//                     batch every 10 ms), then flush and exit 0 (1 if a write failed)
//   slow-read KBPS    not a worker: read stdin to its end at most KBPS kB/s,
//                     discard it (a slow consumer of dlaunch's stdout)
//   progress-truncate R S  rank R maps its progress memory (--stall-timeout,
//                     DLAUNCH_PROGRESS_FD), tries to truncate it to 0 and to
//                     grow it, prints what happened, then adds one to its
//                     counter every 50 ms for S s without a line; the others
//                     sleep S s; every rank prints "done <rank>"
//   progress-scribble R S CODE  rank R writes garbage into its progress
//                     memory where comm never writes; every rank sleeps S s
//                     without a line, then rank R exits CODE, the others 0
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "comm/store.h"

namespace {

int rank() {
  const char* r = std::getenv("RANK");
  return r != nullptr ? std::atoi(r) : -1;
}

void sleep_s(double s) { ::usleep(static_cast<useconds_t>(s * 1e6)); }

volatile sig_atomic_t g_usr1_code = 0;

void on_usr1(int) {
  static const char msg[] = "test_worker: SIGUSR1, exiting\n";
  (void)!::write(2, msg, sizeof msg - 1);
  ::_exit(g_usr1_code);
}

void exit_on_usr1(int code) {
  g_usr1_code = code;
  ::signal(SIGUSR1, on_usr1);
}

void ready() {
  std::printf("ready %d\n", rank());
  std::fflush(stdout);
}

int lines(long n, int width) {
  const int r = rank();
  std::string line;
  for (long i = 0; i < n; ++i) {
    char head[64];
    int len = std::snprintf(head, sizeof head, "%d %ld ", r, i);
    line.assign(head, static_cast<std::size_t>(len));
    const int fill = width - len - 1;
    for (int k = 0; k < fill; ++k) line.push_back(static_cast<char>('a' + (i + k) % 26));
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int paced(long n, long rate) {
  const int r = rank();
  const long per_batch = std::max(1L, rate / 100);
  const auto begin = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    std::printf("%d %ld\n", r, i);
    if ((i + 1) % per_batch == 0) {
      if (std::fflush(stdout) != 0) return 1;
      std::this_thread::sleep_until(begin + std::chrono::milliseconds(10 * ((i + 1) / per_batch)));
    }
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

// This rank's progress memory, mapped as comm maps it; nullptr when the
// agent gave it none (no --stall-timeout).
std::uint64_t* map_progress(int& fd) {
  const char* v = std::getenv("DLAUNCH_PROGRESS_FD");
  fd = v != nullptr ? std::atoi(v) : -1;
  if (fd < 3) return nullptr;
  void* p = ::mmap(nullptr, 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<std::uint64_t*>(p);
}

std::string outcome(int rc) { return rc == 0 ? "done" : std::strerror(errno); }

int progress_truncate(int target, double seconds) {
  if (rank() == target) {
    int fd = -1;
    std::uint64_t* counter = map_progress(fd);
    if (counter == nullptr) {
      std::fprintf(stderr, "rank %d: no progress memory\n", rank());
      return 3;
    }
    const std::string shrink = outcome(::ftruncate(fd, 0));
    const std::string grow = outcome(::ftruncate(fd, 1 << 20));
    std::printf("rank %d: truncate: %s; grow: %s\n", rank(), shrink.c_str(), grow.c_str());
    std::fflush(stdout);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      std::atomic_ref<std::uint64_t>(*counter).fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } else {
    sleep_s(seconds);
  }
  std::printf("done %d\n", rank());
  return 0;
}

int progress_scribble(int target, double seconds, int code) {
  if (rank() == target) {
    int fd = -1;
    std::uint64_t* counter = map_progress(fd);
    if (counter == nullptr) {
      std::fprintf(stderr, "rank %d: no progress memory\n", rank());
      return 3;
    }
    std::memset(counter + 1, 0xa5, 56);
  }
  sleep_s(seconds);
  return rank() == target ? code : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string mode = argv[1];
  if (mode == "lines" && argc == 4) return lines(std::atol(argv[2]), std::atoi(argv[3]));
  if (mode == "paced" && argc == 4) return paced(std::atol(argv[2]), std::atol(argv[3]));
  if (mode == "ready-sleep" && argc == 3) {
    ready();
    sleep_s(std::atof(argv[2]));
    return 0;
  }
  if (mode == "exit" && argc == 3) return std::atoi(argv[2]);
  if (mode == "progress-truncate" && argc == 4)
    return progress_truncate(std::atoi(argv[2]), std::atof(argv[3]));
  if (mode == "progress-scribble" && argc == 5)
    return progress_scribble(std::atoi(argv[2]), std::atof(argv[3]), std::atoi(argv[4]));
  if ((mode == "partial-spin" || mode == "partial-sleep") && argc == 3) {
    const bool spin = mode == "partial-spin";
    std::fputs(spin ? "begin-" : "prompt> ", stdout);
    std::fflush(stdout);
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(std::atoi(argv[2]));
    if (spin) {
      volatile unsigned long x = 0;
      while (std::chrono::steady_clock::now() < until) x = x + 1;
    } else {
      std::this_thread::sleep_until(until);
    }
    std::fputs(spin ? "end\n" : "answer\n", stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  if (mode == "fail-rank" && argc == 5) {
    if (rank() == std::atoi(argv[2])) {
      std::fprintf(stderr, "rank %d: something went wrong\nlast words of rank %d\n", rank(),
                   rank());
      return std::atoi(argv[3]);
    }
    ready();
    sleep_s(std::atof(argv[4]));
    return 0;
  }
  if (mode == "segv-rank" && argc == 4) {
    if (rank() == std::atoi(argv[2])) {
      sleep_s(0.2);
      ::signal(SIGSEGV, SIG_DFL);  // sanitizer builds install their own handler
      ::raise(SIGSEGV);
    }
    ready();
    sleep_s(std::atof(argv[3]));
    return 0;
  }
  if (mode == "grandchild" && argc == 3) {
    const double s = std::atof(argv[2]);
    if (::fork() == 0) {
      sleep_s(s);
      ::_exit(0);
    }
    const pid_t middle = ::fork();
    if (middle == 0) {
      ::setsid();  // leaves the worker's process group: only the sweep finds it
      if (::fork() == 0) {
        sleep_s(s);
        ::_exit(0);
      }
      ::_exit(0);
    }
    int status;
    ::waitpid(middle, &status, 0);  // its child exists once it has exited
    ready();
    sleep_s(s);
    return 0;
  }
  if (mode == "ignore-term" && argc == 3) {
    ::signal(SIGTERM, SIG_IGN);
    ready();
    sleep_s(std::atof(argv[2]));
    return 0;
  }
  if (mode == "usr1-exit" && argc == 4) {
    exit_on_usr1(std::atoi(argv[2]));
    ready();
    sleep_s(std::atof(argv[3]));
    return 0;
  }
  if (mode == "stubborn-child" && argc == 3) {
    const double s = std::atof(argv[2]);
    if (::fork() == 0) {
      ::signal(SIGTERM, SIG_IGN);
      sleep_s(s);
      ::_exit(0);
    }
    exit_on_usr1(3);
    ready();
    sleep_s(s);
    return 0;
  }
  if (mode == "slow-read" && argc == 3) {
    const double bytes_per_s = std::atof(argv[2]) * 1000.0;
    const auto start = std::chrono::steady_clock::now();
    char buf[16384];
    long long total = 0;
    for (;;) {
      const ssize_t n = ::read(0, buf, sizeof buf);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        return 1;
      }
      total += n;
      const double due = static_cast<double>(total) / bytes_per_s;
      const double spent =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (due > spent) sleep_s(due - spent);
    }
    std::fprintf(stderr, "slow-read: %lld bytes\n", total);
    return 0;
  }
  if (mode == "store-exchange") {
    try {
      auto store = dlaunch::comm::Store::from_env();
      const int n = std::atoi(std::getenv("WORLD_SIZE"));
      store.set("rank/" + std::to_string(rank()), "hello from " + std::to_string(rank()));
      store.barrier("exchange", n, std::chrono::seconds(30));
      for (int r = 0; r < n; ++r) {
        if (store.get("rank/" + std::to_string(r)) != "hello from " + std::to_string(r)) return 1;
      }
      const auto total = store.add("arrivals", 1);
      std::printf("rank %d read %d keys (arrival %lld)\n", rank(), n,
                  static_cast<long long>(total));
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "store-exchange: %s\n", e.what());
      return 1;
    }
  }
  if (mode == "bind-master-port") {
    if (rank() != 0) return 0;
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(std::getenv("MASTER_PORT"))));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 8) != 0) {
      std::perror("bind MASTER_PORT");
      return 1;
    }
    std::printf("bound\n");
    return 0;
  }
  std::fprintf(stderr, "test_worker: bad arguments\n");
  return 2;
}
