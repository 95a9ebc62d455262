// MPI fences across nodes (--mpi), a feature of the job
// (controller/feature.h). Each agent's PMIx server sends its node's part of
// a fence (FenceUp); every node's k-th fence is the same collective
// (MPI_Init's and the like span the whole job), so once every node of the
// plan has sent its part, the parts joined in node order go back to every
// node (FenceDown). In per-node mode the plan is one node of a job whose
// other nodes other launchers run: the joined part then goes through a
// FenceRelay (pernode/store_fence.h), which answers on the job's loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "controller/feature.h"

namespace dlaunch {

// Completes MPI fences with the nodes of other controllers (per-node mode):
// `done` gets every node's data of fence `seq`, in node order, on the
// controller's io_context, or an error that no waiting can mend. While the
// others are slow or gone it waits, as MPI's own fence would: the job then
// ends by what stopped them (a lost launcher, a failed rank, --timeout).
class FenceRelay {
 public:
  virtual ~FenceRelay() = default;
  virtual void fence(std::uint32_t seq, std::string data,
                     std::function<void(std::string all, std::string error)> done) = 0;
};

class MpiFences final : public JobFeature {
 public:
  // relay: null when the plan's nodes are the whole job.
  MpiFences(JobAccess& job, FenceRelay* relay) : job_(job), relay_(relay) {}

  // Node `node` sent its part of fence `up.seq`.
  void on_fence_up(std::size_t node, proto::FenceUp&& up);

 private:
  void complete(std::uint32_t seq, std::string all);

  JobAccess& job_;
  FenceRelay* relay_;
  // Fences in flight: seq -> each node's part (empty optional: not yet).
  std::map<std::uint32_t, std::vector<std::optional<std::string>>> parts_;
};

}  // namespace dlaunch
