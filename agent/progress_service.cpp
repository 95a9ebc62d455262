#include "progress_service.h"

#include <algorithm>
#include <utility>

namespace dlaunch::agent {

std::optional<std::string> ProgressService::prepare(const proto::Setup& setup, proto::Ready&) {
  if (setup.progress_interval_ms == 0 || setup.workers.empty()) return std::nullopt;
  // Where the memory for it cannot be had, a stall is judged by output alone.
  auto board = ProgressBoard::create(setup.workers.size());
  if (!board) return std::nullopt;
  board_ = std::move(*board);
  interval_ = std::chrono::milliseconds(setup.progress_interval_ms);
  for (const auto& w : setup.workers) ranks_.push_back(w.rank);
  std::sort(ranks_.begin(), ranks_.end());
  return std::nullopt;
}

void ProgressService::before_spawn(int rank, WorkerGift& gift) {
  if (!board_) return;
  const auto at = std::lower_bound(ranks_.begin(), ranks_.end(), rank);
  if (at == ranks_.end() || *at != rank) return;
  // Its own object, slot 0 there: no rank reaches another's counter.
  const int fd = board_->fd(static_cast<std::size_t>(at - ranks_.begin()));
  gift.keep_fd = fd;
  gift.env.emplace_back("DLAUNCH_PROGRESS_FD", std::to_string(fd));
  gift.env.emplace_back("DLAUNCH_PROGRESS_SLOT", "0");
}

// Every interval while the workers run: the sum of the ranks' counters to
// the head when it moved.
void ProgressService::arm() {
  if (!board_) return;
  if (!timer_) timer_ = clock_.make_timer();
  timer_->expires_at(clock_.now() + interval_, [this] {
    if (!node_.workers_running()) return;
    auto reading = board_->read();
    // The rank's doing, not the agent's: the head names it, and its calls
    // count no more.
    for (auto& d : reading.damaged) {
      node_.send_to_head(
          proto::ProgressDamaged{.rank = ranks_.at(d.slot), .what = std::move(d.what)});
    }
    if (reading.total != sent_) {
      sent_ = reading.total;
      node_.send_to_head(proto::Progress{.collectives = reading.total});
    }
    arm();
  });
}

void ProgressService::stop() {
  if (timer_) timer_->cancel();
}

}  // namespace dlaunch::agent
