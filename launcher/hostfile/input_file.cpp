// read_input_file: bounded reads of the files a user names.
#include "hostfile/input_file.h"

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

std::string hint_for(const std::string& field) {
  return field == "hostfile" ? "check the path; dlaunch never falls back to running locally" : "";
}

}  // namespace

OpenedInput open_input_file(const std::string& path, const std::string& field) {
  OpenedInput in;
  // O_PATH: nothing is opened for reading yet (no FIFO waits, no device acts).
  in.fd = UniqueFd(::open(path.c_str(), O_PATH | O_CLOEXEC));
  if (!in.fd) {
    in.error = errno;
    return in;
  }
  if (::fstat(in.fd.get(), &in.st) != 0) refuse(path, field, errno_text(errno));
  return in;
}

std::string read_opened_input(const OpenedInput& in, const std::string& path,
                              const std::string& field) {
  constexpr std::size_t kLimit = limits::kMaxInputFileBytes;
  const struct stat& st = in.st;
  if (S_ISDIR(st.st_mode)) refuse(path, field, "is a directory, not a file", hint_for(field));
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    refuse(path, field, "is not a regular file or a pipe", "give a file of at most " + mib(kLimit));
  }
  if (S_ISREG(st.st_mode) && static_cast<std::size_t>(st.st_size) > kLimit) {
    refuse(path, field,
           "is " + std::to_string(st.st_size) + " bytes, over the limit of " + mib(kLimit));
  }
  // The inode that was checked, opened for reading through its descriptor:
  // a path swapped since (a flipped symlink) changes nothing here.
  const std::string self = "/proc/self/fd/" + std::to_string(in.fd.get());
  UniqueFd fd(::open(self.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd && errno == ENOENT) fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) refuse(path, field, errno_text(errno), hint_for(field));
  struct stat now {};
  if (::fstat(fd.get(), &now) != 0) refuse(path, field, errno_text(errno));
  if (now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
    // Only without /proc: the path was opened again, and it is another file now.
    refuse(path, field, "was replaced while being opened",
           "try again; if it recurs, find out who replaces it");
  }
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

std::string read_input_file(const std::string& path, const std::string& field) {
  const OpenedInput in = open_input_file(path, field);
  if (!in.fd) {
    const std::string hint = hint_for(field);
    if (in.error == ENOENT) refuse(path, field, "file not found", hint);
    if (in.error == ELOOP) refuse(path, field, "too many levels of symbolic links (a loop?)", hint);
    refuse(path, field, errno_text(in.error), hint);
  }
  return read_opened_input(in, path, field);
}

}  // namespace dlaunch
