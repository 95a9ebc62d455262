#include "transport/ssh/known_hosts.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "dlaunch/debug.h"
#include "transport/ssh/libssh2_handles.h"

namespace dlaunch::ssh {
namespace {

std::string base64_unpadded(const unsigned char* data, std::size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < n; i += 3) {
    const unsigned v = (data[i] << 16) | (data[i + 1] << 8) | data[i + 2];
    for (int k = 18; k >= 0; k -= 6) out += kAlphabet[(v >> k) & 63];
  }
  if (i + 1 == n) {
    const unsigned v = data[i] << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
  } else if (i + 2 == n) {
    const unsigned v = (data[i] << 16) | (data[i + 1] << 8);
    for (int k = 18; k >= 6; k -= 6) out += kAlphabet[(v >> k) & 63];
  }
  return out;
}

// libssh2's session key type -> the known-host key type bits and a name.
int knownhost_type(int session_type, std::string& name) {
  switch (session_type) {
    case LIBSSH2_HOSTKEY_TYPE_RSA:
      name = "ssh-rsa";
      return LIBSSH2_KNOWNHOST_KEY_SSHRSA;
    case LIBSSH2_HOSTKEY_TYPE_DSS:
      name = "ssh-dss";
      return LIBSSH2_KNOWNHOST_KEY_SSHDSS;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_256:
      name = "ecdsa-sha2-nistp256";
      return LIBSSH2_KNOWNHOST_KEY_ECDSA_256;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_384:
      name = "ecdsa-sha2-nistp384";
      return LIBSSH2_KNOWNHOST_KEY_ECDSA_384;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_521:
      name = "ecdsa-sha2-nistp521";
      return LIBSSH2_KNOWNHOST_KEY_ECDSA_521;
    case LIBSSH2_HOSTKEY_TYPE_ED25519:
      name = "ssh-ed25519";
      return LIBSSH2_KNOWNHOST_KEY_ED25519;
    default:
      name = "unknown";
      return LIBSSH2_KNOWNHOST_KEY_UNKNOWN;
  }
}

}  // namespace

std::string home_directory() {
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return home;
  if (const passwd* pw = ::getpwuid(::getuid())) return pw->pw_dir;
  return "/";
}

std::string default_known_hosts_path() { return home_directory() + "/.ssh/known_hosts"; }

std::string sha256_fingerprint(LIBSSH2_SESSION* session) {
  const char* hash = libssh2_hostkey_hash(session, LIBSSH2_HOSTKEY_HASH_SHA256);
  if (hash == nullptr) return "SHA256:?";
  return "SHA256:" + base64_unpadded(reinterpret_cast<const unsigned char*>(hash), 32);
}

struct KnownHostsCache::File {
  KnownHosts kh;
  std::string error;  // why it could not be read; empty: read (or absent)
};

KnownHostsCache::KnownHostsCache() {
  init_library();
  owner_ = libssh2_session_init_ex(nullptr, nullptr, nullptr, nullptr);
}

KnownHostsCache::~KnownHostsCache() {
  files_.clear();  // the collections before the session they were made with
  if (owner_ != nullptr) libssh2_session_free(owner_);
}

KnownHostsCache::File& KnownHostsCache::file(const std::string& path, LIBSSH2_SESSION* session) {
  auto it = files_.find(path);
  if (it != files_.end()) return *it->second;
  auto f = std::make_unique<File>();
  ++reads_;
  f->kh.reset(owner_ != nullptr ? libssh2_knownhost_init(owner_) : nullptr);
  if (!f->kh) {
    f->error = "cannot allocate the known_hosts store";
  } else if (::access(path.c_str(), F_OK) == 0 &&
             libssh2_knownhost_readfile(f->kh.get(), path.c_str(), LIBSSH2_KNOWNHOST_FILE_OPENSSH) <
                 0) {
    f->error =
        "cannot read " + path + " (" + last_error(owner_ != nullptr ? owner_ : session) + ")";
  }
  if (debug_enabled("ssh")) {
    std::fprintf(stderr, "dlaunch: ssh: known_hosts %s: %s\n", path.c_str(),
                 !f->error.empty()                   ? f->error.c_str()
                 : ::access(path.c_str(), F_OK) == 0 ? "read"
                                                     : "absent");
  }
  return *files_.emplace(path, std::move(f)).first->second;
}

