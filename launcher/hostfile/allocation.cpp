// Node files and resource sets of PBS, LSF, SGE and Flux, and the choice
// among the schedulers (see allocation.h).
#include "hostfile/allocation.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <unordered_map>

#include <yaml-cpp/yaml.h>

#include "dlaunch/tunables.h"
#include "hostfile/hostfile_internal.h"
#include "hostfile/slurm.h"

namespace dlaunch {

namespace {

using hostfile_detail::host_name_problem;
using hostfile_detail::lookup;
using hostfile_detail::parse_integer;
using hostfile_detail::short_lower;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

struct Word {
  std::string_view text;
  int column = 0;  // 1-based
};

std::vector<Word> words_of(std::string_view line) {
  std::vector<Word> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    const std::size_t start = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > start) out.push_back({line.substr(start, i - start), static_cast<int>(start) + 1});
  }
  return out;
}

// Hosts in the order they first appear, slots summed: what every node file
// here describes.
class HostTally {
 public:
  HostTally(std::string source, std::string hint) : hint_(std::move(hint)) {
    hostfile_.source = std::move(source);
  }

  void add(std::string_view host, long long slots, const SourcePos& pos, const SourcePos& at) {
    if (const auto problem = host_name_problem(host); !problem.message.empty()) {
      throw InputError({at.source, at.line, at.column + static_cast<int>(problem.where)}, "host",
                       problem.message + " ('" + std::string(host) + "')", hint_);
    }
    const std::string name(host);
    auto it = index_.find(name);
    if (it == index_.end()) {
      if (hostfile_.hosts.size() >= static_cast<std::size_t>(limits::kMaxNodesPerJob)) {
        throw InputError(at, "host", hostfile_detail::too_many_hosts(),
                         hostfile_detail::kFewerHostsHint);
      }
      HostEntry h;
      h.name = h.host = name;
      h.slots = 0;
      h.pos = pos;
      it = index_.emplace(name, hostfile_.hosts.size()).first;
      hostfile_.hosts.push_back(std::move(h));
    }
    HostEntry& h = hostfile_.hosts[it->second];
    const long long total = h.slots + slots;
    if (const auto over = hostfile_detail::slots_over_limit(total); !over.empty()) {
      throw InputError(at, "slots", "host '" + name + "': " + over,
                       "use -n or --nproc-per-node to run fewer");
    }
    h.slots = static_cast<int>(total);
  }

  Hostfile finish(const SourcePos& end, const std::string& what) && {
    if (hostfile_.hosts.empty()) throw InputError(end, "", "no hosts in " + what, hint_);
    return std::move(hostfile_);
  }

 private:
  std::string hint_;
  Hostfile hostfile_;
  std::unordered_map<std::string, std::size_t> index_;
};

// Calls fn(line_number, line) for every line of text.
template <typename Fn>
void for_each_text_line(std::string_view text, Fn&& fn) {
  int number = 0;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    fn(++number, line);
  }
}

int line_count(std::string_view text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
}

long long slot_count(const Word& w, const SourcePos& at, const std::string& hint) {
  const auto n = parse_integer(w.text);
  if (!n || *n < 1) {
    throw InputError(at, "slots",
                     "expected a positive slot count, got '" + std::string(w.text) + "'", hint);
  }
  return *n;
}

std::optional<std::string> set(const std::vector<std::string>& env, std::string_view name) {
  auto v = lookup(env, name);
  if (!v || v->empty()) return std::nullopt;
  return v;
}

// --- Flux R -----------------------------------------------------------------

SourcePos mark_pos(const std::string& source, const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.is_null()) return {source};
  return {source, m.line + 1, m.column + 1};
}

[[noreturn]] void r_fail(const std::string& source, const YAML::Node& at, const std::string& field,
                         const std::string& message) {
  throw InputError(mark_pos(source, at), field, message,
                   "expected Flux's R version 1: {\"version\": 1, \"execution\": {\"R_lite\": "
                   "[{\"rank\": \"0-1\", \"children\": {\"core\": \"0-3\"}}], \"nodelist\": "
                   "[\"node[0-1]\"]}}");
}

