#include "cli/options.h"

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <CLI/CLI.hpp>
#include <climits>

#include "check/health.h"
#include "cli/container_options.h"
#include "cli/man_page.h"
#include "cli/peer_options.h"
#include "cli/pernode_options.h"
#include "cli/version_text.h"
#include "dlaunch/placement/mapping.h"
#include "dlaunch/process.h"
#include "dlaunch/text.h"
#include "dlaunch/version.h"
#include "hostfile/hostfile_internal.h"

namespace dlaunch {

namespace {

// --help shows each option group as a plain section, "Output:" and its
// options, the way mpirun and most tools do, rather than CLI11's
// "[Option Group: Output]" with an "Options:" line under it.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_expanded(const CLI::App* sub) const override {
    if (!sub->get_name().empty() || sub->get_group().empty()) {
      return CLI::Formatter::make_expanded(sub);
    }
    std::string out = sub->get_group() + ":\n";
    for (const CLI::Option* opt : sub->get_options([sub](const CLI::Option* o) {
           return !o->get_group().empty() && o->nonpositional() && o != sub->get_help_ptr() &&
                  o != sub->get_help_all_ptr();
         })) {
      out += make_option(opt, false);
    }
    // A blank line between sections; CLI11 adds the one before the footer.
    const auto groups = sub->get_parent()->get_subcommands({});
    return groups.empty() || groups.back() != sub ? out + "\n" : out;
  }
};

// Validators whose errors read like the rest of dlaunch's: what was
// expected, and what was given.
CLI::Validator integer_in(long long lo, long long hi, const std::string& expected,
                          const std::string& type) {
  return {[=](std::string& v) -> std::string {
            char* end = nullptr;
            errno = 0;
            const long long x = std::strtoll(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi) {
              return "expected " + expected + ", got '" + v + "'";
            }
            return {};
          },
          type};
}

CLI::Validator seconds(bool zero_allowed) {
  return {
      [=](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || !std::isfinite(x) || x < 0 || (!zero_allowed && x == 0)) {
          return std::string("expected a number of seconds ") + (zero_allowed ? ">= 0" : "> 0") +
                 ", got '" + v + "'";
        }
        return {};
      },
      zero_allowed ? "SECONDS>=0" : "SECONDS>0"};
}

const CLI::Validator kPositive = integer_in(1, INT_MAX, "a positive integer", "INT>0");
const CLI::Validator kNonNegative = integer_in(0, INT_MAX, "an integer >= 0", "INT>=0");
const CLI::Validator kPort = integer_in(1, 65535, "a port number (1..65535)", "PORT");

// Every long and short option name of the app, with its dashes.
std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> out;
  const auto add = [&](const CLI::App& a) {
    for (const CLI::Option* opt : a.get_options()) {
      for (const auto& n : opt->get_lnames()) out.push_back("--" + n);
      for (const auto& n : opt->get_snames()) out.push_back("-" + n);
    }
  };
  add(app);
  for (const CLI::App* sub : app.get_subcommands({})) add(*sub);
  return out;
}

// --stdin's word: a rank number, all or none. Whether the rank is in the
// job is the driver's to say (the plan knows the world size).
StdinTarget parse_stdin_target(const std::string& t) {
  if (t == "all") return {.kind = StdinTarget::Kind::kAll};
  if (t == "none") return {.kind = StdinTarget::Kind::kNone};
  const bool digits = !t.empty() && t.size() <= 9 &&
                      std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    throw InputError({"--stdin"}, "", "'" + t + "' is neither a rank, all nor none",
                     "give a rank number (0 is the default), all or none");
  }
  return {.kind = StdinTarget::Kind::kRank, .rank = std::stoi(t)};
}

// The words of the options that take one of a few, as typed values (the
// parser has already refused any other word).
std::optional<Transport> transport_of(const std::string& word) {
  if (word == "ssh") return Transport::kSsh;
  if (word == "slurm") return Transport::kSlurm;
  if (word == "sge") return Transport::kSge;
  if (word == "lsf") return Transport::kLsf;
  if (word == "flux") return Transport::kFlux;
  return std::nullopt;  // auto
}

ssh::HostKeyPolicy host_key_policy_of(const std::string& word) {
  if (word == "off") return ssh::HostKeyPolicy::kOff;
  if (word == "accept-new") return ssh::HostKeyPolicy::kAcceptNew;
  return ssh::HostKeyPolicy::kStrict;
}

