// The checked form of an ssh config that load() builds and resolve() walks
// (ssh_config.cpp, ssh_config_resolve.cpp). Only keywords dlaunch uses are kept.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ssh_config/ssh_config.h"

namespace dlaunch::ssh::detail {

// The field an error in an ssh_config file names.
inline constexpr const char* kField = "ssh config";

// ASCII letters to lower case (keywords, host names, Match criteria).
std::string lower(std::string_view s);

enum class Key {
  kHost,
  kMatch,
  kInclude,
  kHostName,
  kUser,
  kPort,
  kIdentityFile,
  kIdentitiesOnly,
  kCertificateFile,
  kProxyJump,
  kProxyCommand,
  kUserKnownHostsFile,
  kGlobalKnownHostsFile,
  kStrictHostKeyChecking,
  kHostKeyAlias,
  kConnectTimeout,
  kServerAliveInterval,
  kServerAliveCountMax,
  kBatchMode,
  kCanonicalizeHostname,       // number: 0 no, 1 yes, 2 always
  kCanonicalDomains,           // args: the domains, lower case, no trailing dot
  kCanonicalizeMaxDots,        // number
  kCanonicalizeFallbackLocal,  // number: 0 no, 1 yes
};

// kCanonical and kFinal: true in the second pass only (after
// CanonicalizeHostname, or one that `Match final` asked for). kOpenssh: a
// criterion only OpenSSH evaluates (exec): a host whose resolution reaches it
// is resolved with `ssh -G`.
enum class Criterion {
  kAll,
  kHost,
  kOriginalHost,
  kUser,
  kLocalUser,
  kCanonical,
  kFinal,
  kOpenssh
};

struct MatchTerm {
  Criterion criterion = Criterion::kAll;
  bool negate = false;
  std::string patterns;  // comma-separated, `!` per pattern; kOpenssh: the criterion
};

// One line that matters. Values are checked; tokens are expanded by resolve().
struct Statement {
  Key key = Key::kHost;
  std::size_t file = 0;  // index into Parsed::files
  int line = 0;
  std::vector<std::string> args;  // Host patterns, file lists, the value
  int number = 0;              // Port, times (-1: none), counts, flags (0/1), StrictHostKeyChecking
  bool none = false;           // ProxyJump/ProxyCommand `none`
  std::vector<ProxyHop> hops;  // ProxyJump
  std::vector<MatchTerm> terms;       // Match
  std::vector<std::size_t> included;  // Include: indices into Parsed::files
};

struct File {
  std::string path;
  std::vector<Statement> statements;
};

// Where dlaunch's reader cannot follow OpenSSH for every host (a keyword it
// does not know): every host is resolved with `ssh -G`.
struct OpensshOnly {
  std::string path;
  int line = 0;
  std::string why;
};

struct Parsed {
  std::vector<File> files;
  std::vector<std::size_t> top;            // the files read first: user then system, or -F
  std::optional<std::string> config_file;  // -F
  bool real_files = true;                  // what ssh -G would read, too
  std::optional<OpensshOnly> openssh_only;
};

// The host resolved by the installed `ssh -G` (ssh_config_openssh.cpp), with
// `why` in HostConfig::resolved_by; `where` is the line that needs ssh.
// Throws InputError naming the file and line where ssh refuses the
// configuration, or `where` when the configuration is not on disk (in
// memory: ssh cannot read it).
HostConfig resolve_with_openssh(const Parsed& parsed, const std::string& alias,
                                const ResolveContext& ctx, const std::string& why,
                                const SourcePos& where);

// Keyword names as the manual writes them, for messages.
const char* key_name(Key key);

// The home ssh uses: the password database's (never $HOME), else $HOME
// where the user has no entry (ssh itself refuses to run then), else "/".
std::string user_home();

// %C: the SHA-1 (hex) of %l%h%p%r, as OpenSSH 9.2's ssh_connection_hash
// (9.2 hashes no %j in: `ssh -G -J` prints the same %C; newer ones may).
std::string connection_hash(const std::string& local_host, const std::string& host,
                            const std::string& port, const std::string& user);

// The home directory of a user by name (~user); nullopt: no such user.
std::optional<std::string> home_of(const std::string& user);

}  // namespace dlaunch::ssh::detail
