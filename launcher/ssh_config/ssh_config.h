// OpenSSH client configuration (~/.ssh/config, /etc/ssh/ssh_config), read the
// way ssh(1) reads it, for the keywords dlaunch uses: HostName, User, Port,
// IdentityFile, IdentitiesOnly, CertificateFile, ProxyJump, ProxyCommand,
// UserKnownHostsFile, GlobalKnownHostsFile, StrictHostKeyChecking,
// HostKeyAlias, ConnectTimeout, ServerAliveInterval, ServerAliveCountMax and
// BatchMode. Every other keyword of OpenSSH 9.2 is split into arguments (bad
// quotes are still an error, as in OpenSSH) and ignored; one OpenSSH 9.2 does
// not have (and IgnoreUnknown does not cover) is left to the installed ssh.
//
// Contract: SshConfig::load reads the files (user file then system file, or
// the -F file alone), follows Includes and checks every line of every file,
// whether or not a host will match it, as OpenSSH does; SshConfig::resolve
// then applies the blocks that match one host. Both throw InputError
// (ErrorKind::kInput) naming the file, the line and the keyword, with control
// bytes escaped. A loaded SshConfig is immutable: resolve() may be called
// from any thread, except where it asks ssh -G (below), which runs a process.
//
// Semantics (readconf.c, ssh.c, checked against `ssh -G` by
// tests/integration/ssh_config_diff):
// - The first value obtained for a keyword wins. IdentityFile and
//   CertificateFile accumulate over every matching line (duplicates and
//   `none` dropped; `IdentityFile none` alone means no key file at all);
//   UserKnownHostsFile and GlobalKnownHostsFile take their first line, which
//   may list several files. ProxyJump and ProxyCommand share one slot: the
//   first of the two wins (`ProxyJump none` only blocks later ProxyJumps).
//   ConnectTimeout and ServerAliveInterval 0 mean none (no timeout, no
//   keepalive); `none` leaves them unset.
// - `Host` patterns (`*`, `?`, `!`) match the alias as given, case-sensitively;
//   a negated match makes the line not match. `Match host` matches the
//   HostName chosen so far (its %h expanded to the alias), `originalhost` the
//   alias, `user` the remote user so far, `localuser` the local user; pattern
//   lists are comma-separated with `!` per pattern, `!` before a criterion
//   negates it. `Match canonical` and `final` hold in the second pass only.
//   `Match exec` is evaluated by OpenSSH only: a host whose walk reaches one
//   on a line that may still match is resolved with `ssh -G`
//   (HostConfig::resolved_by says why), as is every host of a configuration
//   with a keyword OpenSSH 9.2 does not have, or with
//   CanonicalizePermittedCNAMEs (ssh follows CNAMEs with its own resolver's
//   answers). Other criteria are an error.
// - CanonicalizeHostname (ssh.c's resolve_canonicalize): after the first
//   pass, the host name (HostName, else the alias; lower case) is
//   canonicalized when it is no address, has at most CanonicalizeMaxDots
//   dots (default 1) and the connection is direct (no ProxyJump, not even
//   `none`, no ProxyCommand; `always`: also then): NAME. as given when it
//   ends with a dot, else NAME.DOMAIN. for each of CanonicalDomains in turn
//   (`none` alone: no domains), the first the resolver knows (ResolveContext::resolves).
//   None known: the name stays (CanonicalizeFallbackLocal yes, the default)
//   or resolve() throws InputError naming that line, as ssh refuses to
//   connect. Then, as after `Match final` in the first pass, a second pass
//   walks the files again: HostName is the canonical name, `Host` lines
//   match it (not the alias), values the first pass set stay.
// - Include: globbed paths, relative to ~/.ssh (user file, -F file) or
//   /etc/ssh (system file); `~` and `~user` only in user files; %tokens and
//   ${VAR} are not expanded (OpenSSH 9.2 globs them as written); no match is
//   not an error; nesting deeper than 16 is. An Include in a block that does
//   not match is read and checked but applies nothing; a Host or Match line
//   inside an included file does not change the including file's block.
// - Tokens: HostName %h %%; User none (taken as written, as 9.2 does);
//   IdentityFile, CertificateFile, UserKnownHostsFile %% %d %h %i %j %k %L %l
//   %n %p %r %u, ${VAR} and a leading ~ or ~user; ProxyCommand and ProxyJump
//   %% %h %k %n %p %r (ssh turns a jump into a command); GlobalKnownHostsFile
//   a leading ~ only. %h is the final host (HostName, else the alias), in
//   lower case unless an address, as is HostKeyAlias (%k, the alias when
//   unset); %n the alias as given, %p the final port, %r the final user.
// - Port: 1..65535 or a TCP service name (`ssh`).
// - The user file and the files it includes must be owned by the user or
//   root and not writable by others, nor by a group unless the file's owner
//   is that group's one member (Debian's rule). Links are followed, as ssh
//   follows them; the check is made on the file that was opened and is then
//   read, never on the path again.
//
// Simplified, compared with OpenSSH:
// - AddressFamily is not read: canonicalization asks for any family.
// - Times (ConnectTimeout, ServerAliveInterval) take whole numbers only.
// - `Match host` compares without regard to case on both sides.
// - ~, %d and the user file come from LoadOptions::home / ResolveContext::home,
//   by default the password database's home, as OpenSSH's: never $HOME.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlaunch/tunables.h"
#include "hostfile/hostfile.h"