std::string r_string(const std::string& source, const YAML::Node& n, const std::string& field) {
  if (!n.IsScalar()) r_fail(source, n, field, field + " must be a string");
  return n.Scalar();
}

}  // namespace

const char* scheduler_name(Scheduler s) {
  switch (s) {
    case Scheduler::kFlux:
      return "Flux";
    case Scheduler::kSlurm:
      return "Slurm";
    case Scheduler::kPbs:
      return "PBS";
    case Scheduler::kLsf:
      return "LSF";
    case Scheduler::kSge:
      return "SGE";
  }
  return "?";
}

Hostfile parse_host_per_slot(std::string_view text, const std::string& source,
                             const std::string& variable) {
  const std::string hint = variable + " lists one host name per line, a host once per slot";
  HostTally tally(source, hint);
  for_each_text_line(text, [&](int number, std::string_view line) {
    const auto words = words_of(line);
    if (words.empty()) return;
    if (words.size() > 1) {
      throw InputError({source, number, words[1].column}, "host",
                       "expected one host name per line, got '" + std::string(words[1].text) +
                           "' after '" + std::string(words[0].text) + "'",
                       hint);
    }
    const SourcePos at{source, number, words[0].column};
    tally.add(words[0].text, 1, {source, number}, at);
  });
  return std::move(tally).finish({source, line_count(text)}, variable + " (" + source + ")");
}

Hostfile parse_lsf_mcpu_hosts(std::string_view text) {
  const std::string var = "LSB_MCPU_HOSTS";
  const std::string hint = "LSB_MCPU_HOSTS is \"host1 n1 host2 n2 ...\"";
  HostTally tally(var, hint);
  const auto words = words_of(text);
  for (std::size_t k = 0; k < words.size(); k += 2) {
    const SourcePos at{var, 1, words[k].column};
    if (k + 1 == words.size()) {
      throw InputError(at, "slots",
                       "host '" + std::string(words[k].text) + "' has no slot count after it",
                       hint);
    }
    const SourcePos count_at{var, 1, words[k + 1].column};
    tally.add(words[k].text, slot_count(words[k + 1], count_at, hint), {var, 1, words[k].column},
              at);
  }
  return std::move(tally).finish({var, 1}, var);
}

Hostfile parse_pe_hostfile(std::string_view text, const std::string& source) {
  const std::string hint = "PE_HOSTFILE lines are \"host slots queue processor-range\"";
  HostTally tally(source, hint);
  for_each_text_line(text, [&](int number, std::string_view line) {
    const auto words = words_of(line);
    if (words.empty()) return;
    if (words.size() < 2) {
      throw InputError({source, number, static_cast<int>(line.size()) + 1}, "slots",
                       "host '" + std::string(words[0].text) + "' has no slot count", hint);
    }
    if (words.size() > 4) {
      throw InputError({source, number, words[4].column}, "",
                       "unexpected fifth field '" + std::string(words[4].text) + "'", hint);
    }
    const long long slots = slot_count(words[1], {source, number, words[1].column}, hint);
    tally.add(words[0].text, slots, {source, number}, {source, number, words[0].column});
  });
  return std::move(tally).finish({source, line_count(text)}, "PE_HOSTFILE (" + source + ")");
}

