#include "dlaunch/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX sigprocmask, kill, NSIG
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <system_error>
#include <unordered_map>
#include <utility>

extern char** environ;

namespace dlaunch {
namespace {

// What the child reports through the error pipe when set-up or exec fails.
struct ChildFailure {
  int stage;  // index into kStages
  int err;
};
constexpr const char* kStages[] = {"setpgid",
                                   "prctl",
                                   "dup2",
                                   "chdir",
                                   "exec",
                                   "joining the job's cgroup",
                                   "binding to CPUs (sched_setaffinity)",
                                   "keeping a descriptor open (fcntl)",
                                   "entering the container (setns, chroot)"};

[[noreturn]] void child_fail(int errfd, int stage, int err) {
  ChildFailure f{stage, err};
  [[maybe_unused]] auto n = ::write(errfd, &f, sizeof f);
  ::_exit(127);
}

// Candidate paths for argv0, resolved in the parent (allocation is not
// allowed between fork and exec): argv0 itself if it has a '/', else every
// PATH entry of the child's environment.
std::vector<std::string> exec_candidates(const std::string& argv0,
                                         const std::vector<std::string>& env) {
  if (argv0.find('/') != std::string::npos) return {argv0};
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& e : env) {
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  }
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= path.size()) {
    auto end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    // An empty entry means the current directory. Appended piece by piece:
    // GCC 12 at -O3 reports a false -Wrestrict on `dir + "/" + argv0`.
    std::string candidate = end == start ? std::string(".") : path.substr(start, end - start);
    candidate += '/';
    candidate += argv0;
    out.push_back(std::move(candidate));
    start = end + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> program_candidates(const std::string& prog,
                                            const std::vector<std::string>& env,
                                            const std::string& workdir) {
  std::vector<std::string> out;
  for (const auto& c : exec_candidates(prog, env)) {
    std::string p;
    if (!c.empty() && c[0] != '/' && !workdir.empty()) p.append(workdir).append("/");
    p.append(c);
    out.push_back(std::move(p));
  }
  return out;
}

std::string find_program(const std::string& prog, const std::vector<std::string>& env,
                         const std::string& workdir) {
  for (const auto& c : exec_candidates(prog, env)) {
    std::string p;
    if (!c.empty() && c[0] != '/' && !workdir.empty()) p.append(workdir).append("/");
    p.append(c);
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0)
      return c;
  }
  return {};
}

namespace {

// What the child needs, all of it made by the parent: between the spawn and
// exec the child allocates nothing and takes no lock.
struct ChildPlan {
  const SpawnOptions* opts = nullptr;
  const std::vector<std::string>* candidates = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const cpu_set_t* cpus = nullptr;
  const unsigned long* nodemask = nullptr;
  unsigned long nodemask_bits = 0;
  int errfd = -1;
  pid_t parent = 0;
};

// The child, from the spawn to exec. It may share the parent's memory
// (spawn's clone): it writes nothing but its own stack and the kernel's
// state, and it makes no call that could take a lock or allocate.
[[noreturn]] void run_child(const ChildPlan& p) {
  const SpawnOptions& opts = *p.opts;
  const int errfd = p.errfd;
  // The handlers first, then the mask: a signal must not run a handler of
  // the parent's in here.
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) ::signal(s, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (opts.cgroup_procs_fd >= 0 && ::write(opts.cgroup_procs_fd, "0", 1) != 1) {
    child_fail(errfd, 5, errno);
  }
  if (!opts.cpus.empty() && ::sched_setaffinity(0, sizeof *p.cpus, p.cpus) != 0) {
    child_fail(errfd, 6, errno);
  }
  // A kernel or sandbox without NUMA policies: the rank runs, unpreferred.
  if (!opts.mem_nodes.empty()) {
    [[maybe_unused]] const long rc =
        ::syscall(SYS_set_mempolicy, MPOL_PREFERRED, p.nodemask, p.nodemask_bits);
  }
  if (opts.new_process_group && ::setpgid(0, 0) != 0) child_fail(errfd, 0, errno);
  if (opts.parent_death_signal != 0) {
    if (::prctl(PR_SET_PDEATHSIG, opts.parent_death_signal) != 0) child_fail(errfd, 1, errno);
    if (::getppid() != p.parent) ::_exit(127);  // the parent died before prctl took hold
  }
  // Into the container: its user namespace first (it owns the mount
  // namespace), then its mounts, then its root as ours.
  if (opts.enter_userns_fd >= 0 && ::setns(opts.enter_userns_fd, CLONE_NEWUSER) != 0) {
    child_fail(errfd, 8, errno);
  }
  if (opts.enter_mntns_fd >= 0) {
    if (::setns(opts.enter_mntns_fd, CLONE_NEWNS) != 0) child_fail(errfd, 8, errno);
    if (opts.enter_root_fd >= 0 && (::fchdir(opts.enter_root_fd) != 0 || ::chroot(".") != 0))
      child_fail(errfd, 8, errno);
    if (::chdir("/") != 0) child_fail(errfd, 8, errno);
  }
  // Move the sources out of the way first so dup2 onto 0..2 cannot clobber one.
  int src[3] = {opts.stdin_fd, opts.stdout_fd, opts.stderr_fd};
  if (src[0] < 0) src[0] = ::open("/dev/null", O_RDONLY);
  for (int& fd : src) {
    if (fd >= 0) fd = ::fcntl(fd, F_DUPFD, 10);
  }
  for (int i = 0; i < 3; ++i) {
    if (src[i] >= 0 && ::dup2(src[i], i) < 0) child_fail(errfd, 2, errno);
  }
  // keep_fd goes to the program as it is; everything else is closed but the
  // error pipe (close-on-exec anyway).
  const int keep = opts.keep_fd >= 3 && opts.keep_fd != errfd ? opts.keep_fd : errfd;
  if (keep != errfd && ::fcntl(keep, F_SETFD, 0) != 0) child_fail(errfd, 7, errno);
  unsigned from = 3;
  for (const int open_fd : {std::min(errfd, keep), std::max(errfd, keep)}) {
    const auto fd = static_cast<unsigned>(open_fd);
    if (fd < from) continue;
    if (fd > from) ::close_range(from, fd - 1, 0);
    from = fd + 1;
  }
  ::close_range(from, ~0u, 0);
  if (!opts.workdir.empty() && ::chdir(opts.workdir.c_str()) != 0) child_fail(errfd, 3, errno);
  int last = ENOENT;
  for (const auto& c : *p.candidates) {
    ::execve(c.c_str(), p.argv, p.envp);
    if (errno != ENOENT && errno != ENOTDIR) last = errno;  // EACCES beats ENOENT, like execvp
  }
  child_fail(errfd, 4, last);
}

int child_entry(void* plan) { run_child(*static_cast<const ChildPlan*>(plan)); }

// Whether the child may share the parent's memory until its exec (clone
// with CLONE_VM | CLONE_VFORK, as posix_spawn does): no page tables copied,
// no copy-on-write faults in the parent afterwards, whatever the parent's
// size. A fork's cost grows with the parent's memory and, in a threaded
// parent, every page it writes afterwards costs a TLB shootdown: a head
// starting 256 local agents spent a quarter of its CPU there. Not under a
// sanitizer (its shadow memory and thread state would be shared behind its
// back), nor for a child that moves itself into a cgroup or a container,
// which are left to a child of its own.
// (GCC says a sanitizer with __SANITIZE_*__, clang 14 only with __has_feature.)
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DLAUNCH_SPAWN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define DLAUNCH_SPAWN_SANITIZED 1
#endif
#endif
bool may_share_memory(const SpawnOptions& opts) {
#ifdef DLAUNCH_SPAWN_SANITIZED
  (void)opts;
  return false;
#else
  return opts.cgroup_procs_fd < 0 && opts.enter_userns_fd < 0 && opts.enter_mntns_fd < 0;
#endif
}

}  // namespace

SpawnResult spawn(const SpawnOptions& opts) {
  if (opts.argv.empty()) return SpawnResult::failure("empty command");
  std::vector<char*> argv;
  for (const auto& a : opts.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : opts.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const auto candidates = exec_candidates(opts.argv[0], opts.env);
  // Placement masks, made here: the child may not allocate.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : opts.cpus) {
    if (c < 0 || c >= CPU_SETSIZE)
      return SpawnResult::failure("CPU " + std::to_string(c) +
                                  " is beyond this build's CPU_SETSIZE");
    CPU_SET(c, &cpus);
  }
  constexpr int kMaxNodes = 1024;
  constexpr int kBitsPerWord = 8 * sizeof(unsigned long);
  unsigned long nodemask[kMaxNodes / kBitsPerWord] = {};
  if (!opts.mem_nodes.empty()) {
    const int node = opts.mem_nodes.front();
    if (node < 0 || node >= kMaxNodes)
      return SpawnResult::failure("NUMA node " + std::to_string(node) + " is out of range");
    nodemask[node / kBitsPerWord] |= 1UL << (node % kBitsPerWord);
  }
  auto [err_r, err_w] = make_pipe();
  const ChildPlan plan{.opts = &opts,
                       .candidates = &candidates,
                       .argv = argv.data(),
                       .envp = envp.data(),
                       .cpus = &cpus,
                       .nodemask = nodemask,
                       .nodemask_bits = kMaxNodes,
                       .errfd = err_w.get(),
                       .parent = ::getpid()};

  pid_t pid = -1;
  if (may_share_memory(opts)) {
    // The child's own stack; the parent's thread waits until the child has
    // exec'ed or exited (CLONE_VFORK), with every signal blocked meanwhile
    // (the child unblocks them once its handlers are the defaults).
    constexpr std::size_t kStack = 256 * 1024;
    void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
      return SpawnResult::failure(std::string("mmap: ") + std::strerror(errno));
    sigset_t all;
    sigset_t was;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &was);
    pid = ::clone(child_entry, static_cast<char*>(stack) + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                  const_cast<ChildPlan*>(&plan));
    const int clone_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &was, nullptr);
    ::munmap(stack, kStack);
    if (pid < 0) return SpawnResult::failure(std::string("clone: ") + std::strerror(clone_errno));
  } else {
    pid = ::fork();
    if (pid < 0) return SpawnResult::failure(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) run_child(plan);
  }

  err_w.reset();
  ChildFailure f{};
  ssize_t n;
  do {
    n = ::read(err_r.get(), &f, sizeof f);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof f)) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::string what = kStages[f.stage];
    if (f.stage == 4) {
      return SpawnResult::failure("cannot execute '" + opts.argv[0] + "': " + std::strerror(f.err));
    }
    if (f.stage == 3) {
      return SpawnResult::failure("cannot change to directory '" + opts.workdir +
                                  "': " + std::strerror(f.err));
    }
    return SpawnResult::failure(what + ": " + std::strerror(f.err));
  }
  return pid;
}

