// SshConfig::load: reads the files, follows Includes and checks every line
// (ssh_config.h). resolve() is in ssh_config_resolve.cpp.
#include "ssh_config/ssh_config.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string_view>
#include <utility>

#include <climits>

#include "ssh_config/ssh_config_internal.h"

namespace dlaunch::ssh {

namespace {

using detail::Criterion;
using detail::Key;
using detail::kField;
using detail::lower;
using detail::MatchTerm;
using detail::Statement;

struct Keyword {
  const char* lower;
  Key key;
};

constexpr Keyword kKeywords[] = {
    {"host", Key::kHost},
    {"match", Key::kMatch},
    {"include", Key::kInclude},
    {"hostname", Key::kHostName},
    {"user", Key::kUser},
    {"port", Key::kPort},
    {"identityfile", Key::kIdentityFile},
    {"identitiesonly", Key::kIdentitiesOnly},
    {"certificatefile", Key::kCertificateFile},
    {"proxyjump", Key::kProxyJump},
    {"proxycommand", Key::kProxyCommand},
    {"userknownhostsfile", Key::kUserKnownHostsFile},
    {"globalknownhostsfile", Key::kGlobalKnownHostsFile},
    {"stricthostkeychecking", Key::kStrictHostKeyChecking},
    {"hostkeyalias", Key::kHostKeyAlias},
    {"connecttimeout", Key::kConnectTimeout},
    {"serveraliveinterval", Key::kServerAliveInterval},
    {"serveralivecountmax", Key::kServerAliveCountMax},
    {"batchmode", Key::kBatchMode},
    {"canonicalizehostname", Key::kCanonicalizeHostname},
    {"canonicaldomains", Key::kCanonicalDomains},
    {"canonicalizemaxdots", Key::kCanonicalizeMaxDots},
    {"canonicalizefallbacklocal", Key::kCanonicalizeFallbackLocal},
};

// Every keyword OpenSSH 9.2's ssh accepts (ssh_config(5), and the deprecated
// ones it still takes), lower case: one dlaunch does not use is skipped; one
// not here is left to the installed ssh (SshConfig::resolve).
constexpr std::string_view kOpensshKeywords[] = {
    "addkeystoagent",
    "addressfamily",
    "afstokenpassing",
    "bindaddress",
    "bindinterface",
    "casignaturealgorithms",
    "challengeresponseauthentication",
    "checkhostip",
    "cipher",
    "ciphers",
    "clearallforwardings",
    "compression",
    "compressionlevel",
    "connectionattempts",
    "controlmaster",
    "controlpath",
    "controlpersist",
    "dsaauthentication",
    "dynamicforward",
    "enableescapecommandline",
    "enablesshkeysign",
    "escapechar",
    "exitonforwardfailure",
    "fallbacktorsh",
    "fingerprinthash",
    "forkafterauthentication",
    "forwardagent",
    "forwardx11",
    "forwardx11timeout",
    "forwardx11trusted",
    "gatewayports",
    "globalknownhostsfile2",
    "gssapiauthentication",
    "gssapiclientidentity",
    "gssapidelegatecredentials",
    "gssapikexalgorithms",
    "gssapikeyexchange",
    "gssapirenewalforcesrekey",
    "gssapiserveridentity",
    "gssapitrustdns",
    "hashknownhosts",
    "hostbasedacceptedalgorithms",
    "hostbasedauthentication",
    "hostbasedkeytypes",
    "hostkeyalgorithms",
    "identityagent",
    "identityfile2",
    "ignoreunknown",
    "ipqos",
    "kbdinteractiveauthentication",
    "kbdinteractivedevices",
    "kerberosauthentication",
    "kerberostgtpassing",
    "kexalgorithms",
    "knownhostscommand",
    "localcommand",
    "localforward",
    "loglevel",
    "logverbose",
    "macs",
    "nohostauthenticationforlocalhost",
    "numberofpasswordprompts",
    "passwordauthentication",
    "permitlocalcommand",
    "permitremoteopen",
    "pkcs11provider",
    "preferredauthentications",
    "protocol",
    "proxyusefdpass",
    "pubkeyacceptedalgorithms",
    "pubkeyacceptedkeytypes",
    "pubkeyauthentication",
    "rekeylimit",
    "remotecommand",
    "remoteforward",
    "requesttty",
    "requiredrsasize",
    "revokedhostkeys",
    "rhostsauthentication",
    "rhostsrsaauthentication",
    "rsaauthentication",
    "securitykeyprovider",
    "sendenv",
    "sessiontype",
    "setenv",
    "skeyauthentication",
    "smartcarddevice",
    "stdinnull",
    "streamlocalbindmask",
    "streamlocalbindunlink",
    "syslogfacility",
    "tcpkeepalive",
    "tisauthentication",
    "tunnel",
    "tunneldevice",
    "updatehostkeys",
    "useprivilegedport",
    "userknownhostsfile2",
    "useroaming",
    "usersh",
    "verifyhostkeydns",
    "visualhostkey",
    "xauthlocation",
};

bool is_space(char c) { return c == ' ' || c == '\t'; }

// Where a line is, for errors.
struct Where {
  const std::string& path;
  int line;
  const char* keyword;  // the manual's spelling, or the line's for unknown ones

