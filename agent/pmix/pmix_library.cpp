#include "pmix/pmix_library.h"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "dlaunch/error.h"

#ifndef DLAUNCH_PMIX_LIBDIR
#define DLAUNCH_PMIX_LIBDIR ""
#endif

namespace dlaunch::agent {

namespace {

struct Loaded {
  PmixLibrary lib;
  std::string error;  // empty when lib is whole
};

template <typename Fn>
bool resolve(void* handle, const char* name, Fn& fn, std::string& error) {
  void* sym = ::dlsym(handle, name);
  if (sym == nullptr) {
    error = std::string("it has no ") + name;
    return false;
  }
  fn = reinterpret_cast<Fn>(sym);
  return true;
}

Loaded load() {
  Loaded out;
  std::vector<std::string> candidates = {"libpmix.so.2"};
  if (std::string_view(DLAUNCH_PMIX_LIBDIR).empty() == false) {
    candidates.push_back(std::string(DLAUNCH_PMIX_LIBDIR) + "/libpmix.so.2");
  }
  void* handle = nullptr;
  std::string first_error;
  for (const std::string& path : candidates) {
    // Global: PMIx's own plugins, which it dlopens, look for its symbols.
    handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle != nullptr) {
      out.lib.path = path;
      break;
    }
    const char* why = ::dlerror();
    if (first_error.empty()) first_error = why != nullptr ? why : path;
  }
  if (handle == nullptr) {
    out.error = first_error;
    return out;
  }
  PmixLibrary& l = out.lib;
  std::string& e = out.error;
  if (resolve(handle, "PMIx_server_init", l.server_init, e) &&
      resolve(handle, "PMIx_server_finalize", l.server_finalize, e) &&
      resolve(handle, "PMIx_server_register_nspace", l.server_register_nspace, e) &&
      resolve(handle, "PMIx_server_register_client", l.server_register_client, e) &&
      resolve(handle, "PMIx_server_setup_fork", l.server_setup_fork, e) &&
      resolve(handle, "PMIx_generate_regex", l.generate_regex, e) &&
      resolve(handle, "PMIx_generate_ppn", l.generate_ppn, e) &&
      resolve(handle, "PMIx_Info_load", l.info_load, e) &&
      resolve(handle, "PMIx_Value_destruct", l.value_destruct, e) &&
      resolve(handle, "PMIx_Value_load", l.value_load, e) &&
      resolve(handle, "PMIx_Error_string", l.error_string, e) &&
      resolve(handle, "PMIx_Parse_cpuset_string", l.parse_cpuset_string, e) &&
      resolve(handle, "PMIx_server_generate_locality_string", l.generate_locality_string, e) &&
      resolve(handle, "PMIx_Cpuset_destruct", l.cpuset_destruct, e)) {
    // Only said (pmix_version.h): not needed to serve.
    l.get_version = reinterpret_cast<decltype(l.get_version)>(::dlsym(handle, "PMIx_Get_version"));
    return out;
  }
  e = out.lib.path + ": " + e + " (a PMIx older than 4?)";
  return out;
}

}  // namespace

const PmixLibrary& pmix_library() {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (!loaded.error.empty()) {
    throw Error(ErrorKind::kEnvironment,
                "--mpi needs the PMIx library (libpmix.so.2) on every node, and this node has "
                "no usable one: " +
                    loaded.error +
                    " (install Open MPI's PMIx there, e.g. Debian's libpmix2, or run the job "
                    "without --mpi)");
  }
  return loaded.lib;
}

}  // namespace dlaunch::agent
