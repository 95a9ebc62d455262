#include "transport/ssh/ssh_transport.h"

#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without it

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "dlaunch/process.h"
#include "dlaunch/text.h"
#include "dlaunch/version.h"
#include "transport/ssh/agent_install.h"

namespace dlaunch::ssh {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// Bytes of each stream one wake-up of a link reads at most.
constexpr std::size_t kReadBudget = 64 * 1024;

// Everything one node's link owns. Shared with the coroutine and the socket
// handlers, so none of them can outlive what they touch.
struct LinkState : std::enable_shared_from_this<LinkState> {
  LinkState(asio::io_context& io_, std::string label_, std::string agent_, LinkCallbacks cb_)
      : io(io_),
        label(std::move(label_)),
        agent_path(std::move(agent_)),
        cb(std::move(cb_)),
        keepalive(io_),
        close_timer(io_) {}

  asio::io_context& io;
  std::string label;
  std::string agent_path;
  LinkCallbacks cb;
  std::unique_ptr<Connection> conn;
  Channel channel;  // declared after conn: freed before the session
  proto::Decoder decoder;
  std::string out;
  std::size_t out_off = 0;
  bool closed = false;
  bool read_armed = false;
  bool write_armed = false;
  bool pump_posted = false;
  bool eof = false;
  bool hello_seen = false;
  // Set while run_link connects and starts the agent: closing the link then
  // cancels that (the coroutine owns what it waits on) instead of freeing it.
  bool connecting = false;
  // Waiting for a slot of the limiter, and when the slot came (LinkStart).
  bool queued = true;
  Clock::time_point began{};
  std::shared_ptr<ConnectCancel> cancel = std::make_shared<ConnectCancel>();
  std::deque<std::string> stderr_tail;
  std::string stderr_partial;
  std::string peer_address;   // what we connected to (MASTER_ADDR candidate)
  std::string local_address;  // our side of that route
  asio::steady_timer keepalive;
  asio::steady_timer close_timer;
  // Agent upload (agent_install.h): the head's agent, when this node may get
  // it; set while it is being copied; done once per link.
  std::shared_ptr<const AgentImage> image;
  std::string host_name;  // for messages
  bool uploading = false;
  bool uploaded = false;
  std::string failed_stage;  // LinkStart

  void drop_connection() {
    keepalive.cancel();
    close_timer.cancel();
    channel.reset();
    conn.reset();
  }

  void fail(const std::string& reason) {
    if (closed) return;
    closed = true;
    drop_connection();
    if (cb.on_close) cb.on_close(reason);
  }

  void schedule_pump() {
    if (pump_posted || closed) return;
    pump_posted = true;
    asio::post(io, [self = shared_from_this()] {
      self->pump_posted = false;
      self->pump();
    });
  }

  void on_stderr(std::string_view data) {
    stderr_partial.append(data);
    std::size_t nl;
    while ((nl = stderr_partial.find('\n')) != std::string::npos) {
      std::string line = stderr_partial.substr(0, nl);
      stderr_partial.erase(0, nl + 1);
      write_all(2, "dlaunch: " + label + ": " + line + "\n");
      stderr_tail.push_back(std::move(line));
      if (stderr_tail.size() > 10) stderr_tail.pop_front();
    }
  }

  // How the agent ended: sshd sends "exit-signal" (the agent was killed;
  // the exit status then reads 0) or "exit-status".
  std::string how_it_ended(int exit_status) const {
    char* signal = nullptr;
    std::size_t signal_len = 0;
    if (channel &&
        libssh2_channel_get_exit_signal(channel.get(), &signal, &signal_len, nullptr, nullptr,
                                        nullptr, nullptr) == 0 &&
        signal != nullptr) {
      std::string name(signal, signal_len);
      libssh2_free(conn->session.get(), signal);
      return "the agent was killed by SIG" + name;
    }
    return fmt::format("the agent exited with status {}", exit_status);
  }

  void begin_upload(const std::string& why);

  void finish(int exit_status) {
    if (closed) return;
    if (!hello_seen && image && !uploaded && exit_status == kNoAgentStatus) {
      return begin_upload(fmt::format("none at '{}'", agent_path));
    }
    std::string tail;
    for (const auto& l : stderr_tail) tail += (tail.empty() ? "" : " / ") + l;
    std::string reason;
    // Before Hello: no agent there, or one that ended before a word (the
    // session was open: as far as a failed exec).
    if (!hello_seen)
      failed_stage = exit_status == 127 || exit_status == kNoAgentStatus ? "agent" : "exec";
    if (hello_seen) {
      reason = "the agent's channel closed (" + how_it_ended(exit_status) + ")";
    } else if (exit_status == 127) {
      reason = fmt::format(
          "dlaunch-agent not found at '{}' (give its path with --agent or `agent:` in the "
          "hostfile)",
          agent_path);
    } else if (image && exit_status == kUnsafeCacheStatus) {
      reason = unsafe_cache_reason(tail);
    } else {
      reason = fmt::format("{} before it started{}", how_it_ended(exit_status),
                           tail.empty() ? "" : ": " + tail);
    }
    fail(reason);
  }

