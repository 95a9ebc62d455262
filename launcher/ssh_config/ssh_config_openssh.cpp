// resolve_with_openssh: where dlaunch's reader cannot follow OpenSSH (a Match
// criterion only ssh evaluates, a keyword dlaunch does not know), the host is
// resolved by the installed `ssh -G`, which prints its whole resolution
// without connecting. ssh -G leaves IdentityFile and ProxyJump unexpanded;
// their tokens are expanded here from the values it printed.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <csignal>
#include <fstream>
#include <map>
#include <string_view>

#include "dlaunch/process.h"
#include "ssh_config/ssh_config.h"
#include "ssh_config/ssh_config_internal.h"

namespace dlaunch::ssh::detail {

namespace {

constexpr std::chrono::seconds kSshGTimeout{10};

struct Output {
  int status = -1;  // exit code; -1: did not run or timed out
  std::string out;
  std::string err;
  std::string why;  // when it did not run
};

// Runs argv with a deadline; stdout and stderr are read to the end.
Output run(const std::vector<std::string>& argv) {
  Output o;
  auto [out_r, out_w] = make_pipe();
  auto [err_r, err_w] = make_pipe();
  SpawnOptions so;
  so.argv = argv;
  so.env = current_environment();
  so.stdout_fd = out_w.get();
  so.stderr_fd = err_w.get();
  SpawnResult r = spawn(so);
  out_w.reset();
  err_w.reset();
  if (!r) {
    o.why = r.error();
    return o;
  }
  const pid_t pid = *r;
  const auto deadline = std::chrono::steady_clock::now() + kSshGTimeout;
  std::array<pollfd, 2> fds{{{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}}};
  int open = 2;
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(fds.data(), fds.size(), static_cast<int>(left.count())) == 0) {
      ::kill(pid, SIGKILL);
      o.why = "no answer within " + std::to_string(kSshGTimeout.count()) + " s";
      break;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      std::array<char, 4096> buf{};
      const ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
      if (n > 0) {
        (i == 0 ? o.out : o.err).append(buf.data(), static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open;
      }
    }
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (o.why.empty()) o.status = exit_code_of(st);
  return o;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t end = s.find(' ', i);
    if (end != i) out.push_back(s.substr(i, end == std::string::npos ? end : end - i));
    if (end == std::string::npos) break;
    i = end + 1;
  }
  return out;
}

// ssh's refusal "FILE: line N: MESSAGE" (or "FILE line N: ...") as InputError
// naming the file, the line and that line's keyword.
[[noreturn]] void refused(const Output& o, const std::string& alias) {
  std::string first = o.err.substr(0, o.err.find('\n'));
  if (!o.why.empty()) first = o.why;
  const std::size_t at = first.find(" line ");
  if (at != std::string::npos) {
    std::string path = first.substr(0, at);
    if (!path.empty() && path.back() == ':') path.pop_back();
    const int line = std::atoi(first.c_str() + at + 6);  // NOLINT(cert-err34-c) 0 when not a number
    std::string message = first.substr(first.find(':', at + 6) + 1);
    while (!message.empty() && message.front() == ' ') message.erase(0, 1);
    std::string keyword = kField;
    std::ifstream in(path);
    std::string text;
    for (int n = 0; n < line && std::getline(in, text); ++n) {
    }
    const std::size_t start = text.find_first_not_of(" \t");
    if (start != std::string::npos)
      keyword = text.substr(start, text.find_first_of(" \t=", start) - start);
    throw InputError({path, line, 0}, keyword, message + " (ssh refuses it)");
  }
  throw InputError({kField}, "ssh -G",
                   "the installed ssh cannot resolve '" + alias +
                       "': " + (first.empty() ? "exit " + std::to_string(o.status) : first));
}

std::string expand_tokens(std::string_view s, const std::map<char, std::string>& vars) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 1 < s.size()) {
      const auto it = vars.find(s[++i]);
      out += it != vars.end() ? it->second : std::string("%") + s[i];
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string expand_path(std::string s, const std::map<char, std::string>& vars,
                        const ResolveContext& ctx) {
  if (!s.empty() && s[0] == '~') {
    const std::size_t slash = s.find('/');
    const std::string who = s.substr(1, slash == std::string::npos ? slash : slash - 1);
    const auto home = who.empty() ? std::optional<std::string>(ctx.home) : home_of(who);
    if (home) s = *home + (slash == std::string::npos ? "" : s.substr(slash));
  }
  std::string out = expand_tokens(s, vars);
  for (std::size_t i = out.find("${"); i != std::string::npos; i = out.find("${", i)) {
    const std::size_t end = out.find('}', i);
    if (end == std::string::npos) break;
    std::optional<std::string> value;
    if (ctx.getenv) value = ctx.getenv(out.substr(i + 2, end - i - 2));
    out.replace(i, end - i + 1, value.value_or(""));
    i += value.value_or("").size();
  }
  return out;
}

// The keys ssh offers when the configuration names none.
bool default_keys(const std::vector<std::string>& files) {
  return !files.empty() && std::all_of(files.begin(), files.end(), [](const std::string& f) {
    return f.rfind("~/.ssh/id_", 0) == 0 && f.find('/', 2 + 5) == std::string::npos;
  });
}

}  // namespace

