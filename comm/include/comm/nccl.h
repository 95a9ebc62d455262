// Direct NCCL access for a group made with dlaunch::comm::Backend::kNccl: mix
// comm's calls with your own NCCL and CUDA calls on the same communicator and
// stream. Only in builds where dlaunch::comm::nccl_available() is true (this
// header needs CUDA's and NCCL's headers).
//
//   namespace dc = dlaunch::comm;
//   auto pg = dc::ProcessGroup::create(dc::Backend::kNccl);
//   dc::nccl_check(*pg, ncclAllReduce(d, d, n, ncclFloat, ncclSum,
//                                     dc::nccl_communicator(*pg), dc::nccl_stream(*pg)),
//                  "ncclAllReduce");
//   cudaStreamSynchronize(dc::nccl_stream(*pg));
//
// The communicator is non-blocking (NCCL >= 2.14, config.blocking = 0): any
// NCCL call on it may return ncclInProgress, and NCCL requires the caller to
// poll ncclCommGetAsyncError until the state leaves ncclInProgress before the
// next NCCL call or the next kernel on the stream. nccl_check does that under
// the group's collective timeout (the watchdog of comm's own calls).
//
// Each throws dlaunch::comm::CommError (kind kUsage) when pg is not an NCCL
// group.
//
// Namespace: dlaunch::comm. The global alias `comm` for it is deprecated, kept
// for this release only (removed in the next); define DLAUNCH_COMM_NO_ALIAS
// before including to drop it now.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/process_group.h"

namespace dlaunch::comm {

ncclComm_t nccl_communicator(ProcessGroup& pg);
cudaStream_t nccl_stream(ProcessGroup& pg);
// The CUDA device the group selected (LOCAL_RANK among the visible ones).
int cuda_device(ProcessGroup& pg);

// The result `rc` of a direct NCCL call named `function` on pg's communicator:
// returns at once on ncclSuccess; waits out ncclInProgress (polling
// ncclCommGetAsyncError) up to the group's collective timeout; on an error or
// the timeout aborts the communicator and throws CommError, as comm's own calls
// do. ncclInvalidArgument and ncclInvalidUsage throw without an abort (nothing
// was enqueued).
void nccl_check(ProcessGroup& pg, ncclResult_t rc, const char* function);

}  // namespace dlaunch::comm

// Deprecated (removed in the next release): `comm` for dlaunch::comm, so that
// code written before the move still compiles. DLAUNCH_COMM_NO_ALIAS drops it.
#ifndef DLAUNCH_COMM_NO_ALIAS
namespace comm = dlaunch::comm;
#endif
