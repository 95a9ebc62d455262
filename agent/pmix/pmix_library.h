// libpmix, loaded when a job first needs it (--mpi) rather than linked: the
// agent that dlaunch copies to nodes with nothing installed must start where
// there is no PMIx, and only an MPI job needs one (a node that runs Open MPI
// programs has it: Open MPI's own PMIx client is libpmix).
//
// The calls PmixHost makes, resolved once with dlopen/dlsym from
// libpmix.so.2 (the loader's search path first, then the directory the
// build found PMIx in). Thread-safe: loaded at most once, never unloaded.
#pragma once

#include <string>

#include <pmix.h>
#include <pmix_server.h>

namespace dlaunch::agent {

struct PmixLibrary {
  std::string path;  // what was loaded
  decltype(&::PMIx_server_init) server_init = nullptr;
  decltype(&::PMIx_server_finalize) server_finalize = nullptr;
  decltype(&::PMIx_server_register_nspace) server_register_nspace = nullptr;
  decltype(&::PMIx_server_register_client) server_register_client = nullptr;
  decltype(&::PMIx_server_setup_fork) server_setup_fork = nullptr;
  decltype(&::PMIx_generate_regex) generate_regex = nullptr;
  decltype(&::PMIx_generate_ppn) generate_ppn = nullptr;
  decltype(&::PMIx_Info_load) info_load = nullptr;
  decltype(&::PMIx_Value_destruct) value_destruct = nullptr;
  decltype(&::PMIx_Value_load) value_load = nullptr;
  decltype(&::PMIx_Error_string) error_string = nullptr;
  decltype(&::PMIx_Parse_cpuset_string) parse_cpuset_string = nullptr;
  decltype(&::PMIx_server_generate_locality_string) generate_locality_string = nullptr;
  decltype(&::PMIx_Cpuset_destruct) cpuset_destruct = nullptr;
  decltype(&::PMIx_Get_version) get_version = nullptr;  // where the library has it
};

// The library, loaded on first call. Throws dlaunch::Error (kEnvironment)
// saying that this node has no usable PMIx library, what the loader said,
// and what to do.
const PmixLibrary& pmix_library();

}  // namespace dlaunch::agent
