// InputError, local-host detection, and the file / -H entry points.
#include "hostfile/hostfile.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "dlaunch/text.h"
#include "hostfile/hostfile_internal.h"

namespace dlaunch {

namespace {

std::string format_input_error(const SourcePos& pos, const std::string& field,
                               const std::string& message, const std::string& hint) {
  std::string out = pos.source;
  if (pos.line > 0) {
    out += ':' + std::to_string(pos.line);
    if (pos.column > 0) out += ':' + std::to_string(pos.column);
  }
  if (!out.empty()) out += ": ";
  if (!field.empty()) out += field + ": ";
  out += message;
  if (!hint.empty()) out += " (hint: " + hint + ")";
  return printable(out);  // user input may hold control bytes: never to the terminal raw
}

std::string to_lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool is_loopback_ipv4(std::string_view host) {
  int parts = 0;
  std::size_t start = 0;
  while (start <= host.size()) {
    const std::size_t dot = std::min(host.find('.', start), host.size());
    const std::string_view part = host.substr(start, dot - start);
    const auto value = hostfile_detail::parse_integer(part);
    const bool digits_only =
        std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
    if (!value || !digits_only || part.size() > 3 || *value > 255) return false;
    if (parts == 0 && *value != 127) return false;
    ++parts;
    start = dot + 1;
  }
  return parts == 4;
}

}  // namespace

InputError::InputError(SourcePos pos, std::string field, std::string message, std::string hint)
    : Error(ErrorKind::kInput, format_input_error(pos, field, message, hint)),
      pos_(std::move(pos)),
      field_(std::move(field)),
      message_(std::move(message)),
      hint_(std::move(hint)) {}

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::kLocal:
      return "local";
    case Transport::kSsh:
      return "ssh";
    case Transport::kSlurm:
      return "slurm";
    case Transport::kSge:
      return "sge";
    case Transport::kLsf:
      return "lsf";
    case Transport::kFlux:
      return "flux";
  }
  return "ssh";
}

bool is_local_host(std::string_view host) {
  const std::string lower = to_lower(host);
  return lower == "localhost" || lower == "localhost.localdomain" || lower == "::1" ||
         is_loopback_ipv4(lower);
}

bool looks_like_yaml(std::string_view text) {
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const std::size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || line[first] == '#') continue;
    line.remove_prefix(first);
    // Documents, directives, block sequences and flow collections.
    if (line.starts_with("---") || line.starts_with('%') || line == "-" || line.starts_with("- ") ||
        line.starts_with("-\t") || line.starts_with('{')) {
      return true;
    }
    // '[' opens a flow sequence, unless it is an IPv6 literal: [::1] or [fe80::1].
    if (line.starts_with('[')) {
      const std::size_t close = line.find(']');
      const std::string_view inside =
          line.substr(1, close == std::string_view::npos ? 0 : close - 1);
      return close == std::string_view::npos || inside.find(':') == std::string_view::npos ||
             inside.find_first_not_of("0123456789abcdefABCDEF:.%") != std::string_view::npos;
    }
    // A mapping key: `name:` followed by a blank or the end of the line.
    std::size_t k = 0;
    while (k < line.size() &&
           (std::isalnum(static_cast<unsigned char>(line[k])) != 0 || line[k] == '_' ||
            line[k] == '-' || line[k] == '"' || line[k] == '\'')) {
      ++k;
    }
    return k > 0 && k < line.size() && line[k] == ':' &&
           (k + 1 == line.size() || line[k + 1] == ' ' || line[k + 1] == '\t');
  }
  return false;
}

Hostfile parse_hostfile_file(const std::string& path) {
  std::string text = read_input_file(path, "hostfile");
  // A UTF-8 byte order mark (some editors write one) is no part of either format.
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  const std::string lower = to_lower(path);
  if (hostfile_detail::ends_with_any(lower, {".yaml", ".yml"})) {
    return parse_yaml_hostfile(text, path);
  }
  // The plain format's own errors, at the field, whenever the file is not
  // YAML: "1:11: slots: expected a positive integer", not a YAML complaint
  // about line 1 as a whole.
  return looks_like_yaml(text) ? parse_yaml_hostfile(text, path) : parse_plain_hostfile(text, path);
}

Hostfile parse_hosts_argument(const std::string& value) {
  std::error_code ec;
  if (!value.empty() && std::filesystem::exists(value, ec)) return parse_hostfile_file(value);
  const bool names_a_file = value.find('/') != std::string::npos ||
                            hostfile_detail::ends_with_any(
                                to_lower(value), {".yaml", ".yml", ".txt", ".hosts", ".hostfile"});
  // A path-like value that does not exist is a typo, not an inline host list.
  if (names_a_file) return parse_hostfile_file(value);
  return parse_inline_hosts(value);
}

}  // namespace dlaunch
