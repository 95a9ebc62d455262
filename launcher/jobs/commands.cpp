#include "jobs/commands.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dlaunch/error.h"
#include "dlaunch/text.h"
#include "jobs/events.h"
#include "jobs/registry.h"

namespace dlaunch {

namespace {

struct Args {
  bool all = false;
  bool json = false;
  std::vector<std::string> words;
};

Args parse(std::string_view verb, int argc, char** argv, bool takes_all, bool takes_json,
           std::size_t words) {
  Args a;
  for (int k = 2; k < argc; ++k) {
    const std::string_view s = argv[k];
    if (s == "--all" && takes_all) {
      a.all = true;
    } else if (s == "--json" && takes_json) {
      a.json = true;
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

}  // namespace

bool is_job_command(std::string_view word) {
  return word == "ps" || word == "status" || word == "events";
}

int run_job_command(int argc, char** argv) {
  const std::string_view verb = argv[1];
  if (verb == "ps") return ps(argc, argv);
  if (verb == "status") return status(argc, argv);
  return events(argc, argv);
}

}  // namespace dlaunch
