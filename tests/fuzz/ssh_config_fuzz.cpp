// Fuzzes the OpenSSH client-config reader (launcher/ssh_config/ssh_config.h)
// in memory, through MemoryFiles.
//
// Input: up to five files separated by a line "----": the user's config,
// the system's, and three that Includes can reach (~/.ssh/inc,
// ~/.ssh/conf.d/a.conf, /etc/ssh/ssh_config.d/b.conf). Loading and resolving
// a few hosts must either throw InputError naming one of those files (and a
// line within it, or none) or give values a connection can use: a port in
// 1..65535, a non-empty host name and jump hosts, no control bytes in names.
// Anything else (another exception, a crash, a sanitizer report, a hang) is
// a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ssh_config/ssh_config.h"

namespace {

using dlaunch::ssh::HostConfig;

const char* const kPaths[] = {"/home/fz/.ssh/config", "/etc/ssh/ssh_config", "/home/fz/.ssh/inc",
                              "/home/fz/.ssh/conf.d/a.conf", "/etc/ssh/ssh_config.d/b.conf"};

[[noreturn]] void broken(const char* what, const std::string& detail) {
  std::fprintf(stderr, "ssh_config_fuzz: contract broken: %s: %s\n", what, detail.c_str());
  std::abort();
}

int lines_of(std::string_view text) {
  int n = 1;
  for (char c : text) n += c == '\n' ? 1 : 0;
  return n;
}

bool has_control(std::string_view s) {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return true;
  }
  return false;
}

void check(const HostConfig& c) {
  if (c.port && (*c.port < 1 || *c.port > 65535))
    broken("port out of range", std::to_string(*c.port));
  if (c.hostname && (c.hostname->empty() || has_control(*c.hostname)))
    broken("bad host name accepted", *c.hostname);
  if (c.user && (c.user->empty() || has_control(*c.user))) broken("bad user accepted", *c.user);
  for (const auto& hop : c.proxy_jump) {
    if (hop.host.empty() || has_control(hop.host)) broken("bad jump host accepted", hop.host);
    if (hop.port < 0 || hop.port > 65535) broken("jump port out of range", hop.host);
  }
  if (!c.proxy_jump.empty() && c.proxy_jump_none) broken("ProxyJump both set and none", "");
  if (c.connect_timeout_s && *c.connect_timeout_s < 0) broken("negative ConnectTimeout", "");
  if (c.server_alive_interval_s && *c.server_alive_interval_s < 0)
    broken("negative ServerAliveInterval", "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  dlaunch::ssh::MemoryFiles files;
  for (const char* path : kPaths) {
    const std::size_t sep = text.find("\n----\n");
    files.files[path] = std::string(text.substr(0, sep));
    if (sep == std::string_view::npos) break;
    text.remove_prefix(sep + 6);
  }
  dlaunch::ssh::LoadOptions options;
  options.home = "/home/fz";
  options.files = &files;

  dlaunch::ssh::ResolveContext ctx;
  ctx.local_user = "fz";
  ctx.home = "/home/fz";
  ctx.local_host = "head.example.com";
  ctx.uid = 1000;
  ctx.getenv = [](const std::string& name) -> std::optional<std::string> {
    if (name == "HOME") return "/home/fz";
    return std::nullopt;
  };
  // CanonicalizeHostname asks a resolver: never the network from here.
  ctx.resolves = [](const std::string& name) {
    return name.size() >= 13 && name.compare(name.size() - 13, 13, ".example.com.") == 0;
  };
  try {
    const auto config = dlaunch::ssh::SshConfig::load(options);
    for (const char* alias : {"n1", "gpu07.example.com", "bastion"})
      check(config.resolve(alias, ctx));
    ctx.user = "root";
    ctx.port = 2222;
    check(config.resolve("n1", ctx));
  } catch (const dlaunch::InputError& e) {
    const auto it = files.files.find(e.pos().source);
    if (it == files.files.end()) broken("error names another source", e.what());
    if (e.pos().line < 0 || e.pos().line > lines_of(it->second))
      broken("error line outside the file", e.what());
  }
  return 0;
}
