// DeepSpeed-style node selection: --include/--exclude, --num-nodes, --nproc-per-node.
#include <algorithm>
#include <optional>

#include "hostfile/hostfile.h"
#include "hostfile/hostfile_internal.h"

namespace dlaunch {

namespace {

constexpr const char* kSpecHint = "write hosts separated by '@', each with optional slots: a@b:0,2";

// One `host[:i,j]` item of an --include/--exclude value.
struct Selection {
  std::size_t host_index = 0;
  std::optional<std::vector<int>> slots;  // sorted; nullopt means the whole host
};

class SpecParser {
 public:
  SpecParser(std::string source, const std::vector<HostEntry>& hosts)
      : source_(std::move(source)), hosts_(hosts) {}

  std::vector<Selection> parse(std::string_view spec) const {
    std::vector<Selection> out;
    std::size_t start = 0;
    while (start <= spec.size()) {
      const std::size_t end = std::min(spec.find('@', start), spec.size());
      Selection sel = parse_item(spec.substr(start, end - start), start);
      for (const auto& prev : out) {
        if (prev.host_index == sel.host_index) {
          fail(start, "host", "host '" + hosts_[sel.host_index].name + "' is listed twice",
               "list each host once, with all its slots: a:0,1");
        }
      }
      out.push_back(std::move(sel));
      start = end + 1;
    }
    return out;
  }

 private:
  std::string source_;
  const std::vector<HostEntry>& hosts_;

  [[noreturn]] void fail(std::size_t offset, const std::string& field, const std::string& message,
                         const std::string& hint = kSpecHint) const {
    throw InputError({source_, 1, static_cast<int>(offset) + 1}, field, message, hint);
  }

  std::optional<std::size_t> find_host(std::string_view name) const {
    for (std::size_t i = 0; i < hosts_.size(); ++i) {
      if (hosts_[i].name == name) return i;
    }
    return std::nullopt;
  }

  Selection parse_item(std::string_view item, std::size_t offset) const {
    if (item.empty()) fail(offset, "host", "empty host entry");
    // A whole-item match first, so names such as "::1" are not split at their colons.
    if (auto index = find_host(item)) return {*index, std::nullopt};
    const auto colon = item.rfind(':');
    const std::string_view name = item.substr(0, colon);
    const auto index = find_host(name);
    if (!index) {
      std::vector<std::string> names;
      for (const auto& h : hosts_) names.push_back(h.name);
      fail(offset, "host", "unknown host '" + std::string(name) + "'",
           hostfile_detail::suggestion_hint(name, names, "known hosts"));
    }
    if (colon == std::string_view::npos) return {*index, std::nullopt};
    return {*index, parse_slots(item.substr(colon + 1), offset + colon + 1, hosts_[*index])};
  }

