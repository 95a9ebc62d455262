// Small string helpers behind the parsers' validation and hints.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <numeric>

#include "dlaunch/tunables.h"
#include "hostfile/hostfile_internal.h"

namespace dlaunch::hostfile_detail {

namespace {
bool is_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
}  // namespace

int edit_distance(std::string_view a, std::string_view b) {
  // One row of the DP table is enough: row[j] = distance(a[0..i), b[0..j)).
  std::vector<int> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      const int substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  constexpr int kMaxDistance = 2;
  std::string best;
  int best_distance = kMaxDistance + 1;
  for (const auto& candidate : candidates) {
    const int distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string suggestion_hint(std::string_view word, const std::vector<std::string>& candidates,
                            std::string_view label) {
  if (auto best = closest_match(word, candidates); !best.empty()) {
    return "did you mean '" + best + "'?";
  }
  return std::string(label) + ": " + join(candidates, ", ");
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

std::optional<long long> parse_integer(std::string_view text) {
  if (text.empty() || text.front() == '+') return std::nullopt;
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::size_t find_bad_host_char(std::string_view host) {
  // DNS names, IPv4, and IPv6 with an optional %zone.
  auto it = std::find_if(host.begin(), host.end(), [](char c) {
    return !(is_alnum(c) || c == '.' || c == '-' || c == '_' || c == ':' || c == '%');
  });
  return it == host.end() ? std::string_view::npos : static_cast<std::size_t>(it - host.begin());
}

std::size_t find_bad_user_char(std::string_view user) {
  auto it = std::find_if(user.begin(), user.end(),
                         [](char c) { return !(is_alnum(c) || c == '.' || c == '-' || c == '_'); });
  return it == user.end() ? std::string_view::npos : static_cast<std::size_t>(it - user.begin());
}

Transport resolve_transport(std::optional<Transport> explicit_transport, std::string_view host) {
  if (explicit_transport) return *explicit_transport;
  return is_local_host(host) ? Transport::kLocal : Transport::kSsh;
}

bool ends_with_any(std::string_view text, const std::vector<std::string_view>& suffixes) {
  return std::any_of(suffixes.begin(), suffixes.end(),
                     [text](std::string_view suffix) { return text.ends_with(suffix); });
}

NameProblem host_name_problem(std::string_view host) {
  if (host.empty()) return {"missing host name", 0};
  if (host.size() > 253) {
    return {"host name is " + std::to_string(host.size()) + " bytes, longer than DNS allows (253)",
            253};
  }
  if (host.front() == '-') return {"host name starts with '-'", 0};
  if (const auto bad = find_bad_host_char(host); bad != std::string_view::npos) {
    const auto c = static_cast<unsigned char>(host[bad]);
    return {c < 0x20 || c == 0x7f || c >= 0x80
                ? "unexpected byte 0x" + std::string(1, "0123456789abcdef"[c >> 4]) +
                      std::string(1, "0123456789abcdef"[c & 15]) + " in host name"
                : "unexpected character '" + std::string(1, host[bad]) + "' in host name",
            bad};
  }
  return {};
}

NameProblem user_name_problem(std::string_view user) {
  if (user.empty()) return {"empty user name", 0};
  if (user.size() > 256) {
    return {"user name is " + std::to_string(user.size()) + " bytes, longer than 256", 256};
  }
  if (user.front() == '-') return {"user name starts with '-'", 0};
  if (const auto bad = find_bad_user_char(user); bad != std::string_view::npos) {
    const auto c = static_cast<unsigned char>(user[bad]);
    return {c < 0x20 || c == 0x7f || c >= 0x80
                ? "unexpected byte in user name"
                : "unexpected character '" + std::string(1, user[bad]) + "' in user name",
            bad};
  }
  return {};
}

std::string slots_over_limit(long long slots) {
  if (slots <= limits::kMaxRanksPerNode) return {};
  return std::to_string(slots) + " is over the limit of " +
         std::to_string(limits::kMaxRanksPerNode) + " ranks per node";
}

std::string too_many_hosts() {
  return "more than " + std::to_string(limits::kMaxNodesPerJob) + " hosts, the limit per job";
}

std::optional<std::string> lookup(const std::vector<std::string>& env, std::string_view name) {
  for (const auto& e : env) {
    if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=') {
      return e.substr(name.size() + 1);
    }
  }
  return std::nullopt;
}

std::string short_lower(std::string_view name) {
  std::string s(name.substr(0, name.find('.')));
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace dlaunch::hostfile_detail
