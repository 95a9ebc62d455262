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

Result<std::uint64_t> parse_shm_size(std::string_view text) {
  using R = Result<std::uint64_t>;
  const std::string shown = "'" + std::string(text) + "'";
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 13 || text.size() > digits + 1) {
    return R::failure(shown + " is not a size: write a number with b, k, m or g, e.g. 16g");
  }
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < digits; ++i) n = n * 10 + static_cast<std::uint64_t>(text[i] - '0');
  int shift = 0;
  if (text.size() > digits) {
    switch (text[digits]) {
      case 'b':
      case 'B':
        break;
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      default:
        return R::failure(shown + " has an unknown unit: b, k, m or g, e.g. 16g");
    }
  }
  constexpr std::uint64_t kMin = 1ULL << 20;
  constexpr std::uint64_t kMax = 1ULL << 40;
  if (n > (kMax >> shift) || (n << shift) < kMin) {
    return R::failure(shown + " is outside 1m..1024g");
  }
  return n << shift;
}

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
