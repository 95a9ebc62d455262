#include "transport/local_transport.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include <boost/asio/steady_timer.hpp>

#include "dlaunch/proc_stat.h"
#include "dlaunch/process.h"
#include "dlaunch/proto/channel.h"

namespace dlaunch {
namespace {

class LocalLink final : public AgentLink {
 public:
  LocalLink(boost::asio::io_context& io, pid_t pid, int read_fd, int write_fd, LinkCallbacks cb,
            bool child_is_agent)
      : pid_(pid),
        child_is_agent_(child_is_agent),
        on_close_(std::move(cb.on_close)),
        wait_exit_(io),
        channel_(io, read_fd, write_fd,
                 proto::PipeChannel::Callbacks{
                     .on_message =
                         [this, on_message = std::move(cb.on_message)](proto::Message&& m) {
                           heard_ = true;
                           on_message(std::move(m));
                         },
                     .on_close = [this](const std::string& why) { channel_closed(why, 0); }}) {
    channel_.start();
  }
  ~LocalLink() override {
    *alive_ = false;
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  void send(const proto::Message& msg) override { channel_.send(msg); }
  bool is_open() const override { return channel_.is_open(); }
  void close() override { channel_.close(); }
  void read_pending() override { channel_.read_pending(); }
  void kill_agent() override {
    if (!reaped_) ::kill(pid_, SIGKILL);
  }
  bool agent_gone() const override { return reaped_; }
  pid_t agent_pid() const override { return pid_; }
  // Status 127 before a word: the shell's (or srun's, qrsh's) "not found".
  LinkStart start_info() const override {
    const bool missing = !heard_ && reaped_ && WIFEXITED(status_) && WEXITSTATUS(status_) == 127;
    return {.failed_stage = missing ? "agent" : ""};
  }
  // The agent and what it started (its guard, a helper it waits for): an
  // agent asleep while its child runs is working too. D (in the kernel, on
  // the disk) counts as runnable.
  std::optional<AgentWork> agent_work() const override {
    if (!child_is_agent_ || reaped_) return std::nullopt;
    const auto own = process_cpu(pid_);
    if (!own || own->state == 'Z') return std::nullopt;
    AgentWork w;
    const auto add = [&w](const ProcessCpu& c) {
      w.cpu_ticks += c.ticks;
      w.runnable = w.runnable || c.state == 'R' || c.state == 'D';
    };
    add(*own);
    for (const pid_t child : descendants_of(pid_)) {
      if (const auto c = process_cpu(child)) add(*c);
    }
    return w;
  }
  void reap() override {
    if (reaped_) return;
    int st;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      reaped_ = true;
      status_ = st;
    }
  }

 private:
  // The channel's end is usually the agent's: say how the agent ended (killed
  // by a signal, an exit status). The pipe closes a moment before the process
  // can be reaped, so look a few times, briefly, on a timer.
  void channel_closed(const std::string& why, int tries) {
    reap();
    if (!reaped_ && tries < 5) {
      wait_exit_.expires_after(std::chrono::milliseconds(10));
      wait_exit_.async_wait([this, alive = alive_, why, tries](boost::system::error_code ec) {
        if (!ec && *alive) channel_closed(why, tries + 1);
      });
      return;
    }
    std::string reason = why;
    if (reaped_ && WIFSIGNALED(status_)) {
      reason += " (the agent was killed by " + signal_name(WTERMSIG(status_)) + ")";
    } else if (reaped_ && WIFEXITED(status_) && WEXITSTATUS(status_) != 0) {
      reason += " (the agent exited with status " + std::to_string(WEXITSTATUS(status_)) + ")";
    }
    if (on_close_) on_close_(reason);
  }

  pid_t pid_;
  bool child_is_agent_;  // not srun's or qrsh's process
  bool heard_ = false;   // the agent said something
  bool reaped_ = false;
  int status_ = 0;
  std::function<void(const std::string&)> on_close_;
  boost::asio::steady_timer wait_exit_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  proto::PipeChannel channel_;
};

}  // namespace

std::string default_agent_path() {
  const std::string self = self_exe();
  if (self.empty()) return "dlaunch-agent";
  return (std::filesystem::path(self).parent_path() / "dlaunch-agent").string();
}

namespace {

std::unique_ptr<AgentLink> start_child(boost::asio::io_context& io, std::vector<std::string> argv,
                                       int node_rank, LinkCallbacks cb, int parent_death_signal,
                                       bool child_is_agent) {
  auto [to_agent_r, to_agent_w] = make_pipe();
  auto [from_agent_r, from_agent_w] = make_pipe();
  SpawnOptions opts;
  opts.argv = std::move(argv);
  opts.env = current_environment();
  opts.new_process_group = true;
  opts.parent_death_signal = parent_death_signal;
  opts.stdin_fd = to_agent_r.get();
  opts.stdout_fd = from_agent_w.get();
  SpawnResult r = spawn(opts);
  if (!r) {
    const std::string what = "node " + std::to_string(node_rank) + ": " + r.error();
    const std::string program = opts.argv.empty() ? std::string() : opts.argv.front();
    if (program.find('/') != std::string::npos && ::access(program.c_str(), X_OK) != 0)
      throw AgentNotFound(ErrorKind::kEnvironment, what);
    throw Error(ErrorKind::kEnvironment, what);
  }
  set_nonblocking(from_agent_r.get(), true);
  set_nonblocking(to_agent_w.get(), true);
  return std::make_unique<LocalLink>(io, *r, from_agent_r.release(), to_agent_w.release(),
                                     std::move(cb), child_is_agent);
}

}  // namespace

std::unique_ptr<AgentLink> start_local_agent(boost::asio::io_context& io,
                                             const std::string& agent_path, int node_rank,
                                             LinkCallbacks cb) {
  return start_child(io, {agent_path}, node_rank, std::move(cb), 0, true);
}

std::unique_ptr<AgentLink> start_agent_process(boost::asio::io_context& io,
                                               std::vector<std::string> argv, int node_rank,
                                               LinkCallbacks cb, int parent_death_signal) {
  return start_child(io, std::move(argv), node_rank, std::move(cb), parent_death_signal, false);
}

}  // namespace dlaunch
