// --stdin on the agent: the head's StdinData goes into the stdin pipe of each
// worker of this node that reads it (WorkerSpec::stdin_pipe), without ever
// blocking the loop: the pipes are non-blocking, what does not fit waits in
// the worker's queue until the pipe has room. The head never has more than
// proto::kStdinWindow bytes unacknowledged here (StdinAck), so a queue holds
// at most that much. A worker that exits, or closes its stdin, has its data
// dropped (and acknowledged). StdinEof closes each pipe once its queue is
// written: the worker reads EOF.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include "agent.h"

namespace dlaunch::agent {

namespace asio = boost::asio;

void Agent::handle(proto::StdinData&& m) {
  stdin_received_ += m.data.size();
  for (auto& [rank, w] : workers_) {
    if (!w.in || w.in->closed) continue;
    w.in->queue.push_back(m.data);
    stdin_write(w);
  }
  stdin_ack();
}

void Agent::handle_stdin_eof() {
  stdin_eof_ = true;
  for (auto& [rank, w] : workers_) {
    if (w.in && !w.in->closed && w.in->queue.empty() && !w.in->writing) stdin_close(w);
  }
}

void Agent::stdin_write(Worker& w) {
  StdinPipe& in = *w.in;
  if (in.writing || in.closed) return;
  while (!in.queue.empty()) {
    const std::string& front = in.queue.front();
    const ssize_t n =
        ::write(in.pipe.native_handle(), front.data() + in.offset, front.size() - in.offset);
    if (n > 0) {
      in.offset += static_cast<std::size_t>(n);
      in.taken += static_cast<std::uint64_t>(n);
      if (in.offset == front.size()) {
        in.queue.pop_front();
        in.offset = 0;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      in.writing = true;
      in.pipe.async_wait(asio::posix::stream_descriptor::wait_write,
                         [this, &w](boost::system::error_code ec) {
                           if (ec == asio::error::operation_aborted || !w.in) return;
                           w.in->writing = false;
                           stdin_write(w);
                           stdin_ack();
                         });
      return;
    }
    // EPIPE: the worker closed its stdin (or is gone); nothing more for it.
    stdin_close(w);
    return;
  }
  if (stdin_eof_) stdin_close(w);
}

void Agent::stdin_close(Worker& w) {
  StdinPipe& in = *w.in;
  if (in.closed) return;
  in.closed = true;
  in.writing = false;
  in.queue.clear();
  in.offset = 0;
  boost::system::error_code ignored;
  in.pipe.cancel(ignored);
  in.pipe.close(ignored);
}

// The bytes every reading worker has taken (a closed pipe takes everything).
void Agent::stdin_ack() {
  std::uint64_t taken = stdin_received_;
  for (const auto& [rank, w] : workers_) {
    if (w.in && !w.in->closed) taken = std::min(taken, w.in->taken);
  }
  if (taken > stdin_acked_ && channel_->is_open()) {
    stdin_acked_ = taken;
    channel_->send(proto::StdinAck{taken});
  }
}

}  // namespace dlaunch::agent
