#include "transport/ssh/openssh_transport.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "dlaunch/process.h"
#include "dlaunch/proto/channel.h"
#include "dlaunch/text.h"
#include "dlaunch/version.h"

namespace dlaunch::ssh {

namespace asio = boost::asio;

namespace {

// What the upload script prints when the copy is in place (ssh's own exit
// status may be reaped by the controller before this link sees it).
constexpr const char* kUploadOk = "dlaunch-upload-ok";

class OpensshLink final : public AgentLink {
 public:
  OpensshLink(asio::io_context& io, std::vector<std::string> ssh, std::string agent_path,
              std::shared_ptr<const AgentImage> image, std::string label, LinkCallbacks cb)
      : io_(io),
        ssh_(std::move(ssh)),
        agent_path_(std::move(agent_path)),
        image_(std::move(image)),
        label_(std::move(label)),
        cb_(std::move(cb)),
        wait_exit_(io) {}

  ~OpensshLink() override {
    *alive_ = false;
    channel_.reset();
    for (pid_t* p : {&pid_, &upload_pid_}) {
      if (*p <= 0) continue;
      int st;
      if (::waitpid(*p, &st, WNOHANG) == 0) {
        ::kill(*p, SIGKILL);
        while (::waitpid(*p, &st, 0) < 0 && errno == EINTR) {
        }
      }
    }
  }

  // Throws Error when ssh cannot be started at all.
  void start() {
    Ssh ssh = spawn_ssh(start_command(agent_path_, image_.get()));
    pid_ = ssh.pid;
    reaped_ = false;
    status_ = 0;
    channel_ = std::make_unique<proto::PipeChannel>(
        io_, ssh.stdout_fd.release(), ssh.stdin_fd.release(),
        proto::PipeChannel::Callbacks{
            .on_message = [this](proto::Message&& m) { on_message(std::move(m)); },
            .on_close = [this](const std::string& why) { channel_closed(why, 0); }});
    channel_->start();
    for (auto& m : pending_) channel_->send(m);
    pending_.clear();
  }

  void send(const proto::Message& msg) override {
    if (closed_) return;
    if (channel_ && !uploading_) {
      channel_->send(msg);
    } else {
      pending_.push_back(msg);
    }
  }
  bool is_open() const override { return !closed_; }
  LinkStart start_info() const override {
    return {.failed_stage = failed_stage_, .copied = uploaded_};
  }
  void close() override {
    closed_ = true;
    if (channel_) channel_->close();
  }
  void read_pending() override {
    if (channel_) channel_->read_pending();
  }
  void kill_agent() override {
    if (pid_ > 0 && !reaped_) ::kill(pid_, SIGKILL);
    if (upload_pid_ > 0) ::kill(upload_pid_, SIGKILL);
  }
  bool agent_gone() const override { return reaped_ && !uploading_ && (closed_ || hello_seen_); }
  pid_t agent_pid() const override { return uploading_ && upload_pid_ > 0 ? upload_pid_ : pid_; }
  void reap() override {
    int st;
    if (pid_ > 0 && !reaped_ && ::waitpid(pid_, &st, WNOHANG) == pid_) {
      reaped_ = true;
      status_ = st;
    }
    if (upload_pid_ > 0 && ::waitpid(upload_pid_, &st, WNOHANG) == upload_pid_) upload_pid_ = -1;
  }

 private:
  // `ssh ... HOST command` as our child: its own process group (a Ctrl-C
  // reaches dlaunch alone), SIGTERM when dlaunch dies, non-blocking pipes
  // to its stdin and from its stdout (stderr is dlaunch's). Throws Error.
  struct Ssh {
    pid_t pid = -1;
    UniqueFd stdin_fd;
    UniqueFd stdout_fd;
  };
  Ssh spawn_ssh(const std::string& command) const {
    auto [to_r, to_w] = make_pipe();
    auto [from_r, from_w] = make_pipe();
    SpawnOptions so;
    so.argv = ssh_;
    so.argv.push_back(command);
    so.env = current_environment();
    so.new_process_group = true;
    so.parent_death_signal = SIGTERM;
    so.stdin_fd = to_r.get();
    so.stdout_fd = from_w.get();
    SpawnResult r = spawn(so);
    if (!r) throw Error(ErrorKind::kEnvironment, label_ + ": cannot start ssh: " + r.error());
    set_nonblocking(from_r.get(), true);
    set_nonblocking(to_w.get(), true);
    return {*r, std::move(to_w), std::move(from_r)};
  }

