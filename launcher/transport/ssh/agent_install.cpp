#include "transport/ssh/agent_install.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "dlaunch/error.h"
#include "dlaunch/process.h"
#include "dlaunch/proto/protocol.h"
#include "dlaunch/unique_fd.h"
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

namespace {

class Fnv1a {
 public:
  void add(std::string_view data) {
    for (unsigned char c : data) {
      h_ ^= c;
      h_ *= 1099511628211ULL;
    }
  }
  std::string hex() const { return fmt::format("{:016x}", h_); }

 private:
  std::uint64_t h_ = 1469598103934665603ULL;
};

}  // namespace

std::string content_hash(const std::string& data) {
  Fnv1a h;
  h.add(data);
  return h.hex();
}

std::shared_ptr<const AgentImage> AgentImage::load(const std::string& path) {
  auto image = std::make_shared<AgentImage>();
  image->path = path;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    throw Error(ErrorKind::kEnvironment,
                fmt::format("cannot read the agent to copy to nodes, '{}': {}", path,
                            std::strerror(errno)));
  }
  Fnv1a h;
  std::string buf(std::size_t{64} << 10, '\0');
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw Error(ErrorKind::kEnvironment,
                  fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
    }
    if (n == 0) break;
    h.add(std::string_view(buf.data(), static_cast<std::size_t>(n)));
    image->size += static_cast<std::uint64_t>(n);
  }
  image->version_line = expected_agent_version_line();
  image->key = std::string(kVersion) + "-" + h.hex();
  return image;
}

AgentImage AgentImage::from_bytes(std::string bytes) {
  AgentImage image;
  image.size = bytes.size();
  image.version_line = expected_agent_version_line();
  image.key = std::string(kVersion) + "-" + content_hash(bytes);
  image.bytes_ = std::make_shared<const std::string>(std::move(bytes));
  return image;
}

const std::string& AgentImage::bytes() const {
  if (!bytes_) {
    std::string data;
    try {
      data = read_input_file(path, "dlaunch-agent");
    } catch (const Error& e) {
      throw Error(ErrorKind::kEnvironment,
                  std::string("cannot read the agent to copy to nodes: ") + e.what());
    }
    if (data.size() != size || std::string(kVersion) + "-" + content_hash(data) != key) {
      throw Error(ErrorKind::kEnvironment,
                  fmt::format("'{}' changed on this machine since the job started", path));
    }
    bytes_ = std::make_shared<const std::string>(std::move(data));
  }
  return *bytes_;
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
      "dlaunch-upload", {image.key, std::to_string(image.size), image.version_line, ok_marker});
}

std::string cache_path_for_messages(const AgentImage& image) {
  return "~/.cache/dlaunch/" + image.key + "/dlaunch-agent";
}

}  // namespace dlaunch::ssh
