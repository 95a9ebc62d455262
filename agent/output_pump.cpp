#include "output_pump.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <span>

#include "dlaunch/proto/channel.h"
#include "dlaunch/tunables.h"

namespace dlaunch::agent {

namespace asio = boost::asio;

std::string LineBuffer::take_lines() {
  auto last_nl = buf_.rfind('\n');
  if (last_nl == std::string::npos) return {};
  if (last_nl + 1 == buf_.size()) return std::exchange(buf_, std::string());
  std::string out = buf_.substr(0, last_nl + 1);
  buf_.erase(0, last_nl + 1);
  return out;
}

std::string LineBuffer::take_all() { return std::exchange(buf_, std::string()); }

OutputRelay::OutputRelay(asio::io_context& io, Clock& clock, Hooks hooks)
    : io_(io), clock_(clock), hooks_(std::move(hooks)) {}

OutputRelay::~OutputRelay() = default;

void OutputRelay::watch(int rank, int out_fd, int err_fd) {
  for (const auto& [fd, kind] :
       {std::pair{out_fd, proto::Stream::kStdout}, std::pair{err_fd, proto::Stream::kStderr}}) {
    auto it = streams_.emplace(rank, std::make_unique<Stream>(io_, clock_, fd, rank, kind));
    read(*it->second);
  }
}

void OutputRelay::read(Stream& s) {
  if (s.eof || s.reading || !s.pipe.is_open()) return;
  if (hooks_.queued() > kHighWatermark || paused_) {
    s.parked = true;  // backpressure: the worker blocks on its full pipe
    return;
  }
  s.reading = true;
  s.pipe.async_wait(
      asio::posix::stream_descriptor::wait_read, [this, &s](boost::system::error_code ec) {
        s.reading = false;
        if (ec == asio::error::operation_aborted) return;
        const std::span<char> buf = proto::thread_read_buffer();
        const ssize_t n = ec ? -1 : ::read(s.pipe.native_handle(), buf.data(), buf.size());
        if (n > 0) {
          forward(s, std::string_view(buf.data(), static_cast<std::size_t>(n)));
        } else if (n == 0 || ec || (errno != EAGAIN && errno != EINTR)) {
          s.eof = true;
          flush_partial(s);
          boost::system::error_code ignored;
          s.pipe.close(ignored);
          return;
        }
        read(s);
      });
}

void OutputRelay::forward(Stream& s, std::string_view data) {
  s.starved_holds = 0;
  if (hooks_.heard) hooks_.heard(s.rank, s.stream, data);
  s.lines.append(data);
  std::string lines = s.lines.take_lines();
  const bool new_partial = !lines.empty();
  if (!lines.empty()) {
    hooks_.send(proto::Output{.rank = s.rank, .stream = s.stream, .data = std::move(lines)});
  }
  if (s.lines.partial_overflow()) {
    flush_partial(s);
  } else if (s.lines.has_partial() && (!s.timer_armed || new_partial)) {
    arm_flush(s);
  }
}

// A partial line leaves on its own only when the worker has been quiet for
// the flush period: while its pipe holds more bytes (or we are not reading
// because of backpressure) the rest of the line is on its way.
//
// Quiet is not enough on an overloaded machine: a worker in the middle of a
// stream of output, preempted for longer than the period between two
// write()s (stdio writes 4 KiB blocks that end mid-line), would have a line
// cut in two. A worker that is runnable ('R': running or waiting for a CPU)
// is therefore given up to kStarvedHolds more periods; one that sleeps (a
// prompt waiting for input, a progress bar between updates) gets its partial
// line out after one period as before. Only the worker process itself is
// looked at: output that comes from a child of it keeps the plain rule.
void OutputRelay::arm_flush(Stream& s) {
  s.timer_armed = true;
  clock_.after(*s.timer, flush_, [this, &s] {
    pollfd p{s.pipe.is_open() ? s.pipe.native_handle() : -1, POLLIN, 0};
    const bool more_waiting =
        s.parked || (p.fd >= 0 && ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN));
    if (more_waiting && !s.eof) {
      arm_flush(s);
      return;
    }
    if (!s.eof && s.starved_holds < timing::kStarvedHolds && hooks_.runnable &&
        hooks_.runnable(s.rank)) {
      ++s.starved_holds;
      arm_flush(s);
      return;
    }
    s.timer_armed = false;
    flush_partial(s);
  });
}

void OutputRelay::flush_partial(Stream& s) {
  if (s.timer_armed) {
    s.timer->cancel();
    s.timer_armed = false;
  }
  if (!s.lines.has_partial()) return;
  hooks_.send(proto::Output{
      .rank = s.rank, .stream = s.stream, .partial = true, .data = s.lines.take_all()});
}

void OutputRelay::drain(int rank) {
  auto [from, to] = streams_.equal_range(rank);
  for (auto it = from; it != to; ++it) drain(*it->second);
}

void OutputRelay::drain(Stream& s) {
  while (!s.eof && s.pipe.is_open()) {
    const std::span<char> buf = proto::thread_read_buffer();
    const ssize_t n = ::read(s.pipe.native_handle(), buf.data(), buf.size());
    if (n > 0) {
      forward(s, std::string_view(buf.data(), static_cast<std::size_t>(n)));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (n == 0) {
        s.eof = true;
        boost::system::error_code ignored;
        s.pipe.close(ignored);
      }
      break;
    }
  }
  flush_partial(s);
}

void OutputRelay::pause(bool paused) {
  paused_ = paused;
  if (!paused_) resume();
}

void OutputRelay::resume() {
  if (paused_) return;  // the head's PauseOutput{false} resumes them
  for (auto& [rank, s] : streams_) {
    if (s->parked) {
      s->parked = false;
      read(*s);
    }
  }
}

}  // namespace dlaunch::agent