  void on_message(proto::Message&& m) {
    if (!hello_seen_ && image_ && !uploaded_) {
      const auto* hello = std::get_if<proto::Hello>(&m);
      if (hello != nullptr &&
          (hello->version != proto::kProtocolVersion || hello->agent_version != kVersion)) {
        return later_upload(fmt::format("the one there is version {} (protocol {})",
                                        printable(hello->agent_version), hello->version));
      }
    }
    hello_seen_ = true;
    if (cb_.on_message) cb_.on_message(std::move(m));
  }

  // The pipe closes a moment before ssh can be reaped: look a few times.
  void channel_closed(const std::string& why, int tries) {
    reap();
    if (!reaped_ && tries < 20) {
      wait_exit_.expires_after(std::chrono::milliseconds(10));
      wait_exit_.async_wait([this, alive = alive_, why, tries](boost::system::error_code ec) {
        if (!ec && *alive) channel_closed(why, tries + 1);
      });
      return;
    }
    if (uploading_) return;
    const int code = reaped_ && WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
    if (!hello_seen_ && image_ && !uploaded_ && code == kNoAgentStatus) {
      return later_upload(fmt::format("none at '{}'", agent_path_));
    }
    std::string reason = why;
    if (!hello_seen_ && code == 255) failed_stage_ = "ssh";
    if (!hello_seen_ && (code == 127 || code == kNoAgentStatus)) failed_stage_ = "agent";
    if (!hello_seen_ && code == 255) {
      reason = "ssh could not reach the node or log in (ssh's message is above)";
    } else if (!hello_seen_ && image_ && code == kUnsafeCacheStatus) {
      reason = unsafe_cache_reason("the node's message is above");
    } else if (!hello_seen_ && (code == 127 || code == kNoAgentStatus)) {
      reason = fmt::format(
          "dlaunch-agent not found at '{}' (give its path with --agent or `agent:` in the "
          "hostfile)",
          agent_path_);
    } else if (reaped_ && WIFSIGNALED(status_)) {
      reason += " (ssh was killed by " + signal_name(WTERMSIG(status_)) + ")";
    } else if (code > 0) {
      reason += fmt::format(" (ssh exited with status {})", code);
    }
    fail(reason);
  }

  void fail(const std::string& reason) {
    uploading_ = false;
    if (closed_) return;
    closed_ = true;
    if (cb_.on_close) cb_.on_close(reason);
  }

  // Not from inside the channel's own callback: it is replaced.
  void later_upload(std::string why) {
    uploading_ = true;
    asio::post(io_, [this, alive = alive_, why = std::move(why)] {
      if (*alive && !closed_) upload(why);
    });
  }

  void upload(const std::string& why) {
    channel_.reset();
    if (pid_ > 0 && !reaped_) ::kill(pid_, SIGKILL);  // an agent of another version
    try {
      (void)image_->packed();  // read (once) before anything starts
      Ssh ssh = spawn_ssh(upload_command(*image_, kUploadOk));
      upload_pid_ = ssh.pid;
      up_in_ = std::make_unique<asio::posix::stream_descriptor>(io_, ssh.stdin_fd.release());
      up_out_ = std::make_unique<asio::posix::stream_descriptor>(io_, ssh.stdout_fd.release());
    } catch (const std::exception& e) {
      return fail(std::string("cannot copy dlaunch-agent: ") + e.what());
    }
    asio::async_write(*up_in_, asio::buffer(image_->packed()),
                      [this, alive = alive_](boost::system::error_code, std::size_t) {
                        if (!*alive) return;
                        boost::system::error_code ignored;
                        up_in_->close(ignored);  // EOF: the script checks what came
                      });
    asio::async_read(*up_out_, asio::dynamic_buffer(up_text_),
                     [this, alive = alive_, why](boost::system::error_code, std::size_t) {
                       if (*alive) upload_done(why);
                     });
  }

