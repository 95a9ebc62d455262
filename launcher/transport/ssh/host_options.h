// How dlaunch reaches one SSH host: the hostfile entry, the command line and
// the OpenSSH configuration resolved into ConnectOptions. Hostfile and
// command-line values beat the configuration; the configuration beats
// dlaunch's defaults (as ssh's -l/-p beat ~/.ssh/config).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hostfile/hostfile.h"
#include "ssh_config/ssh_config.h"
#include "transport/ssh/connect.h"

namespace dlaunch::ssh {

// The ssh configuration and what the command line decided for every host.
struct HostSettings {
  std::shared_ptr<const SshConfig> config;  // null: none read (-F none, or no SSH host)
  ResolveContext context;
  HostKeyPolicy host_key_policy = HostKeyPolicy::kStrict;
  bool host_key_policy_given = false;  // --host-key-check: beats StrictHostKeyChecking
  std::chrono::milliseconds connect_timeout = default_ms(tunables::kConnectTimeout);
  bool connect_timeout_given = false;  // --connect-timeout: beats ConnectTimeout
  std::string known_hosts;             // forced user known_hosts file (tests); empty: none
  int keepalive_s = 10;                // when ServerAliveInterval does not say
};

// The options for one hostfile entry. Throws InputError (naming the host
// entry) for a proxy chain that loops or is deeper than kMaxProxyDepth.
ConnectOptions resolve_host(const HostEntry& host, const HostSettings& settings);

// The options for a host named `alias` (a jump host, or a host of --check),
// with the user and port given where known.
ConnectOptions resolve_alias(const std::string& alias, const std::optional<std::string>& user,
                             const std::optional<int>& port, const HostSettings& settings);

inline constexpr int kMaxProxyDepth = 8;

// One line per fact for --dry-run: "user@address:port", the key files, the
// known_hosts files, the proxy chain.
std::vector<std::string> describe(const ConnectOptions& o);

// OpenSSH's default user and global known_hosts files.
std::vector<std::string> default_user_known_hosts(const std::string& home);
std::vector<std::string> default_global_known_hosts();

}  // namespace dlaunch::ssh