// MPMD: the apps of --app FILE or of the command line's `:`; o.np becomes
// the sum of their ranks and o.command the first app's.
void resolve_apps(Options& o) {
  auto segments = split_apps(o.command);
  if (!o.app_file.empty()) {
    if (!o.command.empty()) {
      throw InputError({"--app"}, "", "both --app and a program were given",
                       "put every app in the file, or give them on the command line");
    }
    if (o.np > 0 || !o.role.empty() || !o.app_host.empty()) {
      throw InputError({"--app"}, "",
                       std::string(o.np > 0          ? "-n"
                                   : !o.role.empty() ? "--role"
                                                     : "--host") +
                           " was given with --app",
                       "give each app's -n, --role and --host on its line of the file");
    }
    o.apps = parse_app_file(o.app_file);
  } else if (segments.size() > 1 || !o.role.empty() || !o.app_host.empty()) {
    // One program on some nodes of the hostfile without -n: their slots
    // (mpirun -hostfile f -host aa), counted once the hostfile is read.
    const bool slots_of_hosts = segments.size() == 1 && !o.app_host.empty();
    if (o.np == 0 && !slots_of_hosts) {
      throw InputError({"-n"}, "", "no number of ranks for the first app",
                       "start every app with -n N: dlaunch -n 1 PROG1 : -n 8 PROG2");
    }
    AppSpec first;
    first.np = o.np;
    first.role = o.role;
    first.hosts = o.app_host;
    first.command = segments.front();
    first.pos = {"app 1"};
    if (first.command.empty()) {
      throw InputError(first.pos, "program", "no program for this app",
                       "give the first app's program before the ':'");
    }
    if (first.role.find_first_of(" \t\n=") != std::string::npos) {
      throw InputError({"--role"}, "", "'" + first.role + "' is not a role name",
                       "give a word without spaces or '='");
    }
    o.apps.push_back(std::move(first));
    for (std::size_t k = 1; k < segments.size(); ++k) {
      o.apps.push_back(parse_app_words(segments[k], {"app " + std::to_string(k + 1)}));
    }
  } else {
    return;
  }
  long long total = 0;
  for (const auto& a : o.apps) total += a.np;
  if (total > limits::kMaxRanksPerJob) {
    throw InputError({"-n"}, "",
                     "the apps have " + std::to_string(total) + " ranks, over the limit of " +
                         std::to_string(limits::kMaxRanksPerJob) + " per job");
  }
  o.np = static_cast<int>(total);
  o.command = o.apps.front().command;
}

}  // namespace

int signal_number(const std::string& name) {
  if (name.empty()) return 0;
  if (std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (name.size() > 2) return 0;
    const int n = std::stoi(name);
    return n >= 1 && n <= SIGRTMAX ? n : 0;
  }
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper.rfind("SIG", 0) == 0) upper.erase(0, 3);
  for (int s = 1; s < NSIG; ++s) {
    const char* abbrev = ::sigabbrev_np(s);
    if (abbrev != nullptr && upper == abbrev) return s;
  }
  return 0;
}

SignalSpec parse_signal_spec(const std::string& spec) {
  const auto at = spec.find('@');
  const std::string name = spec.substr(0, at);
  SignalSpec out;
  out.signal = signal_number(name);
  if (out.signal == 0) {
    throw InputError({"--signal"}, "", "'" + name + "' is not a signal",
                     "give a name such as USR1 or SIGUSR1, or a number from 1 to " +
                         std::to_string(SIGRTMAX) + ", then optionally @SECONDS");
  }
  if (out.signal == SIGKILL || out.signal == SIGSTOP) {
    throw InputError({"--signal"}, "",
                     signal_name(out.signal) + " cannot be caught: no rank could act on it",
                     "use a signal the program handles, such as USR1");
  }
  if (at != std::string::npos) {
    const std::string secs = spec.substr(at + 1);
    const bool digits =
        !secs.empty() && secs.size() <= 5 &&
        std::all_of(secs.begin(), secs.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int n = digits ? std::stoi(secs) : 0;
    if (!digits || n < 1 || n > 65535) {
      throw InputError({"--signal"}, "", "'" + secs + "' in '" + spec + "' is not a time",
                       "give whole seconds from 1 to 65535 after '@', e.g. USR1@120");
    }
    out.seconds = n;
  }
  return out;
}

std::string tunables_markdown() {
  std::string out =
      "# Tunables\n\n"
      "Every number a user can set that decides how long dlaunch waits or how much it does at\n"
      "once. This page is generated from the table in `common/include/dlaunch/tunables.h`\n"
      "(`dlaunch --help-tunables`); a test keeps the two equal. The fixed timing constants\n"
      "are in the same header, each with what it bounds.\n\n"
      "| option | default | workers' variable | meaning |\n"
      "|---|---|---|---|\n";
  for (const Tunable* t : tunables::kAll) {
    char value[32];
    std::snprintf(value, sizeof value, "%g%s%s", t->value, *t->unit ? " " : "", t->unit);
    out += std::string("| `") + t->option + "` | " + value + " | " +
           (t->env != nullptr ? std::string("`") + t->env + "`" : std::string("-")) + " | " +
           t->help + " |\n";
  }
  return out;
}

namespace {

std::vector<std::string> with_peer_spellings(const CLI::App& app, int argc, char** argv) {
  // Open MPI writes its long options with one dash (mpirun -np 4, -wdir,
  // -hostfile); CLI11 would read -np as -n p. A word of the options (before
  // the program) that is -WORD where --WORD, or a peer's name for one of
  // ours, is a long option becomes that option.
  static const std::pair<std::string_view, std::string_view> kAliases[] = {
      {"machinefile", "hostfile"},
      {"default-hostfile", "hostfile"},
      {"timestamp-output", "timestamps"},
      {"wd", "wdir"},
      {"gmca", "mca"},
  };
  std::vector<std::string> args(argv, argv + argc);
  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string& w = args[i];
    if (w == "--" || w.size() < 2 || w[0] != '-') break;  // the program
    const bool dashdash = w[1] == '-';
    const auto eq = w.find('=');
    std::string name = w.substr(
        dashdash ? 2 : 1, eq == std::string::npos ? std::string::npos : eq - (dashdash ? 2 : 1));
    for (const auto& [peer, ours] : kAliases) {
      if (name == peer) name = ours;
    }
    const CLI::Option* opt = nullptr;
    if (dashdash || name.size() > 1) {
      opt = app.get_option_no_throw("--" + name);
      if (opt != nullptr) {
        w = "--" + name + (eq == std::string::npos ? "" : w.substr(eq));
      } else if (!dashdash) {
        // -tag-ouput is a misspelt long option, not -t with "ag-ouput" attached.
        const bool wordlike = name.size() >= 4 && std::all_of(name.begin(), name.end(), [](char c) {
                                return (c >= 'a' && c <= 'z') || c == '-';
                              });
        const std::string near =
            wordlike ? hostfile_detail::closest_match("--" + name, option_names(app)) : "";
        if (!near.empty()) {
          throw InputError({}, "", "unknown option -" + name + " (did you mean " + near + "?)",
                           "dlaunch --help lists every option");
        }
        opt = app.get_option_no_throw(std::string("-") + w[1]);  // -n4, -xNAME=V
        if (opt != nullptr) continue;                            // its value is attached
      }
    } else {
      opt = app.get_option_no_throw(w);
    }
    // An option that takes values and has none attached: the next words are
    // them (two for --mca K V).
    if (opt != nullptr && eq == std::string::npos && opt->get_items_expected_min() > 0) {
      i += static_cast<std::size_t>(opt->get_items_expected_min());
    }
  }
  return args;
}

}  // namespace