  void pump() {
    if (closed || !channel) return;
    LIBSSH2_CHANNEL* ch = channel.get();
    while (out_off < out.size()) {
      const auto n = libssh2_channel_write(ch, out.data() + out_off,
                                           std::min<std::size_t>(out.size() - out_off, 1 << 16));
      if (n == LIBSSH2_ERROR_EAGAIN) break;
      if (n < 0) return fail("write to the agent failed: " + last_error(conn->session.get()));
      out_off += static_cast<std::size_t>(n);
    }
    if (out_off == out.size()) {
      // Sent: not cleared but freed. A thousand links each keeping the
      // capacity of the largest frame they sent (the Setup) is a megabyte.
      std::string().swap(out);
      out_off = 0;
    }
    // Each wake-up reads a bounded share: a link that never runs dry (an
    // agent with more output than dlaunch's stdout takes) must not keep the
    // loop from signals, heartbeats and the other links. The rest waits for
    // the next turn of the loop.
    char buf[1 << 16];
    bool more = false;
    for (std::size_t budget = kReadBudget;;) {
      if (budget == 0) {
        more = true;
        break;
      }
      const auto n = libssh2_channel_read(ch, buf, std::min(sizeof buf, budget));
      if (n == LIBSSH2_ERROR_EAGAIN || n == 0) {
        decoder.release_if_empty();  // idle now: see Decoder::release_if_empty
        break;
      }
      if (n < 0) return fail("read from the agent failed: " + last_error(conn->session.get()));
      budget -= static_cast<std::size_t>(n);
      decoder.feed(std::string_view(buf, static_cast<std::size_t>(n)));
      try {
        while (auto msg = decoder.next()) {
          if (!hello_seen && image && !uploaded) {
            const auto* hello = std::get_if<proto::Hello>(&*msg);
            if (hello != nullptr &&
                (hello->version != proto::kProtocolVersion || hello->agent_version != kVersion)) {
              return begin_upload(fmt::format("the one there is version {} (protocol {})",
                                              printable(hello->agent_version), hello->version));
            }
          }
          if (!hello_seen && debug_ssh()) {
            write_all(2, fmt::format("dlaunch: ssh {}: the agent said hello\n", label));
          }
          hello_seen = true;
          cb.on_message(std::move(*msg));
          if (closed) return;
        }
      } catch (const proto::ProtocolError& e) {
        return fail(
            std::string("protocol error: ") + e.what() +
            (hello_seen ? "" : " (does a shell startup file on that host print to stdout?)"));
      }
    }
    for (std::size_t budget = kReadBudget;;) {
      if (budget == 0) {
        more = true;
        break;
      }
      const auto n = libssh2_channel_read_stderr(ch, buf, std::min(sizeof buf, budget));
      if (n == LIBSSH2_ERROR_EAGAIN || n == 0) break;
      if (n < 0) return fail("read from the agent failed: " + last_error(conn->session.get()));
      budget -= static_cast<std::size_t>(n);
      on_stderr(std::string_view(buf, static_cast<std::size_t>(n)));
    }
    if (more) return schedule_pump();  // before EOF: what is buffered comes first
    if (!eof && libssh2_channel_eof(ch) != 0) {
      eof = true;
      // Wait briefly for the exit status that follows EOF.
      close_timer.expires_after(timing::kSshCloseWait);
      close_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (!ec && !self->closed && self->channel)
          self->finish(libssh2_channel_get_exit_status(self->channel.get()));
      });
    }
    if (eof) {
      const int rc = libssh2_channel_wait_closed(ch);
      if (rc == 0) return finish(libssh2_channel_get_exit_status(ch));
      if (rc != LIBSSH2_ERROR_EAGAIN) return finish(libssh2_channel_get_exit_status(ch));
    }
    arm();
  }

  void arm() {
    auto& sock = conn->socket;
    if (!read_armed) {
      read_armed = true;
      sock.async_wait(asio::socket_base::wait_read,
                      [self = shared_from_this()](boost::system::error_code ec) {
                        self->read_armed = false;
                        if (self->closed) return;
                        if (ec) return self->fail("connection lost: " + ec.message());
                        self->pump();
                      });
    }
    const bool blocked_out = (libssh2_session_block_directions(conn->session.get()) &
                              LIBSSH2_SESSION_BLOCK_OUTBOUND) != 0;
    if (!write_armed && (blocked_out || out_off < out.size())) {
      write_armed = true;
      sock.async_wait(asio::socket_base::wait_write,
                      [self = shared_from_this()](boost::system::error_code ec) {
                        self->write_armed = false;
                        if (self->closed) return;
                        if (ec) return self->fail("connection lost: " + ec.message());
                        self->pump();
                      });
    }
  }

  void arm_keepalive() {
    keepalive.expires_after(timing::kSshKeepalivePoll);
    keepalive.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->closed || !self->conn) return;
      if (self->uploading) return self->arm_keepalive();  // its writes must not interleave
      send_keepalive(self->conn->session.get(), self->conn->socket.native_handle());
      self->pump();
      self->arm_keepalive();
    });
  }
};

