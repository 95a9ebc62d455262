// The job store next to a connection flood (issue 15 item 2), in one run:
// how long a client of the job takes to connect, authenticate, set and get
// on a quiet store; with one core kept busy by another user (control); while
// another user holds N connections that never authenticate (the report's
// flood); while that user reopens at once every connection the store drops
// (a storm); and the same storm aimed at another port of the machine (the
// floor any listener pays). bench/store-flood.sh runs it as the store is and
// as it was (--before: no caps, ten seconds to authenticate, no look at who
// connects, the inherited descriptor limit).
//
//   store_flood_bench [--rounds 200] [--flood 1100] [--before]
//
// Prints each phase's median and 99th percentile with its ratio to the quiet
// phase, and how many rounds failed (a client that got no answer in 10 s).
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Phase {
  std::vector<double> ms;
  int failed = 0;
};

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

Phase measure(const dlaunch::comm::StoreOptions& opts, int rounds) {
  Phase p;
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    try {
      dlaunch::comm::Store client(opts);
      client.set("k", "v");
      if (client.get("k") != "v") ++p.failed;
      p.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    } catch (const std::exception& e) {
      ++p.failed;
    }
  }
  return p;
}

// A process that holds `n` connections to the port that never authenticate
// and reopens those the server drops, as `uid` when that is given (as root:
// another user of the machine). Counts the connections it made.
class Flooder {
 public:
  Flooder(std::uint16_t port, int n, bool reopen, std::optional<uid_t> uid) {
    int ctl[2], result[2];
    if (::pipe2(ctl, O_CLOEXEC) != 0 || ::pipe2(result, O_CLOEXEC) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ctl[1]);
      ::close(result[0]);
      if (uid && (::setgroups(0, nullptr) != 0 || ::setresgid(*uid, *uid, *uid) != 0 ||
                  ::setresuid(*uid, *uid, *uid) != 0)) {
        ::_exit(3);
      }
      const long opened = run(port, n, reopen, ctl[0]);
      (void)!::write(result[1], &opened, sizeof opened);
      ::_exit(0);
    }
    ::close(ctl[0]);
    ::close(result[1]);
    ctl_ = ctl[1];
    result_ = result[0];
  }
  // Stops the flood; the connections it opened.
  long stop() {
    ::close(ctl_);
    long opened = 0;
    if (::read(result_, &opened, sizeof opened) != static_cast<ssize_t>(sizeof opened)) opened = -1;
    ::close(result_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    return opened;
  }

 private:
  static int open_one(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  static long run(std::uint16_t port, int n, bool reopen, int ctl) {
    std::vector<int> fds;
    long opened = 0;
    for (bool first = true;; first = false) {
      while ((first || reopen) && static_cast<int>(fds.size()) < n) {
        const int fd = open_one(port);
        if (fd < 0) break;
        fds.push_back(fd);
        ++opened;
      }
      // Whatever the server hung up on is replaced on the next pass.
      std::vector<pollfd> p{{ctl, POLLIN, 0}};
      for (int fd : fds) p.push_back({fd, POLLIN, 0});
      ::poll(p.data(), p.size(), 1);
      if (p[0].revents != 0) break;  // the parent closed the pipe: stop
      std::vector<int> kept;
      char buf[256];
      for (std::size_t i = 1; i < p.size(); ++i) {
        const auto& e = p[i];
        if ((e.revents & (POLLHUP | POLLERR)) != 0 ||
            ((e.revents & POLLIN) != 0 && ::recv(e.fd, buf, sizeof buf, MSG_DONTWAIT) == 0)) {
          ::close(e.fd);
        } else {
          kept.push_back(e.fd);
        }
      }
      fds = std::move(kept);
    }
    return opened;
  }

  pid_t pid_ = -1;
  int ctl_ = -1;
  int result_ = -1;
};

}  // namespace

// A process that keeps one core busy for as long as it lives, as `uid`: the
// control for the flood (what the flooder's CPU alone costs the store).
class Spinner {
 public:
  explicit Spinner(std::optional<uid_t> uid) {
    pid_ = ::fork();
    if (pid_ == 0) {
      if (uid) (void)!::setresuid(*uid, *uid, *uid);
      volatile unsigned long x = 0;
      for (;;) x = x + 1;
    }
  }
  ~Spinner() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }

 private:
  pid_t pid_ = -1;
};

// A listener that is no store: it accepts and closes. A storm of connections
// against it is the control for a storm against the store (what any
// listening port of this machine costs under one).
class Sink {
 public:
  Sink() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 4096) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      std::abort();
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 10) <= 0) continue;
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) ::close(c);
      }
    });
  }
  ~Sink() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

