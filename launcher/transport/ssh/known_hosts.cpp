#include "transport/ssh/known_hosts.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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

HostKeyVerdict verify_host_key(LIBSSH2_SESSION* session, const std::string& host, int port,
                               const std::string& path, HostKeyPolicy policy) {
  if (policy == HostKeyPolicy::kOff)
    return {true, false, "host key not checked (--host-key-check off)"};
  std::size_t key_len = 0;
  int session_type = 0;
  const char* key = libssh2_session_hostkey(session, &key_len, &session_type);
  if (key == nullptr) return {false, false, "the server sent no host key"};
  std::string type_name;
  const int key_type = knownhost_type(session_type, type_name);
  const std::string fingerprint = sha256_fingerprint(session);

  KnownHosts kh(libssh2_knownhost_init(session));
  if (!kh) return {false, false, "cannot allocate the known_hosts store"};
  if (::access(path.c_str(), F_OK) == 0 &&
      libssh2_knownhost_readfile(kh.get(), path.c_str(), LIBSSH2_KNOWNHOST_FILE_OPENSSH) < 0) {
    return {false, false, "cannot read " + path + " (" + last_error(session) + ")"};
  }
  const int type_mask = LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | key_type;
  libssh2_knownhost* found = nullptr;
  const int check =
      libssh2_knownhost_checkp(kh.get(), host.c_str(), port, key, key_len, type_mask, &found);
  const std::string where = port == 22 ? host : "[" + host + "]:" + std::to_string(port);
  switch (check) {
    case LIBSSH2_KNOWNHOST_CHECK_MATCH:
      return {true, false, {}};
    case LIBSSH2_KNOWNHOST_CHECK_MISMATCH:
      return {false, false,
              "host key for " + where + " has CHANGED: the server offers " + type_name + " " +
                  fingerprint + ", which does not match " + path +
                  ". Refusing to connect: someone may be intercepting, or the host was reinstalled "
                  "(if so, remove the old key with: ssh-keygen -R '" +
                  where + "')"};
    case LIBSSH2_KNOWNHOST_CHECK_NOTFOUND:
      break;
    default:
      return {false, false,
              "cannot check the host key of " + where + " (" + last_error(session) + ")"};
  }
  if (policy == HostKeyPolicy::kStrict) {
    return {false, false,
            "no host key for " + where + " in " + path + " (the server offers " + type_name + " " +
                fingerprint + "); connect once with ssh, or run with --host-key-check accept-new"};
  }
  libssh2_knownhost* added = nullptr;
  if (libssh2_knownhost_addc(kh.get(), where.c_str(), nullptr, key, key_len, nullptr, 0, type_mask,
                             &added) != 0) {
    return {false, false, "cannot add the host key of " + where + " (" + last_error(session) + ")"};
  }
  char line[16384];
  std::size_t line_len = 0;
  if (libssh2_knownhost_writeline(kh.get(), added, line, sizeof line, &line_len,
                                  LIBSSH2_KNOWNHOST_FILE_OPENSSH) != 0) {
    return {false, false, "cannot format the host key of " + where};
  }
  // Append, so comments and other entries of the user's file stay as they are.
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream out(path, std::ios::app);
  out.write(line, static_cast<std::streamsize>(line_len));
  if (!out) return {false, false, "cannot append to " + path};
  return {true, true, "added " + type_name + " " + fingerprint + " for " + where + " to " + path};
}

}  // namespace dlaunch::ssh
