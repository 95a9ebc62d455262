#include "drivers/job_commands.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/options.h"
#include "dlaunch/error.h"
#include "dlaunch/proc_stat.h"
#include "dlaunch/process.h"
#include "dlaunch/text.h"
#include "dlaunch/unique_fd.h"
#include "drivers/head_job.h"
#include "jobs/events.h"
#include "jobs/progress_line.h"
#include "jobs/registry.h"

namespace dlaunch {

namespace {

struct Args {
  bool all = false;
  bool json = false;
  bool follow = false;  // events --follow
  std::string signal;   // stop --signal SIG
  std::vector<std::string> words;
};

Args parse(std::string_view verb, int argc, char** argv, bool takes_all, bool takes_json,
           std::size_t words, bool takes_signal = false, bool takes_follow = false) {
  Args a;
  for (int k = 2; k < argc; ++k) {
    const std::string_view s = argv[k];
    if ((s == "--follow" || s == "-f") && takes_follow) {
      a.follow = true;
    } else if (s == "--all" && takes_all) {
      a.all = true;
    } else if (s == "--json" && takes_json) {
      a.json = true;
    } else if (takes_signal && (s == "--signal" || s.starts_with("--signal="))) {
      if (s == "--signal" && k + 1 == argc) {
        throw Error(ErrorKind::kInput, fmt::format("dlaunch {}: --signal needs a signal", verb));
      }
      a.signal = s == "--signal" ? argv[++k] : std::string(s.substr(9));
    } else if (!s.empty() && s.front() == '-') {
      throw Error(ErrorKind::kInput,
                  fmt::format("dlaunch {}: unknown option '{}'", verb, printable(std::string(s))));
    } else {
      a.words.emplace_back(s);
    }
  }
  if (a.words.size() != words) {
    throw Error(ErrorKind::kInput,
                words == 0 ? fmt::format("dlaunch {}: takes no job", verb)
                : words == 2
                    ? fmt::format("dlaunch {}: give one job (a name, an id or last) "
                                  "and a signal",
                                  verb)
                    : fmt::format("dlaunch {}: give one job (a name, an id or last)", verb));
  }
  return a;
}

std::string command_line(const JobStart& s) {
  // What follows dlaunch's options: the program and its arguments, as far as
  // the record tells them apart (the whole line, less argv[0]).
  std::string out;
  for (std::size_t k = 1; k < s.argv.size(); ++k) {
    out += (out.empty() ? "" : " ") + printable(s.argv[k]);
  }
  return out;
}

std::string local_time(std::int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const auto t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

int ps(int argc, char** argv) {
  const Args a = parse("ps", argc, argv, true, true, 0);
  const std::string dir = jobs_dir(false);
  std::vector<JobEntry> shown;
  for (auto& e : list_jobs(dir)) {
    if (a.all || e.state == "running") shown.push_back(std::move(e));
  }
  if (a.json) {
    std::string out = "[";
    for (std::size_t k = 0; k < shown.size(); ++k) out += (k ? ",\n " : "") + job_json(shown[k]);
    out += "]\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  std::string out = fmt::format("{:<20} {:<9} {:>5} {:>6} {:<19} {:>4}  {}\n", "JOB", "STATE",
                                "NODES", "RANKS", "STARTED", "EXIT", "COMMAND");
  for (const auto& e : shown) {
    out += fmt::format("{:<20} {:<9} {:>5} {:>6} {:<19} {:>4}  {}\n", e.name, e.state,
                       e.start.nodes, e.start.ranks, local_time(e.start.started_ms),
                       e.exit_status ? std::to_string(*e.exit_status) : "-", command_line(e.start));
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

int status(int argc, char** argv) {
  const Args a = parse("status", argc, argv, false, true, 1);
  const JobEntry e = find_job(jobs_dir(false), a.words[0]);
  if (a.json) {
    std::fputs((job_json(e) + "\n").c_str(), stdout);
    return 0;
  }
  std::string out = fmt::format("job:      {} (record {})\n", e.start.id, e.dir);
  out += fmt::format("state:    {}\n", e.state);
  out += fmt::format("command:  {}\n", command_line(e.start));
  out += fmt::format("folder:   {}\n", e.start.cwd);
  out += fmt::format("head:     {} pid {}\n", e.start.head_host, e.start.head_pid);
  std::string nodes;
  for (const auto& n : e.start.node_names) nodes += (nodes.empty() ? "" : " ") + n;
  if (static_cast<std::size_t>(e.start.nodes) > e.start.node_names.size()) nodes += " ...";
  out += fmt::format("nodes:    {} ({})\n", e.start.nodes, nodes);
  out += fmt::format("ranks:    {}\n", e.start.ranks);
  out += fmt::format("started:  {}\n", local_time(e.start.started_ms));
  if (e.exit_status) {
    out += fmt::format("ended:    {}\n", local_time(e.ended_ms));
    out += fmt::format("exit:     {} ({}; {} attempt(s))\n", *e.exit_status, e.summary, e.attempts);
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

// What the head does with each signal it may be sent from here
// (docs/troubleshooting.md, Signals): INT, TERM and HUP stop the job; the
// others are forwarded to every rank, or (QUIT) collect the ranks' stacks.
bool stops_the_job(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }
bool head_handles(int sig) {
  return stops_the_job(sig) || sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGTSTP ||
         sig == SIGCONT || sig == SIGQUIT;
}

int parse_head_signal(std::string_view verb, const std::string& name) {
  const int sig = signal_number(name);
  if (sig == 0 || !head_handles(sig)) {
    throw Error(ErrorKind::kInput,
                fmt::format("dlaunch {}: '{}' is not a signal the job's head acts on (INT, TERM, "
                            "HUP stop the job; USR1, USR2, TSTP, CONT are forwarded to every "
                            "rank; QUIT reports the ranks' stacks)",
                            verb, printable(name)));
  }
  return sig;
}

// A descriptor of the running head of `e`, or throws: the head must be a
// process of this machine, and the one the record names (its pid and start
// time: a pid used again by another process is never signalled). The
// descriptor pins the process, so the check holds until it is closed.
int open_head(std::string_view verb, const JobEntry& e) {
  if (e.state != "running") {
    throw Error(ErrorKind::kEnvironment,
                e.state == "elsewhere"
                    ? fmt::format("dlaunch {}: job {}'s head runs on {}: run this there", verb,
                                  e.name, e.start.head_host)
                    : fmt::format("dlaunch {}: job {} is not running ({})", verb, e.name, e.state));
  }
  const auto pid = static_cast<pid_t>(e.start.head_pid);
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    throw Error(ErrorKind::kEnvironment,
                fmt::format("dlaunch {}: cannot reach job {}'s head (pid {}): {}", verb, e.name,
                            pid, std::strerror(errno)));
  }
  if (process_start_ticks(pid) != e.start.head_start_ticks) {
    ::close(fd);
    throw Error(ErrorKind::kEnvironment,
                fmt::format("dlaunch {}: job {} is not running (its head, pid {}, is gone)", verb,
                            e.name, pid));
  }
  return fd;
}

void send(std::string_view verb, int fd, const JobEntry& e, int sig) {
  if (::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(ErrorKind::kEnvironment,
                fmt::format("dlaunch {}: cannot signal job {}'s head (pid {}): {}", verb, e.name,
                            e.start.head_pid, std::strerror(err)));
  }
}

std::string sig_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : std::to_string(sig);
}

// What fd holds past its offset, to its end (of a file being written: what
// is there now).
std::string read_rest(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// dlaunch events JOB [--follow]: the job's events as JSON Lines, whole lines
// only; --follow goes on with each one as the head writes it, until the head
// has ended (then the last ones), as `logs --follow` does.
int events(int argc, char** argv) {
  const Args a = parse("events", argc, argv, false, false, 1, false, true);
  const JobEntry e = find_job(jobs_dir(false), a.words[0]);
  const std::string path = e.dir + "/events.jsonl";
  const UniqueFd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!in)
    throw Error(ErrorKind::kEnvironment, "cannot read " + path + ": " + std::strerror(errno));
  std::string partial;
  const auto drain = [&] {
    partial += read_rest(in.get());
    const auto end = partial.rfind('\n');
    if (end == std::string::npos) return;
    write_all(1, std::string_view(partial).substr(0, end + 1));
    partial.erase(0, end + 1);
  };
  drain();
  if (!a.follow || e.state != "running") return 0;
  UniqueFd head;
  try {
    head = UniqueFd(open_head("events", e));
  } catch (const Error&) {
    drain();  // it ended between the two looks
    return 0;
  }
  const UniqueFd watch(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (watch) (void)::inotify_add_watch(watch.get(), path.c_str(), IN_MODIFY);
  for (;;) {
    std::array<pollfd, 2> p{{{head.get(), POLLIN, 0}, {watch ? watch.get() : -1, POLLIN, 0}}};
    const int n = ::poll(p.data(), p.size(), watch ? 1000 : 200);
    if (n > 0 && (p[1].revents & POLLIN) != 0) {
      alignas(inotify_event) char ev[4096];
      while (::read(watch.get(), ev, sizeof ev) > 0) {
      }
    }
    drain();
    if (n > 0 && (p[0].revents & POLLIN) != 0) break;  // the head has ended
  }
  drain();
  return 0;
}

// dlaunch signal JOB SIG: SIG to the job's head, which acts on it as on one
// from a terminal (forwarding it to every rank, or stopping the job).
int signal_job(int argc, char** argv) {
  const Args a = parse("signal", argc, argv, false, false, 2);
  const int sig = parse_head_signal("signal", a.words[1]);
  const JobEntry e = find_job(jobs_dir(false), a.words[0]);
  const int fd = open_head("signal", e);
  send("signal", fd, e, sig);
  ::close(fd);
  std::fputs(fmt::format("dlaunch: sent {} to job {} (head pid {})\n", sig_name(sig), e.name,
                         e.start.head_pid)
                 .c_str(),
             stderr);
  return 0;
}

// dlaunch stop JOB [--signal INT|TERM|HUP]: stops the job as that signal to
// its head would (TERM by default: the job's --signal warning, then SIGTERM,
// --kill-grace, SIGKILL on every node), and waits until the head has ended.
// A second stop while the first is under way is a second SIGTERM: every rank
// is killed at once.
int stop(int argc, char** argv) {
  const Args a = parse("stop", argc, argv, false, false, 1, true);
  const int sig = a.signal.empty() ? SIGTERM : parse_head_signal("stop", a.signal);
  if (!stops_the_job(sig)) {
    throw Error(ErrorKind::kInput,
                fmt::format("dlaunch stop: {} does not stop the job (INT, TERM or HUP do); "
                            "`dlaunch signal JOB {}` forwards it to the ranks",
                            sig_name(sig), a.signal));
  }
  const std::string dir = jobs_dir(false);
  const JobEntry e = find_job(dir, a.words[0]);
  const int fd = open_head("stop", e);
  send("stop", fd, e, sig);
  std::fputs(fmt::format("dlaunch: stopping job {} ({} to head pid {})\n", e.name, sig_name(sig),
                         e.start.head_pid)
                 .c_str(),
             stderr);
  // The descriptor becomes readable when the head has exited.
  pollfd p{fd, POLLIN, 0};
  int n = 0;
  while ((n = ::poll(&p, 1, -1)) < 0 && errno == EINTR) {
  }
  ::close(fd);
  const JobEntry after = find_job(dir, e.name);
  std::fputs(fmt::format("dlaunch: job {} {}{}\n", e.name, after.state,
                         after.exit_status ? fmt::format(", exit status {}", *after.exit_status)
                                           : std::string())
                 .c_str(),
             stderr);
  return 0;
}

// dlaunch wait JOB: waits until the job's head has ended (a running job of
// this machine; one that ended already at once), then exits with the job's
// exit status, as the shell's `wait` does. A job that ended without a result
// (its head was killed: `lost`) is an error (exit 1).
int wait_job(int argc, char** argv) {
  const Args a = parse("wait", argc, argv, false, false, 1);
  const std::string dir = jobs_dir(false);
  JobEntry e = find_job(dir, a.words[0]);
  if (e.state == "running") {
    int fd = -1;
    try {
      fd = open_head("wait", e);
    } catch (const Error&) {
      // It ended between the two looks: the record says how.
    }
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};  // readable once the head has exited
      while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
      }
      ::close(fd);
    }
    e = find_job(dir, e.name);
  }
  if (e.exit_status) return *e.exit_status;
  throw Error(ErrorKind::kEnvironment,
              e.state == "elsewhere"
                  ? fmt::format("dlaunch wait: job {}'s head runs on {}: run this there", e.name,
                                e.start.head_host)
                  : fmt::format("dlaunch wait: job {} ended without an exit status ({}: its head "
                                "was killed, or its machine went down)",
                                e.name, e.state));
}

// ---- dlaunch logs ----

struct LogsArgs {
  std::string job;
  std::optional<int> rank;
  std::optional<int> attempt;
  std::optional<std::size_t> tail;
  bool follow = false;
};

int whole_number(std::string_view verb, std::string_view option, const std::string& text) {
  int v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) {
    throw Error(ErrorKind::kInput, fmt::format("dlaunch {}: {} takes a whole number, not '{}'",
                                               verb, option, printable(text)));
  }
  return v;
}

// argv[k] as option `name` of the verb: "--name VALUE" (k moves to the
// value) or "--name=VALUE"; nothing when argv[k] is another word.
std::optional<std::string> option_value(std::string_view verb, int argc, char** argv, int& k,
                                        std::string_view name) {
  const std::string_view s = argv[k];
  if (s == name) {
    if (k + 1 == argc) {
      throw Error(ErrorKind::kInput, fmt::format("dlaunch {}: {} needs a value", verb, name));
    }
    return std::string(argv[++k]);
  }
  if (s.size() > name.size() && s.starts_with(name) && s[name.size()] == '=') {
    return std::string(s.substr(name.size() + 1));
  }
  return std::nullopt;
}

LogsArgs parse_logs(int argc, char** argv) {
  LogsArgs a;
  for (int k = 2; k < argc; ++k) {
    const std::string s = argv[k];
    const auto value = [&](std::string_view name) {
      return option_value("logs", argc, argv, k, name);
    };
    if (auto v = value("--rank")) {
      a.rank = whole_number("logs", "--rank", *v);
    } else if (auto v2 = value("--attempt")) {
      a.attempt = whole_number("logs", "--attempt", *v2);
    } else if (auto v3 = value("--tail")) {
      a.tail = static_cast<std::size_t>(whole_number("logs", "--tail", *v3));
    } else if (s == "--follow" || s == "-f") {
      a.follow = true;
    } else if (!s.empty() && s.front() == '-') {
      throw Error(ErrorKind::kInput,
                  fmt::format("dlaunch logs: unknown option '{}' (--rank N, --attempt K, --tail N, "
                              "--follow)",
                              printable(s)));
    } else if (a.job.empty()) {
      a.job = s;
    } else {
      throw Error(ErrorKind::kInput, "dlaunch logs: give one job (a name, an id or last)");
    }
  }
  if (a.job.empty()) {
    throw Error(ErrorKind::kInput, "dlaunch logs: give one job (a name, an id or last)");
  }
  return a;
}

// The numbered entries of a folder: attempts ("0", "1", ...) or rank files
// ("rank-N.log"), sorted by number.
std::vector<int> numbered(const std::string& dir, std::string_view prefix,
                          std::string_view suffix) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix) || !name.ends_with(suffix) ||
        name.size() <= prefix.size() + suffix.size())
      continue;
    const std::string digits =
        name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    int v = -1;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (err == std::errc() && end == digits.data() + digits.size() && v >= 0) out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The ranks with a file in an attempt's folder: rank-N.log, or only its older
