// The file sources of SshConfig::load: the real filesystem and memory.
#include <fnmatch.h>
#include <glob.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>

#include "hostfile/input_file.h"
#include "transport/ssh/ssh_config.h"
#include "transport/ssh/ssh_config_internal.h"

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
    if (private_file && ((in.st.st_uid != 0 && in.st.st_uid != ::getuid()) ||
                         (in.st.st_mode & (S_IWGRP | S_IWOTH)) != 0)) {
      throw InputError({path, 0, 0}, "ssh config",
                       "bad owner or permissions: must be yours or root's and not writable "
                       "by group or others (ssh refuses it too)",
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

// As known_hosts.h's home_directory(), without pulling libssh2 into the fuzzer.
std::string user_home() {
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return home;
  if (const passwd* pw = ::getpwuid(::getuid())) return pw->pw_dir;
  return "/";
}

}  // namespace detail

}  // namespace dlaunch::ssh
