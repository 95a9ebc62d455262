// The checked form of an ssh config that load() builds and resolve() walks
// (ssh_config.cpp, ssh_config_resolve.cpp). Only keywords dlaunch uses are kept.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "transport/ssh/ssh_config.h"

namespace dlaunch::ssh::detail {

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
};

enum class Criterion { kAll, kHost, kOriginalHost, kUser, kLocalUser };

struct MatchTerm {
  Criterion criterion = Criterion::kAll;
  bool negate = false;
  std::string patterns;  // comma-separated, `!` per pattern
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

struct Parsed {
  std::vector<File> files;
  std::vector<std::size_t> top;  // the files read first: user then system, or -F
};

// Keyword names as the manual writes them, for messages.
const char* key_name(Key key);

// $HOME, else the password database's, else "/".
std::string user_home();

}  // namespace dlaunch::ssh::detail
