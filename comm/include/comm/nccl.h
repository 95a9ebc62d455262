// Direct NCCL access for a group made with comm::Backend::kNccl: mix comm's
// calls with your own NCCL and CUDA calls on the same communicator and
// stream. Only in builds where comm::nccl_available() is true (this header
// needs CUDA's and NCCL's headers).
//
//   auto pg = comm::ProcessGroup::create(comm::Backend::kNccl);
//   ncclAllReduce(d, d, n, ncclFloat, ncclSum, comm::nccl_communicator(*pg),
//                 comm::nccl_stream(*pg));
//
// Each throws comm::CommError when pg is not an NCCL group.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/process_group.h"

namespace comm {

ncclComm_t nccl_communicator(ProcessGroup& pg);
cudaStream_t nccl_stream(ProcessGroup& pg);
// The CUDA device the group selected (LOCAL_RANK among the visible ones).
int cuda_device(ProcessGroup& pg);

}  // namespace comm