std::vector<int> parse_idset(std::string_view text, const SourcePos& pos,
                             const std::string& field) {
  const std::string hint = "an idset is ids and ranges: 0-3,5";
  std::string_view s = text;
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  std::vector<int> ids;
  if (s.empty()) return ids;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = std::min(s.find(',', start), s.size());
    const std::string_view part = s.substr(start, end - start);
    const std::size_t dash = part.find('-');
    const auto lo = parse_integer(part.substr(0, dash));
    const auto hi = dash == std::string_view::npos ? lo : parse_integer(part.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi > (1 << 24)) {
      throw InputError(pos, field, "'" + std::string(text) + "' is not an idset", hint);
    }
    if (ids.size() + static_cast<std::size_t>(*hi - *lo + 1) > (std::size_t{1} << 20)) {
      throw InputError(pos, field, "'" + std::string(text) + "' has too many ids", hint);
    }
    for (long long v = *lo; v <= *hi; ++v) ids.push_back(static_cast<int>(v));
    if (end == s.size()) break;
    start = end + 1;
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

Hostfile parse_flux_r(std::string_view text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));  // JSON is YAML's flow style
  } catch (const YAML::Exception& e) {
    throw InputError({source, e.mark.line + 1, e.mark.column + 1}, "", "not JSON: " + e.msg,
                     "`flux resource R` prints the allocation as JSON");
  }
  if (!root.IsMap()) r_fail(source, root, "", "R must be a JSON object");
  const YAML::Node version = root["version"];
  if (!version || !version.IsScalar() || version.Scalar() != "1") {
    r_fail(source, version ? version : root, "version", "only R version 1 is understood");
  }
  const YAML::Node exec = root["execution"];
  if (!exec || !exec.IsMap()) r_fail(source, root, "execution", "R has no execution object");
  const YAML::Node nodelist = exec["nodelist"];
  if (!nodelist || !nodelist.IsSequence() || nodelist.size() == 0) {
    r_fail(source, exec, "nodelist",
           "R has no execution.nodelist (the host names; flux-core 0.23 and later write it)");
  }
  std::vector<std::string> names;
  for (const auto& item : nodelist) {
    const std::string list = r_string(source, item, "nodelist");
    try {
      for (auto& n : expand_hostlist(list, "nodelist")) names.push_back(std::move(n));
    } catch (const InputError& e) {
      throw InputError(mark_pos(source, item), "nodelist", e.message(), e.hint());
    }
  }
  const YAML::Node lite = exec["R_lite"];
  if (!lite || !lite.IsSequence()) r_fail(source, exec, "R_lite", "R has no execution.R_lite list");
  std::map<int, int> slots;  // broker rank -> slots
  for (const auto& entry : lite) {
    if (!entry.IsMap()) r_fail(source, entry, "R_lite", "an R_lite entry must be an object");
    const YAML::Node rank = entry["rank"];
    if (!rank) r_fail(source, entry, "rank", "an R_lite entry has no rank");
    const YAML::Node children = entry["children"];
    if (!children || !children.IsMap()) {
      r_fail(source, entry, "children", "an R_lite entry has no children object");
    }
    auto count = [&](const char* key) -> int {
      const YAML::Node n = children[key];
      if (!n) return 0;
      return static_cast<int>(
          parse_idset(r_string(source, n, key), mark_pos(source, n), key).size());
    };
    const int gpus = count("gpu");
    const int cores = count("core");
    const int per_rank = gpus > 0 ? gpus : cores;
    if (per_rank == 0) r_fail(source, children, "children", "an R_lite entry has no cores");
    for (int r : parse_idset(r_string(source, rank, "rank"), mark_pos(source, rank), "rank")) {
      if (static_cast<std::size_t>(r) >= names.size()) {
        r_fail(source, rank, "rank",
               "broker rank " + std::to_string(r) + " has no host: nodelist names " +
                   std::to_string(names.size()));
      }
      if (!slots.emplace(r, per_rank).second) {
        r_fail(source, rank, "rank", "broker rank " + std::to_string(r) + " listed twice");
      }
    }
  }
  HostTally tally(source, "");
  for (const auto& [r, n] : slots) {
    tally.add(names[static_cast<std::size_t>(r)], n, {source}, {source});
  }
  return std::move(tally).finish({source}, source);
}

