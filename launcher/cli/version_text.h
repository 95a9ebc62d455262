// `dlaunch --version`: the version, the protocol, and what the build has in it.
#pragma once

#include <string>

namespace dlaunch {

// Several lines, e.g.
//   dlaunch 0.1.0 (control protocol 3)
//   build: RelWithDebInfo, GNU 12.2.0
//   MPI: yes (MPI 3.1, Open MPI 4.1.4)
//   NCCL: no
//   CUDA: no
//   PMIx: 4.2.2
std::string version_text();

}  // namespace dlaunch