  void upload_done(const std::string& why) {
    up_in_.reset();
    up_out_.reset();
    if (closed_) return;
    if (up_text_.find(kUploadOk) == std::string::npos) {
      return fail(fmt::format(
          "no usable dlaunch-agent ({}), and the copy of this one to {} failed (ssh's and the "
          "node's messages are above; give an agent's path with --agent, or install dlaunch "
          "there)",
          why, cache_path_for_messages(*image_)));
    }
    write_all(2, fmt::format("dlaunch: {}: no usable dlaunch-agent ({}); copied this one ({}; {} "
                             "bytes sent, {} unpacked) to {}\n",
                             label_, why, image_->version_line, image_->packed().size(),
                             image_->size, cache_path_for_messages(*image_)));
    uploaded_ = true;
    uploading_ = false;
    try {
      start();
    } catch (const Error& e) {
      fail(e.what());
    }
  }

  asio::io_context& io_;
  std::vector<std::string> ssh_;
  std::string agent_path_;
  std::shared_ptr<const AgentImage> image_;
  std::string label_;
  LinkCallbacks cb_;
  asio::steady_timer wait_exit_;
  std::unique_ptr<proto::PipeChannel> channel_;
  std::vector<proto::Message> pending_;  // sent while the agent is being replaced
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  bool hello_seen_ = false;
  bool closed_ = false;
  bool uploading_ = false;
  bool uploaded_ = false;
  std::string failed_stage_;  // LinkStart
  pid_t upload_pid_ = -1;
  std::unique_ptr<asio::posix::stream_descriptor> up_in_;
  std::unique_ptr<asio::posix::stream_descriptor> up_out_;
  std::string up_text_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace

std::vector<std::string> openssh_argv(const HostEntry& host, const OpensshOptions& o) {
  std::vector<std::string> a{"ssh", "-T", "-o", "BatchMode=yes"};
  if (!o.config_file.empty()) a.insert(a.end(), {"-F", o.config_file});
  if (!host.user.empty()) a.insert(a.end(), {"-l", host.user});
  if (host.port_given) a.insert(a.end(), {"-p", std::to_string(host.port)});
  if (!host.identity.empty()) a.insert(a.end(), {"-i", host.identity});
  if (o.host_key_policy_given) {
    a.insert(a.end(), {"-o", std::string("StrictHostKeyChecking=") +
                                 (o.host_key_policy == HostKeyPolicy::kStrict      ? "yes"
                                  : o.host_key_policy == HostKeyPolicy::kAcceptNew ? "accept-new"
                                                                                   : "no")});
  }
  if (o.connect_timeout_s > 0)
    a.insert(a.end(), {"-o", "ConnectTimeout=" + std::to_string(o.connect_timeout_s)});
  if (!o.known_hosts.empty()) a.insert(a.end(), {"-o", "UserKnownHostsFile=" + o.known_hosts});
  a.insert(a.end(), {"--", host.host});
  return a;
}

std::unique_ptr<AgentLink> start_openssh_agent(asio::io_context& io, const HostEntry& host,
                                               const OpensshOptions& o,
                                               const std::string& agent_path,
                                               std::shared_ptr<const AgentImage> image,
                                               const std::string& label, LinkCallbacks cb) {
  auto link = std::make_unique<OpensshLink>(io, openssh_argv(host, o), agent_path, std::move(image),
                                            label, std::move(cb));
  link->start();
  return link;
}

}  // namespace dlaunch::ssh
