// Must NOT compile: with DLAUNCH_COMM_NO_ALIAS defined, comm's headers declare
// no global `comm`, so the old spelling is an unknown name. Compiled by the
// test comm_no_alias_refuses_old_spelling (tests/unit/comm/CMakeLists.txt),
// never built into a program.
#ifndef DLAUNCH_COMM_NO_ALIAS
#define DLAUNCH_COMM_NO_ALIAS
#endif

#include "comm/process_group.h"

int main() { return comm::parse_backend("mpi") == dlaunch::comm::Backend::kMpi ? 0 : 1; }
