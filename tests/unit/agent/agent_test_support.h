// An Agent with nothing real under it: the test is the head at the other end
// of a socketpair, the operating system is a fake that records spawns and
// signals and plays the workers' exits, and the clock moves by hand. Worker
// output goes through real pipes (the fake keeps their write ends).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "../seams/manual_clock.h"
#include "../seams/messages_of.h"
#include "agent.h"
#include "dlaunch/proto/protocol.h"
#include "dlaunch/tunables.h"
#include "os.h"

namespace dltest {

// Whether a worker's environment has exactly this NAME=VALUE entry.
inline bool has_entry(const std::vector<std::string>& env, const std::string& entry) {
  return std::find(env.begin(), env.end(), entry) != env.end();
}

namespace proto = dlaunch::proto;

class FakeGuard final : public dlaunch::agent::GuardLink {
 public:
  void watch_process_group(pid_t pgid) override { groups.push_back(pgid); }
  void remove_on_death(const std::string& dir) override { dirs.push_back(dir); }
  void kill_cgroup_on_death(const std::string& cg) override { cgroups.push_back(cg); }
  void run_on_death(const std::vector<std::string>& argv) override { commands.push_back(argv); }
  std::vector<std::vector<std::string>> commands;
  std::vector<std::string> cgroups;
  void disarm() override { disarmed = true; }
  pid_t pid() const override { return 4242; }
  std::vector<pid_t> groups;
  std::vector<std::string> dirs;
  bool disarmed = false;
};

class FakeOs final : public dlaunch::agent::AgentOs {
 public:
  struct Signal {
    pid_t target;
    int sig;
    bool group;
  };
  struct Proc {
    pid_t pid;
    std::vector<std::string> argv;
    std::vector<std::string> env;
    std::vector<int> cpus;  // SpawnOptions::cpus: what the child would bind to
    int out = -1;           // write ends of the worker's stdout/stderr pipes
    int err = -1;
    bool exited = false;
  };

  ~FakeOs() override {
    for (auto& p : procs) close_pipes(p);
  }

  void become_subreaper() override { subreaper = true; }
  std::unique_ptr<dlaunch::agent::GuardLink> start_guard(const std::string&) override {
    auto g = std::make_unique<FakeGuard>();
    guard = g.get();
    return g;
  }
  dlaunch::SpawnResult spawn(const dlaunch::SpawnOptions& opts) override {
    if (!spawn_error.empty()) return dlaunch::SpawnResult::failure(spawn_error);
    Proc p{.pid = next_pid++, .argv = opts.argv, .env = opts.env, .cpus = opts.cpus};
    p.out = ::fcntl(opts.stdout_fd, F_DUPFD_CLOEXEC, 3);
    p.err = ::fcntl(opts.stderr_fd, F_DUPFD_CLOEXEC, 3);
    procs.push_back(p);
    return p.pid;
  }
  void signal_group(pid_t pgid, int sig) override {
    signals.push_back({pgid, sig, true});
    if (sig == SIGKILL || (sig == SIGTERM && !ignore_sigterm)) exit(pgid, sig, true);
  }
  void signal(pid_t pid, int sig) override {
    signals.push_back({pid, sig, false});
    if (sig == SIGKILL || (sig == SIGTERM && !leftovers_ignore_sigterm)) {
      std::erase(leftover, pid);
      std::erase(in_cgroup, pid);
    }
  }
  // Recorded as a signal to the process (the tests do not tell threads apart).
  void signal_main_thread(pid_t pid, int sig) override { signals.push_back({pid, sig, false}); }
  std::vector<pid_t> descendants() override {
    std::vector<pid_t> out = leftover;
    for (const auto& p : procs)
      if (!p.exited) out.push_back(p.pid);
    if (guard != nullptr) out.push_back(guard->pid());
    return out;
  }
  pid_t process_group(pid_t pid) override {
    for (const auto& p : procs)
      if (p.pid == pid) return p.exited ? -1 : p.pid;  // workers lead their own group
    return std::find(leftover.begin(), leftover.end(), pid) != leftover.end() ? pid : -1;
  }
  std::vector<std::pair<pid_t, int>> reap() override { return std::exchange(zombies, {}); }
  char process_state(pid_t) override { return 'S'; }
  std::string make_private_dir(const std::string& prefix) override {
    if (private_base.empty()) return "/nonexistent/" + prefix + "XXXXXX";
    std::string path = private_base + "/" + prefix + "XXXXXX";
    if (::mkdtemp(path.data()) == nullptr) return {};
    return path;
  }
  // Where make_private_dir makes real folders (mkdtemp, 0700); none: names only.
  std::string private_base;
  void remove_dir(const std::string& dir) override { removed.push_back(dir); }
  // No cgroup unless a test gives one: then `in_cgroup` are its members.
  dlaunch::Result<std::string> make_cgroup(const std::string& name) override {
    if (!cgroups_work) return dlaunch::Result<std::string>::failure("no cgroups in this test");
    return "/fake/cgroup/" + name;
  }
  std::vector<pid_t> cgroup_members(const std::string&) override { return in_cgroup; }
  void kill_cgroup(const std::string& cg) override {
    cgroup_killed.push_back(cg);
    in_cgroup.clear();
  }
  bool remove_cgroup(const std::string& cg) override {
    if (!in_cgroup.empty()) return false;
    cgroup_removed.push_back(cg);
    return true;
  }
  dlaunch::Result<pid_t> spawn_in(const dlaunch::SpawnOptions& opts,
                                  const std::string& cg) override {
    spawned_in.push_back(cg);
    return spawn(opts);
  }
  std::vector<proto::Interface> interfaces() override { return ifaces; }
  std::string route_interface(const std::string& address) override {
    routed.push_back(address);
    return route;
  }
  std::vector<proto::Interface> ifaces;  // what the machine has
  std::string route;                     // the interface toward any address
  std::vector<std::string> routed;       // the addresses asked about

