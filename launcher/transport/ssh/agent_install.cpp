#include "transport/ssh/agent_install.h"

#include <fmt/format.h>

#include "dlaunch/error.h"
#include "dlaunch/process.h"
#include "dlaunch/proto/protocol.h"
#include "dlaunch/version.h"
#include "hostfile/hostfile.h"

namespace dlaunch::ssh {

namespace {

// The scripts run under /bin/sh whatever the login shell is (csh, fish):
// the login shell only sees `exec /bin/sh -c '<script>' name args...`, the
// script has no single quote, and every value is an argument.
std::string sh(const std::string& script, const std::string& name,
               std::initializer_list<std::string> args) {
  std::string cmd = "exec /bin/sh -c '" + script + "' " + name;
  for (const auto& a : args) cmd += " " + shell_quote(a);
  return cmd;
}

}  // namespace

std::string expected_agent_version_line() {
  return fmt::format("dlaunch-agent {} (protocol {})", kVersion, proto::kProtocolVersion);
}

std::string content_hash(const std::string& data) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", h);
}

std::shared_ptr<const AgentImage> AgentImage::load(const std::string& path) {
  auto image = std::make_shared<AgentImage>();
  image->path = path;
  try {
    image->bytes = read_input_file(path, "dlaunch-agent");
  } catch (const Error& e) {
    throw Error(ErrorKind::kEnvironment,
                std::string("cannot read the agent to copy to nodes: ") + e.what());
  }
  image->version_line = expected_agent_version_line();
  image->key = std::string(kVersion) + "-" + content_hash(image->bytes);
  return image;
}

std::string start_command(const std::string& agent_path, const AgentImage* image) {
  if (image == nullptr) return "exec " + shell_quote(agent_path);
  return sh(fmt::format("c=\"$HOME/.cache/dlaunch/$1/dlaunch-agent\"; "
                        "if [ -x \"$c\" ]; then exec \"$c\"; fi; "
                        "if [ -x \"$2\" ]; then exec \"$2\"; fi; exit {}",
                        kNoAgentStatus),
            "dlaunch-start", {image->key, agent_path});
}

std::string upload_command(const AgentImage& image, const std::string& ok_marker) {
  return sh(
      fmt::format("umask 077; d=\"$HOME/.cache/dlaunch/$1\"; "
                  "mkdir -p \"$d\" || exit {0}; t=\"$d/.upload.$$\"; "
                  "if cat > \"$t\"; then :; else rm -f \"$t\"; exit {0}; fi; "
                  "s=$(wc -c < \"$t\"); "
                  "if [ \"$s\" -ne \"$2\" ]; then rm -f \"$t\"; "
                  "echo \"received $s of $2 bytes\" >&2; exit {0}; fi; "
                  "chmod 700 \"$t\"; v=$(\"$t\" --version 2>&1); "
                  "if [ \"$v\" = \"$3\" ]; then mv -f \"$t\" \"$d/dlaunch-agent\" || exit {0}; "
                  "else rm -f \"$t\"; echo \"$v\" >&2; exit {1}; fi; "
                  "if [ -n \"$4\" ]; then echo \"$4\"; fi",
                  kUploadBrokenStatus, kUploadNoRunStatus),
      "dlaunch-upload",
      {image.key, std::to_string(image.bytes.size()), image.version_line, ok_marker});
}

std::string cache_path_for_messages(const AgentImage& image) {
  return "~/.cache/dlaunch/" + image.key + "/dlaunch-agent";
}

}  // namespace dlaunch::ssh
