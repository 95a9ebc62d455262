// Host key verification against OpenSSH known_hosts files (plain, hashed
// `|1|salt|hash` and `[host]:port` entries), with OpenSSH's three policies.
// Each file is read once per job (KnownHostsCache), not once per connection.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

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

// Where a host's key is looked up, and which files say what about it.
struct HostKeyQuery {
  std::string name;                     // the HostName, or the HostKeyAlias
  int port = 22;                        // 22 (or a HostKeyAlias): the plain name, else [name]:port
  std::vector<std::string> user_files;  // empty: ~/.ssh/known_hosts
  std::vector<std::string> global_files;  // checked after the user files
};

// The known_hosts files of one job, each read once on first use and kept
// (with what accept-new added since). Not thread-safe: one event loop.
class KnownHostsCache {
 public:
  KnownHostsCache();
  ~KnownHostsCache();
  KnownHostsCache(const KnownHostsCache&) = delete;
  KnownHostsCache& operator=(const KnownHostsCache&) = delete;

  // Checks the key the session's server offered. A key that matches in any
  // file is accepted; one that contradicts an entry in any file is refused
  // (whatever the policy but off); an unknown key is refused under strict,
  // and appended to the first user file under accept-new.
  HostKeyVerdict verify(LIBSSH2_SESSION* session, const HostKeyQuery& query, HostKeyPolicy policy);

  // How many times a file was read (tests: once per job).
  int reads() const { return reads_; }

 private:
  struct File;
  File& file(const std::string& path, LIBSSH2_SESSION* session);
  // The collections need a session for their allocations: one of our own,
  // never connected, that lives as long as they do.
  LIBSSH2_SESSION* owner_ = nullptr;
  std::map<std::string, std::unique_ptr<File>> files_;
  int reads_ = 0;
};

// One-off check against one file (no cache).
HostKeyVerdict verify_host_key(LIBSSH2_SESSION* session, const std::string& host, int port,
                               const std::string& known_hosts_path, HostKeyPolicy policy);

// $HOME/.ssh/known_hosts (HOME from the environment, else the password database).
std::string default_known_hosts_path();
std::string home_directory();

}  // namespace dlaunch::ssh
