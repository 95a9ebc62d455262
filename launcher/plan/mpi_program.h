// Is the program an MPI program? An Open MPI program started without --mpi
// runs as N unrelated singletons, each "rank 0 of 1", and the job exits 0
// (issue 29): dlaunch looks before it starts anything.
//
// An ELF program is an MPI program when its dynamic section names an MPI
// library (DT_NEEDED libmpi.so.N): libmpi.so.40 is Open MPI's, which --mpi
// direct-launches; another (MPICH's and Intel MPI's libmpi.so.12) is one it
// cannot. A Python script is an MPI program when it imports mpi4py (Debian's
// is built on Open MPI). What cannot be read on this machine (a program only
// the nodes have) is not looked at.
#pragma once

#include <string>
#include <vector>

namespace dlaunch {

enum class MpiKind { kNone, kOpenMpi, kOther };

struct MpiLinkage {
  MpiKind kind = MpiKind::kNone;
  std::string what;  // "libmpi.so.40", "mpi4py"
};

// The MPI library an ELF file needs directly (its DT_NEEDED entries), by
// reading its headers; kNone for anything else, or a file it cannot read.
MpiLinkage elf_mpi_linkage(const std::string& path);

// For a job's command as it will run (`python3 x.py ...` included), found
// with PATH in `env` from `workdir`.
MpiLinkage mpi_linkage(const std::vector<std::string>& command, const std::vector<std::string>& env,
                       const std::string& workdir);

}  // namespace dlaunch