// Copies the head's agent to the node (agent_install.h), then starts it from
// the node's cache on a new channel of the same connection.
asio::awaitable<void> upload_agent(std::shared_ptr<LinkState> s, std::string why) {
  const auto deadline = Clock::now() + kAgentUploadTimeout;
  s->connecting = true;  // close() now cancels this
  try {
    const AgentImage& image = *s->image;
    auto ch = co_await exec(*s->conn, upload_command(image), s->cancel, deadline);
    co_await send_all(*s->conn, ch.get(), image.packed(), s->cancel, deadline);
    const auto result = co_await wait_command(*s->conn, ch.get(), s->cancel, deadline);
    ch.reset();
    if (result.exit_status != 0) {
      s->connecting = false;
      if (result.exit_status == kUnsafeCacheStatus) {
        s->fail(unsafe_cache_reason(printable(result.output)));
        co_return;
      }
      const std::string what =
          result.exit_status == kUploadNoRunStatus
              ? "it does not run there"
              : fmt::format("writing it failed (status {})", result.exit_status);
      s->fail(
          fmt::format("no usable dlaunch-agent ({}), and the copy of this one to {} failed: "
                      "{}{} (give an agent's path with --agent, or install dlaunch there)",
                      why, cache_path_for_messages(image), what,
                      result.output.empty() ? "" : ": " + printable(result.output)));
      co_return;
    }
    auto agent = co_await exec(*s->conn, start_command(s->agent_path, &image), s->cancel, deadline);
    s->connecting = false;
    if (s->closed) {
      s->drop_connection();
      co_return;
    }
    write_all(2, fmt::format("dlaunch: {}: no usable dlaunch-agent ({}); copied this one ({}; {} "
                             "bytes sent, {} unpacked) to {}\n",
                             s->label, why, image.version_line, image.packed().size(), image.size,
                             cache_path_for_messages(image)));
    s->uploaded = true;
    s->uploading = false;
    s->channel = std::move(agent);
    s->decoder = proto::Decoder();
    s->eof = false;
    s->stderr_tail.clear();
    s->pump();
  } catch (const ConnectError& e) {
    s->connecting = false;
    if (s->closed) {
      s->drop_connection();
      co_return;
    }
    s->fail(fmt::format("no usable dlaunch-agent ({}), and copying this one failed: {}", why,
                        e.what()));
  }
}

void LinkState::begin_upload(const std::string& why) {
  if (uploading || closed) return;
  uploading = true;
  close_timer.cancel();
  channel.reset();  // an agent of another version reads EOF and ends
  asio::co_spawn(io, upload_agent(shared_from_this(), why), asio::detached);
}

class SshLink final : public AgentLink {
 public:
  explicit SshLink(std::shared_ptr<LinkState> s) : s_(std::move(s)) {}
  ~SshLink() override { close(); }
  void send(const proto::Message& msg) override {
    if (s_->closed) return;
    proto::encode(msg, s_->out);
    s_->schedule_pump();
  }
  bool is_open() const override { return !s_->closed; }
  void close() override {
    s_->closed = true;
    s_->cancel->cancel();
    if (!s_->connecting) s_->drop_connection();
  }
  // pump() reads what libssh2 holds and what the socket has, without
  // blocking (the session is non-blocking), and re-arms the socket waits.
  void read_pending() override { s_->pump(); }
  // Killing: no graceful channel close (libssh2 reads what is still in
  // flight until the peer's close arrives, a while behind an output flood)
  // and no disconnect message. The TCP connection is shut down; sshd sees it
  // end and closes the agent's stdin, and the agent stops what is left.
  void kill_agent() override {
    if (s_->conn) {
      boost::system::error_code ignored;
      s_->conn->socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    }
    close();
  }
  bool agent_gone() const override { return s_->closed; }
  void reap() override {}
  std::string peer_address() const override { return s_->peer_address; }
  std::string local_address() const override { return s_->local_address; }
  LinkStart start_info() const override {
    return {.failed_stage = s_->failed_stage,
            .copied = s_->uploaded,
            .queued = s_->queued,
            .began = s_->began};
  }