// half rank-N.log.1 (a rank that wrote nothing since a new head took the job
// over, which set the old head's files aside).
std::vector<int> ranks_with_files(const std::string& dir) {
  std::vector<int> out = numbered(dir, "rank-", ".log");
  for (const int r : numbered(dir, "rank-", ".log.1")) {
    if (!std::binary_search(out.begin(), out.end(), r)) out.push_back(r);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// One rank's file being followed: the open file (it stays readable when
// the head rotates it away to .1), where it was read to, and whether the
// next byte starts a line (for the prefix).
struct Followed {
  int rank = 0;
  std::string path;
  int fd = -1;
  ino_t inode = 0;
  bool line_start = true;
};

class LogPrinter {
 public:
  explicit LogPrinter(bool prefix) : prefix_(prefix) {}
  // Prints `data` of `rank`, each line prefixed with "[rank] " when asked.
  void print(int rank, std::string_view data, bool& line_start) {
    if (!prefix_) {
      out_.append(data);
    } else {
      const std::string tag = "[" + std::to_string(rank) + "] ";
      for (const char c : data) {
        if (line_start) out_ += tag;
        out_ += c;
        line_start = c == '\n';
      }
    }
    if (out_.size() > 65536) flush();
  }
  void flush() {
    if (!out_.empty()) write_all(1, out_);
    out_.clear();
  }

 private:
  bool prefix_;
  std::string out_;
};

// The last n lines of text (all when n is unset).
std::string_view last_lines(std::string_view text, std::optional<std::size_t> n) {
  if (!n) return text;
  if (*n == 0) return {};
  std::size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;  // the last line's own newline
  std::size_t count = 0;
  while (end > 0) {
    const std::size_t nl = text.rfind('\n', end - 1);
    if (nl == std::string_view::npos) return text;
    if (++count == *n) return text.substr(nl + 1);
    end = nl;
  }
  return text;
}

// Reads what fd has past where it was, to its end.
void drain(Followed& f, LogPrinter& printer) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n > 0) {
      printer.print(f.rank, std::string_view(buf, static_cast<std::size_t>(n)), f.line_start);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;
    }
  }
}

