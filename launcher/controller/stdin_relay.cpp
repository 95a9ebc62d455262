// --stdin: dlaunch's stdin to the ranks that read it (stdin_relay.h).
#include "controller/stdin_relay.h"

#include <algorithm>

#include "controller/stdin_reader.h"

namespace dlaunch {

StdinRelay::StdinRelay(JobAccess& job, boost::asio::io_context& io, int rank, int fd)
    : job_(job), io_(io), rank_(rank), fd_(fd) {}

StdinRelay::~StdinRelay() = default;

void StdinRelay::stop() { reader_.reset(); }

bool StdinRelay::reading() const { return reader_ && !held_ && !reader_->ended(); }

void StdinRelay::on_phase(JobPhase now) {
  if (now == JobPhase::kRunning) {
    start();
  } else {
    update_hold();
  }
}

void StdinRelay::start() {
  if (rank_ == kStdinNone || reader_) return;
  const JobPlan& plan = job_.plan();
  sent_.assign(plan.nodes.size(), 0);
  acked_.assign(plan.nodes.size(), 0);
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    const auto& ranks = plan.nodes[i].ranks;
    const bool target =
        rank_ == kStdinAll ||
        std::any_of(ranks.begin(), ranks.end(), [&](const RankPlan& r) { return r.rank == rank_; });
    if (target) nodes_.push_back(i);
  }
  if (nodes_.empty()) return;
  reader_ = std::make_unique<StdinReader>(
      io_, fd_, proto::kStdinChunk, [this](std::string data) { on_data(std::move(data)); },
      [this] {
        for (std::size_t i : nodes_) {
          if (target_open(i)) job_.send(i, proto::StdinEof{});
        }
      });
}

// The node still has a chosen rank that has not exited, and a link to it.
bool StdinRelay::target_open(std::size_t node) const {
  if (!job_.node_reachable(node)) return false;
  const auto& ranks = job_.plan().nodes[node].ranks;
  return std::any_of(ranks.begin(), ranks.end(), [&](const RankPlan& r) {
    return (rank_ == kStdinAll || rank_ == r.rank) && !job_.rank_exited(r.rank);
  });
}

void StdinRelay::on_data(std::string data) {
  if (job_.phase() != JobPhase::kRunning) return;
  const proto::StdinData msg{std::move(data)};
  for (std::size_t i : nodes_) {
    if (!target_open(i)) continue;
    sent_[i] += msg.data.size();
    job_.send(i, msg);
  }
  update_hold();
}

void StdinRelay::on_ack(std::size_t node, const proto::StdinAck& ack) {
  if (node >= acked_.size()) return;
  acked_[node] = std::max(acked_[node], std::min(ack.bytes, sent_[node]));
  update_hold();
}

void StdinRelay::update_hold() {
  if (!reader_) return;
  bool full = false;
  bool wanted = false;
  for (std::size_t i : nodes_) {
    if (!target_open(i)) continue;
    wanted = true;
    if (sent_[i] - acked_[i] >= proto::kStdinWindow) full = true;
  }
  held_ = full || !wanted || job_.phase() != JobPhase::kRunning;
  reader_->hold(held_);
}

}  // namespace dlaunch
