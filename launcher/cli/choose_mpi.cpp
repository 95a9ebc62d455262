// choose_mpi (cli/options.h): --mpi when the job's program is an Open MPI
// program (plan/mpi_program.h tells which programs are).
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/options.h"
#include "dlaunch/text.h"
#include "hostfile/hostfile.h"
#include "plan/mpi_program.h"

namespace dlaunch {

void choose_mpi(Options& o, const std::vector<std::string>& env) {
  if (o.mpi || o.no_mpi) return;
  const std::string workdir =
      o.workdir.empty() ? std::filesystem::current_path().string() : o.workdir;
  std::vector<std::vector<std::string>> commands;
  if (o.apps.empty()) {
    commands.push_back(o.command);
  } else {
    for (const auto& a : o.apps) commands.push_back(a.command);
  }
  for (const auto& c : commands) {
    const MpiLinkage l = mpi_linkage(c, env, workdir);
    if (l.kind == MpiKind::kOther) {
      throw InputError({}, "",
                       fmt::format("'{}' is an MPI program ({}) of an MPI that dlaunch cannot "
                                   "start: its ranks would each run alone as rank 0 of 1",
                                   c.front(), l.what),
                       "start it with its own launcher (dlaunch -n 1 mpiexec ...), or give "
                       "--no-mpi to run every rank on its own anyway");
    }
    if (l.kind == MpiKind::kOpenMpi) {
      std::fprintf(stderr,
                   "dlaunch: '%s' is an Open MPI program (%s): its ranks make one MPI world as "
                   "with --mpi (--no-mpi runs each on its own)\n",
                   printable(c.front()).c_str(), l.what.c_str());
      o.mpi = true;
      return;
    }
  }
}
}  // namespace dlaunch