std::optional<Allocation> find_allocation(const AllocationProbe& probe) {
  const auto& env = probe.env;
  struct Marker {
    Scheduler scheduler;
    std::vector<const char*> vars;
  };
  const std::vector<Marker> markers = {
      {Scheduler::kFlux, {"FLUX_URI"}},
      {Scheduler::kSlurm, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}},
      {Scheduler::kPbs, {"PBS_NODEFILE"}},
      {Scheduler::kLsf, {"LSB_DJOB_HOSTFILE", "LSB_MCPU_HOSTS"}},
      {Scheduler::kSge, {"PE_HOSTFILE"}},
  };
  std::optional<Allocation> found;
  for (const auto& m : markers) {
    const char* var = nullptr;
    for (const char* v : m.vars) {
      if (set(env, v)) {
        var = v;
        break;
      }
    }
    if (var == nullptr) continue;
    if (found) {
      found->ignored.push_back(std::string(var) + " (" + scheduler_name(m.scheduler) + ")");
      continue;
    }
    found.emplace();
    found->scheduler = m.scheduler;
    found->from = var;
  }
  if (!found) return found;

  Allocation& a = *found;
  auto from_file = [&](const std::string& var) {
    const std::string path = *set(env, var);
    a.from = var + "=" + path;
    return std::pair{path, probe.read_file(path, var)};
  };
  Transport remote = Transport::kSsh;
  switch (a.scheduler) {
    case Scheduler::kSlurm: {
      std::string slots_from;
      a.hosts = *slurm_allocation_hostfile(env, probe.this_host, &slots_from);
      a.from = a.hosts.source + ", slots from " + slots_from;
      a.remote_start = "srun (a job step per node)";
      return found;
    }
    case Scheduler::kFlux:
      a.hosts = parse_flux_r(probe.flux_resource_r(), "flux resource R");
      a.from = "flux resource R (FLUX_URI=" + *set(env, "FLUX_URI") + ")";
      remote = Transport::kFlux;
      break;
    case Scheduler::kPbs: {
      auto [path, text] = from_file("PBS_NODEFILE");
      a.hosts = parse_host_per_slot(text, path, "PBS_NODEFILE");
      a.remote_start =
          "ssh (pbsdsh and pbs_tmrsh start programs with tm_spawn, which connects no "
          "stdin/stdout back to the caller for the control channel)";
      break;
    }
    case Scheduler::kLsf:
      if (set(env, "LSB_DJOB_HOSTFILE")) {
        auto [path, text] = from_file("LSB_DJOB_HOSTFILE");
        a.hosts = parse_host_per_slot(text, path, "LSB_DJOB_HOSTFILE");
      } else {
        a.hosts = parse_lsf_mcpu_hosts(*set(env, "LSB_MCPU_HOSTS"));
      }
      remote = Transport::kLsf;
      break;
    case Scheduler::kSge: {
      auto [path, text] = from_file("PE_HOSTFILE");
      a.hosts = parse_pe_hostfile(text, path);
      remote = Transport::kSge;
      break;
    }
  }
  if (remote != Transport::kSsh) {
    static const std::map<Transport, std::pair<const char*, const char*>> kHow = {
        {Transport::kSge, {"qrsh -inherit", "qrsh"}},
        {Transport::kLsf, {"blaunch", "blaunch"}},
        {Transport::kFlux, {"flux run", "flux"}},
    };
    const auto& [how, fallback] = kHow.at(remote);
    const std::string program =
        probe.remote_start_program ? probe.remote_start_program(remote) : fallback;
    if (probe.on_path && probe.on_path(program)) {
      a.remote_start = how;
    } else {
      a.remote_start = "ssh (" + program + " is not on PATH)";
      remote = Transport::kSsh;
    }
  }
  const std::string me = short_lower(probe.this_host);
  for (auto& h : a.hosts.hosts) {
    if (is_local_host(h.host) || (!me.empty() && short_lower(h.host) == me)) {
      h.transport = Transport::kLocal;
      if (!is_local_host(h.host)) h.address = h.host;  // MASTER_ADDR must reach it from the others
    } else {
      h.transport = remote;
    }
  }
  return found;
}

}  // namespace dlaunch