  [[noreturn]] void fail(const std::string& message, const std::string& hint = {}) const {
    throw InputError({path, line, 0}, keyword, message, hint);
  }
};

// OpenSSH's argv_split: whitespace-separated words, '...' and "..." quotes,
// backslash escapes of quotes, backslash and (outside quotes) space; a word
// that starts with '#' ends the line.
std::vector<std::string> split_args(std::string_view s, const Where& where) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (is_space(s[i])) {
      ++i;
      continue;
    }
    if (s[i] == '#') break;
    std::string arg;
    char quote = 0;
    for (; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '\\' && i + 1 < s.size()) {
        const char next = s[i + 1];
        if (next == '\'' || next == '"' || next == '\\' || (quote == 0 && next == ' ')) ++i;
        arg += s[i];
      } else if (quote == 0 && is_space(c)) {
        break;
      } else if (quote == 0 && (c == '"' || c == '\'')) {
        quote = c;
      } else if (quote != 0 && c == quote) {
        quote = 0;
      } else {
        arg += c;
      }
    }
    if (quote != 0) where.fail("unterminated quote");
    out.push_back(std::move(arg));
  }
  return out;
}

// A port as OpenSSH's a2port takes it: 1..65535, or a TCP service name.
std::optional<int> parse_port(std::string_view s) {
  if (s.empty()) return std::nullopt;
  if (std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (s.size() > 5) return std::nullopt;
    int value = 0;
    for (const char c : s) value = value * 10 + (c - '0');
    if (value < 1 || value > 65535) return std::nullopt;
    return value;
  }
  const std::string name(s);
  const servent* service = ::getservbyname(
      name.c_str(), "tcp");  // NOLINT(concurrency-mt-unsafe) load() runs before threads start
  if (service == nullptr) return std::nullopt;
  return ntohs(static_cast<std::uint16_t>(service->s_port));
}

// A count in 0..INT_MAX (OpenSSH's atoi_err).
std::optional<int> parse_count(std::string_view s) {
  if (s.empty()) return std::nullopt;
  long long value = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
    if (value > INT_MAX) return std::nullopt;
  }
  return static_cast<int>(value);
}

// OpenSSH's time format: "30", "1m30s", "2h", summed; whole numbers only
// here. -1 for "none"; nullopt when invalid.
std::optional<int> parse_time(std::string_view s) {
  if (s == "none") return -1;
  if (s.empty()) return std::nullopt;
  long long total = 0;
  bool seen_seconds = false;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    long long value = 0;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
      value = value * 10 + (s[i] - '0');
      if (value > INT_MAX) return std::nullopt;
    }
    long long unit = 1;
    const char suffix = i < s.size() ? static_cast<char>(std::tolower(s[i])) : '\0';
    switch (suffix) {
      case '\0':
      case 's':
        if (seen_seconds) return std::nullopt;
        seen_seconds = true;
        break;
      case 'm':
        unit = 60;
        break;
      case 'h':
        unit = 3600;
        break;
      case 'd':
        unit = 86400;
        break;
      case 'w':
        unit = 604800;
        break;
      default:
        return std::nullopt;
    }
    if (i < s.size()) ++i;
    total += value * unit;
    if (total > INT_MAX) return std::nullopt;
  }
  return static_cast<int>(total);
}

