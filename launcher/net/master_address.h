// Which of node 0's addresses the job uses for MASTER_ADDR and the comm
// store: pure functions of what the agents reported (their interfaces, and
// which of node 0's addresses each other node could connect to), so that the
// choice is unit-tested without a network.
//
// Preference order (master_candidates): addresses of interfaces that are up,
// in tiers, each tier IPv4 before IPv6 and otherwise in the order the system
// lists them:
//   1. every other address (the node's real networks)
//   2. container bridges (docker0, virbr*, cni*, veth*, br-*, flannel*,
//      cali*, podman*, ...): the same private address often exists on every
//      host (docker0's 172.17.0.1) and leads nowhere
//   3. IPv4 link-local (169.254/16)
//   4. loopback: only good when every node is on node 0's machine
// IPv6 link-local addresses (fe80::/10) are left out: without a scope of the
// connecting host's own they cannot be dialled from another host.
//
// The choice (choose_master_address): the first candidate that every other
// node reached. Node 0 reaches its own addresses.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "dlaunch/proto/protocol.h"

namespace dlaunch::net {

enum class Tier { kPreferred = 0, kContainer = 1, kLinkLocal = 2, kLoopback = 3 };

// "container bridge", "link-local", "loopback"; empty for kPreferred.
const char* tier_note(Tier tier);

struct Candidate {
  std::string address;
  std::string interface;
  Tier tier = Tier::kPreferred;
  proto::AddressFamily family = proto::AddressFamily::kIpv4;
};

// Whether a numeric address is a loopback one (127/8, ::1); false for names.
bool is_loopback_address(const std::string& address);

// Whether an interface of this name is a container or VM bridge (or a veth
// end of one).
bool is_container_interface(const std::string& name);

// Node 0's addresses in the order they are tried, at most `limit`.
std::vector<Candidate> master_candidates(const std::vector<proto::Interface>& interfaces,
                                         std::size_t limit = proto::kMaxProbeAddresses);

// What one node other than node 0 found: one outcome per candidate, in the
// candidates' order (a missing outcome counts as not reached).
struct NodeReach {
  std::size_t node = 0;
  std::string label;  // "node 2 (host2)"
  std::vector<proto::ProbeOutcome> outcomes;
};

struct Choice {
  std::optional<std::size_t> chosen;  // index into the candidates
  // When nothing was chosen: the nodes that reached no candidate at all
  // (index into `reach`), and one message per problem, the first one the
  // root cause.
  std::vector<std::size_t> reached_none;
  std::vector<std::string> problems;
};

// The first candidate every node in `reach` reached. `node0` names node 0 in
// messages; `port` is the port that was tried.
Choice choose_master_address(const std::vector<Candidate>& candidates,
                             const std::vector<NodeReach>& reach, const std::string& node0,
                             std::uint16_t port);

// "10.0.0.1 (Connection refused), 172.17.0.1 (timed out after 2.0 s)": what a
// node tried and why each failed.
std::string describe_attempts(const std::vector<Candidate>& candidates, const NodeReach& node);

// Whether `text` is a numeric IPv4 or IPv6 address.
bool is_ip_address(const std::string& text);

}  // namespace dlaunch::net
