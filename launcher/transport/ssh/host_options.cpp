#include "transport/ssh/host_options.h"

#include <algorithm>

#include <fmt/format.h>

#include "transport/ssh/known_hosts.h"

namespace dlaunch::ssh {

namespace {

HostKeyPolicy policy_of(StrictHostKeyChecking s) {
  switch (s) {
    case StrictHostKeyChecking::kYes:
    case StrictHostKeyChecking::kAsk:  // nobody to ask: as BatchMode does, refuse
      return HostKeyPolicy::kStrict;
    case StrictHostKeyChecking::kAcceptNew:
      return HostKeyPolicy::kAcceptNew;
    case StrictHostKeyChecking::kOff:
      break;
  }
  return HostKeyPolicy::kOff;
}

struct Resolver {
  const HostSettings& s;
  std::vector<std::string> chain;  // aliases being resolved, outermost first

  ConnectOptions target(const std::string& alias, const std::optional<std::string>& user,
                        const std::optional<int>& port, bool follow_proxy) {
    ConnectOptions c;
    c.alias = alias;
    c.host = alias;
    c.port = port.value_or(22);
    c.user = user.value_or("");
    c.timeout = s.connect_timeout;
    c.timeout_from = s.connect_timeout_given ? "--connect-timeout" : "dlaunch's default";
    c.host_key_policy = s.host_key_policy;
    c.keepalive_s = s.keepalive_s;
    c.keepalive_from = "dlaunch's default";
    const std::string home = s.context.home.empty() ? home_directory() : s.context.home;
    c.known_hosts = default_user_known_hosts(home);
    c.global_known_hosts = default_global_known_hosts();
    if (!s.config) {
      if (!s.known_hosts.empty()) c.known_hosts = {s.known_hosts};
      return c;
    }
    ResolveContext ctx = s.context;
    ctx.user = user;
    ctx.port = port;
    const HostConfig hc = s.config->resolve(alias, ctx);
    if (hc.hostname) c.host = *hc.hostname;
    if (hc.user) c.user = *hc.user;
    if (hc.port) c.port = *hc.port;
    c.resolved_by = hc.resolved_by;
    c.identity_files = hc.identity_files;
    // `IdentityFile none` (alone): no key file at all, as ssh offers none.
    c.default_identities = hc.identity_files.empty() && !hc.identity_none;
    c.identities_only = hc.identities_only.value_or(false);
    c.certificate_files = hc.certificate_files;
    // `UserKnownHostsFile none`: no user file (an accepted key goes nowhere).
    if (hc.user_known_hosts_files) {
      c.known_hosts = hc.user_known_hosts_files->empty() ? std::vector<std::string>{"/dev/null"}
                                                         : *hc.user_known_hosts_files;
    }
    if (!s.known_hosts.empty()) c.known_hosts = {s.known_hosts};
    if (hc.global_known_hosts_files) c.global_known_hosts = *hc.global_known_hosts_files;
    if (hc.host_key_alias) c.host_key_alias = *hc.host_key_alias;
    if (!s.host_key_policy_given && hc.strict_host_key_checking)
      c.host_key_policy = policy_of(*hc.strict_host_key_checking);
    // 0 means none to ssh, for both: no timeout, no keepalive.
    if (!s.connect_timeout_given && hc.connect_timeout_s) {
      c.timeout = *hc.connect_timeout_s > 0 ? std::chrono::seconds(*hc.connect_timeout_s)
                                            : kNoConnectTimeout;
      c.timeout_from = "ConnectTimeout";
    }
    if (hc.server_alive_interval_s) {
      c.keepalive_s = *hc.server_alive_interval_s;
      c.keepalive_from = "ServerAliveInterval";
    }
    if (hc.server_alive_count_max) c.keepalive_count_max = *hc.server_alive_count_max;
    if (!follow_proxy) return c;
    if (!hc.proxy_jump.empty()) {
      // As ssh.c: a last hop that is this very host (name, port and user, an
      // unset port 22, an unset user any) is a loop, and ssh refuses it.
      const ProxyHop& last = hc.proxy_jump.back();
      const std::string me = c.user.empty() ? s.context.local_user : c.user;
      if (last.host == c.host && (last.port == 0 ? 22 : last.port) == c.port &&
          (last.user.empty() || last.user == me)) {
        throw InputError(
            {"ssh config"}, "ProxyJump",
            fmt::format("'{}' jumps through itself: jumphost loop via {}", alias, last.host),
            "ssh refuses it too; give that host `ProxyJump none`");
      }
      chain.push_back(alias);
      if (chain.size() > static_cast<std::size_t>(kMaxProxyDepth)) {
        std::string path;
        for (const auto& a : chain) path += (path.empty() ? "" : " -> ") + a;
        throw InputError({"ssh config"}, "ProxyJump",
                         fmt::format("the jump hosts of '{}' nest deeper than {}: {}",
                                     chain.front(), kMaxProxyDepth, path),
                         "check ProxyJump in your ssh config (a jump host that jumps through "
                         "another that jumps back?)");
      }
      for (std::size_t i = 0; i < hc.proxy_jump.size(); ++i) {
        const auto& hop = hc.proxy_jump[i];
        const std::optional<std::string> hop_user =
            hop.user.empty() ? std::nullopt : std::optional<std::string>(hop.user);
        const std::optional<int> hop_port =
            hop.port == 0 ? std::nullopt : std::optional<int>(hop.port);
        // The first hop is reached the way its own configuration says (a
        // ProxyJump of its own: ssh runs a new ssh for it, which reads the
        // configuration again); the later ones through the hop before them,
        // as `ssh -J a,b` does. A chain that never ends stops at
        // kMaxProxyDepth.
        ConnectOptions j = target(hop.host, hop_user, hop_port, i == 0);
        if (i == 0) {
          for (auto& inner : j.jumps) c.jumps.push_back(std::move(inner));
          j.jumps.clear();
        } else {
          j.proxy_command.clear();
        }
        c.jumps.push_back(std::move(j));
      }
      chain.pop_back();
    } else if (hc.proxy_command) {
      c.proxy_command = *hc.proxy_command;
    }
    return c;
  }
};

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

}  // namespace

std::vector<std::string> default_user_known_hosts(const std::string& home) {
  return {home + "/.ssh/known_hosts", home + "/.ssh/known_hosts2"};
}

std::vector<std::string> default_global_known_hosts() {
  return {"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"};
}

ConnectOptions resolve_alias(const std::string& alias, const std::optional<std::string>& user,
                             const std::optional<int>& port, const HostSettings& settings) {
  Resolver r{settings, {}};
  return r.target(alias, user, port, true);
}

ConnectOptions resolve_host(const HostEntry& host, const HostSettings& settings) {
  try {
    ConnectOptions c = resolve_alias(
        host.host, host.user.empty() ? std::nullopt : std::optional<std::string>(host.user),
        host.port_given ? std::optional<int>(host.port) : std::nullopt, settings);
    if (!host.identity.empty()) {
      c.identity_files.insert(c.identity_files.begin(), host.identity);
      c.hostfile_identity = host.identity;
    }
    return c;
  } catch (const InputError& e) {
    throw InputError(host.pos, "host",
                     "host '" + host.host + "': " + e.field() + ": " + e.message(), e.hint());
  }
}

namespace {

std::string keys_of(const ConnectOptions& o) {
  std::string keys = o.identity_files.empty() ? "" : join(o.identity_files);
  if (o.default_identities) {
    keys += (keys.empty() ? "" : ", ") + std::string("~/.ssh/id_{ed25519,ecdsa,rsa}");
  }
  if (!o.identities_only) keys = "ssh-agent" + std::string(keys.empty() ? "" : ", ") + keys;
  return keys.empty() ? "none" : keys;
}

std::string known_hosts_of(const ConnectOptions& o) {
  std::string kh = join(o.known_hosts);
  if (!o.global_known_hosts.empty()) kh += ", " + join(o.global_known_hosts);
  if (!o.host_key_alias.empty()) kh += " (as " + o.host_key_alias + ")";
  kh += o.host_key_policy == HostKeyPolicy::kStrict      ? ", strict"
        : o.host_key_policy == HostKeyPolicy::kAcceptNew ? ", accept-new"
                                                         : ", not checked";
  return kh;
}

}  // namespace

std::vector<std::string> describe(const ConnectOptions& o) {
  std::vector<std::string> out;
  out.push_back("ssh: " + o.where());
  if (!o.resolved_by.empty()) out.push_back("resolved by " + o.resolved_by);
  out.push_back("keys: " + keys_of(o));
  if (!o.certificate_files.empty()) {
    out.push_back("certificates: " + join(o.certificate_files) +
                  " (not offered: libssh2 has no certificate authentication; use --ssh openssh)");
  }
  out.push_back("known_hosts: " + known_hosts_of(o));
  const std::string timeout =
      o.timeout == kNoConnectTimeout
          ? std::string("none")
          : fmt::format("{} s", std::chrono::duration<double>(o.timeout).count());
  out.push_back(fmt::format("connect timeout: {} ({}); keepalive: {} ({}), at most {} unanswered",
                            timeout, o.timeout_from.empty() ? "dlaunch's default" : o.timeout_from,
                            o.keepalive_s > 0 ? fmt::format("every {} s", o.keepalive_s) : "off",
                            o.keepalive_from.empty() ? "dlaunch's default" : o.keepalive_from,
                            o.keepalive_count_max));
  if (!o.jumps.empty()) {
    std::string via;
    for (const auto& j : o.jumps) {
      via += (via.empty() ? "" : " -> ") + j.where();
      if (!j.proxy_command.empty()) via += " [ProxyCommand " + j.proxy_command + "]";
    }
    out.push_back("via: " + via);
    for (std::size_t i = 0; i < o.jumps.size(); ++i) {
      const auto& j = o.jumps[i];
      out.push_back(fmt::format("  hop {} {}: keys: {}", i + 1, j.where(), keys_of(j)));
      if (!j.resolved_by.empty())
        out.push_back(fmt::format("  hop {} resolved by {}", i + 1, j.resolved_by));
      out.push_back(fmt::format("  hop {} known_hosts: {}", i + 1, known_hosts_of(j)));
    }
  } else if (!o.proxy_command.empty()) {
    out.push_back("via: ProxyCommand " + o.proxy_command);
  }
  return out;
}

}  // namespace dlaunch::ssh