std::optional<int> parse_flag(std::string_view s) {
  const std::string v = lower(s);
  if (v == "yes" || v == "true") return 1;
  if (v == "no" || v == "false") return 0;
  return std::nullopt;
}

std::optional<StrictHostKeyChecking> parse_strict(std::string_view s) {
  const std::string v = lower(s);
  if (v == "yes" || v == "true") return StrictHostKeyChecking::kYes;
  if (v == "no" || v == "false" || v == "off") return StrictHostKeyChecking::kOff;
  if (v == "ask") return StrictHostKeyChecking::kAsk;
  if (v == "accept-new") return StrictHostKeyChecking::kAcceptNew;
  return std::nullopt;
}

bool has_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

// Which %tokens a keyword takes (readconf.c, ssh.c, sshconnect.c).
constexpr std::string_view kPathTokens = "%CdhijkLlnpru";
constexpr std::string_view kHostNameTokens = "%h";
constexpr std::string_view kProxyCommandTokens = "%hknpr";
// ProxyJump becomes a ProxyCommand, which takes these.
constexpr std::string_view kProxyJumpTokens = "%hknpr";

// Checks %tokens (and ${VAR} where `dollar`) so that resolve() cannot fail on
// them, and a leading ~ where `tilde`.
void check_expansions(std::string_view s, std::string_view tokens, bool dollar,
                      const Where& where) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && !tokens.empty()) {
      if (i + 1 == s.size()) where.fail("\"" + std::string(s) + "\": a lone % at the end");
      const char t = s[++i];
      if (tokens.find(t) != std::string_view::npos) continue;
      std::string takes = "%%";
      for (const char k : tokens) {
        if (k != '%') takes += std::string(", %") + k;
      }
      where.fail("\"" + std::string(s) + "\": unknown token %" + std::string(1, t),
                 "this keyword takes " + takes);
    }
    if (dollar && s[i] == '$' && i + 1 < s.size() && s[i + 1] == '{') {
      const std::size_t end = s.find('}', i + 2);
      if (end == std::string_view::npos) where.fail("\"" + std::string(s) + "\": ${ without its }");
      const std::string_view name = s.substr(i + 2, end - i - 2);
      const bool valid = !name.empty() && std::isdigit(static_cast<unsigned char>(name[0])) == 0 &&
                         std::all_of(name.begin(), name.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
                         });
      if (!valid) where.fail("\"" + std::string(s) + "\": bad variable name in ${...}");
      i = end;
    }
  }
}

// One ProxyJump hop: [user@]host[:port], [user@][v6addr][:port] or
// ssh://[user@]host[:port].
std::optional<ProxyHop> parse_hop(std::string_view s) {
  ProxyHop hop;
  constexpr std::string_view kScheme = "ssh://";
  if (s.size() >= kScheme.size() && lower(s.substr(0, kScheme.size())) == kScheme) {
    s.remove_prefix(kScheme.size());
    if (!s.empty() && s.back() == '/') s.remove_suffix(1);
  }
  if (const std::size_t at = s.rfind('@'); at != std::string_view::npos) {
    if (at == 0) return std::nullopt;
    hop.user = std::string(s.substr(0, at));
    s.remove_prefix(at + 1);
  }
  std::string_view port;
  if (!s.empty() && s[0] == '[') {
    const std::size_t close = s.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    hop.host = std::string(s.substr(1, close - 1));
    s.remove_prefix(close + 1);
    if (!s.empty()) {
      if (s[0] != ':') return std::nullopt;
      port = s.substr(1);
    }
  } else if (const std::size_t colon = s.find(':'); colon != std::string_view::npos) {
    hop.host = std::string(s.substr(0, colon));
    port = s.substr(colon + 1);
  } else {
    hop.host = std::string(s);
  }
  if (hop.host.empty()) return std::nullopt;
  if (!port.empty()) {
    const auto p = parse_port(port);
    if (!p) return std::nullopt;
    hop.port = *p;
  }
  const auto bad = [](const std::string& part) {
    return has_control(part) || part.find_first_of(" \t,@") != std::string::npos;
  };
  if (bad(hop.host) || bad(hop.user)) return std::nullopt;
  return hop;
}

