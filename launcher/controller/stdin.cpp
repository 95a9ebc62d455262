// --stdin: dlaunch's stdin to the ranks that read it (docs/mpmd.md). The
// head reads while every agent holding such a rank has acknowledged all but
// less than proto::kStdinWindow bytes of what it was sent (StdinAck), so a
// rank that does not read stops dlaunch reading, and no agent ever holds
// more than the window per rank.
#include <algorithm>

#include "controller/controller.h"
#include "controller/stdin_reader.h"

namespace dlaunch {

void Controller::start_stdin() {
  if (cfg_.stdin_rank == kStdinNone || cfg_.probe_only || stdin_) return;
  stdin_sent_.assign(nodes_.size(), 0);
  stdin_acked_.assign(nodes_.size(), 0);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const auto& ranks = nodes_[i].plan->ranks;
    const bool target = cfg_.stdin_rank == kStdinAll ||
                        std::any_of(ranks.begin(), ranks.end(),
                                    [&](const RankPlan& r) { return r.rank == cfg_.stdin_rank; });
    if (target) stdin_nodes_.push_back(i);
  }
  if (stdin_nodes_.empty()) return;
  stdin_ = std::make_unique<StdinReader>(
      env_.io, cfg_.stdin_fd, proto::kStdinChunk,
      [this](std::string data) { on_stdin_data(std::move(data)); },
      [this] {
        for (std::size_t i : stdin_nodes_) {
          if (stdin_target_open(i)) nodes_[i].link->send(proto::StdinEof{});
        }
      });
}

// The node still has a chosen rank that has not exited, and a link to it.
bool Controller::stdin_target_open(std::size_t node) const {
  const Node& n = nodes_[node];
  if (!n.link || !n.link->is_open() || n.life.link_gone() || n.life.done()) return false;
  return std::any_of(n.plan->ranks.begin(), n.plan->ranks.end(), [&](const RankPlan& r) {
    return (cfg_.stdin_rank == kStdinAll || cfg_.stdin_rank == r.rank) &&
           !ranks_.at(static_cast<std::size_t>(r.rank)).exited;
  });
}

void Controller::on_stdin_data(std::string data) {
  if (phase_ != Phase::kRunning) return;
  const proto::StdinData msg{std::move(data)};
  for (std::size_t i : stdin_nodes_) {
    if (!stdin_target_open(i)) continue;
    stdin_sent_[i] += msg.data.size();
    nodes_[i].link->send(msg);
  }
  update_stdin_hold();
}

void Controller::on_stdin_ack(std::size_t node, const proto::StdinAck& ack) {
  if (node >= stdin_acked_.size()) return;
  stdin_acked_[node] = std::max(stdin_acked_[node], std::min(ack.bytes, stdin_sent_[node]));
  update_stdin_hold();
}

void Controller::update_stdin_hold() {
  if (!stdin_) return;
  bool full = false;
  bool wanted = false;
  for (std::size_t i : stdin_nodes_) {
    if (!stdin_target_open(i)) continue;
    wanted = true;
    if (stdin_sent_[i] - stdin_acked_[i] >= proto::kStdinWindow) full = true;
  }
  // Nothing more once every reader is gone (endless input would only be read
  // and dropped), or the job is going down.
  stdin_->hold(full || !wanted || phase_ != Phase::kRunning);
}

}  // namespace dlaunch
