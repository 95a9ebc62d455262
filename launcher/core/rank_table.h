// The job core's rank table: what the head knows of every rank of the job,
// as one state per rank with a table of the moves it may make (docs/
// architecture.md, "The job core"). No sockets, no clock of its own, no
// threads: the controller owns one per attempt and asks it before it
// handles a rank's message, so that a Started or Exited that does not fit
// (a rank another node runs, a rank that already exited) is refused here,
// named, instead of corrupting a count.
//
//   waiting --Started--> running --Exited--> exited
//      |  \                 |
//      |   '----Exited------+-------------->          (it could not be spawned)
//      '---- its node gone -+-------------> gone      (no word of how it ended)
//
//   elsewhere: another launcher runs it (per-node mode: this plan holds one
//   node of the job, the ranks keep their global numbers); it never moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dlaunch/clock.h"
#include "dlaunch/proto/protocol.h"

namespace dlaunch {

enum class RankState : std::uint8_t {
  kElsewhere,  // not a rank of this plan's nodes
  kWaiting,    // its node's agent has not said it started
  kRunning,    // Started came, Exited not yet
  kExited,     // Exited came (how: its exit)
  kGone,       // its node was lost or its agent killed: it never said how it ended
};
inline constexpr int kRankStates = 5;

std::string_view rank_state_name(RankState s);

// Whether the table allows the move (staying where one is is not a move).
bool rank_transition_allowed(RankState from, RankState to);

class RankTable {
 public:
  struct Rank {
    RankState state = RankState::kElsewhere;
    std::size_t node = 0;  // the node of the plan that runs it (not elsewhere)
    int local_rank = 0;
    int pid = 0;              // from its Started
    SteadyTime started_at{};  // when its Started came
    proto::Exited exit;       // its Exited, once exited
  };

  // `world_size` ranks, every one elsewhere until placed.
  explicit RankTable(int world_size);
  // Rank `rank` runs on `node` of this plan as its `local_rank`: waiting.
  void place(int rank, std::size_t node, int local_rank);

  int size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<Rank>& ranks() const { return ranks_; }
  const Rank& at(int rank) const { return ranks_.at(static_cast<std::size_t>(rank)); }
  // Whether `rank` is a rank of the job that `node` runs.
  bool runs_on(int rank, std::size_t node) const;
  bool running(int rank) const { return at(rank).state == RankState::kRunning; }
  // Nothing here waits for it any more: exited, gone, or run elsewhere.
  bool settled(int rank) const;

  // The moves a rank's messages make. Each returns why the message does not
  // fit, naming the rank ("rank 3 is not run by this node", "rank 3 said it
  // started while it was running"), or an empty string once it moved.
  std::string start(std::size_t node, int rank, int pid, SteadyTime at);
  std::string exit(std::size_t node, const proto::Exited& ex);
  // The node's agent is beyond reach: each of its ranks not yet exited is
  // gone. All: every node's.
  void node_gone(std::size_t node);
  void all_gone();

  // Ranks that said Started so far (the progress line's "ranks running":
  // it counts up and never down).
  int started() const { return started_; }
  // Ranks running now.
  int running_now() const;

 private:
  void to(Rank& r, RankState next);

  std::vector<Rank> ranks_;
  std::vector<std::vector<int>> by_node_;  // the ranks each node runs
  int started_ = 0;
};

}  // namespace dlaunch
