#include "core/rank_table.h"

#include <fmt/format.h>

#include "dlaunch/move_table.h"

namespace dlaunch {

namespace {

using R = RankState;

// Exited may come for a rank that never said Started: its spawn failed.
constexpr auto kRankMoves = MoveTable<R, kRankStates>()
                                .allow(R::kWaiting, R::kRunning)
                                .allow(R::kWaiting, R::kExited)
                                .allow(R::kWaiting, R::kGone)
                                .allow(R::kRunning, R::kExited)
                                .allow(R::kRunning, R::kGone);

}  // namespace

std::string_view rank_state_name(RankState s) {
  switch (s) {
    case R::kElsewhere:
      return "elsewhere";
    case R::kWaiting:
      return "waiting";
    case R::kRunning:
      return "running";
    case R::kExited:
      return "exited";
    case R::kGone:
      return "gone";
  }
  return "?";
}

bool rank_transition_allowed(RankState from, RankState to) { return kRankMoves.allows(from, to); }

RankTable::RankTable(int world_size) : ranks_(static_cast<std::size_t>(world_size)) {}

void RankTable::place(int rank, std::size_t node, int local_rank) {
  Rank& r = ranks_.at(static_cast<std::size_t>(rank));
  r.state = R::kWaiting;
  r.node = node;
  r.local_rank = local_rank;
  if (by_node_.size() <= node) by_node_.resize(node + 1);
  by_node_[node].push_back(rank);
}

bool RankTable::runs_on(int rank, std::size_t node) const {
  if (rank < 0 || rank >= size()) return false;
  const Rank& r = at(rank);
  return r.state != R::kElsewhere && r.node == node;
}

bool RankTable::settled(int rank) const {
  const RankState s = at(rank).state;
  return s == R::kExited || s == R::kGone || s == R::kElsewhere;
}

void RankTable::to(Rank& r, RankState next) {
  if (!kRankMoves.allows(r.state, next))
    throw_bad_move("rank state", rank_state_name(r.state), rank_state_name(next));
  r.state = next;
}

std::string RankTable::start(std::size_t node, int rank, int pid, SteadyTime at) {
  if (!runs_on(rank, node)) return fmt::format("rank {} is not run by this node", rank);
  Rank& r = ranks_[static_cast<std::size_t>(rank)];
  if (!kRankMoves.allows(r.state, R::kRunning)) {
    return fmt::format("rank {} said it started while it was {}", rank, rank_state_name(r.state));
  }
  to(r, R::kRunning);
  r.pid = pid;
  r.started_at = at;
  ++started_;
  return {};
}

std::string RankTable::exit(std::size_t node, const proto::Exited& ex) {
  if (!runs_on(ex.rank, node)) return fmt::format("rank {} is not run by this node", ex.rank);
  Rank& r = ranks_[static_cast<std::size_t>(ex.rank)];
  if (!kRankMoves.allows(r.state, R::kExited)) {
    return fmt::format("rank {} said it exited while it was {}", ex.rank, rank_state_name(r.state));
  }
  to(r, R::kExited);
  r.exit = ex;
  return {};
}

void RankTable::node_gone(std::size_t node) {
  if (node >= by_node_.size()) return;
  for (const int rank : by_node_[node]) {
    Rank& r = ranks_[static_cast<std::size_t>(rank)];
    if (r.state == R::kWaiting || r.state == R::kRunning) to(r, R::kGone);
  }
}

void RankTable::all_gone() {
  for (std::size_t node = 0; node < by_node_.size(); ++node) node_gone(node);
}

int RankTable::running_now() const {
  int n = 0;
  for (const Rank& r : ranks_) n += r.state == R::kRunning ? 1 : 0;
  return n;
}

}  // namespace dlaunch
