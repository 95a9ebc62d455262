# ProcessGroup over Open MPI (see comm/include/comm/process_group.h).
set(comm_sources
  process_group.cpp
  mpi_process_group.cpp
)
# Debian's Open MPI is built with the (deprecated) C++ bindings, which <mpi.h>
# pulls into every C++ file that includes it; they live in libmpi_cxx, which
# MPI::MPI_C does not link. Skip them for comm and everything linking it.
target_compile_definitions(comm PUBLIC OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
