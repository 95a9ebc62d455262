// The file sources of SshConfig::load: the real filesystem and memory.
#include <fnmatch.h>
#include <glob.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <system_error>

#include <openssl/evp.h>

#include "hostfile/input_file.h"
#include "ssh_config/ssh_config.h"
#include "ssh_config/ssh_config_internal.h"

namespace dlaunch::ssh {

std::optional<std::string> MemoryFiles::read(const std::string& path, bool /*private_file*/) const {
  const auto it = files.find(path);
  if (it == files.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> MemoryFiles::glob(const std::string& pattern) const {
  std::vector<std::string> out;
  for (const auto& [path, text] : files) {
    if (::fnmatch(pattern.c_str(), path.c_str(), FNM_PATHNAME | FNM_PERIOD) == 0)
      out.push_back(path);
  }
  return out;
}

namespace {

// Debian's ssh takes a group-writable file when the group's one member is
// the file's owner (a user private group): no other account has it as its
// primary group or is listed in it. Not thread-safe (getpwent): load() runs
// before threads start.
bool private_group(const struct stat& st) {
  const group* gr = ::getgrgid(st.st_gid);      // NOLINT(concurrency-mt-unsafe) see above
  const passwd* owner = ::getpwuid(st.st_uid);  // NOLINT(concurrency-mt-unsafe) see above
  if (gr == nullptr || owner == nullptr) return false;
  const std::string owner_name = owner->pw_name;
  int members = 0;
  bool others = false;
  ::setpwent();                              // NOLINT(concurrency-mt-unsafe) see above
  while (const passwd* pw = ::getpwent()) {  // NOLINT(concurrency-mt-unsafe) see above
    if (pw->pw_gid != st.st_gid) continue;
    ++members;
    others |= pw->pw_uid != st.st_uid;
  }
  ::endpwent();                // NOLINT(concurrency-mt-unsafe) see above
  gr = ::getgrgid(st.st_gid);  // NOLINT(concurrency-mt-unsafe) getpwent may reuse its buffer
  if (gr == nullptr) return false;
  for (char** m = gr->gr_mem; *m != nullptr;
       ++m) {  // NOLINT(cppcoreguidelines-pro-bounds-pointer-arithmetic) a C list
    ++members;
    others |= owner_name != *m;
  }
  return members > 0 && !others;
}

class RealFiles : public FileSource {
 public:
  [[nodiscard]] std::optional<std::string> read(const std::string& path,
                                                bool private_file) const override {
    // Symbolic links are followed, as ssh follows them; what they lead to is
    // checked on the opened file (ssh's fopen then fstat), never by path.
    const OpenedInput in = open_input_file(path, "ssh config");
    if (!in.fd) {
      if (in.error == ENOENT || in.error == ENOTDIR) return std::nullopt;
      throw InputError({path, 0, 0}, "ssh config",
                       in.error == ELOOP ? "too many levels of symbolic links (a loop?)"
                                         : std::generic_category().message(in.error));
    }
    if (S_ISDIR(in.st.st_mode)) return std::nullopt;
    if (private_file &&
        ((in.st.st_uid != 0 && in.st.st_uid != ::getuid()) || (in.st.st_mode & S_IWOTH) != 0 ||
         ((in.st.st_mode & S_IWGRP) != 0 && !private_group(in.st)))) {
      throw InputError({path, 0, 0}, "ssh config",
                       "bad owner or permissions: must be yours or root's and not writable "
                       "by others, nor by a group with other members (ssh refuses it too)",
                       "chmod go-w " + path);
    }
    return read_opened_input(in, path, "ssh config");
  }

  [[nodiscard]] std::vector<std::string> glob(const std::string& pattern) const override {
    glob_t gl{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &gl);
    std::vector<std::string> out;
    if (rc == 0) {
      for (std::size_t i = 0; i < gl.gl_pathc; ++i) out.emplace_back(gl.gl_pathv[i]);
    }
    ::globfree(&gl);
    if (rc != 0 && rc != GLOB_NOMATCH) {
      throw InputError({pattern, 0, 0}, "ssh config", "cannot list the files that match it");
    }
    return out;
  }
};

}  // namespace

const FileSource& real_files() {
  static const RealFiles files;
  return files;
}

namespace detail {

// OpenSSH reads ~/.ssh and expands ~ and %d from the passwd entry, never
// $HOME (ssh.c, misc.c's tilde_expand): in a container, a CI job or under
// `sudo -E` the two differ, and dlaunch must reach what `ssh HOST` reaches.
// Without an entry ssh refuses to run at all; dlaunch falls back to $HOME.
// Looked up once: every connection asks (its default keys), and a password
// database on LDAP answers over the network.
std::string user_home() {
  static const std::string home = [] {
    // NOLINTNEXTLINE(concurrency-mt-unsafe) the first call, before connections start
    if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_dir != nullptr)
      return std::string(pw->pw_dir);
    const char* env = std::getenv("HOME");  // NOLINT(concurrency-mt-unsafe)
    return std::string(env != nullptr && *env != '\0' ? env : "/");
  }();
  return home;
}

std::string connection_hash(const std::string& local_host, const std::string& host,
                            const std::string& port, const std::string& user) {
  const std::string in = local_host + host + port + user;
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned len = 0;
  if (EVP_Digest(in.data(), in.size(), md.data(), &len, EVP_sha1(), nullptr) != 1) return "";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 0xf];
  }
  return out;
}

std::optional<std::string> home_of(const std::string& user) {
  if (const passwd* pw = ::getpwnam(user.c_str()))
    return std::string(pw->pw_dir);  // NOLINT(concurrency-mt-unsafe) resolved before threads start
  return std::nullopt;
}

}  // namespace detail

}  // namespace dlaunch::ssh
