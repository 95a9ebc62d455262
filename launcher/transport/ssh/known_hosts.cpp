#include "transport/ssh/known_hosts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "dlaunch/debug.h"
#include "dlaunch/process.h"
#include "dlaunch/text.h"
#include "dlaunch/tunables.h"
#include "dlaunch/unique_fd.h"
#include "ssh_config/ssh_config_internal.h"

namespace dlaunch::ssh {
namespace {

// What a key type name may hold ("ssh-ed25519", "sk-ssh-ed25519@openssh.com"):
// a server's key is written to known_hosts, never a line break.
constexpr char kTypeChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@.-_";

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(std::string_view data, bool pad) {
  std::string out;
  std::size_t i = 0;
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(data[k]); };
  for (; i + 2 < data.size(); i += 3) {
    const unsigned v = (byte(i) << 16) | (byte(i + 1) << 8) | byte(i + 2);
    for (int k = 18; k >= 0; k -= 6) out += kBase64[(v >> k) & 63];
  }
  const std::size_t rest = data.size() - i;
  if (rest > 0) {
    const unsigned v = (byte(i) << 16) | (rest == 2 ? byte(i + 1) << 8 : 0);
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    if (rest == 2) out += kBase64[(v >> 6) & 63];
    if (pad) out.append(3 - rest, '=');
  }
  return out;
}

// Strict: the standard alphabet, padding only at the end; nullopt otherwise.
std::optional<std::string> unbase64(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  unsigned acc = 0;
  int bits = 0;
  for (const char c : text) {
    const char* at = std::strchr(kBase64, c);
    if (c == '\0' || at == nullptr) return std::nullopt;
    acc = (acc << 6) | static_cast<unsigned>(at - kBase64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  if (bits >= 6) return std::nullopt;  // a lone trailing character
  return out;
}

// The type name a public key blob starts with (an SSH string); empty if none.
std::string blob_type(std::string_view key) {
  if (key.size() < 4) return {};
  const auto b = [&](std::size_t k) {
    return static_cast<std::uint32_t>(static_cast<unsigned char>(key[k]));
  };
  const std::uint32_t n = (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
  if (n == 0 || n > key.size() - 4) return {};
  return std::string(key.substr(4, n));
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// |1|base64(salt)|base64(HMAC-SHA1(salt, host)), as ssh-keygen -H writes it.
bool hashed_name_matches(std::string_view field, std::string_view host) {
  field.remove_prefix(3);
  const std::size_t bar = field.find('|');
  if (bar == std::string_view::npos) return false;
  const auto salt = unbase64(field.substr(0, bar));
  const auto hash = unbase64(field.substr(bar + 1));
  if (!salt || !hash || salt->empty() || hash->size() != 20) return false;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned mac_len = 0;
  if (HMAC(EVP_sha1(), salt->data(), static_cast<int>(salt->size()),
           reinterpret_cast<const unsigned char*>(host.data()), host.size(), mac,
           &mac_len) == nullptr) {
    return false;
  }
  return mac_len == hash->size() && std::memcmp(mac, hash->data(), mac_len) == 0;
}

// The first `n` blank-separated fields; what follows (a comment) is not needed.
std::vector<std::string_view> fields(std::string_view s, std::size_t n) {
  std::vector<std::string_view> out;
  while (out.size() < n) {
    const std::size_t start = s.find_first_not_of(" \t");
    if (start == std::string_view::npos) break;
    s.remove_prefix(start);
    const std::size_t end = s.find_first_of(" \t");
    out.push_back(s.substr(0, end));
    s.remove_prefix(end == std::string_view::npos ? s.size() : end);
  }
  return out;
}

// "ssh-ed25519" -> "ED25519", as ssh names key types in its messages.
std::string short_type(const std::string& type) {
  if (type == "ssh-ed25519") return "ED25519";
  if (type.rfind("ecdsa-sha2-", 0) == 0) return "ECDSA";
  if (type == "ssh-rsa") return "RSA";
  if (type == "ssh-dss") return "DSA";
  return printable(type);
}

// The algorithms libssh2 may negotiate for a key type.
std::vector<std::string> methods_for(const std::string& type) {
  if (type == "ssh-rsa") return {"rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"};
  return {type};
}

}  // namespace

std::string home_directory() { return detail::user_home(); }

std::string default_known_hosts_path() { return home_directory() + "/.ssh/known_hosts"; }

std::string sha256_fingerprint(std::string_view key) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned md_len = 0;
  if (EVP_Digest(key.data(), key.size(), md, &md_len, EVP_sha256(), nullptr) != 1)
    return "SHA256:?";
  return "SHA256:" + base64(std::string_view(reinterpret_cast<const char*>(md), md_len), false);
}

std::vector<KnownHostLine> parse_known_hosts(std::string_view text) {
  std::vector<KnownHostLine> out;
  int line_no = 0;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view raw = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line_no;
    while (!raw.empty() && (raw.back() == '\r' || raw.back() == ' ' || raw.back() == '\t'))
      raw.remove_suffix(1);
    const std::size_t first = raw.find_first_not_of(" \t");
    if (first == std::string_view::npos || raw[first] == '#') continue;
    KnownHostLine l;
    l.line = line_no;
    std::vector<std::string_view> f = fields(raw, 4);
    if (f[0][0] == '@') {
      if (f[0] == "@revoked") {
        l.marker = KnownHostLine::Marker::kRevoked;
      } else if (f[0] == "@cert-authority") {
        l.marker = KnownHostLine::Marker::kCertAuthority;
      } else {
        l.broken =
            "unknown marker " + printable(f[0]) + " (ssh knows @revoked and @cert-authority)";
      }
      f.erase(f.begin());
    }
    if (!f.empty()) l.hosts = std::string(f[0]);
    if (f.size() > 1) l.type = std::string(f[1]);
    if (!l.broken.empty()) {
      out.push_back(std::move(l));
      continue;
    }
    if (f.size() < 3) {
      l.broken =
          f.size() < 2 ? "no key type and key after the host names" : "no key after the key type";
    } else if (const auto key = unbase64(f[2]); !key) {
      l.broken = "the key is not base64";
    } else if (const std::string inner = blob_type(*key); inner != l.type) {
      l.broken = inner.empty() ? "the key is not an SSH public key"
                               : "the key is " + printable(inner) + ", not " + printable(l.type) +
                                     " as the line says";
    } else {
      l.key = *key;
    }
    out.push_back(std::move(l));
  }
  return out;
}

bool host_field_matches(std::string_view field, std::string_view host) {
  if (field.rfind("|1|", 0) == 0) return hashed_name_matches(field, host);
  bool positive = false;
  while (!field.empty()) {
    const std::size_t comma = field.find(',');
    std::string_view pattern = field.substr(0, comma);
    field.remove_prefix(comma == std::string_view::npos ? field.size() : comma + 1);
    const bool negated = !pattern.empty() && pattern[0] == '!';
    if (negated) pattern.remove_prefix(1);
    if (!wildcard_match(host, lower(pattern))) continue;
    if (negated) return false;
    positive = true;
  }
  return positive;
}

std::string host_key_methods(const std::vector<std::string>& known_types,
                             const std::vector<std::string>& supported) {
  if (known_types.empty()) return {};
  std::vector<std::string> wanted;
  for (const auto& type : known_types) {
    for (const auto& m : methods_for(type)) wanted.push_back(m);
  }
  std::string first;
  std::string rest;
  for (const auto& m : supported) {
    if (m.find("-cert-") != std::string::npos) continue;
    std::string& to = std::find(wanted.begin(), wanted.end(), m) != wanted.end() ? first : rest;
    to += (to.empty() ? "" : ",") + m;
  }
  if (first.empty()) return {};
  return rest.empty() ? first : first + "," + rest;
}

KnownHostsCache::File& KnownHostsCache::file(const std::string& path) {
  auto it = files_.find(path);
  if (it != files_.end()) return *it->second;
  auto f = std::make_unique<File>();
  f->path = path;
  ++reads_;
  const char* state = "absent";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd && errno != ENOENT && errno != ENOTDIR) {
    f->error = "cannot read " + path + " (" + std::strerror(errno) + ")";
  } else if (fd) {
    std::string text;
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        f->error = "cannot read " + path + " (" + std::strerror(errno) + ")";
        break;
      }
      if (n == 0) break;
      if (text.size() + static_cast<std::size_t>(n) > limits::kMaxInputFileBytes) {
        f->error = "cannot read " + path + " (larger than " +
                   std::to_string(limits::kMaxInputFileBytes >> 20) + " MiB)";
        break;
      }
      text.append(buf, static_cast<std::size_t>(n));
    }
    if (f->error.empty()) {
      f->lines = parse_known_hosts(text);
      f->line_count = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
      if (!text.empty() && text.back() != '\n') ++f->line_count;
      state = "read";
    }
  }
  if (debug_enabled("ssh")) {
    std::fprintf(stderr, "dlaunch: ssh: known_hosts %s: %s\n", path.c_str(),
                 f->error.empty() ? state : f->error.c_str());
  }
  return *files_.emplace(path, std::move(f)).first->second;
}

