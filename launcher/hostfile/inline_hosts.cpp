// Inline hosts, as in `-H a:4,b:2,[::1]:2` (mpirun's syntax; slots default to 1,
// and a host named again adds its slots: a,a,b is a:2,b).
#include <algorithm>
#include <unordered_map>

#include <climits>

#include "dlaunch/tunables.h"
#include "hostfile/hostfile.h"
#include "hostfile/hostfile_internal.h"

namespace dlaunch {

namespace {

constexpr const char* kSource = "-H";
constexpr const char* kInlineSyntaxHint = "write hosts as host[:slots], e.g. a:4,b:2,[::1]:2";

// Columns are 1-based offsets into the spec; the spec is a single line.
[[noreturn]] void fail(std::size_t offset, const std::string& field, const std::string& message,
                       const std::string& hint = kInlineSyntaxHint) {
  throw InputError({kSource, 1, static_cast<int>(offset) + 1}, field, message, hint);
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }

void check_host(std::string_view host, std::size_t offset) {
  if (const auto p = hostfile_detail::host_name_problem(host); !p.message.empty()) {
    fail(offset + p.where, "host", p.message);
  }
}

int parse_slots(std::string_view text, std::size_t offset) {
  const auto number = hostfile_detail::parse_integer(text);
  if (!number || *number <= 0 || *number > INT_MAX) {
    fail(offset, "slots", "expected a positive integer, got '" + std::string(text) + "'");
  }
  if (const auto over = hostfile_detail::slots_over_limit(*number); !over.empty()) {
    fail(offset, "slots", over);
  }
  return static_cast<int>(*number);
}

// One `host[:slots]` item that starts at `offset` in the spec.
HostEntry parse_item(std::string_view item, std::size_t offset) {
  HostEntry h;
  h.pos = {kSource, 1, static_cast<int>(offset) + 1};
  std::string_view host = item;
  std::string_view rest;  // ":N" or empty
  std::size_t rest_offset = offset + item.size();
  if (item.front() == '[') {
    const auto close = item.find(']');
    if (close == std::string_view::npos) fail(offset, "host", "missing ']' after IPv6 address");
    host = item.substr(1, close - 1);
    check_host(host, offset + 1);
    rest = item.substr(close + 1);
    rest_offset = offset + close + 1;
    if (!rest.empty() && rest.front() != ':') {
      fail(rest_offset, "host", "unexpected '" + std::string(rest) + "' after ']'");
    }
  } else {
    const auto colon = item.find(':');
    if (colon != std::string_view::npos && item.find(':', colon + 1) != std::string_view::npos) {
      fail(offset, "host", "IPv6 address '" + std::string(item) + "' must be in brackets",
           "write [::1]:2");
    }
    host = item.substr(0, colon);
    check_host(host, offset);
    if (colon != std::string_view::npos) {
      rest = item.substr(colon);
      rest_offset = offset + colon;
    }
  }
  if (!rest.empty()) h.slots = parse_slots(rest.substr(1), rest_offset + 1);
  h.host = std::string(host);
  h.name = h.host;
  h.transport = hostfile_detail::resolve_transport(std::nullopt, h.host);
  return h;
}

}  // namespace

Hostfile parse_inline_hosts(std::string_view spec) {
  Hostfile result;
  result.source = kSource;
  std::unordered_map<std::string, std::size_t> first_index;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t end = std::min(spec.find(',', start), spec.size());
    std::size_t first = start;
    std::size_t last = end;
    while (first < last && is_blank(spec[first])) ++first;
    while (last > first && is_blank(spec[last - 1])) --last;
    if (first == last) fail(first, "host", "empty host entry");
    if (result.hosts.size() >= static_cast<std::size_t>(limits::kMaxNodesPerJob)) {
      fail(first, "host", hostfile_detail::too_many_hosts(), hostfile_detail::kFewerHostsHint);
    }
    HostEntry h = parse_item(spec.substr(first, last - first), first);
    auto [it, inserted] = first_index.emplace(h.name, result.hosts.size());
    if (!inserted) {
      // As mpirun's -H a,a,b: a host named again has the slots of both.
      HostEntry& earlier = result.hosts[it->second];
      const long long sum = static_cast<long long>(earlier.slots) + h.slots;
      if (const auto over = hostfile_detail::slots_over_limit(sum); !over.empty()) {
        fail(first, "slots", "'" + h.name + "' named again: " + over);
      }
      earlier.slots = static_cast<int>(sum);
      start = end + 1;
      continue;
    }
    result.hosts.push_back(std::move(h));
    start = end + 1;
  }
  return result;
}

}  // namespace dlaunch
