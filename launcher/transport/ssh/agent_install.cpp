#include "transport/ssh/agent_install.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
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

namespace {

[[noreturn]] void zlib_failed(const std::string& what, const std::string& path) {
  throw Error(ErrorKind::kEnvironment,
              fmt::format("cannot {} the agent to copy to nodes, '{}'", what, path));
}

// gzip's format (what `gzip -dc` reads on the node), at zlib's best level.
std::string gzip(const std::string& data, const std::string& path) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK) {
    zlib_failed("compress", path);
  }
  std::string out(deflateBound(&zs, data.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) zlib_failed("compress", path);
  return out;
}

// Reads `path` in pieces, giving each to `chunk`.
template <typename Fn>
void read_pieces(const std::string& path, Fn&& chunk) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    throw Error(ErrorKind::kEnvironment,
                fmt::format("cannot read the agent to copy to nodes, '{}': {}", path,
                            std::strerror(errno)));
  }
  std::string buf(std::size_t{64} << 10, '\0');
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw Error(ErrorKind::kEnvironment,
                  fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
    }
    if (n == 0) break;
    chunk(std::string_view(buf.data(), static_cast<std::size_t>(n)));
  }
}

bool ends_with_gz(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

}  // namespace

std::shared_ptr<const AgentImage> AgentImage::load(const std::string& path) {
  auto image = std::make_shared<AgentImage>();
  image->path = path;
  image->path_is_packed_ = ends_with_gz(path);
  Sha256 agent_hash;
  if (!image->path_is_packed_) {
    read_pieces(path, [&](std::string_view piece) {
      agent_hash.add(piece);
      image->size += piece.size();
    });
  } else {
    // The .gz's own hash, and the agent's as it unpacks.
    Sha256 packed_hash;
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 16) != Z_OK) zlib_failed("unpack", path);
    std::string out(std::size_t{256} << 10, '\0');
    int rc = Z_OK;
    try {
      read_pieces(path, [&](std::string_view piece) {
        packed_hash.add(piece);
        zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(piece.data()));
        zs.avail_in = static_cast<uInt>(piece.size());
        while (zs.avail_in > 0 && rc != Z_STREAM_END) {
          zs.next_out = reinterpret_cast<Bytef*>(out.data());
          zs.avail_out = static_cast<uInt>(out.size());
          rc = inflate(&zs, Z_NO_FLUSH);
          if (rc != Z_OK && rc != Z_STREAM_END) zlib_failed("unpack", path);
          const std::size_t n = out.size() - zs.avail_out;
          agent_hash.add(std::string_view(out.data(), n));
          image->size += n;
        }
      });
    } catch (...) {
      inflateEnd(&zs);
      throw;
    }
    inflateEnd(&zs);
    if (rc != Z_STREAM_END) zlib_failed("unpack (cut short)", path);
    image->loaded_packed_sha256_ = packed_hash.hex();
  }
  image->version_line = expected_agent_version_line();
  image->sha256 = agent_hash.hex();
  image->key = key_of(image->sha256);
  return image;
}

AgentImage AgentImage::from_bytes(const std::string& agent) {
  AgentImage image;
  image.size = agent.size();
  image.version_line = expected_agent_version_line();
  image.sha256 = content_hash(agent);
  image.key = key_of(image.sha256);
  image.packed_ = std::make_shared<const std::string>(gzip(agent, "(in memory)"));
  image.packed_sha256_ = content_hash(*image.packed_);
  return image;
}

const std::string& AgentImage::packed() const {
  if (!packed_) {
    std::string data;
    try {
      data = read_input_file(path, "dlaunch-agent");
    } catch (const Error& e) {
      throw Error(ErrorKind::kEnvironment,
                  std::string("cannot read the agent to copy to nodes: ") + e.what());
    }
    const bool same = path_is_packed_ ? content_hash(data) == loaded_packed_sha256_
                                      : data.size() == size && content_hash(data) == sha256;
    if (!same) {
      throw Error(ErrorKind::kEnvironment,
                  fmt::format("'{}' changed on this machine since the job started", path));
    }
    if (!path_is_packed_) data = gzip(data, path);
    packed_sha256_ = content_hash(data);
    packed_ = std::make_shared<const std::string>(std::move(data));
  }
  return *packed_;
}

const std::string& AgentImage::packed_sha256() const {
  (void)packed();
  return packed_sha256_;
}

std::string packed_agent_for(const std::string& agent_path) {
  const std::filesystem::path agent(agent_path);
  const std::filesystem::path candidates[] = {
      agent_path + ".gz",
      agent.parent_path() / ".." / "libexec" / "dlaunch" / (agent.filename().string() + ".gz")};
  for (const auto& c : candidates) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(c, ec)) return c.lexically_normal().string();
  }
  return agent_path;
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
  // in a folder only this user can write, its size and SHA-256 checked,
  // unpacked into a second such file whose size and SHA-256 are checked
  // before it is ever run, then renamed into place.
  const std::string& packed_sha256 = image.packed_sha256();
  return sh(
      fmt::format("{2}umask 077; d=\"$HOME/.cache/dlaunch/$1\"; "
                  "mkdir -p \"$d\" || exit {0}; chain \"$1\" || exit {3}; "
                  "for p in sha256sum gzip; do command -v $p >/dev/null 2>&1 || "
                  "{{ echo \"$p is not installed (coreutils, gzip)\" >&2; exit {0}; }}; done; "
                  "t=$(mktemp \"$d/.upload.XXXXXXXX\") || exit {0}; "
                  "if cat > \"$t\"; then :; else rm -f \"$t\"; exit {0}; fi; "
                  "s=$(wc -c < \"$t\"); "
                  "if [ \"$s\" -ne \"$2\" ]; then rm -f \"$t\"; "
                  "echo \"received $s of $2 bytes\" >&2; exit {0}; fi; "
                  "if [ \"$(sha256sum < \"$t\")\" != \"$5  -\" ]; then rm -f \"$t\"; "
                  "echo \"the copy received is not the agent sent (SHA-256 differs)\" >&2; "
                  "exit {0}; fi; "
                  "a=$(mktemp \"$d/.agent.XXXXXXXX\") || {{ rm -f \"$t\"; exit {0}; }}; "
                  "if gzip -dc < \"$t\" > \"$a\"; then rm -f \"$t\"; else rm -f \"$t\" \"$a\"; "
                  "echo \"gzip could not unpack the agent received\" >&2; exit {0}; fi; "
                  "s=$(wc -c < \"$a\"); "
                  "if [ \"$s\" -ne \"$6\" ]; then rm -f \"$a\"; "
                  "echo \"unpacked $s of $6 bytes\" >&2; exit {0}; fi; "
                  "if [ \"$(sha256sum < \"$a\")\" != \"$7  -\" ]; then rm -f \"$a\"; "
                  "echo \"the agent unpacked is not the agent sent (SHA-256 differs)\" >&2; "
                  "exit {0}; fi; "
                  "chmod 700 \"$a\"; v=$(\"$a\" --version 2>&1); "
                  "if [ \"$v\" = \"$3\" ]; then mv -f \"$a\" \"$d/dlaunch-agent\" || exit {0}; "
                  "else rm -f \"$a\"; echo \"$v\" >&2; exit {1}; fi; "
                  "if [ -n \"$4\" ]; then echo \"$4\"; fi",
                  kUploadBrokenStatus, kUploadNoRunStatus, kSafeDir, kUnsafeCacheStatus),
      "dlaunch-upload",
      {image.key, std::to_string(image.packed().size()), image.version_line, ok_marker,
       packed_sha256, std::to_string(image.size), image.sha256});
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