const std::vector<std::size_t>& KnownHostsCache::lines_about(File& f, const std::string& host) {
  auto it = f.about.find(host);
  if (it != f.about.end()) return it->second;
  std::vector<std::size_t> found;
  for (std::size_t i = 0; i < f.lines.size(); ++i) {
    if (host_field_matches(f.lines[i].hosts, host)) found.push_back(i);
  }
  return f.about.emplace(host, std::move(found)).first->second;
}

std::vector<std::string> KnownHostsCache::paths(const HostKeyQuery& q) const {
  std::vector<std::string> out =
      q.user_files.empty() ? std::vector<std::string>{default_known_hosts_path()} : q.user_files;
  out.insert(out.end(), q.global_files.begin(), q.global_files.end());
  return out;
}

std::string KnownHostsCache::preferred_methods(LIBSSH2_SESSION* session, const HostKeyQuery& q,
                                               HostKeyPolicy policy) {
  if (policy == HostKeyPolicy::kOff) return {};
  const std::string host =
      lower(q.port == 22 ? q.name : "[" + q.name + "]:" + std::to_string(q.port));
  std::vector<std::string> known;
  for (const auto& path : paths(q)) {
    File& f = file(path);
    for (const std::size_t i : lines_about(f, host)) {
      const KnownHostLine& l = f.lines[i];
      if (l.marker != KnownHostLine::Marker::kNone || !l.broken.empty()) continue;
      if (std::find(known.begin(), known.end(), l.type) == known.end()) known.push_back(l.type);
    }
  }
  const char** algs = nullptr;
  const int n = libssh2_session_supported_algs(session, LIBSSH2_METHOD_HOSTKEY, &algs);
  if (n <= 0) return {};
  std::vector<std::string> supported(algs, algs + n);
  libssh2_free(session, static_cast<void*>(algs));
  return host_key_methods(known, supported);
}

