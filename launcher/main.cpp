// dlaunch: the head-node launcher. Parses the command line and hands the
// job to its driver: the head-node driver (drivers/head_job.h) for a job of
// the hostfile's nodes, the per-node driver (drivers/pernode.h) for
// torchrun's options, or a verb of the job registry (drivers/job_commands.h). See
// docs/architecture.md.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/options.h"
#include "dlaunch/error.h"
#include "dlaunch/process.h"
#include "dlaunch/text.h"
#include "drivers/head_job.h"
#include "drivers/job_commands.h"
#include "drivers/pernode.h"
#include "plan/mpi_program.h"

namespace dl = dlaunch;

namespace {

int run(int argc, char** argv) {
  dl::Options o;
  int early_exit = 0;
  if (!dl::parse_options(argc, argv, o, early_exit)) return early_exit;
  // An Open MPI program runs as one MPI world, never as N singletons.
  dl::choose_mpi(o, dl::current_environment());
  // --nohup: a closed terminal's SIGHUP does nothing, from here on (the
  // controller leaves it ignored; children get the default back at exec).
  if (o.nohup) ::signal(SIGHUP, SIG_IGN);
  // torchrun's options: this launcher runs one node of the job (docs/per-node.md).
  if (o.pernode.enabled) return dl::run_per_node(o);
  return dl::run_head_job(o, std::vector<std::string>(argv, argv + argc));
}

}  // namespace

int main(int argc, char** argv) {
  // Started with stdin closed (`dlaunch ... <&-`): /dev/null takes fd 0, so
  // that no pipe or socket of ours lands there and is read as the job's stdin
  // (--stdin).
  if (::fcntl(0, F_GETFD) == -1 && errno == EBADF) {
    const int fd = ::open("/dev/null", O_RDONLY);
    if (fd > 0) ::close(fd);  // 0 was taken meanwhile: nothing to read from
  }
  ::signal(SIGPIPE, SIG_IGN);
  dl::raise_descriptor_limit();
  try {
    // dlaunch ps|status|events: the registry's verbs (drivers/job_commands.h).
    if (argc >= 2 && dl::is_job_command(argv[1])) return dl::run_job_command(argc, argv);
    return run(argc, argv);
  } catch (const dl::Error& e) {
    // The user's input: exit 2, nothing started. Anything else: exit 1.
    std::fprintf(stderr, "dlaunch: error: %s\n", dl::printable(e.what()).c_str());
    return e.kind() == dl::ErrorKind::kInput ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlaunch: internal error: %s\n", dl::printable(e.what()).c_str());
    return 1;
  }
}
