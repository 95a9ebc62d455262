# ProcessGroup over NCCL (see comm/include/comm/process_group.h, kNccl). Only
# included when comm/CMakeLists.txt found CUDA and NCCL (DLAUNCH_WITH_NCCL).
set(comm_sources
  nccl_process_group.cpp
)