std::pair<UniqueFd, UniqueFd> make_pipe() {
  int fds[2] = {-1, -1};
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::system_error(errno, std::generic_category(), "pipe2");
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return;
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  ::fcntl(fd, F_SETFL, flags);
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);  // the fd was made non-blocking by someone else
    } else {
      return false;
    }
  }
  return true;
}

std::thread start_thread_without_signals(std::function<void()> body) {
  sigset_t all;
  sigset_t old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  std::thread t(std::move(body));
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return t;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev != nullptr) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

namespace {
// Fields 3 (state) and 4 (ppid) of /proc/PID/stat; the command name in field
// 2 may hold spaces. False when the process is gone.
bool read_stat(const std::string& pid_dir, char& state, pid_t& ppid) {
  std::ifstream in(pid_dir + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 4 > line.size()) return false;
  // ") S PPID ..."
  const char* rest = line.c_str() + close + 2;
  state = rest[0];
  ppid = static_cast<pid_t>(std::strtol(rest + 1, nullptr, 10));
  return true;
}

// The parent of a live process; zombies count as gone: -1.
pid_t read_ppid(const std::string& pid_dir) {
  char state = 0;
  pid_t ppid = -1;
  if (!read_stat(pid_dir, state, ppid) || state == 'Z' || state == 'X') return -1;
  return ppid;
}

template <typename F>
void for_each_pid(F&& f) {
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    f(static_cast<pid_t>(pid), std::string("/proc/") + e->d_name);
  }
  ::closedir(d);
}
}  // namespace