void print_phase(const char* name, const Phase& p, const Phase& quiet) {
  const double m = quantile(p.ms, 0.5), p99 = quantile(p.ms, 0.99);
  const double qm = quantile(quiet.ms, 0.5), q99 = quantile(quiet.ms, 0.99);
  std::printf("  %-17s median %7.3f ms (x%.2f)  p99 %8.3f ms (x%.2f)  failed %d\n", name, m,
              qm > 0 ? m / qm : 0, p99, q99 > 0 ? p99 / q99 : 0, p.failed);
}

int main(int argc, char** argv) {
  int rounds = 200;
  int flood = 1100;
  bool before = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--before") {
      before = true;
    } else if (flag == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (flag == "--flood" && i + 1 < argc) {
      flood = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: store_flood_bench [--rounds N] [--flood N] [--before]\n");
      return 2;
    }
  }
  dlaunch::comm::StoreServerOptions so;
  so.bind_address = "127.0.0.1";
  so.secret = "flood-bench-secret";
  if (before) {
    // The store as it was: no limits on connections still in the challenge,
    // ten seconds to answer it, no look at who connects, and the descriptors
    // of whatever soft limit it inherited.
    so.max_unauthenticated = so.max_connections;
    so.max_unauthenticated_per_source = so.max_connections;
    so.auth_timeout = std::chrono::milliseconds(10000);
    so.refuse_other_local_users = false;
  } else {
    // As dlaunch-agent does at start: the soft descriptor limit raised to the hard one.
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  // As node 0's agent does: the workers of its machine connect over a Unix
  // socket in a private folder (DLAUNCH_STORE_PATH).
  std::string dir = "/tmp/store-flood-bench.XXXXXX";
  if (!before) {
    if (::mkdtemp(dir.data()) == nullptr) return 1;
    so.unix_path = dir + "/store.sock";
  }
  dlaunch::comm::ThreadedStoreServer server(so);
  dlaunch::comm::StoreOptions co;
  co.host = "127.0.0.1";
  co.port = server.port();
  co.secret = so.secret;
  co.unix_path = so.unix_path;
  co.connect_timeout = std::chrono::seconds(10);
  co.timeout = std::chrono::seconds(10);

  // As root, the neighbours are another user (nobody), as a hostile user of
  // the machine would be; otherwise this user.
  const std::optional<uid_t> other = ::geteuid() == 0 ? std::optional<uid_t>(65534) : std::nullopt;
  measure(co, rounds / 4 + 1);  // warm-up: first connections, page faults
  const Phase quiet = measure(co, rounds);
  Phase busy;
  {
    Spinner spin(other);
    busy = measure(co, rounds);
  }
  // The flood as the report found it: connections opened and held.
  Phase held;
  long held_opened = 0;
  {
    Flooder f(server.port(), flood, false, other);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    held = measure(co, rounds);
    held_opened = f.stop();
  }
  // An attacker that reopens every connection the store drops, at full speed.
  Phase storm;
  long storm_opened = 0;
  {
    Flooder f(server.port(), flood, true, other);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    storm = measure(co, rounds);
    storm_opened = f.stop();
  }
  // The same storm against a listener that is no store: the machine's floor.
  Phase control;
  {
    Sink sink;
    Flooder f(sink.port(), flood, true, other);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    control = measure(co, rounds);
    f.stop();
  }
  if (!before) {
    ::unlink(so.unix_path.c_str());
    ::rmdir(dir.c_str());
  }
  std::printf(
      "store %s, soft descriptor limit %llu; %d rounds of connect+auth+set+get per "
      "phase; neighbours run as %s\n",
      before ? "as before (TCP only, no caps on connections in the challenge)"
             : "as now (the job's clients on the Unix socket, the flood at TCP)",
      static_cast<unsigned long long>(rl.rlim_cur), rounds,
      other ? "another user (uid 65534)" : "this user");
  print_phase("quiet:", quiet, quiet);
  print_phase("one core busy:", busy, quiet);
  print_phase("flood, held:", held, quiet);
  print_phase("flood, storm:", storm, quiet);
  print_phase("storm elsewhere:", control, quiet);
  std::printf(
      "  (flood: %d connections that never authenticate; held: opened once (%ld); storm: "
      "each one dropped reopened at once (%ld opened); storm elsewhere: the same storm "
      "at another port of this machine)\n",
      flood, held_opened, storm_opened);
  return quiet.failed + busy.failed + held.failed + storm.failed + control.failed == 0 ? 0 : 1;
}