HostKeyVerdict KnownHostsCache::verify(LIBSSH2_SESSION* session, const HostKeyQuery& q,
                                       HostKeyPolicy policy) {
  if (policy == HostKeyPolicy::kOff) return {true, false, "host key not checked (policy off)"};
  std::size_t key_len = 0;
  int session_type = 0;
  const char* key = libssh2_session_hostkey(session, &key_len, &session_type);
  if (key == nullptr) return {false, false, "the server sent no host key"};
  return verify(std::string_view(key, key_len), q, policy);
}

HostKeyVerdict KnownHostsCache::verify(std::string_view key, const HostKeyQuery& q,
                                       HostKeyPolicy policy) {
  HostKeyVerdict v = decide(key, q, policy);
  v.message = printable(v.message);  // names and paths from files the user may not have written
  return v;
}

HostKeyVerdict KnownHostsCache::decide(std::string_view key, const HostKeyQuery& q,
                                       HostKeyPolicy policy) {
  if (policy == HostKeyPolicy::kOff) return {true, false, "host key not checked (policy off)"};
  const std::string type = blob_type(key);
  if (type.empty() || type.find_first_not_of(kTypeChars) != std::string::npos) {
    return {false, false, "the server's host key is not an SSH public key"};
  }
  const std::string offer = type + " " + sha256_fingerprint(key);
  const std::string where = q.port == 22 ? q.name : "[" + q.name + "]:" + std::to_string(q.port);
  const std::string host = lower(where);

  // The first line of each kind that is about this host, across the files in order.
  struct Hit {
    const File* file = nullptr;
    const KnownHostLine* line = nullptr;
    explicit operator bool() const { return line != nullptr; }
    std::string at() const { return file->path + ":" + std::to_string(line->line); }
  };
  Hit revoked, match, other, broken, authority;
  const std::vector<std::string> files = paths(q);
  std::string checked;
  for (const auto& path : files) {
    File& f = file(path);
    if (!f.error.empty()) return {false, false, f.error};
    checked += (checked.empty() ? "" : ", ") + path;
    for (const std::size_t i : lines_about(f, host)) {
      const KnownHostLine& l = f.lines[i];
      Hit* slot = nullptr;
      if (!l.broken.empty()) {
        slot = &broken;
      } else if (l.marker == KnownHostLine::Marker::kRevoked) {
        slot = l.key == key ? &revoked : nullptr;
      } else if (l.marker == KnownHostLine::Marker::kCertAuthority) {
        slot = &authority;
      } else {
        slot = l.key == key ? &match : &other;
      }
      if (slot != nullptr && !*slot) *slot = Hit{&f, &l};
    }
  }
  const std::string verify_first =
      "Check with the host's administrator that " + sha256_fingerprint(key) + " is its key";
  if (revoked) {
    return {false, false,
            "the " + short_type(type) + " host key of " + where + " (" + offer +
                ") is marked as revoked in " + revoked.at() +
                ": a stolen key may be in use to impersonate the host. Refusing to connect; ask "
                "the host's administrator for its new key"};
  }
  if (match) return {true, false, {}};
  if (other) {
    return {false, false,
            "host key for " + where + " has CHANGED: the server offers " + offer + ", but " +
                other.at() + " holds another " + short_type(other.line->type) +
                " key for it. Someone may be intercepting the connection, or the host has a new "
                "key. Refusing to connect. " +
                verify_first + "; if it is, remove the old key with: ssh-keygen -R " +
                shell_quote(host) + " -f " + shell_quote(other.file->path) + " and connect again"};
  }
  if (broken) {
    return {
        false, false,
        broken.at() + ": cannot read this known_hosts line about " + where + ": " +
            broken.line->broken +
            ". ssh skips such lines; dlaunch will not decide without it: fix or remove the line"};
  }
  if (authority) {
    return {false, false,
            authority.at() + " says a certificate authority signs the keys of " + where +
                " (@cert-authority), but dlaunch's own SSH client (libssh2) cannot check host "
                "certificates, and will not take the plain key the server offers (" +
                offer +
                ") in their place. Use the system's ssh for this host (--ssh openssh, or "
                "ssh: openssh in the hostfile), or add the host's own key to " +
                files.front() + " after checking its fingerprint"};
  }
  if (policy == HostKeyPolicy::kStrict) {
    return {false, false,
            "no host key for " + where + " in " + checked + " (the server offers " + offer + "). " +
                verify_first +
                ", then record it: connect once with ssh, which shows the fingerprint and "
                "asks, or add the key to " +
                files.front() + " yourself"};
  }

  // accept-new: append, so comments and other entries of the user's file stay as they are.
  File& target = file(files.front());
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(target.path).parent_path(), ec);
  // Read and write: the last byte says whether the file ends its last line.
  constexpr int kFlags = O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY;
  UniqueFd fd(::open(target.path.c_str(), O_RDWR | kFlags, 0666));
  if (!fd && errno == EACCES) fd = UniqueFd(::open(target.path.c_str(), O_WRONLY | kFlags, 0666));
  std::string line = host + " " + type + " " + base64(key, true) + "\n";
  struct stat st {};
  char last = '\n';
  if (fd && ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
      ::pread(fd.get(), &last, 1, st.st_size - 1) == 1 && last != '\n') {
    line.insert(line.begin(), '\n');  // never glue the entry to an unterminated last line
  }
  if (!fd || ::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return {false, false, "cannot append to " + target.path + " (" + std::strerror(errno) + ")"};
  }
  KnownHostLine added;
  added.hosts = host;
  added.type = type;
  added.key = std::string(key);
  added.line = ++target.line_count;
  if (auto it = target.about.find(host); it != target.about.end())
    it->second.push_back(target.lines.size());
  target.lines.push_back(std::move(added));
  return {true, true, "added " + offer + " for " + where + " to " + target.path};
}

}  // namespace dlaunch::ssh