namespace dlaunch::ssh {

// OpenSSH's limit on nested Includes; deeper is an error.
inline constexpr int kMaxIncludeDepth = 16;

// How load() reaches the files: the real filesystem, or memory in tests.
class FileSource {
 public:
  virtual ~FileSource() = default;
  // The file's text; nullopt when there is no such file (a directory counts
  // as none, since OpenSSH reads it as empty). `private_file`: OpenSSH's
  // permission check for the user's files. Throws InputError otherwise.
  [[nodiscard]] virtual std::optional<std::string> read(const std::string& path,
                                                        bool private_file) const = 0;
  // The existing paths that match a glob(3) pattern, sorted; none: empty.
  [[nodiscard]] virtual std::vector<std::string> glob(const std::string& pattern) const = 0;
};

// The real filesystem: read_input_file's limits, glob(3).
const FileSource& real_files();

// Files held in memory (tests, the fuzzer); glob is fnmatch(3) over the paths.
class MemoryFiles : public FileSource {
 public:
  std::map<std::string, std::string> files;  // path -> text
  [[nodiscard]] std::optional<std::string> read(const std::string& path,
                                                bool private_file) const override;
  [[nodiscard]] std::vector<std::string> glob(const std::string& pattern) const override;
};

enum class StrictHostKeyChecking { kYes, kAsk, kAcceptNew, kOff };

struct ProxyHop {
  std::string user;  // empty: unset
  std::string host;
  int port = 0;  // 0: unset
};

// What the configuration says for one host. A field that is unset (nullopt,
// empty, false) was not set by the configuration: the caller applies
// "hostfile and command line beat the configuration, the configuration beats
// dlaunch's defaults". Values are fully expanded.
struct HostConfig {
  std::optional<std::string> hostname;
  std::optional<std::string> user;  // unset when ResolveContext::user was given
  std::optional<int> port;          // unset when ResolveContext::port was given
  std::vector<std::string> identity_files;
  bool identity_none = false;  // `IdentityFile none` applied: no default keys
  std::optional<bool> identities_only;
  std::vector<std::string> certificate_files;
  std::vector<ProxyHop> proxy_jump;  // first hop first
  bool proxy_jump_none = false;      // `ProxyJump none`
  std::optional<std::string> proxy_command;
  bool proxy_command_none = false;  // `ProxyCommand none`
  // Set and empty: `none`.
  std::optional<std::vector<std::string>> user_known_hosts_files;
  std::optional<std::vector<std::string>> global_known_hosts_files;
  std::optional<StrictHostKeyChecking> strict_host_key_checking;
  std::optional<std::string> host_key_alias;
  std::optional<int> connect_timeout_s;
  std::optional<int> server_alive_interval_s;
  std::optional<int> server_alive_count_max;
  std::optional<bool> batch_mode;
  // Not empty: dlaunch's reader could not follow OpenSSH for this host, and
  // the installed `ssh -G` resolved it; says why.
  std::string resolved_by;
};

// Who asks, and what the hostfile or the command line already decided.
struct ResolveContext {
  std::string local_user;           // %u, Match localuser, default remote user
  std::string home;                 // %d and ~
  std::string local_host;           // %l; %L is its part before the first dot
  unsigned uid = 0;                 // %i
  std::optional<std::string> user;  // given by the hostfile or command line
  std::optional<int> port;
  // ${VAR}; nullopt: unset (an error where it is used). Empty function: none set.
  std::function<std::optional<std::string>(const std::string&)> getenv;
  // Whether the system resolver knows a fully qualified NAME (with its
  // trailing dot), for CanonicalizeHostname. Empty function: getaddrinfo(3)
  // with ssh's hints (any family, stream sockets).
  std::function<bool(const std::string& name)> resolves;

  // This process: the password database (home too), gethostname, getenv. Not
  // thread-safe (getpwuid): call it once, before starting threads.
  static ResolveContext current();
};

struct LoadOptions {
  std::optional<std::string> config_file;  // -F FILE, in place of both; "none": no file
  std::string home;                        // empty: the password database's, as ssh
  std::string system_file = "/etc/ssh/ssh_config";
  const FileSource* files = nullptr;  // nullptr: real_files()
};

namespace detail {
struct Parsed;
}

class SshConfig {
 public:
  // Reads and checks every file (see above). A missing user or system file
  // is no error; a missing -F file is.
  [[nodiscard]] static SshConfig load(const LoadOptions& options);

  // The configuration for `alias`, the host name as the user gave it.
  [[nodiscard]] HostConfig resolve(const std::string& alias, const ResolveContext& ctx) const;

  // Every file read, in order (top files first, then includes as met).
  [[nodiscard]] std::vector<std::string> files() const;

 private:
  explicit SshConfig(std::shared_ptr<const detail::Parsed> parsed) : parsed_(std::move(parsed)) {}
  std::shared_ptr<const detail::Parsed> parsed_;
};

// OpenSSH's wildcard match: `*` any run, `?` one character, case-sensitive.
[[nodiscard]] bool wildcard_match(std::string_view text, std::string_view pattern);

}  // namespace dlaunch::ssh