// The ranks' output a job's record keeps (OutputSink::keep_rank_logs), read
// as it grows: the newest attempt's (or one attempt's) files, each rank's
// rotated part first, a new attempt followed when it starts, a rotated file
// read to its end before its successor. With `head_log`, also the detached
// head's own lines (drivers/detach.h: head.log), to stderr.
class RecordFollower {
 public:
  RecordFollower(std::string jobs, JobEntry e, std::optional<int> rank, std::optional<int> attempt,
                 std::optional<std::size_t> tail, bool head_log)
      : jobs_(std::move(jobs)),
        e_(std::move(e)),
        base_(e_.dir + "/output"),
        rank_(rank),
        attempt_(attempt),
        tail_(tail),
        printer_(!rank.has_value()) {
    if (head_log) {
      head_.path = e_.dir + "/head.log";
      head_.rank = -1;
    }
  }
  RecordFollower(const RecordFollower&) = delete;
  RecordFollower& operator=(const RecordFollower&) = delete;
  ~RecordFollower() {
    for (auto& [r, f] : followed_) {
      if (f.fd >= 0) ::close(f.fd);
    }
    if (head_.fd >= 0) ::close(head_.fd);
  }

  const JobEntry& job() const { return e_; }
  bool running() const { return e_.state == "running"; }
  // Whether the record keeps any output (an attempt's folder).
  bool has_output() { return attempt_dir().has_value(); }

