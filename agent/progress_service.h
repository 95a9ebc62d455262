// The ranks' comm progress for --stall-timeout (docs/troubleshooting.md,
// "Hangs"), as a node service (service.h): at Setup, when the head asks for
// progress (Setup.progress_interval_ms) and the memory can be had, a
// ProgressBoard (progress_board.h) of one sealed counter per rank of the
// node; each rank gets its own at spawn (DLAUNCH_PROGRESS_FD, slot 0). While
// the workers run, every interval the sum of the counters goes to the head
// when it moved (Progress, which counts as activity as an output line does),
// and a counter found damaged is said once (ProgressDamaged, naming the
// rank). Where the memory cannot be had, a stall is judged by output alone.
//
// Thread safety: none; the agent's event loop only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlaunch/clock.h"
#include "progress_board.h"
#include "service.h"

namespace dlaunch::agent {

class ProgressService final : public NodeService {
 public:
  ProgressService(Clock& clock, NodeAccess& node) : clock_(clock), node_(node) {}
  ProgressService(const ProgressService&) = delete;
  ProgressService& operator=(const ProgressService&) = delete;

  std::optional<std::string> prepare(const proto::Setup& setup, proto::Ready& ready) override;
  void before_spawn(int rank, WorkerGift& gift) override;
  void on_running() override { arm(); }
  void stop() override;

  // Whether the ranks have counters (the head asked, and the memory was had).
  bool active() const { return board_ != nullptr; }

 private:
  void arm();

  Clock& clock_;
  NodeAccess& node_;
  std::chrono::milliseconds interval_{0};
  std::unique_ptr<ProgressBoard> board_;
  std::vector<std::int32_t> ranks_;  // the rank of each slot, in rank order
  std::unique_ptr<Timer> timer_;
  std::uint64_t sent_ = 0;  // the sum the head last got
};

}  // namespace dlaunch::agent
