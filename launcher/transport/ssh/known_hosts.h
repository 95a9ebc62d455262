// Host key verification against OpenSSH known_hosts files, as OpenSSH 9.2
// decides it: names plain, with * and ? wildcards, negated (!), hashed
// (|1|salt|hash) or [host]:port; @revoked keys are refused; a known host
// that offers a key no line holds for it has CHANGED, whatever the key's
// type. Each file is read once per job (KnownHostsCache).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <libssh2.h>

#include "transport/ssh/host_key_policy.h"

namespace dlaunch::ssh {

struct HostKeyVerdict {
  bool ok = false;
  bool added = false;   // accept-new wrote a new entry
  std::string message;  // why not ok, or what was added
};

// "SHA256:<base64 without padding>" of a public key blob, like ssh-keygen -l.
std::string sha256_fingerprint(std::string_view key);

// Where a host's key is looked up, and which files say what about it.
struct HostKeyQuery {
  std::string name;                     // the HostName, or the HostKeyAlias
  int port = 22;                        // 22 (or a HostKeyAlias): the plain name, else [name]:port
  std::vector<std::string> user_files;  // empty: ~/.ssh/known_hosts
  std::vector<std::string> global_files;  // checked after the user files
};

// One line of a known_hosts file that is not blank or a comment.
struct KnownHostLine {
  enum class Marker { kNone, kRevoked, kCertAuthority };
  int line = 0;  // 1-based
  Marker marker = Marker::kNone;
  std::string hosts;   // comma-separated patterns, or one hashed |1|salt|hash
  std::string type;    // the key type as written
  std::string key;     // the decoded key blob; empty when broken
  std::string broken;  // why the line cannot be used; empty when it can
};

// Every such line, broken ones too: one about the host being checked matters.
std::vector<KnownHostLine> parse_known_hosts(std::string_view text);

// Whether a line's host field names `host` ("name" or "[name]:port", lower
// case): a hashed name, or patterns of which one matches and none negated does.
bool host_field_matches(std::string_view field, std::string_view host);

// The host key algorithms to ask for, of those libssh2 supports: the ones
// for the key types known for the host first, as ssh orders them, so that a
// host with keys of several types shows the one on record; certificate
// algorithms never (libssh2 cannot check them). Empty: keep libssh2's order.
std::string host_key_methods(const std::vector<std::string>& known_types,
                             const std::vector<std::string>& supported);

// The known_hosts files of one job, each read once on first use and kept
// (with what accept-new added since). Not thread-safe: one event loop.
class KnownHostsCache {
 public:
  // The key the session's server offered: refused if revoked, accepted if a
  // line for the host holds it; else refused if any other key is known for
  // the host (changed), if a line is unreadable or a certificate authority
  // vouches for it, or under strict; else appended to the first user file.
  HostKeyVerdict verify(LIBSSH2_SESSION* session, const HostKeyQuery& query, HostKeyPolicy policy);
  // The same for a public key blob (what libssh2_session_hostkey gives).
  HostKeyVerdict verify(std::string_view key, const HostKeyQuery& query, HostKeyPolicy policy);

  // host_key_methods for the query's host and the session's libssh2; empty
  // under policy off or when no key is known for the host.
  std::string preferred_methods(LIBSSH2_SESSION* session, const HostKeyQuery& query,
                                HostKeyPolicy policy);

  // How many times a file was read (tests: once per job).
  int reads() const { return reads_; }

 private:
  struct File {
    std::string path;
    std::vector<KnownHostLine> lines;
    int line_count = 0;  // lines in the file, for those accept-new appends
    std::string error;   // why it could not be read; empty: read (or absent)
    // Host -> its lines: a hashed name costs an HMAC per line and host, once.
    std::map<std::string, std::vector<std::size_t>> about;
  };
  HostKeyVerdict decide(std::string_view key, const HostKeyQuery& query, HostKeyPolicy policy);
  File& file(const std::string& path);
  const std::vector<std::size_t>& lines_about(File& f, const std::string& host);
  std::vector<std::string> paths(const HostKeyQuery& query) const;
  std::map<std::string, std::unique_ptr<File>> files_;
  int reads_ = 0;
};

// ~/.ssh/known_hosts, ~ being the password database's home as for ssh (not
// $HOME: see ssh_config_internal.h's user_home).
std::string default_known_hosts_path();
std::string home_directory();

}  // namespace dlaunch::ssh