std::string trim_right(std::string_view s) {
  while (!s.empty() &&
         (is_space(s.back()) || s.back() == '\r' || s.back() == '\n' || s.back() == '\f')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

class Loader {
 public:
  Loader(const FileSource& fs, std::string home) : fs_(fs), home_(std::move(home)) {}

  // Reads `path` as file number N at `depth`; nullopt when it does not exist.
  std::optional<std::size_t> read(const std::string& path, bool user_conf, bool private_file,
                                  int depth, const Where* from) {
    if (depth > kMaxIncludeDepth) {
      from->fail("Include nested deeper than " + std::to_string(kMaxIncludeDepth) +
                     " files (a file that includes itself?)",
                 "the chain ends at " + path);
    }
    std::optional<std::string> text = fs_.read(path, private_file);
    if (!text) return std::nullopt;
    if (parsed_.files.size() >= limits::kMaxSshConfigFiles) {
      const std::string why =
          "more than " + std::to_string(limits::kMaxSshConfigFiles) + " files to read";
      if (from != nullptr) from->fail(why);
      throw InputError({path, 0, 0}, kField, why);
    }
    total_bytes_ += text->size();
    if (total_bytes_ > limits::kMaxSshConfigBytes) {
      throw InputError({path, 0, 0}, kField,
                       "the ssh configuration is over " +
                           std::to_string(limits::kMaxSshConfigBytes >> 20) + " MiB in all");
    }
    const std::size_t index = parsed_.files.size();
    parsed_.files.push_back({path, {}});
    std::vector<Statement> statements = parse(index, *text, user_conf, depth);
    parsed_.files[index].statements = std::move(statements);
    return index;
  }

  detail::Parsed take() { return std::move(parsed_); }

 private:
  std::vector<Statement> parse(std::size_t index, std::string_view text, bool user_conf,
                               int depth) {
    std::vector<Statement> out;
    const std::string path = parsed_.files[index].path;
    int line_no = 0;
    while (!text.empty()) {
      const std::size_t end = text.find('\n');
      const std::string_view raw = text.substr(0, end);
      text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
      ++line_no;
      if (++total_lines_ > limits::kMaxSshConfigLines) {
        throw InputError({path, line_no, 0}, kField,
                         "the ssh configuration has over " +
                             std::to_string(limits::kMaxSshConfigLines) + " lines in all");
      }
      const Where line_at{path, line_no, kField};
      if (raw.size() > limits::kMaxSshConfigLineBytes) {
        line_at.fail("line longer than " + std::to_string(limits::kMaxSshConfigLineBytes) +
                     " bytes");
      }
      if (raw.find('\0') != std::string_view::npos) line_at.fail("NUL byte in the line");
      parse_line(index, path, line_no, trim_right(raw), user_conf, depth, out);
    }
    return out;
  }

  void parse_line(std::size_t index, const std::string& path, int line_no, std::string_view s,
                  bool user_conf, int depth, std::vector<Statement>& out) {
    std::size_t i = 0;
    while (i < s.size() && is_space(s[i])) ++i;
    if (i == s.size() || s[i] == '#') return;
    const std::size_t kw_start = i;
    while (i < s.size() && !is_space(s[i]) && s[i] != '=') ++i;
    const std::string keyword(s.substr(kw_start, i - kw_start));
    while (i < s.size() && is_space(s[i])) ++i;
    if (i < s.size() && s[i] == '=') ++i;
    while (i < s.size() && is_space(s[i])) ++i;
    const std::string_view rest = s.substr(i);

    const std::string key_lower = lower(keyword);
    const Keyword* known = nullptr;
    for (const Keyword& k : kKeywords) {
      if (key_lower == k.lower) known = &k;
    }
    const std::string field = known != nullptr ? detail::key_name(known->key) : keyword;
    const Where where{path, line_no, field.c_str()};
    if (keyword.empty()) where.fail("a line without a keyword");
    if (rest.empty()) where.fail("no value after the keyword");
    std::vector<std::string> args = split_args(rest, where);
    if (known == nullptr) {
      if (key_lower == "ignoreunknown" && !ignore_unknown_) ignore_unknown_ = lower(rest);
      const bool openssh = std::find(std::begin(kOpensshKeywords), std::end(kOpensshKeywords),
                                     key_lower) != std::end(kOpensshKeywords);
      const bool ignored = ignore_unknown_ && match_list_lower(key_lower, *ignore_unknown_);
      // ssh follows CNAMEs by these rules with answers of its own resolver
      // (and looks the host up even without CanonicalizeHostname): it
      // resolves every host of such a configuration.
      if (key_lower == "canonicalizepermittedcnames" && !parsed_.openssh_only) {
        parsed_.openssh_only = detail::OpensshOnly{
            path, line_no, "CanonicalizePermittedCNAMEs: ssh follows CNAMEs with its resolver"};
        return;
      }
      // Not a keyword of OpenSSH 9.2: the installed ssh decides (a newer one
      // may know it; 9.2 refuses the file, and so does dlaunch then).
      if (!openssh && !ignored && !parsed_.openssh_only) {
        parsed_.openssh_only = detail::OpensshOnly{
            path, line_no, "keyword \"" + printable(keyword) + "\" is not one dlaunch knows"};
      }
      return;  // not ours: checked for quotes, then ignored
    }

    Statement st;
    st.key = known->key;
    st.file = index;
    st.line = line_no;
    const auto one = [&]() -> const std::string& {
      if (args.empty() || args[0].empty()) where.fail("missing value");
      if (args.size() > 1) where.fail("extra arguments after \"" + args[0] + "\"");
      return args[0];
    };
    switch (st.key) {
      case Key::kHost:
        if (args.empty()) where.fail("missing pattern");
        for (const std::string& a : args) {
          if (a.empty() || a == "!") where.fail("empty pattern");
        }
        st.args = std::move(args);
        break;
      case Key::kMatch:
        st.terms = parse_match(args, where);
        break;
      case Key::kInclude:
        include(st, args, user_conf, depth, where);
        break;
      case Key::kHostName:
      case Key::kUser:
      case Key::kHostKeyAlias: {
        const std::string& v = one();
        if (has_control(v) || std::any_of(v.begin(), v.end(), is_space))
          where.fail("\"" + v + "\" holds spaces or control characters");
        // OpenSSH 9.2 expands no token in User: "%u" is a user of that name.
        if (st.key == Key::kHostName) check_expansions(v, kHostNameTokens, false, where);
        st.args = {v};
        break;
      }
      case Key::kPort: {
        const std::string& v = one();
        const auto port = parse_port(v);
        if (!port) where.fail("\"" + v + "\" is not a port (1 to 65535, or a service name)");
        st.number = *port;
        break;
      }
      case Key::kConnectTimeout:
      case Key::kServerAliveInterval: {
        const std::string& v = one();
        const auto t = parse_time(v);
        if (!t) where.fail("\"" + v + "\" is not a time (seconds, or like 1m30s, or none)");
        st.number = *t;
        break;
      }
      case Key::kServerAliveCountMax:
      case Key::kCanonicalizeMaxDots: {
        const std::string& v = one();
        const auto n = parse_count(v);
        if (!n) where.fail("\"" + v + "\" is not a count (a whole number, 0 or more)");
        st.number = *n;
        break;
      }
      case Key::kIdentitiesOnly:
      case Key::kBatchMode:
      case Key::kCanonicalizeFallbackLocal: {
        const std::string& v = one();
        const auto f = parse_flag(v);
        if (!f) where.fail("\"" + v + "\" is not yes or no");
        st.number = *f;
        break;
      }
      case Key::kStrictHostKeyChecking: {
        const std::string& v = one();
        const auto p = parse_strict(v);
        if (!p) where.fail("\"" + v + "\" is not yes, no, ask, accept-new or off");
        st.number = static_cast<int>(*p);
        break;
      }
      case Key::kIdentityFile:
      case Key::kCertificateFile: {
        const std::string& v = one();
        check_expansions(v, kPathTokens, true, where);
        st.args = {v};
        break;
      }
      case Key::kUserKnownHostsFile:
      case Key::kGlobalKnownHostsFile:
        for (std::size_t a = 0; a < args.size(); ++a) {
          if (args[a].empty()) where.fail("empty file name");
          if (lower(args[a]) == "none" && args.size() > 1)
            where.fail("\"none\" must be the only value");
          const bool user_file = st.key == Key::kUserKnownHostsFile;
          check_expansions(args[a], user_file ? kPathTokens : std::string_view{}, user_file, where);
        }
        st.args = std::move(args);
        break;
      case Key::kProxyCommand: {
        const std::string command(rest);
        st.none = lower(command) == "none";
        if (!st.none) check_expansions(command, kProxyCommandTokens, false, where);
        st.args = {command};
        break;
      }
      case Key::kProxyJump:
        parse_jump(st, rest, where);
        break;
      case Key::kCanonicalizeHostname: {
        const std::string& v = one();
        const std::string l = lower(v);
        if (l == "always") {
          st.number = 2;
        } else if (const auto f = parse_flag(l)) {
          st.number = *f;
        } else {
          where.fail("\"" + v + "\" is not yes, no or always");
        }
        break;
      }
      case Key::kCanonicalDomains:
        if (args.empty()) where.fail("missing value");
        for (std::string& a : args) {
          // `none` (no domains) only alone, as in OpenSSH 9.2.
          if (lower(a) == "none" && args.size() > 1) where.fail("\"none\" must be the only value");
          st.args.push_back(canonical_domain(a, where));
        }
        break;
    }
    out.push_back(std::move(st));
  }

  static std::vector<MatchTerm> parse_match(const std::vector<std::string>& args,
                                            const Where& where) {
    std::vector<MatchTerm> terms;
    int attributes = 0;
    for (std::size_t i = 0; i < args.size(); ++i) {
      std::string attrib = args[i];
      MatchTerm term;
      term.negate = !attrib.empty() && attrib[0] == '!';
      if (term.negate) attrib.erase(0, 1);
      std::optional<std::string> value;
      if (const std::size_t eq = attrib.find('='); eq != std::string::npos) {
        value = attrib.substr(eq + 1);
        attrib.resize(eq);
      }
      const std::string name = lower(attrib);
      if (name == "all") {
        if (attributes > 1 || value || i + 1 < args.size())
          where.fail("\"all\" cannot be combined with other criteria");
        term.criterion = Criterion::kAll;
        terms.push_back(std::move(term));
        break;
      }
      ++attributes;
      if (name == "host") {
        term.criterion = Criterion::kHost;
      } else if (name == "originalhost") {
        term.criterion = Criterion::kOriginalHost;
      } else if (name == "user") {
        term.criterion = Criterion::kUser;
      } else if (name == "localuser") {
        term.criterion = Criterion::kLocalUser;
      } else if (name == "canonical" || name == "final") {
        term.criterion = name == "canonical" ? Criterion::kCanonical : Criterion::kFinal;
        terms.push_back(std::move(term));
        continue;
      } else if (name == "exec") {
        term.criterion = Criterion::kOpenssh;
      } else {
        where.fail("unknown criterion \"" + attrib + "\"",
                   "all, canonical, final, exec, host, originalhost, user or localuser");
      }
      if (!value) {
        if (i + 1 == args.size()) where.fail("criterion \"" + attrib + "\" needs a value");
        value = args[++i];
      }
      if (value->empty()) where.fail("criterion \"" + attrib + "\" needs a value");
      term.patterns =
          term.criterion == Criterion::kOpenssh ? name + " " + *value : std::move(*value);
      terms.push_back(std::move(term));
    }
    if (terms.empty()) where.fail("no criteria");
    return terms;
  }

  // A CanonicalDomains value as OpenSSH's valid_domain takes it: a letter or
  // digit first, then letters, digits, '.', '-' and '_', no "..", in lower
  // case and without a trailing dot.
  static std::string canonical_domain(const std::string& arg, const Where& where) {
    if (arg.empty()) where.fail("empty domain name");
    if (std::isalnum(static_cast<unsigned char>(arg[0])) == 0)
      where.fail("domain name \"" + printable(arg) + "\" starts with an invalid character");
    std::string out = lower(arg);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const char c = out[i];
      if (c == '.' && i > 0 && out[i - 1] == '.')
        where.fail("domain name \"" + printable(arg) + "\" has two dots in a row");
      if (c != '.' && c != '-' && c != '_' && std::isalnum(static_cast<unsigned char>(c)) == 0)
        where.fail("domain name \"" + printable(arg) + "\" holds an invalid character");
    }
    if (out.back() == '.') out.pop_back();
    return out;
  }

  static void parse_jump(Statement& st, std::string_view rest, const Where& where) {
    if (lower(rest) == "none") {
      st.none = true;
      return;
    }
    const std::string spec = trim_right(rest.substr(0, rest.find('#')));
    std::string_view s = spec;
    while (true) {
      const std::size_t comma = s.find(',');
      const std::string_view part = s.substr(0, comma);
      const auto hop = parse_hop(part);
      if (!hop) {
        where.fail("\"" + std::string(part) + "\" is not [user@]host[:port]",
                   "a comma-separated list of jump hosts, or none");
      }
      check_expansions(hop->user, kProxyJumpTokens, false, where);
      check_expansions(hop->host, kProxyJumpTokens, false, where);
      st.hops.push_back(*hop);
      if (comma == std::string_view::npos) break;
      s.remove_prefix(comma + 1);
    }
  }

  void include(Statement& st, const std::vector<std::string>& args, bool user_conf, int depth,
               const Where& where) {
    if (args.empty()) where.fail("missing file");
    for (const std::string& arg : args) {
      if (arg.empty()) where.fail("empty file name");
      // OpenSSH 9.2 expands no %token or ${VAR} here: they are globbed as written.
      std::string pattern;
      if (arg[0] == '~') {
        if (!user_conf) where.fail("\"" + arg + "\": ~ is only for the user's files");
        const std::size_t slash = arg.find('/');
        const std::string who = arg.substr(1, slash == std::string::npos ? slash : slash - 1);
        const auto home = who.empty() ? std::optional<std::string>(home_) : detail::home_of(who);
        if (!home) where.fail("\"" + arg + "\": no user \"" + who + "\"");
        pattern = *home + (slash == std::string::npos ? "" : arg.substr(slash));
      } else if (arg[0] == '/') {
        pattern = arg;
      } else {
        pattern = (user_conf ? home_ + "/.ssh/" : std::string("/etc/ssh/")) + arg;
      }
      for (const std::string& path : fs_.glob(pattern)) {
        // Every included file gets the permission check, as in OpenSSH.
        if (auto index = read(path, user_conf, true, depth + 1, &where)) {
          st.included.push_back(*index);
        }
      }
    }
  }

  // IgnoreUnknown's patterns, the first line's (lower case, comma-separated).
  static bool match_list_lower(const std::string& word, const std::string& list) {
    bool matched = false;
    std::size_t start = 0;
    while (start <= list.size()) {
      std::size_t end = list.find(',', start);
      if (end == std::string::npos) end = list.size();
      std::string_view pattern = std::string_view(list).substr(start, end - start);
      while (!pattern.empty() && is_space(pattern.front())) pattern.remove_prefix(1);
      const bool negated = !pattern.empty() && pattern[0] == '!';
      if (negated) pattern.remove_prefix(1);
      if (wildcard_match(word, pattern)) {
        if (negated) return false;
        matched = true;
      }
      start = end + 1;
    }
    return matched;
  }

  // Control bytes as \ooo, for a message.
  static std::string printable(std::string_view s) {
    std::string out;
    for (const char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u >= 0x7f) {
        out += "\\" + std::to_string(u >> 6) + std::to_string((u >> 3) & 7) + std::to_string(u & 7);
      } else {
        out += c;
      }
    }
    return out;
  }

  const FileSource& fs_;
  std::string home_;
  detail::Parsed parsed_;
  std::optional<std::string> ignore_unknown_;
  std::size_t total_lines_ = 0;
  std::size_t total_bytes_ = 0;
};

}  // namespace