HostKeyVerdict KnownHostsCache::verify(LIBSSH2_SESSION* session, const HostKeyQuery& q,
                                       HostKeyPolicy policy) {
  if (policy == HostKeyPolicy::kOff) return {true, false, "host key not checked (policy off)"};
  std::size_t key_len = 0;
  int session_type = 0;
  const char* key = libssh2_session_hostkey(session, &key_len, &session_type);
  if (key == nullptr) return {false, false, "the server sent no host key"};
  std::string type_name;
  const int key_type = knownhost_type(session_type, type_name);
  const std::string fingerprint = sha256_fingerprint(session);
  const int type_mask = LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | key_type;
  const std::string where = q.port == 22 ? q.name : "[" + q.name + "]:" + std::to_string(q.port);

  std::vector<std::string> paths =
      q.user_files.empty() ? std::vector<std::string>{default_known_hosts_path()} : q.user_files;
  paths.insert(paths.end(), q.global_files.begin(), q.global_files.end());
  std::string checked;
  std::string mismatch_in;
  for (const auto& path : paths) {
    File& f = file(path, session);
    if (!f.error.empty()) return {false, false, f.error};
    checked += (checked.empty() ? "" : ", ") + path;
    libssh2_knownhost* found = nullptr;
    const int check = libssh2_knownhost_checkp(f.kh.get(), q.name.c_str(), q.port, key, key_len,
                                               type_mask, &found);
    if (check == LIBSSH2_KNOWNHOST_CHECK_MATCH) return {true, false, {}};
    if (check == LIBSSH2_KNOWNHOST_CHECK_MISMATCH) {
      if (mismatch_in.empty()) mismatch_in = path;
    } else if (check != LIBSSH2_KNOWNHOST_CHECK_NOTFOUND) {
      return {false, false,
              "cannot check the host key of " + where + " (" + last_error(session) + ")"};
    }
  }
  if (!mismatch_in.empty()) {
    return {false, false,
            "host key for " + where + " has CHANGED: the server offers " + type_name + " " +
                fingerprint + ", which does not match " + mismatch_in +
                ". Refusing to connect: someone may be intercepting, or the host was reinstalled "
                "(if so, remove the old key with: ssh-keygen -R '" +
                where + "')"};
  }
  if (policy == HostKeyPolicy::kStrict) {
    return {false, false,
            "no host key for " + where + " in " + checked + " (the server offers " + type_name +
                " " + fingerprint +
                "); connect once with ssh, or run with --host-key-check accept-new"};
  }
  const std::string& target = paths.front();
  File& f = file(target, session);
  libssh2_knownhost* added = nullptr;
  if (libssh2_knownhost_addc(f.kh.get(), where.c_str(), nullptr, key, key_len, nullptr, 0,
                             type_mask, &added) != 0) {
    return {false, false, "cannot add the host key of " + where + " (" + last_error(owner_) + ")"};
  }
  char line[16384];
  std::size_t line_len = 0;
  if (libssh2_knownhost_writeline(f.kh.get(), added, line, sizeof line, &line_len,
                                  LIBSSH2_KNOWNHOST_FILE_OPENSSH) != 0) {
    return {false, false, "cannot format the host key of " + where};
  }
  // Append, so comments and other entries of the user's file stay as they are.
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(target).parent_path(), ec);
  std::ofstream out(target, std::ios::app);
  out.write(line, static_cast<std::streamsize>(line_len));
  if (!out) return {false, false, "cannot append to " + target};
  return {true, true, "added " + type_name + " " + fingerprint + " for " + where + " to " + target};
}

HostKeyVerdict verify_host_key(LIBSSH2_SESSION* session, const std::string& host, int port,
                               const std::string& path, HostKeyPolicy policy) {
  KnownHostsCache cache;
  return cache.verify(session, {.name = host, .port = port, .user_files = {path}}, policy);
}

}  // namespace dlaunch::ssh
