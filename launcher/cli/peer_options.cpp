#include "cli/peer_options.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string_view>

#include <CLI/CLI.hpp>

#include "cli/apps.h"
#include "cli/options.h"

namespace dlaunch {

namespace {

// A peer's option that dlaunch cannot honour: why, and what to write instead.
struct Refused {
  const char* names;  // CLI11's spelling: every name it goes by
  bool takes_value;
  const char* peer;
  const char* why;
  const char* instead;
};

constexpr Refused kRefused[] = {
    {"--npersocket", true, "mpirun", "dlaunch counts ranks per node, not per socket",
     "give -N with the node's count (N x its sockets) and --map-by package to deal them over "
     "the sockets"},
    {"--gloo", false, "horovodrun",
     "Horovod's Gloo controller needs horovodrun's own rendezvous server",
     "run Horovod built with MPI under --mpi, as horovodrun --mpi does"},
    {"--launcher", true, "deepspeed",
     "dlaunch starts every node's ranks itself (locally, over SSH, or with srun)",
     "leave it out; --transport slurm starts the nodes with srun"},
    {"--launcher_args,--launcher-args", true, "deepspeed",
     "dlaunch starts every node's ranks itself (locally, over SSH, or with srun)", "leave it out"},
    {"--no_ssh,--no-ssh", false, "deepspeed",
     "a launcher on every node is dlaunch's per-node mode, spelt as torchrun's",
     "run `dlaunch --nnodes N --node-rank K --nproc-per-node G --master-addr A PROGRAM` on "
     "every node (docs/per-node.md)"},
    {"--prefix", true, "mpirun",
     "dlaunch's agents start the ranks: there are no Open MPI daemons to find",
     "leave it out; -x LD_LIBRARY_PATH=DIR/lib if the ranks need Open MPI's libraries from there"},
    {"--nolocal", false, "mpirun", "dlaunch runs ranks on the hosts it is given, this one too",
     "leave this machine out of the hosts (or --exclude it)"},
    {"--host-discovery-script,--host_discovery_script", true, "horovodrun",
     "dlaunch's hosts come from the hostfile, not from a script run during the job",
     "list the hosts in a hostfile; --max-restarts with --min-nodes and --spares replaces lost "
     "ones (docs/faults.md)"},
    {"--min-np,--min_np", true, "horovodrun", "dlaunch's world size is fixed for each attempt",
     "give -np; --max-restarts with --min-nodes restarts on fewer nodes"},
    {"--max-np,--max_np", true, "horovodrun", "dlaunch's world size is fixed for each attempt",
     "give -np"},
};

// MCA frameworks of Open MPI's runtime (mpirun and its daemons), not of the
// MPI library in the ranks: under dlaunch nothing would read them.
constexpr std::string_view kRuntimeMca[] = {"rmaps",  "ras",    "plm",   "odls",    "routed", "rtc",
                                            "state",  "errmgr", "filem", "grpcomm", "rml",    "iof",
                                            "schizo", "orte",   "prte",  "prrte",   "ess"};

bool was_given(const CLI::App& app, const std::string& name) { return app.count(name) > 0; }

std::string first_name(const char* names) {
  const std::string_view n(names);
  return std::string(n.substr(0, n.find(',')));
}

// --map-by ppr:N:OBJ: ranks per node for OBJ node; anything else is refused.
void resolve_ppr(Options& o) {
  if (o.map_by.rfind("ppr:", 0) != 0) return;
  const std::string spec = o.map_by.substr(4);
  const auto colon = spec.find(':');
  const std::string count = spec.substr(0, colon);
  const std::string object = colon == std::string::npos ? "" : spec.substr(colon + 1);
  const bool digits =
      !count.empty() && count.size() <= 9 &&
      std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoi(count) < 1 || object.empty()) {
    throw InputError({"--map-by"}, "", "'" + o.map_by + "' is not ppr:N:OBJECT",
                     "write ppr:N:node for N ranks on every node (as -N N)");
  }
  if (object.rfind("node:", 0) == 0) {
    throw InputError({"--map-by"}, "", "'" + o.map_by + "': modifiers of ppr are not supported",
                     "give -N " + count + " and the layout apart, e.g. --map-by slot:PE=2");
  }
  if (object != "node") {
    throw InputError({"--map-by"}, "",
                     "'" + o.map_by + "': dlaunch counts ranks per node, not per " + object,
                     "give -N with the node's count (N x its " + object +
                         "s) and --map-by package to deal them over the sockets");
  }
  if (o.npernode > 0 && o.npernode != std::stoi(count)) {
    throw InputError({"--map-by"}, "",
                     "'" + o.map_by + "' and -N " + std::to_string(o.npernode) + " disagree",
                     "give one of them");
  }
  o.npernode = std::stoi(count);
  o.map_by.clear();
}

// mpirun's --mca K V (Open MPI reads OMPI_MCA_K from the environment).
void resolve_mca(Options& o) {
  std::vector<std::string> vars;
  for (std::size_t k = 0; k + 1 < o.mca.size(); k += 2) {
    const std::string& key = o.mca[k];
    const bool name_ok = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    });
    if (!name_ok) {
      throw InputError({"--mca"}, "", "'" + key + "' is not an MCA parameter name",
                       "give --mca NAME VALUE, e.g. --mca btl_tcp_if_include eth0");
    }
    const std::string framework = key.substr(0, key.find('_'));
    for (const auto runtime : kRuntimeMca) {
      if (framework != runtime) continue;
      throw InputError({"--mca"}, "",
                       "'" + key +
                           "' is a parameter of mpirun's runtime, which dlaunch replaces: "
                           "nothing would read it",
                       framework == "rmaps"
                           ? "dlaunch places ranks in hostfile order, each node's slots in "
                             "turn; list the hosts in the order wanted (docs/compat.md)"
                           : "leave it out (docs/compat.md lists what dlaunch does instead)");
    }
    vars.push_back("OMPI_MCA_" + key + "=" + o.mca[k + 1]);
  }
  // Before -x: a -x of the same variable wins.
  o.exports.insert(o.exports.begin(), vars.begin(), vars.end());
}

}  // namespace

