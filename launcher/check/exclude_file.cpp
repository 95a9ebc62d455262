#include "check/exclude_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>

#include "dlaunch/error.h"
#include "dlaunch/process.h"
#include "dlaunch/unique_fd.h"
#include "hostfile/hostfile.h"

namespace dlaunch {
namespace {

std::string lines(const std::vector<ExcludedHost>& hosts) {
  char when[32] = "";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  std::string out;
  for (const auto& [name, reason] : hosts) {
    std::string why = reason;
    for (auto& c : why) {
      if (c == '\n') c = ' ';
    }
    out += name + "  # " + when + " " + why + "\n";
  }
  return out;
}

[[noreturn]] void cannot(const std::string& what, const std::string& path) {
  throw Error(ErrorKind::kEnvironment,
              "--exclude-file: cannot " + what + " '" + path + "': " + std::strerror(errno));
}

// Only a regular file of this user is replaced or added to: never a device
// (a mistyped `--exclude-file /dev/null` would otherwise become a regular
// file of ours), a directory, a pipe or another user's file. What is wrong
// with `path` as one, if anything.
std::optional<std::string> unwritable(const std::string& path, const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return "'" + path + "' is not a regular file";
  if (st.st_uid != ::getuid()) return "'" + path + "' belongs to another user";
  return std::nullopt;
}

void check_writable_kind(const std::string& path, const struct stat& st) {
  if (auto why = unwritable(path, st)) {
    throw Error(ErrorKind::kEnvironment, "--exclude-file: " + *why + "; not written");
  }
}

}  // namespace

void check_exclude_file(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // made at the end if needed
  if (auto why = unwritable(path, st)) {
    throw InputError({"--exclude-file"}, "", *why,
                     "name a file of your own (it is created when missing)");
  }
}

std::vector<std::string> read_exclude_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return {};
    throw InputError({"--exclude-file"}, "", "cannot read '" + path + "': " + std::strerror(errno));
  }
  std::vector<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string name;
    if (words >> name) names.push_back(name);
  }
  return names;
}

void write_exclude_file(const std::string& path, const std::vector<ExcludedHost>& hosts) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    check_writable_kind(path, st);
  } else if (errno != ENOENT) {
    cannot("stat", path);
  }
  std::string tmp = path + ".XXXXXX";        // mkstemp replaces the six X with a unique suffix
  const UniqueFd fd(::mkstemp(tmp.data()));  // 0600, a new file of this user
  if (!fd) cannot("write beside", path);
  const std::string text = lines(hosts);
  if (!write_all(fd.get(), text) || ::fsync(fd.get()) != 0) {
    ::unlink(tmp.c_str());
    cannot("write", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    errno = err;
    cannot("replace", path);
  }
}

void append_exclude_file(const std::string& path, const std::vector<ExcludedHost>& hosts) {
  if (hosts.empty()) return;
  // O_NONBLOCK: a pipe named by mistake must not hold the job at open.
  const UniqueFd fd(::open(
      path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  if (!fd) cannot("open", path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) cannot("stat", path);
  check_writable_kind(path, st);
  if (!write_all(fd.get(), lines(hosts))) cannot("write", path);
}

}  // namespace dlaunch
