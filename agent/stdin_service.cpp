#include "stdin_service.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "dlaunch/process.h"

namespace dlaunch::agent {

namespace asio = boost::asio;

std::optional<std::string> StdinService::prepare(const proto::Setup& setup, proto::Ready&) {
  for (const auto& w : setup.workers) {
    if (w.stdin_pipe) readers_.insert(w.rank);
  }
  return std::nullopt;
}

bool StdinService::handle(const proto::Message& msg) {
  if (const auto* m = std::get_if<proto::StdinData>(&msg)) {
    data(m->data);
    return true;
  }
  if (std::holds_alternative<proto::StdinEof>(msg)) {
    eof();
    return true;
  }
  return false;
}

void StdinService::before_spawn(int rank, WorkerGift& gift) {
  if (!readers_.contains(rank)) return;  // its stdin: /dev/null
  auto [read_end, write_end] = make_pipe();
  gift.stdin_read = std::move(read_end);
  pending_[rank] = std::move(write_end);
}

void StdinService::after_spawn(int rank, bool spawned) {
  const auto it = pending_.find(rank);
  if (it == pending_.end()) return;
  UniqueFd write_end = std::move(it->second);
  pending_.erase(it);
  if (!spawned) return;
  set_nonblocking(write_end.get(), true);
  pipes_[rank] = std::make_unique<Pipe>(io_, write_end.release());
}

void StdinService::on_worker_exit(int rank) {
  const auto it = pipes_.find(rank);
  if (it == pipes_.end()) return;
  close(*it->second);  // what it did not read is dropped
  ack();
}

void StdinService::data(const std::string& bytes) {
  received_ += bytes.size();
  for (auto& [rank, in] : pipes_) {
    if (in->closed) continue;
    in->queue.push_back(bytes);
    write(*in);
  }
  ack();
}

void StdinService::eof() {
  eof_ = true;
  for (auto& [rank, in] : pipes_) {
    if (!in->closed && in->queue.empty() && !in->writing) close(*in);
  }
}

void StdinService::write(Pipe& in) {
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
                         [this, &in](boost::system::error_code ec) {
                           if (ec == asio::error::operation_aborted) return;
                           in.writing = false;
                           write(in);
                           ack();
                         });
      return;
    }
    // EPIPE: the worker closed its stdin (or is gone); nothing more for it.
    close(in);
    return;
  }
  if (eof_) close(in);
}

void StdinService::close(Pipe& in) {
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
void StdinService::ack() {
  std::uint64_t taken = received_;
  for (const auto& [rank, in] : pipes_) {
    if (!in->closed) taken = std::min(taken, in->taken);
  }
  if (taken > acked_) {
    acked_ = taken;
    node_.send_to_head(proto::StdinAck{taken});
  }
}

void StdinService::stop() {
  for (auto& [rank, in] : pipes_) close(*in);
  pending_.clear();
}

}  // namespace dlaunch::agent
