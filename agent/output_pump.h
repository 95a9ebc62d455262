// The workers' output on its way to the head.
//
// LineBuffer: cuts a worker's byte stream into whole lines for forwarding.
// Whole lines leave at once; a trailing partial line is held until its
// newline arrives, until flush timeout (take_all), or until it grows past
// max_partial bytes (then it leaves as a partial chunk).
//
// OutputRelay: reads every worker's stdout and stderr pipes on the agent's
// loop and sends what they write as Output messages, whole lines at once;
// with backpressure (a stream is left unread, its worker blocking on its
// full pipe, while more than kHighWatermark waits for the control channel or
// the head said PauseOutput) and a partial line's own flush (below).
//
// Thread safety: none; the agent's event loop only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "dlaunch/clock.h"
#include "dlaunch/proto/protocol.h"

namespace dlaunch::agent {

class LineBuffer {
 public:
  explicit LineBuffer(std::size_t max_partial = 64 * 1024) : max_partial_(max_partial) {}

  void append(std::string_view data) { buf_.append(data); }
  // Every complete line held (each ending in '\n'); empty when none.
  std::string take_lines();
  // True when the held partial line is too long to keep waiting.
  bool partial_overflow() const { return buf_.size() >= max_partial_; }
  bool has_partial() const { return !buf_.empty(); }
  // Everything held, complete or not.
  std::string take_all();

 private:
  std::string buf_;
  std::size_t max_partial_;
};

// Stop reading workers while more than this waits for the control channel.
// 1 MiB covers milliseconds of the fastest output path (a local pipe at
// ~600 MiB/s) and keeps the agent's peak RSS near 8.5 MiB in a flood of 8
// ranks; 8 MiB here gave 21 MiB for no more throughput (bench/: footprint).
inline constexpr std::size_t kHighWatermark = 1u << 20;

class OutputRelay {
 public:
  struct Hooks {
    std::function<void(proto::Output)> send;  // to the head
    std::function<std::size_t()> queued;      // bytes waiting for the control channel
    // What a worker wrote, as it is read, before it goes (the node services).
    std::function<void(int rank, proto::Stream stream, std::string_view data)> heard;
    // The worker runs or waits for a CPU (its process is 'R').
    std::function<bool(int rank)> runnable;
  };
  OutputRelay(boost::asio::io_context& io, Clock& clock, Hooks hooks);
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // How long a partial line waits for its newline (Setup's flush_ms).
  void set_flush(std::chrono::milliseconds flush) { flush_ = flush; }
  // A spawned worker's stdout and stderr read ends (owned from here on):
  // read from now on.
  void watch(int rank, int out_fd, int err_fd);
  // The worker exited, so all it wrote is in its pipes: read it now, so
  // that its last lines reach the head before its Exited.
  void drain(int rank);
  // The head's PauseOutput: leave the pipes unread until it says so.
  void pause(bool paused);
  // The control channel drained: the streams left unread are read again.
  void resume();

 private:
  struct Stream {
    Stream(boost::asio::io_context& io, Clock& clock, int fd, int of_rank, proto::Stream s)
        : pipe(io, fd), timer(clock.make_timer()), rank(of_rank), stream(s) {}
    boost::asio::posix::stream_descriptor pipe;
    std::unique_ptr<Timer> timer;  // flushes a held partial line
    int rank;
    proto::Stream stream;
    LineBuffer lines;
    bool reading = false;  // an async read is outstanding
    bool parked = false;   // waiting for the control channel to drain
    bool timer_armed = false;
    bool eof = false;
    int starved_holds = 0;  // flush periods a partial line waited on a runnable worker
  };

  void read(Stream& s);
  void forward(Stream& s, std::string_view data);
  void arm_flush(Stream& s);
  void flush_partial(Stream& s);
  void drain(Stream& s);

  boost::asio::io_context& io_;
  Clock& clock_;
  Hooks hooks_;
  std::chrono::milliseconds flush_{0};
  bool paused_ = false;
  std::multimap<int, std::unique_ptr<Stream>> streams_;  // by rank: its stdout, then stderr
};

}  // namespace dlaunch::agent
