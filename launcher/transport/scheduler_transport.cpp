#include "transport/scheduler_transport.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "dlaunch/process.h"
#include "transport/local_transport.h"

namespace dlaunch {

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

bool has_env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

}  // namespace

std::string remote_start_program(Transport t) {
  switch (t) {
    case Transport::kSge:
      return env_or("DLAUNCH_QRSH", "qrsh");
    case Transport::kLsf:
      return env_or("DLAUNCH_BLAUNCH", "blaunch");
    case Transport::kFlux:
      return env_or("DLAUNCH_FLUX", "flux");
    default:
      return {};
  }
}

// The options, and why:
//   qrsh -inherit: a task of the running parallel job on that node (the
//       shepherd runs it, SGE accounts and kills it); no pty is given to a
//       command, and stdin/stdout are plain byte streams (checked on SGE
//       8.1.9: 1 MB of random bytes both ways, EOF reaches the command);
//   blaunch HOST: LSF's rsh-style form (one host, then the command);
//   flux run: --nodes=1 --ntasks=1 --requires=host:NODE, one task on exactly
//       that node; --exclusive, all the node's cores and GPUs for the agent's
//       workers; cpu-affinity and gpu-affinity off, so the workers are not
//       bound to the agent's one core and see every GPU; --unbuffered, so a
//       frame is not held until a newline.
std::vector<std::string> remote_start_command(Transport t, const std::string& node,
                                              const std::vector<std::string>& command) {
  std::vector<std::string> argv{remote_start_program(t)};
  switch (t) {
    case Transport::kSge:
      argv.insert(argv.end(), {"-inherit", node});
      break;
    case Transport::kLsf:
      argv.push_back(node);
      break;
    case Transport::kFlux:
      argv.insert(argv.end(),
                  {"run", "--nodes=1", "--ntasks=1", "--exclusive", "--requires=host:" + node,
                   "--unbuffered", "--setopt=cpu-affinity=off", "--setopt=gpu-affinity=off"});
      argv.insert(argv.end(), command.begin(), command.end());
      return argv;
    default:
      break;
  }
  for (const auto& word : command) argv.push_back(shell_quote(word));
  return argv;
}

bool in_allocation_of(Transport t) {
  switch (t) {
    case Transport::kSge:
      return has_env("JOB_ID") && has_env("PE_HOSTFILE");
    case Transport::kLsf:
      return has_env("LSB_JOBID");
    case Transport::kFlux:
      return has_env("FLUX_URI");
    default:
      return false;
  }
}

std::string allocation_marker(Transport t) {
  switch (t) {
    case Transport::kSge:
      return "an SGE parallel job (JOB_ID and PE_HOSTFILE are not set)";
    case Transport::kLsf:
      return "an LSF job (LSB_JOBID is not set)";
    case Transport::kFlux:
      return "a Flux instance (FLUX_URI is not set)";
    default:
      return {};
  }
}

std::unique_ptr<AgentLink> start_scheduler_agent(boost::asio::io_context& io, Transport t,
                                                 const std::string& node,
                                                 const std::string& agent_path, int node_rank,
                                                 LinkCallbacks cb) {
  // SIGTERM when dlaunch dies: the command ends its remote task; the stdin EOF
  // that follows reaches the agent either way.
  return start_agent_process(io, remote_start_command(t, node, {agent_path}), node_rank,
                             std::move(cb), SIGTERM);
}

std::string flux_resource_r(double timeout_s) {
  const std::string flux = remote_start_program(Transport::kFlux);
  auto fail = [&](const std::string& why) {
    return InputError({"FLUX_URI"}, "", "'" + flux + " resource R' " + why,
                      "run dlaunch in a `flux alloc` shell or `flux batch` script, or give the "
                      "hosts with -H");
  };
  auto [r, w] = make_pipe();
  SpawnOptions so;
  so.argv = {flux, "resource", "R"};
  so.env = current_environment();
  so.stdout_fd = w.get();
  auto pid = spawn(so);
  w.reset();
  if (!pid) throw fail("cannot be run: " + pid.error());
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{r.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) < 0 && errno != EINTR) break;
    char buf[8192];
    const ssize_t n = ::read(r.get(), buf, sizeof buf);
    if (n == 0) break;
    if (n > 0) out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > (std::size_t{64} << 20)) throw fail("printed more than 64 MiB");
  }
  if (timed_out) ::kill(*pid, SIGKILL);
  int st = 0;
  ::waitpid(*pid, &st, 0);
  if (timed_out)
    throw fail("did not answer in " + std::to_string(static_cast<int>(timeout_s)) + " s");
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    throw fail("failed (exit status " + std::to_string(exit_code_of(st)) +
               "; its message is above)");
  }
  return out;
}

}  // namespace dlaunch
