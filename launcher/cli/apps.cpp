#include "cli/apps.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include <climits>

#include "dlaunch/tunables.h"

namespace dlaunch {

namespace {

bool is_app_option_start(const std::string& word) { return word.size() > 1 && word[0] == '-'; }

int parse_app_count(const std::string& value, const SourcePos& pos, const std::string& field) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || n < 1 || n > INT_MAX) {
    throw InputError(pos, field, "expected a positive integer, got '" + value + "'");
  }
  return static_cast<int>(n);
}

std::vector<std::string> split_names(const std::string& value, const SourcePos& pos) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= value.size()) {
    const std::size_t comma = std::min(value.find(',', start), value.size());
    const std::string name = value.substr(start, comma - start);
    if (name.empty()) {
      throw InputError(pos, "--host", "empty host name in '" + value + "'",
                       "give node names of the hostfile, separated by ','");
    }
    out.push_back(name);
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::vector<std::string>> split_apps(const std::vector<std::string>& words) {
  std::vector<std::vector<std::string>> apps(1);
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (words[i] == ":" && i + 1 < words.size() && is_app_option_start(words[i + 1])) {
      apps.emplace_back();
      continue;
    }
    apps.back().push_back(words[i]);
  }
  return apps;
}

AppSpec parse_app_words(const std::vector<std::string>& words, const SourcePos& pos) {
  AppSpec app;
  app.pos = pos;
  std::size_t i = 0;
  // An option's value: the rest of --opt=VALUE, else the next word.
  const auto value_of = [&](const std::string& word, const std::string& name) -> std::string {
    const auto eq = word.find('=');
    if (word.rfind("--", 0) == 0 && eq != std::string::npos) return word.substr(eq + 1);
    if (i + 1 >= words.size()) throw InputError(pos, name, name + " needs a value");
    return words[++i];
  };
  for (; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "--") {
      ++i;
      break;
    }
    if (!is_app_option_start(w)) break;
    const std::string name = w.substr(0, w.rfind("--", 0) == 0 ? w.find('=') : std::string::npos);
    if (name == "-n" || name == "--np" || name == "-np" || name == "-c" || name == "--n") {
      app.np = parse_app_count(value_of(w, "-n"), pos, "-n");
    } else if (name == "--role") {
      app.role = value_of(w, name);
      if (app.role.empty() || app.role.find_first_of(" \t\n=") != std::string::npos) {
        throw InputError(pos, "--role", "'" + app.role + "' is not a role name",
                         "give a word without spaces or '='");
      }
    } else if (name == "--host" || name == "-host" || name == "-H") {  // -H: mpirun's, per app
      const auto names = split_names(value_of(w, name), pos);
      app.hosts.insert(app.hosts.end(), names.begin(), names.end());
    } else if (name == "--nproc-per-node") {
      app.nproc_per_node = parse_app_count(value_of(w, name), pos, name);
    } else if (name == "-x") {
      app.exports.push_back(value_of(w, name));
    } else if (name == "--env-file") {
      app.env_files.push_back(value_of(w, name));
    } else if (name == "--wdir") {
      app.workdir = value_of(w, name);
      if (app.workdir.empty()) throw InputError(pos, "--wdir", "empty working directory");
    } else if (name == "--container-image") {
      app.container_image = value_of(w, name);
      if (app.container_image.empty() ||
          app.container_image.find_first_of(" \t\n") != std::string::npos ||
          app.container_image.front() == '-') {
        throw InputError(pos, name, "'" + app.container_image + "' is not an image name",
                         "give an image, e.g. --container-image localhost/train:1");
      }
    } else {
      throw InputError(pos, name, "'" + name + "' is not an option of an app",
                       "an app takes -n N, --role, --host, --nproc-per-node, -x, --env-file, "
                       "--wdir and --container-image before its program; dlaunch's other "
                       "options go before the first "
                       "app's program");
    }
  }
  app.command.assign(words.begin() + static_cast<std::ptrdiff_t>(std::min(i, words.size())),
                     words.end());
  if (app.np == 0) {
    throw InputError(pos, "-n", "no number of ranks for this app",
                     "start every app with -n N, e.g. `-n 4 ./worker`");
  }
  if (app.np > limits::kMaxRanksPerJob) {
    throw InputError(pos, "-n",
                     std::to_string(app.np) + " ranks is over the limit of " +
                         std::to_string(limits::kMaxRanksPerJob) + " per job");
  }
  if (app.command.empty()) {
    throw InputError(pos, "program", "no program for this app",
                     "give the program and its arguments after the app's options");
  }
  return app;
}

std::vector<std::string> split_shell_words(std::string_view line, const SourcePos& pos) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == ' ' || c == '\t' || c == '\r') {
      if (in_word) words.push_back(std::move(cur));
      cur.clear();
      in_word = false;
    } else if (c == '\'') {
      const std::size_t end = line.find('\'', i + 1);
      if (end == std::string_view::npos) throw InputError(pos, "quote", "unterminated ' quote");
      cur.append(line.substr(i + 1, end - i - 1));
      i = end;
      in_word = true;
    } else if (c == '"') {
      std::size_t j = i + 1;
      for (; j < line.size() && line[j] != '"'; ++j) {
        // Inside double quotes a backslash escapes only $ ` " \ (POSIX).
        if (line[j] == '\\' && j + 1 < line.size() &&
            std::string_view("$`\"\\").find(line[j + 1]) != std::string_view::npos) {
          ++j;
        }
        cur += line[j];
      }
      if (j >= line.size()) throw InputError(pos, "quote", "unterminated \" quote");
      i = j;
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 >= line.size()) throw InputError(pos, "quote", "backslash at the end of the line");
      cur += line[++i];
      in_word = true;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(cur));
  return words;
}

std::vector<AppSpec> parse_app_file_text(std::string_view text, const std::string& source) {
  std::vector<AppSpec> apps;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const std::size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || line[first] == '#') continue;
    const SourcePos pos{source, line_no, 0};
    if (line.find('\0') != std::string_view::npos)
      throw InputError(pos, "line", "a NUL byte in the line");
    const auto words = split_shell_words(line, pos);
    if (std::find(words.begin(), words.end(), ":") != words.end() && words.front() != ":") {
      // One app per line: a ':' between apps belongs on the command line.
      const auto parts = split_apps(words);
      if (parts.size() > 1) {
        throw InputError(pos, ":", "more than one app on one line",
                         "put each app on a line of its own, without ':'");
      }
    }
    apps.push_back(parse_app_words(words, pos));
  }
  if (apps.empty()) {
    throw InputError({source, 0, 0}, "apps", "no app in the file",
                     "write one `-n N PROGRAM [ARGS...]` per line");
  }
  return apps;
}

std::vector<AppSpec> parse_app_file(const std::string& path) {
  return parse_app_file_text(read_input_file(path, "--app"), path);
}

std::string app_role(const AppSpec& app) {
  if (!app.role.empty()) return app.role;
  if (app.command.empty()) return "default";
  const std::string& prog = app.command.front();
  const auto slash = prog.rfind('/');
  const std::string base = slash == std::string::npos ? prog : prog.substr(slash + 1);
  return base.empty() ? "default" : base;
}

}  // namespace dlaunch
