#include "output/secret_mask.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <iterator>
#include <vector>

#include "dlaunch/process.h"

namespace dlaunch {
namespace {

bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_upper(c) || is_lower(c) || is_digit(c); }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v'; }
char to_upper(char c) { return is_lower(c) ? static_cast<char>(c - 'a' + 'A') : c; }

template <class Words>
bool one_of(std::string_view s, const Words& words) {
  return std::find(std::begin(words), std::end(words), s) != std::end(words);
}
bool one_of(std::string_view s, std::initializer_list<std::string_view> words) {
  return std::find(words.begin(), words.end(), s) != words.end();
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return to_upper(x) == to_upper(y);
         });
}

// A name's words, upper-cased: split at every byte that is not an ASCII
// letter or digit, and where a lower-case letter meets an upper-case one
// (npm_config__authToken: NPM CONFIG AUTH TOKEN; AccountKey: ACCOUNT KEY).
std::vector<std::string> name_words(std::string_view name) {
  std::vector<std::string> words;
  std::string cur;
  bool prev_lower = false;
  for (char c : name) {
    if (!is_alnum(c) || (is_upper(c) && prev_lower)) {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
    }
    prev_lower = is_lower(c);
    if (is_alnum(c)) cur += to_upper(c);
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

// A value that only switches something on or off is no secret, whatever the
// variable is called (HF_HUB_DISABLE_IMPLICIT_TOKEN=1).
bool is_flag(std::string_view v) {
  for (std::string_view f : {"", "0", "1", "true", "false", "yes", "no", "on", "off"}) {
    if (iequals(v, f)) return true;
  }
  return false;
}

// Words in front of TOKEN that make it a tokenizer's token or a count of
// them (EOS_TOKEN, PAD_TOKEN_ID, MAX_TOKEN), not a credential.
constexpr std::string_view kTokenizerWords[] = {
    "BOS", "EOS", "PAD",   "UNK", "SEP",  "CLS",   "MASK",  "EOT",   "SPECIAL", "MAX",
    "MIN", "NUM", "START", "END", "STOP", "IMAGE", "VIDEO", "AUDIO", "DECODER"};
// What may stand before KEY in one word (APIKEY, ACCESSKEY) or before KEYS.
constexpr std::string_view kKeyOwners[] = {
    "API", "ACCESS",  "SECRET",  "PRIVATE", "AUTH",       "MASTER", "SIGNING", "ENCRYPTION",
    "SSH", "ACCOUNT", "LICENSE", "CLIENT",  "SERVICE",    "DEPLOY", "SESSION", "HMAC",
    "APP", "ADMIN",   "SHARED",  "CRYPT",   "DECRYPTION", "GPG",    "PGP"};
// English words and programs that end in PASS (SSH_ASKPASS names a program).
constexpr std::string_view kNotPasswords[] = {"BYPASS",   "COMPASS",  "ENCOMPASS", "SURPASS",
                                              "TRESPASS", "OVERPASS", "UNDERPASS", "ASKPASS"};
// After AUTH, words that make it the credential (DOCKER_AUTH_CONFIG), where
// other words make it a setting (OS_AUTH_URL, SSH_AUTH_SOCK).
constexpr std::string_view kAuthHolders[] = {"CONFIG", "HEADER", "HEADERS", "STRING",
                                             "VALUE",  "DATA",   "JSON",    "INFO"};
// A last word that says the variable names where a secret is, or describes
// it, rather than holding it (DB_PASSWORD_FILE, TOKEN_URL, SECRET_NAME).
constexpr std::string_view kAboutWords[] = {
    "FILE",     "FILES",    "PATH",      "DIR",    "DIRECTORY", "FOLDER",   "SOCK",    "SOCKET",
    "LOCATION", "NAME",     "ARN",       "URL",    "URI",       "ENDPOINT", "HOST",    "PORT",
    "REGION",   "TYPE",     "ALGORITHM", "LENGTH", "LEN",       "SIZE",     "TTL",     "EXPIRY",
    "TIMEOUT",  "LIFETIME", "LIMIT",     "COUNT",  "VERSION",   "MODE",     "ENABLED", "DISABLED",
    "REQUIRED", "PROVIDER", "COMMAND",   "CMD",    "PROGRAM",   "HELPER"};

bool ends_with(std::string_view s, std::string_view end) {
  return s.size() >= end.size() && s.substr(s.size() - end.size()) == end;
}

// The name rule. in_value: a key inside a value (Pwd=, --pass), where a bare
// PWD is a password rather than the shell's working directory.
bool words_say_secret(const std::vector<std::string>& w, bool in_value) {
  bool secret = false;
  bool webhook = false;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const std::string_view x = w[i];
    const std::string_view prev = i > 0 ? std::string_view(w[i - 1]) : std::string_view();
    const std::string_view next =
        i + 1 < w.size() ? std::string_view(w[i + 1]) : std::string_view();
    const bool last = i + 1 == w.size();
    webhook = webhook || x == "WEBHOOK" || x == "WEBHOOKS";
    bool hit = false;
    for (std::string_view part : {"SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL"})
      hit = hit || x.find(part) != std::string_view::npos;
    hit = hit || (ends_with(x, "TOKEN") && !(x == "TOKEN" && one_of(prev, kTokenizerWords)));
    hit = hit || (x == "KEY" && !one_of(prev, {"PUBLIC", "PUB", "PUBLISHABLE"}));
    hit = hit ||
          (x.size() > 3 && ends_with(x, "KEY") && one_of(x.substr(0, x.size() - 3), kKeyOwners));
    hit = hit || (x == "KEYS" && one_of(prev, kKeyOwners));
    hit = hit ||
          one_of(x, {"PASS", "PAT", "CRED", "CREDS", "AUTHORIZATION", "SIGNATURE", "SIG", "DSN"});
    hit = hit || ends_with(x, "JWT");
    hit = hit || (x.size() > 4 && ends_with(x, "PASS") && !one_of(x, kNotPasswords));
    hit = hit || (x == "PWD" && (w.size() > 1 || in_value));
    hit = hit || (ends_with(x, "AUTH") && (last || one_of(next, kAuthHolders)));
    hit = hit || (last && one_of(x, {"COOKIE", "COOKIES", "SAS"}));
    hit = hit || (x == "CONNECTION" && next == "STRING") ||
          one_of(x, {"CONNSTR", "CONNECTIONSTRING"});
    secret = secret || hit;
  }
  if (webhook) return true;
  return secret && !one_of(w.back(), kAboutWords);
}

// Characters of a token (base64, base64url, base62 and their separators).
bool token_char(char c) {
  return is_alnum(c) || c == '+' || c == '/' || c == '_' || c == '.' || c == '~' || c == '-';
}

struct TokenPrefix {
  std::string_view prefix;
  std::size_t min_rest;  // characters after the prefix
  bool alnum_rest;       // only letters and digits after it
};

// Published token formats (each vendor documents its prefix), so that short
// or letters-only ones are known without the entropy rule.
constexpr std::array<TokenPrefix, 31> kTokenPrefixes = {{
    {"ghp_", 30, true},     {"gho_", 30, true},         {"ghu_", 30, true},
    {"ghs_", 30, true},     {"ghr_", 30, true},         {"github_pat_", 22, false},
    {"glpat-", 20, false},  {"gldt-", 20, false},       {"glrt-", 20, false},
    {"glcbt-", 20, false},  {"hf_", 30, true},          {"AKIA", 16, true},
    {"ASIA", 16, true},     {"AIza", 30, false},        {"xoxb-", 10, false},
    {"xoxp-", 10, false},   {"xoxa-", 10, false},       {"xoxr-", 10, false},
    {"xoxs-", 10, false},   {"xoxe-", 10, false},       {"xapp-", 10, false},
    {"npm_", 30, true},     {"pypi-", 40, false},       {"sk_live_", 16, true},
    {"rk_live_", 16, true}, {"sk_test_", 16, true},     {"sk-proj-", 30, false},
    {"sk-ant-", 30, false}, {"sk-svcacct-", 30, false}, {"dckr_pat_", 20, false},
    {"SG.", 40, false},
}};

bool known_token(std::string_view w) {
  for (const auto& p : kTokenPrefixes) {
    if (!w.starts_with(p.prefix) || w.size() < p.prefix.size() + p.min_rest) continue;
    const auto rest = w.substr(p.prefix.size());
    if (std::all_of(rest.begin(), rest.end(), [&](char c) {
          return is_alnum(c) || (!p.alnum_rest && (c == '_' || c == '-' || c == '.'));
        }))
      return true;
  }
  return false;
}

double shannon_bits_per_char(std::string_view w) {
  std::array<int, 256> counts{};
  for (char c : w) ++counts[static_cast<unsigned char>(c)];
  double bits = 0;
  for (int k : counts) {
    if (k == 0) continue;
    const double p = static_cast<double>(k) / static_cast<double>(w.size());
    bits -= p * std::log2(p);
  }
  return bits;
}

// Three base64url parts, the first a JSON object ("eyJ" is base64 for '{"').
bool looks_like_jwt(std::string_view w) {
  if (!w.starts_with("eyJ") || w.size() < 20) return false;
  if (std::count(w.begin(), w.end(), '.') != 2) return false;
  const auto first_dot = w.find('.');
  const auto second_dot = w.find('.', first_dot + 1);
  if (second_dot == first_dot + 1) return false;
  return std::all_of(w.begin(), w.end(),
                     [](char c) { return is_alnum(c) || c == '-' || c == '_' || c == '.'; });
}

// A user name in a URL that is a login, not a token: ssh://git@host,
// postgres://postgres@localhost.
bool plain_login(std::string_view user) {
  if (user.empty() || user.size() > 32 || !(is_lower(user[0]) || user[0] == '_')) return false;
  int digits = 0;
  for (char c : user) {
    if (!(is_lower(c) || is_digit(c) || c == '.' || c == '_' || c == '-')) return false;
    digits += is_digit(c);
  }
  return digits <= 4;
}

std::optional<std::string> webhook_kind(std::string_view host, std::string_view path) {
  auto is_or_under = [&](std::string_view domain) {
    return iequals(host, domain) ||
           (host.size() > domain.size() && host[host.size() - domain.size() - 1] == '.' &&
            iequals(host.substr(host.size() - domain.size()), domain));
  };
  if (iequals(host, "hooks.slack.com")) return "Slack webhook URL";
  if ((is_or_under("discord.com") || is_or_under("discordapp.com")) &&
      path.find("/webhooks/") != std::string_view::npos)
    return "Discord webhook URL";
  if (is_or_under("webhook.office.com") ||
      (iequals(host, "outlook.office.com") && path.starts_with("/webhook")))
    return "Microsoft Teams webhook URL";
  return std::nullopt;
}

// Every scheme://authority in the value: credentials in it, or a webhook.
std::optional<std::string> url_kind(std::string_view v) {
  for (auto at = v.find("://"); at != std::string_view::npos; at = v.find("://", at + 3)) {
    std::size_t scheme = at;
    while (scheme > 0 && (is_alnum(v[scheme - 1]) || v[scheme - 1] == '+' || v[scheme - 1] == '.' ||
                          v[scheme - 1] == '-'))
      --scheme;
    if (scheme == at) continue;
    const std::size_t start = at + 3;
    std::size_t end = start;
    while (end < v.size() && std::string_view("/?#\"'").find(v[end]) == std::string_view::npos &&
           !is_space(v[end]))
      ++end;
    const std::string_view authority = v.substr(start, end - start);
    std::size_t path_end = end;
    while (path_end < v.size() && !is_space(v[path_end])) ++path_end;
    const std::string_view path = v.substr(end, path_end - end);
    const auto userinfo_end = authority.rfind('@');
    std::string_view host = authority;
    if (userinfo_end != std::string_view::npos) {
      const std::string_view userinfo = authority.substr(0, userinfo_end);
      host = authority.substr(userinfo_end + 1);
      const auto colon = userinfo.find(':');
      if (colon != std::string_view::npos && colon + 1 < userinfo.size())
        return "URL with a password";
      if (!plain_login(userinfo.substr(0, colon))) return "URL with credentials";
    }
    if (const auto port = host.rfind(':'); port != std::string_view::npos && !host.starts_with('['))
      host = host.substr(0, port);
    if (auto hook = webhook_kind(host, path)) return hook;
  }
  return std::nullopt;
}

bool key_char(char c) { return is_alnum(c) || c == '_' || c == '.' || c == '-'; }

// A key as the kind names it: a line of output, not a page.
std::string key_text(std::string_view key) {
  return key.size() <= 40 ? std::string(key) : std::string(key.substr(0, 40)) + "...";
}

// A key inside a value or a command line (Password, --hf-token) named like a secret.
bool secret_key(std::string_view key) {
  while (!key.empty() && key.front() == '-') key.remove_prefix(1);
  return !key.empty() && words_say_secret(name_words(key), true);
}

// KEY=VALUE (connection strings, URL queries, --opt=value), "KEY": "VALUE"
// (JSON) and --KEY VALUE (command lines) whose KEY says secret.
std::optional<std::string> field_kind(std::string_view v) {
  auto field_end = [&](std::size_t from, std::string_view stops) {
    std::size_t e = from;
    while (e < v.size() && stops.find(v[e]) == std::string_view::npos && !is_space(v[e])) ++e;
    return e;
  };
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '=') {
      std::size_t k = i;
      while (k > 0 && key_char(v[k - 1])) --k;
      const auto key = v.substr(k, i - k);
      const auto value = v.substr(i + 1, field_end(i + 1, ";&,\"'") - i - 1);
      if (secret_key(key) && !is_flag(value)) return "secret in " + key_text(key) + "=";
    } else if (v[i] == ':') {
      std::size_t q = i;
      while (q > 0 && is_space(v[q - 1])) --q;
      if (q < 2 || v[q - 1] != '"') continue;
      std::size_t k = q - 1;
      while (k > 0 && key_char(v[k - 1])) --k;
      if (k == 0 || v[k - 1] != '"') continue;
      const auto key = v.substr(k, q - 1 - k);
      std::size_t s = i + 1;
      while (s < v.size() && is_space(v[s])) ++s;
      if (s >= v.size() || v[s] != '"') continue;
      const auto close = v.find('"', s + 1);
      const auto value = v.substr(s + 1, (close == v.npos ? v.size() : close) - s - 1);
      if (secret_key(key) && !is_flag(value)) return "secret in \"" + key_text(key) + "\"";
    } else if (v[i] == '-' && i + 1 < v.size() && v[i + 1] == '-' &&
               (i == 0 || is_space(v[i - 1]))) {
      std::size_t e = i + 2;
      while (e < v.size() && key_char(v[e])) ++e;
      if (e >= v.size() || !is_space(v[e])) continue;
      const auto key = v.substr(i, e - i);
      std::size_t s = e;
      while (s < v.size() && is_space(v[s])) ++s;
      const auto value = v.substr(s, field_end(s, "") - s);
      if (secret_key(key) && !value.empty() && value[0] != '-' && !is_flag(value))
        return "secret after " + key_text(key);
    }
  }
  return std::nullopt;
}

