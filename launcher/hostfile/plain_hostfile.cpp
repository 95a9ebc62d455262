// The plain hostfile of mpirun and DeepSpeed: `[user@]host [slots=N] [max_slots=N]` per line.
#include <optional>
#include <unordered_map>

#include <climits>

#include "dlaunch/tunables.h"
#include "hostfile/hostfile.h"
#include "hostfile/hostfile_internal.h"

namespace dlaunch {

namespace {

using hostfile_detail::find_bad_host_char;
using hostfile_detail::find_bad_user_char;

constexpr const char* kLineHint = "plain hostfile lines read `[user@]host [slots=N] [max_slots=N]`";
const std::vector<std::string> kPlainKeys{"slots", "max_slots"};

struct LineError {
  int column = 0;
  std::string field;
  std::string message;
  std::string hint;
};

struct PlainLine {
  bool blank = true;
  std::string user;
  std::string host;
  int column = 0;  // of the first token
  int slots = 1;
};

struct Token {
  std::string_view text;
  int column;  // 1-based
};

std::vector<Token> split_tokens(std::string_view line) {
  std::vector<Token> tokens;
  std::size_t i = 0;
  while (i < line.size()) {
    if (line[i] == ' ' || line[i] == '\t') {
      ++i;
      continue;
    }
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    tokens.push_back({line.substr(start, i - start), static_cast<int>(start) + 1});
  }
  return tokens;
}

std::optional<LineError> parse_target(const Token& token, PlainLine& out) {
  std::string_view text = token.text;
  int host_column = token.column;
  if (const auto at = text.find('@'); at != std::string_view::npos) {
    const std::string_view user = text.substr(0, at);
    if (user.empty()) {
      return LineError{token.column, "user", "empty user name before '@'", kLineHint};
    }
    if (const auto p = hostfile_detail::user_name_problem(user); !p.message.empty()) {
      return LineError{token.column + static_cast<int>(p.where), "user", p.message, kLineHint};
    }
    out.user = std::string(user);
    text.remove_prefix(at + 1);
    host_column += static_cast<int>(at) + 1;
  }
  if (text.empty()) return LineError{host_column, "host", "missing host name after '@'", kLineHint};
  if (const auto p = hostfile_detail::host_name_problem(text); !p.message.empty()) {
    return LineError{host_column + static_cast<int>(p.where), "host", p.message, kLineHint};
  }
  // A single ':' is `host:N` (the -H syntax) or YAML, not an IPv6 address.
  if (const auto colon = text.find(':');
      colon != std::string_view::npos && text.find(':', colon + 1) == std::string_view::npos) {
    return LineError{host_column + static_cast<int>(colon), "host", "unexpected ':' in host name",
                     "give slots as `host slots=N`; `host:N` is the -H syntax"};
  }
  out.host = std::string(text);
  out.column = token.column;
  return std::nullopt;
}

std::optional<LineError> parse_line(std::string_view line, PlainLine& out) {
  line = line.substr(0, line.find('#'));
  const std::vector<Token> tokens = split_tokens(line);
  if (tokens.empty()) return std::nullopt;
  out.blank = false;
  if (auto error = parse_target(tokens.front(), out)) return error;

  std::optional<int> slots;
  std::optional<int> max_slots;
  int max_slots_column = 0;
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    const Token& token = tokens[i];
    const auto eq = token.text.find('=');
    if (eq == std::string_view::npos) {
      return LineError{token.column, "host", "unexpected '" + std::string(token.text) + "'",
                       kLineHint};
    }
    const std::string key(token.text.substr(0, eq));
    const int value_column = token.column + static_cast<int>(eq) + 1;
    if (key != "slots" && key != "max_slots") {
      return LineError{token.column, key, "unknown key '" + key + "'",
                       hostfile_detail::suggestion_hint(key, kPlainKeys, "valid keys")};
    }
    std::optional<int>& target = key == "slots" ? slots : max_slots;
    if (target) return LineError{token.column, key, key + " given twice", kLineHint};
    const std::string_view value = token.text.substr(eq + 1);
    const auto number = hostfile_detail::parse_integer(value);
    if (!number || *number <= 0 || *number > INT_MAX) {
      return LineError{value_column, key,
                       "expected a positive integer, got '" + std::string(value) + "'",
                       "write `" + key + "=4`"};
    }
    if (key == "slots") {
      if (const auto over = hostfile_detail::slots_over_limit(*number); !over.empty()) {
        return LineError{value_column, key, over, "write fewer slots"};
      }
    }
    target = static_cast<int>(*number);
    if (key == "max_slots") max_slots_column = value_column;
  }
  // mpirun(1): a line with max_slots and no slots has max_slots slots.
  if (!slots && max_slots) {
    if (const auto over = hostfile_detail::slots_over_limit(*max_slots); !over.empty()) {
      return LineError{max_slots_column, "max_slots", over, "write fewer slots"};
    }
  }
  out.slots = slots.value_or(max_slots.value_or(1));
  // max_slots only limits oversubscription, which dlaunch never does; it is checked, not used.
  if (max_slots && *max_slots < out.slots) {
    return LineError{max_slots_column, "max_slots",
                     "max_slots (" + std::to_string(*max_slots) + ") is less than slots (" +
                         std::to_string(out.slots) + ")",
                     "raise max_slots or lower slots"};
  }
  return std::nullopt;
}

// Calls fn(line_number, line) for each line, without the '\n' or a trailing '\r'.
template <typename Fn>
void for_each_line(std::string_view text, Fn fn) {
  int number = 0;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    if (line.ends_with('\r')) line.remove_suffix(1);
    fn(++number, line);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
}

}  // namespace

bool looks_like_plain(std::string_view text) {
  bool ok = true;
  bool any_host = false;
  for_each_line(text, [&](int, std::string_view line) {
    PlainLine parsed;
    if (!ok || parse_line(line, parsed)) {
      ok = false;
      return;
    }
    any_host = any_host || !parsed.blank;
  });
  return ok && any_host;
}

Hostfile parse_plain_hostfile(std::string_view text, const std::string& source) {
  Hostfile result;
  result.source = source;
  std::unordered_map<std::string, std::size_t> first_index;
  for_each_line(text, [&](int number, std::string_view line) {
    PlainLine parsed;
    if (auto error = parse_line(line, parsed)) {
      throw InputError({source, number, error->column}, error->field, error->message, error->hint);
    }
    if (parsed.blank) return;
    if (result.hosts.size() >= static_cast<std::size_t>(limits::kMaxNodesPerJob)) {
      throw InputError({source, number, parsed.column}, "host", hostfile_detail::too_many_hosts(),
                       hostfile_detail::kFewerHostsHint);
    }
    HostEntry h;
    h.name = parsed.host;
    h.host = parsed.host;
    h.user = parsed.user;
    h.slots = parsed.slots;
    h.transport = hostfile_detail::resolve_transport(std::nullopt, h.host);
    h.pos = {source, number, parsed.column};
    auto [it, inserted] = first_index.emplace(h.name, result.hosts.size());
    if (!inserted) {
      throw InputError(h.pos, "host",
                       "duplicate host '" + h.name + "' (first defined at line " +
                           std::to_string(result.hosts[it->second].pos.line) + ")",
                       "each host may appear once");
    }
    result.hosts.push_back(std::move(h));
  });
  if (result.hosts.empty()) {
    throw InputError({source, 0, 0}, "hosts", "no hosts defined",
                     "list one host per line: `[user@]host [slots=N]`");
  }
  return result;
}

}  // namespace dlaunch