HostConfig resolve_with_openssh(const Parsed& parsed, const std::string& alias,
                                const ResolveContext& ctx, const std::string& why,
                                const SourcePos& where) {
  if (!parsed.real_files) {
    throw InputError(where, kField,
                     "'" + alias + "' needs the installed ssh to resolve it (" + why +
                         "), and this configuration is not on disk");
  }
  std::vector<std::string> argv = {"ssh", "-G"};
  if (parsed.config_file) argv.insert(argv.end(), {"-F", *parsed.config_file});
  if (ctx.user) argv.insert(argv.end(), {"-l", *ctx.user});
  if (ctx.port) argv.insert(argv.end(), {"-p", std::to_string(*ctx.port)});
  argv.push_back(alias);
  const Output o = run(argv);
  if (o.status != 0) refused(o, alias);

  std::map<std::string, std::vector<std::string>> g;
  std::size_t i = 0;
  while (i < o.out.size()) {
    std::size_t end = o.out.find('\n', i);
    if (end == std::string::npos) end = o.out.size();
    const std::string line = o.out.substr(i, end - i);
    const std::size_t sp = line.find(' ');
    if (sp != std::string::npos) g[lower(line.substr(0, sp))].push_back(line.substr(sp + 1));
    i = end + 1;
  }
  const auto one = [&](const std::string& key) -> std::optional<std::string> {
    const auto it = g.find(key);
    if (it == g.end() || it->second.empty()) return std::nullopt;
    return it->second.front();
  };
  const auto number = [&](const std::string& key) -> std::optional<int> {
    const auto v = one(key);
    if (!v || v->empty() || !std::all_of(v->begin(), v->end(), ::isdigit)) return std::nullopt;
    return std::atoi(v->c_str());  // NOLINT(cert-err34-c) digits only, checked above
  };
  HostConfig out;
  out.resolved_by = "ssh -G, for " + why;
  out.hostname = one("hostname");
  if (!ctx.user) out.user = one("user");
  if (!ctx.port) out.port = number("port");
  out.host_key_alias = one("hostkeyalias");
  std::map<char, std::string> vars = {
      {'%', "%"},
      {'C', connection_hash(ctx.local_host, out.hostname.value_or(alias),
                            one("port").value_or("22"), one("user").value_or(ctx.local_user))},
      {'d', ctx.home},
      {'h', out.hostname.value_or(alias)},
      {'i', std::to_string(ctx.uid)},
      {'k', out.host_key_alias.value_or(alias)},
      {'L', ctx.local_host.substr(0, ctx.local_host.find('.'))},
      {'l', ctx.local_host},
      {'n', alias},
      {'p', one("port").value_or("22")},
      {'r', one("user").value_or(ctx.local_user)},
      {'u', ctx.local_user}};
  const std::vector<std::string> keys =
      g.count("identityfile") ? g["identityfile"] : std::vector<std::string>{};
  if (!default_keys(keys)) {
    for (const auto& k : keys) {
      if (lower(k) == "none") {
        out.identity_none = true;
        continue;
      }
      std::string f = expand_path(k, vars, ctx);
      if (std::find(out.identity_files.begin(), out.identity_files.end(), f) ==
          out.identity_files.end())
        out.identity_files.push_back(std::move(f));
    }
  }
  for (const auto& c : g["certificatefile"])
    out.certificate_files.push_back(expand_path(c, vars, ctx));
  if (const auto v = one("identitiesonly")) out.identities_only = lower(*v) == "yes";
  if (const auto v = one("batchmode")) out.batch_mode = lower(*v) == "yes";
  if (const auto v = one("userknownhostsfile")) {
    out.user_known_hosts_files.emplace();
    if (lower(*v) != "none") *out.user_known_hosts_files = split_words(*v);
  }
  if (const auto v = one("globalknownhostsfile")) {
    out.global_known_hosts_files.emplace();
    if (lower(*v) != "none") *out.global_known_hosts_files = split_words(*v);
  }
  if (const auto v = one("stricthostkeychecking")) {
    const std::string s = lower(*v);
    out.strict_host_key_checking = s == "true" || s == "yes" ? StrictHostKeyChecking::kYes
                                   : s == "ask"              ? StrictHostKeyChecking::kAsk
                                   : s == "accept-new"       ? StrictHostKeyChecking::kAcceptNew
                                                             : StrictHostKeyChecking::kOff;
  }
  out.connect_timeout_s = number("connecttimeout");  // "none": unset
  // ssh -G prints 0 for an unset interval too: 0 is taken as unset here.
  if (const auto v = number("serveraliveinterval"); v && *v > 0) out.server_alive_interval_s = v;
  out.server_alive_count_max = number("serveralivecountmax");
  std::map<char, std::string> proxy_vars;
  for (const char c : std::string_view("%hknpr")) proxy_vars[c] = vars[c];
  if (const auto v = one("proxyjump")) {
    if (lower(*v) == "none") {
      out.proxy_jump_none = true;
    } else {
      const std::string spec = expand_tokens(*v, proxy_vars);
      std::size_t start = 0;
      while (start <= spec.size()) {
        std::size_t comma = spec.find(',', start);
        if (comma == std::string::npos) comma = spec.size();
        std::string part = spec.substr(start, comma - start);
        if (part.rfind("ssh://", 0) == 0) part.erase(0, 6);
        ProxyHop hop;
        if (const std::size_t at = part.rfind('@'); at != std::string::npos) {
          hop.user = part.substr(0, at);
          part.erase(0, at + 1);
        }
        std::string port;
        if (!part.empty() && part[0] == '[') {
          const std::size_t close = part.find(']');
          hop.host = part.substr(1, close - 1);
          if (close != std::string::npos && close + 2 < part.size()) port = part.substr(close + 2);
        } else if (const std::size_t colon = part.find(':'); colon != std::string::npos) {
          hop.host = part.substr(0, colon);
          port = part.substr(colon + 1);
        } else {
          hop.host = part;
        }
        if (!port.empty())
          hop.port = std::atoi(port.c_str());  // NOLINT(cert-err34-c) ssh checked it
        out.proxy_jump.push_back(std::move(hop));
        start = comma + 1;
      }
    }
  } else if (const auto pc = one("proxycommand")) {
    if (lower(*pc) == "none") {
      out.proxy_command_none = true;
    } else {
      out.proxy_command = expand_tokens(*pc, proxy_vars);
    }
  }
  return out;
}

}  // namespace dlaunch::ssh::detail