void add_refused_peer_options(CLI::App& app) {
  static std::string ignored_value;
  static bool ignored_flag = false;
  for (const auto& r : kRefused) {
    if (r.takes_value) {
      app.add_option(r.names, ignored_value, "refused")->group("");
    } else {
      app.add_flag(r.names, ignored_flag, "refused")->group("");
    }
  }
}

std::string host_list_as_inline(const std::vector<std::string>& entries) {
  std::vector<std::string> order;
  std::map<std::string, long long> slots;
  for (const auto& e : entries) {
    // a, a:2, [::1], [::1]:2
    const auto close = e.front() == '[' ? e.find(']') : std::string::npos;
    const auto colon = e.find(':', close == std::string::npos ? 0 : close);
    const bool counted = colon != std::string::npos &&
                         (e.front() == '[' || e.find(':', colon + 1) == std::string::npos);
    const std::string name = counted ? e.substr(0, colon) : e;
    long long n = 1;
    if (counted) {
      const std::string count = e.substr(colon + 1);
      const bool digits =
          !count.empty() && count.size() <= 9 &&
          std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; });
      n = digits ? std::stoll(count) : 0;
      if (n < 1) {
        throw InputError({"--host"}, "", "'" + e + "': expected a positive slot count after ':'",
                         "write hosts as a,b:2 (a has 1 slot, b 2)");
      }
    }
    if (name.empty()) throw InputError({"--host"}, "", "empty host name in '" + e + "'");
    if (slots.find(name) == slots.end()) order.push_back(name);
    slots[name] += n;
  }
  std::string out;
  for (const auto& name : order) {
    if (!out.empty()) out += ',';
    out += name + ":" + std::to_string(slots[name]);
  }
  return out;
}

