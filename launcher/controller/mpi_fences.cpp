// MPI fences across nodes through the head (mpi_fences.h).
#include "controller/mpi_fences.h"

#include <fmt/format.h>

namespace dlaunch {

void MpiFences::on_fence_up(std::size_t node, proto::FenceUp&& up) {
  auto& slots = parts_[up.seq];
  slots.resize(job_.plan().nodes.size());
  slots[node] = std::move(up.data);
  for (const auto& s : slots) {
    if (!s) return;
  }
  std::string mine;
  for (const auto& s : slots) mine += *s;
  parts_.erase(up.seq);
  if (relay_ == nullptr) {
    complete(up.seq, std::move(mine));
    return;
  }
  // The other launchers' nodes: the relay answers on our loop.
  relay_->fence(up.seq, std::move(mine), [this, seq = up.seq](std::string all, std::string error) {
    if (job_.phase() == JobPhase::kFinished) return;
    if (!error.empty()) {
      job_.fail({.kind = CauseKind::kNode,
                 .message = fmt::format("MPI fence {} across the launchers: {}", seq, error)});
      return;
    }
    complete(seq, std::move(all));
  });
}

void MpiFences::complete(std::uint32_t seq, std::string all) {
  // The joined parts travel as one frame: past the protocol's frame limit
  // the job cannot go on (MPI would wait in its fence forever), so say so.
  if (all.size() + 64 > proto::kMaxFrameBytes) {
    job_.fail({.kind = CauseKind::kNode,
               .message = fmt::format("the MPI fence data of all nodes is {} bytes, over the "
                                      "control protocol's frame limit of {} bytes",
                                      all.size(), proto::kMaxFrameBytes)});
    return;
  }
  job_.send_all(proto::FenceDown{.seq = seq, .data = std::move(all)});
}

}  // namespace dlaunch
