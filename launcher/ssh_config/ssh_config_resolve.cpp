// SshConfig::resolve: walks the checked files for one host, as ssh's first
// pass does, then expands the tokens with the final host, user and port.
#include <netdb.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string_view>

#include <climits>

#include "ssh_config/ssh_config.h"
#include "ssh_config/ssh_config_internal.h"

namespace dlaunch::ssh {

namespace {

using detail::Criterion;
using detail::Key;
using detail::lower;
using detail::Parsed;
using detail::Statement;

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
  const Statement* canonicalize = nullptr;  // CanonicalizeHostname
  const Statement* domains = nullptr;       // CanonicalDomains
  const Statement* max_dots = nullptr;      // CanonicalizeMaxDots
  const Statement* fallback_local = nullptr;
};

// OpenSSH's limit on CanonicalDomains (MAX_CANON_DOMAINS).
constexpr std::size_t kMaxCanonicalDomains = 32;

// ssh's resolve_host for canonicalization: any family, stream sockets.
bool system_resolves(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0) return false;
  ::freeaddrinfo(res);
  return true;
}

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
    walk_files();
    if (!needs_openssh_.empty()) return {};
    // ssh.c: with CanonicalizeHostname, or when `Match final` asked for it,
    // the host name is fixed (canonicalized first if asked) and the files
    // are read once more: new blocks may match it.
    const int mode = got_.canonicalize != nullptr ? got_.canonicalize->number : 0;
    if (mode != 0 || want_final_) {
      std::string host = host_so_far();
      if (mode != 0) host = canonicalize(std::move(host), mode == 2);
      host_ = host;
      final_host_ = std::move(host);
      second_pass_ = true;
      walk_files();
    }
    return finish();
  }

 private:
  [[nodiscard]] const std::string& path_of(const Statement& st) const {
    return parsed_.files[st.file].path;
  }

  void walk_files() {
    for (const std::size_t top : parsed_.top) {
      bool active = true;  // each top file starts outside any block
      walk(top, active, false);
    }
  }

  void walk(std::size_t file, bool& active, bool never_match) {
    for (const Statement& st : parsed_.files[file].statements) {
      switch (st.key) {
        case Key::kHost:
          active = !never_match && host_matches(st);
          break;
        case Key::kMatch:
          // ssh evaluates every Match line it reads, even one that cannot
          // apply: a `final` there still asks for the second pass.
          if (never_match && !second_pass_) {
            for (const detail::MatchTerm& term : st.terms)
              if (term.criterion == Criterion::kFinal) want_final_ = true;
          }
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

  // Host lines see the alias as given; in the second pass, the host name
  // ssh settled on (canonical, lower case).
  [[nodiscard]] bool host_matches(const Statement& st) const {
    const std::string& name = second_pass_ ? host_ : alias_;
    bool matched = false;
    for (const std::string& arg : st.args) {
      const bool negated = arg[0] == '!';
      if (wildcard_match(name, negated ? std::string_view(arg).substr(1) : arg)) {
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
        case Criterion::kFinal:
          // Negated too: OpenSSH 9.2 asks for the pass at any `final`.
          if (!second_pass_) want_final_ = true;
          r = second_pass_;
          break;
        case Criterion::kCanonical:
          r = second_pass_;
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
    if (final_host_) return *final_host_;
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
      case Key::kCanonicalizeHostname:
        first(got_.canonicalize);
        break;
      case Key::kCanonicalDomains:
        first(got_.domains);
        break;
      case Key::kCanonicalizeMaxDots:
        first(got_.max_dots);
        break;
      case Key::kCanonicalizeFallbackLocal:
        first(got_.fallback_local);
        break;
      case Key::kHost:
      case Key::kMatch:
      case Key::kInclude:
        break;
    }
  }

  // ssh.c's resolve_canonicalize for `host` (lower case): the name to use.
  [[nodiscard]] std::string canonicalize(std::string host, bool always) const {
    // An address (or what looks like one) is never canonicalized.
    if (host.empty() || host.find_first_of("%:") != std::string::npos ||
        host.find_first_not_of("0123456789.") == std::string::npos)
      return host;
    // A name a proxy resolves is left to it, unless `always`. ProxyJump
    // `none` counts as a jump here: ssh drops it only after this step.
    const bool direct =
        got_.jump == nullptr && (got_.proxy_command == nullptr || got_.proxy_command->none);
    if (!direct && !always) return host;
    const auto known = [&](const std::string& name) {
      return ctx_.resolves ? ctx_.resolves(name) : system_resolves(name);
    };
    if (host.back() == '.') {  // fully qualified: only as it is
      if (known(host)) {
        host.pop_back();
        return host;
      }
      return not_found(std::move(host));
    }
    const auto dots = static_cast<int>(std::count(host.begin(), host.end(), '.'));
    if (dots > (got_.max_dots != nullptr ? got_.max_dots->number : 1)) return host;
    if (got_.domains != nullptr) {
      if (got_.domains->args.size() > kMaxCanonicalDomains) {
        throw InputError({path_of(*got_.domains), got_.domains->line, 0},
                         detail::key_name(Key::kCanonicalDomains),
                         "more than " + std::to_string(kMaxCanonicalDomains) +
                             " domains (ssh refuses them too)");
      }
      for (const std::string& domain : got_.domains->args) {
        if (domain == "none") break;  // alone: no domains
        if (known(host + "." + domain + ".")) return host + "." + domain;
      }
    }
    return not_found(std::move(host));
  }

  [[nodiscard]] std::string not_found(std::string host) const {
    if (got_.fallback_local == nullptr || got_.fallback_local->number != 0) return host;
    std::string domains;
    if (got_.domains != nullptr) {
      for (const std::string& d : got_.domains->args) domains += (domains.empty() ? "" : " ") + d;
    }
    throw InputError({path_of(*got_.fallback_local), got_.fallback_local->line, 0},
                     detail::key_name(Key::kCanonicalizeFallbackLocal),
                     "\"" + host + "\" is not found in any of CanonicalDomains (" +
                         (domains.empty() ? "none set" : domains) +
                         ") and CanonicalizeFallbackLocal is no: ssh does not connect either");
  }

  [[nodiscard]] HostConfig finish() const {
    HostConfig out;
    const std::string host = final_host_                ? *final_host_
                             : got_.hostname != nullptr ? expand_hostname()
                                                        : host_;
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
  bool want_final_ = false;  // `Match final` was read in the first pass
  bool second_pass_ = false;
  std::optional<std::string> final_host_;  // the second pass's host name
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