namespace detail {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const char* key_name(Key key) {
  switch (key) {
    case Key::kHost:
      return "Host";
    case Key::kMatch:
      return "Match";
    case Key::kInclude:
      return "Include";
    case Key::kHostName:
      return "HostName";
    case Key::kUser:
      return "User";
    case Key::kPort:
      return "Port";
    case Key::kIdentityFile:
      return "IdentityFile";
    case Key::kIdentitiesOnly:
      return "IdentitiesOnly";
    case Key::kCertificateFile:
      return "CertificateFile";
    case Key::kProxyJump:
      return "ProxyJump";
    case Key::kProxyCommand:
      return "ProxyCommand";
    case Key::kUserKnownHostsFile:
      return "UserKnownHostsFile";
    case Key::kGlobalKnownHostsFile:
      return "GlobalKnownHostsFile";
    case Key::kStrictHostKeyChecking:
      return "StrictHostKeyChecking";
    case Key::kHostKeyAlias:
      return "HostKeyAlias";
    case Key::kConnectTimeout:
      return "ConnectTimeout";
    case Key::kServerAliveInterval:
      return "ServerAliveInterval";
    case Key::kServerAliveCountMax:
      return "ServerAliveCountMax";
    case Key::kBatchMode:
      return "BatchMode";
    case Key::kCanonicalizeHostname:
      return "CanonicalizeHostname";
    case Key::kCanonicalDomains:
      return "CanonicalDomains";
    case Key::kCanonicalizeMaxDots:
      return "CanonicalizeMaxDots";
    case Key::kCanonicalizeFallbackLocal:
      return "CanonicalizeFallbackLocal";
  }
  return "?";
}

}  // namespace detail

