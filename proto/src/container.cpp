#include "dlaunch/proto/container.h"

namespace dlaunch::proto {

namespace {

bool absolute_clean(std::string_view p) {
  if (p.empty() || p.front() != '/') return false;
  // No "." or ".." component: a mount lands where it says.
  std::size_t start = 1;
  while (start <= p.size()) {
    auto end = p.find('/', start);
    if (end == std::string_view::npos) end = p.size();
    const auto part = p.substr(start, end - start);
    if (part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

Result<ContainerMount> parse_container_mount(std::string_view text) {
  using R = Result<ContainerMount>;
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (;;) {
    const auto colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  if (parts.size() > 3) {
    return R::failure("'" + std::string(text) + "' has more than SRC:DST:FLAGS", ErrorKind::kInput);
  }
  ContainerMount m;
  m.source = parts[0];
  m.target = parts.size() > 1 ? parts[1] : parts[0];
  if (parts.size() == 3) {
    if (parts[2] == "ro") {
      m.read_only = true;
    } else if (parts[2] != "rw") {
      return R::failure(
          "'" + std::string(text) + "': flag '" + std::string(parts[2]) + "' is neither ro nor rw",
          ErrorKind::kInput);
    }
  }
  if (!absolute_clean(m.source)) {
    return R::failure("'" + std::string(text) + "': the source '" + m.source +
                          "' is not an absolute path without . or ..",
                      ErrorKind::kInput);
  }
  if (!absolute_clean(m.target)) {
    return R::failure("'" + std::string(text) + "': the destination '" + m.target +
                          "' is not an absolute path without . or ..",
                      ErrorKind::kInput);
  }
  return m;
}

Result<std::vector<std::string>> split_container_list(std::string_view text,
                                                      std::string_view what) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto comma = text.find(',', start);
    const auto item = text.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (item.empty()) {
      return Result<std::vector<std::string>>::failure(
          "'" + std::string(text) + "' has an empty " + std::string(what), ErrorKind::kInput);
    }
    out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace dlaunch::proto
