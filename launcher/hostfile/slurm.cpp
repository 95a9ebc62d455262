// Slurm hostlists, task layouts and the allocation's Hostfile (see slurm.h).
#include "hostfile/slurm.h"

#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "hostfile/hostfile_internal.h"

namespace dlaunch {

namespace {

using hostfile_detail::lookup;
using hostfile_detail::short_lower;

constexpr const char* kHostlistHint = "Slurm hostlist syntax: node[01-04,07],gpu-a[1-2]";
constexpr const char* kTasksHint = "Slurm task syntax: 2(x3),1";
constexpr std::size_t kMaxDigits = 18;  // fits unsigned long long with room to spare

[[noreturn]] void fail_var(const std::string& var, std::string_view text, std::size_t index,
                           const std::string& message, const std::string& hint) {
  throw InputError({var, 1, static_cast<int>(index) + 1}, "",
                   message + " in '" + std::string(text) + "'", hint);
}

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
}

std::string describe_char(char c) {
  if (std::isprint(static_cast<unsigned char>(c)) != 0) return std::string("'") + c + "'";
  return "byte " + std::to_string(static_cast<unsigned char>(c));
}

// Digits at text[i..): advances i past them; returns them (maybe empty).
std::string_view take_digits(std::string_view text, std::size_t& i, std::size_t end) {
  const std::size_t start = i;
  while (i < end && is_digit(text[i])) ++i;
  return text.substr(start, i - start);
}

unsigned long long to_number(std::string_view digits) {
  unsigned long long v = 0;
  for (char c : digits) v = v * 10 + static_cast<unsigned>(c - '0');
  return v;
}

std::string padded(unsigned long long v, std::size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// The values of the bracket group text[open] == '[' .. text[close] == ']'.
std::vector<std::string> expand_group(std::string_view text, std::size_t open, std::size_t close,
                                      const std::string& var) {
  std::vector<std::string> values;
  std::size_t i = open + 1;
  if (i == close) fail_var(var, text, open, "empty brackets", kHostlistHint);
  while (true) {
    const std::size_t part = i;
    const std::string_view lo = take_digits(text, i, close);
    if (lo.empty()) {
      fail_var(var, text, i,
               i == close || text[i] == ',' ? std::string("empty range")
                                            : "expected a number, got " + describe_char(text[i]),
               kHostlistHint);
    }
    std::string_view hi = lo;
    if (i < close && text[i] == '-') {
      ++i;
      hi = take_digits(text, i, close);
      if (hi.empty()) {
        fail_var(var, text, i,
                 "expected a number after '-', got " +
                     (i == close ? std::string("']'") : describe_char(text[i])),
                 kHostlistHint);
      }
    }
    if (i < close && text[i] != ',') {
      fail_var(var, text, i, "unexpected " + describe_char(text[i]) + " in a range", kHostlistHint);
    }
    if (lo.size() > kMaxDigits || hi.size() > kMaxDigits) {
      fail_var(var, text, part, "number too long", kHostlistHint);
    }
    const unsigned long long a = to_number(lo);
    const unsigned long long b = to_number(hi);
    if (b < a) {
      fail_var(var, text, part, "decreasing range " + std::string(lo) + "-" + std::string(hi),
               "write the lower bound first");
    }
    if (b - a >= kMaxHostlistHosts || values.size() + (b - a + 1) > kMaxHostlistHosts) {
      fail_var(var, text, part,
               "range too large (more than " + std::to_string(kMaxHostlistHosts) + " hosts)",
               kHostlistHint);
    }
    for (unsigned long long v = a; v <= b; ++v) values.push_back(padded(v, lo.size()));
    if (i == close) break;
    ++i;  // ','
    if (i == close) fail_var(var, text, i, "empty range after ','", kHostlistHint);
  }
  return values;
}

int positive_int(std::string_view text, const std::string& var, bool zero_ok = false) {
  std::size_t i = 0;
  const std::string_view digits = take_digits(text, i, text.size());
  if (digits.empty() || i != text.size()) {
    fail_var(var, text, digits.empty() ? 0 : i, "expected a whole number", "");
  }
  if (digits.size() > 9) fail_var(var, text, 0, "number too large", "");
  const auto v = static_cast<int>(to_number(digits));
  if (v == 0 && !zero_ok) fail_var(var, text, 0, "expected a positive number", "");
  return v;
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view text, const std::string& var) {
  if (text.empty()) fail_var(var, text, 0, "empty host list", kHostlistHint);
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  std::size_t i = 0;
  while (true) {
    const std::size_t item = i;
    // An item is literal text and bracket groups; `parts` holds each one's
    // alternatives (a literal has exactly one).
    std::vector<std::vector<std::string>> parts;
    std::string literal;
    while (i < text.size() && text[i] != ',') {
      const char c = text[i];
      if (c == '[') {
        const std::size_t close = text.find_first_of("[]", i + 1);
        if (close == std::string_view::npos) fail_var(var, text, i, "unclosed '['", kHostlistHint);
        if (text[close] == '[') fail_var(var, text, close, "'[' inside brackets", kHostlistHint);
        parts.push_back({literal});
        literal.clear();
        parts.push_back(expand_group(text, i, close, var));
        i = close + 1;
      } else if (c == ']') {
        fail_var(var, text, i, "']' without '['", kHostlistHint);
      } else if (!is_name_char(c)) {
        fail_var(var, text, i, describe_char(c) + " is not allowed in a host name", kHostlistHint);
      } else {
        literal += c;
        ++i;
      }
    }
    if (i == item) {
      fail_var(var, text, i, i == 0 ? "empty host name before ','" : "empty host name after ','",
               kHostlistHint);
    }
    parts.push_back({literal});
    std::size_t combinations = 1;
    for (const auto& p : parts) {
      combinations *= p.size();
      if (combinations + out.size() > kMaxHostlistHosts) {
        fail_var(var, text, item, "more than " + std::to_string(kMaxHostlistHosts) + " hosts",
                 kHostlistHint);
      }
    }
    // Odometer over the groups, the last one turning fastest.
    std::vector<std::size_t> pick(parts.size(), 0);
    for (std::size_t n = 0; n < combinations; ++n) {
      std::string name;
      for (std::size_t k = 0; k < parts.size(); ++k) name += parts[k][pick[k]];
      if (!seen.insert(name).second) {
        fail_var(var, text, item, "host '" + name + "' listed twice", "list every node once");
      }
      out.push_back(std::move(name));
      for (std::size_t k = parts.size(); k-- > 0;) {
        if (++pick[k] < parts[k].size()) break;
        pick[k] = 0;
      }
    }
    if (i == text.size()) break;
    ++i;  // ','
    if (i == text.size()) fail_var(var, text, i - 1, "trailing ','", kHostlistHint);
  }
  return out;
}

std::vector<int> parse_tasks_per_node(std::string_view text, const std::string& var) {
  if (text.empty()) fail_var(var, text, 0, "empty task list", kTasksHint);
  std::vector<int> out;
  std::size_t i = 0;
  while (true) {
    const std::size_t start = i;
    const std::string_view count = take_digits(text, i, text.size());
    if (count.empty()) {
      fail_var(var, text, i,
               i == text.size() ? std::string("expected a task count at the end")
                                : "expected a task count, got " + describe_char(text[i]),
               kTasksHint);
    }
    if (count.size() > 9 || to_number(count) == 0) {
      fail_var(var, text, start, "task count must be 1 to 999999999", kTasksHint);
    }
    unsigned long long repeat = 1;
    if (i < text.size() && text[i] == '(') {
      if (i + 1 >= text.size() || text[i + 1] != 'x') {
        fail_var(var, text, i + 1, "expected '(xN)' after a task count", kTasksHint);
      }
      i += 2;
      const std::size_t rstart = i;
      const std::string_view reps = take_digits(text, i, text.size());
      if (reps.empty()) fail_var(var, text, i, "expected a repeat count after '(x'", kTasksHint);
      if (reps.size() > 9 || to_number(reps) == 0) {
        fail_var(var, text, rstart, "repeat count must be 1 to 999999999", kTasksHint);
      }
      if (i >= text.size() || text[i] != ')') fail_var(var, text, i, "expected ')'", kTasksHint);
      ++i;
      repeat = to_number(reps);
    }
    if (out.size() + repeat > kMaxHostlistHosts) {
      fail_var(var, text, start, "more than " + std::to_string(kMaxHostlistHosts) + " nodes",
               kTasksHint);
    }
    out.insert(out.end(), static_cast<std::size_t>(repeat), static_cast<int>(to_number(count)));
    if (i == text.size()) break;
    if (text[i] != ',') fail_var(var, text, i, "unexpected " + describe_char(text[i]), kTasksHint);
    ++i;
  }
  return out;
}

int parse_gpu_count(std::string_view text, const std::string& var) {
  constexpr const char* kHint = "expected [type:]count[,[type:]count...], e.g. 4 or a100:4";
  if (text.empty()) fail_var(var, text, 0, "empty GPU count", kHint);
  long long total = 0;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, end - start);
    const std::size_t colon = item.rfind(':');
    const std::size_t at = colon == std::string_view::npos ? start : start + colon + 1;
    std::size_t i = at;
    const std::string_view digits = take_digits(text, i, end);
    if (digits.empty() || i != end || digits.size() > 6) {
      fail_var(var, text, digits.empty() ? at : i, "expected a GPU count", kHint);
    }
    total += static_cast<long long>(to_number(digits));
    if (end == text.size()) break;
    start = end + 1;
  }
  if (total > 1000000) fail_var(var, text, 0, "GPU count too large", kHint);
  return static_cast<int>(total);
}