SshConfig SshConfig::load(const LoadOptions& options) {
  const FileSource& fs = options.files != nullptr ? *options.files : real_files();
  const std::string home = options.home.empty() ? detail::user_home() : options.home;
  Loader loader(fs, home);
  std::vector<std::size_t> top;
  if (options.config_file) {
    if (*options.config_file != "none") {
      const auto index = loader.read(*options.config_file, true, false, 0, nullptr);
      if (!index) throw InputError({*options.config_file, 0, 0}, kField, "file not found");
      top.push_back(*index);
    }
  } else {
    if (auto index = loader.read(home + "/.ssh/config", true, true, 0, nullptr))
      top.push_back(*index);
    if (auto index = loader.read(options.system_file, false, false, 0, nullptr))
      top.push_back(*index);
  }
  auto parsed = std::make_shared<detail::Parsed>(loader.take());
  parsed->top = std::move(top);
  parsed->config_file = options.config_file;
  parsed->real_files = options.files == nullptr;
  return SshConfig(std::move(parsed));
}

std::vector<std::string> SshConfig::files() const {
  std::vector<std::string> out;
  out.reserve(parsed_->files.size());
  for (const auto& f : parsed_->files) out.push_back(f.path);
  return out;
}

}  // namespace dlaunch::ssh