  std::string boot_id() override { return boot; }
  dlaunch::ProcessRef parent() override { return parent_ref; }
  std::optional<std::int64_t> run_delay_ns(const dlaunch::ProcessRef& p) override {
    const auto it = delays.find(p.pid);
    if (it == delays.end()) return std::nullopt;
    return it->second;
  }
  std::string boot = "boot-of-the-test";
  NodeFacts node_facts(const std::string& workdir, bool count_gpus,
                       std::uint32_t gpu_test_mb) override {
    facts_asked.emplace_back(workdir, count_gpus);
    gpu_test_asked.push_back(gpu_test_mb);
    return node;
  }
  NodeFacts node;  // what --check reads of the node
  std::vector<std::pair<std::string, bool>> facts_asked;
  std::vector<std::uint32_t> gpu_test_asked;  // Setup.gpu_test_mb of each
  dlaunch::ProcessRef parent_ref;             // none unless a test sets one
  std::map<long, std::int64_t> delays;        // pid -> ns waited for a CPU

  bool cgroups_work = false;
  std::vector<pid_t> in_cgroup;
  std::vector<std::string> cgroup_killed, cgroup_removed, spawned_in;

  // Worker `pid` ends: by signal `sig` (signaled) or with exit code `sig`.
  void exit(pid_t pid, int code_or_sig, bool signaled) {
    for (auto& p : procs) {
      if (p.pid != pid || p.exited) continue;
      p.exited = true;
      close_pipes(p);
      zombies.emplace_back(pid, signaled ? code_or_sig : (code_or_sig << 8));
    }
  }
  Proc& proc(std::size_t i) { return procs.at(i); }
  // Signals of one kind sent so far.
  int count(int sig, bool group) const {
    return static_cast<int>(std::count_if(signals.begin(), signals.end(), [&](const Signal& s) {
      return s.sig == sig && s.group == group;
    }));
  }

  bool subreaper = false;
  FakeGuard* guard = nullptr;
  std::vector<Proc> procs;
  std::vector<Signal> signals;
  std::vector<pid_t> leftover;  // descendants that are no workers
  std::vector<std::pair<pid_t, int>> zombies;
  std::vector<std::string> removed;
  std::string spawn_error;
  bool ignore_sigterm = false;            // workers
  bool leftovers_ignore_sigterm = false;  // leftovers
  pid_t next_pid = 5000;

 private:
  static void close_pipes(Proc& p) {
    if (p.out >= 0) ::close(p.out);
    if (p.err >= 0) ::close(p.err);
    p.out = p.err = -1;
  }
};

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    head_ = sv[1];
    agent_ = std::make_unique<dlaunch::agent::Agent>(
        dlaunch::agent::AgentEnv{.io = io_, .os = os_, .clock = clock_}, ::dup(sv[0]), sv[0]);
    agent_->start();
    pump();
    ASSERT_EQ(got<proto::Hello>().size(), 1u);
  }
  void TearDown() override {
    agent_.reset();
    if (head_ >= 0) ::close(head_);
  }

  // The head's Setup and Start for `ranks` workers running `/bin/true`.
  proto::Setup setup_for(int ranks) {
    proto::Setup s;
    s.job_id = "t";
    s.node_rank = 1;
    s.kill_grace_ms = 2000;
    s.heartbeat_timeout_ms = 3000;
    s.heartbeat_interval_ms = 1000;
    s.flush_ms = 100;
    s.workdir = "/";
    for (int r = 0; r < ranks; ++r) {
      s.workers.push_back(proto::WorkerSpec{.rank = r, .local_rank = r, .argv = {"/bin/true"}});
    }
    return s;
  }
  void start_workers(int ranks, std::optional<proto::Setup> setup = std::nullopt) {
    send(setup ? *setup : setup_for(ranks));
    ASSERT_EQ(got<proto::Ready>().size(), 1u);
    send(proto::Start{});
    ASSERT_EQ(got<proto::Started>().size(), static_cast<std::size_t>(ranks));
  }

  // As the head: one message to the agent, then let it work.
  void send(const proto::Message& m) {
    const std::string bytes = proto::encode(m);
    ASSERT_EQ(::write(head_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    pump();
  }
  // Runs what is ready on the agent's loop, and reads what it sent.
  void pump() {
    for (int i = 0; i < 20; ++i) {
      io_.restart();
      if (io_.poll() == 0) break;
    }
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(head_, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0) head_eof_ = true;
      if (n <= 0) break;
      decoder_.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    }
    while (auto m = decoder_.next()) received_.push_back(std::move(*m));
  }
  // Moves time, then lets the agent work.
  void advance(std::chrono::milliseconds d) {
    clock_.advance(d);
    pump();
  }
  // The worker processes ended (the fake's SIGCHLD).
  void sigchld() {
    agent_->on_sigchld();
    pump();
  }
  template <typename T>
  std::vector<T> got() const {
    return messages_of<T>(received_);
  }

  boost::asio::io_context io_;
  ManualClock clock_;
  FakeOs os_;
  std::unique_ptr<dlaunch::agent::Agent> agent_;
  int head_ = -1;
  bool head_eof_ = false;
  proto::Decoder decoder_;
  std::vector<proto::Message> received_;
};

}  // namespace dltest
