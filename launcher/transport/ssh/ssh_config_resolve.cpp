// SshConfig::resolve: walks the checked files for one host, as ssh's first
// pass does, then expands the tokens with the final host, user and port.
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string_view>

#include <climits>

#include "transport/ssh/ssh_config.h"
#include "transport/ssh/ssh_config_internal.h"

namespace dlaunch::ssh {

namespace {

using detail::Criterion;
using detail::Key;
using detail::Parsed;
using detail::Statement;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// OpenSSH's match_pattern_list: 1 when a pattern matches, -1 when a negated
// one does (that wins), 0 otherwise.
int match_list(std::string_view text, std::string_view list) {
  bool positive = false;
  while (true) {
    const std::size_t comma = list.find(',');
    std::string_view pattern = list.substr(0, comma);
    const bool negated = !pattern.empty() && pattern[0] == '!';
    if (negated) pattern.remove_prefix(1);
    if (wildcard_match(text, pattern)) {
      if (negated) return -1;
      positive = true;
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return positive ? 1 : 0;
}

// The values of the lines that applied, first one wins, before expansion.
struct Collected {
  const Statement* hostname = nullptr;
  const Statement* user = nullptr;
  const Statement* port = nullptr;
  const Statement* host_key_alias = nullptr;
  const Statement* identities_only = nullptr;
  const Statement* batch_mode = nullptr;
  const Statement* strict = nullptr;
  const Statement* connect_timeout = nullptr;
  const Statement* alive_interval = nullptr;
  const Statement* alive_count = nullptr;
  const Statement* user_known_hosts = nullptr;
  const Statement* global_known_hosts = nullptr;
  std::vector<const Statement*> identity_files;
  std::vector<const Statement*> certificate_files;
  const Statement* jump = nullptr;           // ProxyJump (a chain, or none)
  const Statement* proxy_command = nullptr;  // ProxyCommand, unless a ProxyJump took the slot
  bool proxy_taken_by_jump = false;
};

// Expands %x from `vars` (x -> value) and, where `env` is set, ${VAR}. The
// text was checked by load(): only the environment can fail here.
std::string expand(std::string_view s, const std::array<std::string, 128>& vars, bool dollar,
                   bool tilde, const ResolveContext& ctx, const std::string& path,
                   const Statement& st) {
  std::string out;
  if (tilde && !s.empty() && s[0] == '~') {
    const std::size_t slash = s.find('/');
    const std::string who(s.substr(1, slash == std::string_view::npos ? slash : slash - 1));
    const auto home = who.empty() ? std::optional<std::string>(ctx.home) : detail::home_of(who);
    if (!home) {
      throw InputError({path, st.line, 0}, detail::key_name(st.key),
                       "\"" + std::string(s) + "\": no user \"" + who + "\"");
    }
    out = *home;
    s.remove_prefix(slash == std::string_view::npos ? s.size() : slash);
  }
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '%' && i + 1 < s.size()) {
      out += vars.at(static_cast<unsigned char>(s[++i]) & 127);
    } else if (dollar && c == '$' && i + 1 < s.size() && s[i + 1] == '{') {
      const std::size_t end = s.find('}', i + 2);
      const std::string name(s.substr(i + 2, end - i - 2));
      std::optional<std::string> value;
      if (ctx.getenv) value = ctx.getenv(name);
      if (!value) {
        throw InputError({path, st.line, 0}, detail::key_name(st.key),
                         "${" + name + "} is not set in the environment");
      }
      out += *value;
      i = end;
    } else {
      out += c;
    }
  }
  return out;
}

// An address keeps its case in %h (as ssh's is_addr).
bool looks_like_address(std::string_view host) {
  if (host.find(':') != std::string_view::npos) return true;
  return !host.empty() && std::all_of(host.begin(), host.end(),
                                      [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

class Resolver {
 public:
  // ssh builds %h and the host name from the name in lower case (an address
  // keeps its case); Host lines, %n and `Match originalhost` see it as given.
  Resolver(const Parsed& parsed, const std::string& alias, const ResolveContext& ctx)
      : parsed_(parsed),
        alias_(alias),
        host_(looks_like_address(alias) ? alias : lower(alias)),
        ctx_(ctx) {}

  // Why OpenSSH must resolve this host (a Match criterion only it evaluates
  // was reached); empty: dlaunch's resolution stands.
  [[nodiscard]] const std::string& needs_openssh() const { return needs_openssh_; }
  [[nodiscard]] const SourcePos& needs_openssh_at() const { return needs_openssh_at_; }

  HostConfig run() {
    for (const std::size_t top : parsed_.top) {
      bool active = true;  // each top file starts outside any block
      walk(top, active, false);
    }
    return finish();
  }

 private:
  [[nodiscard]] const std::string& path_of(const Statement& st) const {
    return parsed_.files[st.file].path;
  }

  void walk(std::size_t file, bool& active, bool never_match) {
    for (const Statement& st : parsed_.files[file].statements) {
      switch (st.key) {
        case Key::kHost:
          active = !never_match && host_matches(st);
          break;
        case Key::kMatch:
          active = !never_match && match_matches(st);
          break;
        case Key::kInclude: {
          // An included file's blocks end with it; one under a block that did
          // not match is read but never matches.
          const bool outer = active;
          for (const std::size_t child : st.included) {
            walk(child, active, never_match || !outer);
            active = outer;
          }
          break;
        }
        default:
          if (active) apply(st);
      }
    }
  }

  [[nodiscard]] bool host_matches(const Statement& st) const {
    bool matched = false;
    for (const std::string& arg : st.args) {
      const bool negated = arg[0] == '!';
      if (wildcard_match(alias_, negated ? std::string_view(arg).substr(1) : arg)) {
        if (negated) return false;
        matched = true;
      }
    }
    return matched;
  }

  [[nodiscard]] bool match_matches(const Statement& st) {
    bool result = true;
    for (const detail::MatchTerm& term : st.terms) {
      bool r = true;
      switch (term.criterion) {
        case Criterion::kAll:
          if (result) result = !term.negate;
          return result;
        case Criterion::kHost:
          r = match_list(lower(host_so_far()), lower(term.patterns)) == 1;
          break;
        case Criterion::kOriginalHost:
          r = match_list(lower(alias_), lower(term.patterns)) == 1;
          break;
        case Criterion::kUser:
          r = match_list(user_so_far(), term.patterns) == 1;
          break;
        case Criterion::kLocalUser:
          r = match_list(ctx_.local_user, term.patterns) == 1;
          break;
        case Criterion::kOpenssh:
          // Only reached while the line may still match: its outcome matters.
          if (result && needs_openssh_.empty()) {
            needs_openssh_ =
                "Match " + term.patterns + " (" + path_of(st) + ":" + std::to_string(st.line) + ")";
            needs_openssh_at_ = {path_of(st), st.line, 0};
          }
          r = false;
          break;
      }
      if (r == term.negate) result = false;
    }
    return result;
  }

  // As readconf.c's match_cfg_line: HostName so far, its %h the alias.
  [[nodiscard]] std::string host_so_far() const {
    if (got_.hostname == nullptr) return host_;
    return expand_hostname();
  }

  // HostName with %h expanded, in lower case unless an address (as ssh.c).
  [[nodiscard]] std::string expand_hostname() const {
    std::array<std::string, 128> vars;
    vars['%'] = "%";
    vars['h'] = host_;
    std::string name = expand(got_.hostname->args[0], vars, false, false, ctx_,
                              path_of(*got_.hostname), *got_.hostname);
    return looks_like_address(name) ? name : lower(name);
  }

  [[nodiscard]] std::string user_so_far() const {
    if (ctx_.user) return *ctx_.user;
    if (got_.user != nullptr) return got_.user->args[0];
    return ctx_.local_user;
  }

  void apply(const Statement& st) {
    const auto first = [&](const Statement*& slot) {
      if (slot == nullptr) slot = &st;
    };
    switch (st.key) {
      case Key::kHostName:
        first(got_.hostname);
        break;
      case Key::kUser:
        first(got_.user);
        break;
      case Key::kPort:
        first(got_.port);
        break;
      case Key::kHostKeyAlias:
        first(got_.host_key_alias);
        break;
      case Key::kIdentitiesOnly:
        first(got_.identities_only);
        break;
      case Key::kBatchMode:
        first(got_.batch_mode);
        break;
      case Key::kStrictHostKeyChecking:
        first(got_.strict);
        break;
      case Key::kConnectTimeout:
        // "none" leaves the value unset, so a later line may still set it.
        if (st.number >= 0) first(got_.connect_timeout);
        break;
      case Key::kServerAliveInterval:
        if (st.number >= 0) first(got_.alive_interval);
        break;
      case Key::kServerAliveCountMax:
        first(got_.alive_count);
        break;
      case Key::kUserKnownHostsFile:
        first(got_.user_known_hosts);
        break;
      case Key::kGlobalKnownHostsFile:
        first(got_.global_known_hosts);
        break;
      case Key::kIdentityFile:
        got_.identity_files.push_back(&st);
        break;
      case Key::kCertificateFile:
        got_.certificate_files.push_back(&st);
        break;
      case Key::kProxyCommand:
        first(got_.proxy_command);
        break;
      case Key::kProxyJump:
        if (st.none) {
          first(got_.jump);
        } else if (got_.jump == nullptr && got_.proxy_command == nullptr) {
          // As parse_jump: the chain also sets ProxyCommand to none.
          got_.jump = &st;
          got_.proxy_command = &st;
          got_.proxy_taken_by_jump = true;
        }
        break;
      case Key::kHost:
      case Key::kMatch:
      case Key::kInclude:
        break;
    }
  }

  [[nodiscard]] HostConfig finish() const {
    HostConfig out;
    const std::string host = got_.hostname != nullptr ? expand_hostname() : host_;
    out.hostname = host;

    int port = 22;
    if (ctx_.port) {
      port = *ctx_.port;
    } else if (got_.port != nullptr) {
      out.port = got_.port->number;
      port = *out.port;
    }
    // ssh lowercases HostKeyAlias too, so %k and the known_hosts lookup do.
    if (got_.host_key_alias != nullptr) out.host_key_alias = lower(got_.host_key_alias->args[0]);

    std::array<std::string, 128> vars;
    vars['%'] = "%";
    vars['d'] = ctx_.home;
    vars['h'] = host;
    vars['i'] = std::to_string(ctx_.uid);
    if (got_.jump != nullptr && !got_.jump->none) vars['j'] = got_.jump->hops.back().host;
    vars['k'] = out.host_key_alias.value_or(alias_);
    vars['l'] = ctx_.local_host;
    vars['L'] = ctx_.local_host.substr(0, ctx_.local_host.find('.'));
    vars['n'] = alias_;
    vars['p'] = std::to_string(port);
    vars['u'] = ctx_.local_user;

    std::string user = ctx_.local_user;
    if (ctx_.user) {
      user = *ctx_.user;
    } else if (got_.user != nullptr) {
      out.user = got_.user->args[0];  // as written: OpenSSH 9.2 expands no token here
      user = *out.user;
    }
    vars['r'] = user;
    vars['C'] = detail::connection_hash(vars['l'], vars['h'], vars['p'], vars['r']);

    const auto expand_all = [&](const std::vector<const Statement*>& list, bool dedupe) {
      std::vector<std::string> files;
      for (const Statement* st : list) {
        if (lower(st->args[0]) == "none") {
          if (st->key == Key::kIdentityFile) out.identity_none = true;
          continue;
        }
        std::string f = expand(st->args[0], vars, true, true, ctx_, path_of(*st), *st);
        if (!dedupe || std::find(files.begin(), files.end(), f) == files.end())
          files.push_back(std::move(f));
      }
      return files;
    };
    out.identity_files = expand_all(got_.identity_files, true);
    out.certificate_files = expand_all(got_.certificate_files, true);

    if (got_.user_known_hosts != nullptr) {
      out.user_known_hosts_files.emplace();
      for (const std::string& f : got_.user_known_hosts->args) {
        if (lower(f) == "none") continue;
        out.user_known_hosts_files->push_back(expand(
            f, vars, true, true, ctx_, path_of(*got_.user_known_hosts), *got_.user_known_hosts));
      }
    }
    if (got_.global_known_hosts != nullptr) {
      out.global_known_hosts_files.emplace();
      for (const std::string& f : got_.global_known_hosts->args) {
        if (lower(f) == "none") continue;
        // Only ~ here: % is not a token in this keyword.
        std::string path = f;
        if (path[0] == '~') path = ctx_.home + path.substr(1);
        out.global_known_hosts_files->push_back(std::move(path));
      }
    }

    // ProxyCommand and ProxyJump take %% %h %k %n %p %r (ssh makes a jump a command).
    std::array<std::string, 128> proxy_vars;
    for (const char c : std::string_view("%hknpr")) proxy_vars.at(c) = vars.at(c);
    if (got_.jump != nullptr) {
      if (got_.jump->none) {
        out.proxy_jump_none = true;
      } else {
        for (const ProxyHop& hop : got_.jump->hops) {
          ProxyHop h;
          h.user =
              expand(hop.user, proxy_vars, false, false, ctx_, path_of(*got_.jump), *got_.jump);
          h.host =
              expand(hop.host, proxy_vars, false, false, ctx_, path_of(*got_.jump), *got_.jump);
          h.port = hop.port;
          out.proxy_jump.push_back(std::move(h));
        }
      }
    }
    if (got_.proxy_command != nullptr && !got_.proxy_taken_by_jump) {
      if (got_.proxy_command->none) {
        out.proxy_command_none = true;
      } else {
        out.proxy_command = expand(got_.proxy_command->args[0], proxy_vars, false, false, ctx_,
                                   path_of(*got_.proxy_command), *got_.proxy_command);
      }
    }

    if (got_.identities_only != nullptr) out.identities_only = got_.identities_only->number != 0;
    if (got_.batch_mode != nullptr) out.batch_mode = got_.batch_mode->number != 0;
    if (got_.strict != nullptr)
      out.strict_host_key_checking = static_cast<StrictHostKeyChecking>(got_.strict->number);
    if (got_.connect_timeout != nullptr) out.connect_timeout_s = got_.connect_timeout->number;
    if (got_.alive_interval != nullptr) out.server_alive_interval_s = got_.alive_interval->number;
    if (got_.alive_count != nullptr) out.server_alive_count_max = got_.alive_count->number;
    return out;
  }

  const Parsed& parsed_;
  const std::string& alias_;
  std::string host_;
  const ResolveContext& ctx_;
  Collected got_;
  std::string needs_openssh_;
  SourcePos needs_openssh_at_;
};

}  // namespace

bool wildcard_match(std::string_view text, std::string_view pattern) {
  // Iterative, backtracking to the last '*' only: linear in practice, never
  // exponential on patterns like "*a*a*a*b".
  std::size_t t = 0;
  std::size_t p = 0;
  std::size_t star = std::string_view::npos;
  std::size_t star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++t;
      ++p;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_t = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

HostConfig SshConfig::resolve(const std::string& alias, const ResolveContext& ctx) const {
  if (const auto& only = parsed_->openssh_only) {
    return detail::resolve_with_openssh(
        *parsed_, alias, ctx,
        only->why + " (" + only->path + ":" + std::to_string(only->line) + ")",
        SourcePos{only->path, only->line, 0});
  }
  Resolver resolver(*parsed_, alias, ctx);
  HostConfig out = resolver.run();
  if (!resolver.needs_openssh().empty())
    return detail::resolve_with_openssh(*parsed_, alias, ctx, resolver.needs_openssh(),
                                        resolver.needs_openssh_at());
  return out;
}

ResolveContext ResolveContext::current() {
  ResolveContext ctx;
  ctx.uid = ::getuid();
  ctx.home = detail::user_home();
  if (const passwd* pw = ::getpwuid(ctx.uid)) ctx.local_user = pw->pw_name;
  if (ctx.local_user.empty()) {
    if (const char* u = std::getenv("USER")) ctx.local_user = u;
  }
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) == 0) ctx.local_host = name;
  ctx.getenv = [](const std::string& var) -> std::optional<std::string> {
    const char* v = std::getenv(var.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  return ctx;
}

}  // namespace dlaunch::ssh
