#include "net/master_address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <string_view>

#include <fmt/format.h>

namespace dlaunch::net {

namespace {

// Interface names that container runtimes and VM managers give their bridges
// and the host ends of their veth pairs.
constexpr std::array<std::string_view, 14> kContainerPrefixes = {
    "docker", "virbr", "cni",   "veth",   "br-",   "flannel",      "cali",
    "podman", "lxcbr", "lxdbr", "cilium", "weave", "vxlan.calico", "kube-bridge"};

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

struct Parsed {
  bool v4 = false;
  std::array<unsigned char, 16> bytes{};
};

std::optional<Parsed> parse(const std::string& address) {
  Parsed p;
  if (::inet_pton(AF_INET, address.c_str(), p.bytes.data()) == 1) {
    p.v4 = true;
    return p;
  }
  if (::inet_pton(AF_INET6, address.c_str(), p.bytes.data()) == 1) return p;
  return std::nullopt;
}

bool is_loopback(const Parsed& p) {
  if (p.v4) return p.bytes[0] == 127;
  static constexpr std::array<unsigned char, 16> kOne = {0, 0, 0, 0, 0, 0, 0, 0,
                                                         0, 0, 0, 0, 0, 0, 0, 1};
  return p.bytes == kOne;
}

bool is_v4_link_local(const Parsed& p) { return p.v4 && p.bytes[0] == 169 && p.bytes[1] == 254; }

bool is_v6_link_local(const Parsed& p) {
  return !p.v4 && p.bytes[0] == 0xfe && (p.bytes[1] & 0xc0) == 0x80;
}

}  // namespace

const char* tier_note(Tier tier) {
  switch (tier) {
    case Tier::kPreferred:
      return "";
    case Tier::kContainer:
      return "container bridge";
    case Tier::kLinkLocal:
      return "link-local";
    case Tier::kLoopback:
      return "loopback";
  }
  return "";
}

bool is_loopback_address(const std::string& address) {
  const auto p = parse(address);
  return p && is_loopback(*p);
}

bool is_container_interface(const std::string& name) {
  return std::any_of(kContainerPrefixes.begin(), kContainerPrefixes.end(),
                     [&](std::string_view p) { return starts_with(name, p); });
}

bool is_ip_address(const std::string& text) { return parse(text).has_value(); }

std::vector<Candidate> master_candidates(const std::vector<proto::Interface>& interfaces,
                                         std::size_t limit) {
  std::vector<Candidate> out;
  for (const auto& i : interfaces) {
    if (!i.up) continue;
    const auto p = parse(i.address);
    if (!p || is_v6_link_local(*p)) continue;
    if (std::any_of(out.begin(), out.end(),
                    [&](const Candidate& c) { return c.address == i.address; })) {
      continue;  // the same address on two interfaces: the first one listed
    }
    Candidate c{.address = i.address,
                .interface = i.name,
                .family = p->v4 ? proto::AddressFamily::kIpv4 : proto::AddressFamily::kIpv6};
    if (i.loopback || is_loopback(*p)) {
      c.tier = Tier::kLoopback;
    } else if (is_v4_link_local(*p)) {
      c.tier = Tier::kLinkLocal;
    } else if (is_container_interface(i.name)) {
      c.tier = Tier::kContainer;
    }
    out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (a.tier != b.tier) return a.tier < b.tier;
    return a.family == proto::AddressFamily::kIpv4 && b.family == proto::AddressFamily::kIpv6;
  });
  if (out.size() > limit) out.resize(limit);
  return out;
}

namespace {

bool reached(const NodeReach& n, std::size_t candidate) {
  return candidate < n.outcomes.size() && n.outcomes[candidate].reached;
}

}  // namespace

std::string describe_attempts(const std::vector<Candidate>& candidates, const NodeReach& node) {
  std::string out;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    std::string why = "no answer";
    if (c < node.outcomes.size()) {
      const auto& o = node.outcomes[c];
      why = o.reached ? "reached" : (o.error.empty() ? "not reached" : o.error);
    }
    out += fmt::format("{}{} ({})", out.empty() ? "" : ", ", candidates[c].address, why);
  }
  return out;
}

Choice choose_master_address(const std::vector<Candidate>& candidates,
                             const std::vector<NodeReach>& reach, const std::string& node0,
                             std::uint16_t port) {
  Choice choice;
  if (candidates.empty()) {
    choice.problems.push_back(
        fmt::format("{} reported no address the other nodes could use (no interface that is up "
                    "has one)",
                    node0));
    return choice;
  }
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    if (std::all_of(reach.begin(), reach.end(),
                    [&](const NodeReach& n) { return reached(n, c); })) {
      choice.chosen = c;
      return choice;
    }
  }
  for (std::size_t k = 0; k < reach.size(); ++k) {
    bool any = false;
    for (std::size_t c = 0; c < candidates.size(); ++c) any = any || reached(reach[k], c);
    if (any) continue;
    choice.reached_none.push_back(k);
    choice.problems.push_back(
        fmt::format("{} cannot reach {} at any of its addresses (TCP port {}): {}", reach[k].label,
                    node0, port, describe_attempts(candidates, reach[k])));
  }
  if (choice.problems.empty()) {
    // Every node reached something, but no one address is reached by all.
    std::string each;
    for (const auto& n : reach) {
      std::string got;
      for (std::size_t c = 0; c < candidates.size(); ++c) {
        if (reached(n, c)) got += (got.empty() ? "" : ", ") + candidates[c].address;
      }
      each += fmt::format("{}{} reached {}", each.empty() ? "" : "; ", n.label, got);
    }
    choice.problems.push_back(fmt::format(
        "no address of {} is reachable from every node (TCP port {}): {}", node0, port, each));
  }
  return choice;
}

}  // namespace dlaunch::net
