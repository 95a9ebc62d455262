#include "jobs/commands.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/options.h"
#include "dlaunch/error.h"
#include "dlaunch/proc_stat.h"
#include "dlaunch/text.h"
#include "jobs/events.h"
#include "jobs/registry.h"

namespace dlaunch {

namespace {

struct Args {
  bool all = false;
  bool json = false;
  std::string signal;  // stop --signal SIG
  std::vector<std::string> words;
};

Args parse(std::string_view verb, int argc, char** argv, bool takes_all, bool takes_json,
           std::size_t words, bool takes_signal = false) {
  Args a;
  for (int k = 2; k < argc; ++k) {
    const std::string_view s = argv[k];
    if (s == "--all" && takes_all) {
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

int events(int argc, char** argv) {
  const Args a = parse("events", argc, argv, false, false, 1);
  const JobEntry e = find_job(jobs_dir(false), a.words[0]);
  std::ifstream in(e.dir + "/events.jsonl");
  if (!in) throw Error(ErrorKind::kEnvironment, "cannot read " + e.dir + "/events.jsonl");
  std::string line;
  std::string out;
  while (std::getline(in, line)) out += line + "\n";
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

}  // namespace

bool is_job_command(std::string_view word) {
  return word == "ps" || word == "status" || word == "events" || word == "stop" || word == "signal";
}

int run_job_command(int argc, char** argv) {
  const std::string_view verb = argv[1];
  if (verb == "ps") return ps(argc, argv);
  if (verb == "status") return status(argc, argv);
  if (verb == "stop") return stop(argc, argv);
  if (verb == "signal") return signal_job(argc, argv);
  return events(argc, argv);
}

}  // namespace dlaunch