 private:
  std::shared_ptr<LinkState> s_;
};

// A slot of the limiter, given back once with how the connection went;
// kNeutral when the link was closed or cancelled meanwhile.
struct SlotGuard {
  std::shared_ptr<Limiter> limiter;
  Limiter::Ticket ticket{};
  bool held = false;
  void release(SlotOutcome outcome) {
    if (held) limiter->release(ticket, outcome);
    held = false;
  }
  ~SlotGuard() { release(SlotOutcome::kNeutral); }
};

asio::awaitable<void> run_link(std::shared_ptr<LinkState> s, std::shared_ptr<Limiter> limiter,
                               std::shared_ptr<Connector> connector, ConnectOptions opts) {
  SlotGuard slot{limiter};
  slot.ticket = co_await limiter->acquire();
  slot.held = true;
  s->queued = false;
  s->began = Clock::now();
  if (s->closed) co_return;
  opts.cancel = s->cancel;
  s->connecting = true;
  try {
    const auto deadline = Clock::now() + opts.timeout;
    auto conn = co_await connector->connect(opts);
    if (s->closed) {
      s->connecting = false;
      co_return;
    }
    s->conn = std::move(conn);
    s->peer_address = s->conn->peer_address;
    s->local_address = s->conn->local_address;
    auto ch =
        co_await exec(*s->conn, start_command(s->agent_path, s->image.get()), s->cancel, deadline);
    s->connecting = false;
    if (debug_ssh()) {
      write_all(2, fmt::format("dlaunch: ssh {}: exec started at {:.1f} ms\n", opts.display(),
                               std::chrono::duration<double, std::milli>(Clock::now() -
                                                                         (deadline - opts.timeout))
                                   .count()));
    }
    if (s->closed) {
      s->drop_connection();
      co_return;
    }
    s->channel = std::move(ch);
    // Set up: what libssh2's session structure holds now is what it keeps
    // (transport/ssh/session_memory.h).
    const std::size_t released = s->conn->pages.release_zero_pages();
    if (debug_ssh()) {
      write_all(2, fmt::format("dlaunch: ssh {}: libssh2's session structure: {} of {} KiB "
                               "resident ({} KiB of zero pages given back)\n",
                               opts.display(), s->conn->pages.resident_bytes() / 1024,
                               s->conn->pages.block_bytes() / 1024, released / 1024));
    }
  } catch (const ConnectError& e) {
    s->connecting = false;
    slot.release(slot_outcome(e));
    if (s->closed) {
      s->drop_connection();
      co_return;
    }
    s->failed_stage = e.stage();
    s->fail(e.what());
    co_return;
  }
  slot.release(SlotOutcome::kDone);
  if (!s->conn->host_key_note.empty()) write_all(2, "dlaunch: " + s->conn->host_key_note + "\n");
  s->arm_keepalive();
  s->pump();
}

}  // namespace

Transport::Transport(asio::io_context& io, TransportOptions opts)
    : io_(io),
      opts_(std::move(opts)),
      limiter_(std::make_shared<Limiter>(
          io,
          LimiterConfig::for_timeout(opts_.hosts.connect_timeout, std::max(0, opts_.concurrency)))),
      connector_(std::make_shared<Connector>(io)) {}

std::shared_ptr<const AgentImage> Transport::image_for(const HostEntry& host) {
  if (opts_.agent_image.empty() || !host.agent.empty()) return nullptr;
  if (!image_) image_ = AgentImage::load(opts_.agent_image);
  return image_;
}

std::unique_ptr<AgentLink> Transport::start(const HostEntry& host, const std::string& agent_path,
                                            const std::string& label, LinkCallbacks cb) {
  if (host.ssh_client == SshClient::kOpenssh) {
    return start_openssh_agent(io_, host, opts_.openssh, agent_path, image_for(host), label,
                               std::move(cb));
  }
  auto state = std::make_shared<LinkState>(io_, label, agent_path, std::move(cb));
  // The head's agent may be copied to a node whose agent path is not forced
  // (by --agent, which leaves agent_image empty, or the hostfile's `agent:`).
  state->image = image_for(host);
  asio::co_spawn(io_, run_link(state, limiter_, connector_, connect_options(host, opts_)),
                 asio::detached);
  return std::make_unique<SshLink>(state);
}

}  // namespace dlaunch::ssh
