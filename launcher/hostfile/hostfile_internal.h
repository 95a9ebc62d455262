// Helpers shared by the hostfile parsers; not part of the public interface.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hostfile/hostfile.h"

namespace dlaunch::hostfile_detail {

// Levenshtein distance, used for "did you mean" hints.
int edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` within distance 2, or empty when none is.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// "did you mean 'x'?" when a candidate is close, else "<label>: a, b, c".
std::string suggestion_hint(std::string_view word, const std::vector<std::string>& candidates,
                            std::string_view label);

std::string join(const std::vector<std::string>& items, std::string_view sep);

// A whole-string decimal integer ("12", "-3"); nullopt for anything else or overflow.
std::optional<long long> parse_integer(std::string_view text);

// Index of the first character not allowed in a plain or inline host token, or npos.
std::size_t find_bad_host_char(std::string_view host);

// Index of the first character not allowed in a user name, or npos.
std::size_t find_bad_user_char(std::string_view user);

// What is wrong with a host name or address (empty when nothing): too long
// for DNS (253), a character no host name has (where: its index), or a
// leading '-' (ssh would take it for an option).
struct NameProblem {
  std::string message;
  std::size_t where = 0;
};
NameProblem host_name_problem(std::string_view host);
// The same for a login name (at most 256 bytes, POSIX's LOGIN_NAME_MAX).
NameProblem user_name_problem(std::string_view user);

Transport resolve_transport(std::optional<Transport> explicit_transport, std::string_view host);

bool ends_with_any(std::string_view text, const std::vector<std::string_view>& suffixes);

// Input limits (dlaunch/tunables.h, limits::): the message for a slots value
// over the per-node limit, or empty when it is within; and for one host more
// than a job may have.
std::string slots_over_limit(long long slots);
std::string too_many_hosts();
inline constexpr const char* kFewerHostsHint = "split the job, or use --num-nodes / --include";

// The value of `name` in an environment of NAME=value entries; nullopt when
// it is not there.
std::optional<std::string> lookup(const std::vector<std::string>& env, std::string_view name);

// A host name up to its first '.', in lower case: how Slurm and the
// schedulers' node lists name a host.
std::string short_lower(std::string_view name);

}  // namespace dlaunch::hostfile_detail