// "Authorization: Bearer ..." or "Basic ..." with what follows.
bool has_authorization(std::string_view v) {
  for (std::string_view scheme : {"Bearer ", "Basic "}) {
    for (auto at = v.find(scheme); at != std::string_view::npos; at = v.find(scheme, at + 1)) {
      auto s = at + scheme.size();
      while (s < v.size() && is_space(v[s])) ++s;
      std::size_t e = s;
      bool mixed = false;  // not a word: "Basic configuration" is prose
      while (e < v.size() && (token_char(v[e]) || v[e] == '=')) {
        mixed = mixed || is_digit(v[e]) || (e > s && is_upper(v[e])) || v[e] == '+' ||
                v[e] == '/' || v[e] == '=';
        ++e;
      }
      if (e - s >= 8 && mixed) return true;
    }
  }
  return false;
}

}  // namespace

bool looks_like_token(std::string_view w) {
  if (known_token(w)) return true;
  // Long enough to be random rather than chosen (20: the shortest common
  // token bodies), and not a path.
  if (w.size() < 20 || w.find_first_of("/.~") == 0) return false;
  if (!std::all_of(w.begin(), w.end(), token_char)) return false;
  // One long piece between separators: names, versions and hostnames are
  // made of short ones (meta-llama/Llama-3.1-8B, ip-10-0-1-2.ec2.internal).
  std::size_t piece = 0;
  std::size_t longest = 0;
  int upper = 0;
  int lower = 0;
  int hex = 0;
  int alnum = 0;
  int lower_runs = 0;
  bool in_lower = false;
  for (char c : w) {
    piece = is_alnum(c) ? piece + 1 : 0;
    longest = std::max(longest, piece);
    upper += is_upper(c);
    lower += is_lower(c);
    alnum += is_alnum(c);
    hex += is_digit(c) || (to_upper(c) >= 'A' && to_upper(c) <= 'F');
    lower_runs += is_lower(c) && !in_lower;
    in_lower = is_lower(c);
  }
  if (longest < 12) return false;
  // Mostly hex digits: ids, hashes, UUIDs (GPU-3f2b...), never hidden by shape.
  if (hex * 10 > alnum * 7) return false;
  // Random letters are about half capitals; names have one per word.
  if (upper == 0 || lower == 0 || std::min(upper, lower) * 4 < upper + lower) return false;
  // Words leave long runs of small letters (3 and more on average; random: 1.7).
  if (lower >= 3 * lower_runs) return false;
  const double need = std::min(4.0, 0.8 * std::log2(static_cast<double>(w.size())));
  return shannon_bits_per_char(w) >= need;
}