namespace {
// The children of `pid`, from /proc/PID/task/*/children (a child belongs to
// the thread that forked it, or to any thread when it was reparented).
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(task_dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(task_dir + "/" + e->d_name + "/children");
    pid_t c;
    while (in >> c) out.push_back(c);
  }
  ::closedir(d);
  return out;
}

// Kernels built without CONFIG_PROC_CHILDREN have no children files.
bool have_children_files() {
  static const bool yes = ::access("/proc/thread-self/children", R_OK) == 0;
  return yes;
}
}  // namespace

char process_state(pid_t pid) {
  char state = 0;
  pid_t ppid = -1;
  return read_stat("/proc/" + std::to_string(pid), state, ppid) ? state : '\0';
}

// Walks the tree from `root` through the children files: the cost follows the
// size of the tree, not of the machine. An agent calls this when its workers
// end, and a thousand agents on one machine (bench/: controller scale) each
// scanning all of /proc took the machine ~20 s of CPU; a scan of /proc is
// only the fallback.
std::vector<pid_t> descendants_of(pid_t root) {
  std::function<std::vector<pid_t>(pid_t)> live_children;
  std::unordered_multimap<pid_t, pid_t> scanned;  // fallback: parent -> child, from /proc
  if (have_children_files()) {
    live_children = [](pid_t p) {
      std::vector<pid_t> out;
      for (pid_t c : children_of(p)) {
        if (read_ppid("/proc/" + std::to_string(c)) > 0)
          out.push_back(c);  // not a zombie, not gone
      }
      return out;
    };
  } else {
    for_each_pid([&](pid_t pid, const std::string& dir) {
      const pid_t ppid = read_ppid(dir);
      if (ppid > 0) scanned.emplace(ppid, pid);
    });
    live_children = [&scanned](pid_t p) {
      std::vector<pid_t> out;
      auto [b, e] = scanned.equal_range(p);
      for (auto it = b; it != e; ++it) out.push_back(it->second);
      return out;
    };
  }
  std::vector<pid_t> out;
  std::vector<pid_t> unvisited{root};
  while (!unvisited.empty()) {
    const pid_t p = unvisited.back();
    unvisited.pop_back();
    for (pid_t c : live_children(p)) {
      out.push_back(c);
      unvisited.push_back(c);
    }
  }
  return out;
}

std::vector<pid_t> pids_with_env_entry(std::string_view entry) {
  std::vector<pid_t> out;
  for_each_pid([&](pid_t pid, const std::string& dir) {
    std::ifstream in(dir + "/environ", std::ios::binary);
    std::string var;
    while (std::getline(in, var, '\0')) {
      if (var == entry) {
        out.push_back(pid);
        break;
      }
    }
  });
  return out;
}

unsigned long raise_descriptor_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return static_cast<unsigned long>(rl.rlim_cur);
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof buf) return {};
  return {buf, static_cast<std::size_t>(n)};
}

std::vector<std::string> current_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

std::string shell_quote(std::string_view s) {
  if (!s.empty() &&
      s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                          "_-./=:,+@%") == std::string_view::npos) {
    return std::string(s);
  }
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

}  // namespace dlaunch