bool parse_options(int argc, char** argv, Options& o, int& exit_code) {
  CLI::App app{
      "dlaunch: start a distributed job (one agent per node, workers with the torchrun "
      "environment)\n"
      "usage: dlaunch [options] [-H HOSTS | --hostfile FILE | -n N] PROGRAM [ARGS...]\n"
      "   or: dlaunch [options] -n N PROGRAM [ARGS...] : -n N [app options] PROGRAM [ARGS...] "
      "...\n"
      "   or: dlaunch [options] --app FILE\n"
      "   or: dlaunch --nnodes N [--rdzv-endpoint HOST:PORT | --node-rank K --master-addr A] "
      "[options] PROGRAM [ARGS...]\n"
      "       (one per node, as torchrun: docs/per-node.md)\n"
      "   or: dlaunch ps|status|events|logs|attach|stacks|signal|stop|wait [JOB] ...\n"
      "       (a job started before, from any shell: docs/events.md)",
      "dlaunch"};
  app.footer(
      "Examples:\n"
      "  dlaunch -H hostfiles/localhost.yaml ./hello\n"
      "  dlaunch -n 4 python3 train.py --lr 0.1\n"
      "  dlaunch -H node1:4,node2:4 --tag-output ./train\n"
      "  dlaunch --nnodes 2 --nproc-per-node 4 --rdzv-endpoint node1:29400 train.py  # each node\n"
      "Exit status: 0 when every rank exits 0; else the first failing rank's code (128+N for\n"
      "signal N); 2 for bad input; 1 when a node fails; 124 at --timeout; 123 when\n"
      "--stall-action abort stopped a stalled job; 128+N when dlaunch was stopped by signal N.\n"
      "Signals: SIGINT, SIGTERM and SIGHUP stop the job (SIGTERM with --signal: SIG to the\n"
      "ranks first, then the stop a kill grace later; SIGHUP not at all under --nohup);\n"
      "SIGUSR1, SIGUSR2, SIGCONT and SIGTSTP go to every rank on every node (dlaunch itself\n"
      "keeps running). The table: docs/troubleshooting.md, section Signals.\n"
      "Hangs: at --timeout, at a stall (--stall-timeout) and on SIGQUIT (Ctrl-\\, the job goes\n"
      "on) dlaunch takes every rank's stack (eu-stack from elfutils, else gdb, on each node) and\n"
      "reports identical stacks together, odd ones first; full stacks go to stacks.txt.\n"
      "Python ranks get PYTHONFAULTHANDLER=1 and, when the job is stopped, SIGABRT after their\n"
      "native stack, so that their tracebacks show. SIGQUIT rather than SIGUSR1: USR1 and USR2\n"
      "are forwarded to the ranks.");
  app.prefix_command();  // options end at PROGRAM; the rest is the job's command line
  app.formatter(std::make_shared<HelpFormatter>());
  app.set_version_flag("-V,--version", version_text());
  // The options that take one of a few words are parsed into these, then
  // once into Options' typed fields (below); the defaults show in --help.
  std::string transport_word = "auto";
  std::string stdin_word = "0";
  std::string stall_word = "report";
  std::string color_word = "auto";
  std::string host_key_word = "strict";
  std::string ssh_word;
  std::string check_depth;      // --check[=quick|full]
  std::string preflight_depth;  // --preflight[=quick|full]
  std::vector<std::string> threshold_words;
  // Hidden (no group): the man page, generated from this app at build time.
  bool help_man = false;
  app.add_flag("--help-man", help_man, "print dlaunch(1) in roff")->group("");
  bool help_tunables = false;
  app.add_flag("--help-tunables", help_tunables, "print docs/tunables.md")->group("");

  // Sections of --help, in the order mpirun users look for them.
  auto* hosts = app.add_option_group("Hosts and placement");
  auto* env = app.add_option_group("Environment");
  auto* out = app.add_option_group("Output");
  auto* fault = app.add_option_group("Fault handling");
  auto* ssh = app.add_option_group("SSH");
  auto* job = app.add_option_group("Miscellaneous");
  hosts->add_option("-H,--hosts", o.hosts,
                    "hostfile (YAML or `host slots=N` lines), or inline hosts a:4,b:2");
  hosts->add_option("--hostfile", o.hostfile, "hostfile, never read as an inline list");
  hosts
      ->add_option("-n,-c,--np,--n", o.np,
                   "total number of ranks (without a hostfile: on this machine)")
      ->check(kPositive);
  hosts
      ->add_option("-N,--npernode", o.npernode,
                   "ranks on every node, as mpirun's -N (also --map-by ppr:N:node; without "
                   "hosts: N ranks on this machine)")
      ->check(kPositive);
  hosts->add_flag_callback(
      "--pernode", [&o] { o.npernode = 1; }, "one rank on every node (mpirun's, as -N 1)");
  hosts
      ->add_option("--num-gpus,--num_gpus", o.num_gpus,
                   "DeepSpeed's: N ranks on every node, each node's GPUs 0..N-1 in "
                   "CUDA_VISIBLE_DEVICES (without hosts: on this machine)")
      ->check(kPositive);
  hosts->add_option("-i,--include", o.filter.include,
                    "use only these hosts/slots: host1@host2:0,2");
  hosts->add_option("-e,--exclude", o.filter.exclude,
                    "leave out these hosts/slots: host1@host2:0,2");
  hosts->add_option("--num-nodes,--num_nodes", o.filter.num_nodes, "use the first N nodes")
      ->check(kPositive);
  hosts
      ->add_option("--transport", transport_word,
                   "how agents start: auto (hostfile: this machine's loopback names locally, "
                   "others over SSH; batch allocation: this node locally, the others with the "
                   "scheduler's remote start, docs/schedulers.md), ssh (every node), or slurm, "
                   "sge, lsf, flux (every node with srun, qrsh -inherit, blaunch, flux run; "
                   "needs that scheduler's allocation)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "ssh", "slurm", "sge", "lsf", "flux"}));
  hosts->add_option("--bind-to", o.bind_to,
                    "bind each rank to its none|hwthread|core|l3cache|numa|package, or to the "
                    "cores of the NUMA node of its GPU (gpu); default none, under --mpi core for "
                    "<= 2 ranks per machine and package otherwise (docs/placement.md)");
  hosts->add_option("--map-by", o.map_by,
                    "lay ranks out by slot|core|l3cache|numa|package (round-robin over those "
                    "objects), OBJ:PE=n for n cores per rank; default: the --bind-to object; "
                    "ppr:N:node is -N N");
  hosts->add_flag("--oversubscribe", o.oversubscribe,
                  "allow more ranks than cores (or PE=n groups) when binding: ranks beyond them "
                  "are bound round-robin from the first");
  bool no_oversubscribe = false;
  hosts->add_flag("--nooversubscribe", no_oversubscribe,
                  "accepted for mpirun's command lines: dlaunch never puts more ranks on a node "
                  "than its slots");
  hosts->add_flag("--report-bindings", o.report_bindings,
                  "print each rank's CPUs as it starts: host, rank, CPU list and a picture "
                  "([BB/../..], one [...] per package, '/' between cores)");
  hosts->add_option("--app", o.app_file,
                    "MPMD: run the apps of FILE in one world, one `-n N [app options] PROGRAM "
                    "[ARGS...]` per line (docs/mpmd.md); or give apps on the command line: "
                    "-n 1 PROG1 : -n 8 [app options] PROG2");
  hosts->add_option("--role", o.role,
                    "ROLE_NAME of the (first) app's ranks (default: the program's base name in an "
                    "MPMD job, else `default`); an app option");
  hosts
      ->add_option("--host", o.app_host,
                   "with -H or --hostfile: the (first) app runs only on these nodes, by name (an "
                   "app option); without: the hosts, as mpirun's --host a,b:2 (1 slot unless "
                   ":N, a name given twice has 2)")
      ->delimiter(',')
      ->allow_extra_args(false);

  env->add_option("-x", o.exports,
                  "set NAME=VALUE for every worker, or pass on NAME from here (-x NAME); "
                  "repeatable; see docs/environment.md for what is forwarded anyway")
      ->allow_extra_args(false);
  env->add_option("--env-file", o.env_files,
                  "NAME=VALUE lines ('#' comments) for every worker; repeatable; -x overrides")
      ->allow_extra_args(false);
  env->add_option("--mca", o.mca,
                  "Open MPI's MCA parameter K set to V: OMPI_MCA_K=V for every rank (as -x, "
                  "which wins); repeatable; also -mca, --gmca")
      ->type_size(2)
      ->type_name("K V")
      ->allow_extra_args(false);
  env->add_option("--wdir", o.workdir, "working directory of the workers (default: current)");

  out->add_flag_callback(
      "--tag-output", [&] { o.prefix = PrefixMode::kHostRank; },
      "prefix lines with [node:rank] instead of [rank]");
  out->add_flag_callback(
      "--no-prefix", [&] { o.prefix = PrefixMode::kNone; }, "forward lines without a prefix");
  out->add_option("--output-dir", o.output_dir, "also write DIR/<job-id>/rank.N.{out,err}");
  out->add_option("--events", o.events,
                  "also write the job's events (nodes ready and lost, ranks started and "
                  "exited, restarts, the end) as JSON Lines to FILE, - for stdout "
                  "(docs/events.md); the job's record keeps them too (dlaunch events JOB)")
      ->type_name("FILE");
  out->add_option("--log-size", o.log_size,
                  "the job's record keeps each rank's output, the last SIZE bytes or so of "
                  "each attempt (dlaunch logs JOB); e.g. 64M, 0 for none")
      ->type_name("SIZE")
      ->capture_default_str()
      ->transform(CLI::AsSizeValue(false));
  out->add_option("--output-filename", o.output_filename,
                  "mpirun's: also write DIR/1/rank.N/stdout and stderr (rank zero-padded to the "
                  "width of the world size; replaced on every run); DIR:nojobid leaves out "
                  "the 1/, DIR:nocopy shows nothing on the console, DIR:nojobid,nocopy both")
      ->type_name("DIR");
  out->add_flag("--merge-stderr-to-stdout", o.merge_stderr,
                "a rank's stderr goes where its stdout goes (console and files)");
  out->add_option("--ranks", o.ranks,
                  "show only these ranks' output on the console, e.g. 0,3-5 (--output-dir and "
                  "the failure report still get every rank)");
  out->add_flag("--timestamps", o.timestamps,
                "put the time each line reached dlaunch (HH:MM:SS.mmm) in front of it");
  out->add_option("--color", color_word,
                  "colour the rank prefixes: auto (on a terminal, unless NO_COLOR is set), "
                  "always, never")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "always", "never"}));

  const std::string collective_timeout_help =
      std::string(tunables::kCollectiveTimeout.help) + " (sets " +
      tunables::kCollectiveTimeout.env + "; comm's default " +
      std::to_string(static_cast<int>(tunables::kCollectiveTimeout.value)) + ")";
  fault->add_option(tunables::kKillGrace.option, o.kill_grace_s, tunables::kKillGrace.help)
      ->capture_default_str()
      ->check(seconds(true));
  fault
      ->add_option(tunables::kHeartbeatTimeout.option, o.heartbeat_timeout_s,
                   tunables::kHeartbeatTimeout.help)
      ->capture_default_str()
      ->check(seconds(true));
  fault->add_option(tunables::kStartTimeout.option, o.start_timeout_s, tunables::kStartTimeout.help)
      ->capture_default_str()
      ->check(seconds(false));
  fault->add_option(tunables::kTimeout.option, o.timeout_s, tunables::kTimeout.help)
      ->capture_default_str()
      ->check(seconds(true));
  fault
      ->add_option("--signal", o.signal_spec,
                   "send signal SIG (USR1, SIGUSR1 or a number) to every rank SECONDS "
                   "(default 60, as srun) before --timeout, and on SIGTERM to dlaunch (Slurm "
                   "preemption, scancel) first SIG, then the stop a --kill-grace later")
      ->type_name("SIG[@SECONDS]");
  fault->add_flag("-d,--detach", o.detach,
                  "start the job, print its id once every node is ready (or the start failure, "
                  "with its exit status) and return; the head goes on as a daemon: dlaunch "
                  "attach, logs, wait, stop JOB");
  fault
      ->add_option("--head-grace", o.head_grace_s,
                   "once the ranks run, an agent whose head is gone (killed, its machine down, "
                   "the connection cut) keeps them running this many seconds for a new head: "
                   "dlaunch attach --recover JOB takes the job over (default 300 for a detached "
                   "job, else 0: the ranks stop with their head)")
      ->type_name("SECONDS")
      ->check(seconds(true));
  fault->add_flag("--nohup", o.nohup,
                  "keep running when the terminal closes: SIGHUP is ignored (without it SIGHUP "
                  "stops the job like SIGTERM)");
  fault->add_option(tunables::kStallTimeout.option, o.stall_timeout_s, tunables::kStallTimeout.help)
      ->capture_default_str()
      ->check(seconds(true));
  fault
      ->add_option("--stall-action", stall_word,
                   "what a stall (--stall-timeout) does: report (the grouped stacks, once per "
                   "stall) or abort (report, stop the job, exit 123)")
      ->capture_default_str()
      ->check(CLI::IsMember({"report", "abort"}));
  fault->add_option(tunables::kStackTimeout.option, o.stack_timeout_s, tunables::kStackTimeout.help)
      ->capture_default_str()
      ->check(seconds(true));
  fault
      ->add_option(std::string(tunables::kMaxRestarts.option) + ",--max_restarts", o.max_restarts,
                   tunables::kMaxRestarts.help)
      ->capture_default_str()
      ->check(kNonNegative);
  fault
      ->add_option("--min-nodes", o.min_nodes,
                   "with --max-restarts: a lost node (agent gone, host unreachable, heartbeat "
                   "stopped) is excluded and the job restarts on the nodes left, if at least this "
                   "many (0, the default: every node is needed, none is dropped)")
      ->check(kNonNegative);
  fault
      ->add_option("--spares", o.spares,
                   "with --max-restarts: keep the last N hosts of the hostfile idle; one takes "
                   "the place of each lost node")
      ->check(kNonNegative);
  fault
      ->add_option(tunables::kCollectiveTimeout.option, o.collective_timeout_s,
                   collective_timeout_help)
      ->check(seconds(true));
  job->add_option("--master-addr,--master_addr", o.master_addr,
                  "MASTER_ADDR for the workers (default: node 0)");
  job->add_option("--master-port,--master_port", o.master_port,
                  "MASTER_PORT (default: a free port reserved by node 0)")
      ->check(kPort);
  job->add_option("--store-port", o.store_port,
                  "port of the job's comm store on node 0 (default: any free port)")
      ->check(kPort);
  job->add_option("--job-id", o.job_id,
                  "job id (TORCHELASTIC_RUN_ID, DLAUNCH_JOB_ID); default random");
  job->add_option("--agent", o.agent_path,
                  "path of dlaunch-agent on every node (default: next to dlaunch; an SSH node "
                  "without it gets a copy in ~/.cache/dlaunch)");
  job->add_flag("--no-agent-upload", o.no_agent_upload,
                "never copy dlaunch-agent to an SSH node that lacks it (or has another version)");
  job->add_option("--stdin", stdin_word,
                  "which rank reads dlaunch's stdin: a rank number (default 0, as mpirun), all "
                  "(every rank gets a copy) or none (/dev/null)")
      ->capture_default_str();
  job->add_flag("--dry-run", o.dry_run, "print what would run on every node, run nothing");
  bool run_as_root = false;
  job->add_flag("--allow-run-as-root", run_as_root,
                "accepted for mpirun's command lines: dlaunch runs as root without it");
  bool no_local_rank = false;
  job->add_flag("--no-local-rank,--no_local_rank", no_local_rank,
                "accepted for DeepSpeed's command lines: dlaunch never adds --local_rank to the "
                "program's arguments (LOCAL_RANK is in every rank's environment)");
  job->add_flag("--show-secrets", o.show_secrets,
                "with --dry-run, also show the values that look like secrets, by the "
                "variable's name (TOKEN, PASSWORD, MYSQL_PWD, SENTRY_DSN, ...) or the value's "
                "shape (a URL with a password, a webhook URL, a JWT, a token); hidden otherwise");
  job->add_flag("--mpi", o.mpi,
                "direct-launch Open MPI programs: every agent is a PMIx server, so MPI_Init joins "
                "the dlaunch world (no mpirun); on by itself for a program that links Open MPI "
                "or a script that imports mpi4py")
      ->excludes(job->add_flag("--no-mpi", o.no_mpi,
                               "run an Open MPI program's ranks each on its own (singletons), "
                               "not as one MPI world"));

  ssh->add_option(tunables::kSshConcurrency.option, o.ssh_concurrency,
                  tunables::kSshConcurrency.help)
      ->capture_default_str()
      ->check(integer_in(0, 4096, "an integer from 0 (adapt) to 4096", "0..4096"));
  ssh->add_option(tunables::kConnectTimeout.option, o.connect_timeout_s,
                  tunables::kConnectTimeout.help)
      ->capture_default_str()
      ->check(seconds(false));
  ssh->add_option("--host-key-check", host_key_word,
                  "check host keys against the known_hosts files: strict, accept-new (record "
                  "unknown keys) or off (default: the ssh config's StrictHostKeyChecking, else "
                  "strict)")
      ->capture_default_str()
      ->check(CLI::IsMember({"strict", "accept-new", "off"}));
  ssh->add_option("-F,--ssh-config", o.ssh_config,
                  "OpenSSH client configuration to read in place of ~/.ssh/config and "
                  "/etc/ssh/ssh_config (as ssh -F; `none`: no configuration)");
  ssh->add_option("--ssh", ssh_word,
                  "SSH client for every SSH node: libssh2 (dlaunch's own, the default) or openssh "
                  "(the system's ssh: GSSAPI, FIDO keys, certificates, ControlMaster, Match exec)")
      ->check(CLI::IsMember({"libssh2", "openssh"}));
  // A bare --check is --check=full (CLI11 gives a flag given bare "true").
  ssh->add_flag("--check", check_depth,
                "preflight every host (connect, auth, host key, agent, working directory, program, "
                "GPUs, health, a GPU compute and memory test, the network between nodes) and print "
                "a table; exit 0 only if all pass; --check=quick leaves out the checks that take "
                "seconds (the GPU test and the network test between nodes)");
  ssh->add_option("--check-threshold", threshold_words,
                  "with --check: change one health threshold, NAME=VALUE (repeatable; "
                  "free_gb, mem_available_gb, load_per_cpu, nofile, memlock_mb, gpu_temp_c, "
                  "ecc_volatile, ecc_aggregate, clock_offset_s, ib_link_downed, xid_window_h, "
                  "net_ratio, net_gbps, gpu_test_mb, gpu_mem_ratio; defaults and "
                  "meaning in docs/health.md)")
      ->type_name("NAME=VALUE");
  ssh->add_flag("--preflight", preflight_depth,
                "run --check's checks (and the health thresholds) before the job: a failing node "
                "is left out and a spare takes its place (--spares), or the job runs on fewer "
                "(--min-nodes); otherwise the job does not start; an elastic restart checks the "
                "nodes it keeps again, quickly (docs/health.md); --preflight=quick as "
                "--check=quick");
  ssh->add_option("--exclude-file", o.exclude_file,
                  "hosts a check found failing, for the next job: --check writes FILE anew with "
                  "the hosts that failed, --preflight adds those it left out, and a job leaves the "
                  "hosts FILE names out (docs/health.md)")
      ->type_name("FILE");
  ssh->add_flag("--json", o.json,
                "with --check: print one JSON object (every node's checks, problems and health "
                "figures) instead of the tables");
  add_pernode_options(app, o);
  add_container_options(app, o);
  add_refused_peer_options(app);

  try {
    std::vector<std::string> args = with_peer_spellings(app, argc, argv);
    std::vector<char*> words;
    words.reserve(args.size());
    for (auto& a : args) words.push_back(a.data());
    app.parse(static_cast<int>(words.size()), words.data());
    o.connect_timeout_given = app.count(tunables::kConnectTimeout.option) > 0;
    o.host_key_check_given = app.count("--host-key-check") > 0;
    o.transport = transport_of(transport_word);
    o.stall_action = stall_word == "abort" ? StallAction::kAbort : StallAction::kReport;
    o.color = parse_color_mode(color_word);
    o.host_key_check = host_key_policy_of(host_key_word);
    for (const auto& [name, depth] : {std::pair<std::string, std::string&>{"--check", check_depth},
                                      {"--preflight", preflight_depth}}) {
      if (depth.empty() || depth == "true" || depth == "full" || depth == "quick") continue;
      throw InputError({name}, "", "'" + depth + "' is no depth of the checks",
                       name + " (all of them), " + name + "=full (the same) or " + name +
                           "=quick (without the network test between nodes)");
    }
    o.check = !check_depth.empty();
    o.preflight = !preflight_depth.empty();
    o.check_quick = o.check ? check_depth == "quick" : preflight_depth == "quick";
    if (!ssh_word.empty()) {
      o.ssh_client = ssh_word == "openssh" ? SshClient::kOpenssh : SshClient::kLibssh2;
    }
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; anything else is a usage error (exit 2),
    // said the way every other error of dlaunch is.
    if (e.get_exit_code() == 0) {
      app.exit(e);
      exit_code = 0;
      return false;
    }
    std::string what = e.what();
    if (e.get_name() == "ArgumentMismatch")
      what = what.substr(0, what.find(':')) + " needs a value";
    std::fprintf(stderr, "dlaunch: error: %s (hint: dlaunch --help lists every option)\n",
                 what.c_str());
    exit_code = 2;
    return false;
  }
  if (help_tunables) {
    std::fputs(tunables_markdown().c_str(), stdout);
    exit_code = 0;
    return false;
  }
  if (help_man) {
    std::fputs(man_page(app, kVersion).c_str(), stdout);
    exit_code = 0;
    return false;
  }
  o.command = app.remaining();
  // Options end at the program; `--` ends them explicitly. A word in the
  // program's place that looks like an option is a misspelt option of ours
  // (dlaunch -n 2 --tag-ouput ./train), not a program called --tag-ouput.
  if (!o.command.empty() && o.command.front() == "--") {
    o.command.erase(o.command.begin());
  } else if (!o.command.empty() && o.command.front().size() > 1 && o.command.front()[0] == '-') {
    const std::string word = o.command.front().substr(0, o.command.front().find('='));
    const std::string near = hostfile_detail::closest_match(word, option_names(app));
    throw InputError(
        {}, "", "unknown option " + word + (near.empty() ? "" : " (did you mean " + near + "?)"),
        "dlaunch --help lists every option; put `--` before a program whose name "
        "starts with '-'");
  }
  health::Thresholds checked;
  for (const auto& t : threshold_words) health::set_threshold(checked, t);
  o.check_threshold_words = threshold_words;
  if (o.json && !o.check) {
    throw InputError({"--json"}, "", "works only with --check",
                     "add --check to check the nodes, or leave it out to run the job");
  }
  if (!threshold_words.empty() && !o.check && !o.preflight) {
    throw InputError({"--check-threshold"}, "", "works only with --check or --preflight",
                     "add --check to check the nodes, or --preflight to check them before the job");
  }
  finish_peer_options(app, o);
  finish_pernode_options(app, o);
  finish_container_options(app, o);
  if (o.detach && (o.check || o.dry_run || o.pernode.enabled)) {
    throw InputError({"--detach"}, "",
                     o.check     ? "does not go with --check: a check ends when it has looked"
                     : o.dry_run ? "does not go with --dry-run: nothing starts"
                                 : "is for a job started from its head, not the per-node mode "
                                   "(there, run each node's launcher under the system's service "
                                   "manager or the pod's)",
                     "leave out one of the two");
  }
  if (o.head_grace_s > 0 && (o.check || o.pernode.enabled)) {
    throw InputError({"--head-grace"}, "",
                     o.check ? "does not go with --check: no rank runs"
                             : "is for a job started from its head; in the per-node mode each "
                               "node's launcher is its head",
                     "leave out one of the two");
  }
  if (o.detach && stdin_word != "none" && !stdin_word.empty() && stdin_word != "0") {
    throw InputError({"--stdin"}, "",
                     "'" + stdin_word + "' with --detach: a detached job has no terminal to read",
                     "leave --stdin out (the ranks' stdin is then empty)");
  }
  // Per-node mode runs one program (--app, --host and --stdin are refused there).
  if (!o.pernode.enabled) {
    o.stdin_target = parse_stdin_target(stdin_word);
    resolve_apps(o);
    hosts_from_apps(o);
    // dlaunch -H hosts.yaml train.py: under Python, as torchrun and deepspeed run it.
    if (o.apps.empty()) {
      o.auto_python = with_python(o.pernode, o.command);
    } else {
      for (auto& a : o.apps) {
        if (auto py = with_python(o.pernode, a.command); !py.empty()) o.auto_python = py;
      }
      o.command = o.apps.front().command;
    }
  }
  if (!o.job_id.empty() && !is_job_id(o.job_id)) {
    throw InputError({"--job-id"}, "", "'" + o.job_id + "' is not a valid job id",
                     "use 1-64 letters, digits, '.', '_' or '-' (not '.' or '..')");
  }
  if (o.np > limits::kMaxRanksPerJob) {
    throw InputError({"-n"}, "",
                     std::to_string(o.np) + " ranks is over the limit of " +
                         std::to_string(limits::kMaxRanksPerJob) + " per job");
  }
  if (o.filter.nproc_per_node > limits::kMaxRanksPerNode) {
    throw InputError({"--nproc-per-node"}, "",
                     std::to_string(o.filter.nproc_per_node) + " is over the limit of " +
                         std::to_string(limits::kMaxRanksPerNode) + " ranks per node");
  }
  if (o.master_port != 0 && o.master_port == o.store_port) {
    throw InputError({"--store-port"}, "",
                     std::to_string(o.store_port) + " is the port given to --master-port too",
                     "give them different ports, or leave one out for a free one");
  }
  if (auto policy = placement::parse_policy(
          {.bind_to = o.bind_to, .map_by = o.map_by, .oversubscribe = o.oversubscribe});
      !policy) {
    throw InputError({}, "", policy.error(), "docs/placement.md lists the policies");
  }
  if (!o.hosts.empty() && !o.hostfile.empty()) {
    throw InputError({"--hostfile"}, "", "both -H and --hostfile were given", "use one of them");
  }
  // --preflight leaves failing nodes out before the first attempt: there
  // --spares and --min-nodes act without a restart.
  if ((o.min_nodes > 0 || o.spares > 0) && o.max_restarts == 0 && !o.preflight) {
    throw InputError(
        {o.spares > 0 ? "--spares" : "--min-nodes"}, "",
        "drops or replaces lost nodes between attempts, and --max-restarts allows none",
        "add --max-restarts N, or --preflight to leave failing nodes out before the job starts");
  }

  if (app.count("--signal") > 0) {
    const SignalSpec spec = parse_signal_spec(o.signal_spec);
    o.warn_signal = spec.signal;
    o.warn_before_s = spec.seconds;
    // Refused rather than sent at once: a warning at the start warns of nothing.
    if (o.timeout_s > 0 && spec.seconds >= o.timeout_s) {
      char timeout[32];
      std::snprintf(timeout, sizeof timeout, "%g", o.timeout_s);
      throw InputError({"--signal"}, "",
                       "'" + o.signal_spec + "' asks for " + signal_name(spec.signal) + " " +
                           std::to_string(spec.seconds) + " s before the end, but --timeout is " +
                           timeout + " s",
                       "give fewer seconds after '@' than --timeout (e.g. " +
                           o.signal_spec.substr(0, o.signal_spec.find('@')) + "@" +
                           std::to_string(std::max(1, static_cast<int>(o.timeout_s / 2))) +
                           "), or a longer --timeout");
    }
  }
  return true;
}

}  // namespace dlaunch
