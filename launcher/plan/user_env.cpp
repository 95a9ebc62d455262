#include "plan/user_env.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "dlaunch/text.h"
#include "dlaunch/tunables.h"

namespace dlaunch {

namespace {
constexpr const char* kNameHint = "names are letters, digits and '_', not starting with a digit";
}

EnvList parse_env_file_text(std::string_view text, const std::string& source) {
  EnvList out;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t col = line.find_first_not_of(" \t");
    if (col == std::string_view::npos || line[col] == '#') continue;
    std::string_view rest = line.substr(col);
    if (rest.substr(0, 7) == "export " || rest.substr(0, 7) == "export\t") {
      const auto k = rest.find_first_not_of(" \t", 7);
      col += k == std::string_view::npos ? rest.size() : k;
      rest = line.substr(col);
    }
    const SourcePos pos{source, line_no, static_cast<int>(col) + 1};
    const auto eq = rest.find('=');
    if (eq == std::string_view::npos) {
      throw InputError(pos, "", "expected NAME=VALUE, got '" + std::string(rest) + "'",
                       "one variable per line; '#' starts a comment");
    }
    const std::string name(rest.substr(0, eq));
    if (!is_env_name(name)) {
      throw InputError(pos, "", "'" + name + "' is not a valid variable name", kNameHint);
    }
    std::string_view value = rest.substr(eq + 1);
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    if (value.find('\0') != std::string_view::npos) {
      throw InputError(pos, "", "the value of " + name + " contains a NUL byte",
                       "no environment can hold one");
    }
    if (name.size() + 1 + value.size() >= limits::kMaxArgStringBytes) {
      throw InputError(pos, "",
                       name + " is " + std::to_string(name.size() + 1 + value.size()) +
                           " bytes, over Linux's limit of " +
                           std::to_string(limits::kMaxArgStringBytes) +
                           " bytes for one variable (MAX_ARG_STRLEN)",
                       "pass large data in a file");
    }
    out.emplace_back(name, std::string(value));
  }
  return out;
}

EnvList parse_env_file(const std::string& path) {
  return parse_env_file_text(read_input_file(path, "--env-file"), path);
}

EnvList parse_deepspeed_env_text(std::string_view text, const std::string& source) {
  // Trimmed to what parse_env_file_text reads as the same variable; its
  // checks and messages then apply.
  std::string lines;
  for (std::size_t start = 0; start < text.size();) {
    const auto nl = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    const auto eq = line.find('=');
    const auto trim = [](std::string_view v) {
      const auto b = v.find_first_not_of(" \t\r");
      if (b == std::string_view::npos) return std::string_view();
      return v.substr(b, v.find_last_not_of(" \t\r") - b + 1);
    };
    if (eq == std::string_view::npos) {
      lines += std::string(line) + "\n";
      continue;
    }
    lines += std::string(trim(line.substr(0, eq))) + "=" + std::string(trim(line.substr(eq + 1)));
    lines += "\n";
  }
  return parse_env_file_text(lines, source);
}

EnvList parse_deepspeed_env(const std::string& path) {
  return parse_deepspeed_env_text(read_input_file(path, "DeepSpeed's environment file"), path);
}

EnvList resolve_exports(const std::vector<std::string>& exports,
                        const std::vector<std::string>& head_env) {
  EnvList out;
  for (const auto& x : exports) {
    const auto eq = x.find('=');
    const std::string name = x.substr(0, eq);
    if (!is_env_name(name)) {
      throw InputError({"-x"}, "", "'" + name + "' is not a valid variable name", kNameHint);
    }
    if (eq != std::string::npos) {
      out.emplace_back(name, x.substr(eq + 1));
      continue;
    }
    const std::string prefix = name + "=";
    const std::string* found = nullptr;
    for (const auto& e : head_env) {
      if (e.compare(0, prefix.size(), prefix) == 0) found = &e;
    }
    if (found == nullptr) {
      throw InputError({"-x"}, "", name + " is not set in dlaunch's environment",
                       "set it, or give the value: -x " + name + "=VALUE");
    }
    out.emplace_back(name, found->substr(prefix.size()));
  }
  return out;
}

EnvList user_environment(const std::vector<std::string>& env_files,
                         const std::vector<std::string>& exports,
                         const std::vector<std::string>& head_env) {
  EnvList out;
  for (const auto& f : env_files) {
    auto kv = parse_env_file(f);
    out.insert(out.end(), kv.begin(), kv.end());
  }
  auto x = resolve_exports(exports, head_env);
  out.insert(out.end(), x.begin(), x.end());
  return out;
}

int pinned_master_port(const EnvList& user_env) {
  int port = 0;
  for (const auto& [k, v] : user_env) {
    if (k != "MASTER_PORT") continue;
    const bool digits = !v.empty() && v.size() <= 5 && std::all_of(v.begin(), v.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    port = digits ? std::stoi(v) : 0;
    if (port < 1 || port > 65535) {
      throw InputError({"-x"}, "MASTER_PORT", "'" + v + "' is not a port (1-65535)",
                       "give the port the ranks' MASTER_PORT must be, or leave it to dlaunch");
    }
  }
  return port;
}

}  // namespace dlaunch
