// dlaunch_ssh_resolve: prints how dlaunch resolves SSH hosts, in the words of
// `ssh -G`, for the differential test against OpenSSH (diff_test.cpp).
//
//   dlaunch_ssh_resolve [-F FILE] [-l USER] [-p PORT] ALIAS...
//
// It reads the configuration exactly as `dlaunch` does for an SSH node (the
// same ResolveContext, LoadOptions and resolve_alias), then prints for each
// alias a block that starts with "= ALIAS" and holds one "key value" line per
// fact, or "error FILE:LINE: FIELD: MESSAGE" where dlaunch refuses the
// configuration. Exit status 0, or 2 when any alias was refused.
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "hostfile/hostfile.h"
#include "ssh_config/ssh_config.h"
#include "transport/ssh/host_options.h"

namespace {

namespace ssh = dlaunch::ssh;

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : " ") + x;
  return out;
}

std::string user_of(const ssh::ConnectOptions& c, const ssh::HostSettings& s) {
  return c.user.empty() ? s.context.local_user : c.user;
}

void print_keys(const std::string& prefix, const ssh::ConnectOptions& c) {
  if (c.default_identities && c.identity_files.empty()) {
    fmt::print("{}identityfile defaults\n", prefix);
  } else if (c.identity_files.empty()) {
    fmt::print("{}identityfile none\n", prefix);
  }
  for (const auto& f : c.identity_files) fmt::print("{}identityfile {}\n", prefix, f);
  if (c.default_identities && !c.identity_files.empty())
    fmt::print("{}identityfile defaults\n", prefix);
}

void print(const ssh::ConnectOptions& c, const ssh::HostSettings& s) {
  fmt::print("hostname {}\nuser {}\nport {}\n", c.host, user_of(c, s), c.port);
  print_keys("", c);
  fmt::print("hostkeyalias {}\n", c.host_key_alias.empty() ? "-" : c.host_key_alias);
  fmt::print("userknownhostsfile {}\n", join(c.known_hosts));
  fmt::print("globalknownhostsfile {}\n", join(c.global_known_hosts));
  fmt::print("connecttimeout {}\n",
             c.timeout == ssh::kNoConnectTimeout
                 ? 0
                 : std::chrono::duration_cast<std::chrono::seconds>(c.timeout).count());
  fmt::print("serveraliveinterval {}\n", c.keepalive_s);
  fmt::print("serveralivecountmax {}\n", c.keepalive_count_max);
  for (std::size_t i = 0; i < c.jumps.size(); ++i) {
    const auto& j = c.jumps[i];
    fmt::print("jump{} {}@{}:{}\n", i, user_of(j, s), j.host, j.port);
    print_keys(fmt::format("jump{} ", i), j);
    fmt::print("jump{} hostkeyalias {}\n", i, j.host_key_alias.empty() ? "-" : j.host_key_alias);
    fmt::print("jump{} userknownhostsfile {}\n", i, join(j.known_hosts));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<std::string> config_file;
  std::optional<std::string> user;
  std::optional<int> port;
  std::vector<std::string> aliases;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "-F" || a == "-l" || a == "-p") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "-F") config_file = v;
      if (a == "-l") user = v;
      if (a == "-p") port = std::stoi(v);
    } else {
      aliases.push_back(a);
    }
  }
  ssh::HostSettings settings;
  settings.keepalive_s = 10;
  try {
    // As launcher/main.cpp does for a job with SSH nodes.
    settings.context = ssh::ResolveContext::current();
    ssh::LoadOptions lo;
    lo.config_file = config_file;
    lo.home = settings.context.home;
    settings.config = std::make_shared<const ssh::SshConfig>(ssh::SshConfig::load(lo));
  } catch (const dlaunch::InputError& e) {
    for (const auto& alias : aliases) {
      fmt::print("= {}\nerror {}:{}: {}: {}\n", alias, e.pos().source, e.pos().line, e.field(),
                 e.message());
    }
    return 2;
  }
  int rc = 0;
  for (const auto& alias : aliases) {
    fmt::print("= {}\n", alias);
    try {
      const auto c = ssh::resolve_alias(alias, user, port, settings);
      print(c, settings);
      if (!c.resolved_by.empty()) fmt::print("via {}\n", c.resolved_by);
    } catch (const dlaunch::InputError& e) {
      fmt::print("error {}:{}: {}: {}\n", e.pos().source, e.pos().line, e.field(), e.message());
      rc = 2;
    }
  }
  std::fflush(stdout);
  return rc;
}
