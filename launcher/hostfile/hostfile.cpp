// InputError, local-host detection, and the file / -H entry points.
#include "hostfile/hostfile.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

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
  return out;
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

bool is_local_host(std::string_view host) {
  const std::string lower = to_lower(host);
  return lower == "localhost" || lower == "localhost.localdomain" || lower == "::1" ||
         is_loopback_ipv4(lower);
}

Hostfile parse_hostfile_file(const std::string& path) {
  const std::string text = read_input_file(path, "hostfile");
  const std::string lower = to_lower(path);
  if (hostfile_detail::ends_with_any(lower, {".yaml", ".yml"})) {
    return parse_yaml_hostfile(text, path);
  }
  return looks_like_plain(text) ? parse_plain_hostfile(text, path)
                                : parse_yaml_hostfile(text, path);
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
