// `--ssh openssh` (hostfile `ssh: openssh`): the agent is started with the
// system's OpenSSH client, `ssh -T -o BatchMode=yes HOST <command>`, whose
// stdin/stdout carry the control protocol. For what libssh2 cannot do:
// GSSAPI/Kerberos, FIDO keys, certificates, ControlMaster, `Match exec`, and
// every ssh_config keyword there is (ssh reads its own configuration).
//
// Same guarantees as the libssh2 path: the ssh client is dlaunch's child in
// its own process group (a Ctrl-C reaches dlaunch alone), dies with dlaunch
// (PR_SET_PDEATHSIG), and its stdin is the lifeline (EOF reaches the agent,
// which stops its workers); heartbeats run over the channel as on any link.
// A node without a usable agent gets a copy (agent_install.h) through a
// second `ssh HOST` that receives the file on its stdin.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "hostfile/hostfile.h"
#include "transport/ssh/agent_install.h"
#include "transport/ssh/host_options.h"
#include "transport/transport.h"

namespace dlaunch::ssh {

// What the command line says that ssh(1) must hear too.
struct OpensshOptions {
  std::string config_file;  // -F; empty: ssh's own default
  HostKeyPolicy host_key_policy = HostKeyPolicy::kStrict;
  bool host_key_policy_given = false;
  int connect_timeout_s = 0;  // 0: ssh's (or its config's) own
  std::string known_hosts;    // forced UserKnownHostsFile; empty: ssh's
};

// ssh's argv up to (not including) the remote command, for this host:
// hostfile values as -l/-p/-i, command-line values as -o.
std::vector<std::string> openssh_argv(const HostEntry& host, const OpensshOptions& o);

// Starts the agent of `host` through ssh. `image`: the agent to copy when
// the node has none (null: the path is forced, never copy).
std::unique_ptr<AgentLink> start_openssh_agent(boost::asio::io_context& io, const HostEntry& host,
                                               const OpensshOptions& o,
                                               const std::string& agent_path,
                                               std::shared_ptr<const AgentImage> image,
                                               const std::string& label, LinkCallbacks cb);

}  // namespace dlaunch::ssh
