// PipeChannel: the control protocol over a pair of pipe fds, driven by an
// Asio io_context. Used by the agent (its stdin/stdout) and by the head's
// local transport (the agent child's pipes).
//
// Writes are queued and coalesced; queued_bytes() lets the owner apply
// backpressure (the agent stops reading worker pipes while it is high).
// on_close fires exactly once: EOF, an I/O error, or a protocol error, with
// the reason. Not thread-safe: use from the io_context's thread only.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "dlaunch/proto/protocol.h"

namespace dlaunch::proto {

// One 64 KiB read buffer per thread, for readers that wait for readability
// and copy out what they read before the next read: with many idle streams
// (channels, worker pipes) there is no buffer per stream.
std::span<char> thread_read_buffer();

class PipeChannel {
 public:
  struct Callbacks {
    std::function<void(Message&&)> on_message;
    std::function<void(const std::string& reason)> on_close;
    std::function<void()> on_drained;  // queue dropped below the low watermark
    std::function<void()> on_flushed;  // close_after_flush() has written everything
  };
  static constexpr std::size_t kLowWatermark = 1u << 20;

  // Takes ownership of both fds.
  PipeChannel(boost::asio::io_context& io, int read_fd, int write_fd, Callbacks cb);
  ~PipeChannel();
  PipeChannel(const PipeChannel&) = delete;
  PipeChannel& operator=(const PipeChannel&) = delete;

  // Bytes to take as the stream's first, before anything read from
  // read_fd (what release() gave the channel's previous owner). Before start().
  void prefeed(std::string_view bytes) { decoder_.feed(bytes); }
  void start();
  void send(const Message& msg);
  // Writes what is queued, then closes the write side (the peer sees EOF).
  void close_after_flush();
  void close();  // at once, without on_close
  // Reads and dispatches what is already waiting, now. For a timer about to
  // conclude that the peer fell silent: after this process was stalled
  // (overloaded machine, SIGSTOP), the timer may run before the read of the
  // peer's messages that arrived meanwhile.
  void read_pending();
  bool is_open() const { return open_; }
  // Stops the channel without closing its descriptors, and gives them up
  // with the bytes read but not taken as messages yet (a frame begun, frames
  // after the one being handled): for handing the stream to another process
  // (agent/reattach.h). From within on_message too: no message after the
  // one being handled is given, and on_close never comes. Nothing may be
  // queued or being written (the stream would break mid-frame): then the
  // descriptors are -1 and the channel goes on.
  struct Released {
    int read_fd = -1;
    int write_fd = -1;
    std::string unread;
  };
  Released release();
  std::size_t queued_bytes() const { return queued_; }

 private:
  void read_more();
  void on_readable();
  // Hands every whole message held to on_message; false once the channel
  // closed (or was released) meanwhile.
  bool dispatch();
  void write_more();
  void fail(const std::string& reason);

  boost::asio::posix::stream_descriptor in_;
  boost::asio::posix::stream_descriptor out_;
  Callbacks cb_;
  Decoder decoder_;
  std::deque<std::string> queue_;
  std::string writing_;
  std::size_t queued_ = 0;
  bool open_ = true;
  bool write_in_flight_ = false;
  bool waiting_ = false;  // an async_wait for readability is outstanding
  bool close_when_flushed_ = false;
  // Why writing stopped when the peer stopped reading (EPIPE): what it wrote
  // before it went may still be waiting to be read, so the channel ends at
  // the end of that stream, with this reason. Empty: writing goes on.
  std::string write_failed_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace dlaunch::proto
