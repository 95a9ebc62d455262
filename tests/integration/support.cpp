#include "support.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "dlaunch/process.h"

namespace dltest {

Process::Process(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  auto [out_r, out_w] = dlaunch::make_pipe();
  auto [err_r, err_w] = dlaunch::make_pipe();
  dlaunch::SpawnOptions o;
  o.argv = argv;
  o.env = dlaunch::current_environment();
  for (const auto& e : env) o.env.push_back(e);
  // Deduplicate: the last NAME= wins.
  std::vector<std::string> dedup;
  // Backwards by iterator: clang 14 cannot read libstdc++ 12's reverse_view.
  for (auto it = o.env.rbegin(); it != o.env.rend(); ++it) {  // NOLINT(modernize-loop-convert)
    auto name = it->substr(0, it->find('='));
    bool seen = false;
    for (const auto& d : dedup) seen |= d.compare(0, name.size() + 1, name + "=") == 0;
    if (!seen) dedup.push_back(*it);
  }
  o.env = dedup;
  o.new_process_group = false;
  o.stdout_fd = out_w.get();
  o.stderr_fd = err_w.get();
  start_ = std::chrono::steady_clock::now();
  auto r = dlaunch::spawn(o);
  pid_ = r.take();
  out_fd_ = out_r.release();
  err_fd_ = err_r.release();
}

Process::~Process() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void Process::pump(int timeout_ms) {
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  if (::poll(fds, 2, timeout_ms) <= 0) return;
  char buf[65536];
  for (int i = 0; i < 2; ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
    ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
    if (n > 0) {
      (i == 0 ? r_.out : r_.err).append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      ::close(fds[i].fd);
      (i == 0 ? out_fd_ : err_fd_) = -1;
    }
  }
}

bool Process::wait_for_output(const std::function<bool(const std::string&)>& pred,
                              double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred(r_.out)) return true;
    if (out_fd_ < 0 && err_fd_ < 0) return pred(r_.out);
    pump(50);
  }
  return pred(r_.out);
}

bool Process::wait_for_stderr(const std::function<bool(const std::string&)>& pred,
                              double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred(r_.err)) return true;
    if (out_fd_ < 0 && err_fd_ < 0) return pred(r_.err);
    pump(50);
  }
  return pred(r_.err);
}

bool Process::wait_for_lines(int n, double timeout_s) {
  return wait_for_output(
      [n](const std::string& out) { return std::count(out.begin(), out.end(), '\n') >= n; },
      timeout_s);
}

void Process::signal(int sig) { ::kill(pid_, sig); }

namespace {

// A process that outlived its test's deadline hangs somewhere: where, for the
// failure's message. Its threads' stacks and its children's (eu-stack, when
// the machine has it), before it is killed.
std::string stacks_of_tree(pid_t root) {
  const std::string tool = dlaunch::find_program("eu-stack", dlaunch::current_environment(), "");
  if (tool.empty()) return "\n[test harness: timed out; no eu-stack to show where]\n";
  static thread_local bool inside = false;  // eu-stack itself timing out is not looked into
  if (inside) return "";
  inside = true;
  std::vector<pid_t> tree = dlaunch::descendants_of(root);
  tree.insert(tree.begin(), root);
  std::string out = "\n[test harness: timed out; the stacks of the process and its children]\n";
  for (const pid_t p : tree) {
    Process st({tool, "-p", std::to_string(p)});
    const RunResult r = st.finish(20);
    out += r.out + r.err;
  }
  inside = false;
  return out;
}

}  // namespace

RunResult Process::finish(double timeout_s) {
  const auto deadline = start_ + std::chrono::duration<double>(timeout_s);
  int status = 0;
  bool exited = false;
  while (!exited) {
    if (out_fd_ >= 0 || err_fd_ >= 0) {
      pump(20);
    } else {
      ::usleep(10000);
    }
    pid_t w = ::waitpid(pid_, &status, WNOHANG);
    if (w == pid_) {
      exited = true;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      r_.timed_out = true;
      r_.err += stacks_of_tree(pid_);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      exited = true;
    }
  }
  r_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  pid_ = -1;
  // Collect what is still in the pipes (bounded: writers may linger).
  const auto drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((out_fd_ >= 0 || err_fd_ >= 0) && std::chrono::steady_clock::now() < drain_until) pump(20);
  r_.exit_code = dlaunch::exit_code_of(status);
  return r_;
}