bool name_says_secret(std::string_view name, std::string_view value) {
  const auto words = name_words(name);
  return !words.empty() && words_say_secret(words, false) && !is_flag(value);
}

std::optional<std::string> value_secret_kind(std::string_view v) {
  if (v.find("-----BEGIN ") != v.npos && v.find("PRIVATE KEY") != v.npos) return "private key";
  if (auto url = url_kind(v)) return url;
  if (auto field = field_kind(v)) return field;
  if (has_authorization(v)) return "authorization header";
  // Every word of the value, split where no token character is.
  for (std::size_t i = 0; i < v.size();) {
    while (i < v.size() && !token_char(v[i])) ++i;
    std::size_t e = i;
    while (e < v.size() && token_char(v[e])) ++e;
    const auto word = v.substr(i, e - i);
    if (looks_like_jwt(word)) return "JWT";
    if (looks_like_token(word)) return "looks like a token";
    i = e;
  }
  return std::nullopt;
}

std::optional<std::string> secret_kind(std::string_view name, std::string_view value) {
  if (name_says_secret(name, value)) return "named like a secret";
  return value_secret_kind(value);
}

std::optional<std::string> argument_secret_kind(std::string_view previous, std::string_view arg) {
  if (auto kind = value_secret_kind(arg)) return kind;
  if (previous.starts_with('-') && previous.find('=') == previous.npos && !arg.starts_with('-') &&
      !is_flag(arg) && secret_key(previous))
    return "secret after " + key_text(previous);
  return std::nullopt;
}

std::string SecretMask::operator()(std::string_view name, std::string_view value) {
  return shown(show_ ? std::nullopt : secret_kind(name, value), value);
}

std::string SecretMask::argument(std::string_view previous, std::string_view arg) {
  return shown(show_ ? std::nullopt : argument_secret_kind(previous, arg), arg);
}

std::string SecretMask::shown(const std::optional<std::string>& kind, std::string_view value) {
  if (!kind) return shell_quote(value);
  ++hidden_;
  // Characters, not bytes: a UTF-8 password is as long as it reads.
  const auto chars =
      std::count_if(value.begin(), value.end(), [](char c) { return (c & 0xC0) != 0x80; });
  return "<hidden: " + *kind + ", " + std::to_string(chars) + " chars>";
}

}  // namespace dlaunch
