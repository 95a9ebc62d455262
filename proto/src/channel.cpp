#include "dlaunch/proto/channel.h"

#include <poll.h>

#include <memory>
#include <span>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

namespace dlaunch::proto {

namespace asio = boost::asio;

PipeChannel::PipeChannel(asio::io_context& io, int read_fd, int write_fd, Callbacks cb)
    : in_(io, read_fd), out_(io, write_fd), cb_(std::move(cb)) {
  boost::system::error_code ignored;
  in_.non_blocking(true, ignored);
}

PipeChannel::~PipeChannel() { *alive_ = false; }

void PipeChannel::start() {
  // Bytes given before the start (prefeed) are the stream's first.
  if (decoder_.pending() > 0) {
    asio::post(in_.get_executor(), [this, alive = alive_] {
      if (!*alive || !open_) return;
      dispatch();
    });
  }
  read_more();
}

bool PipeChannel::dispatch() {
  const auto alive = alive_;
  try {
    while (auto msg = decoder_.next()) {
      cb_.on_message(std::move(*msg));
      if (!*alive || !open_) return false;
    }
  } catch (const ProtocolError& e) {
    fail(std::string("protocol error: ") + e.what());
    return false;
  }
  return true;
}

PipeChannel::Released PipeChannel::release() {
  if (!open_ || write_in_flight_ || !queue_.empty()) return {};
  open_ = false;
  Released r;
  r.unread = decoder_.take_pending();
  boost::system::error_code ignored;
  in_.cancel(ignored);
  out_.cancel(ignored);
  r.read_fd = in_.release();
  r.write_fd = out_.release();
  return r;
}

// A channel waits for its fd to become readable and only then reads, into
// this buffer, whose bytes the decoder copies out before the next read. A head
// with a thousand local agents thus holds no idle 64 KiB buffer per agent.
std::span<char> thread_read_buffer() {
  thread_local std::unique_ptr<char[]> buf(new char[64 * 1024]);
  return {buf.get(), 64 * 1024};
}

namespace {
// Bytes read per wake-up at most, so that one busy channel cannot starve the
// others on the same event loop.
constexpr std::size_t kReadPerWake = 256 * 1024;
}  // namespace

void PipeChannel::read_more() {
  if (!open_ || waiting_) return;
  waiting_ = true;
  in_.async_wait(asio::posix::stream_descriptor::wait_read,
                 [this, alive = alive_](boost::system::error_code ec) {
                   if (!*alive) return;
                   waiting_ = false;
                   if (!open_) return;
                   if (ec) {
                     fail("read error: " + ec.message());
                     return;
                   }
                   on_readable();
                 });
}

void PipeChannel::read_pending() {
  if (!open_) return;
  pollfd p{in_.native_handle(), POLLIN, 0};
  if (::poll(&p, 1, 0) > 0) on_readable();
}

void PipeChannel::on_readable() {
  const std::span<char> buf = thread_read_buffer();
  std::size_t total = 0;
  while (total < kReadPerWake) {
    boost::system::error_code ec;
    const std::size_t n = in_.read_some(asio::buffer(buf.data(), buf.size()), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec == asio::error::interrupted) continue;
    if (ec) {
      fail(!write_failed_.empty() ? write_failed_
           : ec == asio::error::eof
               ? (decoder_.pending() > 0 ? "truncated frame at end of stream" : "end of stream")
               : "read error: " + ec.message());
      return;
    }
    total += n;
    decoder_.feed(std::string_view(buf.data(), n));
    if (!dispatch()) return;
    if (n < buf.size()) break;  // drained (a pipe returns less only when empty)
  }
  read_more();
}

void PipeChannel::send(const Message& msg) {
  if (!open_ || close_when_flushed_ || !write_failed_.empty()) return;
  // Coalesce small frames into the last queued buffer: fewer writes and wakeups.
  if (!queue_.empty() && queue_.back().size() < 256 * 1024) {
    auto before = queue_.back().size();
    encode(msg, queue_.back());
    queued_ += queue_.back().size() - before;
  } else {
    queue_.push_back(encode(msg));
    queued_ += queue_.back().size();
  }
  write_more();
}

void PipeChannel::write_more() {
  if (write_in_flight_ || !open_) return;
  if (queue_.empty()) {
    if (close_when_flushed_ && out_.is_open()) {
      boost::system::error_code ignored;
      out_.close(ignored);
      if (cb_.on_flushed) cb_.on_flushed();
    }
    return;
  }
  writing_ = std::move(queue_.front());
  queue_.pop_front();
  write_in_flight_ = true;
  asio::async_write(out_, asio::buffer(writing_),
                    [this, alive = alive_](boost::system::error_code ec, std::size_t) {
                      if (!*alive) return;
                      write_in_flight_ = false;
                      if (!open_) return;
                      const bool was_high = queued_ >= kLowWatermark;
                      queued_ -= writing_.size();
                      writing_.clear();
                      if (ec == asio::error::broken_pipe) {
                        // The peer stopped reading (an agent that ended
                        // after its Done): its last messages may still be
                        // on their way here; reading ends the channel.
                        write_failed_ = "write error: " + ec.message();
                        queue_.clear();
                        queued_ = 0;
                        boost::system::error_code ignored;
                        out_.close(ignored);
                        return;
                      }
                      if (ec) {
                        fail("write error: " + ec.message());
                        return;
                      }
                      write_more();
                      if (was_high && queued_ < kLowWatermark && cb_.on_drained) cb_.on_drained();
                    });
}

void PipeChannel::close_after_flush() {
  close_when_flushed_ = true;
  write_more();
}

void PipeChannel::close() {
  if (!open_) return;
  open_ = false;
  boost::system::error_code ignored;
  in_.close(ignored);
  out_.close(ignored);
}

void PipeChannel::fail(const std::string& reason) {
  if (!open_) return;
  close();
  if (cb_.on_close) cb_.on_close(reason);
}

}  // namespace dlaunch::proto
