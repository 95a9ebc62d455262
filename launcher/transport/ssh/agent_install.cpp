#include "transport/ssh/agent_install.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include <fmt/format.h>
#include <openssl/evp.h>

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

// SHA-256 of a byte stream, fed in pieces (the agent is read once, never
// held, when no node needs a copy).
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) failed();
  }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  void add(std::string_view data) {
    if (!data.empty() && EVP_DigestUpdate(ctx_, data.data(), data.size()) != 1) failed();
  }
  std::string hex() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(ctx_, out, &n) != 1) failed();
    std::string h;
    for (unsigned int i = 0; i < n; ++i) h += fmt::format("{:02x}", out[i]);
    return h;
  }

 private:
  [[noreturn]] static void failed() { throw Error(ErrorKind::kInternal, "SHA-256 failed"); }
  EVP_MD_CTX* ctx_;
};

// The cache folder's name: the version and the first 128 bits of the hash.
std::string key_of(const std::string& sha256) {
  return std::string(kVersion) + "-" + sha256.substr(0, 32);
}

}  // namespace

std::string content_hash(const std::string& data) {
  Sha256 h;
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
  Sha256 h;
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
  image->sha256 = h.hex();
  image->key = key_of(image->sha256);
  return image;
}

AgentImage AgentImage::from_bytes(std::string bytes) {
  AgentImage image;
  image.size = bytes.size();
  image.version_line = expected_agent_version_line();
  image.sha256 = content_hash(bytes);
  image.key = key_of(image.sha256);
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
    if (data.size() != size || content_hash(data) != sha256) {
      throw Error(ErrorKind::kEnvironment,
                  fmt::format("'{}' changed on this machine since the job started", path));
    }
    bytes_ = std::make_shared<const std::string>(std::move(data));
  }
  return *bytes_;
}

namespace {

// Shell functions both scripts use. safe DIR: a folder (not a link) of
// this user that nobody else may write to; else it says which and why on
// stderr. A cache others can write is a cache they can fill. The home
// folder may be a link and may be root's (some users' homes are), but no
// one else may write to it either: whoever can rename ~/.cache owns it.
constexpr const char* kSafeDir =
    "u=$(id -u); "
    "perm() { "
    "case $3 in *[2367]?|*[2367]) echo \"$1 may be written by others (mode $3)\" >&2; "
    "return 1;; esac; "
    "if [ \"$2\" != \"$u\" ] && [ \"$2:$4\" != 0:home ]; then "
    "echo \"$1 belongs to uid $2, not to this user\" >&2; return 1; fi; }; "
    "safe() { "
    "if [ -L \"$1\" ] || [ ! -d \"$1\" ]; then echo \"$1 is not a folder\" >&2; return 1; fi; "
    "perm \"$1\" $(stat -c \"%u %a\" \"$1\"); }; "
    "chain() { "
    "if [ ! -d \"$HOME\" ]; then echo \"$HOME is not a folder\" >&2; return 1; fi; "
    "perm \"$HOME\" $(stat -L -c \"%u %a\" \"$HOME\") home && "
    "safe \"$HOME/.cache\" && safe \"$HOME/.cache/dlaunch\" && "
    "safe \"$HOME/.cache/dlaunch/$1\"; }; ";

}  // namespace

std::string start_command(const std::string& agent_path, const AgentImage* image) {
  if (image == nullptr) return "exec " + shell_quote(agent_path);
  // The installed agent first: exec'd as it is when no copy is cached (the
  // head replaces it if its Hello says another version); with a copy there
  // too, it is run only if it says this version. A cached copy is run only
  // from folders of this user's alone, and only if its SHA-256 is the one
  // the head knows: anything else there is taken for absent (the head
  // copies its own over it) or refused (an unsafe folder: exit 96).
  return sh(
      fmt::format("{0}c=\"$HOME/.cache/dlaunch/$1/dlaunch-agent\"; "
                  "if [ -x \"$2\" ]; then "
                  "if [ ! -e \"$c\" ]; then exec \"$2\"; fi; "
                  "if [ \"$(\"$2\" --version 2>/dev/null)\" = \"$3\" ]; then exec \"$2\"; fi; "
                  "fi; "
                  "if [ ! -e \"$c\" ] && [ ! -L \"$c\" ]; then exit {1}; fi; "
                  "chain \"$1\" || exit {2}; "
                  "if [ -L \"$c\" ] || [ ! -f \"$c\" ]; then exit {1}; fi; "
                  "set -- \"$@\" $(stat -c \"%u %a\" \"$c\"); "
                  "if [ \"$5\" != \"$u\" ]; then exit {1}; fi; "
                  "case $6 in *[2367]?|*[2367]) exit {1};; esac; "
                  "h=$(sha256sum < \"$c\" 2>/dev/null) || exit {1}; "
                  "if [ \"$h\" != \"$4  -\" ]; then exit {1}; fi; "
                  "exec \"$c\"",
                  kSafeDir, kNoAgentStatus, kUnsafeCacheStatus),
      "dlaunch-start", {image->key, agent_path, image->version_line, image->sha256});
}

std::string upload_command(const AgentImage& image, const std::string& ok_marker) {
  // The copy: into a new file of a random name (mktemp: O_EXCL, mode 600)
  // in a folder only this user can write, its size and SHA-256 checked
  // before it is ever run, then renamed into place.
  return sh(
      fmt::format("{2}umask 077; d=\"$HOME/.cache/dlaunch/$1\"; "
                  "mkdir -p \"$d\" || exit {0}; chain \"$1\" || exit {3}; "
                  "command -v sha256sum >/dev/null 2>&1 || "
                  "{{ echo \"sha256sum is not installed (coreutils)\" >&2; exit {0}; }}; "
                  "t=$(mktemp \"$d/.upload.XXXXXXXX\") || exit {0}; "
                  "if cat > \"$t\"; then :; else rm -f \"$t\"; exit {0}; fi; "
                  "s=$(wc -c < \"$t\"); "
                  "if [ \"$s\" -ne \"$2\" ]; then rm -f \"$t\"; "
                  "echo \"received $s of $2 bytes\" >&2; exit {0}; fi; "
                  "if [ \"$(sha256sum < \"$t\")\" != \"$5  -\" ]; then rm -f \"$t\"; "
                  "echo \"the copy received is not the agent sent (SHA-256 differs)\" >&2; "
                  "exit {0}; fi; "
                  "chmod 700 \"$t\"; v=$(\"$t\" --version 2>&1); "
                  "if [ \"$v\" = \"$3\" ]; then mv -f \"$t\" \"$d/dlaunch-agent\" || exit {0}; "
                  "else rm -f \"$t\"; echo \"$v\" >&2; exit {1}; fi; "
                  "if [ -n \"$4\" ]; then echo \"$4\"; fi",
                  kUploadBrokenStatus, kUploadNoRunStatus, kSafeDir, kUnsafeCacheStatus),
      "dlaunch-upload",
      {image.key, std::to_string(image.size), image.version_line, ok_marker, image.sha256});
}

std::string unsafe_cache_reason(const std::string& detail) {
  return fmt::format(
      "dlaunch-agent's cache on the node is not safe to use: {} (every folder from the home "
      "folder to ~/.cache/dlaunch/<version> must be this user's and writable by nobody else; "
      "nothing in it was run)",
      detail.empty() ? "no reason given" : detail);
}

std::string cache_path_for_messages(const AgentImage& image) {
  return "~/.cache/dlaunch/" + image.key + "/dlaunch-agent";
}

}  // namespace dlaunch::ssh
