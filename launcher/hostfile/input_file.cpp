// read_input_file: bounded reads of the files a user names.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "dlaunch/tunables.h"
#include "dlaunch/unique_fd.h"
#include "hostfile/hostfile.h"

namespace dlaunch {

namespace {

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

[[noreturn]] void refuse(const std::string& path, const std::string& field,
                         const std::string& message, const std::string& hint = {}) {
  throw InputError({path, 0, 0}, field, message, hint);
}

std::string errno_text(int e) { return std::generic_category().message(e); }

}  // namespace

std::string read_input_file(const std::string& path, const std::string& field) {
  constexpr std::size_t kLimit = limits::kMaxInputFileBytes;
  const std::string hint =
      field == "hostfile" ? "check the path; dlaunch never falls back to running locally" : "";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT) refuse(path, field, "file not found", hint);
    if (e == ELOOP) refuse(path, field, "too many levels of symbolic links (a loop?)", hint);
    refuse(path, field, errno_text(e), hint);
  }
  if (S_ISDIR(st.st_mode)) refuse(path, field, "is a directory, not a file", hint);
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    refuse(path, field, "is not a regular file or a pipe", "give a file of at most " + mib(kLimit));
  }
  if (S_ISREG(st.st_mode) && static_cast<std::size_t>(st.st_size) > kLimit) {
    refuse(path, field,
           "is " + std::to_string(st.st_size) + " bytes, over the limit of " + mib(kLimit));
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) refuse(path, field, errno_text(errno), hint);
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) refuse(path, field, "read error: " + errno_text(errno));
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > kLimit) {
      refuse(path, field, "is larger than the limit of " + mib(kLimit));
    }
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace dlaunch