void finish_peer_options(const CLI::App& app, Options& o) {
  for (const auto& r : kRefused) {
    const std::string name = first_name(r.names);
    if (!was_given(app, name)) continue;
    throw InputError({name}, "", std::string(r.peer) + "'s " + name + " is not supported: " + r.why,
                     r.instead);
  }
  if (o.map_by == "node" || o.map_by.rfind("node:", 0) == 0) {
    throw InputError({"--map-by"}, "",
                     "'" + o.map_by +
                         "' (ranks dealt round-robin over the nodes) is not supported: dlaunch "
                         "numbers ranks node by node, filling each node's slots in turn",
                     "leave it out (mpirun's default, by slot, is the same as dlaunch's), or "
                     "use -N to say how many ranks each node gets");
  }
  resolve_ppr(o);
  resolve_mca(o);
  if (o.npernode > 0 && o.num_gpus > 0) {
    throw InputError({"--num-gpus"}, "", "-N and --num_gpus both say how many ranks a node runs",
                     "give one of them");
  }
  if ((o.npernode > 0 || o.num_gpus > 0) && was_given(app, "--nproc-per-node")) {
    throw InputError({"--nproc-per-node"}, "",
                     std::string(o.npernode > 0 ? "-N" : "--num_gpus") +
                         " and --nproc-per-node both say how many ranks a node runs",
                     "give one of them");
  }
  if (o.npernode > 0) o.filter.nproc_per_node = o.npernode;
  if (o.num_gpus > 0) {
    o.filter.nproc_per_node = o.num_gpus;
    o.filter.device_ids = true;
  }
  if (o.npernode > 0) o.filter.nproc_source = "-N";
  if (o.num_gpus > 0) o.filter.nproc_source = "--num_gpus";
  if (!o.output_filename.empty()) {
    (void)parse_output_filename(o.output_filename);
    if (!o.output_dir.empty()) {
      throw InputError({"--output-filename"}, "", "--output-filename and --output-dir both given",
                       "give one of them");
    }
  }
  // mpirun's --host without a hostfile is the list of hosts; a single
  // program runs on all of them.
  if (o.hosts.empty() && o.hostfile.empty() && !o.app_host.empty() && o.app_file.empty() &&
      split_apps(o.command).size() == 1) {
    o.hosts = host_list_as_inline(o.app_host);
    o.app_host.clear();
  }
}

void hosts_from_apps(Options& o) {
  if (!o.hosts.empty() || !o.hostfile.empty() || o.apps.size() < 2) return;
  // A host's slots: the most any one app asks of it.
  std::vector<std::string> order;
  std::map<std::string, long long> slots;
  bool any = false;
  for (auto& app : o.apps) {
    if (app.hosts.empty()) continue;
    any = true;
    const std::string own = host_list_as_inline(app.hosts);
    std::vector<std::string> names;
    std::size_t start = 0;
    while (start < own.size()) {
      const auto comma = std::min(own.find(',', start), own.size());
      const std::string item = own.substr(start, comma - start);
      const auto colon = item.rfind(':');
      const std::string name = item.substr(0, colon);
      const long long n = std::stoll(item.substr(colon + 1));
      if (slots.find(name) == slots.end()) order.push_back(name);
      slots[name] = std::max(slots[name], n);
      names.push_back(name.front() == '[' ? name.substr(1, name.size() - 2) : name);
      start = comma + 1;
    }
    app.hosts = names;
  }
  if (!any) return;
  for (const auto& app : o.apps) {
    if (app.hosts.empty()) {
      throw InputError(app.pos, "--host", "this app names no host, and there is no hostfile",
                       "give every app --host, or give the job's hosts with -H or --hostfile");
    }
  }
  for (const auto& name : order) {
    if (!o.hosts.empty()) o.hosts += ',';
    o.hosts += name + ":" + std::to_string(slots[name]);
  }
}

OutputFilename parse_output_filename(const std::string& value) {
  OutputFilename out;
  const auto colon = value.find(':');
  out.dir = value.substr(0, colon);
  if (out.dir.empty()) {
    throw InputError({"--output-filename"}, "", "no folder in '" + value + "'",
                     "give --output-filename DIR, optionally DIR:nojobid,nocopy");
  }
  if (colon == std::string::npos) return out;
  const std::string directives = value.substr(colon + 1);
  std::size_t start = 0;
  while (start <= directives.size()) {
    const auto comma = std::min(directives.find(',', start), directives.size());
    const std::string d = directives.substr(start, comma - start);
    if (d == "nojobid") {
      out.jobid = false;
    } else if (d == "nocopy") {
      out.copy = false;
    } else {
      throw InputError({"--output-filename"}, "",
                       "unknown directive '" + d + "' in '" + value + "'",
                       "the directives are nojobid and nocopy, separated by ','");
    }
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> deepspeed_env_files(const std::vector<std::string>& env,
                                             const std::string& home, const std::string& cwd) {
  std::string name = ".deepspeed_env";
  for (const auto& e : env) {
    if (e.rfind("DS_ENV_FILE=", 0) == 0 && e.size() > 12) name = e.substr(12);
  }
  std::vector<std::string> out;
  for (const std::string& dir : {home, cwd}) {
    if (dir.empty() && name.front() != '/') continue;
    const std::string path = name.front() == '/' ? name : dir + "/" + name;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) continue;  // DeepSpeed: os.path.isfile
    // An absolute $DS_ENV_FILE is one file, read once.
    if (std::find(out.begin(), out.end(), path) == out.end()) out.push_back(path);
  }
  return out;
}

}  // namespace dlaunch