  // What the record holds now: the last --tail lines of each rank (all
  // without it). Throws for a rank or an attempt the record does not have.
  void print_now(bool follow) {
    if (rank_ && e_.start.ranks > 0 && *rank_ >= e_.start.ranks) {
      throw Error(ErrorKind::kInput, fmt::format("dlaunch logs: job {} has {} rank(s), 0 to {}",
                                                 e_.name, e_.start.ranks, e_.start.ranks - 1));
    }
    dir_ = attempt_dir();
    if (dir_) {
      if (rank_) {
        // A rank of a running job may not have written yet: nothing to show.
        if (!std::filesystem::exists(rank_path(*rank_)) && !follow && !running()) {
          throw Error(
              ErrorKind::kEnvironment,
              fmt::format("dlaunch logs: job {} has no output of rank {} in attempt {} ({})",
                          e_.name, *rank_, dir_->first, rank_path(*rank_)));
        }
        start(*rank_, true);
      } else {
        for (const int r : ranks_with_files(dir_->second)) start(r, true);
      }
    }
    if (!head_.path.empty()) open_head_log(true);
    printer_.flush();
  }

  // The folders whose changes wake a follower.
  void watch_folders(int watch) const {
    constexpr std::uint32_t kEvents = IN_CREATE | IN_MODIFY | IN_MOVED_TO | IN_MOVED_FROM;
    (void)::inotify_add_watch(watch, e_.dir.c_str(), kEvents);
    (void)::inotify_add_watch(watch, base_.c_str(), kEvents);
    if (dir_) (void)::inotify_add_watch(watch, dir_->second.c_str(), kEvents);
  }

  // Prints what came since the last look: a new attempt (said on stderr), new
  // ranks' files, more of each file, a rotation.
  void step() {
    if (auto now = attempt_dir(); now && (!dir_ || now->first != dir_->first) && !attempt_) {
      if (dir_) {
        for (auto& [r, f] : followed_) drain(f, printer_);
        printer_.flush();
        write_all(2, fmt::format("dlaunch logs: attempt {} started\n", now->first));
      }
      for (auto& [r, f] : followed_) {
        if (f.fd >= 0) ::close(f.fd);
      }
      followed_.clear();
      dir_ = now;
    }
    if (dir_) {
      if (rank_) {
        if (followed_.count(*rank_) == 0) start(*rank_, false);
      } else {
        for (const int r : ranks_with_files(dir_->second))
          if (followed_.count(r) == 0) start(r, false);
      }
      for (auto& [r, f] : followed_) {
        if (f.fd >= 0) drain(f, printer_);
        // Rotated (or made since): the rest of the old file was read above;
        // the new one is read from its start.
        struct stat st {};
        if (::stat(f.path.c_str(), &st) == 0 && st.st_ino != f.inode) {
          if (f.fd >= 0) ::close(f.fd);
          f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
          f.inode = st.st_ino;
          if (f.fd >= 0) drain(f, printer_);
        }
      }
    }
    printer_.flush();
    if (!head_.path.empty()) {
      if (head_.fd < 0) open_head_log(false);
      if (head_.fd >= 0) write_all(2, read_rest(head_.fd));
    }
  }

