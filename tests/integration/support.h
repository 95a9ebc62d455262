// Runs dlaunch as a real subprocess for integration tests and collects what
// it printed, its exit status and how long it took.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace dltest {

// Built with AddressSanitizer (the dev preset) or ThreadSanitizer (tsan):
// processes are slower and bigger, and a few bounds allow for it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizedBuild = true;
#else
constexpr bool kSanitizedBuild = false;
#endif
#else
constexpr bool kSanitizedBuild = false;
#endif

#ifdef SOURCE_DIR
// The hostfile of the README's first command: two logical nodes on this machine.
inline const std::string kLocalhost = std::string(SOURCE_DIR) + "/hostfiles/localhost.yaml";
#endif

struct RunResult {
  int exit_code = -1;  // shell convention: code, or 128 + signal
  std::string out;
  std::string err;
  double seconds = 0;
  bool timed_out = false;
};

class Process {
 public:
  // Starts argv with stdout/stderr captured; env adds/overrides NAME=VALUE.
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Reads output until pred(out) is true or timeout; true if pred held.
  bool wait_for_output(const std::function<bool(const std::string&)>& pred, double timeout_s);
  // Reads output until it holds at least n lines, or timeout; true if it does.
  bool wait_for_lines(int n, double timeout_s);
  // Like wait_for_output, for what the process wrote to stderr.
  bool wait_for_stderr(const std::function<bool(const std::string&)>& pred, double timeout_s);
  void signal(int sig);
  // Waits for exit and returns all. The process is killed once timeout_s
  // have passed since it was started (not since this call): a test that
  // waited for it first gives finish() that time on top.
  RunResult finish(double timeout_s);

 private:
  void pump(int timeout_ms);
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  RunResult r_;
  std::chrono::steady_clock::time_point start_;
};

RunResult run(const std::vector<std::string>& argv, double timeout_s = 60,
              const std::vector<std::string>& env = {});

// dlaunch with these arguments.
std::vector<std::string> dlaunch_cmd(std::vector<std::string> args);
// Lines of text, without their '\n'.
std::vector<std::string> lines_of(const std::string& text);
// Processes (other than zombies) whose environment has DLAUNCH_JOB_ID=job.
std::vector<pid_t> job_processes(const std::string& job_id);
// Polls job_processes until empty or timeout; returns what is left.
std::vector<pid_t> wait_job_gone(const std::string& job_id, double timeout_s);
// The dlaunch-agent processes below `root` (a local job's agents and their
// guards, forks of the same name): neither has the job's id in its
// environment, so job_processes() does not find them.
std::vector<pid_t> agent_processes(pid_t root);
// Polls until none of `pids` is a dlaunch-agent that has not ended (a zombie
// has), or the timeout; returns those that still are.
std::vector<pid_t> wait_agents_gone(const std::vector<pid_t>& pids, double timeout_s);
// For jobs whose workers link Open MPI: in sanitizer builds LeakSanitizer
// needs slow unwinding to attribute Open MPI's own leaks to its libraries
// (tests/sanitizer/lsan.supp); too slow to turn on for every test.
std::vector<std::string> mpi_worker_env();
// A unique job id for a test.
std::string unique_job_id(const std::string& tag);
// Removes the test beds that runs killed before their tear-down left in the
// temp folder: folders named PREFIX<pid>... whose pid is gone, each stopped
// with `script stop DIR` first (its namespaces, bridges, daemons), then
// deleted.
void remove_stale_beds(const std::string& prefix, const std::string& script);
// Writes text to a new temp file with this suffix; returns its path.
std::string temp_file(const std::string& text, const std::string& suffix);
// A new private folder (0700, mkdtemp) in the temp folder, named
// dlaunch-TAG-...; throws std::runtime_error if it cannot be made.
std::string temp_dir(const std::string& tag);
// The whole content of a file; empty if it cannot be read.
std::string slurp(const std::string& path);

}  // namespace dltest
