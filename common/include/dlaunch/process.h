// Process primitives shared by the launcher and the agent: spawning with the
// right child-side set-up, pipes, signals and /proc scans.
//
// Child side of spawn(), in this order: reset signal mask and dispositions,
// CPU affinity and memory policy (optional), new process group (optional), parent-death signal
// (optional; the child exits at once if the parent already died), entering a
// container's namespaces and root (optional), dup2 of the given fds onto 0/1/2,
// close every other fd, chdir, exec. A failure in the child is reported back
// through a close-on-exec pipe, so spawn() returns the exec error itself
// (e.g. "No such file or directory") instead of a child that exits 127.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dlaunch/error.h"
#include "dlaunch/unique_fd.h"

namespace dlaunch {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is searched on the PATH of env
  std::vector<std::string> env;   // complete environment, "NAME=VALUE"
  std::string workdir;            // empty: inherit
  bool new_process_group = true;  // setpgid(0, 0)
  int parent_death_signal = 0;    // prctl(PR_SET_PDEATHSIG); 0: none
  int stdin_fd = -1;              // -1: /dev/null
  int stdout_fd = -1;             // -1: inherit
  int stderr_fd = -1;             // -1: inherit
  // An open cgroup.procs of a cgroup (v2) the child moves itself into first
  // thing, so that all it ever starts is in there too; -1: stay.
  int cgroup_procs_fd = -1;
  // Placement (docs/placement.md): CPUs (OS indices) the child binds itself
  // to with sched_setaffinity before exec, so that every thread it starts
  // inherits them; empty: leave. mem_nodes: NUMA nodes its memory comes from
  // first (set_mempolicy MPOL_PREFERRED, the first node); empty: the
  // kernel's default. Both are turned into the kernel's masks in the parent.
  std::vector<int> cpus;
  std::vector<int> mem_nodes;
  // A descriptor (>= 3) the program gets open at the same number; every
  // other one above stderr is closed. -1: none.
  int keep_fd = -1;
  // A container to run in (agent/runtime/): open descriptors of its user
  // namespace (-1: ours), its mount namespace and its root directory, which
  // the child joins (setns) and makes its root (chroot) before the fds,
  // the working directory and exec; -1: the host's.
  int enter_userns_fd = -1;
  int enter_mntns_fd = -1;
  int enter_root_fd = -1;
};

// The child's pid (> 0), or what failed in the child.
using SpawnResult = Result<pid_t>;

SpawnResult spawn(const SpawnOptions& opts);

// Where spawn() would find prog: itself when it holds a '/', else the first
// executable regular file in env's PATH; relative results are taken from
// workdir. Empty when there is none.
std::string find_program(const std::string& prog, const std::vector<std::string>& env,
                         const std::string& workdir);

// Every path where spawn() would look for prog, in order (workdir-joined
// when relative), without looking: for a caller that looks elsewhere (in a
// container's root).
std::vector<std::string> program_candidates(const std::string& prog,
                                            const std::vector<std::string>& env,
                                            const std::string& workdir);

// pipe2(O_CLOEXEC): {read end, write end}. Throws std::system_error.
std::pair<UniqueFd, UniqueFd> make_pipe();
void set_nonblocking(int fd, bool on);
// write(2) until done, retrying EINTR and waiting out EAGAIN. False on error.
bool write_all(int fd, std::string_view data);

// A thread that takes no signal (every one blocked: it inherits the mask it
// starts with), so that the process's signals go to its event loop.
std::thread start_thread_without_signals(std::function<void()> body);

// "SIGSEGV", or "signal 42" for numbers without a name.
std::string signal_name(int sig);
// Exit code convention of shells and mpirun: code, or 128 + signal.
int exit_code_of(int wait_status);

// The state letter of /proc/PID/stat ('R' running or runnable, 'S' sleeping,
// 'D', 'T', 'Z', ...), or '\0' when there is no such process.
char process_state(pid_t pid);
// Every process whose parent chain leads to root (root excluded), from /proc.
std::vector<pid_t> descendants_of(pid_t root);
// Every process whose environment holds the exact entry "NAME=VALUE".
std::vector<pid_t> pids_with_env_entry(std::string_view entry);

// Raises the soft RLIMIT_NOFILE to the hard limit (1024 soft is common; a
// head with a thousand SSH nodes, or node 0's store under a flood of
// connections, needs more). Returns the soft limit in force afterwards.
unsigned long raise_descriptor_limit();

// Copy of this process's environment as "NAME=VALUE" strings.
std::vector<std::string> current_environment();
// This machine's host name (gethostname); empty when it cannot be read.
std::string host_name();
// This program's executable (/proc/self/exe); empty when it cannot be read.
std::string self_exe();
// Quotes s for a POSIX shell when needed: abc stays, a b -> 'a b'.
std::string shell_quote(std::string_view s);

}  // namespace dlaunch
