// How worker output looks on dlaunch's console: which ranks are shown
// (--ranks), a time in front (--timestamps), coloured prefixes (--color).
// Pure functions, so they can be tested without a terminal.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace dlaunch {

// --tag-output's shape: each line's prefix names the rank ("[3] "), the node
// and the rank, or nothing.
enum class PrefixMode { kRank, kHostRank, kNone };

// "0,3-5" -> {0, 3, 4, 5}, sorted and without duplicates. Throws InputError
// (source "--ranks") for anything else, or a rank >= world_size.
std::vector<int> parse_rank_list(std::string_view spec, int world_size);

enum class ColorMode { kAuto, kAlways, kNever };

// --color=auto|always|never; throws InputError for another word.
ColorMode parse_color_mode(std::string_view word);

// auto: only on a terminal, and neither NO_COLOR (https://no-color.org: set
// and not empty) nor TERM=dumb. always and never mean what they say.
// no_color and term are the variables' values, nullptr when unset.
bool color_enabled(ColorMode mode, bool is_terminal, const char* no_color, const char* term);

// The ANSI colour sequence for a rank's prefix (one of ten, by rank), and the reset.
std::string_view rank_color(int rank);
inline constexpr std::string_view kColorReset = "\033[0m";
inline constexpr std::string_view kColorDim = "\033[2m";

// "13:04:05.123 ": local wall time with milliseconds, as --timestamps shows it.
std::string format_timestamp(std::chrono::system_clock::time_point t);

}  // namespace dlaunch
