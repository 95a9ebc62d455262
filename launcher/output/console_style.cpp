#include "output/console_style.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "hostfile/hostfile.h"

namespace dlaunch {

namespace {

[[noreturn]] void bad_ranks(std::string_view spec, const std::string& why) {
  throw InputError({"--ranks"}, "", "'" + std::string(spec) + "': " + why,
                   "give ranks and ranges such as 0,3-5");
}

int parse_rank(std::string_view spec, std::string_view text) {
  int v = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0) {
    bad_ranks(spec, std::string("'").append(text).append("' is not a rank"));
  }
  return v;
}

}  // namespace

std::vector<int> parse_rank_list(std::string_view spec, int world_size) {
  std::vector<int> out;
  std::string_view rest = spec;
  if (rest.empty()) bad_ranks(spec, "no ranks");
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const auto dash = item.find('-');
    const int lo = parse_rank(spec, item.substr(0, dash));
    const int hi = dash == std::string_view::npos ? lo : parse_rank(spec, item.substr(dash + 1));
    if (hi < lo) bad_ranks(spec, "the range " + std::string(item) + " runs backwards");
    if (hi >= world_size) {
      throw InputError({"--ranks"}, "",
                       fmt::format("rank {} is not in this job (ranks 0-{})", hi, world_size - 1));
    }
    for (int r = lo; r <= hi; ++r) out.push_back(r);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

ColorMode parse_color_mode(std::string_view word) {
  if (word == "auto") return ColorMode::kAuto;
  if (word == "always") return ColorMode::kAlways;
  if (word == "never") return ColorMode::kNever;
  throw InputError({"--color"}, "", "'" + std::string(word) + "' is not a colour mode",
                   "use auto, always or never");
}

bool color_enabled(ColorMode mode, bool is_terminal, const char* no_color, const char* term) {
  switch (mode) {
    case ColorMode::kAlways:
      return true;
    case ColorMode::kNever:
      return false;
    case ColorMode::kAuto:
      break;
  }
  if (no_color != nullptr && *no_color != '\0') return false;
  if (term != nullptr && std::strcmp(term, "dumb") == 0) return false;
  return is_terminal;
}

std::string_view rank_color(int rank) {
  // No red: it reads as an error. Normal, then bright variants.
  static constexpr std::array<std::string_view, 10> kColors = {
      "\033[36m", "\033[32m", "\033[33m", "\033[35m", "\033[34m",
      "\033[96m", "\033[92m", "\033[93m", "\033[95m", "\033[94m"};
  return kColors[static_cast<std::size_t>(rank < 0 ? 0 : rank) % kColors.size()];
}

std::string format_timestamp(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const auto secs = static_cast<std::time_t>(ms.count() / 1000);
  std::tm tm{};
  ::localtime_r(&secs, &tm);
  return fmt::format("{:02}:{:02}:{:02}.{:03} ", tm.tm_hour, tm.tm_min, tm.tm_sec,
                     static_cast<int>(ms.count() % 1000));
}

}  // namespace dlaunch