  std::vector<int> parse_slots(std::string_view list, std::size_t offset,
                               const HostEntry& host) const {
    std::vector<int> slots;
    std::size_t start = 0;
    while (start <= list.size()) {
      const std::size_t end = std::min(list.find(',', start), list.size());
      const std::string_view text = list.substr(start, end - start);
      const std::size_t column = offset + start;
      const auto number = hostfile_detail::parse_integer(text);
      if (!number) {
        fail(column, "slots",
             "expected a slot index of host '" + host.name + "', got '" + std::string(text) + "'");
      }
      if (*number < 0 || *number >= host.slots) {
        fail(column, "slots",
             "slot index " + std::string(text) + " is out of range for host '" + host.name + "'",
             "'" + host.name + "' has " + std::to_string(host.slots) + " slot(s): indices 0.." +
                 std::to_string(host.slots - 1));
      }
      const int slot = static_cast<int>(*number);
      if (!host.gpus.empty() && static_cast<std::size_t>(slot) >= host.gpus.size()) {
        fail(column, "gpus",
             "host '" + host.name + "' has no device id for slot " + std::to_string(slot),
             "its `gpus:` lists " + std::to_string(host.gpus.size()) + " device(s)");
      }
      if (std::find(slots.begin(), slots.end(), slot) != slots.end()) {
        fail(column, "slots",
             "slot index " + std::to_string(slot) + " of host '" + host.name + "' is listed twice");
      }
      slots.push_back(slot);
      start = end + 1;
    }
    std::sort(slots.begin(), slots.end());
    return slots;
  }
};

// Keeps the given slot indices; they pick `gpus` entries, or become the device ids.
void keep_slots(HostEntry& host, const std::vector<int>& kept) {
  std::vector<int> gpus;
  gpus.reserve(kept.size());
  for (int slot : kept) {
    gpus.push_back(host.gpus.empty() ? slot : host.gpus[static_cast<std::size_t>(slot)]);
  }
  host.gpus = std::move(gpus);
  host.slots = static_cast<int>(kept.size());
}

std::vector<HostEntry> include_hosts(std::vector<HostEntry> hosts,
                                     const std::vector<Selection>& selections) {
  std::vector<HostEntry> out;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    auto sel = std::find_if(selections.begin(), selections.end(),
                            [i](const Selection& s) { return s.host_index == i; });
    if (sel == selections.end()) continue;
    if (sel->slots) keep_slots(hosts[i], *sel->slots);
    out.push_back(std::move(hosts[i]));  // hostfile order, not the order of --include
  }
  return out;
}

std::vector<HostEntry> exclude_hosts(std::vector<HostEntry> hosts,
                                     const std::vector<Selection>& selections) {
  std::vector<HostEntry> out;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    auto sel = std::find_if(selections.begin(), selections.end(),
                            [i](const Selection& s) { return s.host_index == i; });
    if (sel == selections.end()) {
      out.push_back(std::move(hosts[i]));
      continue;
    }
    if (!sel->slots) continue;
    std::vector<int> kept;
    for (int slot = 0; slot < hosts[i].slots; ++slot) {
      if (!std::binary_search(sel->slots->begin(), sel->slots->end(), slot)) kept.push_back(slot);
    }
    if (kept.empty()) continue;
    keep_slots(hosts[i], kept);
    out.push_back(std::move(hosts[i]));
  }
  return out;
}

}  // namespace

Hostfile apply_node_filter(Hostfile hostfile, const NodeFilter& filter) {
  if (!filter.include.empty() && !filter.exclude.empty()) {
    throw InputError({"--include", 0, 0}, "include",
                     "--include and --exclude cannot be used together",
                     "select nodes with one of them");
  }
  const bool including = !filter.include.empty();
  if (including || !filter.exclude.empty()) {
    const std::string source = including ? "--include" : "--exclude";
    const auto selections =
        SpecParser(source, hostfile.hosts).parse(including ? filter.include : filter.exclude);
    hostfile.hosts = including ? include_hosts(std::move(hostfile.hosts), selections)
                               : exclude_hosts(std::move(hostfile.hosts), selections);
    if (hostfile.hosts.empty()) {
      throw InputError({source, 0, 0}, "hosts", "no hosts left after filtering",
                       "check " + source + " against the hostfile");
    }
  }
  if (filter.num_nodes < 0) {
    throw InputError({"--num-nodes", 0, 0}, "num_nodes", "must not be negative");
  }
  if (filter.num_nodes > 0) {
    const auto wanted = static_cast<std::size_t>(filter.num_nodes);
    if (hostfile.hosts.size() < wanted) {
      throw InputError({"--num-nodes", 0, 0}, "num_nodes",
                       "asked for " + std::to_string(wanted) + " nodes but only " +
                           std::to_string(hostfile.hosts.size()) + " are available",
                       "lower --num-nodes or add hosts");
    }
    hostfile.hosts.resize(wanted);
  }
  if (filter.nproc_per_node < 0) {
    throw InputError({filter.nproc_source, 0, 0}, "nproc_per_node", "must not be negative");
  }
  if (filter.nproc_per_node > 0) {
    const auto wanted = static_cast<std::size_t>(filter.nproc_per_node);
    for (auto& host : hostfile.hosts) {
      if (!host.gpus.empty() && host.gpus.size() < wanted) {
        throw InputError(
            {filter.nproc_source, 0, 0}, "nproc_per_node",
            "node '" + host.name + "' has " + std::to_string(host.gpus.size()) + " gpu(s) but " +
                std::to_string(wanted) + " processes per node were asked for",
            "lower " + filter.nproc_source + " or list more `gpus:` for '" + host.name + "'");
      }
      if (!host.gpus.empty()) host.gpus.resize(wanted);
      if (host.gpus.empty() && filter.device_ids) {
        for (int g = 0; g < filter.nproc_per_node; ++g) host.gpus.push_back(g);
      }
      host.slots = filter.nproc_per_node;
    }
  }
  return hostfile;
}

}  // namespace dlaunch
