// Host key verification against an OpenSSH known_hosts file (plain, hashed
// `|1|salt|hash` and `[host]:port` entries), with OpenSSH's three policies.
#pragma once

#include <string>

#include <libssh2.h>

namespace dlaunch::ssh {

enum class HostKeyPolicy { kStrict, kAcceptNew, kOff };

struct HostKeyVerdict {
  bool ok = false;
  bool added = false;   // accept-new wrote a new entry
  std::string message;  // why not ok, or what was added
};

// "SHA256:<base64 without padding>" like ssh-keygen -l.
std::string sha256_fingerprint(LIBSSH2_SESSION* session);

// Checks the key the session's server offered for host:port.
HostKeyVerdict verify_host_key(LIBSSH2_SESSION* session, const std::string& host, int port,
                               const std::string& known_hosts_path, HostKeyPolicy policy);

// $HOME/.ssh/known_hosts (HOME from the environment, else the password database).
std::string default_known_hosts_path();
std::string home_directory();

}  // namespace dlaunch::ssh