  // The record read again: whether the head still runs.
  void refresh() { e_ = find_job(jobs_, e_.name); }

 private:
  std::optional<std::pair<int, std::string>> attempt_dir() const {
    const auto attempts = numbered(base_, "", "");
    if (attempt_) {
      if (std::find(attempts.begin(), attempts.end(), *attempt_) == attempts.end()) {
        if (attempts.empty()) return std::nullopt;
        throw Error(ErrorKind::kInput,
                    fmt::format("dlaunch logs: job {} has no attempt {} (attempts 0 to {})",
                                e_.name, *attempt_, attempts.back()));
      }
      return std::make_pair(*attempt_, base_ + "/" + std::to_string(*attempt_));
    }
    if (attempts.empty()) return std::nullopt;
    return std::make_pair(attempts.back(), base_ + "/" + std::to_string(attempts.back()));
  }
  std::string rank_path(int rank) const {
    return dir_->second + "/rank-" + std::to_string(rank) + ".log";
  }
  // Opens a rank's file and prints what it holds now (the rotated part
  // first), the last --tail lines of it when `tail`.
  void start(int rank, bool tail) {
    Followed f;
    f.rank = rank;
    f.path = rank_path(rank);
    f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st {};
    if (f.fd >= 0 && ::fstat(f.fd, &st) == 0) f.inode = st.st_ino;
    std::string now = read_file(f.path + ".1");
    if (f.fd >= 0) now += read_rest(f.fd);
    printer_.print(rank, tail ? last_lines(now, tail_) : std::string_view(now), f.line_start);
    followed_.emplace(rank, std::move(f));
  }
  // The head's lines: its last --tail of them at first, all that comes after.
  void open_head_log(bool tail) {
    head_.fd = ::open(head_.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (head_.fd < 0) return;
    const std::string now = read_rest(head_.fd);
    write_all(2, tail ? last_lines(now, tail_) : std::string_view(now));
  }

  std::string jobs_;
  JobEntry e_;
  std::string base_;
  std::optional<int> rank_;
  std::optional<int> attempt_;
  std::optional<std::size_t> tail_;
  LogPrinter printer_;
  std::optional<std::pair<int, std::string>> dir_;
  std::map<int, Followed> followed_;
  Followed head_;
};

// Waits up to `ms` for the inotify descriptor (and `more`), emptying it.
// Returns the revents of `more`.
short await_change(const UniqueFd& watch, int ms, pollfd more = {-1, 0, 0}) {
  std::array<pollfd, 2> p{{{watch ? watch.get() : -1, POLLIN, 0}, more}};
  if (::poll(p.data(), p.size(), watch || more.fd >= 0 ? ms : 200) > 0 &&
      (p[0].revents & POLLIN) != 0) {
    alignas(inotify_event) char events[4096];
    while (::read(watch.get(), events, sizeof events) > 0) {
    }
  }
  return p[1].revents;
}

// dlaunch logs JOB [--rank N] [--attempt K] [--tail N] [--follow]: the ranks'
// output the job's record keeps (OutputSink::keep_rank_logs): one rank's as
// it wrote it, or every rank's with a [rank] prefix, rank after rank; of the
// newest attempt unless --attempt. --follow goes on printing what comes
// until the job's head has ended (a new attempt is followed when it starts).
int logs(int argc, char** argv) {
  const LogsArgs a = parse_logs(argc, argv);
  const std::string jobs = jobs_dir(false);
  RecordFollower f(jobs, find_job(jobs, a.job), a.rank, a.attempt, a.tail, false);
  if (!f.has_output() && !(a.follow && f.running())) {
    throw Error(ErrorKind::kEnvironment,
                fmt::format("dlaunch logs: job {}'s record keeps none of its ranks' output (it "
                            "ran with --log-size 0, before dlaunch kept it, or wrote nothing)",
                            f.job().name));
  }
  f.print_now(a.follow);
  if (!a.follow) return 0;
  // Following: woken by inotify on the record's folders (a file written,
  // made or rotated; a new attempt), and at least every half second to see
  // whether the head is still there; until it is gone, then once more for
  // what came last.
  const UniqueFd watch(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  for (bool last_round = false;;) {
    if (watch) f.watch_folders(watch.get());
    const bool running = f.running();
    f.step();
    if (last_round) break;
    if (!running) {
      last_round = true;
      continue;
    }
    (void)await_change(watch, 500);
    f.refresh();
  }
  return 0;
}

// ---- dlaunch attach ----

// The terminal attach reads its detach keys from: characters as they are
// typed (no line editing, no echo), Ctrl-C still a SIGINT. Restored when
// attach ends, however it ends.
class RawTerminal {
 public:
  RawTerminal() {
    if (::isatty(0) != 1 || ::tcgetattr(0, &saved_) != 0) return;
    termios raw = saved_;
    // Ctrl-Q and Ctrl-S are keys here, not flow control; Ctrl-V is a key,
    // not "the next one literally".
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO | IEXTEN);
    raw.c_iflag &= ~static_cast<tcflag_t>(IXON);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    active_ = ::tcsetattr(0, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) (void)::tcsetattr(0, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
  bool active() const { return active_; }

 private:
  termios saved_{};
  bool active_ = false;
};

// --detach-keys as docker's: a comma-separated sequence of ctrl-A..ctrl-Z,
// ctrl-@, ctrl-[, ctrl-\, ctrl-], ctrl-^, ctrl-_ and single characters.
std::string parse_detach_keys(const std::string& spec) {
  std::string keys;
  std::size_t at = 0;
  while (at <= spec.size()) {
    const std::size_t comma = spec.find(',', at);
    const std::string k =
        spec.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (k.size() == 1) {
      keys += k;
    } else if (k.size() == 6 && k.starts_with("ctrl-")) {
      const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(k[5])));
      if (c < '@' || c > '_') {
        throw Error(ErrorKind::kInput,
                    fmt::format("dlaunch attach: --detach-keys: '{}' is no control key "
                                "(ctrl-a to ctrl-z, ctrl-@, ctrl-[, ctrl-\\, ctrl-], ctrl-^, "
                                "ctrl-_)",
                                printable(k)));
      }
      keys += static_cast<char>(c - '@');
    } else {
      throw Error(ErrorKind::kInput,
                  fmt::format("dlaunch attach: --detach-keys: '{}' is neither one character "
                              "nor ctrl-KEY (e.g. ctrl-p,ctrl-q)",
                              printable(k)));
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (keys.empty()) throw Error(ErrorKind::kInput, "dlaunch attach: --detach-keys is empty");
  return keys;
}

volatile sig_atomic_t g_attach_interrupts = 0;
int g_attach_wake = -1;  // the write end of attach's self-pipe

extern "C" void on_attach_interrupt(int) {
  g_attach_interrupts = g_attach_interrupts + 1;
  const int saved = errno;
  const char b = 'i';
  (void)!::write(g_attach_wake, &b, 1);
  errno = saved;
}

// attach's progress line (jobs/progress_line.h) at the bottom of the
// terminal stderr is: the job's events tallied as they come, the line
// taken away before what attach prints and put back after it.
class AttachProgress {
 public:
  explicit AttachProgress(const JobEntry& e)
      : on_(::isatty(2) == 1),
        line_(e.start.nodes, e.start.ranks),
        started_ms_(e.start.started_ms),
        events_(on_ ? ::open((e.dir + "/events.jsonl").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
                    : -1) {}
  AttachProgress(const AttachProgress&) = delete;
  AttachProgress& operator=(const AttachProgress&) = delete;
  ~AttachProgress() { take_away(); }

  void take_away() {
    if (!shown_) return;
    write_all(2, "\r\033[K");
    shown_ = false;
  }
  // Reads the events that came and shows the line (cut to the terminal's
  // width: a line that wraps would not be taken away whole).
  void show() {
    if (!on_) return;
    if (events_) {
      partial_ += read_rest(events_.get());
      std::size_t start = 0;
      for (auto nl = partial_.find('\n'); nl != std::string::npos;
           nl = partial_.find('\n', start)) {
        line_.add(std::string_view(partial_).substr(start, nl - start));
        start = nl + 1;
      }
      partial_.erase(0, start);
    }
    const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    std::string text = line_.text(started_ms_ > 0 ? (now_ms - started_ms_) / 1000 : -1);
    winsize w{};
    if (::ioctl(2, TIOCGWINSZ, &w) == 0 && w.ws_col > 1 && text.size() >= w.ws_col)
      text.resize(w.ws_col - 1);  // bytes: the line is ASCII but for one "·"
    write_all(2, "\r\033[K" + text);
    shown_ = true;
  }

 private:
  bool on_;
  ProgressLine line_;
  std::int64_t started_ms_;
  UniqueFd events_;
  std::string partial_;
  bool shown_ = false;
};

// dlaunch attach --recover JOB: a new head for a job whose head is gone
// (docs/events.md, "A job that survives its head"). It runs the job's own
// command line again, from its folder, as a detached head that takes the
// attempt the record's takeover.json names over: each node's agent proves
// the job's secret at the door of the agent that kept its ranks running, and
// the job goes on. Returns in the command once every node is taken over (0)
// or the take-over failed (its status); in the new head, the job's status.
int take_over(const JobEntry& e) {
  if (e.state == "running") {
    throw Error(ErrorKind::kInput,
                fmt::format("dlaunch attach --recover: job {} has its head (pid {}): dlaunch "
                            "attach {} follows it",
                            e.name, e.start.head_pid, e.name));
  }
  if (e.state == "ended") {
    throw Error(ErrorKind::kInput,
                fmt::format("dlaunch attach --recover: job {} has ended (exit status {}): "
                            "nothing to take over",
                            e.name, e.exit_status.value_or(-1)));
  }
  const auto t = read_takeover(e.dir);
  if (!t) {
    throw Error(ErrorKind::kInput,
                fmt::format("dlaunch attach --recover: job {} cannot be taken over: it ran "
                            "without --head-grace (its ranks stopped with its head), or its "
                            "record has no takeover.json of this user's",
                            e.name));
  }
  if (e.start.argv.empty()) {
    throw Error(ErrorKind::kInput,
                "dlaunch attach --recover: job " + e.name + "'s record has no command line");
  }
  // The job's own command line, from its own folder: its hostfile, its
  // options, its working directory, as they were.
  if (::chdir(e.start.cwd.c_str()) != 0) {
    throw Error(ErrorKind::kEnvironment,
                fmt::format("dlaunch attach --recover: cannot enter the job's folder '{}': {}",
                            e.start.cwd, std::strerror(errno)));
  }
  std::vector<std::string> words = e.start.argv;
  std::vector<char*> args;
  args.reserve(words.size() + 1);
  for (auto& w : words) args.push_back(w.data());
  args.push_back(nullptr);
  Options o;
  int early_exit = 0;
  if (!parse_options(static_cast<int>(words.size()), args.data(), o, early_exit)) {
    return early_exit;
  }
  choose_mpi(o, current_environment());
  o.detach = true;
  o.job_id = e.start.id;
  o.takeover = Options::Takeover{.record_name = e.name,
                                 .secret = t->secret,
                                 .attempt = t->attempt,
                                 .restarts = t->restarts,
                                 .hosts = t->hosts,
                                 .started_ms = e.start.started_ms};
  write_all(2, fmt::format("dlaunch attach --recover: taking job {} over (attempt {}, {} "
                           "node(s); its head pid {} is gone)\n",
                           e.name, t->attempt, t->hosts.size(), e.start.head_pid));
  return run_head_job(o, words);
}

// dlaunch attach JOB [--tail N] [--detach-keys KEYS]: the running job's
// output as its head forwards it (every rank's, [rank]-prefixed, the last
// --tail lines of each first), and a detached head's own lines (progress,
// restarts, the report) on stderr, until the job ends: then its exit status
// is attach's. Ctrl-C is SIGINT to the job, as at its start (a second one
// kills its ranks); the detach keys (ctrl-p,ctrl-q) leave it running.
int attach(int argc, char** argv) {
  std::string job;
  std::string keys_spec = "ctrl-p,ctrl-q";
  std::size_t tail = 10;
  bool recover = false;
  for (int k = 2; k < argc; ++k) {
    const std::string s = argv[k];
    const auto value = [&](std::string_view name) {
      return option_value("attach", argc, argv, k, name);
    };
    if (s == "--recover") {
      recover = true;
    } else if (auto v = value("--tail")) {
      tail = static_cast<std::size_t>(whole_number("attach", "--tail", *v));
    } else if (auto v2 = value("--detach-keys")) {
      keys_spec = *v2;
    } else if (!s.empty() && s.front() == '-') {
      throw Error(ErrorKind::kInput,
                  fmt::format("dlaunch attach: unknown option '{}' (--recover, --tail N, "
                              "--detach-keys KEYS)",
                              printable(s)));
    } else if (job.empty()) {
      job = s;
    } else {
      throw Error(ErrorKind::kInput, "dlaunch attach: give one job (a name, an id or last)");
    }
  }
  if (job.empty()) {
    throw Error(ErrorKind::kInput, "dlaunch attach: give one job (a name, an id or last)");
  }
  const std::string keys = parse_detach_keys(keys_spec);
  const std::string jobs = jobs_dir(false);
  if (recover) {
    // A new head takes the job over first (take_over); this process then
    // follows it as any attach does.
    const pid_t self = ::getpid();
    const int status = take_over(find_job(jobs, job));
    if (::getpid() != self || status != 0) return status;  // the head itself, or its start failed
  }
  const JobEntry e = find_job(jobs, job);
  if (e.state == "ended") {
    throw Error(
        ErrorKind::kEnvironment,
        fmt::format(
            "dlaunch attach: job {} has ended{}: dlaunch logs {} shows its output", e.name,
            e.exit_status ? fmt::format(" (exit status {})", *e.exit_status) : std::string(),
            e.name));
  }
  const UniqueFd head(open_head("attach", e));

  // Ctrl-C: counted by the handler, acted on in the loop: a self-pipe wakes
  // it, or, with a terminal (whose stdin the loop polls instead), the signal
  // interrupting that poll.
  std::array<int, 2> wake{-1, -1};
  if (::pipe2(wake.data(), O_CLOEXEC | O_NONBLOCK) != 0) {
    throw Error(ErrorKind::kEnvironment,
                std::string("dlaunch attach: pipe: ") + std::strerror(errno));
  }
  const UniqueFd wake_read(wake[0]);
  const UniqueFd wake_write(wake[1]);
  g_attach_wake = wake[1];
  struct sigaction sa {};
  sa.sa_handler = on_attach_interrupt;
  ::sigemptyset(&sa.sa_mask);
  struct sigaction old_int {};
  ::sigaction(SIGINT, &sa, &old_int);
  const RawTerminal terminal;

  RecordFollower f(jobs, e, std::nullopt, std::nullopt, tail, true);
  f.print_now(true);
  write_all(2, fmt::format("dlaunch attach: job {} (head pid {}); Ctrl-C stops it, {} leaves it "
                           "running{}\n",
                           e.name, e.start.head_pid, keys_spec,
                           terminal.active() ? "" : " (stdin is no terminal: no detach keys)"));
  AttachProgress progress(e);
  const UniqueFd watch(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  std::size_t matched = 0;  // of the detach keys, typed so far
  int interrupts_sent = 0;
  bool detached = false;
  for (bool last_round = false;;) {
    if (watch) f.watch_folders(watch.get());
    progress.take_away();
    f.step();
    if (last_round) break;
    progress.show();
    // The head's pidfd is readable once it has exited.
    pollfd gone{head.get(), POLLIN, 0};
    if (::poll(&gone, 1, 0) > 0) {
      last_round = true;
      continue;
    }
    const short stdin_events =
        await_change(watch, 500, {terminal.active() ? 0 : wake_read.get(), POLLIN, 0});
    char buf[256];
    while (::read(wake_read.get(), buf, sizeof buf) > 0) {
    }
    while (interrupts_sent < g_attach_interrupts) {
      ++interrupts_sent;
      if (::syscall(SYS_pidfd_send_signal, head.get(), SIGINT, nullptr, 0) == 0) {
        progress.take_away();
        write_all(2, fmt::format("dlaunch attach: sent SIGINT to job {}{}\n", e.name,
                                 interrupts_sent > 1 ? " again: its ranks are killed"
                                                     : " (Ctrl-C again kills its ranks)"));
      }
    }
    if (terminal.active() && (stdin_events & (POLLIN | POLLHUP)) != 0) {
      const ssize_t n = ::read(0, buf, sizeof buf);
      for (ssize_t i = 0; i < n && !detached; ++i) {
        matched = buf[i] == keys[matched] ? matched + 1 : (buf[i] == keys[0] ? 1 : 0);
        if (matched == keys.size()) detached = true;
      }
      if (detached) break;
    }
  }
  progress.take_away();
  ::sigaction(SIGINT, &old_int, nullptr);
  g_attach_wake = -1;
  if (detached) {
    write_all(2, fmt::format("dlaunch attach: detached; job {} runs on (dlaunch attach {})\n",
                             e.name, e.name));
    return 0;
  }
  const JobEntry end = find_job(jobs, e.name);
  if (end.exit_status) {
    write_all(2, fmt::format("dlaunch attach: job {} ended, exit status {}: {}\n", e.name,
                             *end.exit_status, end.summary));
    return *end.exit_status;
  }
  throw Error(
      ErrorKind::kEnvironment,
      fmt::format("dlaunch attach: job {} ended without an exit status ({})", e.name, end.state));
}

// dlaunch stacks JOB: SIGQUIT to the job's head, which collects every
// rank's stack (the job goes on) and writes its grouped report to the job's
// record as well as to its own stderr (Controller::report_stacks_now); this
// waits for that report and prints it.
int stacks(int argc, char** argv) {
  const Args a = parse("stacks", argc, argv, false, false, 1);
  const JobEntry e = find_job(jobs_dir(false), a.words[0]);
  const int fd = open_head("stacks", e);
  const auto answers = [&] {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(e.dir, ec)) {
      const std::string n = entry.path().filename().string();
      if (n.starts_with("stacks-") && n.ends_with(".txt")) names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  // Watch first, then look, then ask: an answer cannot slip in between.
  const UniqueFd watch(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (watch) (void)::inotify_add_watch(watch.get(), e.dir.c_str(), IN_MOVED_TO | IN_CREATE);
  const auto before = answers();
  send("stacks", fd, e, SIGQUIT);
  // The head waits --stack-timeout (30 s by default) for the nodes' stacks.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool head_gone = false;
  for (;;) {
    for (const auto& n : answers()) {
      if (std::binary_search(before.begin(), before.end(), n)) continue;
      ::close(fd);
      write_all(1, read_file(e.dir + "/" + n));
      return 0;
    }
    if (head_gone) {
      throw Error(ErrorKind::kEnvironment,
                  fmt::format("dlaunch stacks: job {}'s head ended before it answered", e.name));
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::close(fd);
      throw Error(ErrorKind::kEnvironment,
                  fmt::format("dlaunch stacks: job {}'s head (pid {}) wrote no stacks in 120 s "
                              "(its stderr may say why)",
                              e.name, e.start.head_pid));
    }
    std::array<pollfd, 2> p{{{fd, POLLIN, 0}, {watch.get(), POLLIN, 0}}};
    const int n =
        ::poll(p.data(), watch ? 2 : 1, static_cast<int>(std::min<long long>(left.count(), 500)));
    if (n > 0 && (p[0].revents & POLLIN) != 0) head_gone = true;  // one more look, then give up
    if (n > 0 && (p[1].revents & POLLIN) != 0) {
      alignas(inotify_event) char events[4096];
      while (::read(watch.get(), events, sizeof events) > 0) {
      }
    }
  }
}

// dlaunch recover JOB: attach --recover's take-over alone, returning once
// every node is taken over (0), as -d returns once every node is ready.
int recover(int argc, char** argv) {
  const Args a = parse("recover", argc, argv, false, false, 1);
  return take_over(find_job(jobs_dir(false), a.words[0]));
}

}  // namespace

bool is_job_command(std::string_view word) {
  return word == "ps" || word == "status" || word == "events" || word == "stop" ||
         word == "signal" || word == "logs" || word == "stacks" || word == "wait" ||
         word == "attach" || word == "recover";
}

int run_job_command(int argc, char** argv) {
  const std::string_view verb = argv[1];
  if (verb == "ps") return ps(argc, argv);
  if (verb == "status") return status(argc, argv);
  if (verb == "stop") return stop(argc, argv);
  if (verb == "signal") return signal_job(argc, argv);
  if (verb == "logs") return logs(argc, argv);
  if (verb == "stacks") return stacks(argc, argv);
  if (verb == "wait") return wait_job(argc, argv);
  if (verb == "attach") return attach(argc, argv);
  if (verb == "recover") return recover(argc, argv);
  return events(argc, argv);
}

}  // namespace dlaunch