std::optional<Hostfile> slurm_allocation_hostfile(const std::vector<std::string>& env,
                                                  std::string_view this_host,
                                                  std::string* slots_from) {
  std::string var = "SLURM_JOB_NODELIST";
  auto nodelist = lookup(env, var);
  if (!nodelist || nodelist->empty()) {
    var = "SLURM_NODELIST";
    nodelist = lookup(env, var);
  }
  if (!nodelist || nodelist->empty()) return std::nullopt;
  const std::vector<std::string> names = expand_hostlist(*nodelist, var);

  auto per_node = [&](const std::string& name) {
    const std::string text = *lookup(env, name);
    std::vector<int> v = parse_tasks_per_node(text, name);
    if (v.size() != names.size()) {
      throw InputError({name}, "",
                       "'" + text + "' describes " + std::to_string(v.size()) + " node(s), but " +
                           var + " lists " + std::to_string(names.size()),
                       "dlaunch reads the allocation of the job it runs in; run it from the "
                       "batch script or the salloc shell, not inside srun");
    }
    return v;
  };
  auto set = [&](const char* name) -> const char* {
    const auto v = lookup(env, name);
    return v && !v->empty() ? name : nullptr;
  };

  std::vector<int> slots;
  std::string from;
  if (const char* n = set("SLURM_NTASKS_PER_NODE")) {
    slots.assign(names.size(), positive_int(*lookup(env, n), n));
    from = n;
  } else if ((set("SLURM_NTASKS") || set("SLURM_NPROCS")) && set("SLURM_TASKS_PER_NODE")) {
    slots = per_node("SLURM_TASKS_PER_NODE");
    from = "SLURM_TASKS_PER_NODE";
  }
  if (slots.empty()) {
    if (const char* n = set("SLURM_GPUS_ON_NODE")) {
      const int gpus = positive_int(*lookup(env, n), n, /*zero_ok=*/true);
      if (gpus > 0) {
        slots.assign(names.size(), gpus);
        from = n;
      }
    }
  }
  if (slots.empty()) {
    if (const char* n = set("SLURM_GPUS_PER_NODE")) {
      const int gpus = parse_gpu_count(*lookup(env, n), n);
      if (gpus > 0) {
        slots.assign(names.size(), gpus);
        from = n;
      }
    }
  }
  if (slots.empty() && set("SLURM_TASKS_PER_NODE")) {
    slots = per_node("SLURM_TASKS_PER_NODE");
    from = "SLURM_TASKS_PER_NODE";
  }
  if (slots.empty()) {
    slots.assign(names.size(), 1);
    from = "default (1 per node)";
  }
  if (slots_from != nullptr) *slots_from = from;

  Hostfile hf;
  hf.source = var;
  const std::string here = short_lower(this_host);
  for (std::size_t k = 0; k < names.size(); ++k) {
    HostEntry h;
    h.name = h.host = names[k];
    h.slots = slots[k];
    if (!here.empty() && short_lower(names[k]) == here) {
      h.transport = Transport::kLocal;
      h.address = names[k];  // MASTER_ADDR must reach this node from the others
    } else {
      h.transport = Transport::kSlurm;
    }
    h.pos = {var};
    hf.hosts.push_back(std::move(h));
  }
  return hf;
}

}  // namespace dlaunch