RunResult run(const std::vector<std::string>& argv, double timeout_s,
              const std::vector<std::string>& env) {
  Process p(argv, env);
  return p.finish(timeout_s);
}

std::vector<std::string> dlaunch_cmd(std::vector<std::string> args) {
  args.insert(args.begin(), DLAUNCH_BIN);
  return args;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::vector<pid_t> job_processes(const std::string& job_id) {
  std::vector<pid_t> out;
  for (pid_t p : dlaunch::pids_with_env_entry("DLAUNCH_JOB_ID=" + job_id)) {
    std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
    std::string s;
    std::getline(stat, s);
    auto close = s.rfind(')');
    if (close != std::string::npos && close + 2 < s.size() && s[close + 2] == 'Z') continue;
    if (!s.empty()) out.push_back(p);
  }
  return out;
}

std::vector<pid_t> wait_job_gone(const std::string& job_id, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto left = job_processes(job_id);
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    ::usleep(20000);
    left = job_processes(job_id);
  }
  return left;
}

namespace {

// Whether pid is a dlaunch-agent that has not ended.
bool live_agent(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(stat, s);
  const auto open = s.find('(');
  const auto close = s.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= s.size())
    return false;
  return s.substr(open + 1, close - open - 1) == "dlaunch-agent" && s[close + 2] != 'Z';
}

}  // namespace

std::vector<pid_t> agent_processes(pid_t root) {
  std::vector<pid_t> out;
  for (pid_t p : dlaunch::descendants_of(root)) {
    if (live_agent(p)) out.push_back(p);
  }
  return out;
}

std::vector<pid_t> wait_agents_gone(const std::vector<pid_t>& pids, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    std::vector<pid_t> left;
    for (pid_t p : pids) {
      if (live_agent(p)) left.push_back(p);
    }
    if (left.empty() || std::chrono::steady_clock::now() >= deadline) return left;
    ::usleep(20000);
  }
}

std::vector<std::string> mpi_worker_env() {
  const char* lsan = std::getenv("LSAN_OPTIONS");
  return {std::string("LSAN_OPTIONS=") + (lsan != nullptr ? std::string(lsan) + ":" : "") +
          "fast_unwind_on_malloc=0"};
}

namespace {

// At a timeout or a stall dlaunch keeps every rank's full stacks in a private
// folder of the temp folder, dlaunch-stacks-JOB-..., for the user to read
// after the job; jobs of unique_job_id() are this test process's, and their
// folders go when it ends.
class StacksFolderCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    // Where dlaunch puts it (dlaunch/private_dir.h, runtime_base_dir).
    std::filesystem::path base = "/tmp";
    for (const char* name : {"XDG_RUNTIME_DIR", "TMPDIR"}) {
      const char* v = std::getenv(name);
      if (v != nullptr && *v != '\0') base = v;
    }
    const std::string prefix = "dlaunch-stacks-t" + std::to_string(::getpid()) + "-";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
      if (e.path().filename().string().rfind(prefix, 0) == 0) {
        std::error_code ignored;
        std::filesystem::remove_all(e.path(), ignored);
      }
    }
  }
};

[[maybe_unused]] const ::testing::Environment* const kStacksCleanup =
    ::testing::AddGlobalTestEnvironment(new StacksFolderCleanup);

}  // namespace

std::string unique_job_id(const std::string& tag) {
  static std::atomic<int> counter{0};
  return std::string("t")
      .append(std::to_string(::getpid()))
      .append("-")
      .append(tag)
      .append("-")
      .append(std::to_string(counter++));
}

void remove_stale_beds(const std::string& prefix, const std::string& script) {
  namespace fs = std::filesystem;
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path())) {
    const auto name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const auto pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
      run({script, "stop", e.path().string()}, 60);
      std::error_code ec;
      fs::remove_all(e.path(), ec);
    }
  }
}

std::string temp_file(const std::string& text, const std::string& suffix) {
  static std::atomic<int> counter{0};
  auto path =
      std::filesystem::temp_directory_path() /
      ("dlaunch-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + suffix);
  std::ofstream(path) << text;
  return path.string();
}

std::string temp_dir(const std::string& tag) {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / ("dlaunch-" + tag + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
  return tmpl;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  // A file of /proc goes with its process: a read after it exited fails
  // (ESRCH), and libstdc++'s streambuf throws that out of the iterator. The
  // tests ask "what is there": nothing.
  try {
    return {std::istreambuf_iterator<char>(in), {}};
  } catch (const std::ios_base::failure&) {
    return {};
  }
}

}  // namespace dltest
